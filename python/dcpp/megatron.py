"""A drop-in for Megatron-LM's dynamic-CP scheduler (Megatron-Core ``DefaultDynamicCPScheduler``).

Megatron asks its scheduler for ``get_groups_and_subsamples(sample_id_seqlens)`` with the
global batch's ``(sample_id, seq_len)`` pairs and runs, per micro-batch, on every GPU of the
DP x CP mesh the samples listed for it; the GPUs of one CP group list the same samples. This
class answers the same question with a dcpp plan.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from . import _integer, _optional_integer
from . import plan as _plan

__all__ = ["DynamicCPScheduler"]


class DynamicCPScheduler:
    """Plans with dcpp what Megatron-LM's dynamic-CP scheduler plans.

    ``max_seq_len_per_rank``: the token budget per GPU and micro-batch; ``total_gpus``: the
    DP x CP ranks; ``vpp_microbatch_group_size``: with virtual pipeline stages, the micro-batch
    count is made a multiple of it; ``min_cp_size``: the smallest CP group. Every other keyword
    goes to :func:`dcpp.plan` (``policy``, ``estimator``, ``topology``, ``padding_unit``...). The
    estimator defaults to ``"megatron"`` (length^2/cp, Megatron's own cost model); pass a preset
    or a callable for a cost model of your cluster.
    """

    def __init__(
        self,
        max_seq_len_per_rank: int,
        total_gpus: int,
        vpp_microbatch_group_size: Optional[int] = None,
        min_cp_size: int = 1,
        **dcpp_options: Any,
    ):
        for reserved in ("world_size", "max_tokens_per_rank", "min_cp", "microbatch_multiple"):
            if reserved in dcpp_options:
                raise TypeError(
                    f"DynamicCPScheduler: {reserved} is set by the scheduler's own arguments"
                )
        # checked like dcpp.plan's options (int() took "4096" and cut 4096.7 to 4096)
        self.max_seq_len_per_rank = _integer("max_seq_len_per_rank", max_seq_len_per_rank, 64)
        self.total_gpus = _integer("total_gpus", total_gpus, 32)
        self.vpp_microbatch_group_size = _optional_integer(
            "vpp_microbatch_group_size", vpp_microbatch_group_size, 32
        )
        self.min_cp_size = _integer("min_cp_size", min_cp_size, 32)
        self.options = {"estimator": "megatron", **dcpp_options}
        self.last_plan = None  #: the dcpp.Plan of the last call (metrics, JSON, picture)

    def get_groups_and_subsamples(
        self, sample_id_seqlens: Sequence[tuple[int, int]]
    ) -> list[list[list[int]]]:
        """Per micro-batch, per GPU (0 .. total_gpus - 1), the sample ids that GPU runs. The GPUs
        of a CP group list the same ids, in the same order; a GPU idle in a micro-batch lists
        none. Every id appears in exactly one micro-batch, on the GPUs of one group."""
        # ids are integers; lengths go to dcpp.plan as given, which refuses a float (int() cut
        # a length of 100.7 to 100 without a word)
        pairs = [(_integer(f"sample_id_seqlens[{k}] id", i, 64), n)
                 for k, (i, n) in enumerate(sample_id_seqlens)]
        ids = [i for i, _ in pairs]
        if len(set(ids)) != len(ids):
            seen: set[int] = set()
            dup = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
            raise ValueError(f"sample_id_seqlens: sample id {dup} appears twice")
        p = _plan(
            [n for _, n in pairs],
            world_size=self.total_gpus,
            max_tokens_per_rank=self.max_seq_len_per_rank,
            min_cp=self.min_cp_size,
            microbatch_multiple=self.vpp_microbatch_group_size or 1,
            **self.options,
        )
        self.last_plan = p
        schedule: list[list[list[int]]] = []
        for mb in p.microbatches:
            per_gpu: list[list[int]] = [[] for _ in range(self.total_gpus)]
            for g in mb.groups:
                members = [ids[s] for s in g.samples.tolist()]
                for r in g.ranks:
                    per_gpu[r] = list(members)
            schedule.append(per_gpu)
        return schedule
