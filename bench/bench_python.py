#!/usr/bin/env python3
"""Planning from Python against the C++ planner's own time, in the same run.

For each batch: the wall time of dcpp.plan(...) from Python (argument conversion, the checks, the
planner, the Plan object) and the planner's time as C++ measures it inside the same call
(plan.metrics["plan_seconds"]); the best of --repeats runs of each. Also a cost written in Python
(the cost table is filled by calling it, then planning runs in C++). Run: ./dev.sh bench python (it installs the package into the build directory's venv first).
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


if __name__ == "__main__":
    main()
