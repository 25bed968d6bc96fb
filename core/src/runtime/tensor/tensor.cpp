// tensor.cpp — Tensor accessors, conversions and storage lifetime.
#include "base/pool.hpp"
#include "runtime/device/device_record.hpp"
#include "runtime/device/device_table.hpp"
#include "runtime/tensor/host_data.hpp"
#include "runtime/tensor/tensor_impl.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <strata/memory.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <sstream>
#include <string>

namespace strata::detail {

Storage::~Storage() {
  if (foreign != nullptr) {
    release_foreign(*this);
    return;
  }
  if (device != nullptr && buffer != nullptr && !shutting_down()) device->allocator.release(buffer, bytes, device->stream);
}


namespace {
/// A contiguous TensorImpl of `dtype` and `shape` (checked: `numel` elements), no storage.
inline std::shared_ptr<TensorImpl> contiguous_impl(DType dtype, std::span<const int64_t> shape, int64_t numel) {
  auto impl = make_pooled<TensorImpl>();
  impl->dtype = dtype;
  impl->rank = static_cast<int32_t>(shape.size());
  impl->numel = numel;
  for (size_t d = 0; d < shape.size(); ++d) impl->shape[d] = shape[d];  // a loop, not memcpy: ranks are tiny
  contiguous_strides(shape, impl->strides.data());
  return impl;
}
}  // namespace

namespace {
std::atomic<uint64_t> g_storage_serial{1};
}  // namespace

uint64_t storage_serial() { return g_storage_serial.load(std::memory_order_relaxed); }
uint64_t next_storage_serial() { return g_storage_serial.fetch_add(1, std::memory_order_relaxed); }

Tensor meta_tensor(DType dtype, std::span<const int64_t> shape, std::string_view op) {
  return Tensor(contiguous_impl(dtype, shape, checked_numel(op, shape, dtype)));
}

Tensor make_tensor(DeviceRecord& device, DType dtype, std::span<const int64_t> shape, std::string_view op) {
  check_stores(device, dtype, op);
  const int64_t numel = checked_numel(op, shape, dtype);
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(dtype);  // fits: checked
  auto impl = contiguous_impl(dtype, shape, numel);  // first: nothing to give back if it throws
  size_t block = 0;
  strata_buffer buffer = nullptr;
  try {
    buffer = device.allocator.allocate(bytes, &block, device.stream);
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(std::string(op) + ": " + std::string(dtype_name(dtype)) + shape_string(shape) + " (" +
                           std::to_string(bytes) + " bytes) on " + device.id + ": " + e.what());
  }
  impl->device = device.device();
  impl->storage = make_pooled<Storage>(&device, buffer, block);
  impl->storage->serial = next_storage_serial();
  return Tensor(std::move(impl));
}

Tensor make_view(const Tensor& base, std::span<const int64_t> shape, std::span<const int64_t> strides, int64_t offset,
                 std::string_view op) {
  const TensorImpl& b = *base.impl();
  const int64_t numel = checked_numel(op, shape, b.dtype);
  auto impl = make_pooled<TensorImpl>();
  impl->storage = b.storage;
  impl->device = b.device;
  impl->dtype = b.dtype;
  impl->rank = static_cast<int32_t>(shape.size());
  impl->offset = offset;
  std::copy(shape.begin(), shape.end(), impl->shape.begin());
  std::copy_n(strides.begin(), shape.size(), impl->strides.begin());
  impl->numel = numel;
  impl->batch = b.batch;  // an alias of a batched tensor is batched too (views of other geometry: ops/batching.cpp)
  return Tensor(std::move(impl));
}

Tensor lanes_of(const Tensor& t, uint64_t level) {
  const bool batched = level != 0 && t.defined() && t.impl()->batch != nullptr && t.impl()->batch->level == level;
  return batched ? t.impl()->batch->physical : Tensor();
}

Tensor make_batched(const Tensor& physical, uint64_t level) {
  const TensorImpl& p = *physical.impl();
  // One lane's geometry: lane 0 of the physical tensor's storage.
  Tensor out = make_view(physical, p.sizes().subspan(1), p.stride_span().subspan(1), p.offset, "vmap");
  auto batch = make_pooled<BatchLevel>();
  batch->level = level;
  batch->physical = physical;
  out.impl()->batch = std::move(batch);
  return out;
}

namespace {

/// Elements from a tensor's offset to its last element, inclusive.
int64_t span_extent(const TensorImpl& impl) {
  int64_t extent = 1;
  for (int32_t d = 0; d < impl.rank; ++d) {
    extent += (impl.shape[static_cast<size_t>(d)] - 1) * impl.strides[static_cast<size_t>(d)];
  }
  return extent;
}

/// Calls f(row-major index, element offset within the span) for each element.
template <typename F>
void for_each_element(const TensorImpl& impl, F&& f) {
  std::array<int64_t, STRATA_MAX_RANK> index{};
  for (int64_t i = 0; i < impl.numel; ++i) {
    int64_t off = 0;
    for (int32_t d = 0; d < impl.rank; ++d) off += index[static_cast<size_t>(d)] * impl.strides[static_cast<size_t>(d)];
    f(i, off);
    for (int32_t d = impl.rank - 1; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < impl.shape[static_cast<size_t>(d)]) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
}

void device_to_host(const TensorImpl& impl, void* dst, size_t bytes) {
  impl.record().copy_to_host(dst, impl.storage->buffer, static_cast<size_t>(impl.offset) * dtype_size(impl.dtype), bytes);
}

void host_to_device(const TensorImpl& impl, const void* src, size_t bytes) {
  impl.record().copy_from_host(impl.storage->buffer, static_cast<size_t>(impl.offset) * dtype_size(impl.dtype), src,
                               bytes);
}

/// "reading f32[2, 3] from cpu:0", for the errors of host buffers.
std::string transfer_what(const TensorImpl& impl, const char* doing, const char* direction) {
  return std::string(doing) + " " + std::string(dtype_name(impl.dtype)) + shape_string(impl.sizes()) + " " + direction +
         " " + impl.record().id;
}

/// A batched tensor's values are one per lane: reading them inside the
/// vmapped function (to branch on them, print them) has no single answer.
[[noreturn]] void refuse_batched_read(const TensorImpl& impl) {
  throw ValueError("reading the values of a batched tensor (" + std::string(dtype_name(impl.dtype)) +
                   shape_string(impl.sizes()) + " per lane, " + std::to_string(impl.batch->physical.size(0)) +
                   " lanes) inside a vmapped function: each lane has its own values, so control flow cannot depend " +
                   "on them; return the tensor from the function and read it there (docs/vmap.md)");
}

/// A host buffer for the storage span `impl` covers.
std::vector<uint8_t> span_buffer(const TensorImpl& impl, const char* doing, const char* direction) {
  return host_vector<uint8_t>(static_cast<size_t>(span_extent(impl)) * dtype_size(impl.dtype),
                              [&] { return transfer_what(impl, doing, direction); });
}

}  // namespace

void host_out_of_memory(const std::string& what, size_t count, size_t element) {
  uint64_t bytes = 0;
  std::string amount = __builtin_mul_overflow(static_cast<uint64_t>(count), static_cast<uint64_t>(element), &bytes)
                           ? std::to_string(count) + " values of " + std::to_string(element) + " bytes"
                           : std::to_string(bytes) + " bytes (" + format_bytes(bytes) + ")";
  throw OutOfMemoryError(what + ": cannot allocate " + amount + " of host memory");
}

namespace {
std::atomic<void (*)(const Tensor&)> g_host_read_hook{nullptr};
}  // namespace

void set_host_read_hook(void (*hook)(const Tensor& t)) { g_host_read_hook.store(hook, std::memory_order_relaxed); }

std::vector<uint8_t> read_bytes(const Tensor& t) {
  if (auto* hook = g_host_read_hook.load(std::memory_order_relaxed)) hook(t);
  // Copies the span of storage the tensor covers and gathers on the host, so
  // reading never needs a device kernel (a device may lack a strided copy).
  const TensorImpl& impl = *t.impl();
  if (impl.batch != nullptr) [[unlikely]] refuse_batched_read(impl);
  size_t element = dtype_size(impl.dtype);
  std::vector<uint8_t> bytes = host_vector<uint8_t>(static_cast<size_t>(impl.numel) * element,
                                                    [&] { return transfer_what(impl, "reading", "from"); });
  if (bytes.empty()) return bytes;
  if (impl.is_contiguous()) {
    device_to_host(impl, bytes.data(), bytes.size());
    return bytes;
  }
  std::vector<uint8_t> span = span_buffer(impl, "reading", "from");
  device_to_host(impl, span.data(), span.size());
  for_each_element(impl, [&](int64_t i, int64_t off) {
    std::memcpy(bytes.data() + static_cast<size_t>(i) * element, span.data() + static_cast<size_t>(off) * element,
                element);
  });
  return bytes;
}

void write_bytes(const Tensor& dst, const std::vector<uint8_t>& bytes) {
  const TensorImpl& impl = *dst.impl();
  size_t element = dtype_size(impl.dtype);
  if (bytes.empty()) return;
  if (impl.is_contiguous()) {
    host_to_device(impl, bytes.data(), bytes.size());
    return;
  }
  std::vector<uint8_t> span = span_buffer(impl, "writing", "to");
  device_to_host(impl, span.data(), span.size());
  for_each_element(impl, [&](int64_t i, int64_t off) {
    std::memcpy(span.data() + static_cast<size_t>(off) * element, bytes.data() + static_cast<size_t>(i) * element,
                element);
  });
  host_to_device(impl, span.data(), span.size());
}

Tensor upload_bytes(const void* bytes, DType dtype, std::span<const int64_t> shape, DeviceRecord& device,
                    std::string_view op) {
  Tensor t = make_tensor(device, dtype, shape, op);
  size_t n = static_cast<size_t>(t.numel()) * dtype_size(dtype);
  if (n == 0) return t;
  device.copy_from_host(t.impl()->storage->buffer, 0, bytes, n);
  return t;
}

// --- Dimensions -------------------------------------------------------------------

int64_t normalize_dim(int64_t dim, int64_t rank, std::string_view what) {
  int64_t bound = std::max<int64_t>(rank, 1);  // a scalar accepts dim 0 / -1
  if (dim < -bound || dim >= bound) {
    std::string where = what.empty() ? std::string() : std::string(what) + ": ";
    throw IndexError(where + "dimension " + std::to_string(dim) + " out of range for a tensor of rank " +
                     std::to_string(rank) + " (expected " + std::to_string(-bound) + " to " +
                     std::to_string(bound - 1) + ")");
  }
  return dim < 0 ? dim + bound : dim;
}

std::vector<int64_t> normalize_dims(const Shape& dims, int64_t rank, std::string_view what) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(normalize_dim(d, rank, what));
  std::sort(out.begin(), out.end());
  if (std::adjacent_find(out.begin(), out.end()) != out.end()) {
    throw IndexError((what.empty() ? std::string() : std::string(what) + ": ") + "dims " + shape_string(dims) +
                     " repeat a dimension");
  }
  if (rank == 0) out.clear();
  return out;
}


}  // namespace strata::detail

