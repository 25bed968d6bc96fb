"""Trains the digits MLP of examples/example_digits.cpp from Python: 64 -> 128
-> 128 -> 10 with ReLU, Adam (lr 3e-3), batch 64, cross-entropy, on the UCI
handwritten digits (data/digits.csv.gz); saves the model to a safetensors
file, reloads it into a fresh model, checks the predictions are the same,
and prints test_accuracy=0.9xx as its last line.

    PYTHONPATH=build/default/python python/.venv/bin/python python/examples/digits.py [--device vulkan:0]

The split is NumPy's seeded permutation, not the C++ demo's std::shuffle, so
the numbers differ from example_digits' while the model, the data and the
loop are the same.
"""
import argparse
import gzip
import os
import sys
import tempfile
import time

import numpy as np

import strata
from strata import nn

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "..", "data", "digits.csv.gz")


def load(path, device, test_fraction=0.2, seed=0):
    with gzip.open(path, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.int64)
    if rows.ndim != 2 or rows.shape[1] != 65:
        raise ValueError(f"{path}: expected 64 pixels and a label per line, got {rows.shape[1]} columns")
    rows = rows[np.random.default_rng(seed).permutation(len(rows))]
    n_test = int(len(rows) * test_fraction)
    x = (rows[:, :64] / 16.0).astype(np.float32)
    y = rows[:, 64]
    split = lambda a, b: (strata.tensor(x[a:b], device=device), strata.tensor(y[a:b], device=device))  # noqa: E731
    return split(n_test, len(rows)), split(0, n_test)


def make_model():
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def train_epoch(model, opt, x, y, batch, rng):
    """One epoch in the C++ demo's way: a shuffled index tensor, index_select
    per batch, zero_grad, forward, loss, backward, step, item()."""
    n = x.shape[0]
    perm = strata.tensor(rng.permutation(n), device=x.device)
    total = 0.0
    for b in range(0, n, batch):
        idx = perm[b:min(n, b + batch)]
        xb, yb = strata.index_select(x, 0, idx), strata.index_select(y, 0, idx)
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        total += loss.item()
    return total / ((n + batch - 1) // batch)


def accuracy(model, x, y):
    with strata.no_grad():
        pred = strata.argmax(model(x), 1)
    return strata.mean(strata.cast(strata.eq(pred, y), strata.float32)).item(), pred


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--device", default=None, help="e.g. cpu:0 or vulkan:0 (default: the configuration's)")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    device = strata.device(args.device) if args.device else strata.default_device()
    (xtr, ytr), (xte, yte) = load(args.data, device, seed=args.seed)
    print(f"device {device} ({strata.device_name(device)}); {xtr.shape[0]} training and {xte.shape[0]} test images",
          file=sys.stderr)
    strata.manual_seed(args.seed)
    model = make_model().to(device)
    opt = nn.Adam(model.parameters(), lr=args.lr)
    rng = np.random.default_rng(args.seed + 1)
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        loss = train_epoch(model, opt, xtr, ytr, args.batch, rng)
        print(f"epoch {epoch:3d}/{args.epochs} loss {loss:.4f}", file=sys.stderr)
    elapsed = time.perf_counter() - start
    acc, pred = accuracy(model, xte, yte)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "digits.safetensors")
        model.save(path)
        fresh = make_model().to(device)
        fresh.load(path)
        _, again = accuracy(fresh, xte, yte)
    if not np.array_equal(pred.numpy(), again.numpy()):
        raise SystemExit("the reloaded model predicts differently")
    print(f"{args.epochs} epochs in {elapsed:.2f} s ({1e3 * elapsed / args.epochs:.2f} ms per epoch)", file=sys.stderr)
    print(f"test_accuracy={acc:.3f}")
    return acc


if __name__ == "__main__":
    main()
