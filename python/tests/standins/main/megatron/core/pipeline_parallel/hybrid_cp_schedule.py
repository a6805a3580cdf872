"""Stand-in for megatron/core/pipeline_parallel/hybrid_cp_schedule.py (Megatron-LM main): the
hybrid-CP scheduler's call shape, and the consumer's per-GPU, per-sample walk."""


class BalancedCPScheduler:
    """The stand-in's own plan: every sample alone on the group of all GPUs."""

    def __init__(self, max_seq_len_per_rank, dp_cp_group):
        self.max_seq_len_per_rank = max_seq_len_per_rank
        self.total_hdp_gpus = dp_cp_group.size()

    def get_groups_and_subsamples(self, sample_id_seqlens, config):
        n = self.total_hdp_gpus
        groups = [[[length] for _ in range(n)] for _, length in sample_id_seqlens]
        ids = [[[i] for _ in range(n)] for i, _ in sample_id_seqlens]
        return groups, ids


def hybrid_group_sizes(world):
    """Sizes main creates groups for: 2^i from 2 below floor(log2(world)), and all GPUs (one
    GPU needs none)."""
    log = world.bit_length() - 1
    return [1] + [2**i for i in range(1, log)] + ([world] if world > 1 else [])


def consume(groups, sample_id_groups, seqlens, world, budget):
    """Runs the schedule as main's forward-backward walks it on every GPU: per micro-batch the
    GPU's samples one by one (its last one indexed: a GPU with none fails), each with its
    partner CP size, the count of GPUs listing it, which must be a created size."""
    seen = {}
    for j, per_gpu in enumerate(sample_id_groups):
        assert len(per_gpu) == world and len(groups[j]) == world
        for rank in range(world):
            ids = per_gpu[rank]
            ids[-1]  # noqa: B018 (IndexError on a GPU with nothing to run, as in main)
            assert [seqlens[i] for i in ids] == groups[j][rank], "lengths and ids disagree"
            for i in ids:
                partners = [r for r in range(world) if i in per_gpu[r]]
                size = len(partners)
                assert size in hybrid_group_sizes(world), f"no hybrid group of size {size}"
                assert partners == list(range(partners[0], partners[0] + size))
                assert size == world or partners[0] % size == 0
                assert seqlens[i] / size <= budget or size == world
                seen.setdefault(i, j)
                assert seen[i] == j, f"sample {i} in two micro-batches"
    assert sorted(seen) == sorted(range(len(seqlens)))
