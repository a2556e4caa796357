#!/usr/bin/env bash
# Installs Kiln's build dependencies from Debian's packages when any is missing.
# Needs root or sudo (only when something is actually missing).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libopenblas-openmp-dev   # BLAS for matrix products, sharing OpenMP's thread pool
  libsleef-dev             # vectorised transcendental math
  libgloo-dev              # collectives between processes (kiln::distributed)
  libdnnl-dev              # oneDNN: float32 convolutions (src/ops/conv_onednn.cpp)
  redis-server iproute2     # the two-machine distributed test (a rendezvous store, namespaces)
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  graphviz                 # `kiln report` draws graphs with dot
  chromium                 # the report's browser test loads the page headless
  python3-dev python3-venv # the Python package (pip install .) and its tests
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "[setup] all dependencies are installed"
  exit 0
fi

echo "[setup] installing: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "[setup] need root or sudo to install packages" >&2; exit 1; }
  SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
