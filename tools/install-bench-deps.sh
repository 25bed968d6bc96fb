#!/usr/bin/env bash
# Installs the peers the benchmarks in bench/ compare against (not needed to
# build or test Strata): libtorch from Debian, with OpenBLAS as its BLAS.
# Idempotent, like install-deps.sh.
set -euo pipefail
"$(dirname "$0")/install-deps.sh"
packages=(libtorch-dev libopenblas-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && { echo "install-bench-deps: all present"; exit 0; }
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
