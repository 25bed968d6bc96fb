"""strata.Tensor: creation, dtypes, views, indexing, NumPy and DLPack."""
import gc
import sys

import numpy as np
import pytest

import strata


def test_python_data_becomes_what_pytorch_makes_of_it():
    assert strata.tensor([1.0, 2.0]).dtype == strata.float32
    assert strata.tensor([1, 2]).dtype == strata.int64
    assert strata.tensor([True, False]).dtype == strata.bool_
    assert strata.tensor(3.5).shape == ()
    assert strata.tensor([[1, 2, 3], [4, 5, 6]]).shape == (2, 3)
    assert strata.tensor([1, 2], dtype=strata.float64).dtype == strata.float64


def test_numpy_arrays_keep_their_dtype_and_values():
    for dt in (np.float32, np.float64, np.int32, np.int64, np.bool_, np.complex64, np.complex128, np.float16):
        a = (np.arange(12).reshape(3, 4) % 3).astype(dt)
        t = strata.tensor(a)
        assert t.shape == (3, 4)
        np.testing.assert_array_equal(t.numpy(), a)
        assert t.numpy().dtype == a.dtype
    # Strided and transposed arrays are copied in element order.
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[::2, 1::2].T
    np.testing.assert_array_equal(strata.tensor(a).numpy(), a)
    np.testing.assert_array_equal(strata.from_numpy(a).numpy(), a)


