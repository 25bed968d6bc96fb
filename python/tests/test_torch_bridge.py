"""Gradients across the PyTorch boundary, first and second order, against
PyTorch's own (skipped without PyTorch, an optional peer)."""
import numpy as np
import pytest

import strata

torch = pytest.importorskip("torch", reason="PyTorch is not installed (an optional peer)")
import strata.torch as st  # noqa: E402


def strata_f(x, y):
    return (strata.sin(x) * y + x * x * y).sum()


def torch_f(x, y):
    return (torch.sin(x) * y + x * x * y).sum()


def test_a_strata_function_inside_torch_autograd_to_second_order():
    x = torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64, requires_grad=True)
    y = torch.tensor([1.5, 0.5, -0.7], dtype=torch.float64, requires_grad=True)
    f = st.function(strata_f)
    got = torch.autograd.grad(f(x, y), (x, y), create_graph=True)
    want = torch.autograd.grad(torch_f(x, y), (x, y), create_graph=True)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12)
    # Second order: d/dx of sum(df/dx), through Strata's VJP of the VJP.
    got2 = torch.autograd.grad(got[0].sum(), (x, y))
    want2 = torch.autograd.grad(want[0].sum(), (x, y))
    for a, b in zip(got2, want2):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


def test_a_torch_function_inside_a_strata_tape_to_second_order():
    g = st.from_torch(lambda a: torch.exp(torch.sin(a)) * a)
    x = strata.tensor([0.4, -0.9], dtype=strata.float64)
    d1 = strata.grad(lambda t: g(t).sum())
    d2 = strata.grad(lambda t: d1(t).sum())
    xt = torch.tensor([0.4, -0.9], dtype=torch.float64, requires_grad=True)
    (w1,) = torch.autograd.grad((torch.exp(torch.sin(xt)) * xt).sum(), xt, create_graph=True)
    (w2,) = torch.autograd.grad(w1.sum(), xt)
    np.testing.assert_allclose(g(x).numpy(), (torch.exp(torch.sin(xt)) * xt).detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(d1(x).numpy(), w1.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(d2(x).numpy(), w2.numpy(), rtol=1e-12)


def test_dlpack_import_from_pytorch_views_and_bad_devices():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()  # a transposed view
    v = strata.from_dlpack(t)
    np.testing.assert_array_equal(v.numpy(), t.numpy())
    v[0, 1] = 100.0  # one memory: the write shows in PyTorch's tensor
    assert t[0, 1].item() == 100.0
    assert strata.tensor(torch.tensor([1, 2])).dtype == strata.int64
    # Strata has no uint8: refused naming the type, not read as bool.
    with pytest.raises(strata.DTypeError, match="no Strata dtype"):
        strata.from_dlpack(torch.tensor([0, 5, 255], dtype=torch.uint8))
    # The producer's own refusal propagates as it raised it.
    with pytest.raises(RuntimeError, match="meta"):
        strata.from_dlpack(torch.empty(2, device="meta"))
