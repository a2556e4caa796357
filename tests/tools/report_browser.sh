#!/bin/sh
# The HTML compile report in a real browser: a debug run of the debug_dump example (a graph
# break, recompiles, an inductor function), `kiln report` on it, and the page loaded in headless
# Chromium. The DOM that Chromium built must hold every section, a drawn graph and the break's
# source line. Exit 77 (ctest: skipped) when chromium is not installed.
# usage: report_browser.sh KILN DEBUG_DUMP_EXAMPLE WORK_DIR
set -eu
kiln=$1
example=$2
work=$3

# The dump (through KILN_DEBUG_DIR) and the page are made and checked even without a browser.
rm -rf "$work"
mkdir -p "$work/dumps"
KILN_DEBUG_DIR="$work/dumps" "$example" >"$work/example.out"
run=$(ls -d "$work"/dumps/run-* | head -n 1)
[ -d "$run" ] || { echo "FAIL: the example wrote no run folder"; exit 1; }
grep -q "debug run: $run" "$work/example.out" || { echo "FAIL: debug_run_dir() is not $run"; exit 1; }
"$kiln" report "$run" -o "$work/report.html"
grep -q 'id="graphs"' "$work/report.html" || { echo "FAIL: no graphs section"; exit 1; }

browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "SKIPPED: chromium is not installed (scripts/setup.sh installs it)"
  exit 77
fi

# --dump-dom prints the DOM after the page has loaded and been laid out.
"$browser" --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$work/profile" \
  --dump-dom "file://$work/report.html" >"$work/dom.html" 2>"$work/chromium.err" || {
  echo "FAIL: chromium could not load the page"; cat "$work/chromium.err"; exit 1; }

fail=0
expect() {  # expect COUNT_AT_LEAST PATTERN WHAT
  n=$(grep -o -- "$2" "$work/dom.html" | wc -l)
  if [ "$n" -lt "$1" ]; then
    echo "FAIL: $3: expected at least $1 of '$2' in the DOM, found $n"
    fail=1
  fi
}
for id in summary functions breaks recompiles graphs compile-times; do
  expect 1 "id=\"$id\"" "section #$id"
done
expect 2 '<tr class="function"' "both compiled functions"
expect 1 '<tr class="break"' "the graph break"
expect 2 '<tr class="recompile"' "the recompiles"
expect 6 '<article class="graph"' "every compiled graph"
expect 6 '<svg' "graphs drawn by Graphviz"
expect 1 'item&lt;float&gt;();  // graph break: item()' "the break's source line"
expect 1 'Backend output (inductor.cpp)' "inductor's generated source"
expect 1 'Backend output (eager_plan.txt)' "the eager backend's plan"
if [ "$fail" -ne 0 ]; then
  echo "page: $work/report.html"
  exit 1
fi
echo "OK: $work/report.html loaded in $("$browser" --version 2>/dev/null | head -n 1)"
