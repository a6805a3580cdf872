"""dcpp in Megatron-LM: a drop-in for its dynamic-CP scheduler, and for main's hybrid-CP one.

Megatron-LM ``dev`` (``megatron/core/datasets/data_schedule.py``) builds the class registered as
``scheduler_map['default_dynamic_cp']`` positionally as ``(max_seqlen_per_dp_cp_rank, cp_size,
dp_size, microbatch_group_size_per_vp_stage)`` with the keywords ``max_num_seqs`` and
``min_cp_size``, and calls its ``run(...)``, which asks ``get_groups_and_subsamples`` for, per
micro-batch, one list of sample ids per GPU of the DP x CP mesh. verl builds the same class with
keywords. :class:`DynamicCPScheduler` takes both call shapes; where ``megatron.core`` is
importable it is a subclass of Megatron's ``DefaultDynamicCPScheduler`` (``run`` and the rest
inherited), and only the planning is dcpp's. ``install()`` registers it in one line.

Megatron-LM ``main`` has the hybrid-CP scheduler instead: :class:`HybridCPScheduler` has its shape
(``BalancedCPScheduler(max_seq_len_per_rank, dp_cp_group)``, ``get_groups_and_subsamples(
sample_id_seqlens, config) -> (groups, sample_id_groups)``).

Plans are made in the ``megatron`` topology: only the CP group sizes Megatron creates (powers of
two below the largest one <= N, and all N GPUs), aligned, and every GPU runs a sample in every
micro-batch (its consumers index the first id of every list). See docs/python.md.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Optional, Sequence

import numpy as np

from . import _dcpp, _integer, _optional_integer, _shown, cost_from_config
from . import plan as _plan

__all__ = ["DynamicCPScheduler", "HybridCPScheduler", "install", "scheduler_class"]

#: Where Megatron-LM keeps what ``install`` replaces.
DEV_MODULE = "megatron.core.datasets.data_schedule"
HYBRID_MODULE = "megatron.core.pipeline_parallel.hybrid_cp_schedule"

#: The cost the drop-ins plan with when given neither an estimator nor a model config: dcpp's
#: two-tier transformer model (linear layers, causal attention, the ring's exposed transfers on
#: NVLink inside nodes of 8 and InfiniBand between them) of a Llama-3-8B-shaped model on H100s.
#: The ``megatron`` estimator (length^2/cp and the ring) leaves the linear layers out, and its
#: plans lose to Megatron's own under a two-tier cost on some batches (docs/python.md).
DEFAULT_ESTIMATOR = "llama3-8b@h100"

#: The options the scheduler's own arguments set; passing them again is an error.
_RESERVED = ("world_size", "max_tokens_per_rank", "min_cp", "microbatch_multiple", "topology")


def _positive(name: str, value: Any, bits: int = 32) -> int:
    n = _integer(name, value, bits)
    if n < 1:
        raise ValueError(f"{name} = {n} must be >= 1")
    return n


def _estimator_options(dcpp_options: dict) -> dict:
    for reserved in _RESERVED:
        if reserved in dcpp_options:
            raise TypeError(
                f"{reserved} is set by the scheduler's own arguments (the megatron topology, "
                "Megatron's budget, its CP sizes and its VPP multiple)"
            )
    return dict(dcpp_options)


def _pairs(sample_id_seqlens: Sequence[Any]) -> tuple[list[int], np.ndarray]:
    """The ids and lengths of Megatron's ``(sample_id, seq_len)`` pairs, each checked: ids are
    integers (or 0-d integer tensors), once each; lengths go to dcpp, which refuses a float."""
    ids: list[int] = []
    lengths: list[Any] = []
    for k, pair in enumerate(sample_id_seqlens):
        try:
            i, n = pair
        except (TypeError, ValueError):
            raise TypeError(
                f"sample_id_seqlens[{k}]: expected a (sample_id, seq_len) pair, got {_shown(pair)}"
            ) from None
        if not isinstance(i, (int, np.integer)) and hasattr(i, "__index__"):
            i = i.__index__()  # a 0-d integer tensor
        if not isinstance(n, (int, np.integer)) and hasattr(n, "__index__"):
            n = n.__index__()
        ids.append(_integer(f"sample_id_seqlens[{k}] id", i, 64))
        lengths.append(n)
    if len(set(ids)) != len(ids):
        seen: set[int] = set()
        dup = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
        raise ValueError(f"sample_id_seqlens: sample id {dup} appears twice")
    return ids, lengths  # type: ignore[return-value]


def _per_gpu(plan: Any, ids: Sequence[int], world: int) -> list[list[list[int]]]:
    """Per micro-batch, per GPU, the ids it runs (the GPUs of a group list the same ids in the
    same order, each its own list)."""
    out: list[list[list[int]]] = []
    for m in range(len(plan)):
        groups, _, _ = plan._native._groups(m)
        per_gpu: list[Any] = [None] * world
        for g in groups:
            members = [ids[s] for s in g["samples"].tolist()]
            first, cp = g["first_rank"], g["cp"]
            per_gpu[first] = members
            for r in range(first + 1, first + cp):
                per_gpu[r] = members.copy()
        out.append(per_gpu)
    return out


class _Planning:
    """dcpp's planning under Megatron's scheduler surface (mixed into the drop-in class)."""

    def __init__(
        self,
        max_seqlen_per_dp_cp_rank: int,
        cp_size: int,
        dp_size: int,
        microbatch_group_size_per_vp_stage: Optional[int] = None,
        max_num_seqs: Optional[int] = None,
        *,
        min_cp_size: int = 1,
        estimator: Any = None,
        **dcpp_options: Any,
    ):
        budget = _positive("max_seqlen_per_dp_cp_rank", max_seqlen_per_dp_cp_rank, 64)
        cp = _positive("cp_size", cp_size)
        dp = _positive("dp_size", dp_size)
        vpp = _optional_integer(
            "microbatch_group_size_per_vp_stage", microbatch_group_size_per_vp_stage, 32
        )
        if vpp is not None and vpp < 1:
            raise ValueError(f"microbatch_group_size_per_vp_stage = {vpp} must be >= 1 or None")
        seqs = _optional_integer("max_num_seqs", max_num_seqs, 32)
        if seqs is not None and seqs < 1:
            raise ValueError(f"max_num_seqs = {seqs} must be >= 1 or None")
        min_cp = _positive("min_cp_size", min_cp_size)
        options = _estimator_options(dcpp_options)
        base = type(self).__mro__[2]
        if base is not object:  # Megatron's own class: its attributes, for the inherited run()
            base.__init__(self, budget, cp, dp, vpp, max_num_seqs=seqs, min_cp_size=min_cp)
        self.max_seqlen_per_dp_cp_rank = budget
        self.max_seq_len_per_rank = budget
        self.cp_size = cp
        self.dp_size = dp
        self.microbatch_group_size_per_vp_stage = vpp
        self.max_num_seqs = seqs  #: accepted; not applied, as by Megatron's dynamic-CP scheduler
        self.min_cp_size = min_cp
        self.total_hdp_gpus = cp * dp
        self.is_dynamic_cp = True
        self._estimator_given = estimator is not None
        self.estimator = DEFAULT_ESTIMATOR if estimator is None else estimator
        self.options = options
        self.last_plan = None  #: the dcpp.Plan of the last call (metrics, JSON, picture)

    def plan(self, lengths: Any) -> Any:
        """The dcpp plan of ``lengths`` (sample ids are positions) under this scheduler's
        settings: the megatron topology, Megatron's budget and minimum CP size, the VPP multiple."""
        vpp = self.microbatch_group_size_per_vp_stage
        return _plan(
            lengths,
            world_size=self.total_hdp_gpus,
            max_tokens_per_rank=self.max_seqlen_per_dp_cp_rank,
            min_cp=self.min_cp_size,
            microbatch_multiple=vpp if vpp else 1,
            topology="megatron",
            estimator=self.estimator,
            **self.options,
        )

    def get_groups_and_subsamples(self, sample_id_seqlens: Sequence[Any]) -> list:
        """Per micro-batch, per GPU (0 .. dp_size x cp_size - 1), the sample ids that GPU runs.
        Every GPU lists at least one id in every micro-batch; the GPUs of a CP group are
        consecutive, as many as a size Megatron creates, at a multiple of it, and list the same
        ids in the same order; every id appears in exactly one micro-batch, on one group."""
        ids, lengths = _pairs(sample_id_seqlens)
        p = self.plan(lengths)
        self.last_plan = p
        return _per_gpu(p, ids, self.total_hdp_gpus)

    def run(self, data_iterator, num_microbatches, dp_group, tp_group, pp_group, dp_cp_group,
            dev, config):  # noqa: D401 - Megatron's signature
        """Megatron's ``run``: with no estimator given, the cost model is first built from the
        model's ``config`` (:func:`dcpp.cost_from_config`) where it holds the model's shape."""
        if not self._estimator_given:
            try:
                self.estimator = cost_from_config(config)
                self._estimator_given = True
            except (TypeError, ValueError):
                pass  # a config without the model's shape: keep the default
        base = type(self).__mro__[2]
        if base is object:
            raise RuntimeError(
                "DynamicCPScheduler.run is Megatron-LM's (megatron.core is not importable "
                "here): call get_groups_and_subsamples, or install megatron-core"
            )
        return base.run(self, data_iterator, num_microbatches, dp_group, tp_group, pp_group,
                        dp_cp_group, dev, config)


