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
"$kiln" prepare >"$work/again.out"
grep -q "^kiln prepare: up to date" "$work/again.out" || { echo "FAIL: not up to date"; exit 1; }

# A damaged precompiled header (cut short, as by a full disk) is found by its checksum and
# rebuilt by the next `kiln prepare`. (A new file renamed over it; CTest runs this test alone,
# since a compile of another test could be reading it.)
root=$(sed -n 's/^kiln prepare: up to date: //p' "$work/again.out")
gch="$root/backends/inductor/runtime/inductor_runtime.h.gch"
[ -f "$gch" ] || { echo "FAIL: no precompiled header at $gch"; exit 1; }
size=$(wc -c <"$gch")
head -c $((size / 2)) "$gch" >"$gch.cut" && mv "$gch.cut" "$gch"
"$kiln" prepare >"$work/repair.out"
cat "$work/repair.out"
grep -q "^kiln prepare: repaired (.* has $((size / 2)) bytes, not $size): precompiled" "$work/repair.out" || {
  echo "FAIL: kiln prepare did not repair the cut header"
  exit 1
}
# (GCC's output size varies from build to build: compare with the size its checksum file records.)
[ "$(wc -c <"$gch")" -eq "$(cut -d' ' -f1 "$gch.sum")" ] || { echo "FAIL: the repaired header is not whole"; exit 1; }
"$kiln" prepare | grep -q "^kiln prepare: up to date" || { echo "FAIL: not up to date after repair"; exit 1; }

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
