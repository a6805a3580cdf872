"""Each rank's micro-batches from one plan, as a verl worker takes them (docs/python.md)."""
import numpy as np

seqlens = np.random.default_rng(2).lognormal(8, 1.3, 300).astype(np.int64).clip(16, 90000)
world, rank = 16, 3

# [verl]
import dcpp
from dcpp.verl import rank_schedule

plan = dcpp.plan(seqlens, world_size=world, max_tokens_per_rank=16384)  # same on every rank
for mb in rank_schedule(plan, rank):
    if mb.local_cp_size == 0:
        continue                          # idle in this micro-batch
    group = (mb.first_rank, mb.local_cp_size)  # the CP process group to run the ring on
    print(mb.microbatch, group, mb.sample_ids, mb.local_num_tokens, "tokens here")
# [verl]
