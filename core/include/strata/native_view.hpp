// native_view.hpp — a tensor's memory as its plugin sees it, for native code.
#pragma once

#include <strata/device.hpp>
#include <strata/dtype.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace strata {

class Tensor;

/// A tensor's memory as its plugin sees it, for interop with native code
/// (collective libraries, other frameworks), through the plugin's
/// strata.native_handles extension.
struct NativeView {
  std::string api;        // "host", "cuda", "hip", "vulkan", ... (the plugin's)
  void* data = nullptr;   // native address of the tensor's first element (its offset applied)
  void* stream = nullptr; // the device's default native stream (NULL for "host")
};

/// The native view of `t`. Throws DeviceError naming the device when its
/// plugin offers no strata.native_handles extension. Work the device still
/// has queued may be writing the memory: call runtime().synchronize(device)
/// first (or order native work on `stream`). Writing through the pointer
/// bypasses autograd's version counter, so write only tensors no saved
/// tensor depends on (gradients in a collective, buffers you own); the
/// strides are t's own.
NativeView native_view(const Tensor& t);

/// Whether `device`'s plugin can view memory it did not allocate (it offers
/// the strata.buffer_views extension), so that tensor_from_native works
/// there. The CPU plugin can; a device that cannot is reached by copying.
bool can_view_native(Device device);

/// A tensor over memory that native code allocated and still owns, without
/// a copy: DLPack import, torch::from_blob's counterpart. Through the
/// device's strata.buffer_views extension (can_view_native).
///   data     the address of the element at index 0, in the device's native
///            sense (a host address on cpu:0; what NativeView::data gives),
///            aligned to the element size
///   strides  in elements, each >= 0; empty for row-major contiguous
///   release  runs once, when the last tensor over the memory is gone and
///            the device has finished its work on it, on the thread that
///            drops that tensor; it does not run when this throws (the
///            caller still owns the memory then)
/// The memory is shared both ways: the tensor's in-place ops write the
/// owner's memory and the owner's writes show in the tensor, unseen by
/// autograd's version counter (as native_view's writes). Memory that a
/// Strata tensor owns is better shared as that tensor (or a view of it):
/// on cpu:0, while a foreign view of a tensor's first byte lives, copies
/// into that tensor are range-checked against the view's extent (the CPU
/// plugin finds a buffer's size by its address). Throws DeviceError
/// naming the device when its plugin cannot view memory or refuses the
/// address, DTypeError when the device does not store `dtype`, ValueError
/// for a null or misaligned address, a negative stride or a strides list of
/// another length than the shape, ShapeError for a shape no tensor holds.
Tensor tensor_from_native(void* data, DType dtype, std::span<const int64_t> shape,
                          std::span<const int64_t> strides, Device device, std::function<void()> release);

}  // namespace strata
