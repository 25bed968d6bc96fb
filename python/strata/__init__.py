"""Strata for Python: tensors on any device a plugin offers, autograd to any
order, devices chosen by JSON configuration (docs/python.md).

    import strata
    x = strata.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = (x @ x.T).sum()
    y.backward()
    print(x.grad)
"""
import functools as _functools
import weakref as _weakref

from . import _strata
from ._strata import *  # noqa: F401,F403  (the C++ API, one to one)
from ._strata import Tensor, dtype, device

__version__ = _strata.__version__

float32 = dtype.float32
float64 = dtype.float64
float16 = dtype.float16
bfloat16 = dtype.bfloat16
int32 = dtype.int32
int64 = dtype.int64
bool_ = dtype.bool
complex64 = dtype.complex64
complex128 = dtype.complex128


def _numpy():
    # NumPy is imported when data is converted, not with the package: the
    # build imports the package to write its type stubs.
    import numpy

    return numpy


def _contiguous_host_array(data):
    _np = _numpy()
    array = _np.require(_np.asarray(data), requirements="C")
    if array.dtype == _np.uint8 or array.dtype == _np.int8 or array.dtype == _np.int16:
        array = array.astype(_np.int32)
    elif array.dtype == _np.uint16 or array.dtype == _np.uint32 or array.dtype == _np.uint64:
        array = array.astype(_np.int64)
    return array


