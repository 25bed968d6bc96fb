// common.hpp — what the two halves of the custom_ops plugin share: its name,
// the memory its own device hands out, and how a kernel finds the host
// address of an operand on either kind of device it runs on.
//
// The plugin is built only against the installed Strata SDK
// (strata/plugin/strata_plugin.h and its C++ helpers); nothing here reaches
// into the Strata core.
#pragma once

#include <strata/plugin/strata_plugin.h>
#include <strata/plugin/strata_plugin.hpp>

#include <cstddef>
#include <cstdint>

namespace custom_ops {

/// The plugin's name: its file is libstrata_plugin_custom_ops.so, its device
/// custom_ops:0 and its ops live in the namespace "custom_ops::".
inline constexpr const char* kPluginName = "custom_ops";

/// Whether `state` is the one this plugin's init handed out (custom_ops:0's).
bool is_own_state(strata_plugin_state state);

/// A block of this plugin's own device memory. A strata_buffer of
/// custom_ops:0 points at one; the magic word catches a foreign handle.
struct Block {
  static constexpr uint64_t kMagic = 0x53574947'4c55424bull;  // "SWIGLUBK"
  uint64_t magic = kMagic;
  size_t bytes = 0;
  unsigned char* data = nullptr;  // 64-byte aligned
};

/// The Block behind a buffer handle of custom_ops:0, or nullptr.
inline Block* block_of(strata_buffer buffer) {
  auto* b = reinterpret_cast<Block*>(buffer);
  return b != nullptr && b->magic == Block::kMagic ? b : nullptr;
}

/// Where a kernel entry's operands live.
enum class Memory {
  own,  ///< custom_ops:0: buffers are Blocks of this plugin
  cpu,  ///< a device of the "cpu" plugin: addresses from its strata.native_handles
};

/// Sets `*out` to the host address of element 0 of `t`'s buffer (the
/// descriptor's offset is not added), checking on custom_ops:0 that every
/// element of `t` lies inside its Block. `role` ("input 1", "output 0")
/// names the operand in messages. Writes the reason into call->error and
/// returns its status on failure.
strata_status operand_address(const strata_kernel_call* call, const strata_tensor& t, Memory memory,
                              const char* role, unsigned char** out);

/// Flat element index (within the buffer, offset included) of the
/// row-major element number `i` of the strided view `t`.
inline int64_t strided_index(const strata_tensor& t, int64_t i) {
  int64_t at = t.offset;
  for (int32_t d = t.rank - 1; d >= 0; --d) {
    const int64_t extent = t.shape[d];
    at += (i % extent) * t.strides[d];
    i /= extent;
  }
  return at;
}

}  // namespace custom_ops
