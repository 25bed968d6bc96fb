"""Gradients across the JAX boundary (docs/python.md).

    strata.jax.function(f)   a Strata function of tensors as a JAX function
                             of arrays: usable under jax.jit and jax.vmap
                             (through jax.pure_callback), differentiable by
                             jax.grad / jax.vjp to any order
    strata.jax.from_jax(g)   a JAX function of arrays as a Strata function:
                             differentiable by Strata's tapes and transforms
                             to any order

Each derivative is computed on its own side, as in strata.torch: the
reverse rule of function(f) (a jax.custom_vjp) is Strata's VJP of f, wrapped
by function() again, so JAX's second derivative runs Strata's reverse mode
twice; from_jax(g)'s rule is jax.vjp of g, wrapped by from_jax() again.
Arrays cross as copies through NumPy (host memory). JAX's forward mode
(jax.jvp, jax.jacfwd) does not reach through function(f): a jax.custom_vjp
has no JVP rule. Importing this module imports jax; strata does not need it
otherwise.
"""
import jax as _jax
import numpy as _np

import strata as _strata
from strata._bridge import as_tuple as _as_tuple
from strata._bridge import strata_vjp as _strata_vjp


def _out_types(f, xs, out_shape):
    """What f returns for inputs like xs, as jax.ShapeDtypeStructs: the
    caller's `out_shape`, or f run once on zeros of the inputs' shapes and
    dtypes (pure_callback needs the result's type before it runs)."""
    if out_shape is not None:
        return tuple(_as_tuple(out_shape))
    probe = _as_tuple(f(*[_strata.tensor(_np.zeros(x.shape, x.dtype)) for x in xs]))
    return tuple(_jax.ShapeDtypeStruct(tuple(o.shape), o.numpy().dtype) for o in probe)


def function(f, out_shape=None):
    """f, a function of Strata tensors returning a tensor or a tuple of them,
    as a function of JAX arrays that jax.grad differentiates (to any order):
    a jax.custom_vjp whose rule is Strata's VJP of f, wrapped the same way.

    f runs on the host through jax.pure_callback, so the wrapped function
    also works under jax.jit and jax.vmap (one call per lane). The type of
    its result is `out_shape` (a jax.ShapeDtypeStruct or a tuple of them)
    or, when None, what f gives for zeros of the inputs' shapes and dtypes,
    found once per input signature."""
    types = {}

    def host(*xs):
        outs = _as_tuple(f(*[_strata.tensor(_np.asarray(x)) for x in xs]))
        return tuple(o.numpy() for o in outs)

    @_jax.custom_vjp
    def call(*xs):
        key = tuple((tuple(x.shape), _np.dtype(x.dtype).str) for x in xs)
        if key not in types:
            types[key] = _out_types(f, xs, out_shape)
        outs = _jax.pure_callback(host, types[key], *xs, vmap_method="sequential")
        return outs[0] if len(outs) == 1 else tuple(outs)

    def fwd(*xs):
        return call(*xs), xs

    def bwd(xs, cotangent):
        grads = function(_strata_vjp(f, len(xs)), out_shape=tuple(
            _jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs))(*xs, *_as_tuple(cotangent))
        return _as_tuple(grads)

    call.defvjp(fwd, bwd)
    call.__name__ = getattr(f, "__name__", "strata_function")
    return call


def _jax_vjp(g, n):
    """The VJP of a JAX function of n arrays, as a JAX function of the n
    primals and one cotangent per output."""

    def vjp(*args):
        primals, cotangents = args[:n], args[n:]
        outs, pullback = _jax.vjp(lambda *p: _as_tuple(g(*p)), *primals)
        grads = pullback(tuple(cotangents))
        return grads[0] if n == 1 else tuple(grads)

    return vjp


def from_jax(g, name=None):
    """g, a function of JAX arrays returning an array or a tuple of them, as
    a Strata function (a custom_vjp) that Strata differentiates to any
    order: its reverse rule is jax.vjp of g, wrapped the same way."""

    def run(*xs):
        outs = _as_tuple(g(*[_jax.numpy.asarray(x.numpy()) for x in xs]))
        res = tuple(_strata.tensor(_np.asarray(o)) for o in outs)
        return res[0] if len(res) == 1 else res

    fname = name or f"jax:{getattr(g, '__qualname__', 'function')}"
    f = _strata.custom_vjp(run, name=fname)

    def fwd(*xs):
        return run(*xs), tuple(xs)

    # The rules must not refer to `f`: the C++ function holds them, and a
    # cycle through C++ is one Python's collector cannot see.
    def bwd(xs, cot):
        vjp = from_jax(_jax_vjp(g, len(xs)), name=f"{fname}'")
        return _as_tuple(vjp(*xs, *_as_tuple(cot)))

    f.defvjp(fwd, bwd)
    return f