def test_creation_functions(device):
    assert strata.zeros(2, 3, device=device).shape == (2, 3)
    assert strata.ones((4,), dtype=strata.float64).dtype == strata.float64
    np.testing.assert_array_equal(strata.full((2, 2), 7.0).numpy(), np.full((2, 2), 7.0, np.float32))
    assert strata.arange(5).dtype == strata.int64
    np.testing.assert_allclose(strata.arange(0.0, 1.0, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    strata.manual_seed(1)
    a = strata.randn(100).numpy()
    strata.manual_seed(1)
    np.testing.assert_array_equal(strata.randn(100).numpy(), a)
    assert 0.0 <= strata.rand(1000).numpy().min() and strata.rand(1000).numpy().max() < 1.0
    t = strata.zeros(3, requires_grad=True)
    assert t.requires_grad and t.is_leaf


def test_properties_and_conversions(device):
    t = strata.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device=device)
    assert t.ndim == 2 and t.numel() == 6 and len(t) == 2 and t.size(1) == 3
    assert str(t.device) == device and t.device == device
    assert t.T.shape == (3, 2) and t.mT.shape == (3, 2)
    np.testing.assert_array_equal(t.T.numpy(), t.numpy().T)
    assert strata.tensor(2.5).item() == 2.5 and isinstance(strata.tensor(3).item(), int)
    assert strata.tensor(True).item() is True
    assert t.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert "tensor(" in repr(t) and "shape=[2, 3]" in repr(t)
    assert t.to(strata.int32).dtype == strata.int32
    assert t.reshape([3, 2]).shape == (3, 2) and t.flatten().shape == (6,)
    with pytest.raises(ValueError, match="6 elements"):
        t.item()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(t)


def test_indexing_gives_views_that_share_memory():
    base = strata.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    ref = base.numpy()
    cases = [0, -1, (1, 2), (slice(None), 1), (Ellipsis, 2), (0, slice(1, None)), (slice(None, None, 2),),
             (None, 0), (0, Ellipsis, None), (slice(1, 3), slice(None, None, 3))]
    for idx in cases:
        np.testing.assert_array_equal(base[idx].numpy(), ref[idx], err_msg=str(idx))
    view = base[1, :, 2]
    view[0] = 100.0  # __setitem__ writes through the view into base
    assert base[1, 0, 2].item() == 100.0
    base[0] = strata.zeros(3, 4)
    assert base[0].numpy().sum() == 0.0
    picked = base[strata.tensor([1, 0])]
    assert picked.shape == (2, 3, 4)
    with pytest.raises(TypeError, match="assignment through a tensor index"):
        base[strata.tensor([1, 0])] = 0.0


def test_bad_indices_are_python_errors_naming_them():
    t = strata.zeros(2, 3)
    with pytest.raises(IndexError, match="index 5 is out of range for dim 1 of size 3"):
        t[0, 5]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(TypeError, match="indices are int, slice"):
        t["a"]
    with pytest.raises(ValueError, match="positive step"):
        t[::-1]
    with pytest.raises(TypeError, match="1-d int64"):
        t[strata.tensor([1.0])]


def test_dlpack_export_is_zero_copy_on_the_cpu():
    t = strata.tensor([[1.0, 2.0], [3.0, 4.0]], device="cpu:0")
    assert t.__dlpack_device__() == (1, 0)
    a = np.from_dlpack(t)
    t[0, 0] = 7.0  # written through Strata, seen through NumPy: one memory
    assert a[0, 0] == 7.0
    # A transposed view keeps its strides.
    np.testing.assert_array_equal(np.from_dlpack(t.T), t.numpy().T)
    # The array keeps the tensor's memory alive.
    del t
    assert a[1, 1] == 4.0


def test_dlpack_import_is_zero_copy_on_the_cpu():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    before = sys.getrefcount(a)
    t = strata.from_dlpack(a)
    assert t.device == "cpu:0"
    t[0, 0] = 42.0  # written through Strata, seen through NumPy
    assert a[0, 0] == 42.0
    a[1, 2] = -1.0  # and the other way
    assert t.numpy()[1, 2] == -1.0
    np.testing.assert_array_equal((t * 2.0).numpy(), a * 2.0)
    # A strided view stays a view, with the producer's strides.
    s = np.arange(24, dtype=np.float64).reshape(4, 6)[::2, 1::2].T
    v = strata.from_dlpack(s, copy=False)
    assert v.stride() == [2, 12]
    np.testing.assert_array_equal(v.numpy(), s)
    # The tensor holds the array; the last tensor gone, it lets go.
    assert sys.getrefcount(a) > before
    del t
    gc.collect()
    assert sys.getrefcount(a) == before
    # What cannot be viewed is copied (copy=None) or refused (copy=False).
    r = np.arange(4.0)[::-1]
    np.testing.assert_array_equal(strata.from_dlpack(r).numpy(), r)
    with pytest.raises(BufferError, match="copy=False, but dim 0 has a negative stride"):
        strata.from_dlpack(r, copy=False)
    c = strata.from_dlpack(a, copy=True)
    c[0, 0] = 0.0
    assert a[0, 0] == 42.0
    # A Strata tensor comes back as a handle of the same tensor.
    strata.from_dlpack(c)[1, 1] = 9.0
    assert c.numpy()[1, 1] == 9.0


def test_dlpack_import_and_a_device_tensor_exported_through_the_host(device):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = strata.from_dlpack(a)
    np.testing.assert_array_equal(t.numpy(), a)
    with pytest.raises(TypeError, match="has no __dlpack__"):
        strata.from_dlpack([1, 2])
    # Strided views are gathered in element order; a capsule is used once.
    s = np.arange(24, dtype=np.float64).reshape(4, 6)[::2, 1::2].T
    np.testing.assert_array_equal(strata.from_dlpack(s).numpy(), s)
    capsule = a.__dlpack__()
    np.testing.assert_array_equal(strata.from_dlpack(capsule).numpy(), a)
    with pytest.raises(ValueError, match="already consumed"):
        strata.from_dlpack(capsule)
    d = strata.tensor([1.0, 2.0, 3.0], device=device)
    np.testing.assert_array_equal(np.from_dlpack(d), [1.0, 2.0, 3.0])
    with pytest.raises(BufferError, match="host memory"):
        d.__dlpack__(dl_device=(2, 0))


def test_devices_and_configuration():
    devices = strata.devices()
    assert strata.device("cpu:0") in devices
    assert strata.device_name("cpu:0")
    assert strata.default_device() in devices
    with pytest.raises(strata.ConfigError, match="nope.json"):
        strata.load_config("/nonexistent/nope.json")
