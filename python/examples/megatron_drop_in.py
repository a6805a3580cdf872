"""Megatron-LM's dynamic-CP scheduler replaced by dcpp's (docs/python.md)."""
import numpy as np

seqlens = np.random.default_rng(1).lognormal(8, 1.3, 512).astype(np.int64).clip(16, 60000)
sample_ids = list(range(1000, 1000 + len(seqlens)))
dp, cp, vpp, dp_cp_rank = 8, 4, 2, 5

# [megatron]
from dcpp.megatron import DynamicCPScheduler

scheduler = DynamicCPScheduler(max_seq_len_per_rank=16384, total_gpus=dp * cp,
                               vpp_microbatch_group_size=vpp, estimator="llama3-8b@h100")
schedule = scheduler.get_groups_and_subsamples(list(zip(sample_ids, seqlens.tolist())))
for per_gpu in schedule:                  # one micro-batch
    my_ids = per_gpu[dp_cp_rank]          # the samples this GPU runs ([]: idle)
print(len(schedule), "micro-batches, efficiency", scheduler.last_plan.metrics["efficiency"])
# [megatron]
assert len(schedule) % vpp == 0
assert sorted(i for mb in schedule for g, ids in enumerate(mb) for i in ids
              if g == 0 or mb[g - 1] != ids) == sample_ids
