"""Stand-in for verl/utils/dynamic_cp_scheduler.py (verl main, after its PR 6555): the scheduler
class comes from Megatron-Core, built with keywords; per micro-batch each rank's fields."""


def get_megatron_dynamic_cp_scheduler_cls():
    from megatron.core.datasets.data_schedule import DefaultDynamicCPScheduler

    return DefaultDynamicCPScheduler


def _padding_mask(seq_lens, cp_size, cp_rank, tp_size):
    """True on padding rows of the local shard: each sample padded to tp * cp * 2 (tp on one
    GPU), zigzag halves cp_rank and 2 cp - 1 - cp_rank."""
    align = tp_size * cp_size * 2 if cp_size > 1 else tp_size
    mask = []
    for n in seq_lens:
        padded = -(-n // align) * align
        if cp_size == 1:
            mask += [i >= n for i in range(padded)]
            continue
        half = padded // (2 * cp_size)
        front = range(cp_rank * half, (cp_rank + 1) * half)
        back = range(padded - (cp_rank + 1) * half, padded - cp_rank * half)
        mask += [i >= n for i in front] + [i >= n for i in back]
    return mask


def schedule(seq_lens, *, max_seqlen_per_dp_cp_rank, dp_size, cp_size, tp_size, rank):
    """Rank `rank`'s micro-batches: dicts of local_cp_size, sample ids, leader flag, padding
    mask and local token count; raises on the plans verl refuses."""
    cls = get_megatron_dynamic_cp_scheduler_cls()
    scheduler = cls(
        max_seqlen_per_dp_cp_rank=max_seqlen_per_dp_cp_rank,
        cp_size=cp_size,
        dp_size=dp_size,
        microbatch_group_size_per_vp_stage=None,
    )
    groups = scheduler.get_groups_and_subsamples(list(enumerate(seq_lens)))
    assigned = {i for per_gpu in groups for ids in per_gpu for i in ids}
    if assigned != set(range(len(seq_lens))):
        raise RuntimeError("the schedule lost or invented samples")
    out = []
    for per_gpu in groups:
        if len(per_gpu) != dp_size * cp_size or any(not ids for ids in per_gpu):
            raise RuntimeError("an empty rank assignment")
        ids = per_gpu[rank]
        members = [r for r, other in enumerate(per_gpu) if ids[0] in other]
        if members != list(range(members[0], members[0] + len(members))):
            raise RuntimeError(f"group members must be contiguous, got {members}")
        if members[0] % len(members) != 0:
            raise RuntimeError(f"group {members} is not aligned to its size")
        if any(per_gpu[m] != ids for m in members):
            raise RuntimeError(f"group {members} does not share one list")
        mask = _padding_mask([seq_lens[i] for i in ids], len(members), rank - members[0],
                             tp_size)
        out.append({
            "local_cp_size": len(members),
            "sample_ids": list(ids),
            "leader": rank == members[0],
            "padding_mask": mask,
            "local_num_tokens": len(mask) - sum(mask),
        })
    return out
