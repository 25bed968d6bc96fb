// plugin.cpp — the Vulkan plugin's entry symbol and table: init (options,
// loader, instance, devices), device properties, memory and copies, streams
// and events.
//
// Options (a JSON object; any other key is an error) are documented in
// README.md: loader, block_size_mb, batch_size, pipeline_cache, validation,
// software_devices, unified_copies, threads (accepted, unused).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <strata/plugin/strata_plugin.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "device.hpp"
#include "kernels.hpp"

namespace strata::vulkan {
namespace {

using plugin::fail;

constexpr uint32_t kMinApi = VK_MAKE_API_VERSION(0, 1, 2, 0);

/// An event: the timeline value of the submission that recorded it.
struct Event {
  Device* device = nullptr;
  uint64_t seq = 0;
};

std::string default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/strata";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/strata";
  }
  return {};
}

strata_status parse_options(const char* json, Options& o, strata_error* error) {
  const nlohmann::json options = nlohmann::json::parse(json != nullptr ? json : "{}");
  if (!options.is_object()) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "vulkan: options must be a JSON object, got %s",
                options.type_name());
  }
  if (const char* env = std::getenv("STRATA_VULKAN_LOADER"); env != nullptr && *env != '\0') o.loader = env;
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
    } else {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                  "vulkan: unknown option \"%s\" (known: loader, block_size_mb, batch_size, pipeline_cache, "
                  "validation, software_devices, unified_copies, threads, test_fail_pipeline)",
                  key.c_str());
    }
    if (s != STRATA_OK) return s;
  }
  return STRATA_OK;
}

bool has_layer(const InstanceApi& api, const char* name) {
  if (api.vkEnumerateInstanceLayerProperties == nullptr) return false;
  uint32_t n = 0;
  if (api.vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> layers(n);
  if (api.vkEnumerateInstanceLayerProperties(&n, layers.data()) != VK_SUCCESS) return false;
  return std::any_of(layers.begin(), layers.end(),
                     [&](const VkLayerProperties& l) { return std::strcmp(l.layerName, name) == 0; });
}

strata_status create_instance(State& st, strata_error* error) {
  uint32_t loader_version = VK_MAKE_API_VERSION(0, 1, 0, 0);
  if (st.api.vkEnumerateInstanceVersion != nullptr) st.api.vkEnumerateInstanceVersion(&loader_version);
  if (loader_version < kMinApi) {
    return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: the loader supports Vulkan %u.%u; 1.2 is required",
                VK_API_VERSION_MAJOR(loader_version), VK_API_VERSION_MINOR(loader_version));
  }
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "strata";
  app.pEngineName = "strata";
  app.apiVersion = std::min<uint32_t>(loader_version, VK_MAKE_API_VERSION(0, 1, 3, 0));
  VkInstanceCreateInfo ici{};
  ici.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  ici.pApplicationInfo = &app;
  const char* validation = "VK_LAYER_KHRONOS_validation";
  if (st.options.validation) {
    if (has_layer(st.api, validation)) {
      ici.enabledLayerCount = 1;
      ici.ppEnabledLayerNames = &validation;
    } else {
      st.log(STRATA_LOG_WARN, "option \"validation\": VK_LAYER_KHRONOS_validation is not installed; running without");
    }
  }
  const VkResult r = st.api.vkCreateInstance(&ici, nullptr, &st.instance);
  if (r != VK_SUCCESS) {
    st.instance = VK_NULL_HANDLE;
    return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: vkCreateInstance failed: %s%s", result_name(r),
                r == VK_ERROR_INCOMPATIBLE_DRIVER ? " (no Vulkan driver is installed)" : "");
  }
  std::string why;
  if (!load_instance_functions(st.instance, st.api, &why))
    return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: %s", why.c_str());
  return STRATA_OK;
}

/// Index of the first memory type with all of `required` (preferring ones
/// that also have `preferred` and none of `avoided`), or -1.
int find_memory_type(const VkPhysicalDeviceMemoryProperties& mp, VkMemoryPropertyFlags required,
                     VkMemoryPropertyFlags preferred, VkMemoryPropertyFlags avoided) {
  int best = -1;
  int best_rank = -1;
  for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
    if ((f & required) != required) continue;
    const int rank = ((f & preferred) == preferred ? 2 : 0) + ((f & avoided) == 0 ? 1 : 0);
    if (rank > best_rank) {
      best = static_cast<int>(i);
      best_rank = rank;
    }
  }
  return best;
}

