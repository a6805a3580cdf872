#!/usr/bin/env bash
# dcpp developer entry point: ./dev.sh demo | test | plan ARGS | bench ARGS | gpu | sass | build
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${DCPP_BUILD_DIR:-build}
# Debian packages the build needs (the CUDA toolkit is optional and not installed here).
PACKAGES=(meson ninja-build pkg-config g++ libfmt-dev doctest-dev
          nlohmann-json3-dev libcli11-dev libopenmpi-dev openmpi-bin clang-format ccache
          python3 python3-dev python3-venv cmake clang libclang-rt-dev)

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

ensure_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then
    say "installing ${missing[*]} (sudo)"
    sudo apt-get update -qq >/dev/null
    sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "dev.sh: missing packages: ${missing[*]}" >&2
    echo "install them with: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
}

# nvdisasm is not part of the CUDA install here; the PyPI wheel nvidia-cuda-nvdisasm ships it.
find_nvdisasm() {
  if command -v nvdisasm >/dev/null; then command -v nvdisasm; return 0; fi
  local found
  found=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for root in roots:
    for path in glob.glob(os.path.join(root, "nvidia", "*", "bin", "nvdisasm")):
        print(path)
        raise SystemExit
PY
)
  if [ -z "$found" ]; then
    say "installing nvdisasm (PyPI: nvidia-cuda-nvdisasm)"
    python3 -m pip install -q nvidia-cuda-nvdisasm >&2 || { echo "dev.sh: cannot install nvidia-cuda-nvdisasm" >&2; exit 1; }
    found=$(python3 -c 'import glob, os, site
print(next(iter(sorted(p for r in site.getsitepackages() + [site.getusersitepackages()] for p in glob.glob(os.path.join(r, "nvidia", "*", "bin", "nvdisasm")))), ""))')
  fi
  [ -n "$found" ] || { echo "dev.sh: nvdisasm not found after installing nvidia-cuda-nvdisasm" >&2; exit 1; }
  echo "$found"
}

# cuDNN 9 and its frontend headers for the cuDNN attention policy (Meson's `cudnn` feature): the
# PyPI packages, installed where nvcc is and they are not (about 530 MB, once per machine).
ensure_cudnn() {
  python3 - <<'PY' 2>/dev/null && return 0
import os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()]
ok = any(os.path.isfile(os.path.join(r, "include", "cudnn_frontend.h")) for r in roots) and \
     any(os.path.isfile(os.path.join(r, "nvidia", "cudnn", "lib", "libcudnn.so.9")) for r in roots)
sys.exit(0 if ok else 1)
PY
  say "installing cuDNN and its frontend headers (PyPI: nvidia-cudnn-cu13, nvidia-cudnn-frontend)"
  python3 -m pip install -q nvidia-cudnn-cu13 nvidia-cudnn-frontend >&2 ||
    say "could not install the cuDNN packages: the cuDNN policy is left out of the build"
}

# build [TARGET...]: configures once, then compiles the given meson targets (the demo and the CLI
# need dcpp-plan alone, not the ~280 targets of the test suites), or everything.
build() {
  configure "$@"
  say "building${1:+ $*}"
  meson compile -C "$BUILD_DIR" "$@" >"$BUILD_DIR.compile.log" 2>&1 ||
    { tail -60 "$BUILD_DIR.compile.log" >&2; exit 1; }
}

