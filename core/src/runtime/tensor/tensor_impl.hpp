// tensor_impl.hpp — what a Tensor handle points at.
#pragma once

#include <strata/plugin/strata_plugin.h>
#include <strata/tensor.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace strata::detail {

struct DeviceRecord;
struct AutogradMeta;

/// Memory another library owns, under a strata.buffer_views view
/// (tensor_from_native, native_view.cpp).
struct ForeignMemory {
  const strata_ext_buffer_views* views = nullptr;  // the device's extension
  std::function<void()> release;                   // gives the memory back to its owner
};

/// A block of device memory. Returned to the device's caching allocator when
/// the last tensor viewing it goes away — or, for a view of memory another
/// library owns (`foreign`), handed back to it (release_foreign).
struct Storage {
  DeviceRecord* device = nullptr;
  strata_buffer buffer = nullptr;
  size_t bytes = 0;
  std::unique_ptr<ForeignMemory> foreign;
  /// Bumped by in-place writes; saved tensors check it before backward.
  std::atomic<uint32_t> version{0};
  /// Allocation order in the process (storage_serial()): vmap tells the
  /// tensors its function made from the ones it closed over.
  uint64_t serial = 0;

  Storage(DeviceRecord* d, strata_buffer b, size_t n) : device(d), buffer(b), bytes(n) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();
};

using Dims = std::array<int64_t, STRATA_MAX_RANK>;

/// What makes a tensor batched (vmap, docs/vmap.md): the tensor seen inside
/// a vmapped function is one lane of `physical`, whose dim 0 runs over the
/// lanes and whose other dims are the tensor's own. The batched tensor's
/// own geometry views lane 0 of the same storage (so its shape, dtype,
/// device and storage version are the lanes'), but no kernel ever runs on
/// it: dispatch sends every op with a batched operand to the op's batching
/// rule, which runs on `physical`. `physical` may itself be batched at an
/// outer vmap's (lower) level.
/// The serial the next storage gets (Storage::serial).
uint64_t storage_serial();
/// A new storage's serial (storage_serial() moves past it).
uint64_t next_storage_serial();

/// Destroys a foreign storage's view once the device's work is done, then
/// runs its release (native_view.cpp); never throws (a destructor's).
void release_foreign(Storage& storage) noexcept;

struct BatchLevel {
  uint64_t level = 0;  // the vmap that made it (ids shared with the gradient tapes' levels)
  Tensor physical;
};

}  // namespace strata::detail

namespace strata {

struct TensorImpl {
  using DeviceRecord = detail::DeviceRecord;
  using Storage = detail::Storage;
  using Dims = detail::Dims;

  std::shared_ptr<Storage> storage;
  Device device;
  DType dtype = DType::f32;
  int32_t rank = 0;
  int64_t offset = 0;  // elements
  int64_t numel = 1;
  Dims shape{};
  Dims strides{};
  /// Autograd state; null for tensors no tape or backward() cares about.
  std::shared_ptr<detail::AutogradMeta> autograd;
  /// Set for the batched tensors of a vmap (detail::BatchLevel); views with
  /// the same geometry (aliases) share it.
  std::shared_ptr<const detail::BatchLevel> batch;

  std::span<const int64_t> sizes() const { return {shape.data(), static_cast<size_t>(rank)}; }
  std::span<const int64_t> stride_span() const { return {strides.data(), static_cast<size_t>(rank)}; }
  bool is_contiguous() const;
  DeviceRecord& record() const { return *storage->device; }
};

}  // namespace strata

