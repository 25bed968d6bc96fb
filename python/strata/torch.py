"""Gradients across the PyTorch boundary (docs/python.md).

    strata.torch.function(f)   a Strata function of tensors as a PyTorch
                               function: takes and returns torch tensors,
                               differentiable by torch.autograd to any order
    strata.torch.from_torch(g) a PyTorch function of tensors as a Strata
                               function: differentiable by Strata's tapes and
                               transforms to any order

Each derivative is computed on its own side: a backward pass through
function(f) runs Strata's reverse mode on f, and its own backward (second
order) is the same construction applied to that VJP, and so on. Tensors
cross as copies into Strata and as DLPack views into PyTorch (CPU).
Importing this module imports torch; strata does not need it otherwise.
"""
import torch as _torch

import strata as _strata
from strata._bridge import as_tuple as _as_tuple
from strata._bridge import strata_vjp as _strata_vjp


def _to_strata(x):
    return _strata.tensor(x.detach().cpu().contiguous().numpy())


def _to_torch(t):
    return _torch.from_dlpack(t.detach())


def function(f):
    """f, a function of Strata tensors returning a tensor or a tuple of them,
    as a function of torch tensors that torch.autograd differentiates (to
    any order): its backward is Strata's VJP of f, wrapped the same way."""

    class StrataFunction(_torch.autograd.Function):
        @staticmethod
        def forward(ctx, *xs):
            ctx.save_for_backward(*xs)
            outs = _as_tuple(f(*[_to_strata(x) for x in xs]))
            ctx.n_outputs = len(outs)
            result = tuple(_to_torch(o).clone() for o in outs)
            return result[0] if len(result) == 1 else result

        @staticmethod
        def backward(ctx, *grads):
            xs = ctx.saved_tensors
            g = function(_strata_vjp(f, len(xs)))(*xs, *grads)
            return g

    def call(*xs):
        return StrataFunction.apply(*xs)

    call.__name__ = getattr(f, "__name__", "strata_function")
    return call


def _torch_vjp(g, n):
    """The VJP of a torch function of n tensors, as a torch function of the
    n primals and one cotangent per output."""

    def vjp(*args):
        primals, cotangents = args[:n], args[n:]
        with _torch.enable_grad():
            ps = [p.detach().requires_grad_(True) if not p.requires_grad else p for p in primals]
            outs = _as_tuple(g(*ps))
            grads = _torch.autograd.grad(outs, ps, cotangents, create_graph=True, allow_unused=True)
        grads = tuple(gr if gr is not None else _torch.zeros_like(p) for gr, p in zip(grads, ps))
        return grads[0] if n == 1 else grads

    return vjp


def from_torch(g, name=None):
    """g, a function of torch tensors returning a tensor or a tuple of them,
    as a Strata function (a custom_vjp) that Strata differentiates to any
    order: its reverse rule is PyTorch's VJP of g, wrapped the same way."""

    def run(*xs):
        outs = _as_tuple(g(*[_to_torch(x).clone() for x in xs]))
        res = tuple(_to_strata(o) for o in outs)
        return res[0] if len(res) == 1 else res

    fname = name or f"torch:{getattr(g, '__qualname__', 'function')}"
    f = _strata.custom_vjp(run, name=fname)

    def fwd(*xs):
        return run(*xs), tuple(xs)

    # The rules must not refer to `f`: the C++ function holds them, and a
    # cycle through C++ is one Python's collector cannot see.
    def bwd(xs, cot):
        vjp = from_torch(_torch_vjp(g, len(xs)), name=f"{fname}'")
        return _as_tuple(vjp(*xs, *_as_tuple(cot)))

    f.defvjp(fwd, bwd)
    return f