namespace strata {

using detail::DeviceRecord;

bool TensorImpl::is_contiguous() const {
  int64_t expected = 1;
  for (int32_t d = rank - 1; d >= 0; --d) {
    if (shape[static_cast<size_t>(d)] != 1 && strides[static_cast<size_t>(d)] != expected) return false;
    expected *= shape[static_cast<size_t>(d)];
  }
  return true;
}

namespace {
const TensorImpl& checked(const Tensor& t) {
  if (!t.defined()) throw Error("operation on an undefined tensor");
  return *t.impl();
}
}  // namespace

DType Tensor::dtype() const { return checked(*this).dtype; }
Device Tensor::device() const { return checked(*this).device; }
int64_t Tensor::dim() const { return checked(*this).rank; }
std::span<const int64_t> Tensor::shape() const { return checked(*this).sizes(); }
std::span<const int64_t> Tensor::strides() const { return checked(*this).stride_span(); }
int64_t Tensor::offset() const { return checked(*this).offset; }
int64_t Tensor::numel() const { return checked(*this).numel; }
bool Tensor::is_contiguous() const { return checked(*this).is_contiguous(); }
Shape Tensor::sizes() const {
  auto s = shape();
  return Shape(s.begin(), s.end());
}

int64_t Tensor::size(int64_t d) const {
  const TensorImpl& impl = checked(*this);
  return impl.shape[static_cast<size_t>(detail::normalize_dim(d, impl.rank, "size"))];
}

Tensor Tensor::to(DType dtype) const {
  if (checked(*this).dtype == dtype) return *this;
  return cast(*this, dtype);
}

namespace {
/// New storage for a tensor of `t`'s shape and dtype; batched like `t` at
/// every vmap level (the copy into it is then one batched op).
Tensor fresh_like(const Tensor& t) {
  const TensorImpl& impl = *t.impl();
  if (impl.batch == nullptr) return detail::make_tensor(impl.record(), impl.dtype, impl.sizes(), "clone");
  return detail::make_batched(fresh_like(impl.batch->physical), impl.batch->level);
}
}  // namespace

Tensor Tensor::clone() const {
  checked(*this);
  Tensor out = fresh_like(*this);
  out.copy_(*this);
  return out;
}

Tensor Tensor::contiguous() const {
  if (checked(*this).is_contiguous()) return *this;
  return clone();
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  const TensorImpl& impl = checked(*this);
  if (is_complex(impl.dtype) && !detail::is_complex_value<T>) {
    throw DTypeError("to_vector: " + type_string(*this) +
                     " holds complex values; read them as std::complex<double> or std::complex<float>, or take "
                     "real(), imag() or abs() first");
  }
  std::vector<uint8_t> bytes = detail::read_bytes(*this);
  auto out = detail::host_vector<T>(static_cast<size_t>(impl.numel), [&] {
    return "to_vector: " + std::string(dtype_name(impl.dtype)) + detail::shape_string(impl.sizes());
  });
  for (size_t i = 0; i < out.size(); ++i) out[i] = detail::load_as<T>(bytes.data(), impl.dtype, i);
  return out;
}

template <typename T>
T Tensor::item() const {
  const TensorImpl& impl = checked(*this);
  if (impl.numel != 1) {
    throw ShapeError("item(): expected a tensor with one element, found shape " +
                     detail::shape_string(impl.sizes()) + " (" + std::to_string(impl.numel) + " elements)");
  }
  return to_vector<T>()[0];
}

template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template int32_t Tensor::item<int32_t>() const;
template bool Tensor::item<bool>() const;
template std::vector<std::complex<float>> Tensor::to_vector<std::complex<float>>() const;
template std::vector<std::complex<double>> Tensor::to_vector<std::complex<double>>() const;
template std::complex<float> Tensor::item<std::complex<float>>() const;
template std::complex<double> Tensor::item<std::complex<double>>() const;

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }
std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(shape[d]);
  }
  return s + "]";
}

std::string type_string(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(dtype_name(t.dtype())) + shape_string(t.shape());
}

std::vector<uint8_t> Tensor::to_bytes() const {
  checked(*this);
  return detail::read_bytes(*this);
}

}  // namespace strata