/// Fills `d` from its physical device; returns an empty string, or why it is unusable.
std::string describe_device(State& st, Device& d) {
  const InstanceApi& api = st.api;
  api.vkGetPhysicalDeviceProperties(d.physical, &d.properties);
  const VkPhysicalDeviceProperties& p = d.properties;
  const std::string name = p.deviceName;
  if (p.apiVersion < kMinApi) {
    return name + ": supports Vulkan " + std::to_string(VK_API_VERSION_MAJOR(p.apiVersion)) + "." +
           std::to_string(VK_API_VERSION_MINOR(p.apiVersion)) + ", 1.2 is required";
  }
  if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && !st.options.allow_software) {
    return name + ": a software device, hidden by option \"software_devices\": false";
  }
  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  VkPhysicalDeviceVulkan11Features f11{};
  f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  f11.pNext = &f12;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &f11;
  api.vkGetPhysicalDeviceFeatures2(d.physical, &features);
  // The shaders' fixed work-group sizes (256 invocations, 256 along x, 16 x 16
  // for matmul) exceed Vulkan's guaranteed minimum of 128.
  const auto& limits = p.limits;
  if (limits.maxComputeWorkGroupInvocations < 256 || limits.maxComputeWorkGroupSize[0] < 256 ||
      limits.maxComputeWorkGroupSize[1] < 16) {
    return name + ": compute work groups are limited to " + std::to_string(limits.maxComputeWorkGroupInvocations) +
           " invocations (" + std::to_string(limits.maxComputeWorkGroupSize[0]) + " x " +
           std::to_string(limits.maxComputeWorkGroupSize[1]) + "); the kernels need 256 (256 x 16)";
  }
  if (!f12.bufferDeviceAddress) return name + ": lacks bufferDeviceAddress (required)";
  if (!f12.timelineSemaphore) return name + ": lacks timelineSemaphore (required)";
  d.has_int64 = features.features.shaderInt64 != 0;
  d.has_storage8 = f12.storageBuffer8BitAccess != 0;
  d.has_storage16 = f11.storageBuffer16BitAccess != 0;
  d.has_float16 = f12.shaderFloat16 != 0;

  uint32_t nq = 0;
  api.vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> families(nq);
  api.vkGetPhysicalDeviceQueueFamilyProperties(d.physical, &nq, families.data());
  int family = -1;
  for (uint32_t i = 0; i < nq; ++i) {
    if ((families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0 && families[i].queueCount > 0) {
      family = static_cast<int>(i);
      break;
    }
  }
  if (family < 0) return name + ": has no compute queue";
  d.queue_family = static_cast<uint32_t>(family);

  api.vkGetPhysicalDeviceMemoryProperties(d.physical, &d.memory_properties);
  const auto& mp = d.memory_properties;
  constexpr VkMemoryPropertyFlags kHost = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const bool discrete = p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
  // Unified memory (CPU devices, integrated GPUs): tensors live in
  // host-visible device-local memory and copies are plain memcpy.
  const int unified =
      discrete || !st.options.unified_copies
          ? -1
          : find_memory_type(mp, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | kHost, VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0);
  if (unified >= 0) {
    d.direct = true;
    d.memory_type = static_cast<uint32_t>(unified);
    d.staging_type = d.memory_type;
  } else {
    const int local = find_memory_type(mp, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
    const int host = find_memory_type(mp, kHost, VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0);
    if (host < 0) return name + ": has no host-visible coherent memory type";
    d.memory_type = static_cast<uint32_t>(local >= 0 ? local : host);
    d.staging_type = static_cast<uint32_t>(host);
    d.direct = local < 0;
  }

  strata_device_props& props = d.props;
  props.struct_size = sizeof(props);
  std::snprintf(props.name, sizeof(props.name), "%.127s", p.deviceName);
  switch (p.deviceType) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      props.type = STRATA_DEVICE_GPU;
      d.score = 200;
      break;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      props.type = STRATA_DEVICE_IGPU;
      d.score = 100;
      break;
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      props.type = STRATA_DEVICE_CPU;  // lavapipe/llvmpipe: must never beat a real device
      d.score = 10;
      break;
    default:
      props.type = STRATA_DEVICE_ACCELERATOR;
      d.score = 50;
      break;
  }
  props.memory_bytes = mp.memoryHeaps[mp.memoryTypes[d.memory_type].heapIndex].size;
  uint32_t mask = STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_I32);
  if (d.has_int64) mask |= STRATA_DTYPE_BIT(STRATA_I64);
  if (d.has_storage8) mask |= STRATA_DTYPE_BIT(STRATA_BOOL);
  props.compute_dtype_mask = mask;
  if (d.has_storage16) mask |= STRATA_DTYPE_BIT(STRATA_F16);  // stored natively, computed in f32
  if (d.has_storage16 && d.has_float16) props.compute_dtype_mask |= STRATA_DTYPE_BIT(STRATA_F16);
  props.dtype_mask = mask;
  std::snprintf(props.compute_capability, sizeof(props.compute_capability), "vulkan %u.%u",
                VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion));
  props.has_streams = 1;
  props.unified_memory = d.direct ? 1 : 0;
  return {};
}

