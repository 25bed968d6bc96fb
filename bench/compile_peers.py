#!/usr/bin/python3
"""The Python peers of bench_compile (docs/compile.md): issue 37's 10-op f32
elementwise chain (x·y → sin → +0.75 → tanh → ·x → exp → −y → sigmoid →
square → +x) at 1K, 64K and 4M elements, forward and forward+backward (the
gradient of the sum with respect to x and y), one thread:

  - JAX's jit (from PyPI, in a virtual environment), and JAX eager;
  - PyTorch eager (Debian's python3-torch), when it imports.

    <venv>/bin/python bench/compile_peers.py [--repetitions 5] [--strata build/default/bin/bench_compile]
    /usr/bin/python3 bench/compile_peers.py [...]          # PyTorch only

Inputs are uniform in [-1, 1) from NumPy (seeded). Results are checked
against a NumPy float64 evaluation of the chain before anything is timed.
Prints the median and range of the repetitions (each the mean of a timed
loop) in microseconds; with --strata, runs that bench_compile first (same
repetitions, one thread) and prints Strata's compiled medians over each
peer's. A peer that does not import is named as left out.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

if any(k in os.environ for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()

import numpy as np  # noqa: E402

SIZES = (1 << 10, 1 << 16, 1 << 22)


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import timed  # noqa: E402


def timed_us(fn, repetitions):
    return tuple(s * 1e6 for s in timed(fn, repetitions))


def reference(x, y):
    x, y = x.astype(np.float64), y.astype(np.float64)
    t = 1.0 / (1.0 + np.exp(-(np.exp(np.tanh(np.sin(x * y) + 0.75) * x) - y)))
    return t * t + x


def data(n):
    rng = np.random.default_rng(n)
    return (rng.uniform(-1, 1, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32))


def jax_peers(repetitions):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("peer: JAX left out (not importable in this interpreter)")
        return {}

    def chain(x, y):
        t = jax.nn.sigmoid(jnp.exp(jnp.tanh(jnp.sin(x * y) + 0.75) * x) - y)
        return t * t + x

    fwd = jax.jit(chain)
    both = jax.jit(jax.grad(lambda x, y: jnp.sum(chain(x, y)), argnums=(0, 1)))
    eager_both = jax.grad(lambda x, y: jnp.sum(chain(x, y)), argnums=(0, 1))
    out = {}
    for n in SIZES:
        xs, ys = data(n)
        x, y = jnp.asarray(xs), jnp.asarray(ys)
        got = np.asarray(fwd(x, y))
        if not np.allclose(got, reference(xs, ys), rtol=1e-5, atol=1e-5):
            sys.exit(f"JAX jit's chain differs from the reference at n={n}")
        out[f"jax jit forward/{n}"] = timed_us(lambda: fwd(x, y).block_until_ready(), repetitions)
        out[f"jax jit forward+backward/{n}"] = timed_us(lambda: both(x, y)[0].block_until_ready(), repetitions)
        out[f"jax eager forward/{n}"] = timed_us(lambda: chain(x, y).block_until_ready(), repetitions)
        out[f"jax eager forward+backward/{n}"] = timed_us(lambda: eager_both(x, y)[0].block_until_ready(), repetitions)
    return out


def torch_peers(repetitions):
    try:
        import torch
    except ImportError:
        print("peer: PyTorch left out (not importable in this interpreter)")
        return {}
    torch.set_num_threads(1)

    def chain(x, y):
        t = torch.sigmoid(torch.exp(torch.tanh(torch.sin(x * y) + 0.75) * x) - y)
        return t * t + x

    out = {}
    for n in SIZES:
        xs, ys = data(n)
        x, y = torch.from_numpy(xs), torch.from_numpy(ys)
        if not np.allclose(chain(x, y).numpy(), reference(xs, ys), rtol=1e-5, atol=1e-5):
            sys.exit(f"PyTorch's chain differs from the reference at n={n}")

        def both():
            a, b = x.detach().requires_grad_(), y.detach().requires_grad_()
            return torch.autograd.grad(chain(a, b).sum(), (a, b))

        out[f"torch eager forward/{n}"] = timed_us(lambda: chain(x, y), repetitions)
        out[f"torch eager forward+backward/{n}"] = timed_us(both, repetitions)
    return out


def strata_medians(binary, repetitions):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([binary, f"--benchmark_repetitions={repetitions}", "--benchmark_filter=Compiled|Eager",
                        f"--benchmark_out={f.name}", "--benchmark_out_format=json"],
                       check=True, stdout=subprocess.DEVNULL, env={**os.environ, "STRATA_BENCH_THREADS": "1"})
        runs = json.load(open(f.name))["benchmarks"]
    medians = {}
    for b in runs:  # one repetition: the run itself; more: their median
        if b.get("aggregate_name") == "median" or (repetitions == 1 and b.get("run_type") == "iteration"):
            medians[b["run_name"]] = b["real_time"]  # microseconds (the bench's unit)
    return medians


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--strata", help="bench_compile to run first, for ratios")
    args = parser.parse_args()
    results = {**jax_peers(args.repetitions), **torch_peers(args.repetitions)}
    for name, (median, lo, hi) in results.items():
        print(f"{name:40s} {median:12.1f} us  [{lo:.1f}, {hi:.1f}]")
    if args.strata:
        ours = strata_medians(args.strata, args.repetitions)
        print("\nStrata compiled over each peer (medians; below 1: Strata faster):")
        for name, (median, _, _) in results.items():
            what, n = name.rsplit("/", 1)
            pass_ = "ForwardBackward" if what.endswith("forward+backward") else "Forward"
            key = f"BM_Compiled_{pass_}/n{n}/{n}"  # the bench's name, then its argument
            if key in ours:
                print(f"  {key:40s} / {what:32s} = {ours[key] / median:.3f}x")


if __name__ == "__main__":
    main()
