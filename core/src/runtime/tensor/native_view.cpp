// native_view.cpp — a tensor's memory through its plugin's
// strata.native_handles extension (runtime.hpp, native_view), and tensors
// over memory another library owns through strata.buffer_views
// (tensor_from_native).
#include "base/pool.hpp"
#include "runtime/device/device_record.hpp"
#include "runtime/device/device_table.hpp"
#include "runtime/tensor/tensor_impl.hpp"

#include <strata/error.hpp>
#include <strata/native_view.hpp>
#include <strata/tensor.hpp>

#include <cstring>
#include <utility>

namespace strata {

NativeView native_view(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (impl == nullptr || impl->storage == nullptr) throw ValueError("native_view: the tensor has no storage");
  if (impl->batch != nullptr) {
    throw ValueError("native_view: the tensor is batched by vmap (one lane of " +
                     shape_string(impl->batch->physical.shape()) +
                     "); its memory holds every lane, so take the view outside the vmapped function");
  }
  detail::DeviceRecord& d = impl->record();
  d.ensure_alive();
  const auto* ext = d.plugin.extension_as<strata_ext_native_handles>(
      STRATA_EXT_NATIVE_HANDLES, STRATA_EXT_NATIVE_HANDLES_VERSION,
      STRATA_SIZE_UP_TO(strata_ext_native_handles, buffer_pointer));
  if (ext == nullptr || ext->buffer_pointer == nullptr) {
    const bool present = d.plugin.extension(STRATA_EXT_NATIVE_HANDLES, STRATA_EXT_NATIVE_HANDLES_VERSION) != nullptr;
    throw DeviceError("native_view: " + d.id + "'s plugin \"" + d.plugin.name + "\" " +
                      (present ? "offers a strata.native_handles extension whose struct_size ends before "
                                 "buffer_pointer (or whose buffer_pointer is null)"
                               : "offers no strata.native_handles extension") +
                      ", so its memory has no native address");
  }
  strata_error err{sizeof(strata_error), ""};
  strata_native_args a = d.call_args<strata_native_args>(err);
  a.buffer = impl->storage->buffer;
  if (ext->buffer_pointer(&a) != STRATA_OK) {
    throw DeviceError("native_view on " + d.id + ": buffer_pointer failed: " + std::string(err.message));
  }
  NativeView v;
  v.api = a.api != nullptr ? a.api : "";
  v.data = static_cast<char*>(a.handle) + impl->offset * static_cast<int64_t>(dtype_size(impl->dtype));
  // stream_handle lies past the minimum size read above: only where the
  // plugin's struct reaches it.
  if (ext->base.struct_size >= STRATA_SIZE_UP_TO(strata_ext_native_handles, stream_handle) &&
      ext->stream_handle != nullptr) {
    strata_native_args s = d.call_args<strata_native_args>(err);
    if (ext->stream_handle(&s) == STRATA_OK) v.stream = s.handle;
  }
  return v;
}

namespace {

const strata_ext_buffer_views* buffer_views(const detail::DeviceRecord& d) {
  const auto* ext = d.plugin.extension_as<strata_ext_buffer_views>(
      STRATA_EXT_BUFFER_VIEWS, STRATA_EXT_BUFFER_VIEWS_VERSION, sizeof(strata_ext_buffer_views));
  return ext != nullptr && ext->create_view != nullptr && ext->destroy_view != nullptr ? ext : nullptr;
}

}  // namespace

bool can_view_native(Device device) { return buffer_views(detail::device_record(device)) != nullptr; }

Tensor tensor_from_native(void* data, DType dtype, std::span<const int64_t> shape, std::span<const int64_t> strides,
                          Device device, std::function<void()> release) {
  detail::DeviceRecord& d = detail::device_record(device);
  const std::string what = "tensor_from_native(" + std::string(dtype_name(dtype)) + shape_string(shape) + " on " +
                           d.id + ")";
  d.ensure_alive();
  detail::check_stores(d, dtype, what);
  const int64_t numel = detail::checked_numel(what, shape, dtype);
  if (!strides.empty() && strides.size() != shape.size()) {
    throw ValueError(what + ": " + std::to_string(strides.size()) + " strides for a shape of rank " +
                     std::to_string(shape.size()));
  }
  const auto element = static_cast<int64_t>(dtype_size(dtype));
  if (data == nullptr && numel > 0) throw ValueError(what + ": the address is null");
  if (reinterpret_cast<uintptr_t>(data) % static_cast<uintptr_t>(element) != 0) {
    throw ValueError(what + ": the address " + std::to_string(reinterpret_cast<uintptr_t>(data)) +
                     " is not aligned to the element size (" + std::to_string(element) + " bytes)");
  }
  const auto* views = buffer_views(d);
  if (views == nullptr) {
    throw DeviceError(what + ": " + d.id + "'s plugin \"" + d.plugin.name +
                      "\" offers no strata.buffer_views extension, so it cannot use memory it did not allocate "
                      "(copy the data instead)");
  }
  auto impl = detail::make_pooled<TensorImpl>();
  impl->dtype = dtype;
  impl->rank = static_cast<int32_t>(shape.size());
  impl->numel = numel;
  std::copy(shape.begin(), shape.end(), impl->shape.begin());
  if (strides.empty()) {
    detail::contiguous_strides(shape, impl->strides.data());
  } else {
    for (size_t k = 0; k < strides.size(); ++k) {
      if (strides[k] < 0) {
        throw ValueError(what + ": stride " + std::to_string(strides[k]) + " of dim " + std::to_string(k) +
                         " is negative (Strata's tensors have none; copy the data instead)");
      }
      impl->strides[k] = strides[k];
    }
  }
  if (numel == 0) {  // no memory to view: an empty tensor of the device, and the owner's memory back at once
    Tensor empty = detail::make_tensor(d, dtype, shape, what);
    if (release) release();
    return empty;
  }
  // The bytes from the first element to the last.
  int64_t extent = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    int64_t reach = 0;
    if (__builtin_mul_overflow(shape[k] - 1, impl->strides[k], &reach) ||
        __builtin_add_overflow(extent, reach, &extent)) {
      throw ValueError(what + ": the strides reach past any addressable memory");
    }
  }
  if (__builtin_mul_overflow(extent, element, &extent)) {
    throw ValueError(what + ": the strides reach past any addressable memory");
  }
  strata_error err{sizeof(strata_error), ""};
  auto a = d.call_args<strata_view_args>(err);
  a.address = data;
  a.bytes = static_cast<size_t>(extent);
  d.check(views->create_view(&a), err, what + ": buffer_views.create_view");
  auto storage = detail::make_pooled<detail::Storage>(&d, a.buffer, a.bytes);
  storage->foreign = std::make_unique<detail::ForeignMemory>(detail::ForeignMemory{views, std::move(release)});
  storage->serial = detail::next_storage_serial();
  impl->device = device;
  impl->storage = std::move(storage);
  return Tensor(std::move(impl));
}

}  // namespace strata

namespace strata::detail {

void release_foreign(Storage& storage) noexcept {
  if (!shutting_down() && storage.device != nullptr) {
    DeviceRecord& d = *storage.device;
    try {
      d.synchronize();  // the device's queued work may still use the memory
      strata_error err{sizeof(strata_error), ""};
      auto a = d.call_args<strata_view_args>(err);
      a.buffer = storage.buffer;
      storage.foreign->views->destroy_view(&a);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a lost device has no work left to wait for
    }
  }
  if (storage.foreign->release) {
    try {
      storage.foreign->release();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the owner's failure cannot reach anyone from a destructor
    }
  }
}

}  // namespace strata::detail
