"""Plans one batch and prints its groups (docs/python.md)."""
# [plan-batch]
import dcpp

plan = dcpp.plan([1830, 65536, 412, 7000, 300, 24000, 900, 2500],
                 world_size=16, max_tokens_per_rank=8192)
for m, mb in enumerate(plan):
    for g in mb.groups:  # g.first_rank, g.cp, g.samples (numpy int32), g.tokens, g.time
        print(m, list(g.ranks), g.samples.tolist())
print(plan.metrics["efficiency"], len(plan), "micro-batches")
# [plan-batch]

# the tokens of rank 3 in micro-batch 0, gathered from the batch's tokens laid end to end
import numpy as np

flat_ids = np.arange(int(plan.lengths.sum())) % 32000  # stands in for the batch's token ids
pad_id = 0
# [route]
r = plan.route(0, 3)
local_ids = np.where(r["index"] >= 0, flat_ids[np.maximum(r["index"], 0)], pad_id)
positions = r["position_ids"]  # with r["cu_seqlens_padded"], the THD layout of attention
# [route]
print(r["cp"], local_ids.size, "tokens on rank 3")
