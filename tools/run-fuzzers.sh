#!/usr/bin/env bash
# Runs each libFuzzer target of the fuzz preset for a bounded time on a copy
# of its seed corpus (docs/testing.md), one per core at a time. Build first:
#
#   cmake --preset fuzz && cmake --build --preset fuzz
#   tools/run-fuzzers.sh [seconds per target, default 60] [target...]
#
# The copies, logs and crash artifacts go under build/fuzz/fuzz-run/ (the
# repository is not written). Exits non-zero when a target finds a crash, a
# leak, a timeout or an out-of-memory input; its log's tail and the
# reproducer's path are printed.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(fuzz_config fuzz_graph fuzz_checkpoint fuzz_plugin_table fuzz_probe_cache fuzz_store fuzz_test_cases)
fi

bin=build/fuzz/bin/fuzz
run=build/fuzz/fuzz-run
# As the asan preset's tests: OpenMP's TLS confuses ASan's __tls_get_addr hook.
export ASAN_OPTIONS=${ASAN_OPTIONS:-intercept_tls_get_addr=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# One target per core at a time (STRATA_FUZZ_JOBS, default: the core
# count): a libFuzzer run is single-threaded, and CI has two cores.
jobs=${STRATA_FUZZ_JOBS:-$(nproc)}

# run_target <target>: one bounded run; its summary, or its failure, on stdout.
run_target() {
  local t=$1
  rm -rf "${run:?}/$t"
  mkdir -p "$run/$t/corpus" "$run/$t/artifacts"
  cp fuzz/corpus/"$t"/* "$run/$t/corpus/"
  local log="$run/$t/log.txt"
  echo "run-fuzzers: $t for ${seconds}s ($(ls "$run/$t/corpus" | wc -l) seeds)"
  if "$bin/$t" "$run/$t/corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 \
       -artifact_prefix="$run/$t/artifacts/" -print_final_stats=1 >"$log" 2>&1; then
    echo "run-fuzzers: $t: $(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)"
    touch "$run/$t/passed"
  else
    echo "run-fuzzers: $t FAILED; the end of $log:"
    tail -n 60 "$log"
    ls -l "$run/$t/artifacts" || true
  fi
}

for t in "${targets[@]}"; do
  if [ ! -x "$bin/$t" ]; then
    echo "run-fuzzers: $bin/$t is missing (cmake --preset fuzz && cmake --build --preset fuzz)" >&2
    exit 2
  fi
done
mkdir -p "$run"
pids=()
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_target "$t" > "$run/$t.out" 2>&1 &
  pids+=($!)
done
wait "${pids[@]}" || true
failed=()
for t in "${targets[@]}"; do
  cat "$run/$t.out"
  [ -e "$run/$t/passed" ] || failed+=("$t")
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "run-fuzzers: ${failed[*]} found a bug; reproduce with <target> <artifact> (docs/testing.md)" >&2
  exit 1
fi
echo "run-fuzzers: no crash in ${targets[*]}"
