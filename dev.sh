#!/usr/bin/env bash
# dcpp developer entry point: ./dev.sh demo | test | plan ARGS | bench ARGS | build
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${DCPP_BUILD_DIR:-build}
# Debian packages the build needs (the CUDA toolkit is optional and not installed here).
PACKAGES=(meson ninja-build pkg-config g++ libfmt-dev librange-v3-dev doctest-dev
          nlohmann-json3-dev libcli11-dev libopenmpi-dev openmpi-bin clang-format ccache)

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

build() {
  ensure_packages
  if [ ! -f "$BUILD_DIR/build.ninja" ]; then
    say "configuring $BUILD_DIR"
    meson setup "$BUILD_DIR" --buildtype=debugoptimized >"$BUILD_DIR.setup.log" 2>&1 ||
      { cat "$BUILD_DIR.setup.log" >&2; exit 1; }
  fi
  say "building"
  meson compile -C "$BUILD_DIR" >"$BUILD_DIR.compile.log" 2>&1 || { tail -60 "$BUILD_DIR.compile.log" >&2; exit 1; }
}

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
  demo)
    build
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
  plan)
    build
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
      *)
        "$BUILD_DIR/bench/bench_planner" "$@"
        echo
        "$BUILD_DIR/bench/bench_route"
        echo
        exec "$BUILD_DIR/bench/bench_kernels"
        ;;
    esac
    ;;
  build)
    build
    ;;
  *)
    echo "usage: ./dev.sh demo | test [MESON TEST ARGS] | plan ARGS | bench [planner|route|kernels] [ARGS] | build" >&2
    exit 2
    ;;
esac
