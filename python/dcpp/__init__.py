"""dcpp: dynamic context parallelism planning for LLM training (the host planner).

``dcpp.plan(lengths, world_size, max_tokens_per_rank, ...)`` plans one step: which samples
run in which micro-batch on which CP group of ranks. The planning runs in C++ without the GIL.
``dcpp.megatron.DynamicCPScheduler`` is a drop-in for Megatron-LM's dynamic-CP scheduler and
``dcpp.verl`` gives each rank its share of a plan. See docs/python.md.
"""

from __future__ import annotations

import collections.abc
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import numpy as np

from . import _dcpp
from ._dcpp import Calibration

__all__ = [
    "Calibration",
    "Group",
    "Microbatch",
    "Plan",
    "plan",
    "presets",
    "policies",
]

__version__ = "0.1.0"

#: The packing policies ``plan(policy=...)`` takes.
policies = ("balanced", "megatron_greedy", "uniform_cp", "static_cp")


def presets() -> list[str]:
    """The transformer presets (``MODEL@DEVICE``) an estimator name may give."""
    return _dcpp.presets()


@dataclass(frozen=True)
class Group:
    """A CP group of one micro-batch: ranks ``first_rank .. first_rank + cp - 1`` run the
    samples ``samples`` (indices into the plan's lengths) together; ``tokens`` per rank
    (padding included) and ``time`` per rank in the estimator's unit."""

    first_rank: int
    cp: int
    samples: np.ndarray
    tokens: int
    time: float

    @property
    def ranks(self) -> range:
        return range(self.first_rank, self.first_rank + self.cp)


@dataclass(frozen=True)
class Microbatch:
    """One micro-batch (round): its groups, its time (the slowest group's) and idle ranks."""

    groups: tuple[Group, ...]
    time: float
    idle_ranks: int


class Plan:
    """A plan made by :func:`plan` or read by :meth:`from_json`."""

    def __init__(self, native: "_dcpp.Plan"):
        self._native = native
        self._microbatches: Optional[tuple[Microbatch, ...]] = None

    # -- what the plan says
    @property
    def microbatches(self) -> tuple[Microbatch, ...]:
        if self._microbatches is None:
            out = []
            for m in range(self._native.microbatch_count):
                groups, time, idle = self._native._groups(m)
                for g in groups:
                    g["samples"].flags.writeable = False  # the plan's own: read, not edited
                out.append(Microbatch(tuple(Group(**g) for g in groups), time, idle))
            self._microbatches = tuple(out)
        return self._microbatches

    def __len__(self) -> int:
        return self._native.microbatch_count

    def __iter__(self):
        return iter(self.microbatches)

    world_size = property(lambda self: self._native.world_size)
    max_tokens_per_rank = property(lambda self: self._native.max_tokens_per_rank)
    policy = property(lambda self: self._native.policy)
    estimator = property(lambda self: self._native.estimator)
    lengths = property(lambda self: self._native._lengths(), doc="sample lengths (int64 array)")
    metrics = property(lambda self: self._native.metrics, doc="step time, bound, efficiency...")
    options = property(lambda self: self._native.options, doc="the options it was planned with")

    def rank_samples(self, microbatch: int) -> list[np.ndarray]:
        """Per rank, the samples it runs in ``microbatch`` (every rank of a CP group lists the
        group's samples; an idle rank an empty array)."""
        microbatch = _integer("microbatch", microbatch, 64)
        out = [np.empty(0, dtype=np.int32) for _ in range(self.world_size)]
        count = len(self)
        if not -count <= microbatch < count:
            raise IndexError(f"microbatch {microbatch} is out of range: the plan has {count}")
        for g in self.microbatches[microbatch].groups:
            for r in g.ranks:
                out[r] = g.samples
        return out

    def route(self, microbatch: int, rank: int, padding_unit: Optional[int] = None) -> dict:
        """Rank ``rank``'s buffer in ``microbatch``, as the router builds it: ``index`` (int64, one
        entry per token of the rank's THD buffer: the token's index in the batch's tokens
        concatenated in sample order, -1 on padding), ``position_ids`` (position inside its
        sample, zigzag order), ``samples``, ``cu_seqlens`` and ``cu_seqlens_padded`` (int32, whole
        sequences, as the THD attention kernels take them), ``first_rank``, ``cp``,
        ``rank_in_group`` and ``idle``. ``tokens[index[index >= 0]]`` gathers the rank's real
        tokens from a flat tensor of the batch."""
        microbatch = _integer("microbatch", microbatch, 64)
        rank = _integer("rank", rank, 32)
        if microbatch < 0:  # the extension's index is unsigned
            raise IndexError(f"microbatch {microbatch} is out of range: the plan has {len(self)}")
        if padding_unit is not None:
            padding_unit = _integer("padding_unit", padding_unit, 64)
        return self._native.route(microbatch, rank, padding_unit)

    # -- formats
    def to_json(self) -> str:
        """The dcpp-plan/1 document (the text ``dcpp-plan --json`` writes for the same input)."""
        return self._native.to_json()

    @staticmethod
    def from_json(text: str) -> "Plan":
        """Reads a dcpp-plan/1 document, a str or UTF-8 bytes (ValueError naming the field when
        malformed)."""
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8")
        if not isinstance(text, str):
            raise TypeError(f"from_json: expected a str or bytes, got {type(text).__name__}")
        return Plan(_dcpp.Plan.from_json(text))

    def svg(self, title: str = "") -> str:
        """A picture of the plan (ranks across, micro-batches down)."""
        if not isinstance(title, str):
            raise TypeError(
                f"svg: title: expected a str, got {type(title).__name__} {_shown(title)}"
            )
        return self._native.svg(title)

    def validate(self) -> None:
        """Raises ValueError unless every sample is placed exactly once, in a legal group, within
        the token budget."""
        self._native.validate()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self._native == other._native

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        m = self.metrics
        return (
            f"<dcpp.Plan {len(self.lengths)} samples on {self.world_size} ranks, "
            f"{len(self)} micro-batches, policy {self.policy}, estimator {self.estimator}, "
            f"efficiency {m['efficiency']:.4f}>"
        )


