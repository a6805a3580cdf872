"""The Megatron-LM and verl drop-ins: both stacks' call shapes, one-line registration against
stand-in modules with upstream's paths (standins/README.md), the consumers' contract on seeded
random batches checked from the contract itself, and plans at least as fast as Megatron's own."""
import json
import math
import os
import pathlib
import re
import types

import numpy as np
import pytest

import dcpp
import dcpp.megatron
import dcpp.verl
import standins
from conftest import load, workload_params
from dcpp.megatron import DynamicCPScheduler, HybridCPScheduler
from dcpp.verl import rank_schedule


def megatron_sizes(world, min_cp=1):
    """The CP group sizes Megatron-LM dev creates on `world` GPUs (parallel_state): 2^i for i
    below floor(log2(world)) and at least min_cp, and the group of all GPUs."""
    sizes = {2**i for i in range(int(math.log2(world))) if 2**i >= min_cp}
    return sizes | {world}


def check_contract(schedule, pairs, world, budget, min_cp, vpp):
    """Megatron's and verl's consumer contract on per-GPU lists: every GPU lists an id in every
    micro-batch; the GPUs listing a group's first id are consecutive, list the same ids, number
    a size Megatron created and start at a multiple of it; the group's lengths over its size fit
    the budget (Megatron's count); every id once; the count a multiple of the VPP size."""
    lengths = dict(pairs)
    sizes = megatron_sizes(world, min_cp)
    seen = {}
    if vpp:
        assert len(schedule) % vpp == 0
    for m, per_gpu in enumerate(schedule):
        assert len(per_gpu) == world
        assert all(per_gpu), f"micro-batch {m}: a GPU runs no sample"
        # the GPUs that list each id, in order, each GPU once (one pass: a scan of every GPU per
        # group made the seeded batches of 1,024 GPUs take minutes)
        holders = {}
        for q, listed in enumerate(per_gpu):
            for i in listed:
                gpus = holders.setdefault(i, [])
                if not gpus or gpus[-1] != q:
                    gpus.append(q)
        r = 0
        while r < world:
            ids = per_gpu[r]
            members = holders[ids[0]]
            cp = len(members)
            assert members == list(range(r, r + cp)), f"micro-batch {m}: group {members}"
            assert all(per_gpu[q] == ids for q in members)
            assert cp in sizes, f"micro-batch {m}: a group of {cp} GPUs on {world}"
            assert r % cp == 0, f"micro-batch {m}: a group of {cp} at GPU {r}"
            assert sum(lengths[i] for i in ids) / cp <= budget
            for i in ids:
                assert i not in seen, f"sample {i} in micro-batches {seen[i]} and {m}"
                seen[i] = m
            r += cp
    assert sorted(seen) == sorted(lengths)


