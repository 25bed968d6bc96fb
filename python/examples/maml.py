"""Second-order MAML (Finn et al. 2017) on sine-wave regression from Python,
next to first-order MAML, as examples/example_maml.cpp does in C++.

A task is y = A·sin(x − φ), A in [0.1, 5], φ in [0, π], x in [−5, 5]; K
support points to adapt on, K query points to score the adapted model. The
model is a 1-40-40-1 MLP with ReLU written as a function of its parameter
list. The inner loop takes SGD steps from the meta-parameters θ on the
support set with strata.grad, so the adapted θ' is a differentiable function
of θ; the meta-loss is the query loss at θ', and Adam (the C++ class)
updates θ. MAML differentiates through the inner gradients (the
second-order term −α·H·∇L); first-order MAML detaches them.

    PYTHONPATH=build/default/python python/.venv/bin/python python/examples/maml.py --iterations 300

Prints both meta-losses every --print-every iterations and, last,
maml_ratio=... (the last window's mean meta-loss over the first's).
"""
import argparse
import math
import sys

import numpy as np

import strata
from strata import nn


def init_params(rng):
    params = []
    for fan_in, fan_out in ((1, 40), (40, 40), (40, 1)):
        bound = 1.0 / math.sqrt(fan_in)
        params.append(nn.Parameter(strata.tensor(rng.uniform(-bound, bound, (fan_out, fan_in)))))
        params.append(nn.Parameter(strata.tensor(rng.uniform(-bound, bound, (fan_out,)))))
    return params


def model(params, x):
    w1, b1, w2, b2, w3, b3 = params
    h = strata.relu(strata.linear(x, w1, b1))
    h = strata.relu(strata.linear(h, w2, b2))
    return strata.linear(h, w3, b3)


def mse(params, x, y):
    return ((model(params, x) - y) ** 2.0).mean()


def sample_task(rng, k):
    a, phase = rng.uniform(0.1, 5.0), rng.uniform(0.0, math.pi)
    xs = rng.uniform(-5.0, 5.0, (2 * k, 1)).astype(np.float32)
    ys = (a * np.sin(xs - phase)).astype(np.float32)
    return (strata.tensor(xs[:k]), strata.tensor(ys[:k])), (strata.tensor(xs[k:]), strata.tensor(ys[k:]))


def adapt(params, support, steps, lr, second_order):
    """θ' after `steps` SGD steps on the support set; with second_order the
    steps stay differentiable with respect to θ."""
    x, y = support
    for _ in range(steps):
        with strata.GradientTape(higher_order=second_order) as tape:
            for p in params:
                tape.watch(p)
            grads = tape.gradient(mse(params, x, y), params)
        if not second_order:
            grads = [g.detach() for g in grads]
        params = [p - lr * g for p, g in zip(params, grads)]
    return params


def meta_train(iterations, second_order, seed, meta_batch, k, inner_steps, print_every, label):
    rng = np.random.default_rng(seed)
    params = init_params(np.random.default_rng(1000 + seed))
    opt = nn.Adam(params, lr=1e-3)
    history = []
    for it in range(1, iterations + 1):
        opt.zero_grad()
        total = 0.0
        for _ in range(meta_batch):
            support, query = sample_task(rng, k)
            adapted = adapt(params, support, inner_steps, 0.01, second_order)
            loss = mse(adapted, *query) * (1.0 / meta_batch)
            loss.backward()
            total += loss.item()
        opt.step()
        history.append(total)
        if it % print_every == 0:
            print(f"{label:6s} iteration {it:5d} meta-loss {np.mean(history[-print_every:]):.4f}", file=sys.stderr)
    return history


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=600)
    ap.add_argument("--meta-batch", type=int, default=4)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--inner-steps", type=int, default=1)
    ap.add_argument("--print-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    runs = {}
    for label, second in (("MAML", True), ("FOMAML", False)):
        runs[label] = meta_train(args.iterations, second, args.seed, args.meta_batch, args.k, args.inner_steps,
                                 args.print_every, label)
    w = args.print_every
    ratio = np.mean(runs["MAML"][-w:]) / np.mean(runs["MAML"][:w])
    print(f"fomaml_ratio={np.mean(runs['FOMAML'][-w:]) / np.mean(runs['FOMAML'][:w]):.3f}")
    print(f"maml_ratio={ratio:.3f}")
    return ratio


if __name__ == "__main__":
    main()