def _lengths(lengths: Any) -> np.ndarray:
    """The lengths as a contiguous int64 array: no copy when they already are one. A sequence,
    an array or any other ordered iterable of integers (a generator is read once); TypeError for
    a str, bytes, a single value or a set."""
    array_like = isinstance(lengths, np.ndarray) or hasattr(lengths, "__array__")  # torch too
    if isinstance(lengths, (str, bytes)) or not (
        array_like or isinstance(lengths, collections.abc.Iterable)
    ):
        raise TypeError(
            f"lengths: expected a sequence, an array or an iterable of integers, got "
            f"{type(lengths).__name__} {_shown(lengths)}"
        )
    if isinstance(lengths, collections.abc.Mapping):
        # iterating a dict gives its keys: {7: 4000} planned a sample of 7 tokens
        raise TypeError(
            f"lengths: a {type(lengths).__name__} maps ids to lengths and iterates its keys; "
            "give the lengths as a list (sample ids are positions), e.g. list(d.values())"
        )
    if isinstance(lengths, (set, frozenset)):
        # a sample's id is its position, and a set has neither positions nor repeated lengths
        raise TypeError(
            f"lengths: a {type(lengths).__name__} has no order and holds each length once; "
            "sample ids are positions: give a list"
        )
    if not (array_like or isinstance(lengths, collections.abc.Sequence)):
        lengths = list(lengths)  # a generator, a dict's values: read once, in order
    if not array_like:
        # numpy turns [True, 5] into [1, 5]: a bool among integers is refused as an all-bool
        # list is (the element types are listed first, in C: 11 ms per million samples here,
        # where np.asarray takes 19)
        kinds = set(map(type, lengths))
        if bool in kinds or np.bool_ in kinds:
            i = next(i for i, x in enumerate(lengths) if isinstance(x, (bool, np.bool_)))
            raise ValueError(
                f"lengths: sample {i} is {type(lengths[i]).__name__} {lengths[i]}: "
                "expected integers (a token count, not a flag)"
            )
    a = np.asarray(lengths)
    if a.size == 0 and a.dtype.kind == "f":
        a = a.astype(np.int64)  # an empty list; dcpp then says the batch is empty
    if a.ndim != 1:
        raise ValueError(f"lengths: expected one length per sample (1-D), got shape {a.shape}")
    if a.dtype.kind == "b" or a.dtype.kind not in "iu":
        raise ValueError(
            f"lengths: expected integers, got {a.dtype}"
            + (" (lengths are token counts: round them yourself)" if a.dtype.kind == "f" else "")
        )
    if a.dtype.kind == "u" and a.size and int(a.max()) > np.iinfo(np.int64).max:
        i = int(np.argmax(a))
        raise ValueError(f"lengths: sample {i} has length {int(a[i])}, above 2^63 - 1")
    return np.ascontiguousarray(a, dtype=np.int64)


