#!/usr/bin/env python3
"""Planning from Python against the C++ planner's own time, in the same run.

For each batch: the wall time of dcpp.plan(...) from Python (argument conversion, the checks, the
planner, the Plan object) and the planner's time as C++ measures it inside the same call
(plan.metrics["plan_seconds"]); the best of --repeats runs of each. Also a cost written in Python
(the cost table is filled by calling it, then planning runs in C++), and the Megatron-LM drop-in
(plan and per-GPU lists) against the C++ planning inside it. Run: ./dev.sh bench python (it installs the package into the build directory's venv first).
"""
import argparse
import time

import numpy as np

import dcpp


def batch(samples, seed):
    rng = np.random.default_rng(seed)
    return np.clip(rng.lognormal(7.5, 1.3, samples), 16, 131072).astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workloads", default="../shared/workloads",
                    help="the reference workloads (default ../shared/workloads; "
                         "DCPP_REFERENCE_WORKLOADS overrides)")
    args = ap.parse_args()
    cases = [
        ("4096 x 64", batch(4096, 1), 64, 16384),
        ("16384 x 1024", batch(16384, 2), 1024, 16384),
        ("65536 x 1024", batch(65536, 3), 1024, 16384),
    ]
    estimators = [
        ("llama3-8b@h100", "llama3-8b@h100"),
        ("megatron", "megatron"),
        ("python cost", lambda n, cp: n * n / cp),
    ]
    print(f"{'batch':<14} {'estimator':<16} {'Python ms':>10} {'C++ ms':>9} {'ratio':>7} "
          f"{'micro-batches':>13} {'efficiency':>10}")
    for name, lengths, world, budget in cases:
        for ename, est in estimators:
            best_py = best_cpp = float("inf")
            p = None
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                p = dcpp.plan(lengths, world, budget, estimator=est)
                best_py = min(best_py, time.perf_counter() - t0)
                best_cpp = min(best_cpp, p.metrics["plan_seconds"])
            print(f"{name:<14} {ename:<16} {best_py * 1e3:>10.2f} {best_cpp * 1e3:>9.2f} "
                  f"{best_py / best_cpp:>7.3f} {len(p):>13} {p.metrics['efficiency']:>10.4f}")
    print("ratio: Python wall time over the C++ planner's own time in the same call; the python "
          "cost row includes calling the cost once per distinct length and size")
    # the Megatron-LM drop-in as Megatron calls it: the plan (megatron topology, default cost)
    # and the per-GPU lists of ids, against the C++ planner's own time in the same call
    print()
    print(f"{'drop-in':<14} {'called as':<16} {'Python ms':>10} {'C++ ms':>9} {'ratio':>7} "
          f"{'micro-batches':>13} {'efficiency':>10}")
    from dcpp.megatron import DynamicCPScheduler

    for name, lengths, world, budget in cases[:2]:
        pairs = list(enumerate(lengths.tolist()))
        best_py = best_cpp = float("inf")
        for _ in range(args.repeats):
            s = DynamicCPScheduler(budget, 1, world, None, None, min_cp_size=1)
            t0 = time.perf_counter()
            schedule = s.get_groups_and_subsamples(pairs)
            best_py = min(best_py, time.perf_counter() - t0)
            best_cpp = min(best_cpp, s.last_plan.metrics["plan_seconds"])
        print(f"{name:<14} {'Megatron dev':<16} {best_py * 1e3:>10.2f} {best_cpp * 1e3:>9.2f} "
              f"{best_py / best_cpp:>7.3f} {len(schedule):>13} "
              f"{s.last_plan.metrics['efficiency']:>10.4f}")

    reference_plans(args)


def reference_plans(args):
    """The drop-in called as Megatron-LM calls it (no estimator) on the shared workloads, and
    Megatron-LM's own plans of them, judged by dcpp's two-tier transformer cost of three models:
    step times, their ratio (Megatron's over ours: above 1 is faster than Megatron) and each
    plan's efficiency (lower bound over step, megatron topology)."""
    import json
    import os
    import pathlib

    from dcpp.megatron import DynamicCPScheduler

    root = pathlib.Path(os.environ.get("DCPP_REFERENCE_WORKLOADS", args.workloads))
    paths = sorted(p for p in root.glob("*.json") if not p.name.endswith(".megatron_dcp_plan.json"))
    if not paths:
        print(f"\n(no reference workloads in {root})")
        return
    print(f"\n{'workload':<28} {'judged by':<16} {'dcpp s':>9} {'Megatron s':>10} {'ratio':>7} "
          f"{'dcpp eff':>8} {'Megatron eff':>12}")
    for judge in ("llama3-8b@h100", "qwen2.5-7b@a100", "llama3-70b@h100"):
        ratios = []
        for path in paths:
            w = json.loads(path.read_text())
            theirs = json.loads(path.with_name(path.stem + ".megatron_dcp_plan.json").read_text())
            s = DynamicCPScheduler(w["max_seq_len_per_rank"], 1, w["total_gpus"],
                                   w.get("vpp_microbatch_group_size"), None,
                                   min_cp_size=w.get("min_cp_size", 1))
            s.get_groups_and_subsamples(list(enumerate(w["seqlens"])))
            ours = dcpp.evaluate(s.last_plan, judge, topology="megatron")
            meg = dcpp.evaluate(theirs, judge, topology="megatron")
            ratios.append(meg["estimated_step_time"] / ours["estimated_step_time"])
            print(f"{path.stem:<28} {judge:<16} {ours['estimated_step_time']:>9.4f} "
                  f"{meg['estimated_step_time']:>10.4f} {ratios[-1]:>7.4f} "
                  f"{ours['efficiency']:>8.4f} {meg['efficiency']:>12.4f}")
        print(f"{'(least ratio)':<28} {judge:<16} {'':>9} {'':>10} {min(ratios):>7.4f}")


if __name__ == "__main__":
    main()
