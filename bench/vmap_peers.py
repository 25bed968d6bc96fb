#!/usr/bin/python3
"""The peers of bench_vmap that live in Python: PyTorch's functorch (Debian's
python3-torch 1.13 ships it) and, when it is installed, JAX.

    /usr/bin/python3 bench/vmap_peers.py [--repetitions 5] [--strata build/default/bin/bench_vmap]

Runs the programs bench_vmap times, on the same problem sizes, one thread:
per-sample gradients of the 784-128-10 tanh MLP (squared error against a
one-hot target) at batch 64, and of the 784-10 linear model at batch 1, 8,
64 and 256, with functorch.vmap(grad) and PyTorch's per-example loop (and
JAX's jit(vmap(grad)) when jax imports); and jacfwd of x -> tanh(W x),
256 -> 256. Prints the median and range of the repetitions (each the mean
of a timed loop) in the units bench_vmap prints, so the two outputs can be
read side by side (docs/vmap.md). A peer that does not import is named as
left out. With --strata, the script runs that bench_vmap first (same
repetitions, one thread) and prints Strata's medians over each peer's.

OpenBLAS reads OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE when it loads, and
pinned they halve it (and PyTorch's GEMMs through it): like bench_common.hpp's
unpin_openblas, the script executes itself again without them first.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

if any(k in os.environ for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

import torch  # noqa: E402 (after the re-execution above)

torch.set_num_threads(1)


def timed(fn, repetitions, min_time=0.3):
    fn()  # warm up (and JIT)
    runs = []
    for _ in range(repetitions):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        runs.append(elapsed / n)
    return statistics.median(runs), min(runs), max(runs)


def report(name, stats, unit):
    scale = {"ms": 1e3, "us": 1e6}[unit]
    MEDIANS[name] = stats[0]
    med, lo, hi = (s * scale for s in stats)
    print(f"{name:48s} {med:10.3f} {unit}  (range {lo:.3f} - {hi:.3f})")


def problem(hidden, batch):
    g = torch.Generator().manual_seed(42)
    widths = [784, 128, 10] if hidden else [784, 10]
    params = []
    for a, b in zip(widths, widths[1:]):
        params += [torch.randn(a, b, generator=g) / a ** 0.5, torch.zeros(b)]
    x = torch.rand(batch, 784, generator=g)
    labels = torch.randint(0, 10, (batch,), generator=g)
    target = torch.nn.functional.one_hot(labels, 10).float()
    return params, x, target


def loss(params, x, target, tanh=torch.tanh):
    """One example's squared error; `tanh` of the library the tensors are from."""
    h = x
    for l in range(0, len(params), 2):
        h = h @ params[l] + params[l + 1]
        if l + 2 < len(params):
            h = tanh(h)
    return ((h - target) ** 2).sum()


def torch_loop(params, x, target):
    ps = [p.detach().requires_grad_(True) for p in params]
    grads = [[] for _ in ps]
    for i in range(x.shape[0]):
        for acc, g in zip(grads, torch.autograd.grad(loss(ps, x[i], target[i]), ps)):
            acc.append(g)
    return [torch.stack(g) for g in grads]


def strata_medians(binary, repetitions):
    """bench_vmap's medians in seconds, by benchmark name."""
    with tempfile.NamedTemporaryFile(suffix=".json") as report_file:
        subprocess.run([binary, f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true",
                        f"--benchmark_out={report_file.name}", "--benchmark_out_format=json",
                        "--benchmark_filter=PerSample|Jacfwd"],
                       check=True, capture_output=True, text=True, env={**os.environ, "STRATA_BENCH_THREADS": "1"})
        report = json.load(open(report_file.name))
    medians = {}
    for b in report["benchmarks"]:
        if b.get("aggregate_name") == "median":
            unit = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9}[b["time_unit"]]
            medians[b["run_name"]] = b["real_time"] * unit
    return medians


PEER_OF = {  # bench_vmap's name -> this script's label
    "BM_Strata_PerSampleMlp_Vmap": "functorch vmap(grad), MLP 784-128-10, batch 64",
    "BM_Strata_PerSampleLinear_Vmap/b64/64": "functorch vmap(grad), linear 784-10, batch 64",
    "BM_Strata_PerSampleLinear_Vmap/b256/256": "functorch vmap(grad), linear 784-10, batch 256",
    "BM_Strata_Jacfwd_Vmap": "functorch jacfwd 256->256",
}
MEDIANS = {}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--strata", help="a bench_vmap binary to run first, for ratios")
    args = parser.parse_args()
    reps = args.repetitions
    strata = strata_medians(args.strata, reps) if args.strata else {}
    try:
        import functorch
    except ImportError:
        functorch = None
        print("functorch: left out (does not import)")
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        jax = None
        print("JAX: left out (does not import; it is a PyPI peer, as docs/performance.md says)")
    print(f"torch {torch.__version__}, 1 thread")

    for hidden, batches, unit in ((True, [64], "ms"), (False, [1, 8, 64, 256], "us")):
        model = "MLP 784-128-10" if hidden else "linear 784-10"
        for batch in batches:
            params, x, target = problem(hidden, batch)
            report(f"torch loop, {model}, batch {batch}", timed(lambda: torch_loop(params, x, target), reps), unit)
            if functorch is not None:
                per_sample = functorch.vmap(functorch.grad(loss), in_dims=(None, 0, 0))
                got = per_sample(params, x, target)
                want = torch_loop(params, x, target)
                assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got, want)), "functorch disagrees"
                report(f"functorch vmap(grad), {model}, batch {batch}",
                       timed(lambda: per_sample(params, x, target), reps), unit)
            if jax is not None:
                jparams = [jnp.asarray(p.numpy()) for p in params]

                def jloss(ps, xi, ti):
                    return loss(ps, xi, ti, tanh=jnp.tanh)

                fn = jax.jit(jax.vmap(jax.grad(jloss), in_axes=(None, 0, 0)))
                jx, jt = jnp.asarray(x.numpy()), jnp.asarray(target.numpy())
                report(f"JAX jit(vmap(grad)), {model}, batch {batch}",
                       timed(lambda: jax.block_until_ready(fn(jparams, jx, jt)), reps), unit)

    g = torch.Generator().manual_seed(7)
    w = torch.randn(256, 256, generator=g) / 16.0
    x = torch.rand(256, generator=g)
    if functorch is not None:
        jac = functorch.jacfwd(lambda v: torch.tanh(w @ v))
        report("functorch jacfwd 256->256", timed(lambda: jac(x), reps), "ms")
    if strata:
        print("\nStrata (bench_vmap medians) / peer:")
        for name, label in PEER_OF.items():
            if name in strata and label in MEDIANS:
                print(f"  {name:44s} {strata[name] * 1e3:9.3f} ms / {MEDIANS[label] * 1e3:9.3f} ms = "
                      f"{strata[name] / MEDIANS[label]:.3f}x")


if __name__ == "__main__":
    main()
