#!/usr/bin/env bash
# A repro folder rebuilds against an installed Kiln and still fails (docs/testing.md).
#   scripts/repro_rebuild_check.sh PREFIX KILN_PROGRAM
# For each injected bug (KILN_TESTING_ONLY_INJECT_BUG: tanh crashes / tanh miscomputes), `kiln
# fuzz --out` writes minified repros; the first one is built with cmake against PREFIX and must
# exit 1 (REPRODUCED) with the bug injected and 0 without it.
set -euo pipefail
prefix=$1
kiln=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for bug in tanh:crash tanh:accuracy; do
  out="$work/${bug/:/_}"
  status=0
  KILN_TESTING_ONLY_INJECT_BUG=$bug "$kiln" fuzz --programs 30 --seed 1 --backend eager \
    --out "$out" >"$out.log" 2>&1 || status=$?
  [ "$status" = 1 ] || { echo "[repro] $bug: kiln fuzz exited $status, expected findings"; cat "$out.log"; exit 1; }
  repro=$(ls -d "$out"/*_repros/*/minified | head -n 1)
  [ -n "$repro" ] || { echo "[repro] $bug: no minified repro written"; cat "$out.log"; exit 1; }
  cmake -S "$repro" -B "$work/build_${bug/:/_}" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$work/build_${bug/:/_}" >/dev/null
  status=0
  KILN_TESTING_ONLY_INJECT_BUG=$bug "$work/build_${bug/:/_}/repro" >"$work/run.log" 2>&1 || status=$?
  grep -q REPRODUCED "$work/run.log" && [ "$status" = 1 ] ||
    { echo "[repro] $bug: the rebuilt repro did not reproduce (exit $status)"; cat "$work/run.log"; exit 1; }
  "$work/build_${bug/:/_}/repro" >"$work/run.log" 2>&1 ||
    { echo "[repro] $bug: the rebuilt repro fails without the injected bug"; cat "$work/run.log"; exit 1; }
  echo "[repro] $bug: minified repro ($(grep "^ops:" "$repro/repro.txt")) rebuilt from its folder fails with the bug, passes without"
done
