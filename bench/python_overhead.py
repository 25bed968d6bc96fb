"""The Python module's call overhead (issue 38's targets), with its peers in
the same run: a one-element f32 add from Python (strata.add and the +
operator) against the same add from C++ (bench_dispatch's BM_TinyAdd,
started by this script) and against PyTorch eager from Python when torch is
importable; the ten-op tiny chain of bench_compile from Python, eager and
through strata.compile (one call, replayed in C++ as one fused op; its
result checked against eager's first), at 1K and 64K elements; and one
training epoch of the digits demo from Python (python/examples/digits.py)
against the C++ demo's epoch (bench_demo's BM_Strata_DigitsEpoch).

    PYTHONPATH=build/default/python python/.venv/bin/python bench/python_overhead.py \
        --bench-dispatch build/default/bin/bench_dispatch --bench-demo build/default/bin/bench_demo \
        --repetitions 5

Times are medians of --repetitions runs (min and max beside); pin the
process (taskset -c 1) on a shared machine. 1 thread on both sides. The
calls are timed as `python -m timeit` times a statement (compiled into the
timing loop: no lambda call, no clock read per call), and the C++ peer by
Google Benchmark's loop, which likewise reads no clock per call.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from peer_timing import timed, timed_statement  # noqa: E402


def cxx_median(binary, name, repetitions):
    """The median real time, in seconds, of benchmark `name` of a Google
    Benchmark binary, 1 thread."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(
            [binary, f"--benchmark_filter=^{name}(/real_time)?$", f"--benchmark_repetitions={repetitions}",
             "--benchmark_report_aggregates_only=true", f"--benchmark_out={out.name}",
             "--benchmark_out_format=json"],
            check=True, capture_output=True, text=True,
            env=dict(os.environ, STRATA_THREADS="1", STRATA_BENCH_THREADS="1"))
        report = json.load(open(out.name))
    rows = {b["aggregate_name"]: b for b in report["benchmarks"] if b.get("aggregate_name")}
    unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[rows["median"]["time_unit"]]
    return rows["median"]["real_time"] * unit


def digits_epoch_seconds(repetitions):
    """One epoch of python/examples/digits.py's loop (the C++ demo's), after
    one warm-up epoch."""
    import numpy as np

    import strata
    from strata import nn
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "examples"))
    import digits

    (x, y), _ = digits.load(digits.DEFAULT_DATA, strata.device("cpu:0"))
    strata.manual_seed(0)
    model = digits.make_model()
    opt = nn.Adam(model.parameters(), lr=3e-3)
    rng = np.random.default_rng(1)
    return timed(lambda: digits.train_epoch(model, opt, x, y, 64, rng), repetitions, min_time=0.5)


def chain(strata, x, y):
    t = strata.sin(x * y) + 0.75
    t = strata.tanh(t) * x
    t = strata.sigmoid(strata.exp(t) - y)
    return t * t + x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-dispatch", help="bench_dispatch binary (the C++ peer of the add)")
    ap.add_argument("--bench-demo", help="bench_demo binary (the C++ peer of the digits epoch)")
    ap.add_argument("--repetitions", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("STRATA_THREADS", "1")
    import numpy as np

    import strata

    a, b = strata.full([1], 1.0), strata.full([1], 2.0)
    fmt = lambda r: f"{r[0] * 1e6:.3f} us [{r[1] * 1e6:.3f}, {r[2] * 1e6:.3f}]"  # noqa: E731
    names = dict(strata=strata, chain=chain, a=a, b=b, x=strata.rand([1024]), y=strata.rand([1024]))
    add_fn = timed_statement("strata.add(a, b)", names, args.repetitions)
    add_op = timed_statement("a + b", names, args.repetitions)
    tiny_chain = timed_statement("chain(strata, x, y)", names, args.repetitions)
    compiled = strata.compile(lambda x, y: chain(strata, x, y))
    names["compiled"] = compiled
    if not np.array_equal(compiled(names["x"], names["y"]).numpy(), chain(strata, names["x"], names["y"]).numpy()):
        raise SystemExit("the compiled chain's bits differ from the eager chain's")
    compiled_chain = timed_statement("compiled(x, y)", names, args.repetitions)
    wide = dict(strata=strata, chain=chain, compiled=compiled, x=strata.rand([65536]), y=strata.rand([65536]))
    wide_eager = timed_statement("chain(strata, x, y)", wide, args.repetitions)
    wide_compiled = timed_statement("compiled(x, y)", wide, args.repetitions)
    print(f"python strata.add, 1 element: {fmt(add_fn)}")
    print(f"python a + b, 1 element:      {fmt(add_op)}")
    print(f"python 10-op chain, 1K:       {fmt(tiny_chain)}")
    print(f"python compiled chain, 1K:    {fmt(compiled_chain)}; compiled/eager {compiled_chain[0] / tiny_chain[0]:.2f}")
    print(f"python 10-op chain, 64K:      {fmt(wide_eager)}")
    print(f"python compiled chain, 64K:   {fmt(wide_compiled)}; compiled/eager {wide_compiled[0] / wide_eager[0]:.2f}")
    if args.bench_demo:
        py_epoch = digits_epoch_seconds(args.repetitions)
        cxx_epoch = cxx_median(args.bench_demo, "BM_Strata_DigitsEpoch", args.repetitions)
        print(f"python digits epoch:          {py_epoch[0] * 1e3:.3f} ms [{py_epoch[1] * 1e3:.3f}, "
              f"{py_epoch[2] * 1e3:.3f}]")
        print(f"C++ digits epoch:             {cxx_epoch * 1e3:.3f} ms (bench_demo, median); "
              f"ratio python/C++ {py_epoch[0] / cxx_epoch:.2f}")
    if args.bench_dispatch:
        cxx = cxx_median(args.bench_dispatch, "BM_TinyAdd", args.repetitions)
        print(f"C++ add, 1 element:           {cxx * 1e6:.3f} us (bench_dispatch BM_TinyAdd, median)")
        print(f"ratio python/C++ add: {add_fn[0] / cxx:.2f} (strata.add), {add_op[0] / cxx:.2f} (+)")
    try:
        import torch
    except ImportError:
        print("torch: not importable here; the PyTorch ratios are not measured")
        return
    torch.set_num_threads(1)
    names = dict(torch=torch, chain=chain, a=torch.full([1], 1.0), b=torch.full([1], 2.0), x=torch.rand(1024),
                 y=torch.rand(1024))
    t_add = timed_statement("torch.add(a, b)", names, args.repetitions)
    t_chain = timed_statement("chain(torch, x, y)", names, args.repetitions)
    print(f"torch.add, 1 element: {fmt(t_add)}; ratio strata/torch {add_fn[0] / t_add[0]:.2f}")
    print(f"torch 10-op chain, 1K: {fmt(t_chain)}; ratio strata/torch {tiny_chain[0] / t_chain[0]:.2f}")


if __name__ == "__main__":
    main()
