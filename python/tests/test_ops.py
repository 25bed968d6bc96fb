"""Ops as functions, methods and operators, against NumPy."""
import numpy as np
import pytest

import strata

rng = np.random.default_rng(0)
X = rng.uniform(0.1, 2.0, size=(3, 4))
Y = rng.uniform(-1.0, 1.0, size=(3, 4))

UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1,
    "sqrt": np.sqrt, "rsqrt": lambda a: 1 / np.sqrt(a), "sin": np.sin, "cos": np.cos, "atan": np.arctan,
    "tanh": np.tanh, "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "relu": lambda a: np.maximum(a, 0),
    "floor": np.floor, "ceil": np.ceil, "reciprocal": np.reciprocal, "square": np.square, "sign": np.sign,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_match_numpy(name, device):
    x = strata.tensor(X, dtype=strata.float64)
    want = UNARY[name](X)
    np.testing.assert_allclose(getattr(strata, name)(x).numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(getattr(x, name)().numpy(), want, rtol=1e-12)
    got = getattr(strata, name)(strata.tensor(X, dtype=strata.float32, device=device)).numpy()
    # f32 on cpu:0 is SLEEF's 1-ULP math; other devices' functions (Vulkan's
    # atan) are allowed a few ULP more (tests/common/test_device.hpp).
    rtol = 2e-6 if device == "cpu:0" else 3e-5
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=rtol, atol=1e-6)


def test_binary_ops_broadcast_and_take_numbers_on_either_side(device):
    x = strata.tensor(X, dtype=strata.float32, device=device)
    y = strata.tensor(Y[0], dtype=strata.float32, device=device)  # broadcast along dim 0
    x32, y32 = X.astype(np.float32), Y[0].astype(np.float32)
    for got, want in [
        (x + y, x32 + y32), (x - y, x32 - y32), (x * y, x32 * y32), (x / y, x32 / y32), (x ** 2, x32 ** 2),
        (2.0 + x, 2 + x32), (1 - x, 1 - x32), (3 * x, 3 * x32), (1 / x, 1 / x32), (-x, -x32),
        (strata.maximum(x, 0.5), np.maximum(x32, 0.5)), (strata.minimum(x, y), np.minimum(x32, y32)),
        (strata.add(1.0, x), 1 + x32), (strata.pow(x, 3.0), x32 ** 3),
    ]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    for got, want in [(x > y, x32 > y32), (x <= 1.0, x32 <= 1.0), (x == x, np.ones_like(x32, bool))]:
        assert got.dtype == strata.bool_
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_allclose(strata.where(x > 1.0, x, y).numpy(), np.where(x32 > 1, x32, y32))
    np.testing.assert_allclose(strata.clamp(x, 0.5, 1.5).numpy(), np.clip(x32, 0.5, 1.5))


def test_reductions_matmul_and_nn_ops(device):
    x = strata.tensor(X, dtype=strata.float64)
    np.testing.assert_allclose(x.sum().item(), X.sum())
    np.testing.assert_allclose(strata.sum(x, 1).numpy(), X.sum(1))
    np.testing.assert_allclose(x.mean(dim=[0, 1]).item(), X.mean())
    np.testing.assert_allclose(x.amax(0, keepdim=True).numpy(), X.max(0, keepdims=True))
    np.testing.assert_array_equal(x.argmax(1).numpy(), X.argmax(1))
    np.testing.assert_allclose((x @ x.T).numpy(), X @ X.T)
    np.testing.assert_allclose(strata.matmul(x, x.T).numpy(), X @ X.T)
    e = np.exp(X - X.max(1, keepdims=True))
    np.testing.assert_allclose(strata.softmax(x, 1).numpy(), e / e.sum(1, keepdims=True))
    np.testing.assert_allclose(strata.cat([x, x], 0).numpy(), np.concatenate([X, X]))
    np.testing.assert_allclose(strata.stack([x, x], 1).numpy(), np.stack([X, X], 1))
    w = strata.tensor(Y[:2], dtype=strata.float64)  # [out 2, in 4]
    b = strata.tensor([0.5, -0.5], dtype=strata.float64)
    np.testing.assert_allclose(strata.linear(x, w).numpy(), X @ Y[:2].T)
    np.testing.assert_allclose(strata.linear(x, w, b).numpy(), X @ Y[:2].T + [0.5, -0.5])
    d = strata.tensor(X, dtype=strata.float32, device=device)
    np.testing.assert_allclose((d @ d.T).numpy(), (X @ X.T).astype(np.float32), rtol=1e-5)


def test_wrong_operands_are_python_errors_naming_the_op():
    x = strata.ones(2, 2)
    with pytest.raises(strata.ShapeError) as e:
        x + strata.ones(3)
    # The C++ message, as it is: the op, the operands, the device.
    assert str(e.value).startswith("add(f32[2, 2], f32[3]) on cpu:0: shapes [2, 2] and [3] cannot be broadcast")
    assert isinstance(e.value, ValueError) and isinstance(e.value, strata.Error)
    with pytest.raises(strata.ShapeError, match="matmul"):
        x @ strata.ones(3, 3)
    with pytest.raises(TypeError, match="exp"):
        strata.exp("not a tensor")
    with pytest.raises(TypeError):
        x + "text"
    with pytest.raises(strata.DTypeError) as e:
        strata.ones(2, dtype=strata.int64).requires_grad_(True)
    assert isinstance(e.value, TypeError)
