// plugin.cpp — the entry point and the manifest, probe/init/shutdown with the
// plugin's JSON options, device properties and the kernel table.
//
// Demonstrates (strata_plugin.h sections 1, 3, 7): the C table built by the
// SDK from one class (strata/plugin/backend.hpp: struct-size checks, device
// lookup, exceptions to statuses, deferred errors, all once), a probe that
// touches nothing, options parsed without a JSON library and unknown keys
// refused by name, and a shutdown (the state's destructor) that joins every
// worker thread (plugins are never unloaded, so nothing is left to static
// destructors).
#include "kernel_launch.hpp"
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

}  // namespace

strata_status PluginState::probe(strata_probe_args& a) {
  // Nothing to look for: the device is simulated in host memory. A software
  // device scores 10 (the in-tree convention).
  a.score = 10;
  return STRATA_OK;
}

std::unique_ptr<PluginState> PluginState::init(strata_init_args& a) {
  Options options;
  const std::string problem = OptionsReader(a.options_json != nullptr ? a.options_json : "{}").read(options);
  if (!problem.empty()) throw strata::plugin::Refusal(STRATA_ERROR_INVALID_ARGUMENT, problem);
  auto state = std::make_unique<PluginState>();
  state->host = a.host;
  const size_t arena_bytes = static_cast<size_t>(options.arena_mb) << 20;
  for (int64_t d = 0; d < options.devices; ++d) {
    try {
      state->devices.push_back(std::make_unique<Device>(static_cast<int>(d), arena_bytes));
    } catch (const std::bad_alloc&) {
      throw strata::plugin::Refusal(STRATA_ERROR_NO_DEVICE, "could not map the " + std::to_string(options.arena_mb) +
                                                                " MiB arena of " + device_name(static_cast<int>(d)));
    }
  }
  std::string message = "example: " + std::to_string(options.devices) + " simulated device(s), " +
                        std::to_string(options.arena_mb) + " MiB arena each";
  strata::plugin::log(a.host, STRATA_LOG_DEBUG, kPluginName, message.c_str());
  // The SDK reports device_count() and keeps the state until shutdown
  // deletes it (~PluginState drains and joins the workers).
  return state;
}

strata_device_props PluginState::props(Device& d) const {
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
  return p;  // the SDK copies no more than the host's capacity
}

const strata::plugin::KernelTable& PluginState::kernels(Device&) const { return kernel_table(); }

// Nothing in the environment decides what probe and init do (ABI 2.1,
// strata_plugin.h section 10; a plugin whose driver reads variables lists
// them here, and the host probes it again whenever one changes).
const char* const PluginState::kProbeEnvironment[] = {nullptr};

}  // namespace example

/// The plugin's one exported symbol (strata_plugin.h): the C table that
/// make_api<PluginState>() builds from the class's members.
STRATA_PLUGIN_BACKEND(example::PluginState)
