#!/usr/bin/python3
"""The peers of bench_vmap that live in Python: PyTorch's functorch (Debian's
python3-torch 1.13 ships it) and JAX (from PyPI, in a virtual environment).
Each peer is optional; run the script once with each interpreter:

    /usr/bin/python3 bench/vmap_peers.py [--repetitions 5] [--strata build/default/bin/bench_vmap]
    <venv>/bin/python bench/vmap_peers.py [--repetitions 5] [--strata ...]   # with jax installed

Runs the programs bench_vmap times, on the same problem sizes, one thread:
per-sample gradients of the 784-128-10 tanh MLP (squared error against a
one-hot target) at batch 64, and of the 784-10 linear model at batch 1, 8,
64 and 256, with functorch.vmap(grad) and PyTorch's per-example loop (and
JAX's jit(vmap(grad)) when jax imports); jacfwd of x -> tanh(W x),
256 -> 256; and, with JAX, jit(grad) and the jit HVP (forward over reverse)
of the 256-512-512-10 tanh MLP at batch 128 (bench_vmap's Mlp4). The data
come from NumPy (seeded), so every peer sees the same values. Prints the median and range of the repetitions (each the mean
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
import subprocess
import sys
import tempfile

if any(k in os.environ for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    os.execve(sys.executable, [sys.executable] + sys.argv, env)

# One thread for XLA too (read when jax is imported).
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()

import numpy as np  # noqa: E402 (after the re-execution above)

try:
    import torch
    torch.set_num_threads(1)
except ImportError:
    torch = None


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import timed  # noqa: E402


def report(name, stats, unit):
    scale = {"ms": 1e3, "us": 1e6}[unit]
    MEDIANS[name] = stats[0]
    med, lo, hi = (s * scale for s in stats)
    print(f"{name:48s} {med:10.3f} {unit}  (range {lo:.3f} - {hi:.3f})")


def problem(hidden, batch):
    """NumPy float32 arrays: [w1, b1, (w2, b2)], x, one-hot targets."""
    g = np.random.default_rng(42)
    widths = [784, 128, 10] if hidden else [784, 10]
    params = []
    for a, b in zip(widths, widths[1:]):
        params += [(g.standard_normal((a, b)) / a ** 0.5).astype(np.float32), np.zeros(b, np.float32)]
    x = g.random((batch, 784), dtype=np.float32)
    target = np.eye(10, dtype=np.float32)[g.integers(0, 10, batch)]
    return params, x, target


def mlp4_problem():
    """bench_vmap's Mlp4: 256-512-512-10, batch 128, and a direction v."""
    g = np.random.default_rng(11)
    widths = [256, 512, 512, 10]
    params = []
    for a, b in zip(widths, widths[1:]):
        params += [(g.standard_normal((a, b)) / a ** 0.5).astype(np.float32), np.zeros(b, np.float32)]
    v = [g.standard_normal(p.shape).astype(np.float32) for p in params]
    x = g.standard_normal((128, 256)).astype(np.float32)
    target = g.standard_normal((128, 10)).astype(np.float32)
    return params, v, x, target


def loss(params, x, target, tanh):
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
        for acc, g in zip(grads, torch.autograd.grad(loss(ps, x[i], target[i], torch.tanh), ps)):
            acc.append(g)
    return [torch.stack(g) for g in grads]


def strata_medians(binary, repetitions):
    """bench_vmap's medians in seconds, by benchmark name."""
    with tempfile.NamedTemporaryFile(suffix=".json") as report_file:
        subprocess.run([binary, f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true",
                        f"--benchmark_out={report_file.name}", "--benchmark_out_format=json",
                        "--benchmark_filter=PerSample|Jacfwd|Grad_Transform|Hvp_Transform"],
                       check=True, capture_output=True, text=True, env={**os.environ, "STRATA_BENCH_THREADS": "1"})
        report = json.load(open(report_file.name))
    medians = {}
    for b in report["benchmarks"]:
        if b.get("aggregate_name") == "median":
            unit = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9}[b["time_unit"]]
            medians[b["run_name"]] = b["real_time"] * unit
    return medians


