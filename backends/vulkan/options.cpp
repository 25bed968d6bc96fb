// options.cpp — parsing the plugin's options JSON (see options.hpp).
//
// Options (a JSON object; any other key is an error) are documented in
// README.md: loader, block_size_mb, batch_size, pipeline_cache, validation,
// software_devices, unified_copies, threads (accepted, unused).
#include "options.hpp"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <strata/plugin/strata_plugin.hpp>
#include <string>

namespace strata::vulkan {

using plugin::fail;

namespace {

/// The pipeline cache's default directory: $XDG_CACHE_HOME/strata, else ~/.cache/strata (empty: neither is set).
std::string default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/strata";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/strata";
  }
  return {};
}

}  // namespace

std::string default_loader() {
  if (const char* env = std::getenv("STRATA_VULKAN_LOADER"); env != nullptr && *env != '\0') return env;
  return "libvulkan.so.1";
}

strata_status parse_options(const char* json, Options& o, strata_error* error) {
  const nlohmann::json options = nlohmann::json::parse(json != nullptr ? json : "{}");
  if (!options.is_object()) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "vulkan: options must be a JSON object, got %s",
                options.type_name());
  }
  o.loader = default_loader();
  o.pipeline_cache_dir = default_cache_dir();
  auto integer = [&](const std::string& key, const nlohmann::json& v, int64_t lo, int64_t hi, int64_t* out) {
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                  "vulkan: option \"%s\" must be an integer in [%lld, %lld], got %s", key.c_str(),
                  static_cast<long long>(lo), static_cast<long long>(hi), v.dump().c_str());
    }
    *out = v.get<int64_t>();
    return STRATA_OK;
  };
  auto boolean = [&](const std::string& key, const nlohmann::json& v, bool* out) {
    if (!v.is_boolean()) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "vulkan: option \"%s\" must be true or false, got %s",
                  key.c_str(), v.dump().c_str());
    }
    *out = v.get<bool>();
    return STRATA_OK;
  };
  for (const auto& [key, value] : options.items()) {
    strata_status s = STRATA_OK;
    int64_t n = 0;
    if (key == "loader") {
      if (!value.is_string() || value.get<std::string>().empty()) {
        return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                    "vulkan: option \"loader\" must be a non-empty string (the Vulkan loader library), got %s",
                    value.dump().c_str());
      }
      o.loader = value.get<std::string>();
    } else if (key == "block_size_mb") {
      if ((s = integer(key, value, 1, 4096, &n)) == STRATA_OK) o.block_bytes = static_cast<uint64_t>(n) << 20;
    } else if (key == "batch_size") {
      if ((s = integer(key, value, 1, 65536, &n)) == STRATA_OK) o.batch_dispatches = static_cast<uint32_t>(n);
    } else if (key == "pipeline_cache") {
      if (value.is_boolean()) {
        if (!value.get<bool>()) o.pipeline_cache_dir.clear();
      } else if (value.is_string() && !value.get<std::string>().empty()) {
        o.pipeline_cache_dir = value.get<std::string>();
      } else {
        return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                    "vulkan: option \"pipeline_cache\" must be true, false or a directory, got %s",
                    value.dump().c_str());
      }
    } else if (key == "validation") {
      s = boolean(key, value, &o.validation);
    } else if (key == "software_devices") {
      s = boolean(key, value, &o.allow_software);
    } else if (key == "unified_copies") {
      s = boolean(key, value, &o.unified_copies);
    } else if (key == "threads") {
      s = integer(key, value, 0, 1024, &n);  // forwarded by the core; the driver schedules its own threads
    } else if (key == "test_fail_pipeline") {
      const std::string v = value.is_string() ? value.get<std::string>() : std::string();
      const size_t slash = v.find('/');
      if (slash == std::string::npos || slash == 0 || slash + 1 == v.size()) {
        return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                    "vulkan: option \"test_fail_pipeline\" must be \"<shader variant>/<kernel>\", e.g. "
                    "\"unary_f32_f32/exp\", got %s",
                    value.dump().c_str());
      }
      o.fail_pipeline = v;
    } else if (key == "test_no_timestamps") {
      s = boolean(key, value, &o.no_timestamps);
    } else {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                  "vulkan: unknown option \"%s\" (known: loader, block_size_mb, batch_size, pipeline_cache, "
                  "validation, software_devices, unified_copies, threads, test_fail_pipeline, "
                  "test_no_timestamps)",
                  key.c_str());
    }
    if (s != STRATA_OK) return s;
  }
  return STRATA_OK;
}

}  // namespace strata::vulkan