namespace strata::detail {

/// Why no tensor of `dtype` can have `shape`, or "" when one can: a rank
/// above STRATA_MAX_RANK (the ABI's descriptor holds no more dims), a
/// negative dimension, an element count or a size in bytes that does not fit
/// in int64. Zero-size dims count as 1 in that product, so that every
/// row-major stride of the shape fits too. Sets `numel` when it fits.
std::string shape_problem(std::span<const int64_t> shape, DType dtype, int64_t& numel);
/// The element count of `shape` when a tensor of `dtype` can have it (as
/// shape_problem decides), else -1: the hot path's check, with no string.
inline int64_t fitting_numel(std::span<const int64_t> shape, DType dtype) noexcept {
  if (shape.size() > STRATA_MAX_RANK) return -1;
  int64_t n = 1;  // zero-size dims as 1: the largest stride
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(n, d, &n)) {
      return -1;
    }
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, static_cast<int64_t>(dtype_size(dtype)), &bytes)) return -1;
  return empty ? 0 : n;
}
/// Throws the ShapeError of checked_numel (out of line: the cold path).
[[noreturn]] void throw_shape_problem(std::string_view what, std::span<const int64_t> shape, DType dtype);
/// The element count of `shape`, or a ShapeError "<what>: <problem>". Every
/// shape becomes a tensor through here (make_tensor, make_view), so a tensor's
/// numel and byte size never overflow; ops check earlier to name themselves.
inline int64_t checked_numel(std::string_view what, std::span<const int64_t> shape, DType dtype) {
  const int64_t n = fitting_numel(shape, dtype);
  if (n < 0) [[unlikely]] throw_shape_problem(what, shape, dtype);
  return n;
}

/// Row-major strides for a shape; returns the element count. The shape must
/// have passed checked_numel.
inline int64_t contiguous_strides(std::span<const int64_t> shape, int64_t* strides) {
  int64_t n = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = n;
    n *= shape[d];
  }
  return n;
}

/// Normalises a possibly negative dim against rank; throws IndexError whose
/// message starts with `what` (the op or function name).
int64_t normalize_dim(int64_t dim, int64_t rank, std::string_view what = {});
/// Sorted, unique, normalised dims; empty input means all dims.
std::vector<int64_t> normalize_dims(const Shape& dims, int64_t rank, std::string_view what = {});

/// A contiguous tensor of `dtype` and `shape` without storage or device (for
/// ShapeOnlyScope, op.hpp, and views over it; never for kernels). A shape
/// checked_numel refuses is a ShapeError naming `op`.
Tensor meta_tensor(DType dtype, std::span<const int64_t> shape, std::string_view op = "tensor");
/// A new tensor with fresh, uninitialised storage on `device`. `op` names
/// the caller in errors: a DTypeError for a dtype the device does not store
/// (check_stores, device_record.hpp), a ShapeError for a shape checked_numel
/// refuses, an OutOfMemoryError naming the bytes and the device when it
/// cannot be had.
Tensor make_tensor(DeviceRecord& device, DType dtype, std::span<const int64_t> shape, std::string_view op);
/// A view of `base`'s storage with other geometry (checked_numel under `op`).
/// Fills the ABI descriptor of a tensor for a plugin call (kernels,
/// collectives): its buffer, element offset, dtype, shape and strides. Only
/// the fields up to its rank are written (the hot path does not zero the rest).
inline void describe_tensor(const TensorImpl& impl, strata_tensor& d) {
  d.struct_size = sizeof(strata_tensor);
  d.buffer = impl.storage->buffer;
  d.offset = impl.offset;
  d.dtype = static_cast<strata_dtype>(impl.dtype);
  d.rank = impl.rank;
  for (int32_t k = 0; k < impl.rank; ++k) {
    d.shape[k] = impl.shape[static_cast<size_t>(k)];
    d.strides[k] = impl.strides[static_cast<size_t>(k)];
  }
}

Tensor make_view(const Tensor& base, std::span<const int64_t> shape, std::span<const int64_t> strides, int64_t offset,
                 std::string_view op = "view");

/// The lanes of `t` when it is batched at vmap `level` (BatchLevel);
/// undefined otherwise.
Tensor lanes_of(const Tensor& t, uint64_t level);
/// A batched tensor of vmap `level` whose lanes are `physical` (dim 0).
Tensor make_batched(const Tensor& physical, uint64_t level);

using strata::shape_string;  // "[2, 3]" (public: strata/tensor.hpp)

/// Bumps the storage version of an in-place write target (saved tensors
/// check it before backward).
inline void bump_version(const Tensor& t) { t.impl()->storage->version.fetch_add(1, std::memory_order_relaxed); }

}  // namespace strata::detail