_classes: dict = {}


def scheduler_class(base: Optional[type] = None) -> type:
    """The drop-in class over ``base`` (Megatron's ``DefaultDynamicCPScheduler``, found when
    ``None`` and ``megatron.core`` is importable, else none: a class of its own)."""
    if base is None:
        try:
            base = importlib.import_module(DEV_MODULE).DefaultDynamicCPScheduler
        except (ImportError, AttributeError):
            base = object
    if base not in _classes:
        cls = type(
            "DynamicCPScheduler",
            (_Planning,) if base is object else (_Planning, base),
            {"__module__": __name__, "__doc__": _SCHEDULER_DOC},
        )
        _classes[base] = cls
    return _classes[base]


_SCHEDULER_DOC = """Megatron-LM's dynamic-CP scheduler, planned by dcpp.

``DynamicCPScheduler(max_seqlen_per_dp_cp_rank, cp_size, dp_size,
microbatch_group_size_per_vp_stage=None, max_num_seqs=None, *, min_cp_size=1, estimator=None,
**dcpp_options)``: Megatron-LM dev's constructor (positional or keywords, as Megatron and verl
call it). ``estimator`` defaults to ``DEFAULT_ESTIMATOR`` (dcpp's two-tier transformer cost of a
Llama-3-8B-shaped model on H100 nodes of 8), or the model's own cost when ``run`` receives its
config; pass
:func:`dcpp.cost_from_config`, a preset, a calibration or a callable for your cluster. Other
keywords go to :func:`dcpp.plan` (``policy``, ``gpus_per_node``, bandwidths, ``padding_unit``...).
"""


