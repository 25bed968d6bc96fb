#!/usr/bin/env python3
"""PyTorch peer of bench/bench_gpu.cpp: the same cases on the same GPU.

Prints one line per case, in the units bench_gpu reports, so the ratios of
docs/performance.md ("GPU") are read off one run of both programs on one
machine (tools/run-gpu-bench.sh runs them back to back). Medians of
--repetitions runs, with their range.
"""
import argparse
import json
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


# Every figure printed, for --json: {case: {"median": s, "min": s, "max": s}}
# in seconds per call, under the names bench/gpu_ratios.py pairs with
# bench_gpu's cases.
RESULTS = {}


def record(case, timing):
    med, lo, hi = timing
    RESULTS[case] = {"median": med, "min": lo, "max": hi}
    return timing


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--repetitions", type=int, default=10)
    parser.add_argument("--json", help="also write the timings (seconds per call) to this file")
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
    med, lo, hi = record("copy", timed(lambda: x.clone(), sync, reps, inner=10))
    print(f"torch copy      n=2^26  {2 * n * 4 / med * 1e-9:8.1f} GB/s  (range {2*n*4/hi*1e-9:.1f}-{2*n*4/lo*1e-9:.1f})")
    med, lo, hi = record("add", timed(lambda: a + b, sync, reps, inner=10))
    print(f"torch add       n=2^26  {3 * n * 4 / med * 1e-9:8.1f} GB/s  (range {3*n*4/hi*1e-9:.1f}-{3*n*4/lo*1e-9:.1f})")

    k = 8192
    # TF32 off, as Strata's f32 matmul (CUBLAS_COMPUTE_32F) runs.
    torch.backends.cuda.matmul.allow_tf32 = False
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        torch.manual_seed(1)
        ma = torch.randn(k, k, device=dev).to(dtype)
        mb = torch.randn(k, k, device=dev).to(dtype)
        med, lo, hi = record(f"matmul {str(dtype)[6:]}", timed(lambda: torch.matmul(ma, mb), sync, reps))
        flops = 2.0 * k ** 3
        print(f"torch matmul    {str(dtype):15s} {flops / med * 1e-12:8.1f} TFLOP/s  (range {flops/hi*1e-12:.1f}-{flops/lo*1e-12:.1f})")

    one = torch.ones(1, device=dev)

    def queued():
        y = torch.zeros(1, device=dev)
        for _ in range(10000):
            y = y + one
        return y

    med, lo, hi = record("queued adds", timed(queued, sync, reps))
    print(f"torch queued adds 10000  {med / 10000 * 1e6:8.2f} us/op  (range {lo/10000*1e6:.2f}-{hi/10000*1e6:.2f})")

    # The digits MLP's training step (bench_gpu's BM_GpuMlpStep): eager,
    # f32 and under bf16 autocast.
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                                torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    xb = torch.randn(64, 64, device=dev)
    yb = torch.tensor([(i * 7 + 3) % 10 for i in range(64)], device=dev)
    for bf16 in (False, True):
        def step():
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                loss = torch.nn.functional.cross_entropy(model(xb).float(), yb)
            loss.backward()
            opt.step()
            return loss
        label = "autocast bf16" if bf16 else "f32"
        med, lo, hi = record(f"mlp step {label}", timed(step, sync, reps, inner=100))
        print(f"torch mlp step  {label:15s} {med * 1e6:8.1f} us  (range {lo*1e6:.1f}-{hi*1e6:.1f})")

    # The MLP Hessian-vector product (BM_GpuMlpHvp): forward-over-reverse.
    torch.manual_seed(7)
    x = torch.randn(64, 512, device=dev)
    w1, w2, w3 = (torch.randn(512, 512, device=dev) / 22.6 for _ in range(3))
    v = torch.randn(512, 512, device=dev)

    def loss_fn(w):
        h = torch.tanh(torch.tanh(torch.tanh(x @ w) @ w2) @ w3)
        return (h * h).mean()

    def hvp():
        return torch.func.jvp(torch.func.grad(loss_fn), (w1,), (v,))[1]

    med, lo, hi = record("mlp hvp", timed(hvp, sync, reps, inner=20))
    print(f"torch mlp hvp   forward-over-reverse {med * 1e6:8.1f} us  (range {lo*1e6:.1f}-{hi*1e6:.1f})")

    if args.json:
        with open(args.json, "w") as out:
            json.dump({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "cases": RESULTS},
                      out, indent=1)


if __name__ == "__main__":
    main()