void destroy_state(State* st) {
  if (st == nullptr) return;
  for (auto& d : st->devices) close_device(*d);
  st->devices.clear();
  if (st->instance != VK_NULL_HANDLE && st->api.vkDestroyInstance != nullptr) {
    st->api.vkDestroyInstance(st->instance, nullptr);
  }
  delete st;  // the loader library stays mapped: plugins are never unloaded
}

// ---- The table's functions ---------------------------------------------------

strata_status init(const strata_host_api* host, const char* options_json, strata_plugin_state* out_state,
                   strata_error* error) noexcept {
  State* st = nullptr;
  try {
    st = new State;
    st->host = host;
    if (strata_status s = parse_options(options_json, st->options, error); s != STRATA_OK) {
      delete st;
      return s;
    }
    if (!st->options.fail_pipeline.empty()) {
      st->log(STRATA_LOG_WARN, "test hook active: the pipeline \"" + st->options.fail_pipeline +
                                   "\" will fail to build (option \"test_fail_pipeline\")");
    }
    std::string why;
    if (!open_loader(st->options.loader, st->api, &why)) {
      delete st;
      return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: %s", why.c_str());
    }
    if (strata_status s = create_instance(*st, error); s != STRATA_OK) {
      destroy_state(st);
      return s;
    }
    uint32_t n = 0;
    VkResult r = st->api.vkEnumeratePhysicalDevices(st->instance, &n, nullptr);
    std::vector<VkPhysicalDevice> physical(n);
    if (r == VK_SUCCESS && n > 0) r = st->api.vkEnumeratePhysicalDevices(st->instance, &n, physical.data());
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
      destroy_state(st);
      return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: vkEnumeratePhysicalDevices failed: %s", result_name(r));
    }
    physical.resize(n);
    std::string skipped;
    for (VkPhysicalDevice pd : physical) {
      auto d = std::make_unique<Device>();
      d->state = st;
      d->physical = pd;
      d->index = static_cast<int32_t>(st->devices.size());
      std::string reason = describe_device(*st, *d);
      if (reason.empty()) {
        strata_error open_error{sizeof(strata_error), {}};
        if (open_device(*d, &open_error) != STRATA_OK) {
          reason = open_error.message;
          close_device(*d);
        }
      }
      if (!reason.empty()) {
        st->log(STRATA_LOG_INFO, "skipping " + reason);
        skipped += (skipped.empty() ? "" : "; ") + reason;
        continue;
      }
      st->log(STRATA_LOG_INFO, d->id() + ": " + d->props.name + " (" + d->props.compute_capability + ", " +
                                   (d->direct ? "unified memory" : "device memory + staging") + ")");
      st->devices.push_back(std::move(d));
    }
    if (st->devices.empty()) {
      const std::string reason =
          physical.empty() ? std::string("the Vulkan loader found no physical device (no driver/ICD installed?)")
                           : "no usable Vulkan device: " + skipped;
      destroy_state(st);
      return fail(error, STRATA_ERROR_NO_DEVICE, "vulkan: %s", reason.c_str());
    }
    *out_state = reinterpret_cast<strata_plugin_state>(st);
    return STRATA_OK;
  } catch (const nlohmann::json::exception& e) {
    delete st;
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "vulkan: bad options: %s", e.what());
  } catch (const std::exception& e) {
    destroy_state(st);
    return fail(error, STRATA_ERROR_INTERNAL, "vulkan: init failed: %s", e.what());
  }
}