def _finish(out, dtype, device, requires_grad):
    if dtype is not None and dtype != out.dtype:
        out = cast(out, dtype)  # noqa: F405
    if device is not None:
        out = out.to(device)
    if requires_grad:
        out.requires_grad_(True)
    return out


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of `data`: a Tensor, a NumPy array (its
    dtype is kept), anything with __dlpack__ or the buffer protocol, or
    nested lists of numbers (floats become float32, ints int64, bools
    bool)."""
    if isinstance(data, Tensor):
        return _finish(data.detach().clone(), dtype, device, requires_grad)
    _np = _numpy()
    if hasattr(data, "__dlpack__") and not isinstance(data, _np.ndarray):
        return _finish(_strata.from_dlpack(data, copy=True), dtype, device, requires_grad)
    from_python = not isinstance(data, _np.ndarray)
    array = _contiguous_host_array(data)
    if dtype is None and from_python:
        # Python numbers and lists become what PyTorch makes of them: floats
        # float32, ints int64, complex complex64.
        dtype = {_np.dtype(_np.float64): float32, _np.dtype(_np.complex128): complex64}.get(array.dtype)
    return _strata._from_array(array, dtype=dtype, device=device, requires_grad=requires_grad)


def from_numpy(array):
    """A tensor holding a copy of a NumPy array, with its dtype."""
    return tensor(_numpy().asarray(array))


def _shape_args(shape):
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        return list(shape[0])
    return list(shape)


def _creation(fn):
    def make(*shape, dtype=None, device=None, requires_grad=False):
        return fn(_shape_args(shape), dtype=dtype, device=device, requires_grad=requires_grad)

    make.__name__ = fn.__name__
    make.__doc__ = f"strata.{fn.__name__}(*shape, dtype=None, device=None, requires_grad=False)"
    return make


zeros = _creation(_strata.zeros)
ones = _creation(_strata.ones)
empty = _creation(_strata.empty)
rand = _creation(_strata.rand)
randn = _creation(_strata.randn)


def full(shape, fill_value, dtype=None, device=None, requires_grad=False):
    return _strata.full(list(shape) if isinstance(shape, (list, tuple)) else [shape], fill_value, dtype=dtype,
                        device=device, requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None):
    """[start, end) in steps of `step`: int64 for ints, float32 when any is a
    float (PyTorch's rule)."""
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = float32 if any(isinstance(v, float) for v in (start, end, step)) else int64
    return _strata.arange(start, end, step, dtype=dtype, device=device)


def _as_list(x):
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _unpack(xs):
    return xs[0] if len(xs) == 1 else tuple(xs)


class custom_vjp:
    """JAX's custom_vjp on Strata's custom functions (docs/custom-derivatives.md):

        @strata.custom_vjp
        def clip_gradient(x):
            return x

        def fwd(x):
            return x, ()                      # outputs, residuals (tensors)

        def bwd(residuals, g):
            return (strata.clamp(g, -1.0, 1.0),)  # one gradient per input

        clip_gradient.defvjp(fwd, bwd)

    `fun` runs when nothing differentiates the call; under differentiation
    `fwd` runs and `bwd` is the reverse rule, itself differentiable (so the
    function has derivatives of every order). Forward mode differentiates
    `bwd`."""

    def __init__(self, fun, name=None, first_order_only=False):
        self.fun, self.name, self.first_order_only = fun, name or fun.__qualname__, first_order_only
        self._fn = None
        self.__doc__, self.__name__ = fun.__doc__, fun.__name__

    def defvjp(self, fwd, bwd):
        fun = self.fun

        def fwd_lists(xs):
            out, residuals = fwd(*xs)
            return _as_list(out), list(residuals)

        self._fn = _strata._custom_vjp(lambda xs: _as_list(fun(*xs)), fwd_lists,
                                       lambda res, gs: _as_list(bwd(tuple(res), _unpack(gs))), self.name,
                                       self.first_order_only)
        return self

    def __call__(self, *args):
        if self._fn is None:
            raise TypeError(f"custom_vjp {self.name}: call defvjp(fwd, bwd) before calling the function")
        return _unpack(self._fn(list(args)))


class custom_jvp:
    """JAX's custom_jvp: `fun` computes the outputs and the rule, given
    (primals, tangents), returns (outputs, tangents of the outputs); reverse
    mode transposes the rule, which must be linear in the tangents.

        @strata.custom_jvp
        def f(x):
            return strata.sin(x)

        @f.defjvp
        def f_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return strata.sin(x), strata.cos(x) * t
    """

    def __init__(self, fun, name=None):
        self.fun, self.name = fun, name or fun.__qualname__
        self._fn = None
        self.__doc__, self.__name__ = fun.__doc__, fun.__name__

    def defjvp(self, rule):
        fun = self.fun

        def rule_lists(primals, outputs, tangents):
            _, tangents_out = rule(tuple(primals), tuple(tangents))
            return _as_list(tangents_out)

        self._fn = _strata._custom_jvp(lambda xs: _as_list(fun(*xs)), rule_lists, self.name)
        return rule

    def __call__(self, *args):
        if self._fn is None:
            raise TypeError(f"custom_jvp {self.name}: call defjvp(rule) before calling the function")
        return _unpack(self._fn(list(args)))


def compile(fn=None, *, fuse=True, max_signatures=64):
    """strata::compile for a Python function of tensors (docs/compile.md):
    the first call of each input signature (dtypes, shapes, devices, and
    whether gradients are taken) runs the function under a trace; later
    calls replay the fused graph in C++ without running any Python. A
    value the function reads on the host (`float(t)`, `t.item()`, `if t:`)
    is a guard: where it reads otherwise at a replay, the call takes another
    trace. In-place writes, random draws and device moves run eagerly, the
    reason in `stats()["fallbacks"]`. Use as `compile(f)` or as a
    decorator, `@strata.compile`; the compiled function takes tensors as
    positional arguments and returns what the function returned (a tensor,
    or a tuple of them). `f.stats()` is a dict of counters; `f.report(*args)`
    what the fusion pass did for those arguments' signature."""
    if fn is None:
        return lambda f: compile(f, fuse=fuse, max_signatures=max_signatures)
    shape = {"single": True}

    def traced(inputs):
        out = fn(*inputs)
        if isinstance(out, Tensor):
            shape["single"] = True
            return [out]
        shape["single"] = False
        out = list(out)
        for k, t in enumerate(out):
            if not isinstance(t, Tensor):
                raise TypeError(f"strata.compile: {getattr(fn, '__name__', 'the function')} returned "
                                f"{type(t).__name__} as output {k}; a compiled function returns tensors")
        return out

    # The C++ function holds `traced` only weakly: a strong reference there,
    # hidden from the garbage collector, would close a cycle it cannot
    # break (fn's globals hold `call`, which holds the C++ function).
    compiled = _strata._compile(_WeakCall(traced), fuse, max_signatures)

    @_functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs:
            raise TypeError("strata.compile: a compiled function takes tensors as positional arguments only")
        for k, a in enumerate(args):
            if not isinstance(a, Tensor):
                raise TypeError(f"strata.compile: argument {k} of {getattr(fn, '__name__', 'the function')} is "
                                f"{type(a).__name__}; a compiled function takes strata.Tensor arguments")
        outs = compiled(list(args))
        return outs[0] if shape["single"] else tuple(outs)

    call._traced = traced
    call.stats = compiled.stats
    call.report = lambda *args: compiled.report(list(args))
    return call


class _WeakCall:
    """Calls a function through a weak reference (see compile)."""

    __slots__ = ("_ref",)

    def __init__(self, f):
        self._ref = _weakref.ref(f)

    def __call__(self, inputs):
        f = self._ref()
        if f is None:
            raise RuntimeError("strata.compile: the compiled function was garbage-collected")
        return f(inputs)


def _argnums(argnums, n):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for k in nums:
        if not -n <= k < n:
            raise ValueError(f"argnums {k} is out of range for a function of {n} arguments")
    return tuple(k % n for k in nums)


def _with(args, nums, xs):
    a = list(args)
    for k, x in zip(nums, xs):
        a[k] = x
    return a


def grad(f, argnums=0):
    """The gradient of a scalar function, as a function of the same
    arguments: with respect to argument `argnums` (an int: one tensor), or
    several (a tuple: a tuple of tensors). grad(grad(f)) is the second
    derivative; transforms compose to any order."""
    if isinstance(argnums, int) and argnums == 0:
        single = _strata.grad(lambda t: f(t))

        def g(*args):
            if len(args) == 1:
                return single(args[0])
            return _grad_of(f, 0, args)[0]

        return g
    return lambda *args: _grad_of(f, argnums, args)[0 if isinstance(argnums, int) else slice(None)]


def _grad_of(f, argnums, args):
    nums = _argnums(argnums, len(args))
    gs = _strata._grad_list(lambda xs: f(*_with(args, nums, xs)), [args[k] for k in nums])
    return tuple(gs)


def value_and_grad(f, argnums=0):
    """(f(*args), grad(f, argnums)(*args)) in one pass."""

    def vg(*args):
        nums = _argnums(argnums, len(args))
        # higher_order: an enclosing transform differentiates the gradient too.
        with GradientTape(higher_order=True) as tape:
            xs = [args[k] for k in nums]
            for x in xs:
                tape.watch(x)
            value = f(*_with(args, nums, xs))
            gs = tape.gradient(value, xs)
        return value, gs[0] if isinstance(argnums, int) else tuple(gs)

    return vg


def jvp(f, primals, tangents):
    """(f(*primals), J·tangents) in forward mode: primals and tangents are
    tensors (f of one argument) or tuples of them (f of several; outputs a
    tuple when f returns one)."""
    if isinstance(primals, Tensor):
        return _strata.jvp(f, primals, tangents)
    outs, touts = _strata._jvp_list(lambda xs: _as_list(f(*xs)), list(primals), list(tangents))
    return _unpack(outs), _unpack(touts)


def vjp(f, primals, cotangents):
    """(f(*primals), cotangentsᵀ·J) in reverse mode, in jvp's forms."""
    if isinstance(primals, Tensor):
        return _strata.vjp(f, primals, cotangents)
    outs, grads = _strata._vjp_list(lambda xs: _as_list(f(*xs)), list(primals), _as_list(cotangents))
    return _unpack(outs), tuple(grads)


def hvp(f, primals, tangents):
    """H·tangents for a scalar f, without forming H, in jvp's forms."""
    if isinstance(primals, Tensor):
        return _strata.hvp(f, primals, tangents)
    return tuple(_strata._hvp_list(lambda xs: f(*xs), list(primals), list(tangents)))


def vmap(fn, in_dims=0, out_dims=0, randomness="error"):
    """fn mapped over dim `in_dims` of its inputs (an int for every input,
    or one per input, None for an unmapped one), its outputs stacked along
    `out_dims`: composes with grad and the other transforms (docs/vmap.md)."""

    def mapped(*args):
        dims = list(in_dims) if isinstance(in_dims, (list, tuple)) else [in_dims] * len(args)
        if len(dims) != len(args):
            raise ValueError(f"vmap: in_dims has {len(dims)} entries for {len(args)} inputs")
        outs = _strata._vmap(lambda xs: _as_list(fn(*xs)), dims, [], randomness)(list(args))
        odims = list(out_dims) if isinstance(out_dims, (list, tuple)) else [out_dims] * len(outs)
        outs = [o if d == 0 else _movedim(o, d) for o, d in zip(outs, odims)]
        return _unpack(outs)

    return mapped


def _movedim(t, dim):
    """t with its dim 0 moved to `dim`."""
    dim = dim % t.ndim
    order = list(range(1, t.ndim))
    order.insert(dim, 0)
    return t.permute(order)


def checkpoint(fn, *args):
    """fn(*args), with its intermediate values recomputed in the backward
    pass instead of kept (activation checkpointing); tensors fn reads without
    receiving them get their gradients too."""
    return _unpack(_strata._checkpoint(lambda xs: _as_list(fn(*xs)), list(args)))


# strata.nn and strata.distributed are the Python modules of this package
# (built on the C++ toolkit), not the extension's submodules of the same
# names that the star import above brought in.
import importlib as _importlib  # noqa: E402

nn = _importlib.import_module(".nn", __name__)
distributed = _importlib.import_module(".distributed", __name__)