def _shown(value: Any) -> str:
    """``value``'s repr for an error message: past 40 characters, its first 40 and its length (a
    long list or a huge string would fill the message), as the C++ readers quote their input.
    The extension calls it too."""
    shown = repr(value)
    return shown if len(shown) <= 40 else f"{shown[:40]}... ({len(shown)} characters)"


def _integer(name: str, value: Any, bits: int) -> int:
    """``value`` for an option of ``bits`` bits: TypeError unless it is an integer (a bool is
    not), ValueError naming the option outside the range (dcpp then checks its own limits)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__} {_shown(value)}")
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not lo <= int(value) <= hi:
        raise ValueError(f"{name} = {int(value)} must be an integer from {lo} to {hi}")
    return int(value)


def _optional_integer(name: str, value: Any, bits: int) -> Optional[int]:
    """``_integer`` for an option that may be None (None stays None)."""
    return None if value is None else _integer(name, value, bits)


def _number(name: str, value: Any) -> Optional[float]:
    """``value`` for a real-valued option (None stays None): TypeError unless it is a real number
    (a bool is not), ValueError naming the option when it is past a double (dcpp then checks its
    own limits: finite, the sign, what the batch can sum)."""
    return None if value is None else _real(name, value)


def _real(name: str, value: Any) -> float:
    """``_number`` without None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__} {_shown(value)}")
    try:
        return float(value)
    except OverflowError:
        digits = len(str(abs(int(value))))
        raise ValueError(
            f"{name} = an integer of {digits} digits is past the largest double (about 1.8e308)"
        ) from None


Estimator = Union[str, Calibration, Callable[[int, int], float]]


def plan(
    lengths: Union[Sequence[int], np.ndarray],
    world_size: int,
    max_tokens_per_rank: int,
    *,
    policy: str = "balanced",
    estimator: Estimator = "llama3-8b@h100",
    min_cp: int = 1,
    max_cp: int = 0,
    topology: str = "aligned",
    microbatch_multiple: int = 1,
    padding_unit: int = 1,
    extra_microbatches: int = -1,
    microbatch_overhead: Optional[float] = None,
    static_cp: int = 0,
    gpus_per_node: Optional[int] = None,
    intra_node_bandwidth: Optional[float] = None,
    inter_node_bandwidth: Optional[float] = None,
) -> Plan:
    """Plans one step of dynamic context parallelism for the samples ``lengths``.

    The keywords are ``dcpp-plan``'s options with underscores (docs/cli.md). ``estimator`` is a
    preset name (``presets()``), ``"megatron"`` (length^2/cp and the ring's price on the network),
    ``"length2"`` (length^2/cp alone), ``"calibrated:FILE"``, a model from
    :func:`cost_from_config`, a :class:`Calibration`, or a callable ``cost(length, cp) -> seconds`` that is called once per
    distinct length and CP size before planning (a cost table: deterministic, finite, >= 0,
    non-decreasing in length). Raises ValueError with dcpp's message (sample, value, limit) when
    the batch cannot be planned.
    """
    if policy not in policies:
        raise ValueError(f"policy = {_shown(policy)}; use one of {', '.join(policies)}")
    if not isinstance(topology, str):
        raise TypeError(
            f"topology: expected a name (aligned, contiguous or megatron), got "
            f"{type(topology).__name__} {_shown(topology)}"
        )
    return Plan(
        _dcpp._plan(
            _lengths(lengths),
            _integer("world_size", world_size, 32),
            _integer("max_tokens_per_rank", max_tokens_per_rank, 64),
            policy,
            estimator,
            _integer("min_cp", min_cp, 32),
            _integer("max_cp", max_cp, 32),
            topology,
            _integer("microbatch_multiple", microbatch_multiple, 32),
            _integer("padding_unit", padding_unit, 64),
            _integer("extra_microbatches", extra_microbatches, 32),
            _number("microbatch_overhead", microbatch_overhead),
            _integer("static_cp", static_cp, 32),
            _optional_integer("gpus_per_node", gpus_per_node, 32),
            _number("intra_node_bandwidth", intra_node_bandwidth),
            _number("inter_node_bandwidth", inter_node_bandwidth),
        )
    )


