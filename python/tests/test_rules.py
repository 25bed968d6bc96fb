"""Custom derivative rules from Python, checkpointing, autocast, GradScaler."""
import numpy as np
import pytest

import strata
from strata import nn


def test_custom_vjp_replaces_the_gradient_and_differentiates_again():
    @strata.custom_vjp
    def cube(x):
        return x * x * x

    def fwd(x):
        return x * x * x, (x,)

    def bwd(residuals, g):
        (x,) = residuals
        return (g * 3.0 * x * x,)

    cube.defvjp(fwd, bwd)
    x = strata.tensor([1.0, 2.0], dtype=strata.float64)
    np.testing.assert_allclose(cube(x).numpy(), [1.0, 8.0])
    d1 = strata.grad(lambda t: cube(t).sum())
    d2 = strata.grad(lambda t: d1(t).sum())
    np.testing.assert_allclose(d1(x).numpy(), [3.0, 12.0])
    np.testing.assert_allclose(d2(x).numpy(), [6.0, 12.0])

    @strata.custom_vjp
    def clip_gradient(x):
        return x

    clip_gradient.defvjp(lambda x: (x, ()), lambda res, g: (strata.clamp(g, -1.0, 1.0),))
    y = strata.tensor([3.0], requires_grad=True)
    (clip_gradient(y) * 10.0).sum().backward()
    assert y.grad.item() == 1.0


def test_custom_jvp_in_both_modes():
    @strata.custom_jvp
    def f(x):
        return strata.sin(x)

    @f.defjvp
    def f_jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return strata.sin(x), strata.cos(x) * t * 2.0  # deliberately twice the true derivative

    x = strata.tensor([0.5], dtype=strata.float64)
    v = strata.tensor([1.0], dtype=strata.float64)
    _, tangent = strata.jvp(lambda t: f(t), x, v)
    np.testing.assert_allclose(tangent.numpy(), 2 * np.cos([0.5]))
    np.testing.assert_allclose(strata.grad(lambda t: f(t).sum())(x).numpy(), 2 * np.cos([0.5]))


def test_a_python_exception_in_a_rule_propagates():
    @strata.custom_vjp
    def f(x):
        return x * 2.0

    def bad_bwd(res, g):
        raise ZeroDivisionError("in the rule")

    f.defvjp(lambda x: (x * 2.0, ()), bad_bwd)
    x = strata.ones(2, requires_grad=True)
    with pytest.raises(ZeroDivisionError, match="in the rule"):
        f(x).sum().backward()
    with pytest.raises(TypeError, match="defvjp"):
        strata.custom_vjp(lambda x: x)(x)


def test_checkpoint_gives_the_same_gradients():
    strata.manual_seed(0)
    w = strata.randn(8, 8, dtype=strata.float64, requires_grad=True)
    x = strata.randn(4, 8, dtype=strata.float64)
    block = lambda t: strata.tanh(t @ w) @ w  # noqa: E731
    block(x).sum().backward()
    plain = w.grad.numpy()
    w.grad = None
    strata.checkpoint(block, x).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), plain, rtol=1e-14)


def test_autocast_and_grad_scaler():
    a, b = strata.randn(4, 4), strata.randn(4, 4)
    with strata.autocast(strata.bfloat16):
        assert (a @ b).dtype == strata.bfloat16
    assert (a @ b).dtype == strata.float32
    model = nn.Linear(4, 1)
    opt = nn.SGD(model.parameters(), lr=0.1)
    scaler = strata.GradScaler(init_scale=1024.0)
    before = model.weight.numpy().copy()
    loss = model(a).sum()
    scaler.scale(loss).backward()
    assert scaler.step(opt)
    scaler.update()
    assert not np.array_equal(model.weight.numpy(), before)
    assert scaler.get_scale() == 1024.0
    with pytest.raises(strata.ValueError):
        with strata.autocast(strata.float32):
            pass


def test_vmap_and_per_sample_gradients():
    x = strata.randn(5, 3, dtype=strata.float64)
    w = strata.randn(3, dtype=strata.float64)
    dots = strata.vmap(lambda row: (row * w).sum())(x)
    np.testing.assert_allclose(dots.numpy(), x.numpy() @ w.numpy())
    # grad of each example, through vmap of grad.
    per_example = strata.vmap(strata.grad(lambda row: (strata.sin(row) * w).sum()))(x)
    np.testing.assert_allclose(per_example.numpy(), np.cos(x.numpy()) * w.numpy())
    # in_dims with an unmapped input, out_dims moving the batch dim.
    out = strata.vmap(lambda a, b: a * b, in_dims=(0, None), out_dims=1)(x, w)
    np.testing.assert_allclose(out.numpy(), (x.numpy() * w.numpy()).T)
    y = strata.randn(5, dtype=strata.float64)
    grads = strata.per_sample_grad(lambda params, ex: ((ex[0] * params[0]).sum() - ex[1]) ** 2.0, [w], [x, y])
    resid = x.numpy() @ w.numpy() - y.numpy()
    np.testing.assert_allclose(grads[0].numpy(), 2 * resid[:, None] * x.numpy(), rtol=1e-12)
    with pytest.raises(ValueError, match="in_dims has 1 entries for 2 inputs"):
        strata.vmap(lambda a, b: a, in_dims=(0,))(x, w)


def test_fixed_point_and_root_differentiate_through_the_solution():
    a = strata.tensor([0.5], dtype=strata.float64, requires_grad=True)
    # x = a * cos(x): dx/da = cos(x) / (1 + a sin(x)).
    s = strata.fixed_point(lambda x, p: p[0] * strata.cos(x), strata.zeros(1, dtype=strata.float64), [a])
    assert s.converged and s.iterations > 1
    s.x.sum().backward()
    x = s.x.item()
    np.testing.assert_allclose(a.grad.item(), np.cos(x) / (1 + 0.5 * np.sin(x)), rtol=1e-8)
    c = strata.tensor([2.0], dtype=strata.float64, requires_grad=True)
    r = strata.root(lambda x, p: x * x - p[0], strata.ones(1, dtype=strata.float64), [c])
    np.testing.assert_allclose(r.x.item(), np.sqrt(2.0), rtol=1e-10)
    r.x.sum().backward()
    np.testing.assert_allclose(c.grad.item(), 0.5 / np.sqrt(2.0), rtol=1e-8)