# configure [TARGET...]: the packages, then meson setup once (the targets say what is wanted)
configure() {
  ensure_packages
  # with a CUDA toolkit, the kernels suite reads the kernels' SASS (nvdisasm) and the cuDNN
  # policy compiles against cuDNN: make sure both are there before meson looks for them
  if { [ $# -eq 0 ] || [ "$1" = gpu ]; } && command -v nvcc >/dev/null; then
    find_nvdisasm >/dev/null
    ensure_cudnn
  fi
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    say "configuring $BUILD_DIR"
    meson setup "$BUILD_DIR" --buildtype=debugoptimized >"$BUILD_DIR.setup.log" 2>&1 ||
      { cat "$BUILD_DIR.setup.log" >&2; exit 1; }
  fi
}

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
  demo)
    build dcpp-plan
    mkdir -p out
    say "planning the embedded sample workload (examples/data/sft_long_tail.txt) on 32 ranks"
    "$BUILD_DIR/examples/dcpp-plan" examples/data/sft_long_tail.txt --world-size 32 \
      --max-tokens-per-rank 8192 --compare --json out/demo_plan.json --svg out/demo_plan.svg
    ;;
  test)
    build
    say "running every test suite"
    meson test -C "$BUILD_DIR" --print-errorlogs "$@"
    ;;
  gpu)
    # The first GPU hour (docs/kernels.md, "The first hour on a GPU"): builds the GPU suite's
    # programs alone, then runs them, the compute-sanitizer checks and the kernel benchmark, and
    # writes out/gpu_report.json. Without a device: builds, then "no CUDA device", exit 77.
    command -v nvcc >/dev/null || { echo "dev.sh gpu: needs the CUDA toolkit (nvcc)" >&2; exit 1; }
    configure gpu
    # the GPU suite needs CUDA and NCCL: say so rather than run a suite that silently shrank
    if ! meson introspect "$BUILD_DIR" --targets | grep -q '"name": "gpu_probe"'; then
      echo "dev.sh gpu: $BUILD_DIR has no GPU suite: it needs CUDA and NCCL (see $BUILD_DIR.setup.log" \
        "and meson configure $BUILD_DIR | grep -i -e cuda -e nccl)" >&2
      exit 1
    fi
    build gpu
    mkdir -p out
    if ! "$BUILD_DIR/tests/gpu_probe" >out/gpu_devices.txt; then
      cat out/gpu_devices.txt
      echo "dev.sh gpu: no CUDA device" >&2
      exit 77
    fi
    cat out/gpu_devices.txt
    say "running the gpu suite (multi-GPU tests skip with fewer GPUs than ranks)"
    status=0
    meson test -C "$BUILD_DIR" --suite gpu --no-rebuild --print-errorlogs "$@" || status=1
    say "kernel benchmark on random data"
    "$BUILD_DIR/bench/bench_kernels_gpu" --json out/gpu_bench.json || status=1
    python3 tools/gpu_report.py --devices out/gpu_devices.txt \
      --tests "$BUILD_DIR/meson-logs/testlog.json" --bench out/gpu_bench.json \
      --out out/gpu_report.json || status=1
    exit $status
    ;;
  sass)
    # The shipped attention kernels' machine code (sm_90 unless --arch sm_80): registers, spills,
    # shared memory, blocks per SM and the main loop's instruction mix. See docs/kernels.md.
    command -v nvcc >/dev/null || { echo "dev.sh: sass needs nvcc (the CUDA toolkit)" >&2; exit 1; }
    ensure_packages
    nvd=$(find_nvdisasm)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    g++ -std=c++20 -Iinclude -Ikernels tools/attention_config.cpp -o "$tmp/attention_config"
    "$tmp/attention_config" >"$tmp/config.txt"
    python3 tools/sass_report.py --nvcc nvcc --nvdisasm "$nvd" --root . --config "$tmp/config.txt" \
      --filter attention_ "$@" kernels/dcpp/kernels/attention/ring_attention_instances.cu
    ;;
  plan)
    build dcpp-plan
    exec "$BUILD_DIR/examples/dcpp-plan" "$@"
    ;;
  bench)
    build
    case "${1:-}" in
      planner | route | kernels)
        which="$1"
        shift
        exec "$BUILD_DIR/bench/bench_$which" "$@"
        ;;
      python)
        shift
        python3 python/tests/run.py . "$BUILD_DIR" --install-only >&2
        exec "$BUILD_DIR/python-venv/bin/python" bench/bench_python.py "$@"
        ;;
      *)
        "$BUILD_DIR/bench/bench_planner" "$@"
        echo
        "$BUILD_DIR/bench/bench_route"
        echo
        "$BUILD_DIR/bench/bench_kernels"
        echo
        python3 python/tests/run.py . "$BUILD_DIR" --install-only >&2
        exec "$BUILD_DIR/python-venv/bin/python" bench/bench_python.py
        ;;
    esac
    ;;
  build)
    build
    ;;
  *)
    echo "usage: ./dev.sh demo | test [MESON TEST ARGS] | plan ARGS | bench [planner|route|kernels|python] [ARGS] | gpu [MESON TEST ARGS] | sass [--arch sm_80] [--check] [--filter TEXT] | build" >&2
    exit 2
    ;;
esac
