#!/usr/bin/env python3
"""Runs one libFuzzer target for `meson test --suite fuzz`.

usage: run_fuzzer.py FUZZER NAME SOURCE_DIR

1. Replays every input of SOURCE_DIR/corpus/NAME and SOURCE_DIR/regressions/NAME (each run
   once): the seeds and every crash found before must pass.
2. With DCPP_FUZZ_SECONDS=N (N > 0), fuzzes for N seconds from a scratch copy of the corpus
   (the source tree's corpus is not modified). A crash, a leak, a timeout (10 s per input) or
   an out-of-memory (2 GB) fails the test; libFuzzer writes the input into
   SOURCE_DIR/regressions/NAME, where it is replayed by step 1 from then on (commit it), and
   its bytes are printed here in hex so that a CI log keeps it too.
"""
import os
import shutil
import subprocess
import sys
import tempfile


def main() -> int:
    fuzzer, name, source = sys.argv[1], sys.argv[2], sys.argv[3]
    corpus = os.path.join(source, "corpus", name)
    regressions = os.path.join(source, "regressions", name)
    inputs = []
    for folder in (corpus, regressions):
        if os.path.isdir(folder):
            inputs += sorted(os.path.join(folder, f) for f in os.listdir(folder)
                             if not f.startswith("."))
    if not inputs:
        print(f"fuzz {name}: no seed inputs in {corpus}", file=sys.stderr)
        return 1
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    replay = subprocess.run([fuzzer, "-rss_limit_mb=2048", "-timeout=10"] + inputs, env=env)
    if replay.returncode != 0:
        print(f"fuzz {name}: replaying the corpus and regressions failed", file=sys.stderr)
        return 1
    print(f"fuzz {name}: {len(inputs)} seed and regression inputs replayed")
    seconds = int(os.environ.get("DCPP_FUZZ_SECONDS", "0") or 0)
    if seconds <= 0:
        return 0
    os.makedirs(regressions, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"dcpp_fuzz_{name}_") as work:
        shutil.copytree(corpus, os.path.join(work, "corpus"))
        before = set(os.listdir(regressions))
        run = subprocess.run(
            [fuzzer, f"-max_total_time={seconds}", "-rss_limit_mb=2048", "-timeout=10",
             "-max_len=65536", "-print_final_stats=1",
             f"-artifact_prefix={regressions}{os.sep}", os.path.join(work, "corpus")],
            env=env)
        found = sorted(set(os.listdir(regressions)) - before)
        for f in found:
            with open(os.path.join(regressions, f), "rb") as data:
                print(f"fuzz {name}: kept {os.path.join(regressions, f)}: {data.read().hex()}")
        if run.returncode != 0 or found:
            print(f"fuzz {name}: the fuzzer failed (exit {run.returncode})", file=sys.stderr)
            return 1
    print(f"fuzz {name}: {seconds} s of fuzzing found nothing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
