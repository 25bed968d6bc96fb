// device.hpp — the plugin's state: the Vulkan instance and, per device, the
// logical device, its queue, memory pools, pipelines and streams
// (options.hpp, stream.hpp and pipelines.hpp declare the parts).
#pragma once

#include <strata/plugin/backend.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "memory.hpp"
#include "options.hpp"
#include "pipelines.hpp"
#include "stream.hpp"
#include "timestamps.hpp"
#include "vk_api.hpp"

namespace strata::vulkan {

inline constexpr const char* kPluginName = "vulkan";
/// Every pipeline's push constant block (the minimum every device supports).
inline constexpr uint32_t kPushConstantBytes = 128;
/// Alignment of every sub-allocated range (>= minStorageBufferOffsetAlignment
/// on every known device, and the ABI's 64 bytes).
inline constexpr VkDeviceSize kBufferAlignment = 256;

struct State;

/// The deferred-error record a device's shaders write (shaders/common.glsl,
/// ErrorRecord): the first failure since the last synchronisation point.
struct DeferredRecord {
  uint32_t state;  // 0 none, 1 being written, 2 written
  uint32_t site;   // OpSpec id of the failing kernel (kernels.hpp)
  uint32_t what;   // ERR_* (shaders/opcodes.h)
  uint32_t dim;
  uint32_t bound;  // valid indices are [0, bound)
  uint32_t value_lo, value_hi;
  uint32_t pad;
};

/// One physical device and, once opened, its logical device.
struct Device {
  State* state = nullptr;
  int32_t index = 0;
  std::string name;  // "vulkan:0"
  VkPhysicalDevice physical = VK_NULL_HANDLE;
  VkPhysicalDeviceProperties properties{};
  VkPhysicalDeviceMemoryProperties memory_properties{};
  bool has_int64 = false;
  bool has_storage8 = false;
  bool has_storage16 = false;
  bool has_float16 = false;
  bool has_memory_budget = false;  // VK_EXT_memory_budget
  uint32_t queue_family = 0;
  uint32_t memory_type = 0;   // tensors
  uint32_t staging_type = 0;  // host-visible, coherent
  bool direct = false;        // tensor memory is host-visible: copies are memcpy
  int32_t score = 0;
  strata_device_props props{};
  // Timestamps (event_elapsed): the queue family's timestampValidBits (0:
  // none, or the test hook "test_no_timestamps") and nanoseconds per tick.
  uint32_t timestamp_bits = 0;
  float timestamp_period = 0;

  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  DeviceApi fn{};
  VkSemaphore timeline = VK_NULL_HANDLE;  // signalled with each submission's seq

  std::unique_ptr<BlockAllocator> memory;   // tensors
  std::unique_ptr<BlockAllocator> staging;  // parameters, uploads/readbacks, pinned host memory, the record
  std::unique_ptr<Pipelines> pipelines;
  std::unique_ptr<Stream> default_stream;
  std::unique_ptr<Timestamps> timestamps;  // TIMING events' queries; null without timestamp_bits

  Buffer* deferred = nullptr;  // DeferredRecord, host-visible and coherent
  std::mutex deferred_mutex;   // two synchronisation points report one failure once

  std::mutex queue_mutex;  // vkQueueSubmit and seq assignment
  std::atomic<uint64_t> last_submitted{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<bool> is_lost{false};
  std::mutex lost_mutex;
  std::string lost;  // set once the device reported an unrecoverable error

  std::mutex streams_mutex;
  std::vector<Stream*> streams;  // every live stream (default included)

  std::atomic<uint64_t> live_bytes{0};  // memory_stats: held by buffers the host has not freed
  std::atomic<uint64_t> peak_bytes{0};

  /// "vulkan:0"
  const std::string& id() const { return name; }

  /// Submits a recorded command buffer; *seq receives its timeline value.
  strata_status submit(VkCommandBuffer commands, uint64_t* seq, strata_error* error);
  /// Polls the timeline; returns the highest completed seq.
  uint64_t poll();
  /// Blocks until the timeline reaches seq.
  strata_status wait(uint64_t seq, strata_error* error);
  /// DEVICE_LOST when the device was lost.
  strata_status check_lost(strata_error* error);
  void mark_lost(const std::string& why);
  /// At a synchronisation point: DEFERRED naming the op when a shader
  /// recorded a failure since the last one (and clears the record).
  strata_status report_deferred(strata_error* error);
  /// Counts `bytes` as held by a live buffer (memory_stats).
  void count_alloc(uint64_t bytes);
};

/// The plugin: its state (the instance and the devices), and the backend
/// class make_api<State>() turns into the C table (strata/plugin/backend.hpp:
/// the SDK checks struct sizes and device indices, turns exceptions into
/// statuses and asks deferred() at the synchronisation points). Members by
/// file: plugin.cpp, entry_memory.cpp, entry_copies.cpp, entry_streams.cpp.
struct State : plugin::DeviceList<Device> {
  static constexpr const char* kName = kPluginName;
  static constexpr const char* kVendor = "Strata project";
  static constexpr const char* kVersion = "0.2.0";
  static const char* const kProbeEnvironment[];
  static const strata_extension* extensions();
  using Device = vulkan::Device;

  const strata_host_api* host = nullptr;
  Options options;
  InstanceApi api;
  VkInstance instance = VK_NULL_HANDLE;

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  /// Closes every device and destroys the instance (instance.cpp).
  ~State();

  void log(strata_log_level level, const std::string& message) const;

  // ---- The table ----
  STRATA_BACKEND_MEMBERS(State, Device);
  const strata_device_props& props(Device& d) const { return d.props; }
  STRATA_BACKEND_MEMORY_MEMBERS(Device);
  STRATA_BACKEND_STREAM_MEMBERS(Device);
  strata_status deferred(Device& d, strata_error* error) { return d.report_deferred(error); }
  strata_status buffer_pointer(Device& d, strata_native_args& a);
  strata_status stream_handle(Device& d, strata_native_args& a);
};

inline State* as_state(strata_plugin_state s) { return reinterpret_cast<State*>(s); }

/// The device of a kernel/API call, or nullptr with *error set.
Device* device_of(strata_plugin_state state, int32_t device, strata_error* error);
/// ctx->stream, or the device's default stream.
Stream& stream_of(Device& device, strata_stream stream);

/// Opens a logical device for `device` (queue, memory pools, pipelines).
strata_status open_device(Device& device, strata_error* error);
/// Waits for the device and destroys everything it owns.
void close_device(Device& device);

}  // namespace strata::vulkan
