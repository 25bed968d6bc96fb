// device.hpp — the plugin's state: options, the Vulkan instance, and per
// device the logical device, its queue, memory pools, pipelines and streams.
#pragma once

#include <strata/plugin/strata_plugin.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "memory.hpp"
#include "vk_api.hpp"

namespace strata::vulkan {

inline constexpr const char* kPluginName = "vulkan";
/// Every pipeline's push constant block (the minimum every device supports).
inline constexpr uint32_t kPushConstantBytes = 128;
/// Alignment of every sub-allocated range (>= minStorageBufferOffsetAlignment
/// on every known device, and the ABI's 64 bytes).
inline constexpr VkDeviceSize kBufferAlignment = 256;

/// Plugin options (README.md documents them).
struct Options {
  std::string loader = "libvulkan.so.1";
  uint64_t block_bytes = 64ull << 20;
  uint32_t batch_dispatches = 256;  // commands per submission before it is flushed
  std::string pipeline_cache_dir;   // empty: no persistent pipeline cache
  bool validation = false;
  bool allow_software = true;  // expose lavapipe/llvmpipe-class devices
  bool unified_copies = true;  // use memcpy on host-visible device memory where the device allows
  // Test hook ("test_fail_pipeline"): "<shader variant>/<kernel>" whose
  // pipeline creation fails as if the driver had refused it. Empty: off.
  std::string fail_pipeline;
};

struct Device;
class Stream;

/// One submission: a command buffer, the timeline value that marks its end,
/// and what may be reused once it is submitted or has completed.
struct Batch {
  VkCommandBuffer commands = VK_NULL_HANDLE;
  uint64_t seq = 0;  // 0 while recording
  uint32_t recorded = 0;
  std::vector<Buffer*> staging;  // host-visible ranges (parameters, uploads) released on completion
  std::vector<Buffer*> frees;    // buffers freed on the stream, released once the batch is submitted
  Buffer* arena = nullptr;       // current parameter block
  VkDeviceSize arena_used = 0;
};

/// A queue of work on one device. Every stream submits to the device's one
/// queue; ordering between streams is submission order (each batch begins
/// with a barrier on all earlier work), so events only need to flush.
///
/// Locking (README.md, "Threading"): the host serialises every call naming
/// a stream, but stream_synchronize (and stream_destroy, the OOM path of
/// another stream's alloc, close_device) reach a stream from other threads:
/// mutex() guards the recording batch against them. It is uncontended in
/// the common case, one lock per kernel.
class Stream {
 public:
  explicit Stream(Device& device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  std::mutex& mutex() { return mutex_; }

  // The calls below require mutex() held.

  /// Copies `bytes` of kernel parameters into this batch's parameter arena;
  /// *address receives their device address.
  strata_status upload_params(const void* data, size_t bytes, VkDeviceAddress* address, strata_error* error);
  /// Records a dispatch followed by a barrier.
  strata_status dispatch(VkPipeline pipeline, const void* push, uint32_t push_bytes, uint32_t gx, uint32_t gy,
                         uint32_t gz, strata_error* error);
  /// Records a buffer copy followed by a barrier.
  strata_status copy(VkBuffer src, VkDeviceSize src_offset, VkBuffer dst, VkDeviceSize dst_offset, VkDeviceSize bytes,
                     strata_error* error);
  /// Records an upload of host bytes through a staging range (asynchronous).
  strata_status upload(const void* src, size_t bytes, const Buffer& dst, VkDeviceSize dst_offset, strata_error* error);
  /// Submits the recorded batch, if any. Returns its timeline value in *seq.
  strata_status flush(strata_error* error, uint64_t* seq = nullptr);
  /// flush() and wait until everything submitted from this stream is done.
  strata_status synchronize(strata_error* error);
  /// Nothing recorded and nothing of this stream still running.
  bool idle();
  /// Timeline value of the last submission from this stream.
  uint64_t last_seq() const { return last_seq_; }
  bool has_recorded() const { return current_ != nullptr && current_->recorded > 0; }
  /// Keeps `buffer` (a staging range) alive until everything recorded or
  /// submitted on this stream so far has completed, then releases it.
  void retire_with_batch(Buffer* buffer);
  /// A buffer freed on this stream (stream-ordered free): released to its
  /// pool at once when nothing is recorded, else when the batch that may
  /// still use it is submitted. Until then only this stream may reuse it.
  void free_buffer(Buffer* buffer);
  /// A buffer freed on this stream whose reserved size suits `bytes`, still
  /// waiting for its batch to be submitted: later work on this stream is
  /// ordered after its earlier uses, so it may be reused at once. nullptr
  /// when there is none.
  Buffer* take_freed(size_t bytes);

 private:
  strata_status open(strata_error* error);
  void reclaim();  // recycles completed batches
  void release_frees(Batch& batch);

  Device& device_;
  std::mutex mutex_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  Batch* current_ = nullptr;
  std::deque<Batch*> in_flight_;
  std::vector<Batch*> spare_;
  uint64_t last_seq_ = 0;
};

/// Pipelines of one device, created on first use and cached, plus the
/// VkPipelineCache persisted across runs.
class Pipelines {
 public:
  explicit Pipelines(Device& device) : device_(device) {}
  ~Pipelines();
  strata_status init(const std::string& cache_file, strata_error* error);
  /// The pipeline of embedded shader `shader` with specialization constant 0
  /// = `op`. `kernel` names the op in error messages.
  strata_status get(std::string_view shader, int32_t op, const char* kernel, VkPipeline* out, strata_error* error);
  VkPipelineLayout layout() const { return layout_; }
  void save();

 private:
  Device& device_;
  std::mutex mutex_;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string cache_file_;
  bool dirty_ = false;
  std::unordered_map<std::string, VkShaderModule> modules_;
  std::unordered_map<std::string, VkPipeline> pipelines_;
};

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

  VkDevice device = VK_NULL_HANDLE;
  VkQueue queue = VK_NULL_HANDLE;
  DeviceApi fn{};
  VkSemaphore timeline = VK_NULL_HANDLE;  // signalled with each submission's seq

  std::unique_ptr<BlockAllocator> memory;   // tensors
  std::unique_ptr<BlockAllocator> staging;  // parameters, uploads/readbacks, pinned host memory, the record
  std::unique_ptr<Pipelines> pipelines;
  std::unique_ptr<Stream> default_stream;
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

struct State {
  const strata_host_api* host = nullptr;
  Options options;
  InstanceApi api;
  VkInstance instance = VK_NULL_HANDLE;
  std::vector<std::unique_ptr<Device>> devices;

  void log(strata_log_level level, const std::string& message) const;
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
