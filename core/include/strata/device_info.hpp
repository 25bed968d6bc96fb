// device_info.hpp — what a device is and offers, as Runtime::devices()
// and `strata devices` report it.
#pragma once

#include <strata/device.hpp>
#include <strata/dtype.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

enum class DeviceType { cpu, gpu, igpu, accelerator };
std::string_view device_type_name(DeviceType t);

/// One kernel a device's plugin registered (and the core accepted).
struct KernelInfo {
  std::string op;         // "strata::add", "acme::swiglu"
  std::string signature;  // "f32,f32->f32"
  bool strided_inputs = false;  // STRATA_KERNEL_STRIDED_INPUTS
  /// Set aside by the configuration (devices.<id>.exclude_kernels): listed,
  /// never called; its calls fall back as a missing kernel's do.
  bool excluded = false;
};

struct DeviceInfo {
  Device device;
  std::string id;    // "cpu:0"
  std::string name;  // from the plugin
  DeviceType type = DeviceType::cpu;
  uint64_t memory_bytes = 0;
  std::vector<DType> dtypes;          // storable
  std::vector<DType> compute_dtypes;  // computed natively
  std::string compute_capability;
  bool has_streams = false;
  bool unified_memory = false;
  std::optional<uint64_t> memory_limit;  // from the configuration
  int kernel_count = 0;
  /// Every kernel, in the order the plugin listed them (what `strata plugin
  /// check` tests).
  std::vector<KernelInfo> kernels;
  /// Primitives of the op set this device has no kernel for (these fall
  /// back per policy). The complex-only ones (real, imag, conj, angle,
  /// complex) count only on a device that stores a complex dtype: elsewhere
  /// no tensor could reach them.
  std::vector<std::string> missing_primitives;
  /// Hardware identity from the plugin (empty when it reports none): a UUID
  /// "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" and a PCI bus id "0000:65:00.0".
  std::string uuid;
  std::string pci_bus_id;
  /// Other devices that are the same hardware seen through another plugin
  /// (Vulkan and CUDA on one GPU), by id. Of such a group only the member
  /// whose plugin comes first in the configuration's "prefer" list is a
  /// candidate for the default device.
  std::vector<std::string> same_hardware_as;
  /// The plugin declared every entry point thread-safe (no per-stream lock).
  bool free_threaded = false;
  /// The plugin caches memory itself; the core's allocator passes through.
  bool plugin_caches_memory = false;
  /// The device reported DEVICE_LOST; every later use fails with `lost_reason`.
  bool lost = false;
  std::string lost_reason;
};

}  // namespace strata