void shutdown(strata_plugin_state state) noexcept { destroy_state(as_state(state)); }

int32_t score(strata_plugin_state state) noexcept {
  int32_t best = 0;
  for (const auto& d : as_state(state)->devices) best = std::max(best, d->score);
  return best;
}

int32_t device_count(strata_plugin_state state) noexcept {
  return static_cast<int32_t>(as_state(state)->devices.size());
}

strata_status device_props(strata_plugin_state state, int32_t device, strata_device_props* out_props,
                           strata_error* error) noexcept {
  Device* d = device_of(state, device, error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  // A nonzero struct_size on entry is the caller's capacity.
  size_t bytes = sizeof(d->props);
  if (out_props->struct_size != 0 && out_props->struct_size < bytes) bytes = out_props->struct_size;
  std::memcpy(out_props, &d->props, bytes);
  out_props->struct_size = bytes;
  return STRATA_OK;
}

strata_status alloc(strata_plugin_state state, int32_t device, size_t bytes, strata_buffer* out_buffer,
                    strata_error* error) noexcept {
  Device* d = device_of(state, device, error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (strata_status s = d->check_lost(error); s != STRATA_OK) return s;
  d->reclaim_frees();
  Buffer* b = nullptr;
  strata_status s = d->memory->allocate(bytes, &b, error);
  if (s == STRATA_ERROR_OUT_OF_MEMORY) {
    // Freed ranges may still wait for submitted work: let it finish, retry.
    bool pending = false;
    {
      std::lock_guard lock(d->free_mutex);
      pending = !d->pending_frees.empty();
    }
    if (pending) {
      uint64_t last = 0;
      {
        std::lock_guard lock(d->queue_mutex);
        last = d->last_submitted;
      }
      strata_error ignored{sizeof(strata_error), {}};
      if (d->wait(last, &ignored) == STRATA_OK) {
        d->reclaim_frees();
        s = d->memory->allocate(bytes, &b, error);
      }
    }
  }
  if (s != STRATA_OK) return s;
  *out_buffer = reinterpret_cast<strata_buffer>(b);
  return STRATA_OK;
}

void free_buffer(strata_plugin_state state, int32_t device, strata_buffer buffer) noexcept {
  strata_error ignored{sizeof(strata_error), {}};
  Device* d = device_of(state, device, &ignored);
  Buffer* b = reinterpret_cast<Buffer*>(buffer);
  if (d == nullptr || b == nullptr || b->magic != Buffer::kMagic) return;
  d->release(b);
}

/// The Buffer behind a handle, checked to hold [offset, offset + bytes).
Buffer* checked(strata_buffer handle, size_t offset, size_t bytes, const Device& d, const char* what,
                strata_error* error) {
  Buffer* b = reinterpret_cast<Buffer*>(handle);
  if (b == nullptr || b->magic != Buffer::kMagic) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: not a buffer of this plugin", d.id().c_str(), what);
    return nullptr;
  }
  if (offset > b->size || bytes > b->size - offset) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s of %zu bytes at offset %zu exceeds the buffer (%llu bytes)",
         d.id().c_str(), what, bytes, offset, static_cast<unsigned long long>(b->size));
    return nullptr;
  }
  return b;
}

