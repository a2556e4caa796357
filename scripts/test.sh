#!/usr/bin/env bash
# Second command of the README: install what is missing, build, and run the whole test suite.
#   scripts/test.sh          Release build: unit + conformance tests, install/find_package check,
#                            the Python package's tests (pytest)
#   scripts/test.sh --asan   the same tests under AddressSanitizer + UndefinedBehaviorSanitizer
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

preset=release
[ "${1:-}" = "--asan" ] && preset=asan

start=$(date +%s)
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset"
ctest --preset "$preset" -j2

if [ "$preset" = release ]; then
  # The library must be usable through find_package(Kiln) after cmake --install.
  prefix=$(mktemp -d)
  trap 'rm -rf "$prefix"' EXIT
  cmake --install build/release --prefix "$prefix" >/dev/null
  cmake -S examples/find_package -B "$prefix/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  cmake --build "$prefix/consumer" >/dev/null
  # Its compiled function builds C++ against the headers installed beside the library, not
  # against this source tree (output_code names them).
  KILN_CACHE_DIR="$prefix/cache" KILN_LOGS=output_code "$prefix/consumer/consumer" 2>"$prefix/consumer.log"
  grep -qF "(headers from $(cd "$prefix" && pwd -P)/share/kiln/runtime)" "$prefix/consumer.log" || {
    echo "[test] the installed Kiln did not compile against its installed runtime headers:" >&2
    head -c 2000 "$prefix/consumer.log" >&2
    exit 1
  }
  # With GCC, cmake --install precompiled the runtime header beside the installed library
  # (kiln prepare), and the consumer's fresh cache used it rather than building its own.
  if "${CXX:-c++}" --version 2>/dev/null | grep -q "Free Software Foundation"; then
    ls -d "$prefix"/lib*/kiln/precompiled/pch-* >/dev/null 2>&1 || {
      echo "[test] cmake --install left no precompiled runtime header (kiln prepare)" >&2
      exit 1
    }
    if ls -d "$prefix"/cache/inductor/pch-* >/dev/null 2>&1; then
      echo "[test] the installed Kiln built a precompiled header in its cache instead of using" \
        "the one cmake --install prepared" >&2
      exit 1
    fi
  fi
  # A repro folder written by the library rebuilds against the installed Kiln and still fails.
  scripts/repro_rebuild_check.sh "$prefix" build/release/tools/kiln/kiln
  # The Python package: pip install . into a throwaway virtualenv, then pytest.
  scripts/python_test.sh
fi
echo "[test] $preset: passed in $(( $(date +%s) - start )) s"
