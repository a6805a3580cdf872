"""Stand-in for megatron/core/datasets/data_schedule.py (Megatron-LM main): the loader wrapper
builds BalancedCPScheduler (imported into this module, as main does) by keywords and calls
get_groups_and_subsamples(pairs, config)."""

from megatron.core.pipeline_parallel import hybrid_cp_schedule
from megatron.core.pipeline_parallel.hybrid_cp_schedule import BalancedCPScheduler


class Group:
    def __init__(self, n):
        self.n = n

    def size(self):
        return self.n


def schedule_global_batch(seqlens, config, dp_cp_size):
    """What HybridCPDataLoaderWrapper does with one global batch's lengths: schedules them and
    hands the groups to the forward-backward walk."""
    scheduler = BalancedCPScheduler(
        max_seq_len_per_rank=config.max_seqlen_per_dp_cp_rank, dp_cp_group=Group(dp_cp_size))
    groups, sample_id_groups = scheduler.get_groups_and_subsamples(
        list(enumerate(seqlens)), config)
    hybrid_cp_schedule.consume(groups, sample_id_groups, seqlens, dp_cp_size,
                               config.max_seqlen_per_dp_cp_rank)
    return groups, sample_id_groups
