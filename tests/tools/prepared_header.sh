#!/bin/sh
# `kiln prepare` precompiles generated code's runtime header beside the library, and an inductor
# compile in a fresh cache folder uses that one instead of building its own (~4 s) there.
# Exit 77 (ctest: skipped) when the C++ compiler is not GCC (no precompiled header then).
# usage: prepared_header.sh KILN INDUCTOR_EXAMPLE WORK_DIR
set -eu
kiln=$1
example=$2
work=$3

rm -rf "$work"
mkdir -p "$work"
"$kiln" prepare >"$work/prepare.out"
cat "$work/prepare.out"
if grep -q "nothing to prepare" "$work/prepare.out"; then exit 77; fi
grep -q "^kiln prepare: \(up to date\|precompiled the runtime header\)" "$work/prepare.out" || {
  echo "FAIL: kiln prepare said neither 'up to date' nor 'precompiled'"
  exit 1
}
# A second run finds it in place.
"$kiln" prepare | grep -q "^kiln prepare: up to date" || { echo "FAIL: not up to date"; exit 1; }

KILN_CACHE_DIR="$work/cache" "$example" >"$work/example.out" 2>&1 || {
  echo "FAIL: the example failed:"
  cat "$work/example.out"
  exit 1
}
ls "$work"/cache/inductor/*.so >/dev/null 2>&1 || {
  echo "FAIL: the example compiled no module into the fresh cache folder"
  exit 1
}
if ls -d "$work"/cache/inductor/pch-* >/dev/null 2>&1; then
  echo "FAIL: the fresh cache built its own precompiled header instead of the prepared one"
  exit 1
fi
echo "ok: modules compiled with the prepared header, none built in the cache"
