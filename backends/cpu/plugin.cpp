// plugin.cpp — the CPU plugin's entry symbol and its table: init (options),
// the single device "cpu:0", host memory and copies. There are no streams:
// every call completes before it returns.
//
// Options (a JSON object; any other key is an error):
//   "threads": integer 0..1024, OpenMP threads per kernel (0: omp_get_max_threads())
//   "isa":     oneDNN instruction-set cap for matmul, e.g. "avx2" (process-wide)
#include "kernel.hpp"
#include "matmul.hpp"
#include "state.hpp"

#include <strata/plugin/strata_plugin.hpp>

#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace strata::cpu {
namespace {

constexpr const char* kPluginName = "cpu";
constexpr size_t kAlignment = 64;
constexpr int64_t kMaxThreads = 1024;  // as docs/configuration.md allows

/// oneDNN's instruction sets by name ("all": no limit).
constexpr std::pair<const char*, dnnl_cpu_isa_t> kIsas[] = {
    {"all", dnnl_cpu_isa_all},
    {"sse41", dnnl_cpu_isa_sse41},
    {"avx", dnnl_cpu_isa_avx},
    {"avx2", dnnl_cpu_isa_avx2},
    {"avx2_vnni", dnnl_cpu_isa_avx2_vnni},
    {"avx512_mic", dnnl_cpu_isa_avx512_mic},
    {"avx512_mic_4ops", dnnl_cpu_isa_avx512_mic_4ops},
    {"avx512_core", dnnl_cpu_isa_avx512_core},
    {"avx512_core_vnni", dnnl_cpu_isa_avx512_core_vnni},
    {"avx512_core_bf16", dnnl_cpu_isa_avx512_core_bf16},
    {"avx512_core_amx", dnnl_cpu_isa_avx512_core_amx},
};

/// oneDNN's name for the instruction set its kernels use on this machine.
const char* isa_name() {
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  for (const auto& [name, value] : kIsas) {
    if (value == isa && value != dnnl_cpu_isa_all) return name;
  }
  return "generic";
}

/// Option "isa": caps the instruction set of oneDNN's kernels (matmul). oneDNN
/// accepts this once per process, before its first kernel; a later request
/// is fine when the effective set is already within it.
strata_status limit_isa(const std::string& requested, strata_error* error) {
  for (const auto& [name, value] : kIsas) {
    if (requested != name) continue;
    if (dnnl_set_max_cpu_isa(value) == dnnl_success) return STRATA_OK;
    const auto effective = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    if (value == dnnl_cpu_isa_all || (effective & ~static_cast<unsigned>(value)) == 0) return STRATA_OK;
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                "cpu: option \"isa\": oneDNN already runs %s and can no longer be limited to %s", isa_name(),
                name);
  }
  std::string known;
  for (const auto& isa : kIsas) known += std::string(known.empty() ? "" : ", ") + isa.first;
  return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: option \"isa\": unknown \"%s\" (one of %s)",
              requested.c_str(), known.c_str());
}

/// The "model name" line of /proc/cpuinfo, or "CPU".
std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    const size_t begin = line.find_first_not_of(" \t", colon + 1);
    return begin == std::string::npos ? "CPU" : line.substr(begin);
  }
  return "CPU";
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) : 0;
}

strata_device_props make_props() {
  strata_device_props p{};
  p.struct_size = sizeof(p);
  std::snprintf(p.name, sizeof(p.name), "%s (%s)", cpu_model_name().c_str(), isa_name());
  p.type = STRATA_DEVICE_CPU;
  p.memory_bytes = physical_memory_bytes();
  for (int d = 0; d < STRATA_DTYPE_COUNT; ++d) p.dtype_mask |= STRATA_DTYPE_BIT(d);
  // f16/bf16 are stored natively but computed through f32.
  p.compute_dtype_mask = STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_F64) | STRATA_DTYPE_BIT(STRATA_I32) |
                         STRATA_DTYPE_BIT(STRATA_I64) | STRATA_DTYPE_BIT(STRATA_BOOL);
  std::snprintf(p.compute_capability, sizeof(p.compute_capability), "%s", isa_name());
  p.has_streams = 0;
  p.unified_memory = 1;
  return p;
}

void log_info(const strata_host_api* host, const char* message) {
  if (host != nullptr && host->struct_size >= offsetof(strata_host_api, log) + sizeof(host->log) &&
      host->log != nullptr) {
    host->log(STRATA_LOG_INFO, kPluginName, message);
  }
}

strata_status bad_device(strata_error* error, int32_t device) {
  return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: no device %d (there is only cpu:0)", device);
}

// ---- The table's functions ---------------------------------------------------

