"""Python data-parallel training step on 2 ranks (issue 38's "bucketed Python
DDP"): strata.distributed.DistributedDataParallel (the C++ wrapper's buckets,
their all-reduces started during backward) against, in the same run on the
same ranks, one blocking all-reduce per parameter after backward, in
parameter order (what a loop written by hand does: the peer; the Python
module's DistributedDataParallel before, one all-reduce per parameter in a
gradient hook, could not serve here: ranks ran the hooks of a three-layer
model in different orders, and their all-reduces met the wrong tensors) and
the same step with no communication at all (the floor).

    STRATA_THREADS=1 build/default/bin/strata launch -n 2 \\
        python/.venv/bin/python bench/python_ddp.py --repetitions 5

with PYTHONPATH=build/default/python. The model is an MLP 256-1024-1024-10
(1.3 M parameters, 5.1 MB of f32 gradients), batch 64 per rank, Adam; each
variant's step time is the median of --repetitions runs of --steps steps
(min and max beside), rank 0 printing. The variants start from the same
weights and must end with the same weights (checked before any time is
printed): the hook and the buckets average the same gradients.
"""
import argparse
import statistics
import time

import numpy as np

import strata
import strata.distributed as dist
from strata import nn


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(256, 1024)
        self.b = nn.Linear(1024, 1024)
        self.c = nn.Linear(1024, 10)

    def forward(self, x):
        return self.c(strata.relu(self.b(strata.relu(self.a(x)))))


def broadcast_from_rank0(module):
    for t in module.state_dict().values():
        with strata.no_grad():
            dist.broadcast(t, 0).wait()


def average_each_parameter(module):
    """The peer: after backward, each gradient all-reduced on its own."""
    for p in module.parameters():
        dist.all_reduce(p.grad, "mean").wait()


def run(kind, x, y, steps, repetitions):
    strata.manual_seed(5)
    model = Mlp()
    wrapped = dist.DistributedDataParallel(model, bucket_cap_mb=1) if kind == "buckets" else model
    if kind == "each":
        broadcast_from_rank0(model)
    opt = nn.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(wrapped(x), y).backward()
        if kind == "each":
            average_each_parameter(model)
        opt.step()

    step()  # warm-up
    times = []
    for _ in range(repetitions):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        times.append((time.perf_counter() - start) / steps)
    weights = np.concatenate([p.numpy().ravel() for p in model.parameters()])
    stats = wrapped.stats() if kind == "buckets" else None
    return statistics.median(times), min(times), max(times), weights, stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repetitions", type=int, default=5)
    args = ap.parse_args()
    dist.init_process_group()
    r = dist.rank()
    strata.manual_seed(100 + r)
    x = strata.randn(64, 256)
    y = strata.tensor(np.arange(64, dtype=np.int64) % 10)
    results = {k: run(k, x, y, args.steps, args.repetitions) for k in ("each", "buckets", "local")}
    diff = np.abs(results["each"][3] - results["buckets"][3]).max()
    if diff > 1e-5:
        raise SystemExit(f"rank {r}: the two averagings trained different weights (max diff {diff})")
    if r == 0:
        n = dist.world_size()
        print(f"MLP 256-1024-1024-10, batch 64 per rank, Adam, {n} ranks, "
              f"STRATA_THREADS per rank as set; medians of {args.repetitions} x {args.steps} steps")
        for k, label in (("local", "no communication"), ("each", "one all-reduce per parameter"),
                         ("buckets", "DistributedDataParallel, 1 MiB buckets")):
            med, lo, hi = results[k][:3]
            print(f"  {label:42s} {med * 1e3:8.2f} ms/step  ({lo * 1e3:.2f}-{hi * 1e3:.2f})")
        s = results["buckets"][4]
        print(f"  buckets: {len(s['last_launch_us'])} per pass, {s['buckets_overlapped']} started during backward "
              f"over the run, {s['buckets_at_end']} at its end")
        print(f"  buckets / one per parameter: {results['buckets'][0] / results['each'][0]:.3f}x; "
              f"buckets / no communication: {results['buckets'][0] / results['local'][0]:.3f}x")
    dist.barrier()


if __name__ == "__main__":
    main()
