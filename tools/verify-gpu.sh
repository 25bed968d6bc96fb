#!/usr/bin/env bash
# verify-gpu.sh — one prepared check of Strata on a machine with an NVIDIA
# GPU, in minutes, written as one Markdown report (docs/testing.md, "A GPU
# in minutes"). Time on a GPU machine is short and rare: everything is built
# and packed here, and the GPU machine only runs.
#
#   tools/verify-gpu.sh pack [build dir]
#       On the build machine (no GPU needed), after
#       `cmake --build --preset default`: writes build/gpu-pack/ (under
#       64 MiB): the programs and libraries of the build the check runs,
#       stripped, and the shared libraries they link that a GPU image
#       without Debian's -dev packages lacks.
#   tools/verify-gpu.sh run [--report FILE]
#       On the GPU machine, in a copy of this repository holding
#       build/gpu-pack/: unpacks it and runs every step on cuda:0.
#   tools/verify-gpu.sh --dry-run [--report FILE] [build dir]
#       The same steps against cpu:0 with the local build, so that the
#       script itself is tested without a GPU (CTest: verify_gpu_dry_run).
#
# Steps, each bounded in time: the device-generic suites (tensor_test,
# nn_test, autograd_engine_test) with the device as STRATA_TEST_DEVICE; the
# CUDA plugin's own tests; `strata plugin check` on its plugin; NCCL
# collectives on a one-rank communicator, and on two ranks when the machine
# has two GPUs; the Vulkan plugin on the NVIDIA driver when its ICD is
# installed; bench_gpu against PyTorch (bench/gpu_torch_peer.py) in the same
# run, with the ratios and targets (bench/gpu_ratios.py).
#
# A step that cannot run here (no second GPU, no Vulkan ICD, no PyTorch)
# is reported as skipped with the reason. The exit status is non-zero only
# when a step that ran failed. The report: --report FILE, else
# $OUT/verify-gpu.md when OUT is set (the device machine's output folder),
# else build/verify-gpu.md.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

mode=""
report=""
build=build/default
while [ $# -gt 0 ]; do
  case "$1" in
    pack | run) mode=$1 ;;
    --dry-run) mode=dry-run ;;
    --report) report=$2; shift ;;
    -h | --help) sed -n '2,36p' "$0"; exit 0 ;;
    -*) echo "verify-gpu: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) build=$1 ;;
  esac
  shift
done
if [ -z "$mode" ]; then
  echo "verify-gpu: say pack, run or --dry-run (see --help)" >&2
  exit 2
fi
pack_dir=build/gpu-pack

# The programs the steps run (bin/), besides lib/, share/ and the test plugins.
programs=(tensor_test nn_test autograd_engine_test ops_test gpu_plugin_test gpu_kernel_table_test gpu_math_test
          autograd_device_gradients_test strata bench_gpu dist_worker example_digits)
# Libraries every Linux image has (or must take from its own driver).
system_libs='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libcuda\.so|libnvidia)'

