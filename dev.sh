#!/usr/bin/env bash
# dcpp developer entry point: ./dev.sh demo | test | plan ARGS | bench ARGS | build
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

# build [TARGET...]: configures once, then compiles the given meson targets (the demo and the CLI
# need dcpp-plan alone, not the ~280 targets of the test suites), or everything.
build() {
  ensure_packages
  # with a CUDA toolkit, the kernels suite reads the kernels' SASS: make sure nvdisasm is there
  if [ $# -eq 0 ] && command -v nvcc >/dev/null; then find_nvdisasm >/dev/null; fi
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    say "configuring $BUILD_DIR"
    meson setup "$BUILD_DIR" --buildtype=debugoptimized >"$BUILD_DIR.setup.log" 2>&1 ||
      { cat "$BUILD_DIR.setup.log" >&2; exit 1; }
  fi
  say "building${1:+ $*}"
  meson compile -C "$BUILD_DIR" "$@" >"$BUILD_DIR.compile.log" 2>&1 ||
    { tail -60 "$BUILD_DIR.compile.log" >&2; exit 1; }
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
    echo "usage: ./dev.sh demo | test [MESON TEST ARGS] | plan ARGS | bench [planner|route|kernels|python] [ARGS] | sass [--arch sm_80] [--check] [--filter TEXT] | build" >&2
    exit 2
    ;;
esac
