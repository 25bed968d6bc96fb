#!/usr/bin/env python3
"""The GPU targets of docs/performance.md ("bench_gpu") as one Markdown table.

Reads bench_gpu's Google Benchmark JSON (--benchmark_out, with repetitions)
and bench/gpu_torch_peer.py's --json from one run of both on one GPU, and
prints, per case, Strata's and PyTorch's median time with the range of the
runs, the ratio the target is stated in, the target, and whether it is met.

    gpu_ratios.py <bench_gpu.json> <torch.json | -> [--title TEXT]

"-" (or a missing file) for the peer: the table says "no peer" in each row.
Exit status 0 even when a target is missed: the table is the answer.
"""
import argparse
import json
import os
import statistics
import sys

# case: (bench_gpu run name, peer case, ratio kind, target)
#   "throughput": PyTorch's time / Strata's (bandwidth or FLOP/s ratio), >= target
#   "time":       Strata's time / PyTorch's, <= target
CASES = [
    ("copy f32 2^26", "BM_GpuCopy/67108864/real_time", "copy", "throughput", 0.95),
    ("add f32 2^26", "BM_GpuAdd/67108864/real_time", "add", "throughput", 0.95),
    ("matmul 8192^3 f16", "BM_GpuMatmul/0/real_time", "matmul float16", "throughput", 0.95),
    ("matmul 8192^3 bf16", "BM_GpuMatmul/1/real_time", "matmul bfloat16", "throughput", 0.95),
    ("matmul 8192^3 f32 (no TF32)", "BM_GpuMatmul/2/real_time", "matmul float32", "throughput", 0.95),
    ("10,000 queued one-element adds", "BM_GpuQueuedAdds/real_time", "queued adds", "time", 0.6),
    ("digits MLP step f32", "BM_GpuMlpStep/0/real_time", "mlp step f32", "time", 1.0),
    ("digits MLP step bf16 autocast", "BM_GpuMlpStep/1/real_time", "mlp step autocast bf16", "time", 1.0),
    ("MLP HVP forward-over-reverse", "BM_GpuMlpHvp/real_time", "mlp hvp", "time", 1.0),
]

UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def strata_runs(path):
    """{run name: [seconds per iteration, one per repetition]}, and skip reasons."""
    with open(path) as f:
        data = json.load(f)
    runs, skipped = {}, {}
    for b in data.get("benchmarks", []):
        name = b.get("run_name", b["name"])
        if b.get("error_occurred"):
            skipped[name] = b.get("error_message", "skipped")
            continue
        if b.get("run_type", "iteration") != "iteration":
            continue
        runs.setdefault(name, []).append(b["real_time"] * UNIT[b.get("time_unit", "ns")])
    return runs, skipped


def fmt(seconds):
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("strata")
    parser.add_argument("peer")
    parser.add_argument("--title", default="bench_gpu against PyTorch")
    args = parser.parse_args()
    runs, skipped = strata_runs(args.strata)
    peer, peer_note = {}, "no peer figures (PyTorch with a GPU was not available)"
    if args.peer != "-" and os.path.exists(args.peer):
        with open(args.peer) as f:
            p = json.load(f)
        peer = p.get("cases", {})
        peer_note = f"PyTorch {p.get('torch', '?')} on {p.get('device', '?')}"
    print(f"### {args.title}\n")
    print(f"Peer: {peer_note}. Medians of the runs, range in brackets; a throughput ratio is PyTorch's time "
          "over Strata's, a time ratio Strata's over PyTorch's.\n")
    print("| case | Strata | PyTorch | ratio (median; worst run) | target | met |")
    print("|---|---|---|---|---|---|")
    missed = 0
    for label, name, peer_case, kind, target in CASES:
        if name in skipped:
            print(f"| {label} | skipped: {skipped[name]} | | | | — |")
            continue
        if name not in runs:
            print(f"| {label} | not run | | | | — |")
            continue
        s = runs[name]
        s_med, s_lo, s_hi = statistics.median(s), min(s), max(s)
        strata_cell = f"{fmt(s_med)} ({fmt(s_lo)}–{fmt(s_hi)}, {len(s)} runs)"
        if peer_case not in peer:
            print(f"| {label} | {strata_cell} | no peer | | {kind} {target} | — |")
            continue
        t = peer[peer_case]
        t_med = t["median"]
        if kind == "throughput":
            ratio, worst = t_med / s_med, t["min"] / s_hi
            met = worst >= target
            want = f"≥ {target}×"
        else:
            ratio, worst = s_med / t_med, s_hi / t["min"]
            met = ratio <= target
            want = f"≤ {target}×"
        missed += 0 if met else 1
        print(f"| {label} | {strata_cell} | {fmt(t_med)} ({fmt(t['min'])}–{fmt(t['max'])}) | "
              f"{ratio:.2f}×; {worst:.2f}× | {want} | {'yes' if met else '**no**'} |")
    print(f"\n{missed} target(s) missed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
