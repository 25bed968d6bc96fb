// runtime.hpp — the device manager.
//
// The runtime finds plugins, loads them (lazily, on first use), records the
// outcome for every file it saw, and picks the default device. It is a
// process-wide singleton, safe to use from many threads. Plugins are never
// unloaded while the process runs.
#pragma once

#include <strata/config.hpp>
#include <strata/device.hpp>
#include <strata/dtype.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace strata {

class Tensor;

enum class DeviceType { cpu, gpu, igpu, accelerator };
std::string_view device_type_name(DeviceType t);

/// One kernel a device's plugin registered (and the core accepted).
struct KernelInfo {
  std::string op;         // "strata::add", "acme::swiglu"
  std::string signature;  // "f32,f32->f32"
  bool strided_inputs = false;  // STRATA_KERNEL_STRIDED_INPUTS
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

/// Memory as the plugin reports it (fields the plugin does not report stay
/// unset).
struct DeviceMemoryInfo {
  std::optional<uint64_t> free_bytes;
  std::optional<uint64_t> total_bytes;
  std::optional<uint64_t> plugin_bytes_in_use;
  std::optional<uint64_t> plugin_bytes_reserved;
  std::optional<uint64_t> plugin_peak_bytes_in_use;
  std::optional<uint64_t> plugin_allocations;
  /// Pinned host memory the core holds for staging host-to-device copies
  /// (devices with STRATA_DEVICE_STAGE_PINNED; 0 elsewhere), and the copies
  /// staged so far.
  uint64_t staging_bytes = 0;
  uint64_t staged_copies = 0;
};

/// What happened to one plugin file (or search path).
struct PluginInfo {
  std::string name;  // from the table when loaded, else from the file name
  std::string path;
  bool loaded = false;
  std::string reason;  // why it was refused
  std::string vendor;
  std::string version;
  std::string abi;  // the plugin's ABI version, "2.0"
  int score = 0;
  /// Whether its init succeeded (its shutdown then runs: at exit, or at once
  /// when the core refuses the plugin afterwards). Superseded builds are
  /// never initialised.
  bool initialized = false;
  /// Parts of the plugin refused while the rest was kept, with the reason
  /// (a malformed kernel entry, an op registered under another namespace).
  std::vector<std::string> warnings;
  /// Ops the plugin defined through the host services ("acme::swiglu").
  std::vector<std::string> ops;
  /// Extensions on its table that the core knows, "strata.native_handles v1".
  std::vector<std::string> extensions;
  std::vector<DeviceInfo> devices;
  /// How the plugin was checked before it entered this process:
  /// "child process, 41 ms", "cached child probe", or "in this process
  /// (plugins.isolate is false)" (docs/configuration.md, "Plugin isolation").
  std::string probed;
  /// The file's SHA-256 when the configuration pins the plugin
  /// ("plugins.pins"), else empty.
  std::string sha256;
};

/// Allocator statistics of one device.
struct MemoryStats {
  uint64_t allocated_bytes = 0;  // held by live tensors
  uint64_t cached_bytes = 0;     // freed, kept for reuse
  uint64_t peak_allocated_bytes = 0;
  uint64_t device_allocations = 0;  // calls into the plugin's alloc
  std::optional<uint64_t> limit_bytes;
};

/// One op of the registry, as `strata ops` lists it.
struct OpInfo {
  std::string name;          // the kernel name: "strata::add", "acme::swiglu"
  std::string kind;          // "primitive", "composite", "view", "join", "transfer"
  int n_inputs = 0;          // -1: any number
  int n_outputs = 0;
  uint32_t version = 1;      // contract version kernels declare
  bool differentiable = false;  // has a reverse-mode rule
  bool forward_mode = false;    // has a forward-mode rule
  std::string plugin;        // the plugin that defined it ("" for the core's)
  std::string doc;           // the plugin's one-line description
};

/// One (device, op) pair that ran on the CPU because the device had no
/// kernel for it.
struct FallbackRecord {
  std::string device;
  std::string op;
  std::string signature;
  uint64_t count = 0;
};

class Runtime {
 public:
  /// Loads a configuration file and applies it. On error throws ConfigError
  /// and keeps the previous configuration.
  void load_config(const std::string& path);
  /// Applies a parsed configuration.
  void configure(const Config& config);
  /// The active configuration (loading the default one if none yet).
  Config config();

  /// The device the configuration selects.
  Device default_device();
  /// Overrides the default device for this process.
  void set_default_device(Device device);
  std::vector<DeviceInfo> devices();
  std::vector<PluginInfo> plugins();
  DeviceInfo device_info(Device device);

  MemoryStats memory_stats(Device device);
  /// Free/total memory and the plugin's own counters, from the plugin.
  DeviceMemoryInfo device_memory_info(Device device);
  /// Asks the plugin to return cached memory to the driver (after the
  /// core's own cache and its idle pinned staging blocks were returned).
  void trim_memory(Device device);
  /// Starts a new peak measurement: the peak becomes the bytes live now.
  void reset_peak_memory(Device device);
  /// Returns cached blocks of every device to the plugins.
  void empty_cache();

  /// Every op: the core's and those loaded plugins defined.
  std::vector<OpInfo> ops();

  std::vector<FallbackRecord> fallback_stats();
  uint64_t fallback_count();
  void reset_fallback_stats();

  /// Waits until all work queued on the device has finished.
  void synchronize(Device device);

  struct Impl;
  Impl& impl();

