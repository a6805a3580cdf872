"""verl: dcpp's scheduler behind get_megatron_dynamic_cp_scheduler_cls, and a rank's fields
(docs/python.md).
stand-in: verl (the test suite runs it against python/tests/standins/verl)"""
import numpy as np

seq_lens = np.random.default_rng(2).lognormal(8, 1.3, 300).astype(np.int64).clip(16, 90000)
dp, cp, tp, rank = 8, 2, 2, 3

# [verl]
import dcpp.verl
from dcpp.verl import rank_schedule

dcpp.verl.install()  # verl's get_megatron_dynamic_cp_scheduler_cls() now returns dcpp's class

# verl's own steps, and each rank's fields
import verl.utils.dynamic_cp_scheduler as verl_dcp

cls = verl_dcp.get_megatron_dynamic_cp_scheduler_cls()
scheduler = cls(max_seqlen_per_dp_cp_rank=16384, cp_size=cp, dp_size=dp,
                microbatch_group_size_per_vp_stage=None)
schedule = scheduler.get_groups_and_subsamples(list(enumerate(seq_lens.tolist())))
for mb in rank_schedule(schedule, rank, seq_lens=seq_lens, tp_size=tp):
    # local_cp_size, sample ids, leader flag, padding mask (True on padding), real tokens
    print(mb.microbatch, mb.local_cp_size, mb.sample_ids, mb.is_leader,
          mb.padding_mask.shape, mb.local_num_tokens)
# [verl]
theirs = verl_dcp.schedule(seq_lens.tolist(), max_seqlen_per_dp_cp_rank=16384, dp_size=dp,
                           cp_size=cp, tp_size=tp, rank=rank)
assert [x["local_num_tokens"] for x in theirs] == [
    mb.local_num_tokens for mb in rank_schedule(schedule, rank, seq_lens=seq_lens, tp_size=tp)]
