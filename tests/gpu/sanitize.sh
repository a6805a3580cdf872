#!/usr/bin/env bash
# Runs a GPU program under NVIDIA's compute-sanitizer with one tool (racecheck, synccheck,
# memcheck, initcheck): the checks a CPU run cannot make (the host launcher runs a block's threads
# one at a time, so races are invisible there). Exits 77 (skip) without compute-sanitizer or
# without a device, and 1 on any report.
# usage: sanitize.sh TOOL PROGRAM [ARGS...]
set -uo pipefail
tool=$1
shift
sanitizer=$(command -v compute-sanitizer || true)
if [ -z "$sanitizer" ]; then
  root=$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")")
  for candidate in "$root/bin/compute-sanitizer" "$root/compute-sanitizer/compute-sanitizer"; do
    [ -x "$candidate" ] && sanitizer=$candidate && break
  done
fi
if [ -z "$sanitizer" ]; then
  echo "sanitize.sh: compute-sanitizer not found; skipping"
  exit 77
fi
# the program skips (77) itself without a device: ask it first, without the sanitizer
"$@" >/dev/null 2>&1
status=$?
if [ $status -eq 77 ]; then
  echo "sanitize.sh: no CUDA device; skipping"
  exit 77
fi
exec "$sanitizer" --tool "$tool" --error-exitcode 1 "$@"