def evaluate(
    plan: Any,
    estimator: Estimator = "llama3-8b@h100",
    *,
    topology: str = "contiguous",
    gpus_per_node: Optional[int] = None,
    intra_node_bandwidth: Optional[float] = None,
    inter_node_bandwidth: Optional[float] = None,
) -> dict:
    """The metrics (``estimated_step_time``, ``lower_bound``, ``efficiency``...) of ``plan`` under
    ``estimator`` (any :func:`plan` takes): a :class:`Plan`, a ``dcpp-plan/1`` document as text
    or as a dict (such as Megatron-LM's reference plans in shared/workloads), or a path to one.
    The lower bound is taken over the legal sizes of ``topology`` (contiguous: every block of
    ranks, so that any plan's groups are priced). Plans of one batch judged by one estimator
    compare by their step times."""
    if isinstance(plan, Plan):
        text = plan.to_json()
    elif isinstance(plan, collections.abc.Mapping):
        import json

        text = json.dumps(plan)
    elif isinstance(plan, str) and plan.lstrip().startswith("{"):
        text = plan
    elif isinstance(plan, (str, bytes)) or hasattr(plan, "__fspath__"):
        import pathlib

        text = pathlib.Path(plan).read_text()
    else:
        raise TypeError(
            f"plan: expected a dcpp.Plan, a plan document (str or dict) or a path, got "
            f"{type(plan).__name__} {_shown(plan)}"
        )
    if not isinstance(topology, str):
        raise TypeError(f"topology: expected a name, got {type(topology).__name__}")
    return _dcpp._evaluate(
        text,
        estimator,
        topology,
        _optional_integer("gpus_per_node", gpus_per_node, 32),
        _number("intra_node_bandwidth", intra_node_bandwidth),
        _number("inter_node_bandwidth", inter_node_bandwidth),
    )


__all__.append("evaluate")


def costs(
    estimator: Estimator,
    lengths: Any,
    sizes: Any,
    *,
    gpus_per_node: Optional[int] = None,
    intra_node_bandwidth: Optional[float] = None,
    inter_node_bandwidth: Optional[float] = None,
) -> np.ndarray:
    """``estimator``'s cost of one sample of each length in ``lengths`` on a CP group of each
    size in ``sizes`` (time per GPU, the estimator's unit): an array of shape
    ``(len(lengths), len(sizes))``."""
    lengths = _lengths(lengths)
    sizes_list = [_integer("sizes", c, 32) for c in sizes]
    out = _dcpp._costs(
        estimator,
        lengths.tolist(),
        sizes_list,
        _optional_integer("gpus_per_node", gpus_per_node, 32),
        _number("intra_node_bandwidth", intra_node_bandwidth),
        _number("inter_node_bandwidth", inter_node_bandwidth),
    )
    return np.asarray(out, dtype=np.float64).reshape(len(lengths), len(sizes_list))


__all__.append("costs")


def _calibration_row(i: int, row: Any) -> tuple:
    """Row ``i`` of ``fit_calibration``'s rows as the extension takes it, each field checked by
    name (``rows[i] length``, ``cp``, ``seconds``): TypeError for a wrong type, ValueError for an
    integer past 64 bits, a length below 1, seconds that are no finite time above 0 or a row of
    another shape (the extension then checks cp's range, as dcpp-plan's CSV reader does)."""
    where = f"rows[{i}]"
    shape = f"{where}: expected (length, cp, seconds) or ('microbatch', seconds), got {_shown(row)}"
    if isinstance(row, (str, bytes)):
        raise TypeError(shape)
    try:
        fields = tuple(row)
    except TypeError:
        raise TypeError(shape) from None
    if len(fields) == 2 and isinstance(fields[0], str) and fields[0] == "microbatch":
        return ("microbatch", _seconds(where, fields[1]))
    if len(fields) != 3:
        raise ValueError(shape)
    length = _integer(f"{where} length", fields[0], 64)
    if length < 1:
        raise ValueError(f"{where} length = {length} must be positive")
    return (length, _integer(f"{where} cp", fields[1], 64), _seconds(where, fields[2]))