strata_status init(const strata_host_api* host, const char* options_json, strata_plugin_state* out_state,
                   strata_error* error) noexcept {
  try {
    const nlohmann::json options = nlohmann::json::parse(options_json != nullptr ? options_json : "{}");
    if (!options.is_object()) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: options must be a JSON object, got %s",
                  options.type_name());
    }
    int64_t threads = 0;
    for (const auto& [key, value] : options.items()) {
      if (key == "threads") {
        if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > kMaxThreads) {
          return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                      "cpu: option \"threads\" must be an integer in [0, %lld] (0: all cores), got %s",
                      static_cast<long long>(kMaxThreads), value.dump().c_str());
        }
        threads = value.get<int64_t>();
      } else if (key == "isa") {
        if (!value.is_string()) {
          return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: option \"isa\" must be a string");
        }
        if (const strata_status s = limit_isa(value.get<std::string>(), error); s != STRATA_OK) return s;
      } else {
        return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: unknown option \"%s\" (known: threads, isa)",
                    key.c_str());
      }
    }
    auto state = std::make_unique<CpuState>();
    state->host = host;
    state->threads = threads > 0 ? static_cast<int>(threads) : omp_get_max_threads();
    state->props = make_props();
    // The host's logger already names the plugin ("strata.cpu").
    const std::string line = std::to_string(state->threads) + " threads, isa " + isa_name();
    log_info(host, line.c_str());
    *out_state = reinterpret_cast<strata_plugin_state>(state.release());
    return STRATA_OK;
  } catch (const std::exception& e) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: bad options: %s", e.what());
  } catch (...) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: bad options");
  }
}

void shutdown(strata_plugin_state state) noexcept {
  clear_matmul_cache();
  delete as_state(state);
}

int32_t score(strata_plugin_state) noexcept { return 50; }

int32_t device_count(strata_plugin_state) noexcept { return 1; }

strata_status device_props(strata_plugin_state state, int32_t device, strata_device_props* out_props,
                           strata_error* error) noexcept {
  if (device != 0) return bad_device(error, device);
  // A nonzero struct_size on entry is the caller's capacity (an older core
  // may know a shorter struct); copy no more than that.
  const strata_device_props& props = as_state(state)->props;
  size_t bytes = sizeof(props);
  if (out_props->struct_size != 0 && out_props->struct_size < bytes) bytes = out_props->struct_size;
  std::memcpy(out_props, &props, bytes);
  out_props->struct_size = bytes;
  return STRATA_OK;
}

strata_status alloc(strata_plugin_state, int32_t device, size_t bytes, strata_buffer* out_buffer,
                    strata_error* error) noexcept {
  if (device != 0) return bad_device(error, device);
  if (bytes > SIZE_MAX - kAlignment) {
    return fail(error, STRATA_ERROR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", bytes);
  }
  // aligned_alloc wants a multiple of the alignment; 0 bytes still gets a
  // unique buffer.
  const size_t rounded = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) return fail(error, STRATA_ERROR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", bytes);
  *out_buffer = static_cast<strata_buffer>(p);
  return STRATA_OK;
}

void free_buffer(strata_plugin_state, int32_t, strata_buffer buffer) noexcept { std::free(buffer); }

char* bytes_of(strata_buffer buffer) { return reinterpret_cast<char*>(buffer); }

strata_status copy_h2d(strata_plugin_state, int32_t device, strata_buffer dst, size_t dst_offset_bytes,
                       const void* src, size_t bytes, strata_stream, strata_error* error) noexcept {
  if (device != 0) return bad_device(error, device);
  if (bytes > 0) std::memcpy(bytes_of(dst) + dst_offset_bytes, src, bytes);
  return STRATA_OK;
}

strata_status copy_d2h(strata_plugin_state, int32_t device, void* dst, strata_buffer src, size_t src_offset_bytes,
                       size_t bytes, strata_stream, strata_error* error) noexcept {
  if (device != 0) return bad_device(error, device);
  if (bytes > 0) std::memcpy(dst, bytes_of(src) + src_offset_bytes, bytes);
  return STRATA_OK;
}

strata_status copy_d2d(strata_plugin_state, int32_t device, strata_buffer dst, size_t dst_offset_bytes,
                       strata_buffer src, size_t src_offset_bytes, size_t bytes, strata_stream,
                       strata_error* error) noexcept {
  if (device != 0) return bad_device(error, device);
  // memmove: both ranges may lie in one buffer.
  if (bytes > 0) std::memmove(bytes_of(dst) + dst_offset_bytes, bytes_of(src) + src_offset_bytes, bytes);
  return STRATA_OK;
}

strata_status get_kernels(strata_plugin_state, int32_t device, const strata_kernel_entry** out_entries,
                          int32_t* out_count, strata_error* error) noexcept {
  if (device != 0) return bad_device(error, device);
  try {
    const std::vector<strata_kernel_entry>& table = kernel_table();
    *out_entries = table.data();
    *out_count = static_cast<int32_t>(table.size());
    return STRATA_OK;
  } catch (const std::exception& e) {
    return fail(error, STRATA_ERROR_INTERNAL, "cpu: building the kernel table failed: %s", e.what());
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
    .stream_create = nullptr,
    .stream_destroy = nullptr,
    .stream_synchronize = nullptr,
    .event_create = nullptr,
    .event_destroy = nullptr,
    .event_record = nullptr,
    .stream_wait_event = nullptr,
    .event_synchronize = nullptr,
    .get_kernels = get_kernels,
    .extensions = nullptr,
};

}  // namespace
}  // namespace strata::cpu

/// The plugin's one exported symbol. A host with another ABI major still gets
/// the table: the core compares abi_major itself and reports the mismatch.
extern "C" STRATA_PLUGIN_EXPORT const strata_plugin_api* strata_plugin_entry(uint32_t host_abi_major,
                                                                            uint32_t host_abi_minor) {
  static_cast<void>(host_abi_major);
  static_cast<void>(host_abi_minor);
  return &strata::cpu::kApi;
}

static_assert(std::is_same_v<decltype(&strata_plugin_entry), strata_plugin_entry_fn>);