# ---------------------------------------------------------------------------
if [ "$mode" = pack ]; then
  set -e
  for p in "${programs[@]}"; do
    [ -x "$build/bin/$p" ] || { echo "verify-gpu: $build/bin/$p is missing: cmake --build --preset default" >&2; exit 2; }
  done
  [ -e "$build/lib/strata/plugins/libstrata_plugin_cuda.so" ] ||
    echo "verify-gpu: warning: no CUDA plugin in $build (nvcc not found at configure time?): the GPU steps will fail" >&2
  rm -rf "$pack_dir"
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' EXIT
  tree="$stage/tree"
  mkdir -p "$tree/bin" "$stage/deps"
  for p in "${programs[@]}"; do cp "$build/bin/$p" "$tree/bin/"; done
  cp -r "$build/lib" "$build/share" "$tree/"
  for d in "$build"/test-plugins*; do [ -d "$d" ] && cp -r "$d" "$tree/"; done
  find "$tree" -name '*.a' -delete
  rm -f "$tree/lib/strata/plugins/libstrata_plugin_hip.so"  # an NVIDIA machine has no use for it
  # Debug information is most of a -g build; the report needs none of it.
  find "$tree" -type f \( -perm -u+x -o -name '*.so*' \) -exec strip --strip-debug {} + 2>/dev/null || true
  # The shared libraries they need from this machine (not those of the build).
  # (ldd fails on the scripts and data among them: not an error here.)
  { find "$tree" -type f \( -perm -u+x -o -name '*.so*' \) -print0 | xargs -0 ldd 2>/dev/null || true; } |
    awk '/=> \// { print $1, $3 }' | sort -u | while read -r name path; do
      case "$path" in "$repo"/* | "$(realpath "$build")"/* | "$stage"/*) continue ;; esac
      [[ "$name" =~ $system_libs ]] && continue
      cp -L "$path" "$stage/deps/$name"
    done
  # Where the build was made: its programs hold that path (RUNPATH, test
  # data), and `run` makes it lead to the unpacked copy.
  echo "$repo" > "$stage/origin"
  echo "$(realpath --relative-to="$repo" "$build")" > "$stage/build"
  git rev-parse HEAD > "$stage/commit" 2>/dev/null || echo unknown > "$stage/commit"
  mkdir -p "$pack_dir"
  tar -C "$stage" -cJf "$pack_dir/pack.tar.xz" tree deps origin build commit
  size=$(du -m "$pack_dir/pack.tar.xz" | cut -f1)
  echo "verify-gpu: $pack_dir/pack.tar.xz, ${size} MiB ($(ls "$stage/deps" | wc -l) shared libraries: $(ls "$stage/deps" | tr '\n' ' '))"
  if [ "$size" -ge 64 ]; then echo "verify-gpu: the pack is over 64 MiB" >&2; exit 1; fi
  echo "verify-gpu: on the GPU machine: tools/verify-gpu.sh run   (carry $pack_dir)"
  exit 0
fi

# ---------------------------------------------------------------------------
# run and --dry-run: the steps.
env_prefix=()
if [ "$mode" = run ]; then
  device=cuda:0
  [ -e "$pack_dir/pack.tar.xz" ] || { echo "verify-gpu: $pack_dir/pack.tar.xz is missing: run 'pack' first" >&2; exit 2; }
  unpacked=$(mktemp -d)
  tar -C "$unpacked" -xJf "$pack_dir/pack.tar.xz"
  origin=$(cat "$unpacked/origin")
  build=$(cat "$unpacked/build")
  mkdir -p "$build"
  cp -r "$unpacked/tree/." "$build/"
  # The build's absolute paths (RUNPATH, test data) lead here.
  if [ "$(realpath -m "$origin")" != "$repo" ] && [ ! -e "$origin" ]; then
    mkdir -p "$(dirname "$origin")" && ln -s "$repo" "$origin" ||
      echo "verify-gpu: cannot link $origin to $repo: tests that read files of the build by path will fail" >&2
  fi
  libs="$unpacked/deps"
  # cuBLAS and NCCL are opened at run time: the CUDA toolkit's, or PyTorch's wheels'.
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && libs="$libs:$d"; done
  wheels=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null || true)
  if [ -n "$wheels" ]; then
    for d in "$wheels"/nvidia/*/lib; do [ -d "$d" ] && libs="$libs:$d"; done
  fi
  env_prefix=(env "LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  nccl=$(for d in ${libs//:/ }; do ls "$d"/libnccl.so.2 2>/dev/null; done | head -1)
  [ -n "$nccl" ] && env_prefix+=("STRATA_NCCL_LIBRARY=$nccl")
else
  device=cpu:0
fi
bin="$build/bin"
plugins="$build/lib/strata/plugins"
# A device case whose device is missing fails instead of skipping
# (docs/testing.md, "Required devices").
export STRATA_REQUIRED_DEVICES=$device
if [ -z "$report" ]; then
  if [ -n "${OUT:-}" ]; then report="$OUT/verify-gpu.md"; else report="$build/../verify-gpu.md"; fi
fi
work=$(mktemp -d)
mkdir -p "$(dirname "$report")"
# The suites' outcome records (tests/common/test_main.cpp) stay out of the
# build's own, which the expected-skip check of a CTest run reads.
export STRATA_TEST_RESULTS_DIR="$work/results"
start=$SECONDS
rows=()
details=()
failed=0

# record <step> <passed|failed|skipped> <detail> [log file]
record() {
  rows+=("| $1 | $2 | $3 |")
  if [ "$2" = failed ]; then
    failed=$((failed + 1))
    [ -n "${4:-}" ] && details+=("<details><summary>$1: the end of its log</summary>

\`\`\`
$(tail -n 60 "$4")
\`\`\`
</details>
")
  fi
  echo "verify-gpu: $1: $2 ($3)"
}

# gtest_step <step> <seconds> <program> [args...]: a GoogleTest program,
# with the variables of step_env; its counts in the report.
step_env=()
gtest_step() {
  local name=$1 limit=$2 program=$3
  shift 3
  local log="$work/${name//[^a-zA-Z0-9]/_}.log" t0=$SECONDS status=0
  if [ ! -x "$bin/$program" ]; then
    # The pack holds every program; a local build may lack one (no nvcc).
    record "$name" "$([ "$mode" = run ] && echo failed || echo skipped)" "$bin/$program is not built here"
    return
  fi
  timeout "$limit" "${env_prefix[@]}" env "${step_env[@]}" "$bin/$program" --gtest_brief=1 "$@" > "$log" 2>&1 ||
    status=$?
  local passed skipped failures
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  failures=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
  local detail="${passed:-0} passed, ${failures:-0} failed, ${skipped:-0} skipped, $((SECONDS - t0)) s"
  if [ "$status" -eq 124 ]; then
    record "$name" failed "timed out after ${limit} s; $detail" "$log"
  elif [ "$status" -ne 0 ]; then
    record "$name" failed "exit $status; $detail$(grep -m5 '^\[  FAILED  \] [A-Z]' "$log" | sed 's/^\[  FAILED  \]/;/' | tr -d '\n')" "$log"
  else
    record "$name" passed "$detail"
  fi
}

# cmd_step <step> <seconds> <command...>: passed when it exits 0.
cmd_step() {
  local name=$1 limit=$2
  shift 2
  local log="$work/${name//[^a-zA-Z0-9]/_}.log" t0=$SECONDS status=0
  timeout "$limit" "${env_prefix[@]}" "$@" > "$log" 2>&1 || status=$?
  if [ "$status" -eq 0 ]; then
    record "$name" passed "$((SECONDS - t0)) s; $(tail -n 1 "$log" | cut -c1-160)"
  else
    record "$name" failed "exit $status after $((SECONDS - t0)) s" "$log"
  fi
}

# --- the machine ---
machine="$work/machine.txt"
{
  echo "host: $(hostname), $(nproc) cores; mode: $mode; device: $device; $(ldd --version 2>&1 | head -1)"
  echo "commit: $(cat "${unpacked:-/nonexistent}/commit" 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
  else
    echo "nvidia-smi: not found (no NVIDIA driver here)"
  fi
  "${env_prefix[@]}" "$bin/strata" devices 2>&1
} > "$machine"
gpus=0
command -v nvidia-smi > /dev/null && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

if [ "$mode" = run ] && ! grep -q "cuda:0" "$machine"; then
  record "cuda:0" failed "no cuda:0 here: 'strata devices' says why" "$machine"
fi

# --- 1. the device-generic suites on the device, and the plugin's own tests ---
# STRATA_VERIFY_GPU_FILTER narrows the suites (the CTest dry run's sample).
filter=()
[ -n "${STRATA_VERIFY_GPU_FILTER:-}" ] && filter=("--gtest_filter=$STRATA_VERIFY_GPU_FILTER")
step_env=("STRATA_TEST_DEVICE=$device")
for suite in tensor_test nn_test autograd_engine_test; do
  gtest_step "$suite on $device" 240 "$suite" "${filter[@]}"
done
step_env=()
param=${device/:/_}
if [ "$mode" = run ]; then
  gtest_step "ops_test on $device" 120 ops_test "--gtest_filter=*/$param"
  gtest_step "autograd_device_gradients_test" 120 autograd_device_gradients_test
  gtest_step "gpu_plugin_test" 60 gpu_plugin_test
  gtest_step "gpu_kernel_table_test" 60 gpu_kernel_table_test
  gtest_step "gpu_math_test" 60 gpu_math_test
else
  gtest_step "ops_test on $device" 120 ops_test "--gtest_filter=Devices/Binary.*/$param"
  gtest_step "gpu_kernel_table_test" 60 gpu_kernel_table_test
fi

# --- 2. strata plugin check ---
plugin_name=cuda
[ "$mode" = dry-run ] && plugin_name=cpu
if [ -e "$plugins/libstrata_plugin_$plugin_name.so" ]; then
  cmd_step "strata plugin check $plugin_name" 120 "$bin/strata" plugin check "$plugins/libstrata_plugin_$plugin_name.so"
else
  record "strata plugin check $plugin_name" failed "$plugins/libstrata_plugin_$plugin_name.so is not in the build"
fi

# --- 3. collectives (NCCL on cuda; the commhost test plugin in the dry run) ---
# "cuda": rank r on cuda:r (dist_worker); commhost:0 is one device that
# every process shares through POSIX shared memory.
coll=(DIST_TEST_DEVICE=cuda)
coll_name="NCCL on cuda:<rank>"
if [ "$mode" = dry-run ]; then
  coll=(DIST_TEST_DEVICE=commhost:0 "STRATA_PLUGIN_PATH=$build/test-plugins-comm")
  coll_name="the commhost test plugin"
fi
cmd_step "collectives on one rank ($coll_name)" 60 env STRATA_LOG_LEVEL=error "${coll[@]}" \
  "$bin/strata" launch -n 1 "$bin/dist_worker" device_collectives
if [ "$mode" = dry-run ] || [ "$gpus" -ge 2 ]; then
  cmd_step "collectives on two ranks ($coll_name)" 90 env STRATA_LOG_LEVEL=error "${coll[@]}" \
    "$bin/strata" launch -n 2 "$bin/dist_worker" device_collectives
else
  record "collectives on two ranks" skipped "this machine has $gpus GPU(s); NCCL on two ranks needs two"
fi

# --- 4. Vulkan on this machine's driver ---
icd=$(ls /usr/share/vulkan/icd.d/nvidia_icd*.json /etc/vulkan/icd.d/nvidia_icd*.json 2>/dev/null | head -1)
if [ "$mode" = dry-run ]; then
  icd=$(ls /usr/share/vulkan/icd.d/lvp_icd*.json 2>/dev/null | head -1)
fi
if [ -z "$icd" ]; then
  record "Vulkan plugin" skipped "no Vulkan ICD for this GPU's driver (nvidia_icd.json) is installed"
elif [ ! -e "$plugins/libstrata_plugin_vulkan.so" ]; then
  record "Vulkan plugin" skipped "the Vulkan plugin is not in the build"
else
  step_env=("VK_ICD_FILENAMES=$icd")
  gtest_step "ops_test on vulkan:0 ($(basename "$icd"))" 180 ops_test "--gtest_filter=*/vulkan_0"
  step_env=()
fi

# --- 5. bench_gpu against PyTorch ---
bench_json="$work/bench_gpu.json"
peer_json="$work/torch.json"
bench_args=(--benchmark_repetitions=5 --benchmark_out="$bench_json" --benchmark_out_format=json)
# On the CPU the 8192^3 matmuls take minutes and prove nothing: left out.
[ "$mode" = dry-run ] && bench_args=(--benchmark_repetitions=2 --benchmark_min_time=0.01
                                     --benchmark_filter=-BM_GpuMatmul --benchmark_out="$bench_json"
                                     --benchmark_out_format=json)
cmd_step "bench_gpu on $device" 300 env "STRATA_BENCH_GPU=$device" "$bin/bench_gpu" "${bench_args[@]}"
# A case whose result was wrong ends in an error, not in the exit status.
if [ -e "$bench_json" ] && grep -q '"error_occurred": true' "$bench_json"; then
  record "bench_gpu results" failed "a case's check before timing failed (the table below names it)" "$bench_json"
fi
peer_note="-"
if [ "$mode" = dry-run ]; then
  record "PyTorch peer" skipped "dry run on $device: the peer runs on a GPU only"
elif ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2> /dev/null; then
  record "PyTorch peer" skipped "python3 has no PyTorch with a GPU here"
else
  cmd_step "PyTorch peer (bench/gpu_torch_peer.py)" 300 python3 bench/gpu_torch_peer.py --device "$device" \
    --repetitions 5 --json "$peer_json" && peer_note=$peer_json
  [ -e "$peer_json" ] && peer_note=$peer_json
fi
ratios="$work/ratios.md"
if [ -e "$bench_json" ]; then
  python3 bench/gpu_ratios.py "$bench_json" "$peer_note" --title "bench_gpu on $device against PyTorch" > "$ratios" 2>&1 ||
    echo "(bench/gpu_ratios.py failed: $(tail -n 3 "$ratios"))" > "$ratios"
else
  echo "bench_gpu wrote no results." > "$ratios"
fi

# --- the report ---
{
  echo "# Strata on a GPU: tools/verify-gpu.sh ($mode), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo '```'
  cat "$machine"
  echo '```'
  echo
  echo "## Steps ($((SECONDS - start)) s in all; $failed failed)"
  echo
  echo "| step | result | detail |"
  echo "|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  cat "$ratios"
  echo
  [ ${#details[@]} -gt 0 ] && printf '%s\n' "${details[@]}"
} > "$report"
echo "verify-gpu: report in $report ($((SECONDS - start)) s; $failed failed step(s))"
rm -rf "$work"
[ "$failed" -eq 0 ]
