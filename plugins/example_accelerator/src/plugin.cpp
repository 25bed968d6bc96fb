// plugin.cpp — the entry point and the manifest, probe/init/shutdown with the
// plugin's JSON options, device properties and the kernel table.
//
// Demonstrates (strata_plugin.h sections 1, 3, 7): a static table returned to
// every host (the host compares majors), a probe that touches nothing, options
// parsed without a JSON library and unknown keys refused by name, struct-size
// checks on everything the host passes, device props published no further
// than the host's capacity, and a shutdown that joins every worker thread
// (plugins are never unloaded, so nothing is left to static destructors).
#include "entry_points.hpp"
#include "runtime.hpp"

#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>

namespace example {
namespace {

using strata::plugin::fail;

constexpr int64_t kDefaultArenaMb = 256;
constexpr int64_t kMaxArenaMb = 65536;
constexpr int64_t kMaxDevices = 8;

struct Options {
  int64_t arena_mb = kDefaultArenaMb;
  int64_t devices = 1;
};

/// A small reader for the options object: {"key": value, ...}. Known keys take
/// whole numbers; "threads" (which the host adds from the device config) is
/// accepted and unused — each stream runs on its own single worker. Any other
/// key is an error naming it.
class OptionsReader {
 public:
  explicit OptionsReader(std::string_view text) : s_(text) {}

  /// Empty when the options are fine, else what is wrong.
  std::string read(Options& out) {
    skip_space();
    if (!eat('{')) return "options must be a JSON object";
    skip_space();
    if (eat('}')) return end();
    for (;;) {
      std::string key;
      if (!string(key)) return "expected a quoted key in the options";
      skip_space();
      if (!eat(':')) return "expected ':' after \"" + key + "\"";
      skip_space();
      if (key == "arena_mb" || key == "devices" || key == "threads") {
        int64_t value = 0;
        if (!integer(value)) return "option \"" + key + "\" must be a whole number";
        if (key == "arena_mb") {
          if (value < 1 || value > kMaxArenaMb) {
            return "option \"arena_mb\" must be in [1, " + std::to_string(kMaxArenaMb) + "], got " + std::to_string(value);
          }
          out.arena_mb = value;
        } else if (key == "devices") {
          if (value < 1 || value > kMaxDevices) {
            return "option \"devices\" must be in [1, " + std::to_string(kMaxDevices) + "], got " + std::to_string(value);
          }
          out.devices = value;
        }
      } else {
        return "unknown option \"" + key + "\" (known: arena_mb, devices, threads)";
      }
      skip_space();
      if (eat('}')) return end();
      if (!eat(',')) return "expected ',' or '}' after the value of \"" + key + "\"";
      skip_space();
    }
  }