PEER_OF = [  # (bench_vmap's name, this script's label)
    ("BM_Strata_PerSampleMlp_Vmap", "functorch vmap(grad), MLP 784-128-10, batch 64"),
    ("BM_Strata_PerSampleMlp_Vmap", "JAX jit(vmap(grad)), MLP 784-128-10, batch 64"),
    ("BM_Strata_PerSampleLinear_Vmap/b64/64", "functorch vmap(grad), linear 784-10, batch 64"),
    ("BM_Strata_PerSampleLinear_Vmap/b64/64", "JAX jit(vmap(grad)), linear 784-10, batch 64"),
    ("BM_Strata_PerSampleLinear_Vmap/b256/256", "functorch vmap(grad), linear 784-10, batch 256"),
    ("BM_Strata_Jacfwd_Vmap", "functorch jacfwd 256->256"),
    ("BM_Strata_Jacfwd_Vmap", "JAX jit(jacfwd) 256->256"),
    ("BM_Strata_Grad_Transform", "JAX jit(grad), MLP 256-512-512-10, batch 128"),
    ("BM_Strata_Hvp_TransformFwdRev", "JAX jit(hvp) fwd over rev, MLP 256-512-512-10, batch 128"),
]
MEDIANS = {}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--strata", help="a bench_vmap binary to run first, for ratios")
    args = parser.parse_args()
    reps = args.repetitions
    strata = strata_medians(args.strata, reps) if args.strata else {}
    functorch = None
    if torch is None:
        print("PyTorch: left out (does not import; Debian's python3-torch is the peer)")
    else:
        try:
            import functorch
        except ImportError:
            print("functorch: left out (does not import)")
        print(f"torch {torch.__version__}, 1 thread")
    try:
        import jax
        import jax.numpy as jnp
        print(f"jax {jax.__version__}, 1 thread (XLA_FLAGS={os.environ['XLA_FLAGS']})")
    except ImportError:
        jax = None
        print("JAX: left out (does not import; it is a PyPI peer, as docs/performance.md says)")

    for hidden, batches, unit in ((True, [64], "ms"), (False, [1, 8, 64, 256], "us")):
        model = "MLP 784-128-10" if hidden else "linear 784-10"
        for batch in batches:
            params, x, target = problem(hidden, batch)
            want = None
            if torch is not None:
                tparams = [torch.from_numpy(p) for p in params]
                tx, tt = torch.from_numpy(x), torch.from_numpy(target)
                report(f"torch loop, {model}, batch {batch}", timed(lambda: torch_loop(tparams, tx, tt), reps), unit)
                want = [g.numpy() for g in torch_loop(tparams, tx, tt)]
            if functorch is not None:
                def tloss(ps, xi, ti):
                    return loss(ps, xi, ti, tanh=torch.tanh)
                per_sample = functorch.vmap(functorch.grad(tloss), in_dims=(None, 0, 0))
                got = per_sample(tparams, tx, tt)
                assert all(np.allclose(a.numpy(), b, atol=1e-5) for a, b in zip(got, want)), "functorch disagrees"
                report(f"functorch vmap(grad), {model}, batch {batch}",
                       timed(lambda: per_sample(tparams, tx, tt), reps), unit)
            if jax is not None:
                jparams = [jnp.asarray(p) for p in params]

                def jloss(ps, xi, ti):
                    return loss(ps, xi, ti, tanh=jnp.tanh)

                fn = jax.jit(jax.vmap(jax.grad(jloss), in_axes=(None, 0, 0)))
                jx, jt = jnp.asarray(x), jnp.asarray(target)
                if want is not None:
                    got = fn(jparams, jx, jt)
                    assert all(np.allclose(np.asarray(a), b, atol=1e-5) for a, b in zip(got, want)), "JAX disagrees"
                report(f"JAX jit(vmap(grad)), {model}, batch {batch}",
                       timed(lambda: jax.block_until_ready(fn(jparams, jx, jt)), reps), unit)

    g = np.random.default_rng(7)
    w = (g.standard_normal((256, 256)) / 16.0).astype(np.float32)
    x = g.random(256, dtype=np.float32)
    if functorch is not None:
        tw = torch.from_numpy(w)
        jac = functorch.jacfwd(lambda v: torch.tanh(tw @ v))
        report("functorch jacfwd 256->256", timed(lambda: jac(torch.from_numpy(x)), reps), "ms")
    if jax is not None:
        jw = jnp.asarray(w)
        jac = jax.jit(jax.jacfwd(lambda v: jnp.tanh(jw @ v)))
        report("JAX jit(jacfwd) 256->256", timed(lambda: jax.block_until_ready(jac(jnp.asarray(x))), reps), "ms")

        params, v, x, target = mlp4_problem()
        jparams, jv = [jnp.asarray(p) for p in params], [jnp.asarray(t) for t in v]
        jx, jt = jnp.asarray(x), jnp.asarray(target)

        def mlp4_loss(ps):
            h = jx
            for l in range(0, len(ps), 2):
                h = h @ ps[l] + ps[l + 1]
                if l + 2 < len(ps):
                    h = jnp.tanh(h)
            return jnp.mean((h - jt) ** 2)

        g4 = jax.jit(jax.grad(mlp4_loss))
        hvp4 = jax.jit(lambda ps, vs: jax.jvp(jax.grad(mlp4_loss), (ps,), (vs,))[1])
        report("JAX jit(grad), MLP 256-512-512-10, batch 128", timed(lambda: jax.block_until_ready(g4(jparams)), reps),
               "ms")
        report("JAX jit(hvp) fwd over rev, MLP 256-512-512-10, batch 128",
               timed(lambda: jax.block_until_ready(hvp4(jparams, jv)), reps), "ms")
    if strata:
        print("\nStrata (bench_vmap medians) / peer:")
        for name, label in PEER_OF:
            if name in strata and label in MEDIANS:
                print(f"  {name:40s} / {label:58s} {strata[name] * 1e3:9.3f} ms / {MEDIANS[label] * 1e3:9.3f} ms = "
                      f"{strata[name] / MEDIANS[label]:.3f}x")


if __name__ == "__main__":
    main()
