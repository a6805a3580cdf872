#!/usr/bin/env bash
# dcpp as a consumer sees it: installs dcpp (headers and package files only) into a scratch
# prefix, then builds and runs tests/consumers/consumer.cpp four ways: CMake find_package,
# pkg-config, plain -I with the documented flags, and a Meson subproject (which must build
# nothing of dcpp's own). Also: a C++17 compile stops at dcpp's #error. run.sh SOURCE_ROOT WORKDIR
set -euo pipefail
src=$(cd "$1" && pwd)
work=$2
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
prefix=$work/prefix
cxx=${CXX:-c++}
off=(-Dexamples=disabled -Dtests=disabled -Dbench=disabled -Dcuda=disabled -Dnccl=disabled
     -Dmpi=disabled -Dpython=disabled)
step() { printf '==> %s\n' "$*"; }
expect_line() { # the consumer's one line
  local out
  out=$("$@")
  echo "$out"
  [[ $out == "dcpp 0.1.0 consumer: 8 samples in "*" micro-batches" ]] ||
    { echo "unexpected output from $*" >&2; exit 1; }
}

step "install dcpp into $prefix (headers and package files)"
meson setup "$work/dcpp-build" "$src" --prefix "$prefix" --libdir lib "${off[@]}" >"$work/setup.log" 2>&1 ||
  { cat "$work/setup.log"; exit 1; }
meson install -C "$work/dcpp-build" >"$work/install.log" 2>&1 || { cat "$work/install.log"; exit 1; }
test -f "$prefix/include/dcpp/dcpp.hpp"
test -f "$prefix/lib/cmake/dcpp/dcppConfig.cmake"
test -f "$prefix/lib/pkgconfig/dcpp.pc"
test -f "$prefix/share/dcpp/kernels/attention/ring_attention_instances.cu"
if find "$prefix/include" -name '*_instances.*' | grep -q .; then
  echo "kernel instance sources installed under include/" >&2; exit 1
fi
if [ -d "$prefix/bin" ]; then echo "programs installed: $(ls "$prefix/bin")" >&2; exit 1; fi

step "CMake: find_package(dcpp) against the install"
cmake -S "$src/tests/consumers/cmake" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; exit 1; }
cmake --build "$work/cmake" >>"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; exit 1; }
# C++20 without GNU extensions' contraction: the flags dcpp::dcpp puts on the consumer
grep -q -- '-std=gnu++20\|-std=c++20' "$work/cmake/compile_commands.json"
grep -q -- '-ffp-contract=off' "$work/cmake/compile_commands.json"
expect_line "$work/cmake/consumer"

step "pkg-config"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046
$cxx -std=c++20 "$src/tests/consumers/consumer.cpp" -o "$work/pc_consumer" $(pkg-config --cflags --libs dcpp)
expect_line "$work/pc_consumer"
# the kernels' sources and nvcc flags are there for a consumer's nvcc
test -f "$(pkg-config --variable=kernel_sources dcpp)/attention/ring_attention_instances.cu"
pkg-config --variable=nvcc_flags dcpp | grep -q -- '--expt-relaxed-constexpr'

step "plain -I (docs/install.md's flags)"
$cxx -std=c++20 -ffp-contract=off -pthread -I"$prefix/include" "$src/tests/consumers/consumer.cpp" \
  -o "$work/plain_consumer" -lfmt
expect_line "$work/plain_consumer"

step "below C++20: dcpp's #error"
if $cxx -std=c++17 -fsyntax-only -I"$prefix/include" "$src/tests/consumers/consumer.cpp" \
  >"$work/cxx17.log" 2>&1; then
  echo "a C++17 compile of dcpp succeeded" >&2; exit 1
fi
# the first error the user reads is dcpp's
grep -m1 'error' "$work/cxx17.log" | grep -q "dcpp needs C++20" || { head -20 "$work/cxx17.log"; exit 1; }

step "Meson subproject"
mkdir -p "$work/meson/subprojects"
cp "$src/tests/consumers/meson/meson.build" "$work/meson/"
cp "$src/tests/consumers/consumer.cpp" "$work/"
ln -s "$src" "$work/meson/subprojects/dcpp"
meson setup "$work/meson/build" "$work/meson" >"$work/meson.log" 2>&1 || { cat "$work/meson.log"; exit 1; }
meson compile -C "$work/meson/build" >>"$work/meson.log" 2>&1 || { cat "$work/meson.log"; exit 1; }
expect_line "$work/meson/build/consumer"
# the subproject built nothing of its own: no objects, libraries or programs of dcpp
built=$(find "$work/meson/build/subprojects" -type f \( -name '*.o' -o -name '*.a' -o -perm -u+x \) 2>/dev/null || true)
[ -z "$built" ] || { echo "the subproject built: $built" >&2; exit 1; }
step "all consumers built and ran"
