#!/usr/bin/env bash
# First command of the README: install what is missing, build Release, run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target kiln_cli
exec ./build/release/tools/kiln/kiln bench "$@"
