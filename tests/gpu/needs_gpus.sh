#!/usr/bin/env bash
# Runs a multi-GPU test only where the machine has enough GPUs: exits 77 (skip) with a message
# when it has fewer than N, so that a single-GPU machine skips the NCCL tests across processes
# (NCCL refuses two ranks on one GPU) instead of failing them.
# usage: needs_gpus.sh N GPU_PROBE PROGRAM [ARGS...]
set -uo pipefail
need=$1
probe=$2
shift 2
have=$("$probe" --count 2>/dev/null || true)
have=${have:-0}
if [ "$have" -lt "$need" ]; then
  echo "needs_gpus.sh: $need GPUs needed, $have present; skipping"
  exit 77
fi
exec "$@"
