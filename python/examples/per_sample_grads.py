"""Per-sample gradients of a small MLP on the digits, two ways: one batched
pass (strata.per_sample_grad, which vmaps the gradient: the linear layers'
per-example outer products become one batched matrix product) and a Python
loop of one backward pass per example. Checks they agree and prints the
time of each; the per-sample gradient norms are what
differentially private SGD clips.

    PYTHONPATH=build/default/python python/.venv/bin/python python/examples/per_sample_grads.py
"""
import argparse
import os
import sys
import time

import numpy as np

import strata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from digits import DEFAULT_DATA, load  # noqa: E402


def loss_of(params, example):
    w1, b1, w2, b2 = params
    x, y = example
    h = strata.relu(strata.linear(x.unsqueeze(0), w1, b1))
    logits = strata.linear(h, w2, b2)
    return strata.nn.functional.cross_entropy(logits, y.unsqueeze(0))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=64)
    ap.add_argument("--device", default=None)
    args = ap.parse_args(argv)
    device = strata.device(args.device) if args.device else strata.default_device()
    (x, y), _ = load(DEFAULT_DATA, device)
    x, y = x[:args.examples], y[:args.examples]
    strata.manual_seed(0)
    l1, l2 = strata.nn.Linear(64, 32).to(device), strata.nn.Linear(32, 10).to(device)
    params = [l1.weight, l1.bias, l2.weight, l2.bias]

    start = time.perf_counter()
    batched = strata.per_sample_grad(loss_of, params, [x, y])
    t_batched = time.perf_counter() - start

    start = time.perf_counter()
    looped = [[] for _ in params]
    for i in range(args.examples):
        with strata.GradientTape() as tape:
            loss = loss_of(params, [x[i], y[i]])
            for k, g in enumerate(tape.gradient(loss, params)):
                looped[k].append(g.numpy())
    t_loop = time.perf_counter() - start

    worst = max(float(np.abs(b.numpy() - np.stack(l)).max()) for b, l in zip(batched, looped))
    norms = np.sqrt(sum((b.numpy().reshape(args.examples, -1) ** 2).sum(1) for b in batched))
    print(f"{args.examples} examples on {device}: batched {1e3 * t_batched:.2f} ms, "
          f"loop of backward passes {1e3 * t_loop:.2f} ms; largest difference {worst:.2e}", file=sys.stderr)
    print(f"per-sample gradient norms: min {norms.min():.4f} median {np.median(norms):.4f} max {norms.max():.4f}")
    print(f"max_difference={worst:.2e}")
    return worst


if __name__ == "__main__":
    main()
