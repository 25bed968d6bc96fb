// native_view.hpp — a tensor's memory as its plugin sees it, for native code.
#pragma once

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

}  // namespace strata
