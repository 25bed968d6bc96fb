"""strata.compile from Python: the C++ compiled function over a Python
function — replays without running Python, the eager values and gradients,
guards on values the function reads on the host, errors as Python raises
them."""
import gc
import weakref

import numpy as np
import pytest

import strata


def chain(x, y):
    t = strata.sigmoid(strata.exp(strata.tanh(strata.sin(x * y) + 0.75) * x) - y)
    return t * t + x


def test_a_replay_runs_no_python_and_gives_the_eager_bits():
    runs = []

    def f(x, y):
        runs.append(1)
        return chain(x, y)

    compiled = strata.compile(f)
    strata.manual_seed(3)
    x, y = strata.randn(1000), strata.randn(1000)
    for _ in range(3):
        assert np.array_equal(compiled(x, y).numpy(), chain(x, y).numpy())
    assert len(runs) == 1, "the function ran once, for the trace"
    s = compiled.stats()
    assert (s["traces"], s["replays"], s["fused_regions"], s["fused_ops"]) == (1, 2, 1, 10), s
    assert "10 ops (mul sin add tanh mul exp sub sigmoid mul add)" in compiled.report(x, y)
    # An elementwise trace serves every shape of its ranks: no new trace.
    assert np.array_equal(compiled(x[:10], y[:10]).numpy(), chain(x[:10], y[:10]).numpy())
    assert len(runs) == 1 and compiled.stats()["shape_free_traces"] == 1


def test_gradients_flow_through_a_compiled_function_to_second_order():
    compiled = strata.compile(chain)
    strata.manual_seed(4)
    x0, y0 = strata.randn(64, dtype=strata.float64), strata.randn(64, dtype=strata.float64)

    def second(f):
        x = x0.detach()
        y = y0.detach()
        with strata.GradientTape() as outer:
            outer.watch(x)
            with strata.GradientTape(higher_order=True) as inner:
                inner.watch(x)
                inner.watch(y)
                loss = f(x, y).sum()
                gx, gy = inner.gradient(loss, [x, y])
            penalty = (gx * gx).sum()
            return gx, gy, outer.gradient(penalty, [x])[0]

    for got, want in zip(second(compiled), second(chain)):
        assert np.allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


def test_a_value_read_on_the_host_is_a_guard_and_each_branch_gets_a_trace():
    runs = []

    @strata.compile
    def branchy(x):
        runs.append(1)
        if x.sum() > 0:  # Tensor.__bool__ reads the value on the host: a guard
            return strata.exp(x)
        return -x

    up, down = strata.full([3], 1.0), strata.full([3], -1.0)
    for x, want in ((up, strata.exp(up)), (up * 2.0, strata.exp(up * 2.0)), (down, -down), (down * 3.0, -(down * 3.0)),
                    (up * 0.5, strata.exp(up * 0.5))):
        assert np.array_equal(branchy(x).numpy(), want.numpy())
    s = branchy.stats()
    assert len(runs) == 2 and s["traces"] == 2 and s["replays"] == 3 and s["guard_failures"] == 1, s
    assert any("(1 guard)" in sig for sig in s["signatures"]), s["signatures"]


def test_tuples_in_and_out_and_what_is_refused():
    @strata.compile
    def both(x, y):
        return x + y, x * y

    x, y = strata.tensor([1.0, 2.0]), strata.tensor([3.0, 4.0])
    for _ in range(2):
        s, p = both(x, y)
        assert s.tolist() == [4.0, 6.0] and p.tolist() == [3.0, 8.0]

    with pytest.raises(TypeError, match="positional arguments only"):
        both(x, y=y)
    with pytest.raises(TypeError, match="argument 1 of both is float; a compiled function takes strata.Tensor"):
        both(x, 2.0)

    @strata.compile
    def not_tensors(x):
        return x, 3

    with pytest.raises(TypeError, match="returned int as output 1"):
        not_tensors(x)

    @strata.compile
    def raises(x):
        raise KeyError("from the function")

    with pytest.raises(KeyError, match="from the function"):
        raises(x)

    counter = strata.zeros([1])

    @strata.compile
    def writes(x):
        counter.copy_(counter + 1.0)
        return strata.exp(x)

    for _ in range(3):
        writes(x)
    assert counter.tolist() == [3.0]
    fallbacks = writes.stats()["fallbacks"]
    assert len(fallbacks) == 1 and "in-place op" in fallbacks[0][1], fallbacks


def test_a_compiled_function_is_collected_with_its_closure():
    def make():
        big = strata.ones([1000])
        return strata.compile(lambda x: x * big)

    f = make()
    f(strata.ones([1000]))
    ref = weakref.ref(f)
    del f
    gc.collect()
    assert ref() is None, "the C++ compiled function kept the Python function alive"