def __getattr__(name: str) -> Any:
    """``DynamicCPScheduler``: the drop-in, a subclass of Megatron's class where
    ``megatron.core`` is importable, made on first use (importing dcpp imports no Megatron)."""
    if name == "DynamicCPScheduler":
        return scheduler_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def install(module: Any = None) -> type:
    """Registers dcpp's scheduler in Megatron-LM: ``scheduler_map['default_dynamic_cp']`` (dev)
    becomes :class:`DynamicCPScheduler` built over Megatron's own class, and where the hybrid-CP
    scheduler of ``main`` is there, its ``BalancedCPScheduler`` becomes :class:`HybridCPScheduler`.
    ``module``: the data-schedule module (default: imported by name). Returns the class now in
    the map (dev) or the hybrid one (main). Raises ImportError when neither is found."""
    if module is None:
        module = importlib.import_module(DEV_MODULE)
    installed = None
    if hasattr(module, "DefaultDynamicCPScheduler") and hasattr(module, "scheduler_map"):
        installed = scheduler_class(module.DefaultDynamicCPScheduler)
        module.scheduler_map["default_dynamic_cp"] = installed
    if hasattr(module, "BalancedCPScheduler"):
        module.BalancedCPScheduler = HybridCPScheduler
        hybrid = sys.modules.get(HYBRID_MODULE)
        if hybrid is not None and hasattr(hybrid, "BalancedCPScheduler"):
            hybrid.BalancedCPScheduler = HybridCPScheduler
        installed = installed or HybridCPScheduler
    if installed is None:
        raise ImportError(
            f"{module.__name__} has neither scheduler_map with DefaultDynamicCPScheduler "
            "(Megatron-LM dev) nor BalancedCPScheduler (Megatron-LM main)"
        )
    return installed


class HybridCPScheduler:
    """Megatron-LM main's hybrid-CP scheduler (``BalancedCPScheduler``), planned by dcpp.

    ``HybridCPScheduler(max_seq_len_per_rank, dp_cp_group, *, estimator=None, **dcpp_options)``;
    ``dp_cp_group`` is the DP x CP process group (its ``size()`` is read) or the GPU count.
    ``get_groups_and_subsamples(sample_id_seqlens, config)`` returns ``(groups,
    sample_id_groups)``: per micro-batch, per GPU, the lengths and the ids it runs. With no
    estimator given, the cost is built from ``config`` where it holds the model's shape."""

    def __init__(self, max_seq_len_per_rank: int, dp_cp_group: Any, *, estimator: Any = None,
                 **dcpp_options: Any):
        self.max_seq_len_per_rank = _positive("max_seq_len_per_rank", max_seq_len_per_rank, 64)
        gpus = dp_cp_group.size() if hasattr(dp_cp_group, "size") else dp_cp_group
        self.total_hdp_gpus = _positive("dp_cp_group size", gpus)
        self.estimator = estimator
        self.options = _estimator_options(dcpp_options)
        self.last_plan = None

    def get_groups_and_subsamples(self, sample_id_seqlens: Sequence[Any], config: Any = None):
        ids, lengths = _pairs(sample_id_seqlens)
        estimator = self.estimator
        if estimator is None:
            try:
                estimator = cost_from_config(config)
            except (TypeError, ValueError):
                estimator = DEFAULT_ESTIMATOR
        p = _plan(
            lengths,
            world_size=self.total_hdp_gpus,
            max_tokens_per_rank=self.max_seq_len_per_rank,
            topology="megatron",
            estimator=estimator,
            **self.options,
        )
        self.last_plan = p
        sample_id_groups = _per_gpu(p, ids, self.total_hdp_gpus)
        length_of = dict(zip(ids, (int(n) for n in p.lengths)))
        groups = [[[length_of[i] for i in gpu] for gpu in mb] for mb in sample_id_groups]
        return groups, sample_id_groups
