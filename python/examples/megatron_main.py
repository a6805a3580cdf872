"""Megatron-LM main: the hybrid-CP scheduler replaced by dcpp's (docs/python.md).
stand-in: main (the test suite runs it against python/tests/standins/main)"""
import types

import numpy as np

seqlens = np.random.default_rng(4).lognormal(8, 1.3, 300).astype(np.int64).clip(16, 60000)

# [megatron-main]
import dcpp.megatron

dcpp.megatron.install()  # BalancedCPScheduler is now dcpp.megatron.HybridCPScheduler

from megatron.core.datasets import data_schedule

config = types.SimpleNamespace(max_seqlen_per_dp_cp_rank=8192)
groups, sample_id_groups = data_schedule.schedule_global_batch(seqlens.tolist(), config, 24)
print(len(sample_id_groups), "groups; GPU 0 runs", sample_id_groups[0][0], "first")
# [megatron-main]
assert all(ids for mb in sample_id_groups for ids in mb)
