// runtime_impl.hpp — the device manager's state (Runtime::Impl), shared by
// the files of the runtime layer's top: device_manager.cpp (loading plugins,
// opening devices, choosing the default) and runtime.cpp (the Runtime API
// and the device table the layers below read, device_table.hpp).
#pragma once

#include "runtime/device/device_record.hpp"
#include "runtime/plugins/plugin_loader.hpp"

#include <strata/config.hpp>
#include <strata/runtime.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace strata {

inline constexpr size_t kMaxDevices = 256;

struct Runtime::Impl {
  std::recursive_mutex mutex;
  std::atomic<bool> initialized{false};
  Config config;
  std::vector<PluginInfo> outcomes;
  std::vector<std::unique_ptr<detail::LoadedPlugin>> plugins;
  std::vector<std::unique_ptr<detail::DeviceRecord>> records;
  std::array<std::atomic<detail::DeviceRecord*>, kMaxDevices> table{};
  std::atomic<int32_t> device_count{0};
  std::set<std::string> seen_paths;
  int32_t selected_slot = -1;
  int32_t override_slot = -1;
  /// The local rank (Runtime::set_local_rank); -1: none. `local_rank_set`:
  /// given by the program, so STRATA_LOCAL_RANK no longer applies.
  int local_rank = -1;
  bool local_rank_set = false;
  /// Policy per op id; fixed size so readers on the dispatch path need no lock.
  std::array<std::atomic<uint8_t>, 1024> fallback_by_op{};

  std::mutex fallback_mutex;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> fallback_counts;
  /// (device, op, signature) -> (latest reason, count), under fallback_mutex.
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<std::string, uint64_t>> declined;

  void ensure_initialized();
  void apply(const Config& config);
  void load_plugins(const Config& config);
  void add_devices(detail::LoadedPlugin& plugin, PluginInfo& info);
  void select_default();
  DeviceInfo info_of(const detail::DeviceRecord& record);
};

/// The entries of STRATA_PLUGIN_PATH (colon-separated), in order.
std::vector<std::string> env_plugin_paths();

}  // namespace strata
