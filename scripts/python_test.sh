#!/usr/bin/env bash
# The Python package's tests (docs/python.md), run by scripts/test.sh: `pip install .` of this
# checkout into a throwaway virtualenv, then pytest on tests/python against what was installed.
# The package's build folder is kept (build/python): a second run rebuilds only what changed,
# and a first one takes the library's objects from ccache after the C++ build.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install "scikit-build-core>=0.10" "nanobind>=2.4" numpy pytest
"${pip[@]}" install --no-build-isolation -C build-dir=build/python .
# From tests/python, so that `import kiln` finds the installed package, not python/kiln.
cache="$PWD/build/kiln-cache"
(cd tests/python && KILN_CACHE_DIR="$cache" "$work/venv/bin/python" -m pytest -q -p no:cacheprovider)
echo "[python] passed in $(( $(date +%s) - start )) s"
