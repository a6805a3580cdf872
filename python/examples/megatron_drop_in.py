"""Megatron-LM's dynamic-CP scheduler replaced by dcpp's, called directly (docs/python.md)."""
import numpy as np

seqlens = np.random.default_rng(1).lognormal(8, 1.3, 512).astype(np.int64).clip(16, 60000)
sample_ids = list(range(1000, 1000 + len(seqlens)))
dp, cp, vpp, dp_cp_rank = 8, 4, 2, 5

# [megatron]
from dcpp.megatron import DynamicCPScheduler

# Megatron-LM dev's constructor: (max_seqlen_per_dp_cp_rank, cp_size, dp_size,
# microbatch_group_size_per_vp_stage, max_num_seqs), min_cp_size by keyword
scheduler = DynamicCPScheduler(16384, cp, dp, vpp, None, min_cp_size=1)
schedule = scheduler.get_groups_and_subsamples(list(zip(sample_ids, seqlens.tolist())))
for per_gpu in schedule:                  # one micro-batch
    my_ids = per_gpu[dp_cp_rank]          # the samples this GPU runs (never empty)
print(len(schedule), "micro-batches, efficiency", scheduler.last_plan.metrics["efficiency"])
# [megatron]
assert len(schedule) % vpp == 0 and all(ids for mb in schedule for ids in mb)
assert sorted(i for mb in schedule for g, ids in enumerate(mb) for i in ids
              if g == 0 or mb[g - 1] != ids) == sample_ids
