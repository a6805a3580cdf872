"""Plans a batch with a cost model written in Python (docs/python.md)."""
import numpy as np

# [custom-cost]
import dcpp


def cost(length, cp):  # seconds per rank, forward and backward
    ring = 4e-4 * (cp - 1) if cp > 1 else 0.0
    return 2.1e-5 * length / cp + 1.6e-10 * length * length / cp + ring


lengths = np.random.default_rng(0).lognormal(8, 1.2, 2048).astype(np.int64) + 1
plan = dcpp.plan(lengths, world_size=64, max_tokens_per_rank=16384, estimator=cost)
print(plan)  # samples, ranks, micro-batches, efficiency
# [custom-cost]
assert plan.estimator == "python:cost"
plan.validate()
