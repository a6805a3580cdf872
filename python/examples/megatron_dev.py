"""Megatron-LM dev: dcpp's scheduler registered in one line (docs/python.md).
stand-in: dev (the test suite runs it against python/tests/standins/dev)"""
import types

import numpy as np

seqlens = np.random.default_rng(3).lognormal(8, 1.3, 400).astype(np.int64).clip(16, 90000)

# [megatron-dev]
import dcpp.megatron

dcpp.megatron.install()  # scheduler_map["default_dynamic_cp"] is now dcpp's class

# what Megatron then does with --dynamic-context-parallel (megatron/core/datasets/data_schedule.py)
from megatron.core.datasets import data_schedule

cls = data_schedule.scheduler_map["default_dynamic_cp"]
scheduler = cls(16384, 2, 16, None, max_num_seqs=None, min_cp_size=1)
schedule = scheduler.get_groups_and_subsamples(list(enumerate(seqlens.tolist())))
print(len(schedule), "micro-batches on", len(schedule[0]), "GPUs:", scheduler.last_plan)
# [megatron-dev]
config = types.SimpleNamespace(
    sequence_packing_scheduler="default_dynamic_cp", min_dynamic_context_parallel_size=1,
    max_seqlen_per_dp_cp_rank=16384, data_parallel_size=16, context_parallel_size=2,
    virtual_pipeline_model_parallel_size=None, microbatch_group_size_per_vp_stage=None)
consumed, count, _, _ = data_schedule.wrap_data_iterator(iter([seqlens.tolist()]), config, 1)
assert count == len(schedule)