 private:
  friend Runtime& runtime();
  Runtime();
  std::unique_ptr<Impl> impl_;
};

/// The process-wide runtime.
Runtime& runtime();

/// A problem check_config found with a configuration on this machine.
struct ConfigIssue {
  enum class Severity { warning, error };
  Severity severity = Severity::error;
  /// "<file>: <JSON pointer>: <problem>", or "STRATA_PLUGIN_PATH: <problem>"
  /// for that variable's entries.
  std::string message;
};

/// Checks a parsed configuration against this machine without loading or
/// opening any plugin (`strata config check`): the op names of "fallback.ops"
/// and the "amp" lists were checked by the parser already; this adds what
/// needs the file system. Errors: a plugin search path that cannot be read
/// (a symbolic link loop, a name too long, no permission), a log file that
/// cannot be opened for appending. Warnings: a search path that does not
/// exist (in the configuration or STRATA_PLUGIN_PATH), a plugin file the
/// loader would refuse unopened (a FIFO, a directory, an empty file).
std::vector<ConfigIssue> check_config(const Config& config);

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

/// How DeviceCommunicator::all_reduce combines the ranks' values
/// (strata_reduce_op). `average` is the sum divided by the world size.
enum class CollectiveOp { sum, product, min, max, average };

/// A communicator over one device per rank through the device's plugin's
/// strata.collectives extension (NCCL in the CUDA plugin; the "commhost"
/// test plugin over POSIX shared memory). Every rank of the group builds one
/// with the same unique id and calls the same collectives in the same order
/// with tensors of the same dtype and shape.
///
/// Tensors must be on the communicator's device and contiguous. Calls are
/// ordered on the device's default stream after the work queued before
/// them and hold the device's issue lock (as kernels do); the memory is
/// final once runtime().synchronize(device) returns (or in stream order for
/// later work on the device). Collectives write device memory directly:
/// autograd's version counters are not bumped (use them on gradients and
/// buffers you own). Errors: DeviceError naming the device, the call and
/// the plugin's message (DeviceLostError when the plugin reports the device
/// lost). The object is not thread-safe; one communicator per device and
/// group.
class DeviceCommunicator {
 public:
  /// Whether `device`'s plugin offers strata.collectives v1.
  static bool available(Device device);
  /// A new unique id (comm_unique_id). Rank 0 makes it and sends it to every
  /// rank (a store); DeviceError "<id>'s plugin \"x\" offers no
  /// strata.collectives extension" when the plugin has none.
  static std::vector<uint8_t> unique_id(Device device);
  /// Joins the communicator of `world_size` ranks named by `unique_id` as
  /// `rank` (comm_create; blocks until the plugin says so, typically until
  /// every rank joined).
  DeviceCommunicator(Device device, std::span<const uint8_t> unique_id, int rank, int world_size);
  /// comm_destroy.
  ~DeviceCommunicator();
  DeviceCommunicator(const DeviceCommunicator&) = delete;
  DeviceCommunicator& operator=(const DeviceCommunicator&) = delete;

  /// In place: every rank's `t` becomes the reduction over all ranks.
  void all_reduce(Tensor& t, CollectiveOp op);
  /// In place: every rank's `t` becomes rank `root`'s.
  void broadcast(Tensor& t, int root);
  /// `out` (shape [world_size, *in.shape], in's dtype) gets every rank's
  /// `in`, row r from rank r.
  void all_gather(Tensor& out, const Tensor& in);

  Device device() const;
  int rank() const;
  int world_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A byte count as Strata's messages and tools write it: "512 B", "1.5 MiB".
std::string format_bytes(uint64_t bytes);

/// Time between two marks in a device's stream of work, as the device
/// measures it (the plugin's timing events: CUDA's cudaEventElapsedTime)
/// where it can, else by the host clock around synchronisations (then
/// start() and stop() wait for the device). Marks are queued like work: on
/// a measuring device start() and stop() return at once, and elapsed_ms()
/// waits until the device has reached stop's mark.
///
///   DeviceTimer timer(dev);
///   timer.start();
///   Tensor y = matmul(a, b);
///   timer.stop();
///   double ms = timer.elapsed_ms();
class DeviceTimer {
 public:
  explicit DeviceTimer(Device device);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  void start();
  void stop();
  /// Milliseconds from start() to stop(); Error when either is missing.
  double elapsed_ms();
  /// Whether the device measures (false: the host clock does).
  bool device_measured() const { return measured_; }

 private:
  Device device_;
  bool measured_ = false;
  void* start_event_ = nullptr;
  void* stop_event_ = nullptr;
  bool started_ = false, stopped_ = false;
  double start_host_ms_ = 0, stop_host_ms_ = 0;
};

/// Scoped memory measurement on one device: the bytes allocated and the
/// peak reached since the scope began, relative to the bytes live at its
/// start. Scopes nest: the enclosing scope's (and the runtime's) peak still
/// accounts for what happened inside.
class MemoryScope {
 public:
  explicit MemoryScope(Device device);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

  /// Highest allocated bytes since the start, minus the bytes at the start.
  uint64_t peak_bytes() const;
  /// Allocated bytes now minus at the start (negative when memory was freed).
  int64_t current_bytes() const;
  Device device() const { return device_; }

 private:
  Device device_;
  uint64_t start_;
  uint64_t outer_peak_;
};

/// Library version ("0.1.0") and plugin ABI version ("2.0").
std::string version();
std::string abi_version();

}  // namespace strata
