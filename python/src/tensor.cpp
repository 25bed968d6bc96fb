// tensor.cpp — strata.Tensor's properties, conversion to and from NumPy and
// DLPack, indexing as views, and the creation functions.
#include "bindings.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/complex.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <strata/native_view.hpp>

#include <complex>
#include <cstring>
#include <string>
#include <vector>

namespace strata::python {

namespace {

namespace dl = nb::dlpack;
using namespace nb::literals;

dl::dtype dl_dtype(DType d) {
  switch (d) {
    case DType::f32: return nb::dtype<float>();
    case DType::f64: return nb::dtype<double>();
    case DType::f16: return {static_cast<uint8_t>(dl::dtype_code::Float), 16, 1};
    case DType::bf16: return {static_cast<uint8_t>(dl::dtype_code::Bfloat), 16, 1};
    case DType::i32: return nb::dtype<int32_t>();
    case DType::i64: return nb::dtype<int64_t>();
    case DType::boolean: return {static_cast<uint8_t>(dl::dtype_code::Bool), 8, 1};
    case DType::c64: return {static_cast<uint8_t>(dl::dtype_code::Complex), 64, 1};
    case DType::c128: return {static_cast<uint8_t>(dl::dtype_code::Complex), 128, 1};
  }
  throw DTypeError("DLPack: no encoding for dtype " + std::string(dtype_name(d)));
}

/// The Strata dtype of a DLPack dtype, or a DTypeError naming it.
DType strata_dtype(dl::dtype t) {
  using C = dl::dtype_code;
  const auto code = static_cast<C>(t.code);
  if (t.lanes == 1) {
    if (code == C::Float && t.bits == 32) return DType::f32;
    if (code == C::Float && t.bits == 64) return DType::f64;
    if (code == C::Float && t.bits == 16) return DType::f16;
    if (code == C::Bfloat && t.bits == 16) return DType::bf16;
    if (code == C::Int && t.bits == 32) return DType::i32;
    if (code == C::Int && t.bits == 64) return DType::i64;
    if (code == C::Bool && t.bits == 8) return DType::boolean;
    if (code == C::Complex && t.bits == 64) return DType::c64;
    if (code == C::Complex && t.bits == 128) return DType::c128;
  }
  throw DTypeError("strata.tensor: no Strata dtype for an array of DLPack type code " + std::to_string(t.code) +
                   " with " + std::to_string(t.bits) + " bits and " + std::to_string(t.lanes) +
                   " lanes (Strata has float16/32/64, bfloat16, int32/64, bool, complex64/128)");
}

using HostArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

/// A tensor of row-major host bytes of dtype `own`, as `dtype` (default:
/// own) on `device` (default: the default device). A cast is done on the
/// host: the device may not store `own` (float64 on vulkan:0). Releases the
/// GIL; `bytes` must stay valid.
Tensor tensor_of(std::span<const uint8_t> bytes, const Shape& shape, DType own, const std::optional<DType>& dtype,
                 const std::optional<Device>& device) {
  nb::gil_scoped_release release;
  if (!dtype || *dtype == own) return from_bytes(bytes, shape, {.dtype = own, .device = device});
  Tensor t = cast(from_bytes(bytes, shape, {.dtype = own, .device = Device("cpu:0")}), *dtype);
  const Device target = device ? *device : runtime().default_device();
  return target == t.device() ? t : t.to(target);
}

/// A copy of a C-contiguous host array as a tensor on `device`.
Tensor from_array(const HostArray& a, const std::optional<DType>& dtype, const std::optional<Device>& device,
                  bool requires_grad) {
  const DType own = strata_dtype(a.dtype());
  Shape shape(a.ndim());
  for (size_t k = 0; k < a.ndim(); ++k) shape[k] = static_cast<int64_t>(a.shape(k));
  Tensor t = tensor_of(std::span<const uint8_t>(static_cast<const uint8_t*>(a.data()), a.nbytes()), shape, own, dtype,
                       device);
  if (requires_grad) t.set_requires_grad(true);
  return t;
}

/// DLPack's device types by number, for messages.
const char* dl_device_name(int type) {
  switch (type) {
    case 1: return "cpu";
    case 2: return "cuda";
    case 3: return "cuda_host";
    case 4: return "opencl";
    case 7: return "vulkan";
    case 8: return "metal";
    case 10: return "rocm";
    case 13: return "cuda_managed";
    case 14: return "oneapi";
    default: return "unknown";
  }
}

/// The DLPack capsule of `obj`: `obj` itself when it is one (refused when
/// consumed), else its __dlpack__() — versioned (max_version (1, 0), whose
/// flags say whether the memory is read-only) where the producer takes the
/// keyword. The producer's own refusal (a meta tensor, a stream it cannot
/// serve) propagates as it raised it.
nb::object dlpack_capsule(nb::handle obj) {
  if (PyCapsule_CheckExact(obj.ptr())) {
    const char* name = PyCapsule_GetName(obj.ptr());
    if (name != nullptr && std::string(name).rfind("used_", 0) == 0) {
      throw nb::value_error("strata.from_dlpack: the DLPack capsule was already consumed (a capsule is used once; "
                            "call __dlpack__() again for another)");
    }
    return nb::borrow(obj);
  }
  if (!nb::hasattr(obj, "__dlpack__")) {
    throw nb::type_error(("strata.from_dlpack: " + std::string(nb::type_name(obj.type()).c_str()) +
                          " has no __dlpack__ and is not a DLPack capsule")
                             .c_str());
  }
  try {
    return obj.attr("__dlpack__")("max_version"_a = nb::make_tuple(1, 0));
  } catch (nb::python_error& e) {
    if (!e.matches(PyExc_TypeError)) throw;  // a producer predating max_version refuses the keyword
  }
  return obj.attr("__dlpack__")();
}

/// Why a host DLPack tensor cannot be viewed in place on cpu:0 (empty when
/// it can): the tests tensor_from_native makes, asked first so that a copy
/// is chosen without an exception.
template <class Array>
std::string why_not_a_view(const Array& a, bool writable, const std::optional<Device>& device) {
  const Device cpu("cpu:0");
  if (device && *device != cpu) return "the target device is " + device->str() + ", not cpu:0, where the memory is";
  if (!writable) return "the producer marks its memory read-only";
  if (!can_view_native(cpu)) return "cpu:0's plugin cannot view memory it did not allocate";
  for (size_t k = 0; k < a.ndim(); ++k) {
    if (a.stride(k) < 0) return "dim " + std::to_string(k) + " has a negative stride";
  }
  if (reinterpret_cast<uintptr_t>(a.data()) % a.itemsize() != 0) return "the data is not aligned to its element size";
  return {};
}

/// A strided host array's elements gathered in row-major order.
template <class Array>
std::vector<uint8_t> gathered(const Array& a) {
  const size_t item = a.itemsize(), n = a.size();
  std::vector<uint8_t> bytes(n * item);
  const auto* src = static_cast<const uint8_t*>(a.data());
  // Element order: an odometer over the dims, strides in elements (DLPack's).
  std::vector<int64_t> at(a.ndim(), 0);
  for (size_t e = 0; e < n; ++e) {
    int64_t offset = 0;
    for (size_t k = 0; k < a.ndim(); ++k) offset += at[k] * a.stride(k);
    std::memcpy(bytes.data() + e * item, src + offset * static_cast<int64_t>(item), item);
    for (size_t k = a.ndim(); k-- > 0;) {
      if (++at[k] < static_cast<int64_t>(a.shape(k))) break;
      at[k] = 0;
    }
  }
  return bytes;
}

/// strata.from_dlpack (the array API's, and torch.from_dlpack's): a DLPack
/// tensor (an object with __dlpack__, or a "dltensor" capsule) from host
/// memory as a tensor. copy=None: a view of the producer's memory on cpu:0
/// where one can be had (writes show on both sides; the tensor keeps the
/// producer's memory alive), else a copy; copy=True: always a copy;
/// copy=False: a view or BufferError saying why not. A copy goes to
/// `device` (default: the default device) and may have any strides.
Tensor from_dlpack(nb::handle obj, const std::optional<Device>& device, const std::optional<bool>& copy) {
  if (nb::isinstance<Tensor>(obj)) {  // Strata's own: the same tensor (its memory), not a view of a view
    const Tensor& t = nb::cast<const Tensor&>(obj);
    if (copy.value_or(false)) return t.detach().clone().to(device ? *device : t.device());
    if (!device || *device == t.device()) return t;
    if (copy.has_value()) throw nb::buffer_error(("strata.from_dlpack: copy=False, but the tensor is on " +
                                                  t.device().str() + ", not " + device->str()).c_str());
    return t.to(*device);
  }
  nb::object capsule = dlpack_capsule(obj);
  // Writable first: a versioned capsule flagged read-only is refused there
  // without being consumed, and read next as read-only.
  nb::ndarray<> writable;
  nb::ndarray<nb::ro> readonly;
  const bool can_write = nb::try_cast(capsule, writable, false);
  if (!can_write && !nb::try_cast(capsule, readonly, false)) {
    throw nb::type_error("strata.from_dlpack: the DLPack capsule could not be read (not a \"dltensor\" capsule, or "
                         "a DLPack version this build does not know)");
  }
  auto import = [&](const auto& a) -> Tensor {
    if (a.device_type() != nb::device::cpu::value) {
      throw DeviceError(std::string("strata.from_dlpack: the tensor is on DLPack device ") +
                        dl_device_name(a.device_type()) + ":" + std::to_string(a.device_id()) + " (type " +
                        std::to_string(a.device_type()) +
                        "); Strata imports host memory (kDLCPU) only: copy it to the CPU first");
    }
    const DType dtype = strata_dtype(a.dtype());
    Shape shape(a.ndim()), strides(a.ndim());
    for (size_t k = 0; k < a.ndim(); ++k) {
      shape[k] = static_cast<int64_t>(a.shape(k));
      strides[k] = a.stride(k);
    }
    if (!copy.value_or(false)) {
      const std::string why = why_not_a_view(a, can_write, device);
      if (why.empty()) {
        // The view holds the array (and so the producer's memory) until its
        // last tensor goes; nanobind takes the GIL to let go of it.
        // (The read-only array never gets here: why_not_a_view refuses it.)
        void* data = const_cast<void*>(static_cast<const void*>(a.data()));
        return tensor_from_native(data, dtype, shape, strides, Device("cpu:0"),
                                  [keep = nb::ndarray<nb::ro>(a.handle())]() mutable { keep = {}; });
      }
      if (copy.has_value()) throw nb::buffer_error(("strata.from_dlpack: copy=False, but " + why).c_str());
    }
    const std::vector<uint8_t> bytes = gathered(a);
    return tensor_of(bytes, shape, dtype, std::nullopt, device);
  };
  return can_write ? import(writable) : import(readonly);
}

/// The native view of `t` when its plugin exposes it as host memory.
std::optional<NativeView> host_view(const Tensor& t) {
  runtime().synchronize(t.device());
  try {
    NativeView view = native_view(t);
    if (view.api == "host") return view;
  } catch (const DeviceError&) {  // the plugin offers no native handles
  }
  return std::nullopt;
}

/// `t`'s memory as a DLPack-capable array, zero-copy for a tensor whose
/// plugin exposes host memory (cpu:0); a tensor elsewhere (device memory, or
/// a plugin without native handles) is copied to cpu:0 first. The array
/// holds the tensor alive. Queued work is waited for.
nb::ndarray<> host_array(const Tensor& t) {
  Tensor h = t;
  NativeView view;
  {
    nb::gil_scoped_release release;
    std::optional<NativeView> v = host_view(h);
    if (!v) {
      h = h.to(Device("cpu:0"));
      v = host_view(h);
      if (!v) throw DeviceError("__dlpack__: cpu:0 exposes no host memory (its plugin has no native handles)");
    }
    view = *v;
  }
  std::vector<size_t> shape(static_cast<size_t>(h.dim()));
  std::vector<int64_t> strides(static_cast<size_t>(h.dim()));
  for (int64_t k = 0; k < h.dim(); ++k) {
    shape[static_cast<size_t>(k)] = static_cast<size_t>(h.size(k));
    strides[static_cast<size_t>(k)] = h.strides()[static_cast<size_t>(k)];
  }
  auto* keep = new Tensor(h);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  return nb::ndarray<>(view.data, shape.size(), shape.data(), owner, strides.data(), dl_dtype(h.dtype()),
                       nb::device::cpu::value, 0);
}

/// t[index]: ints select (dropping the dim), slices with a positive step
/// slice, None inserts a dim of size 1, ... stands for the dims not named,
/// a 1-d int64 tensor picks along its dim (index_select): all views but the
/// last, which copies.
Tensor index(const Tensor& t, nb::handle idx) {
  std::vector<nb::handle> items;
  if (nb::isinstance<nb::tuple>(idx)) {
    for (nb::handle h : nb::borrow<nb::tuple>(idx)) items.push_back(h);
  } else {
    items.push_back(idx);
  }
  int64_t consuming = 0;
  int ellipses = 0;
  for (nb::handle h : items) {
    if (h.is_none()) continue;
    if (h.ptr() == Py_Ellipsis) {
      ++ellipses;
      continue;
    }
    ++consuming;
  }
  if (ellipses > 1) throw nb::index_error("strata.Tensor: an index may hold one ellipsis (...)");
  if (consuming > t.dim()) {
    throw nb::index_error(("strata.Tensor: too many indices (" + std::to_string(consuming) + ") for a tensor of " +
                           std::to_string(t.dim()) + " dims")
                              .c_str());
  }
  Tensor r = t;
  int64_t dim = 0;     // in r
  int64_t source = 0;  // in t, for messages
  for (nb::handle h : items) {
    if (h.is_none()) {
      r = r.unsqueeze(dim++);
    } else if (h.ptr() == Py_Ellipsis) {
      dim += t.dim() - consuming;
      source += t.dim() - consuming;
    } else if (PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr())) {
      const int64_t size = r.size(dim);
      int64_t i = nb::cast<int64_t>(h);
      if (i < -size || i >= size) {
        throw nb::index_error(("strata.Tensor: index " + std::to_string(i) + " is out of range for dim " +
                               std::to_string(source) + " of size " + std::to_string(size))
                                  .c_str());
      }
      r = r.select(dim, i < 0 ? i + size : i);
      ++source;
    } else if (PySlice_Check(h.ptr())) {
      Py_ssize_t start = 0, stop = 0, step = 0;
      if (PySlice_Unpack(h.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
      if (step <= 0) throw nb::value_error("strata.Tensor: slices take a positive step (there are no negative strides)");
      const Py_ssize_t n = PySlice_AdjustIndices(static_cast<Py_ssize_t>(r.size(dim)), &start, &stop, step);
      r = r.slice(dim, start, start + (n == 0 ? 0 : (n - 1) * step + 1), step);
      ++dim;
      ++source;
    } else if (nb::isinstance<Tensor>(h)) {
      const Tensor& i = nb::cast<const Tensor&>(h);
      if (i.dtype() != DType::i64 || i.dim() != 1) {
        throw nb::type_error(("strata.Tensor: a tensor index must be 1-d int64, got " + std::string(dtype_name(i.dtype())) +
                              " with " + std::to_string(i.dim()) + " dims")
                                 .c_str());
      }
      r = index_select(r, dim++, i);
      ++source;
    } else {
      throw nb::type_error(("strata.Tensor: indices are int, slice, None, ... or a 1-d int64 Tensor, not " +
                            std::string(nb::type_name(h.type()).c_str()))
                               .c_str());
    }
  }
  return r;
}

/// A NumPy array holding a copy of `t`'s elements, from any device.
nb::object to_numpy(const Tensor& t) {
  const char* name = nullptr;
  switch (t.dtype()) {
    case DType::f32: name = "float32"; break;
    case DType::f64: name = "float64"; break;
    case DType::f16: name = "float16"; break;
    case DType::i32: name = "int32"; break;
    case DType::i64: name = "int64"; break;
    case DType::boolean: name = "bool"; break;
    case DType::c64: name = "complex64"; break;
    case DType::c128: name = "complex128"; break;
    case DType::bf16:
      throw nb::type_error("strata.Tensor.numpy: NumPy has no bfloat16; cast to float32 first");
  }
  std::vector<uint8_t> bytes;
  {
    nb::gil_scoped_release release;
    bytes = t.to_bytes();
  }
  nb::module_ np = nb::module_::import_("numpy");
  nb::list shape;
  for (int64_t s : t.shape()) shape.append(s);
  nb::bytes data(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return np.attr("frombuffer")(data, "dtype"_a = name).attr("reshape")(nb::tuple(shape)).attr("copy")();
}

/// __dlpack__: a "dltensor" capsule of host memory (zero-copy on cpu:0).
nb::object dlpack(const Tensor& t, nb::handle stream, nb::handle max_version, nb::handle dl_device, nb::handle copy) {
  (void)max_version;  // an unversioned capsule, which every consumer takes
  if (!stream.is_none() && !(PyLong_Check(stream.ptr()) && (nb::cast<int64_t>(stream) == -1 ||
                                                              nb::cast<int64_t>(stream) == 0))) {
    throw nb::buffer_error("strata.Tensor.__dlpack__: exported tensors are host memory; a stream does not apply");
  }
  if (!dl_device.is_none()) {
    nb::tuple d = nb::cast<nb::tuple>(dl_device);
    if (nb::len(d) != 2 || nb::cast<int>(d[0]) != 1 || nb::cast<int>(d[1]) != 0) {
      throw nb::buffer_error(("strata.Tensor.__dlpack__: exported tensors are host memory (1, 0), not " +
                              std::string(nb::str(dl_device).c_str()))
                                 .c_str());
    }
  }
  const bool copied = !copy.is_none() && nb::cast<bool>(copy);
  return nb::cast(host_array(copied ? t.contiguous().clone() : t));
}

/// t[index] for an assignment: a view (a tensor index, which copies, would
/// take the write and drop it, so it is refused).
Tensor view_for_write(const Tensor& t, nb::handle idx) {
  auto is_tensor = [](nb::handle h) { return nb::isinstance<Tensor>(h); };
  bool any = is_tensor(idx);
  if (nb::isinstance<nb::tuple>(idx)) {
    for (nb::handle h : nb::borrow<nb::tuple>(idx)) any = any || is_tensor(h);
  }
  if (any) {
    throw nb::type_error(
        "strata.Tensor: assignment through a tensor index is not supported (a tensor index selects a copy); "
        "index with ints and slices, or use scatter_add");
  }
  return index(t, idx);
}

nb::object item(const Tensor& t) {
  if (t.numel() != 1) {
    throw nb::value_error(("strata.Tensor.item: the tensor has " + std::to_string(t.numel()) +
                           " elements; item() reads one")
                              .c_str());
  }
  switch (t.dtype()) {
    case DType::boolean: return nb::bool_(t.item<bool>());
    case DType::i32:
    case DType::i64: return nb::int_(t.item<int64_t>());
    case DType::c64:
    case DType::c128: return nb::cast(t.item<std::complex<double>>());
    default: return nb::float_(t.item<double>());
  }
}

TensorOptions options(const std::optional<DType>& dtype, const std::optional<Device>& device, bool requires_grad,
                      DType fallback = DType::f32) {
  return {.dtype = dtype.value_or(fallback), .device = device, .requires_grad = requires_grad};
}

}  // namespace

void bind_tensor(nb::module_& m, nb::class_<Tensor>& cls) {
  cls.def_prop_ro("shape", [](const Tensor& t) {
       nb::list l;
       for (int64_t s : t.shape()) l.append(s);
       return nb::tuple(l);
     }, "The sizes, as a tuple.")
      .def_prop_ro("dtype", &Tensor::dtype)
      .def_prop_ro("device", &Tensor::device)
      .def_prop_ro("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("size", [](const Tensor& t, int64_t d) { return t.size(d); }, nb::arg("dim"))
      .def("stride", [](const Tensor& t) { return std::vector<int64_t>(t.strides().begin(), t.strides().end()); })
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("__len__", [](const Tensor& t) {
        if (t.dim() == 0) throw nb::type_error("len() of a 0-d tensor");
        return t.size(0);
      })
      .def("__repr__", &Tensor::to_string)
      .def("item", &item, "The value of a one-element tensor as a Python bool, int, float or complex.")
      .def("numpy", &to_numpy, "A NumPy array holding a copy of the elements (from any device).")
      .def("tolist", [](const Tensor& t) { return to_numpy(t).attr("tolist")(); },
           "The elements as nested Python lists.")
      .def("__array__", [](const Tensor& t, nb::handle dtype, nb::handle) {
        nb::object a = to_numpy(t);
        return dtype.is_none() ? a : a.attr("astype")(dtype);
      }, nb::arg("dtype") = nb::none(), nb::arg("copy") = nb::none())
      .def("__dlpack__", &dlpack, nb::kw_only(), nb::arg("stream") = nb::none(), nb::arg("max_version") = nb::none(),
           nb::arg("dl_device") = nb::none(), nb::arg("copy") = nb::none(),
           "The tensor as a DLPack capsule: zero-copy for cpu:0 (host) tensors; a tensor on another device is "
           "copied to cpu:0 first.")
      .def("__dlpack_device__", [](const Tensor&) { return nb::make_tuple(1, 0); },
           "(kDLCPU, 0): exported tensors are host memory (a device tensor is copied to cpu:0).")
      .def("__getitem__", &index, nb::arg("index"))
      .def("__setitem__", [](Tensor& t, nb::handle idx, const Tensor& value) { view_for_write(t, idx).copy_(value); })
      .def("__setitem__", [](Tensor& t, nb::handle idx, double value) {
        Tensor v = view_for_write(t, idx);
        v.copy_(full({}, value, {.dtype = v.dtype(), .device = v.device()}));
      })
      .def("to", [](const Tensor& t, const Device& d) { return t.to(d); }, nb::arg("device"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("to", [](const Tensor& t, DType d) { return t.to(d); }, nb::arg("dtype"))
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("copy_", [](Tensor& t, const Tensor& src) -> Tensor& {
        t.copy_(src);
        return t;
      }, nb::arg("src"), nb::rv_policy::reference)
      .def("reshape", [](const Tensor& t, const Shape& s) { return t.reshape(s); }, nb::arg("shape"))
      .def("view", [](const Tensor& t, const Shape& s) { return t.view(s); }, nb::arg("shape"))
      .def("permute", [](const Tensor& t, const Shape& s) { return t.permute(s); }, nb::arg("dims"))
      .def("transpose", &Tensor::transpose, nb::arg("dim0"), nb::arg("dim1"))
      .def_prop_ro("T", [](const Tensor& t) {
        Shape dims(static_cast<size_t>(t.dim()));
        for (int64_t k = 0; k < t.dim(); ++k) dims[static_cast<size_t>(k)] = t.dim() - 1 - k;
        return t.permute(dims);
      }, "The dims reversed (the transpose of a matrix).")
      .def_prop_ro("mT", &Tensor::mT, "The transpose of the last two dims.")
      .def("expand", [](const Tensor& t, const Shape& s) { return t.expand(s); }, nb::arg("shape"))
      .def("squeeze", [](const Tensor& t, std::optional<int64_t> d) { return d ? t.squeeze(*d) : t.squeeze(); },
           nb::arg("dim") = nb::none())
      .def("unsqueeze", &Tensor::unsqueeze, nb::arg("dim"))
      .def("flatten", &Tensor::flatten);

  m.def("from_dlpack", &from_dlpack, nb::arg("x"), nb::arg("device") = nb::none(), nb::arg("copy") = nb::none(),
        "A DLPack tensor (an object with __dlpack__, or a capsule) from host memory as a tensor with its dtype. "
        "copy=None: a view of the producer's memory on cpu:0 where one can be had (writes show on both sides), "
        "else a copy on `device`; copy=True: always a copy; copy=False: a view, or BufferError saying why not.");
  m.def("_from_array", &from_array, nb::arg("array"), nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none(),
        nb::arg("requires_grad") = false);
  using Make = Tensor (*)(const Shape&, const TensorOptions&);
  const std::pair<const char*, Make> makers[] = {
      {"empty", &empty}, {"zeros", &zeros}, {"ones", &ones}, {"rand", &rand}, {"randn", &randn}};
  for (const auto& [name, make] : makers) {
    m.def(name, [make](const Shape& s, std::optional<DType> d, std::optional<Device> dev, bool rg) {
      return make(s, options(d, dev, rg));
    }, nb::arg("shape"), nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none(),
       nb::arg("requires_grad") = false);
  }
  m.def("full", [](const Shape& s, double v, std::optional<DType> d, std::optional<Device> dev, bool rg) {
    return full(s, v, options(d, dev, rg));
  }, nb::arg("shape"), nb::arg("fill_value"), nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none(),
     nb::arg("requires_grad") = false);
  m.def("rand", [](const Shape& s, std::optional<DType> d, std::optional<Device> dev, bool rg) {
    return rand(s, options(d, dev, rg));
  }, nb::arg("shape"), nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none(), nb::arg("requires_grad") = false);
  m.def("randn", [](const Shape& s, std::optional<DType> d, std::optional<Device> dev, bool rg) {
    return randn(s, options(d, dev, rg));
  }, nb::arg("shape"), nb::arg("dtype") = nb::none(), nb::arg("device") = nb::none(), nb::arg("requires_grad") = false);
  m.def("arange", [](double start, double end, double step, std::optional<DType> d, std::optional<Device> dev) {
    return arange(start, end, step, options(d, dev, false, DType::i64));
  }, nb::arg("start"), nb::arg("end"), nb::arg("step") = 1.0, nb::arg("dtype") = nb::none(),
     nb::arg("device") = nb::none());
  m.def("zeros_like", &zeros_like, nb::arg("input"));
  m.def("ones_like", &ones_like, nb::arg("input"));
  m.def("full_like", &full_like, nb::arg("input"), nb::arg("fill_value"));
}

}  // namespace strata::python
