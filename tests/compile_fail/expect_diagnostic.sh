#!/usr/bin/env bash
# Compiles SOURCE with the given compiler command and include directory; passes only if the
# compilation fails and the diagnostic names EXPECTED (the concept a broken policy misses).
# usage: expect_diagnostic.sh SOURCE EXPECTED INCLUDE_DIR COMPILER [ARGS...]
set -u
source_file=$1 expected=$2 include_dir=$3
shift 3
output=$("$@" -std=c++20 -fsyntax-only -I"$include_dir" $(pkg-config --cflags fmt nlohmann_json 2>/dev/null) "$source_file" 2>&1)
status=$?
if [ "$status" -eq 0 ]; then
  echo "FAIL: $source_file compiled, but it must not"
  exit 1
fi
if ! grep -q -- "$expected" <<<"$output"; then
  echo "FAIL: the diagnostic for $source_file does not name '$expected':"
  head -40 <<<"$output"
  exit 1
fi
echo "ok: $source_file fails to compile and the diagnostic names '$expected'"
