// native_view.cpp — a tensor's memory through its plugin's
// strata.native_handles extension (runtime.hpp, native_view).
#include "runtime/device/device_record.hpp"
#include "runtime/tensor/tensor_impl.hpp"

#include <strata/error.hpp>
#include <strata/native_view.hpp>
#include <strata/tensor.hpp>

#include <cstring>

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

}  // namespace strata
