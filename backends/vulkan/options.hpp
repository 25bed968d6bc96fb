// options.hpp — the plugin's options (README.md documents them) and their parsing.
#pragma once

#include <strata/plugin/strata_plugin.h>

#include <cstdint>
#include <string>

namespace strata::vulkan {

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
  // Test hook ("test_no_timestamps"): every device is treated as if its
  // queue family had no timestamps (timestampValidBits 0).
  bool no_timestamps = false;
};

/// The loader probe and init open: $STRATA_VULKAN_LOADER, else the soname.
std::string default_loader();

/// Fills `o` from the options JSON (null: "{}"); any other key than the known
/// ones is INVALID_ARGUMENT. Throws nlohmann::json::exception on malformed JSON.
strata_status parse_options(const char* json, Options& o, strata_error* error);

}  // namespace strata::vulkan
