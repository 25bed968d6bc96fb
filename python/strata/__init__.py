"""Strata for Python: tensors on any device a plugin offers, autograd to any
order, devices chosen by JSON configuration (docs/python.md).

    import strata
    x = strata.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = (x @ x.T).sum()
    y.backward()
    print(x.grad)
"""
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


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor holding a copy of `data`: a Tensor, a NumPy array (its
    dtype is kept), anything with __dlpack__ or the buffer protocol, or
    nested lists of numbers (floats become float32, ints int64, bools
    bool)."""
    if isinstance(data, Tensor):
        out = data.detach().clone()
        if dtype is not None:
            out = cast(out, dtype)  # noqa: F405
        if device is not None:
            out = out.to(device)
        if requires_grad:
            out.requires_grad_(True)
        return out
    _np = _numpy()
    from_python = not isinstance(data, _np.ndarray) and not hasattr(data, "__dlpack__")
    if hasattr(data, "__dlpack__") and not isinstance(data, _np.ndarray):
        data = _np.from_dlpack(data)
    array = _contiguous_host_array(data)
    if dtype is None and from_python:
        # Python numbers and lists become what PyTorch makes of them: floats
        # float32, ints int64, complex complex64.
        dtype = {_np.dtype(_np.float64): float32, _np.dtype(_np.complex128): complex64}.get(array.dtype)
    return _strata._from_array(array, dtype=dtype, device=device, requires_grad=requires_grad)


def from_numpy(array):
    """A tensor holding a copy of a NumPy array, with its dtype."""
    return tensor(_numpy().asarray(array))


def from_dlpack(x):
    """A tensor from any object with __dlpack__ (NumPy, PyTorch, JAX) on the
    host. The data is copied (docs/python.md: zero-copy import is not yet
    built)."""
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"strata.from_dlpack: {type(x).__name__} has no __dlpack__")
    return tensor(_numpy().from_dlpack(x))


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


# strata.nn is the Python module python/strata/nn.py (modules built on the
# C++ toolkit), not the extension's submodule of the same name that the
# star import above brought in.
import importlib as _importlib  # noqa: E402

nn = _importlib.import_module(".nn", __name__)
