#!/usr/bin/env bash
# CI's cheap check that the benchmarks' peer code (libtorch, OpenBLAS)
# still compiles where the machine has the peers (docs/building.md,
# "Benchmark peers"): CI's own build leaves the peers out, as a fresh
# machine's does, so without this check the peer code would rot unseen.
#
#   tools/check-bench-peers.sh [build dir, default build/default]
#
# Reconfigures the tree with STRATA_BENCH_PEERS=AUTO and runs the compiler
# over every benchmark source that then sees a peer, with -fsyntax-only -g0:
# the same parse, templates and type checks as a build, without the code
# generation and debug information that make a libtorch translation unit
# cost ~36 s (17 s this way). What it does not catch, a link against the
# peer library, a developer's benchmark build does (docs/performance.md).
# Without peers it checks nothing and says so. Exit status: the compiler's.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/default}
cmake -S . -B "$build" -DSTRATA_BENCH_PEERS=AUTO > "$build/bench-peers-configure.log"
grep -E "peers" "$build/bench-peers-configure.log" || true
commands=$(python3 - "$build/compile_commands.json" <<'EOF'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    cmd = e.get("command") or " ".join(shlex.quote(a) for a in e["arguments"])
    if "/bench/" in e["file"] and ("STRATA_HAVE_TORCH" in cmd or "STRATA_HAVE_OPENBLAS" in cmd):
        args = shlex.split(cmd)
        if args[0].endswith("ccache"):
            args = args[1:]
        out = args.index("-o")
        del args[out:out + 2]
        print("cd " + shlex.quote(e["directory"]) + " && " + " ".join(shlex.quote(a) for a in args) +
              " -fsyntax-only -g0")
EOF
)
if [ -z "$commands" ]; then
  echo "check-bench-peers: no benchmark peer on this machine: nothing to check"
  exit 0
fi
echo "check-bench-peers: $(echo "$commands" | wc -l) benchmark sources with peers, -fsyntax-only"
echo "$commands" | xargs -d '\n' -P "$(nproc)" -I{} bash -c '{}'
echo "check-bench-peers: every benchmark's peer code compiles"
