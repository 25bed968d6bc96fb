#!/usr/bin/env bash
# Runs the GPU benchmarks and their PyTorch peer back to back on one machine
# (docs/performance.md, "GPU"): bench_gpu (Google Benchmark, medians of
# REPETITIONS runs) and bench/gpu_torch_peer.py on the same device.
#   tools/run-gpu-bench.sh [build dir] [device]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/default}
device=${2:-cuda:0}
repetitions=${REPETITIONS:-5}
STRATA_BENCH_GPU=$device "$build/bin/bench_gpu" --benchmark_repetitions="$repetitions" \
  --benchmark_report_aggregates_only=true --benchmark_display_aggregates_only=true
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  python3 bench/gpu_torch_peer.py --device "$device" --repetitions "$repetitions"
else
  echo "run-gpu-bench: PyTorch with a GPU is not available here; no peer figures" >&2
fi
