"""Each rank's share of a dcpp plan, in the shape verl's dynamic-CP micro-batches take.

verl gives every rank, per micro-batch, the samples it runs, its local CP size (the size of the
group it is in), whether it leads the group, and how many real tokens it holds. ``rank_schedule``
derives exactly that from a plan, so a verl worker can build its micro-batches from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RankMicrobatch", "rank_schedule"]


@dataclass(frozen=True)
class RankMicrobatch:
    """One rank's part of one micro-batch."""

    microbatch: int
    sample_ids: list[int]  #: the samples of its CP group (indices into the plan's lengths)
    local_cp_size: int  #: ranks in its CP group (0: idle in this micro-batch)
    first_rank: int  #: the group's first rank (-1: idle)
    rank_in_group: int  #: its position in the group (-1: idle)
    is_leader: bool  #: first rank of its group
    local_num_tokens: int  #: real tokens it holds (its zigzag chunks, padding excluded)
    index: np.ndarray  #: per token of its buffer, the batch token index (-1: padding)


def rank_schedule(plan, rank: int) -> list[RankMicrobatch]:
    """Per micro-batch of ``plan`` (a :class:`dcpp.Plan`), what rank ``rank`` runs."""
    out = []
    for m in range(len(plan)):
        r = plan.route(m, rank)
        index = r["index"]
        out.append(
            RankMicrobatch(
                microbatch=m,
                sample_ids=r["samples"].tolist(),
                local_cp_size=int(r["cp"]),
                first_rank=int(r["first_rank"]),
                rank_in_group=int(r["rank_in_group"]),
                is_leader=(not r["idle"]) and int(r["rank_in_group"]) == 0,
                local_num_tokens=int(np.count_nonzero(index >= 0)),
                index=index,
            )
        )
    return out
