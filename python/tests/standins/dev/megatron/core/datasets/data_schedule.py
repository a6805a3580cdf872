"""Stand-in for megatron/core/datasets/data_schedule.py (Megatron-LM dev): the scheduler classes'
call shapes, scheduler_map, wrap_data_iterator's construction, and a run() that consumes the
schedule as Megatron's does (per GPU, the first id of its list; the local CP size is the count of
GPUs listing it; the group is looked up by that size among the created ones)."""

from megatron.core import parallel_state


class BasePackingScheduler:
    def __init__(self, max_seqlen_per_dp_cp_rank, cp_size, dp_size,
                 microbatch_group_size_per_vp_stage, max_num_seqs=None):
        self.max_seqlen_per_dp_cp_rank = max_seqlen_per_dp_cp_rank
        self.cp_size = cp_size
        self.dp_size = dp_size
        self.microbatch_group_size_per_vp_stage = microbatch_group_size_per_vp_stage
        self.max_num_seqs = max_num_seqs

    def get_groups_and_subsamples(self, sample_id_seqlens):
        raise NotImplementedError

    def run(self, data_iterator, num_microbatches, dp_group, tp_group, pp_group, dp_cp_group,
            dev, config):
        """Schedules the lengths the iterator yields and consumes the schedule on every GPU:
        returns (per micro-batch, per GPU, (local_cp_size, ids)), the micro-batch count, and the
        token sums Megatron reports."""
        seqlens = list(next(data_iterator))
        pairs = list(enumerate(seqlens))
        groups = self.get_groups_and_subsamples(pairs)
        world = dp_cp_group.size()
        vpp = self.microbatch_group_size_per_vp_stage
        if vpp is not None and vpp > 1:
            assert len(groups) % vpp == 0, "micro-batch count is not a multiple of the VPP size"
        seen = set()
        consumed = []
        for per_gpu in groups:
            assert len(per_gpu) == world
            row = []
            for rank in range(world):
                ids = per_gpu[rank]
                first = ids[0]  # IndexError on a GPU with nothing to run, as in Megatron
                local_cp_size = sum(1 for other in per_gpu if first in other)
                members = parallel_state.group_ranks(
                    world, local_cp_size, rank, getattr(self, "min_cp_size", 1))
                for member in members:
                    assert per_gpu[member] == ids, "the GPUs of a group list different ids"
                row.append((local_cp_size, list(ids)))
                if rank == members[0]:
                    budget = sum(seqlens[i] for i in ids) / local_cp_size
                    assert budget <= self.max_seqlen_per_dp_cp_rank, "over the per-GPU budget"
                    for i in ids:
                        assert i not in seen, f"sample {i} scheduled twice"
                        seen.add(i)
            consumed.append(row)
        assert seen == set(range(len(seqlens))), "a sample was dropped"
        return consumed, len(groups), float(sum(seqlens)), float(sum(n * n for n in seqlens))


class DpBalancedScheduler(BasePackingScheduler):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.is_dynamic_cp = False


class DefaultDynamicCPScheduler(DpBalancedScheduler):
    """The stand-in's own plan: every sample alone on the group of all GPUs."""

    def __init__(self, *args, min_cp_size=1, **kwargs):
        super().__init__(*args, **kwargs)
        self.is_dynamic_cp = True
        self.total_hdp_gpus = self.dp_size * self.cp_size
        self.min_cp_size = min_cp_size

    def get_groups_and_subsamples(self, sample_id_seqlens):
        return [[[i] for _ in range(self.total_hdp_gpus)] for i, _ in sample_id_seqlens]


scheduler_map = {
    "dp_balanced": DpBalancedScheduler,
    "default_dynamic_cp": DefaultDynamicCPScheduler,
}


class Group:
    """A process group of `n` GPUs seen from `rank` (size() and rank(), as torch's)."""

    def __init__(self, n, rank=0):
        self.n, self.r = n, rank

    def size(self):
        return self.n

    def rank(self):
        return self.r


def wrap_data_iterator(data_iterator, config, num_microbatches, pg_collection=None):
    """Builds the scheduler named by config.sequence_packing_scheduler as Megatron dev does:
    positionally, max_num_seqs and min_cp_size by keyword; then calls its run()."""
    dp_size, cp_size = config.data_parallel_size, config.context_parallel_size
    kwargs = {}
    if config.sequence_packing_scheduler == "default_dynamic_cp":
        kwargs["min_cp_size"] = config.min_dynamic_context_parallel_size
    scheduler = scheduler_map[config.sequence_packing_scheduler](
        config.max_seqlen_per_dp_cp_rank,
        cp_size,
        dp_size,
        None if config.virtual_pipeline_model_parallel_size is None
        else config.microbatch_group_size_per_vp_stage,
        max_num_seqs=getattr(config, "thd_max_packed_sequences", None),
        **kwargs,
    )
    return scheduler.run(data_iterator, num_microbatches, Group(dp_size), Group(1), Group(1),
                         Group(dp_size * cp_size), "cpu", config)