strata_status copy_h2d(strata_plugin_state state, int32_t device, strata_buffer dst, size_t dst_offset_bytes,
                       const void* src, size_t bytes, strata_stream stream, strata_error* error) noexcept {
  Device* d = device_of(state, device, error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  Buffer* b = checked(dst, dst_offset_bytes, bytes, *d, "copy to device", error);
  if (b == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (bytes == 0) return STRATA_OK;
  Stream& s = stream_of(*d, stream);
  std::lock_guard lock(s.mutex());
  if (d->direct && s.idle()) {
    uint64_t last = 0;
    {
      std::lock_guard q(d->queue_mutex);
      last = d->last_submitted;
    }
    if (d->poll() >= last) {  // nothing anywhere on the device can still touch the range
      std::memcpy(b->host() + dst_offset_bytes, src, bytes);
      return STRATA_OK;
    }
  }
  // Queued behind earlier work, through a staging range: `src` is free on return.
  return s.upload(src, bytes, *b, dst_offset_bytes, error);
}

strata_status copy_d2h(strata_plugin_state state, int32_t device, void* dst, strata_buffer src, size_t src_offset_bytes,
                       size_t bytes, strata_stream stream, strata_error* error) noexcept {
  Device* d = device_of(state, device, error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  Buffer* b = checked(src, src_offset_bytes, bytes, *d, "copy to host", error);
  if (b == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (bytes == 0) return STRATA_OK;
  Stream& s = stream_of(*d, stream);
  std::lock_guard lock(s.mutex());
  if (d->direct) {
    if (strata_status st = s.synchronize(error); st != STRATA_OK) return st;
    std::memcpy(dst, b->host() + src_offset_bytes, bytes);
    return STRATA_OK;
  }
  Buffer* staging = nullptr;
  if (strata_status st = d->staging->allocate(bytes, &staging, error); st != STRATA_OK) return st;
  strata_status st =
      s.copy(b->vk_buffer(), b->offset + src_offset_bytes, staging->vk_buffer(), staging->offset, bytes, error);
  if (st == STRATA_OK) st = s.synchronize(error);
  if (st == STRATA_OK) std::memcpy(dst, staging->host(), bytes);
  if (st == STRATA_OK) {
    d->staging->release(staging);
  } else {
    s.retire_with_batch(staging);
  }
  return st;
}

strata_status copy_d2d(strata_plugin_state state, int32_t device, strata_buffer dst, size_t dst_offset_bytes,
                       strata_buffer src, size_t src_offset_bytes, size_t bytes, strata_stream stream,
                       strata_error* error) noexcept {
  Device* d = device_of(state, device, error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  Buffer* to = checked(dst, dst_offset_bytes, bytes, *d, "device copy (destination)", error);
  if (to == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  Buffer* from = checked(src, src_offset_bytes, bytes, *d, "device copy (source)", error);
  if (from == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (bytes == 0) return STRATA_OK;
  Stream& s = stream_of(*d, stream);
  std::lock_guard lock(s.mutex());
  const VkDeviceSize a = to->offset + dst_offset_bytes;
  const VkDeviceSize c = from->offset + src_offset_bytes;
  if (to->block == from->block && a < c + bytes && c < a + bytes) {
    // Overlapping ranges of one VkBuffer (vkCmdCopyBuffer forbids that): through a temporary.
    Buffer* tmp = nullptr;
    if (strata_status st = d->staging->allocate(bytes, &tmp, error); st != STRATA_OK) return st;
    strata_status st = s.copy(from->vk_buffer(), c, tmp->vk_buffer(), tmp->offset, bytes, error);
    if (st == STRATA_OK) st = s.copy(tmp->vk_buffer(), tmp->offset, to->vk_buffer(), a, bytes, error);
    s.retire_with_batch(tmp);
    return st;
  }
  return s.copy(from->vk_buffer(), c, to->vk_buffer(), a, bytes, error);
}

strata_status stream_create(strata_plugin_state state, int32_t device, strata_stream* out_stream,
                            strata_error* error) noexcept {
  Device* d = device_of(state, device, error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  auto* s = new (std::nothrow) Stream(*d);
  if (s == nullptr) return fail(error, STRATA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", d->id().c_str());
  std::lock_guard lock(d->streams_mutex);
  d->streams.push_back(s);
  *out_stream = reinterpret_cast<strata_stream>(s);
  return STRATA_OK;
}

void stream_destroy(strata_plugin_state state, int32_t device, strata_stream stream) noexcept {
  strata_error ignored{sizeof(strata_error), {}};
  Device* d = device_of(state, device, &ignored);
  if (d == nullptr || stream == nullptr) return;
  auto* s = reinterpret_cast<Stream*>(stream);
  {
    std::lock_guard lock(d->streams_mutex);
    auto it = std::find(d->streams.begin(), d->streams.end(), s);
    if (it == d->streams.end() || s == d->default_stream.get()) return;
    d->streams.erase(it);
  }
  delete s;  // waits for its work
}

strata_status stream_synchronize(strata_plugin_state state, int32_t device, strata_stream stream,
                                 strata_error* error) noexcept {
  Device* d = device_of(state, device, error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  Stream& s = stream_of(*d, stream);
  std::lock_guard lock(s.mutex());
  return s.synchronize(error);
}

strata_status event_create(strata_plugin_state state, int32_t device, strata_event* out_event,
                           strata_error* error) noexcept {
  Device* d = device_of(state, device, error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  auto* e = new (std::nothrow) Event{d, 0};
  if (e == nullptr) return fail(error, STRATA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", d->id().c_str());
  *out_event = reinterpret_cast<strata_event>(e);
  return STRATA_OK;
}

void event_destroy(strata_plugin_state, int32_t, strata_event event) noexcept {
  delete reinterpret_cast<Event*>(event);
}

strata_status event_record(strata_plugin_state state, int32_t device, strata_event event, strata_stream stream,
                           strata_error* error) noexcept {
  Device* d = device_of(state, device, error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (event == nullptr)
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: event_record: null event", d->id().c_str());
  Stream& s = stream_of(*d, stream);
  std::lock_guard lock(s.mutex());
  // Submitting now puts the event's work ahead, in queue order, of anything
  // another stream submits after waiting on it.
  uint64_t seq = 0;
  if (strata_status st = s.flush(error, &seq); st != STRATA_OK) return st;
  reinterpret_cast<Event*>(event)->seq = seq;
  return STRATA_OK;
}

strata_status stream_wait_event(strata_plugin_state state, int32_t device, strata_stream stream, strata_event event,
                                strata_error* error) noexcept {
  Device* d = device_of(state, device, error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (event == nullptr)
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: stream_wait_event: null event", d->id().c_str());
  // The event's submission is already on the one queue, and every batch
  // begins with a barrier on all earlier submissions: the stream's next
  // batch is ordered after it without blocking the host.
  static_cast<void>(stream);
  return d->check_lost(error);
}

strata_status event_synchronize(strata_plugin_state state, int32_t device, strata_event event,
                                strata_error* error) noexcept {
  Device* d = device_of(state, device, error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (event == nullptr)
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: event_synchronize: null event", d->id().c_str());
  return d->wait(reinterpret_cast<Event*>(event)->seq, error);
}

strata_status get_kernels(strata_plugin_state state, int32_t device, const strata_kernel_entry** out_entries,
                          int32_t* out_count, strata_error* error) noexcept {
  Device* d = device_of(state, device, error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  try {
    const std::vector<strata_kernel_entry>& table = kernel_table(*d);
    *out_entries = table.data();
    *out_count = static_cast<int32_t>(table.size());
    return STRATA_OK;
  } catch (const std::exception& e) {
    return fail(error, STRATA_ERROR_INTERNAL, "vulkan: building the kernel table failed: %s", e.what());
  }
}

const strata_plugin_api kApi = {
    .struct_size = sizeof(strata_plugin_api),
    .abi_major = STRATA_ABI_MAJOR,
    .abi_minor = STRATA_ABI_MINOR,
    .name = kPluginName,
    .vendor = "Strata project",
    .version = "0.1.0",
    .init = init,
    .shutdown = shutdown,
    .score = score,
    .device_count = device_count,
    .device_props = device_props,
    .alloc = alloc,
    .free = free_buffer,
    .copy_h2d = copy_h2d,
    .copy_d2h = copy_d2h,
    .copy_d2d = copy_d2d,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_synchronize = stream_synchronize,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .stream_wait_event = stream_wait_event,
    .event_synchronize = event_synchronize,
    .get_kernels = get_kernels,
    .extensions = nullptr,
};

}  // namespace
}  // namespace strata::vulkan

/// The plugin's one exported symbol. A host with another ABI major still gets
/// the table: the core compares abi_major itself and reports the mismatch.
extern "C" STRATA_PLUGIN_EXPORT const strata_plugin_api* strata_plugin_entry(uint32_t host_abi_major,
                                                                             uint32_t host_abi_minor) {
  static_cast<void>(host_abi_major);
  static_cast<void>(host_abi_minor);
  return &strata::vulkan::kApi;
}

static_assert(std::is_same_v<decltype(&strata_plugin_entry), strata_plugin_entry_fn>);
