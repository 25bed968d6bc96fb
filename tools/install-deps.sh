#!/usr/bin/env bash
# Installs Strata's build and test dependencies from Debian 12 packages.
# Idempotent: packages already present are skipped, and apt-get is only
# invoked when something is missing. Runs as root or through sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libboost-dev            # Boost.DLL (header-only) for plugin loading
  nlohmann-json3-dev      # configuration parsing
  libspdlog-dev           # logging
  libcli11-dev            # the strata command line
  libdnnl-dev             # oneDNN for the CPU plugin
  libsleef-dev            # SLEEF: the CPU plugin's vectorised exp, log, tanh, sigmoid (f32)
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev        # bench/
  libopenblas-dev         # peer for the GEMM benchmark
  zlib1g-dev              # the examples read data/digits.csv.gz
  libvalijson-dev         # tests: JSON Schema validation of every test configuration
  libssl-dev              # libcrypto: SHA-256 of pinned plugins (plugins.pins)
  libgloo-dev             # distributed/: Gloo collectives for process groups (STRATA_WITH_DISTRIBUTED)
  libvulkan-dev glslc     # the Vulkan plugin: loader and the GLSL->SPIR-V compiler
  mesa-vulkan-drivers     # lavapipe, so the Vulkan tests run on a CPU-only machine
  hipcc libamdhip64-dev   # the HIP plugin, built from the CUDA kernel sources; no AMD GPU needed to build
  clang libclang-rt-14-dev libomp-dev  # the fuzz preset: clang, libFuzzer + sanitizers, OpenMP for the CPU plugin
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
