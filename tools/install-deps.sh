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
  python3-dev python3-venv python3-numpy  # the Python module (python/): headers, its virtual environment, NumPy
  openmpi-bin             # launch tests: `mpirun -np 3` starts the digits demo's ranks (no MPI library is linked)
  slurmctld slurmd slurm-client munge  # launch tests: a one-node Slurm cluster started by the test runs `srun -n 2`
)

# The Python module's build and test tools, from PyPI (Debian 12 has no
# nanobind), pinned, in a virtual environment of the system Python that
# CMake finds (python/CMakeLists.txt) and that also sees Debian's NumPy.
venv="$(cd "$(dirname "$0")/.." && pwd)/python/.venv"
pip_pins=(nanobind==3.1.0 pytest==8.3.4)
python_tools() {
  if "$venv/bin/python3" - "${pip_pins[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(0 if all(version(p.split("==")[0]) == p.split("==")[1] for p in sys.argv[1:]) else 1)
PY
  then
    echo "install-deps: python/.venv has ${pip_pins[*]}"
    return
  fi
  echo "install-deps: making python/.venv with ${pip_pins[*]}"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check "${pip_pins[@]}"
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  python_tools
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
python_tools