def random_batch(rng):
    """A world of 1-1,024 GPUs (24, 48 and 96 often), a VPP size, a minimum CP size (1-8) and
    1 to 16 x N samples of mixed lengths that fit the largest group."""
    world = int(rng.choice([24, 48, 96, int(2 ** rng.uniform(0, 10))]))
    if world > 1:
        world += world % 2  # Megatron requires an even DP x CP
    vpp = [None, 2, 4, 8][rng.integers(4)]
    min_cp = [1, 2, 4, 8][rng.integers(4)]  # not always dividing the world
    if min_cp > world:
        min_cp = 1
    budget = int(rng.choice([2048, 4096, 8192, 16384]))
    n = int(2 ** rng.uniform(0, math.log2(16 * world))) + (vpp or 1)
    lengths = rng.lognormal(math.log(budget) - 1.5, 1.5, n).astype(np.int64)
    lengths = np.clip(lengths, 1, budget * world // 2 + 1).tolist()
    ids = rng.permutation(4 * n)[:n].tolist()
    return world, vpp, min_cp, budget, list(zip(ids, lengths))


def test_both_call_shapes_build_the_scheduler():
    pairs = list(enumerate([60000, 1000, 3000, 500, 9000, 20000, 700, 12000]))
    dev = DynamicCPScheduler(8192, 4, 2, None, None, min_cp_size=1)  # Megatron dev, positional
    dev_kw = DynamicCPScheduler(8192, 4, 2, None, max_num_seqs=16, min_cp_size=2)
    verl = DynamicCPScheduler(  # verl's keywords
        max_seqlen_per_dp_cp_rank=8192, cp_size=4, dp_size=2, microbatch_group_size_per_vp_stage=None
    )
    for s, min_cp in ((dev, 1), (dev_kw, 2), (verl, 1)):
        assert s.total_hdp_gpus == 8 and s.is_dynamic_cp
        check_contract(s.get_groups_and_subsamples(pairs), pairs, 8, 8192, min_cp, None)
        assert s.last_plan.options["topology"] == "megatron"
    assert dev_kw.max_num_seqs == 16 and dev_kw.min_cp_size == 2
    assert dev.estimator == dcpp.megatron.DEFAULT_ESTIMATOR
    with pytest.raises(RuntimeError, match="run is Megatron-LM's"):
        dev.run(None, 1, None, None, None, None, "cpu", None)


def test_bad_arguments_name_the_argument_and_value():
    # the budget is a 64-bit token count (dcpp's limit is 2^36), not a 32-bit one
    big = DynamicCPScheduler(2**33, 1, 8, None)
    assert len(big.get_groups_and_subsamples([(0, 2**34), (1, 100)])) >= 1
    with pytest.raises(ValueError, match="max_tokens_per_rank = 137438953473 exceeds the limit"):
        DynamicCPScheduler(2**37 + 1, 1, 8, None).get_groups_and_subsamples([(0, 100)])
    with pytest.raises(ValueError, match=re.escape("cp_size = 0 must be >= 1")):
        DynamicCPScheduler(4096, 0, 8, None)
    with pytest.raises(TypeError, match=re.escape("max_seqlen_per_dp_cp_rank: expected an integer, got str '4096'")):
        DynamicCPScheduler("4096", 1, 8, None)
    with pytest.raises(TypeError, match=re.escape("dp_size: expected an integer, got float 8.0")):
        DynamicCPScheduler(4096, 1, 8.0, None)
    with pytest.raises(ValueError, match=re.escape("microbatch_group_size_per_vp_stage = 0 must be >= 1 or None")):
        DynamicCPScheduler(4096, 1, 8, 0)
    with pytest.raises(TypeError, match="world_size is set by the scheduler's own arguments"):
        DynamicCPScheduler(4096, 1, 8, None, world_size=16)
    with pytest.raises(TypeError, match="topology is set by the scheduler's own arguments"):
        DynamicCPScheduler(4096, 1, 8, None, topology="aligned")
    s = DynamicCPScheduler(4096, 1, 8, None)
    with pytest.raises(ValueError, match="sample id 3 appears twice"):
        s.get_groups_and_subsamples([(3, 100), (4, 200), (3, 50)])
    with pytest.raises(ValueError, match="sample 1: length = 100000000 exceeds"):
        s.get_groups_and_subsamples([(0, 100), (1, 10**8)])
    with pytest.raises(ValueError, match=re.escape("lengths: expected integers, got float64")):
        s.get_groups_and_subsamples([(0, 100), (1, 5000.7)])
    with pytest.raises(TypeError, match=re.escape("sample_id_seqlens[1] id: expected an integer, got str '1'")):
        s.get_groups_and_subsamples([(0, 100), ("1", 5000)])
    with pytest.raises(TypeError, match=re.escape("sample_id_seqlens[0]: expected a (sample_id, seq_len) pair, got 7")):
        s.get_groups_and_subsamples([7])
    vpp = DynamicCPScheduler(4096, 1, 8, 4)
    with pytest.raises(ValueError, match="the batch holds 3 samples, fewer than microbatch_multiple = 4"):
        vpp.get_groups_and_subsamples([(0, 10), (1, 20), (2, 30)])


def test_seeded_random_batches_meet_the_consumers_contract():
    rng = np.random.default_rng(57)
    count = int(os.environ.get("DCPP_CONTRACT_BATCHES", "10000"))
    planned = refused = 0
    worlds = set()
    for t in range(count):
        world, vpp, min_cp, budget, pairs = random_batch(rng)
        s = DynamicCPScheduler(budget, 1, world, vpp, min_cp_size=min_cp)
        try:
            schedule = s.get_groups_and_subsamples(pairs)
        except ValueError as e:
            # the only batches refused here: fewer samples than the VPP size needs micro-batches
            assert "every rank runs a sample in every micro-batch" in str(e), (t, str(e))
            refused += 1
            continue
        check_contract(schedule, pairs, world, budget, min_cp, vpp)
        planned += 1
        worlds.add(world)
    assert planned >= 0.98 * count and {24, 48, 96} <= worlds


@pytest.mark.parametrize("path", workload_params())
def test_default_plans_beat_megatrons_own_under_a_two_tier_cost(path):
    """Called as Megatron calls it (no estimator), on every reference workload: a plan at least
    as fast as Megatron's own plan of the batch, both judged by dcpp's two-tier transformer cost
    (and the contract held)."""
    w = load(path)
    theirs = json.loads(pathlib.Path(str(path).replace(".json", ".megatron_dcp_plan.json")).read_text())
    vpp = w["microbatch_multiple"] if w["microbatch_multiple"] > 1 else None
    pairs = list(enumerate(w["lengths"]))
    s = DynamicCPScheduler(w["max_tokens_per_rank"], 1, w["world_size"], vpp, None,
                           min_cp_size=w["min_cp"])
    schedule = s.get_groups_and_subsamples(pairs)
    check_contract(schedule, pairs, w["world_size"], w["max_tokens_per_rank"], w["min_cp"], vpp)
    for judge in ("llama3-8b@h100", "qwen2.5-7b@a100"):
        ours = dcpp.evaluate(s.last_plan, judge, topology="megatron")
        megatron = dcpp.evaluate(theirs, judge, topology="megatron")
        assert ours["estimated_step_time"] <= megatron["estimated_step_time"], (judge, ours, megatron)


@pytest.mark.parametrize("path", workload_params())
def test_the_megatron_estimator_is_not_degenerate(path):
    """Under `megatron` (length^2/cp and the ring), in the megatron topology the drop-in plans in,
    no group is larger than pays off: no group
    spans all GPUs, a group that sets its micro-batch's time is slower on half its GPUs (where
    that half holds it), and on every workload the plan is at least Megatron's own under the
    same cost."""
    w = load(path)
    vpp = w["microbatch_multiple"]
    p = dcpp.plan(w["lengths"], w["world_size"], w["max_tokens_per_rank"], estimator="megatron",
                  min_cp=w["min_cp"], microbatch_multiple=vpp, topology="megatron")
    # the group of all GPUs only for a sample no smaller group holds
    largest = max(megatron_sizes(w["world_size"], w["min_cp"]) - {w["world_size"]}, default=0)
    for mb in p:
        for g in mb.groups:
            if g.cp == w["world_size"]:
                assert max(p.lengths[g.samples]) > largest * w["max_tokens_per_rank"]
    for mb in p:
        for g in mb.groups:
            half = g.cp // 2
            lengths = p.lengths[g.samples]
            tokens = sum(-(-int(n) // (2 * half)) * 2 for n in lengths) if half else 0
            if half not in megatron_sizes(w["world_size"], w["min_cp"]) or tokens > w["max_tokens_per_rank"]:
                continue  # the group's half does not hold its samples
            at = dcpp.costs("megatron", lengths, [g.cp, half]).sum(axis=0)
            # more GPUs only where they are faster, or where the group does not set the step
            assert at[0] < at[1] or g.time < mb.time, (g, at, mb.time)
    theirs = json.loads(pathlib.Path(str(path).replace(".json", ".megatron_dcp_plan.json")).read_text())
    ours = dcpp.evaluate(p, "megatron", topology="contiguous")
    megatron = dcpp.evaluate(theirs, "megatron", topology="contiguous")
    assert ours["estimated_step_time"] <= megatron["estimated_step_time"]


def test_megatron_dev_install_registers_the_class_and_runs_inherited_run():
    seqlens = np.random.default_rng(5).lognormal(8, 1.4, 300).astype(np.int64).clip(16, 90000).tolist()
    with standins.use("dev"):
        from megatron.core.datasets import data_schedule

        cls = dcpp.megatron.install()
        assert data_schedule.scheduler_map["default_dynamic_cp"] is cls
        assert issubclass(cls, data_schedule.DefaultDynamicCPScheduler)
        for vpp in (None, 4):
            config = types.SimpleNamespace(
                sequence_packing_scheduler="default_dynamic_cp", min_dynamic_context_parallel_size=1,
                max_seqlen_per_dp_cp_rank=16384, data_parallel_size=12, context_parallel_size=2,
                virtual_pipeline_model_parallel_size=vpp, microbatch_group_size_per_vp_stage=vpp,
                thd_max_packed_sequences=None)
            consumed, count, tokens, _ = data_schedule.wrap_data_iterator(iter([seqlens]), config, 1)
            assert count == len(consumed) and tokens == sum(seqlens)
            assert count % (vpp or 1) == 0
    # outside the stand-in, megatron.core is not importable: the class stands alone
    assert dcpp.megatron.DynamicCPScheduler.__mro__[1:] == (dcpp.megatron._Planning, object)


def test_run_builds_the_cost_from_the_models_config():
    with standins.use("dev"):
        from megatron.core.datasets import data_schedule

        cls = dcpp.megatron.install()
        s = cls(16384, 2, 4, None, None, min_cp_size=1)
        config = types.SimpleNamespace(num_layers=80, hidden_size=8192, num_attention_heads=64,
                                       num_query_groups=8, ffn_hidden_size=28672, kv_channels=128)
        s.run(iter([[1000, 50000, 3000, 700, 9000, 800, 40000, 120]]), 1, None, None, None,
              data_schedule.Group(8), "cpu", config)
        assert s.estimator["layers"] == 80 and s.estimator["kv_heads"] == 8
        assert s.last_plan.estimator.startswith("model(layers=80")


def test_megatron_main_install_replaces_the_hybrid_scheduler():
    seqlens = np.random.default_rng(6).lognormal(8, 1.4, 200).astype(np.int64).clip(16, 60000).tolist()
    with standins.use("main"):
        from megatron.core.datasets import data_schedule
        from megatron.core.pipeline_parallel import hybrid_cp_schedule

        assert dcpp.megatron.install() is HybridCPScheduler
        assert data_schedule.BalancedCPScheduler is HybridCPScheduler
        assert hybrid_cp_schedule.BalancedCPScheduler is HybridCPScheduler
        for world in (8, 24, 48):
            config = types.SimpleNamespace(max_seqlen_per_dp_cp_rank=8192)
            groups, ids = data_schedule.schedule_global_batch(seqlens, config, world)
            assert len(groups) == len(ids) >= 1


@pytest.mark.parametrize("tp", [1, 2])
def test_verl_install_and_rank_fields_match_verls_own(tp):
    rng = np.random.default_rng(tp)
    seq_lens = rng.lognormal(7.5, 1.3, 120).astype(np.int64).clip(1, 40000).tolist()
    dp, cp = 6, 2
    with standins.use("verl"):
        import verl.utils.dynamic_cp_scheduler as v

        cls = dcpp.verl.install()
        assert v.get_megatron_dynamic_cp_scheduler_cls() is cls
        s = cls(max_seqlen_per_dp_cp_rank=8192, cp_size=cp, dp_size=dp,
                microbatch_group_size_per_vp_stage=None)
        schedule = s.get_groups_and_subsamples(list(enumerate(seq_lens)))
        for rank in range(dp * cp):
            theirs = v.schedule(seq_lens, max_seqlen_per_dp_cp_rank=8192, dp_size=dp, cp_size=cp,
                                tp_size=tp, rank=rank)
            ours = rank_schedule(schedule, rank, seq_lens=seq_lens, tp_size=tp)
            assert len(ours) == len(theirs)
            for a, b in zip(ours, theirs):
                assert a.local_cp_size == b["local_cp_size"]
                assert a.sample_ids == b["sample_ids"]
                assert a.is_leader == b["leader"]
                assert a.padding_mask.tolist() == b["padding_mask"]
                assert a.local_num_tokens == b["local_num_tokens"]


@pytest.mark.parametrize("layout,min_rows", [("zigzag", 0), ("contiguous", 0), ("contiguous", 96)])
def test_rank_schedule_places_every_token_once(layout, min_rows):
    rng = np.random.default_rng(len(layout) + min_rows)
    lengths = rng.integers(1, 12000, 61)
    p = dcpp.plan(lengths, 12, 4096, topology="megatron")
    starts = np.concatenate([[0], np.cumsum(lengths)])
    per_rank = [rank_schedule(p, r, tp_size=2, layout=layout, min_local_rows=min_rows)
                for r in range(12)]
    held = np.zeros(int(lengths.sum()), dtype=np.int64)
    for m in range(len(p)):
        for r in range(12):
            x = per_rank[r][m]
            assert x.microbatch == m and x.first_rank <= r < x.first_rank + x.local_cp_size
            assert x.is_leader == (r == x.first_rank)
            assert x.padding_mask.dtype == np.bool_
            assert x.local_num_tokens == int((~x.padding_mask).sum())
            assert (x.padding_mask == (x.index < 0)).all()
            rows = x.padding_mask.size
            align = 2 * 2 * x.local_cp_size if x.local_cp_size > 1 else 2
            assert rows % (align // x.local_cp_size if x.local_cp_size > 1 else 1) == 0
            if layout == "contiguous":
                assert rows >= min_rows * len(x.sample_ids)
            held[x.index[x.index >= 0]] += 1
            real = x.index >= 0
            owner = np.searchsorted(starts, x.index[real], side="right") - 1
            assert (x.index[real] - starts[owner] == x.positions[real]).all()
    assert (held == 1).all()


def test_rank_schedule_refuses_what_verl_refuses():
    with pytest.raises(ValueError, match="micro-batch 0: GPU 1 runs no sample"):
        rank_schedule([[[0], []]], 1, seq_lens=[10])
    with pytest.raises(ValueError, match="not aligned"):
        rank_schedule([[[0], [1], [1], [2]]], 1, seq_lens=[10, 10, 10])
    with pytest.raises(ValueError, match="layout = 'ring'"):
        rank_schedule([[[0]]], 0, seq_lens=[10], layout="ring")


def test_cost_from_config_reads_megatron_and_hugging_face_configs():
    megatron = types.SimpleNamespace(num_layers=32, hidden_size=4096, num_attention_heads=32,
                                     num_query_groups=8, ffn_hidden_size=14336, kv_channels=None,
                                     gated_linear_unit=True)
    hf = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
          "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}
    a = dcpp.cost_from_config(megatron, vocab_size=128256)
    b = dcpp.cost_from_config(hf)
    assert {k: a[k] for k in a if k != "name"} == {k: b[k] for k in b if k != "name"}
    lengths = np.random.default_rng(9).integers(100, 30000, 200)
    # the same shape as the llama3-8b preset: the same plan, bit for bit
    mine = dcpp.plan(lengths, 16, 8192, estimator=b)
    preset = dcpp.plan(lengths, 16, 8192, estimator="llama3-8b@h100")
    def shown(p):
        metrics = {k: v for k, v in p.metrics.items() if k != "plan_seconds"}
        groups = [[(g.first_rank, g.cp, g.samples.tolist(), g.time) for g in mb.groups] for mb in p]
        return groups, metrics

    assert shown(mine) == shown(preset)
    with pytest.raises(ValueError, match=r"the config has none of num_layers, num_hidden_layers \(layers\)"):
        dcpp.cost_from_config({"hidden_size": 4096})
    bad = dict(b, heads=0)
    with pytest.raises(ValueError, match="model heads = 0 must be >= 1"):
        dcpp.plan(lengths, 16, 8192, estimator=bad)
    with pytest.raises(ValueError, match="device = 'tpu'; use h100 or a100"):
        dcpp.plan(lengths, 16, 8192, estimator=dict(b, device="tpu"))
