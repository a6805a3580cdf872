#!/usr/bin/env bash
# Fails if any C++ or CUDA source in the tree differs from what .clang-format makes of it.
set -u
root=$1 clang_format=$2
cd "$root" || exit 1
files=$(git ls-files '*.hpp' '*.cpp' '*.cuh' '*.cu' 2>/dev/null || find include kernels examples tests bench -name '*.[ch]pp' -o -name '*.cu*')
[ -n "$files" ] || { echo "no sources"; exit 77; }
# shellcheck disable=SC2086
if ! "$clang_format" --dry-run --Werror $files; then
  echo "run: clang-format -i \$(git ls-files '*.hpp' '*.cpp' '*.cuh' '*.cu')"
  exit 1
fi
echo "all $(wc -w <<<"$files") sources formatted"
