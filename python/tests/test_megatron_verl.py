"""The Megatron-LM drop-in holds Megatron's invariants on every shared workload; the verl helper
gives each rank its share of a plan."""
import re

import numpy as np
import pytest

import dcpp
from dcpp.megatron import DynamicCPScheduler
from dcpp.verl import rank_schedule
from conftest import load, workload_params


def padded_per_rank(length, cp, unit=1):
    chunk = 2 * cp * unit
    return -(-length // chunk) * chunk // cp


def check_megatron_schedule(schedule, ids_seqlens, total_gpus, budget, min_cp, vpp):
    lengths = dict(ids_seqlens)
    seen = {}
    if vpp:
        assert len(schedule) % vpp == 0
    for m, per_gpu in enumerate(schedule):
        assert len(per_gpu) == total_gpus
        r = 0
        while r < total_gpus:
            ids = per_gpu[r]
            if not ids:  # idle GPU
                r += 1
                continue
            # a CP group: consecutive GPUs listing the same ids, aligned, power-of-two size
            cp = 1
            while r + cp < total_gpus and per_gpu[r + cp] == ids:
                cp += 1
            # two adjacent aligned groups may list... never the same ids (every id once)
            assert cp & (cp - 1) == 0, f"micro-batch {m}: group at {r} has {cp} GPUs"
            assert r % cp == 0, f"micro-batch {m}: group of {cp} starts at GPU {r}"
            assert cp >= min_cp
            tokens = sum(padded_per_rank(lengths[i], cp) for i in ids)
            assert tokens <= budget, f"micro-batch {m}: GPU {r} holds {tokens} > {budget}"
            for i in ids:
                assert i not in seen, f"sample {i} in micro-batches {seen[i]} and {m}"
                seen[i] = m
            r += cp
    assert sorted(seen) == sorted(lengths)


@pytest.mark.parametrize("path", workload_params())
@pytest.mark.parametrize("estimator", ["megatron", "llama3-8b@h100"])
def test_megatron_drop_in_holds_megatrons_invariants(path, estimator):
    w = load(path)
    rng = np.random.default_rng(len(w["lengths"]))
    ids = rng.permutation(10 * len(w["lengths"]))[: len(w["lengths"])].tolist()  # arbitrary ids
    pairs = list(zip(ids, w["lengths"]))
    vpp = w["microbatch_multiple"] if w["microbatch_multiple"] > 1 else None
    s = DynamicCPScheduler(w["max_tokens_per_rank"], w["world_size"],
                           vpp_microbatch_group_size=vpp, min_cp_size=w["min_cp"],
                           estimator=estimator)
    schedule = s.get_groups_and_subsamples(pairs)
    check_megatron_schedule(schedule, pairs, w["world_size"], w["max_tokens_per_rank"],
                            w["min_cp"], vpp)
    assert len(schedule) == len(s.last_plan)
    s.last_plan.validate()


def test_megatron_drop_in_beats_megatrons_own_plans_under_its_cost(request):
    paths = [p for p in workload_params() if p.values[0] is not None]
    if not paths:
        pytest.skip("../shared/workloads is absent")
    import json
    import pathlib
    for param in paths:
        path = param.values[0]
        w = load(path)
        theirs = json.loads(pathlib.Path(str(path).replace(".json", ".megatron_dcp_plan.json")).read_text())
        s = DynamicCPScheduler(w["max_tokens_per_rank"], w["world_size"],
                               vpp_microbatch_group_size=w["microbatch_multiple"] if w["microbatch_multiple"] > 1 else None,
                               min_cp_size=w["min_cp"])
        s.get_groups_and_subsamples(list(enumerate(w["lengths"])))
        assert s.last_plan.metrics["efficiency"] >= theirs["metrics"]["efficiency_l2"] - 5e-5, path.name  # theirs: 4 decimals


def test_megatron_drop_in_errors():
    s = DynamicCPScheduler(4096, 8)
    with pytest.raises(ValueError, match="sample id 3 appears twice"):
        s.get_groups_and_subsamples([(3, 100), (4, 200), (3, 50)])
    with pytest.raises(ValueError, match="sample 1"):
        s.get_groups_and_subsamples([(0, 100), (1, 10**8)])
    with pytest.raises(TypeError, match="world_size is set by the scheduler"):
        DynamicCPScheduler(4096, 8, world_size=16)
    # int() took "4096" and cut a length of 5000.7 to 5000 without a word
    with pytest.raises(TypeError, match=re.escape("max_seq_len_per_rank: expected an integer, got str '4096'")):
        DynamicCPScheduler("4096", 8)
    with pytest.raises(TypeError, match=re.escape("total_gpus: expected an integer, got float 8.0")):
        DynamicCPScheduler(4096, 8.0)
    with pytest.raises(ValueError, match=re.escape("lengths: expected integers, got float64")):
        s.get_groups_and_subsamples([(0, 100), (1, 5000.7)])
    with pytest.raises(TypeError, match=re.escape("sample_id_seqlens[1] id: expected an integer, got str '1'")):
        s.get_groups_and_subsamples([(0, 100), ("1", 5000)])


def test_megatron_drop_in_takes_dcpp_options():
    s = DynamicCPScheduler(8192, 16, policy="megatron_greedy", topology="aligned")
    pairs = [(i, n) for i, n in enumerate([60000, 1000, 3000, 500, 9000, 20000])]
    check_megatron_schedule(s.get_groups_and_subsamples(pairs), pairs, 16, 8192, 1, None)
    assert s.last_plan.policy == "megatron_greedy"


@pytest.mark.parametrize("world", [8, 12])
def test_verl_rank_schedule(world):
    rng = np.random.default_rng(world)
    lengths = rng.integers(1, 12000, 61)
    p = dcpp.plan(lengths, world, 4096, topology="contiguous")
    per_rank = [rank_schedule(p, r) for r in range(world)]
    for m in range(len(p)):
        real = {}
        for r in range(world):
            x = per_rank[r][m]
            assert x.microbatch == m
            if x.local_cp_size == 0:
                assert x.sample_ids == [] and not x.is_leader and x.local_num_tokens == 0
                continue
            assert x.first_rank <= r < x.first_rank + x.local_cp_size
            assert x.is_leader == (r == x.first_rank)
            key = (x.first_rank, x.local_cp_size, tuple(x.sample_ids))
            real[key] = real.get(key, 0) + x.local_num_tokens
        # the real tokens of a group's ranks add up to its samples' lengths
        for (_, _, ids), tokens in real.items():
            assert tokens == int(lengths[list(ids)].sum())
