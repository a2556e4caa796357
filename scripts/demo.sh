#!/usr/bin/env bash
# First command of the README: install what is missing, build Release, run the main job:
# train a character-level GPT on the shipped text (data/), then sample from the checkpoint.
# Extra arguments go to `kiln train` (e.g. --steps 200); `kiln bench` times the workloads.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake --preset release >/dev/null
# kiln_prepare precompiles the header generated code includes, so the demo's first compile
# does not pay for it (a fresh cache would otherwise spend ~20 s on it inside the first graph).
cmake --build --preset release --target kiln_cli kiln_prepare
kiln=./build/release/tools/kiln/kiln
"$kiln" train --out build/kiln-gpt.safetensors "$@"
echo
echo "[demo] a sample from the checkpoint (kiln sample --checkpoint build/kiln-gpt.safetensors):"
"$kiln" sample --checkpoint build/kiln-gpt.safetensors --tokens 300 --prompt "It is a truth"
