#!/usr/bin/env bash
# elastic_restart.sh STRATA_CLI EXAMPLE_DIGITS WORKDIR — a restart that
# changes nothing: the digits demo trained by `strata launch -n 2` from
# start to end, and again with rank 1 killed (SIGKILL) once the state of
# epoch 5 is saved, under --max-restarts 1. The restarted job resumes from
# its newest complete state (distributed::Checkpointer) and must end with
# the uninterrupted run's final training state, byte for byte.
set -euo pipefail
cli=$1 demo=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=1
epochs=12
"$cli" launch -n 2 "$demo" --quiet --epochs "$epochs" --distributed --state-dir "$work/plain" \
    > "$work/plain.log" 2>&1 || { cat "$work/plain.log"; echo "elastic_restart: the uninterrupted run failed"; exit 1; }
# Rank 1 of the first attempt kills itself once epoch 5's state exists
# ($$ is the shell that then execs the demo: the kill reaches the demo).
# shellcheck disable=SC2016
"$cli" launch -n 2 --max-restarts 1 /bin/sh -c '
  if [ "$STRATA_RESTART_COUNT" = 0 ] && [ "$STRATA_RANK" = 1 ]; then
    (while [ ! -e "$0/state-000000000005.st" ]; do sleep 0.02; done; kill -9 $$) &
  fi
  exec "$1" --quiet --epochs "$2" --distributed --state-dir "$0"' \
    "$work/killed" "$demo" "$epochs" > "$work/killed.log" 2>&1 || true
cat "$work/killed.log"
fail() { echo "elastic_restart: $1"; exit 1; }
grep -q "strata launch: rank 1 was killed by signal 9" "$work/killed.log" || fail "rank 1 was not killed"
grep -q "strata launch: restarting the 2 ranks (restart 1 of 1)" "$work/killed.log" || fail "launch did not restart"
grep -Eq "\[rank 0\] resumed from epoch [5-9]" "$work/killed.log" || fail "the restart did not resume"
grep -Eq "\[rank 0\] test_accuracy=0\.9[5-9]" "$work/killed.log" || fail "the accuracy is not reached"
last=$(printf 'state-%012d.st' "$epochs")
cmp "$work/plain/$last" "$work/killed/$last" || fail "the final states differ"
echo "elastic_restart: the restarted job's final state equals the uninterrupted run's, byte for byte"
rm -rf "$work"
