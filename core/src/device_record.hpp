// device_record.hpp — the runtime's view of one loaded plugin and its devices.
#pragma once

#include "allocator.hpp"

#include <strata/device.hpp>
#include <strata/plugin/strata_plugin.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace strata::detail {

/// A plugin that passed every check and initialised. Never unloaded.
struct LoadedPlugin {
  std::string name;
  std::string path;
  std::string vendor;
  std::string version;
  std::string abi;
  int score = 0;
  const strata_plugin_api* api = nullptr;
  strata_plugin_state state = nullptr;
  void* library = nullptr;  // boost::dll::shared_library*, intentionally leaked
};

/// A kernel for one dtype signature of one op.
struct KernelSlot {
  uint64_t signature = 0;  // see signature_key()
  strata_kernel_fn fn = nullptr;
  uint32_t flags = 0;
};

struct DeviceRecord {
  DeviceRecord(LoadedPlugin& p, int32_t i, int32_t s) : plugin(p), index(i), slot(s), allocator(*this) {}

  LoadedPlugin& plugin;
  int32_t index;  // within the plugin
  int32_t slot;   // in the runtime's table
  std::string id; // "cpu:0"
  strata_device_props props{};
  /// kernels[op id] -> kernels of that op, by signature.
  std::vector<std::vector<KernelSlot>> kernels;
  int kernel_count = 0;
  CachingAllocator allocator;
  strata_stream stream = nullptr;  // the device's default stream (may be NULL)

  Device device() const { return Device::from_slot(slot); }
  const KernelSlot* find_kernel(int op_id, uint64_t signature) const {
    if (op_id < 0 || static_cast<size_t>(op_id) >= kernels.size()) return nullptr;
    for (const KernelSlot& k : kernels[static_cast<size_t>(op_id)]) {
      if (k.signature == signature) return &k;
    }
    return nullptr;
  }
  /// Waits for queued work (no-op for plugins without streams).
  void synchronize();
};

/// Packs dtypes of inputs and outputs into one integer (4 bits each, 0xF
/// between inputs and outputs, a leading 1 so that arity is part of the key).
uint64_t signature_key(const DType* inputs, int n_inputs, const DType* outputs, int n_outputs);
/// Parses "f32,f32->f32"; returns 0 when malformed.
uint64_t parse_signature(const char* text);
/// "f32,f32->f32".
std::string signature_string(const DType* inputs, int n_inputs, const DType* outputs, int n_outputs);

/// The runtime's device table, indexed by slot; stable for the process.
DeviceRecord& device_record(Device device);
/// Raises a DeviceError naming `what` and the plugin's message unless OK.
void check_status(strata_status status, const strata_error& error, const DeviceRecord& device, const char* what);

}  // namespace strata::detail