def _seconds(where: str, value: Any) -> float:
    """A calibration row's measured time: a finite number above 0 (the fit would refuse it, but
    count the rows from 1)."""
    seconds = _real(f"{where} seconds", value)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"{where} seconds = {seconds} must be a finite time > 0")
    return seconds


def fit_calibration(
    rows: Optional[Iterable[Sequence[Any]]] = None,
    csv: Optional[str] = None,
    gpus_per_node: Optional[int] = None,
) -> Calibration:
    """The calibrated estimator fitted to measured ``rows`` (``(length, cp, seconds)`` and
    optionally ``("microbatch", seconds)``) or to a CSV file in dcpp-plan's format (docs/cli.md);
    its ``report`` says how well it fits. Raises ValueError on a fit the rows cannot determine."""
    if (rows is None) == (csv is None):
        raise ValueError("fit_calibration: give rows or csv (one of them)")
    if rows is not None:
        rows = [_calibration_row(i, row) for i, row in enumerate(rows)]
    per_node = _optional_integer("gpus_per_node", gpus_per_node, 32)
    if csv is not None:
        return Calibration.from_csv(str(csv), per_node)
    return Calibration.from_rows(list(rows), per_node)


__all__.append("fit_calibration")


def _config_value(config: Any, names: Sequence[str]) -> Any:
    """The first of ``names`` that ``config`` (an object or a mapping) holds and is not None."""
    for name in names:
        value = config.get(name) if isinstance(config, collections.abc.Mapping) else getattr(
            config, name, None
        )
        if value is not None:
            return value
    return None


def cost_from_config(
    config: Any,
    device: str = "h100",
    *,
    vocab_size: Optional[int] = None,
    name: Optional[str] = None,
) -> dict:
    """A transformer cost model (dcpp's two-tier model: linear layers, causal attention, the
    ring's exposed transfers inside and between nodes) built from a model's own configuration,
    for the ``estimator`` of :func:`plan` and the drop-in schedulers.

    ``config`` is Megatron-Core's ``TransformerConfig`` (``num_layers``, ``hidden_size``,
    ``ffn_hidden_size``, ``num_attention_heads``, ``num_query_groups``, ``kv_channels``,
    ``gated_linear_unit``), a Hugging Face config as verl holds it (``num_hidden_layers``,
    ``hidden_size``, ``intermediate_size``, ``num_attention_heads``, ``num_key_value_heads``,
    ``head_dim``, ``vocab_size``; its MLP is taken as gated, as in Llama and Qwen), or a mapping
    with those names. ``vocab_size`` overrides the config's (``TransformerConfig`` has none:
    without one the output layer is left out of the cost). ``device`` is ``"h100"`` or
    ``"a100"`` (nodes of 8; ``gpus_per_node`` and the bandwidths of :func:`plan` override)."""
    fields = {
        "layers": ("num_layers", "num_hidden_layers"),
        "hidden": ("hidden_size",),
        "heads": ("num_attention_heads",),
        "ffn": ("ffn_hidden_size", "intermediate_size"),
    }
    model: dict = {}
    for key, names in fields.items():
        value = _config_value(config, names)
        if value is None:
            raise ValueError(
                f"cost_from_config: the config has none of {', '.join(names)} ({key})"
            )
        model[key] = _integer(f"cost_from_config: {names[0]}", value, 32)
    kv = _config_value(config, ("num_query_groups", "num_key_value_heads"))
    model["kv_heads"] = model["heads"] if kv is None else _integer("num_query_groups", kv, 32)
    head_dim = _config_value(config, ("kv_channels", "head_dim"))
    model["head_dim"] = 0 if head_dim is None else _integer("kv_channels", head_dim, 32)
    vocab = vocab_size if vocab_size is not None else _config_value(
        config, ("padded_vocab_size", "vocab_size")
    )
    model["vocab"] = 1 if vocab is None else _integer("vocab_size", vocab, 32)
    gated = _config_value(config, ("gated_linear_unit",))
    model["gated_mlp"] = True if gated is None else bool(gated)
    if not isinstance(device, str):
        raise TypeError(f"device: expected a name, got {type(device).__name__} {_shown(device)}")
    model["device"] = device
    model["name"] = name if name is not None else (
        f"model(layers={model['layers']},hidden={model['hidden']})@{device}"
    )
    return model


__all__.append("cost_from_config")

from . import megatron, verl  # noqa: E402  (the helpers build on the names above)
