#!/usr/bin/env python3
"""PyTorch peer of bench/bench_gpu.cpp: the same cases on the same GPU.

Prints one line per case, in the units bench_gpu reports, so the ratios of
docs/performance.md ("GPU") are read off one run of both programs on one
machine (tools/run-gpu-bench.sh runs them back to back). Medians of
--repetitions runs, with their range.
"""
import argparse
import statistics
import time

import torch


def timed(fn, sync, repetitions, inner=1):
    fn()
    sync()
    samples = []
    for _ in range(repetitions):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples), min(samples), max(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--repetitions", type=int, default=10)
    args = parser.parse_args()
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize
    reps = args.repetitions

    n = 1 << 26
    x = torch.full((n,), 1.5, device=dev)
    a = torch.full((n,), 1.25, device=dev)
    b = torch.full((n,), 2.0, device=dev)
    c = a + b
    assert c.max().item() == 3.25 and c.min().item() == 3.25
    med, lo, hi = timed(lambda: x.clone(), sync, reps, inner=10)
    print(f"torch copy      n=2^26  {2 * n * 4 / med * 1e-9:8.1f} GB/s  (range {2*n*4/hi*1e-9:.1f}-{2*n*4/lo*1e-9:.1f})")
    med, lo, hi = timed(lambda: a + b, sync, reps, inner=10)
    print(f"torch add       n=2^26  {3 * n * 4 / med * 1e-9:8.1f} GB/s  (range {3*n*4/hi*1e-9:.1f}-{3*n*4/lo*1e-9:.1f})")

    k = 8192
    for dtype in (torch.float16, torch.bfloat16):
        torch.manual_seed(1)
        ma = torch.randn(k, k, device=dev).to(dtype)
        mb = torch.randn(k, k, device=dev).to(dtype)
        med, lo, hi = timed(lambda: torch.matmul(ma, mb), sync, reps)
        flops = 2.0 * k ** 3
        print(f"torch matmul    {str(dtype):15s} {flops / med * 1e-12:8.1f} TFLOP/s  (range {flops/hi*1e-12:.1f}-{flops/lo*1e-12:.1f})")

    one = torch.ones(1, device=dev)

    def queued():
        y = torch.zeros(1, device=dev)
        for _ in range(10000):
            y = y + one
        return y

    med, lo, hi = timed(queued, sync, reps)
    print(f"torch queued adds 10000  {med / 10000 * 1e6:8.2f} us/op  (range {lo/10000*1e6:.2f}-{hi/10000*1e6:.2f})")


if __name__ == "__main__":
    main()
