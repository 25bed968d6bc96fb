// state.hpp — the GPU plugin's state: devices, their streams, events and
// buffers, and the record of deferred kernel failures. Private to the plugin;
// shared by the CUDA build and the HIP build (see gpu_runtime.hpp).
//
// Handles given to the host:
//   strata_buffer  device memory: the device pointer itself; pinned host
//                  memory: the host pointer (cudaHostAlloc'd, portable).
//   strata_stream  a Stream* (NULL: the device's own default stream, a
//                  non-blocking stream created at init — never the legacy
//                  NULL stream, which would serialise against everything).
//   strata_event   an Event*.
#pragma once

#include <strata/plugin/backend.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpu_runtime.hpp"

#ifndef STRATA_GPU_PLUGIN_NAME
#define STRATA_GPU_PLUGIN_NAME "cuda"
#endif

namespace strata::gpu {

inline constexpr const char* kPluginName = STRATA_GPU_PLUGIN_NAME;

/// Where kernels report a data-dependent failure (an index out of range, an
/// integer division by zero) without stopping: pinned, mapped host memory the
/// device writes and the host reads at the next synchronisation point
/// (ABI section 2, STRATA_ERROR_DEFERRED). The first failing thread claims
/// `count` 0 -> 1 and fills the rest; later ones only count.
struct DeviceFailure {
  unsigned int count;  // failures since the last report
  int kind;            // FailureKind
  int op;              // OpTag of the kernel
  int pad;
  long long value;     // the offending index or dividend
  long long bound;     // the valid range is [0, bound)
};

enum FailureKind : int { kIndexOutOfRange = 1, kIntegerDivisionByZero = 2 };

/// Ops that can fail after launch, named in deferred messages.
enum OpTag : int { kTagIndexSelect = 1, kTagGather, kTagScatterAdd, kTagDiv };
const char* op_tag_name(int tag);

struct Device;

struct Stream {
  Device* device = nullptr;
  cudaStream_t native = nullptr;
};

struct Event {
  Device* device = nullptr;
  cudaEvent_t native = nullptr;
  bool timing = false;
  std::atomic<bool> recorded{false};
};

struct Device {
  int index = 0;            // the plugin's device index
  int ordinal = 0;          // the runtime's device ordinal
  std::string id;           // "cuda:0", for messages
  strata_device_props props{};
  int multiprocessors = 1;
  bool mempools = false;    // cudaMallocAsync works on this device
  Stream default_stream;    // what a NULL strata_stream means
  DeviceFailure* failure = nullptr;       // host view (pinned, mapped)
  DeviceFailure* failure_device = nullptr;  // the same memory, device view
  std::mutex failure_mutex;  // serialises reading and clearing it

  // Plugin-side counters for memory_stats (the host's caching allocator keeps
  // its own; these are what the driver holds for us).
  std::mutex memory_mutex;
  std::unordered_map<void*, size_t> live;  // buffer -> bytes
  uint64_t bytes_in_use = 0;
  uint64_t peak_bytes_in_use = 0;
  uint64_t allocations = 0;

  void* blas = nullptr;      // cublasHandle_t, created on first matmul (blas.cpp)
  std::mutex blas_mutex;     // one handle, many streams: setStream + gemm under it
};

/// The plugin: its state (the devices), and the backend class
/// make_api<State>() turns into the C table (strata/plugin/backend.hpp: the
/// SDK checks struct sizes and device indices, turns exceptions into statuses
/// and asks deferred() at the synchronisation points). Members by file:
/// plugin.cpp, memory.cpp, streams.cpp.
struct State : plugin::DeviceList<Device> {
  static constexpr const char* kName = kPluginName;
  static constexpr const char* kVendor = "Strata project";
  static constexpr const char* kVersion = "0.1.0";
  static const char* const kProbeEnvironment[];
  static const strata_extension* extensions();
  using Device = gpu::Device;

  const strata_host_api* host = nullptr;

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  /// Releases every device (plugin.cpp).
  ~State();

  STRATA_BACKEND_MEMBERS(State, Device);
  const strata_device_props& props(Device& d) const { return d.props; }
  STRATA_BACKEND_MEMORY_MEMBERS(Device);
  STRATA_BACKEND_STREAM_MEMBERS(Device);
  /// At a synchronisation point of `d`: DEFERRED naming the op of the first
  /// kernel failure since the last report (clearing it), else OK (plugin.cpp).
  strata_status deferred(Device& d, strata_error* error);
  strata_status buffer_pointer(Device& d, strata_native_args& a);
  strata_status stream_handle(Device& d, strata_native_args& a);

  void log(strata_log_level level, const std::string& message) const {
    if (host != nullptr && STRATA_HAS_FIELD(host, strata_host_api, log) && host->log != nullptr) {
      host->log(level, kPluginName, message.c_str());
    }
  }
};

inline State* as_state(strata_plugin_state s) { return reinterpret_cast<State*>(s); }

/// The device a call names, or nullptr with the error set.
Device* device_of(strata_plugin_state state, int32_t device, strata_error* error);

/// Makes `d` the calling thread's current device (cheap when it already is).
cudaError_t make_current(const Device& d);

/// The native stream of a strata_stream on `d` (NULL: its default stream).
inline cudaStream_t native_stream(Device& d, strata_stream s) {
  return s == nullptr ? d.default_stream.native : reinterpret_cast<Stream*>(s)->native;
}

/// "cudaErrorMemoryAllocation (out of memory)".
std::string describe(cudaError_t e);

/// A failed runtime call as a status: sticky errors (the context is gone)
/// are DEVICE_LOST, out of memory OUT_OF_MEMORY, the rest DEVICE.
strata_status runtime_failure(cudaError_t e, const Device* d, const char* what, strata_error* error);


/// The device's memory counters, updated by alloc/free (memory.cpp).
void count_alloc(Device& d, void* p, size_t bytes);
void count_free(Device& d, void* p);

}  // namespace strata::gpu
