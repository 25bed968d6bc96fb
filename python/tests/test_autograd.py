"""Autograd from Python: backward, tapes, transforms to any order."""
import threading
import time

import numpy as np
import pytest

import strata


def test_backward_accumulates_into_grad():
    x = strata.tensor([1.0, 2.0, 3.0], dtype=strata.float64, requires_grad=True)
    assert x.grad is None
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0, 12.0])
    x.grad = None
    assert x.grad is None
    y = strata.tanh(x) * 2.0
    y.backward(strata.ones(3, dtype=strata.float64))
    np.testing.assert_allclose(x.grad.numpy(), 2 * (1 - np.tanh([1.0, 2.0, 3.0]) ** 2))


def test_no_grad_and_enable_grad():
    x = strata.ones(2, requires_grad=True)
    with strata.no_grad():
        assert not strata.is_grad_enabled()
        y = x * 2.0
        with strata.enable_grad():
            z = x * 2.0
    assert strata.is_grad_enabled()
    assert not y.requires_grad and z.requires_grad
    assert not x.detach().requires_grad


def test_gradient_tapes_nest_to_third_order():
    x = strata.tensor([0.5, 1.5], dtype=strata.float64)
    with strata.GradientTape() as t3:
        t3.watch(x)
        with strata.GradientTape(higher_order=True) as t2:
            t2.watch(x)
            with strata.GradientTape(higher_order=True) as t1:
                t1.watch(x)
                y = (x ** 4.0).sum()
                g1 = t1.gradient(y, x)
            g2 = t2.gradient(g1.sum(), x)
        g3 = t3.gradient(g2.sum(), [x])[0]
    xs = np.array([0.5, 1.5])
    np.testing.assert_allclose(g1.numpy(), 4 * xs ** 3)
    np.testing.assert_allclose(g2.numpy(), 12 * xs ** 2)
    np.testing.assert_allclose(g3.numpy(), 24 * xs)


def test_a_tape_is_used_inside_its_block():
    x = strata.ones(2)
    with strata.GradientTape() as tape:
        tape.watch(x)
        y = (x * 3.0).sum()
    with pytest.raises(ValueError, match="closed"):
        tape.gradient(y, x)


def test_function_transforms_compose_to_any_order():
    f = lambda t: (strata.sin(t) * t).sum()  # noqa: E731
    x = strata.tensor([0.3, 1.1], dtype=strata.float64)
    xs = np.array([0.3, 1.1])
    d1 = strata.grad(f)
    d2 = strata.grad(lambda t: d1(t).sum())
    d3 = strata.grad(lambda t: d2(t).sum())
    np.testing.assert_allclose(d1(x).numpy(), np.cos(xs) * xs + np.sin(xs))
    np.testing.assert_allclose(d2(x).numpy(), 2 * np.cos(xs) - xs * np.sin(xs))
    np.testing.assert_allclose(d3(x).numpy(), -3 * np.sin(xs) - xs * np.cos(xs))
    v = strata.tensor([1.0, -2.0], dtype=strata.float64)
    np.testing.assert_allclose(strata.hvp(f, x, v).numpy(), (2 * np.cos(xs) - xs * np.sin(xs)) * [1, -2])
    np.testing.assert_allclose(strata.hessian(f, x).numpy(), np.diag(2 * np.cos(xs) - xs * np.sin(xs)))
    value, tangent = strata.jvp(lambda t: strata.exp(t), x, v)
    np.testing.assert_allclose(tangent.numpy(), np.exp(xs) * [1, -2])
    value, cot = strata.vjp(lambda t: strata.exp(t), x, v)
    np.testing.assert_allclose(cot.numpy(), np.exp(xs) * [1, -2])
    np.testing.assert_allclose(strata.jacrev(lambda t: t * t, x).numpy(), np.diag(2 * xs))
    np.testing.assert_allclose(strata.jacfwd(lambda t: t * t, x).numpy(), np.diag(2 * xs))
    val, g = strata.value_and_grad(f)(x)
    np.testing.assert_allclose(val.item(), (np.sin(xs) * xs).sum())


def test_a_python_exception_inside_a_transform_propagates_with_its_traceback():
    def broken(t):
        raise KeyError("raised in the user's function")

    with pytest.raises(KeyError, match="raised in the user's function") as e:
        strata.grad(broken)(strata.ones(2))
    assert any(entry.name == "broken" for entry in e.traceback)
    # And a hook's.
    x = strata.ones(2, requires_grad=True)

    def hook(g):
        raise RuntimeError("hook failed")

    x.register_hook(hook)
    with pytest.raises(RuntimeError, match="hook failed"):
        (x * 2.0).sum().backward()


def test_long_calls_release_the_gil():
    a = strata.randn(600, 600, dtype=strata.float64)
    done = threading.Event()
    ticks = 0

    def work():
        for _ in range(20):
            (a @ a).sum()
        done.set()

    worker = threading.Thread(target=work)
    worker.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0)
    worker.join()
    # Had the matrix products held the GIL, this loop would barely run.
    assert ticks > 50, ticks


def test_transforms_over_several_arguments():
    f = lambda x, y: (strata.sin(x) * y * y).sum()  # noqa: E731
    x = strata.tensor([0.2, 0.7], dtype=strata.float64)
    y = strata.tensor([1.5, -0.5], dtype=strata.float64)
    xs, ys = x.numpy(), y.numpy()
    np.testing.assert_allclose(strata.grad(f)(x, y).numpy(), np.cos(xs) * ys ** 2)
    np.testing.assert_allclose(strata.grad(f, argnums=1)(x, y).numpy(), 2 * np.sin(xs) * ys)
    gx, gy = strata.grad(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gy.numpy(), 2 * np.sin(xs) * ys)
    # Second order across arguments: d/dy of sum(df/dx) = 2 cos(x) y.
    np.testing.assert_allclose(
        strata.grad(lambda a, b: strata.grad(f)(a, b).sum(), argnums=1)(x, y).numpy(), 2 * np.cos(xs) * ys)
    value, g = strata.value_and_grad(f, argnums=1)(x, y)
    np.testing.assert_allclose(value.item(), (np.sin(xs) * ys ** 2).sum())
    # value_and_grad composes: the derivative of its gradient.
    np.testing.assert_allclose(
        strata.grad(lambda a: strata.value_and_grad(f, argnums=1)(a, y)[1].sum())(x).numpy(), 2 * np.cos(xs) * ys)
    v = strata.ones(2, dtype=strata.float64)
    out, tangent = strata.jvp(lambda a, b: a * b, (x, y), (v, strata.zeros(2, dtype=strata.float64)))
    np.testing.assert_allclose(tangent.numpy(), ys)
    out, (ca, cb) = strata.vjp(lambda a, b: a * b, (x, y), v)
    np.testing.assert_allclose(cb.numpy(), xs)
    hx, hy = strata.hvp(f, (x, y), (v, strata.zeros(2, dtype=strata.float64)))
    np.testing.assert_allclose(hx.numpy(), -np.sin(xs) * ys ** 2)
    np.testing.assert_allclose(hy.numpy(), 2 * np.cos(xs) * ys)
    with pytest.raises(ValueError, match="argnums 2 is out of range"):
        strata.grad(f, argnums=2)(x, y)
