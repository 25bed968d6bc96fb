// runtime.hpp — the device manager.
//
// The runtime finds plugins, loads them (lazily, on first use), records the
// outcome for every file it saw, and picks the default device. It is a
// process-wide singleton, safe to use from many threads. Plugins are never
// unloaded while the process runs. This header brings in everything the
// runtime reports and offers: device_info.hpp, memory.hpp, plugin_info.hpp,
// timer.hpp, native_view.hpp, communicator.hpp and version.hpp, each usable
// on its own.
#pragma once

#include <strata/communicator.hpp>
#include <strata/config.hpp>
#include <strata/device.hpp>
#include <strata/device_info.hpp>
#include <strata/dtype.hpp>
#include <strata/memory.hpp>
#include <strata/native_view.hpp>
#include <strata/plugin_info.hpp>
#include <strata/timer.hpp>
#include <strata/version.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata {

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
  /// This process's index among the ranks of its host (a data-parallel
  /// job's local rank): when the selected default is an accelerator whose
  /// plugin has several devices, the default becomes that plugin's device
  /// `local_rank` (modulo their count, with a warning: ranks then share a
  /// device), so that each rank of a node gets its own GPU. CPU-class
  /// devices are unaffected; -1 forgets it. STRATA_LOCAL_RANK, which
  /// `strata launch` sets, gives it at start; init_process_group passes the
  /// launcher's (SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, LOCAL_RANK), so
  /// tensors made before it stay where the default was. A device chosen
  /// with set_default_device stays chosen.
  void set_local_rank(int local_rank);
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

  /// Starts recording every op call (all threads) by device, op and
  /// signature, with how the device serves it; stop_op_census() returns the
  /// record in order of first use and ends it (`strata trace ops` uses it).
  /// Off, it costs each op call one flag test.
  void start_op_census();
  std::vector<OpUse> stop_op_census();

  std::vector<FallbackRecord> fallback_stats();
  uint64_t fallback_count();
  /// Also forgets the declined kernels.
  void reset_fallback_stats();
  /// Kernels that declined calls the core then decomposed on their device
  /// (a fused program a plugin does not run, a layout it leaves to the
  /// primitives), with the kernel's reason; logged once each.
  std::vector<DeclinedKernelRecord> declined_kernels();
  /// Attributes kernels looked for that their ops do not declare, since the
  /// process started (`strata plugin check` fails such a kernel).
  std::vector<AttrMisread> attr_misreads();

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

}  // namespace strata
