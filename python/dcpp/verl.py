"""dcpp in verl: the scheduler verl asks Megatron-Core for, and each rank's share of a plan.

Since its PR 6555 verl's ``verl/utils/dynamic_cp_scheduler.py`` takes the scheduler class from
``get_megatron_dynamic_cp_scheduler_cls()`` (Megatron-Core's ``DefaultDynamicCPScheduler``),
builds it with keywords and calls ``get_groups_and_subsamples(list(enumerate(seq_lens)))``.
``install()`` makes that function return :class:`dcpp.megatron.DynamicCPScheduler`.

Per micro-batch verl then builds, on every rank, its local CP size (the GPUs listing its group's
first id), the sample ids, whether it leads the group, a boolean padding mask of its local THD
shard and its count of real tokens; each sample is padded to a multiple of ``tp * cp * 2``
(``tp`` alone on one GPU), split zigzag. :func:`rank_schedule` gives exactly those fields, from a
dcpp plan or from the per-GPU lists the scheduler returns, and also the contiguous layout (each
rank one run of the sample) with a minimum of local rows, which some models need.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from . import _integer, _shown
from .megatron import scheduler_class

__all__ = ["DynamicCPScheduler", "RankMicrobatch", "SCHEDULER_MODULE", "install", "rank_schedule"]

#: verl's module whose ``get_megatron_dynamic_cp_scheduler_cls`` ``install`` replaces.
SCHEDULER_MODULE = "verl.utils.dynamic_cp_scheduler"


def install(module: Any = None) -> type:
    """Makes verl's ``get_megatron_dynamic_cp_scheduler_cls()`` return dcpp's drop-in (over
    Megatron-Core's class where that is importable). ``module``: verl's scheduler module (default:
    imported by name). Returns the class."""
    if module is None:
        module = importlib.import_module(SCHEDULER_MODULE)
    if not hasattr(module, "get_megatron_dynamic_cp_scheduler_cls"):
        raise ImportError(
            f"{module.__name__} has no get_megatron_dynamic_cp_scheduler_cls (verl before its "
            "PR 6555 plans dynamic CP itself)"
        )
    cls = scheduler_class()

    def get_megatron_dynamic_cp_scheduler_cls() -> type:
        """dcpp's drop-in for Megatron-Core's dynamic-CP scheduler (installed by dcpp.verl)."""
        return cls

    module.get_megatron_dynamic_cp_scheduler_cls = get_megatron_dynamic_cp_scheduler_cls
    return cls


@dataclass(frozen=True)
class RankMicrobatch:
    """One rank's part of one micro-batch, as verl builds it."""

    microbatch: int
    sample_ids: list[int]  #: the samples of its CP group, in the group's order
    local_cp_size: int  #: GPUs in its CP group
    first_rank: int  #: the group's first GPU
    rank_in_group: int  #: its position in the group (its CP rank)
    is_leader: bool  #: first GPU of its group (verl collects the group's outputs there)
    #: per row of its local THD shard (samples in order, each padded), True on padding
    padding_mask: np.ndarray
    local_num_tokens: int  #: real tokens it holds (``padding_mask``'s False rows)
    #: per row, the token's position in its sample (-1 on padding)
    positions: np.ndarray
    #: per row, the token's index in the batch's tokens concatenated in sample order (-1: padding)
    index: np.ndarray


def _alignment(cp: int, tp: int) -> int:
    return tp * cp * 2 if cp > 1 else tp


def _local_rows(length: int, cp: int, rank: int, tp: int, layout: str, min_local_rows: int):
    """One sample's rows on CP rank ``rank`` of ``cp``: positions in the sample (-1: padding)."""
    align = _alignment(cp, tp)
    padded = -(-length // align) * align
    if layout == "contiguous" and min_local_rows:
        # each rank holds at least `min_local_rows` rows, in whole alignment units
        padded = max(padded, -(-(min_local_rows * cp) // align) * align)
    local = padded // cp
    if cp == 1:
        rows = np.arange(local, dtype=np.int64)
    elif layout == "zigzag":
        half = padded // (2 * cp)
        front = np.arange(rank * half, (rank + 1) * half, dtype=np.int64)
        back = np.arange(padded - (rank + 1) * half, padded - rank * half, dtype=np.int64)
        rows = np.concatenate([front, back])
    else:
        rows = np.arange(rank * local, (rank + 1) * local, dtype=np.int64)
    return np.where(rows < length, rows, -1)


def rank_schedule(
    plan: Any,
    rank: int,
    *,
    seq_lens: Optional[Sequence[int]] = None,
    tp_size: int = 1,
    layout: str = "zigzag",
    min_local_rows: int = 0,
) -> list[RankMicrobatch]:
    """Per micro-batch, what GPU ``rank`` runs, with verl's fields.

    ``plan``: a :class:`dcpp.Plan`, or the per-GPU lists ``get_groups_and_subsamples`` returned
    (then ``seq_lens``, indexed by sample id, gives the lengths). ``tp_size``: tensor-parallel
    size; samples pad to a multiple of ``tp_size * cp * 2`` (``tp_size`` on one GPU).
    ``layout``: ``"zigzag"`` (rank r holds chunks r and 2 cp - 1 - r of 2 cp) or ``"contiguous"``
    (rank r holds the r-th of cp runs; ``min_local_rows`` pads each sample so that every rank
    holds at least that many rows). Raises ValueError when a GPU runs no sample, or a group is
    not contiguous, not aligned or not listing the same ids, as verl itself does."""
    rank = _integer("rank", rank, 32)
    tp = _integer("tp_size", tp_size, 32)
    if tp < 1:
        raise ValueError(f"tp_size = {tp} must be >= 1")
    if layout not in ("zigzag", "contiguous"):
        raise ValueError(f"layout = {_shown(layout)}; use 'zigzag' or 'contiguous'")
    min_rows = _integer("min_local_rows", min_local_rows, 32)
    if min_rows < 0:
        raise ValueError(f"min_local_rows = {min_rows} must be >= 0")
    if hasattr(plan, "rank_samples"):
        lengths = [int(n) for n in plan.lengths]
        schedule = [[g.tolist() for g in plan.rank_samples(m)] for m in range(len(plan))]
    else:
        if seq_lens is None:
            raise ValueError("rank_schedule: per-GPU lists need seq_lens (the length of each id)")
        lengths = [int(n) for n in seq_lens]
        schedule = plan
    if not schedule or not 0 <= rank < len(schedule[0]):
        raise ValueError(f"rank = {rank} is outside the plan's GPUs")
    starts = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
    out = []
    for m, per_gpu in enumerate(schedule):
        mine = list(per_gpu[rank])
        if not mine:
            raise ValueError(f"micro-batch {m}: GPU {rank} runs no sample")
        members = [r for r, ids in enumerate(per_gpu) if mine[0] in ids]
        cp = len(members)
        if members != list(range(members[0], members[0] + cp)):
            raise ValueError(f"micro-batch {m}: the group {members} is not contiguous")
        if members[0] % cp != 0:
            raise ValueError(f"micro-batch {m}: the group {members} is not aligned to its size")
        if any(list(per_gpu[r]) != mine for r in members):
            raise ValueError(f"micro-batch {m}: the group {members} does not list the same ids")
        cp_rank = rank - members[0]
        positions = [
            _local_rows(lengths[s], cp, cp_rank, tp, layout, min_rows) for s in mine
        ]
        pos = np.concatenate(positions) if positions else np.empty(0, np.int64)
        base = np.concatenate(
            [np.full(len(p), starts[s], dtype=np.int64) for s, p in zip(mine, positions)]
        )
        index = np.where(pos >= 0, base + pos, -1)
        mask = pos < 0
        out.append(
            RankMicrobatch(
                microbatch=m,
                sample_ids=mine,
                local_cp_size=cp,
                first_rank=members[0],
                rank_in_group=cp_rank,
                is_leader=cp_rank == 0,
                padding_mask=mask,
                local_num_tokens=int(mask.size - np.count_nonzero(mask)),
                positions=pos,
                index=index,
            )
        )
    return out


def __getattr__(name: str) -> Any:
    """``DynamicCPScheduler``: :class:`dcpp.megatron.DynamicCPScheduler`, made on first use."""
    if name == "DynamicCPScheduler":
        return scheduler_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