 private:
  std::string end() {
    skip_space();
    return pos_ == s_.size() ? std::string() : std::string("trailing characters after the options object");
  }
  void skip_space() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool string(std::string& out) {
    if (!eat('"')) return false;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      if (s_[pos_] == '\\' && pos_ + 1 < s_.size()) ++pos_;  // keys are ASCII names; escapes kept verbatim
      out += s_[pos_++];
    }
    return eat('"');
  }
  bool integer(int64_t& out) {
    const size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    std::string digits(s_.substr(start, pos_ - start));
    if (eat('.')) {  // 256.0 is a whole number in JSON terms
      while (pos_ < s_.size() && s_[pos_] == '0') ++pos_;
      if (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) return false;
    }
    if (digits.empty() || digits == "-" || digits.size() > 12) return false;
    out = std::strtoll(digits.c_str(), nullptr, 10);
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

strata_status probe(strata_probe_args* a) noexcept {
  if (!strata::plugin::large_enough(a, STRATA_PROBE_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  // Nothing to look for: the device is simulated in host memory. A software
  // device scores 10 (the in-tree convention).
  a->score = 10;
  return STRATA_OK;
}

strata_status init(strata_init_args* a) noexcept {
  return strata::plugin::entry_point(a, "example: init", [&]() -> strata_status {
    Options options;
    const std::string problem = OptionsReader(a->options_json != nullptr ? a->options_json : "{}").read(options);
    if (!problem.empty()) return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "example: init: %s", problem.c_str());
    auto state = std::make_unique<PluginState>();
    state->host = a->host;
    const size_t arena_bytes = static_cast<size_t>(options.arena_mb) << 20;
    for (int64_t d = 0; d < options.devices; ++d) {
      try {
        state->devices.push_back(std::make_unique<Device>(static_cast<int>(d), arena_bytes));
      } catch (const std::bad_alloc&) {
        return fail(a->error, STRATA_ERROR_NO_DEVICE, "example: init: could not map the %lld MiB arena of %s",
                    static_cast<long long>(options.arena_mb), device_name(static_cast<int>(d)).c_str());
      }
    }
    std::string message = "example: " + std::to_string(options.devices) + " simulated device(s), " +
                          std::to_string(options.arena_mb) + " MiB arena each";
    strata::plugin::log(a->host, STRATA_LOG_DEBUG, kPluginName, message.c_str());
    a->device_count = static_cast<int32_t>(options.devices);
    a->state = reinterpret_cast<strata_plugin_state>(state.release());
    return STRATA_OK;
  });
}

void shutdown(strata_plugin_state s) noexcept {
  PluginState* state = as_state(s);
  if (state == nullptr) return;
  try {
    // ~PluginState drains and joins the created streams, then the default
    // streams; the devices then unmap their arenas.
    delete state;
  } catch (...) {
    // Joining threads cannot fail here in practice; never let it cross the ABI.
  }
}

strata_status device_props(strata_device_args* a) noexcept {
  return on_device(a, "example: device_props", [&](PluginState&, Device& d) -> strata_status {
    strata_device_props p{};
    p.struct_size = sizeof(p);
    std::snprintf(p.name, sizeof(p.name), "Example Accelerator (simulated)");
    p.type = STRATA_DEVICE_ACCELERATOR;
    // Streams and events are real (worker threads); large host copies are
    // staged through pinned blocks and completed asynchronously by a worker.
    p.flags = STRATA_DEVICE_HAS_STREAMS | STRATA_DEVICE_STAGE_PINNED;
    p.memory_bytes = d.arena.size();
    p.dtype_mask = STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_F64) | STRATA_DTYPE_BIT(STRATA_I32) |
                   STRATA_DTYPE_BIT(STRATA_I64) | STRATA_DTYPE_BIT(STRATA_BOOL);
    p.compute_dtype_mask = p.dtype_mask;
    std::snprintf(p.compute_capability, sizeof(p.compute_capability), "simulated-1");
    // No uuid / PCI id: the device is not a piece of hardware.
    return strata::plugin::publish_props(a, p);
  });
}

strata_status get_kernels(strata_device_args* a) noexcept {
  return on_device(a, "example: get_kernels", [&](PluginState&, Device&) { return kernel_table().publish(a); });
}

// Nothing in the environment decides what probe and init do (ABI 2.1,
// strata_plugin.h section 10; a plugin whose driver reads variables lists
// them here, and the host probes it again whenever one changes).
const char* const kProbeEnvironment[] = {nullptr};

const strata_plugin_api kApi = [] {
  strata_plugin_api api{};
  api.struct_size = sizeof(api);
  api.abi_major = STRATA_ABI_MAJOR;
  api.abi_minor = STRATA_ABI_MINOR;
  api.min_host_minor = 0;
  api.name = kPluginName;
  api.vendor = "Strata project (example)";
  api.version = "0.1.0";
  api.probe = probe;
  api.init = init;
  api.shutdown = shutdown;
  api.device_props = device_props;
  api.get_kernels = get_kernels;
  api.alloc = alloc;
  api.free = free;
  api.copy = copy;
  api.memory_info = memory_info;
  api.memory_trim = memory_trim;
  api.memory_stats = memory_stats;
  api.stream_create = stream_create;
  api.stream_destroy = stream_destroy;
  api.stream_synchronize = stream_synchronize;
  api.event_create = event_create;
  api.event_destroy = event_destroy;
  api.event_record = event_record;
  api.stream_wait_event = stream_wait_event;
  api.event_synchronize = event_synchronize;
  api.event_query = event_query;
  api.event_elapsed = event_elapsed;
  api.extensions = nullptr;
  api.probe_environment = kProbeEnvironment;
  return api;
}();

}  // namespace
}  // namespace example

/// The plugin's one exported symbol (strata_plugin.h).
STRATA_PLUGIN_DEFINE_ENTRY(&example::kApi)
