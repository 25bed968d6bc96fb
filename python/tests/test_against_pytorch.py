"""Gradients to third order against PyTorch's own, when PyTorch is importable
(an optional peer: a fresh machine has none, and these tests skip)."""
import numpy as np
import pytest

import strata

torch = pytest.importorskip("torch", reason="PyTorch is not installed (an optional peer)")


def strata_f(t):
    return (strata.sin(t) * t * t + strata.exp(strata.tanh(t)) / (1.0 + t * t)).sum()


def torch_f(t):
    return (torch.sin(t) * t * t + torch.exp(torch.tanh(t)) / (1.0 + t * t)).sum()


def torch_derivatives(x, order):
    t = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    out, y = [], torch_f(t)
    for _ in range(order):
        (g,) = torch.autograd.grad(y, t, create_graph=True)
        out.append(g.detach().numpy())
        y = g.sum()
    return out


def test_nested_grad_matches_pytorch_to_third_order():
    x = np.array([-1.3, -0.2, 0.4, 1.7])
    want = torch_derivatives(x, 3)
    d1 = strata.grad(strata_f)
    d2 = strata.grad(lambda t: d1(t).sum())
    d3 = strata.grad(lambda t: d2(t).sum())
    xs = strata.tensor(x, dtype=strata.float64)
    for k, d in enumerate((d1, d2, d3)):
        np.testing.assert_allclose(d(xs).numpy(), want[k], rtol=1e-12, atol=1e-12, err_msg=f"order {k + 1}")


def test_backward_with_create_graph_matches_pytorch_to_third_order():
    x = np.array([0.3, -0.8, 2.1])
    want = torch_derivatives(x, 3)
    t = strata.tensor(x, dtype=strata.float64, requires_grad=True)
    y = strata_f(t)
    for k in range(3):
        t.grad = None
        y.backward(create_graph=True)
        g = t.grad
        np.testing.assert_allclose(g.numpy(), want[k], rtol=1e-12, atol=1e-12, err_msg=f"order {k + 1}")
        y = g.sum()


def test_dlpack_into_pytorch_shares_memory():
    t = strata.tensor([[1.0, 2.0], [3.0, 4.0]])
    p = torch.from_dlpack(t)
    t[1, 1] = 9.0
    assert p[1, 1].item() == 9.0
    back = strata.from_dlpack(torch.arange(6, dtype=torch.float32).reshape(2, 3))
    np.testing.assert_array_equal(back.numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
