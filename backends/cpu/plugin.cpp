// plugin.cpp — the CPU plugin's entry symbol and its ABI 2.0 table: probe,
// init (options), the single device "cpu:0", host memory (with statistics)
// and copies, and the strata.native_handles and strata.buffer_views
// extensions. There are no streams or events: every call completes before it
// returns, and the device is free threaded (the kernels share no state the
// host would have to serialise).
//
// Options (a JSON object; any other key is an error):
//   "threads": integer 0..1024, OpenMP threads per kernel (0: the environment's
//              STRATA_NUM_THREADS when set, else omp_get_max_threads())
//   "isa":     instruction-set cap, e.g. "avx2" (process-wide): oneDNN's (matmul,
//              eltwise) and the plugin's own vectorised loops' (loop_isa.hpp)
#include "kernel.hpp"
#include "loop_isa.hpp"
#include "matmul.hpp"
#include "state.hpp"

#include <strata/plugin/backend.hpp>

#include <malloc.h>
#include <nlohmann/json.hpp>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace strata::cpu {
namespace {

constexpr const char* kPluginName = CpuState::kName;
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

/// Available physical memory: MemAvailable of /proc/meminfo (free plus
/// what the kernel can reclaim), else the free pages.
uint64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    const unsigned long long kib = std::strtoull(line.c_str() + std::strlen("MemAvailable:"), nullptr, 10);
    if (kib > 0) return static_cast<uint64_t>(kib) * 1024;
    break;
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size) : 0;
}

strata_device_props make_props() {
  strata_device_props p{};
  p.struct_size = sizeof(p);
  std::snprintf(p.name, sizeof(p.name), "%s (%s)", cpu_model_name().c_str(), isa_name());
  p.type = STRATA_DEVICE_CPU;
  // Device memory is host memory; the kernels share no state, so the host
  // may call every entry point concurrently without a per-stream lock.
  p.flags = STRATA_DEVICE_UNIFIED_MEMORY | STRATA_DEVICE_FREE_THREADED;
  p.memory_bytes = physical_memory_bytes();
  for (strata_dtype d : {STRATA_F32, STRATA_F64, STRATA_F16, STRATA_BF16, STRATA_I32, STRATA_I64, STRATA_BOOL,
                         STRATA_C64, STRATA_C128}) {
    p.dtype_mask |= STRATA_DTYPE_BIT(d);
  }
  // f16/bf16 are stored natively but computed through f32.
  p.compute_dtype_mask = STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_F64) | STRATA_DTYPE_BIT(STRATA_I32) |
                         STRATA_DTYPE_BIT(STRATA_I64) | STRATA_DTYPE_BIT(STRATA_BOOL) | STRATA_DTYPE_BIT(STRATA_C64) |
                         STRATA_DTYPE_BIT(STRATA_C128);
  std::snprintf(p.compute_capability, sizeof(p.compute_capability), "%s", isa_name());
  // No UUID (flag HAS_UUID unset), no PCI bus id: a CPU is not seen twice.
  return p;
}

// ---- Memory ------------------------------------------------------------------
//
// Each buffer is one aligned_alloc block: a 64-byte header holding the size
// the host asked for, then the buffer itself (so it stays 64-byte aligned).
// The header gives free() the size for the statistics and lets copies check
// their ranges.

constexpr size_t kHeader = kAlignment;

struct BlockHeader {
  size_t bytes;  // as requested by the host
};
static_assert(sizeof(BlockHeader) <= kHeader);

/// Process-wide counters (one device; its memory is the process's).
struct MemoryCounters {
  std::atomic<uint64_t> in_use{0};
  std::atomic<uint64_t> peak{0};
  std::atomic<uint64_t> allocations{0};
};
MemoryCounters g_memory;

char* bytes_of(strata_buffer buffer) { return reinterpret_cast<char*>(buffer); }

/// Views (strata.buffer_views): buffers over host memory that someone else
/// allocated, with no header in front, so their sizes are kept here. One
/// address may carry several views (a DLPack array imported twice, or a
/// slice and its base); the largest size stands for the address. `live`
/// keeps the lock off every copy while no view exists.
struct ViewRegistry {
  std::atomic<int64_t> live{0};
  std::shared_mutex mutex;
  std::unordered_multimap<const char*, size_t> sizes;
};
ViewRegistry g_views;

size_t buffer_size(strata_buffer buffer) {
  if (g_views.live.load(std::memory_order_acquire) > 0) {
    std::shared_lock lock(g_views.mutex);
    auto [first, last] = g_views.sizes.equal_range(bytes_of(buffer));
    if (first != last) {
      size_t size = 0;
      for (auto it = first; it != last; ++it) size = std::max(size, it->second);
      return size;
    }
  }
  return reinterpret_cast<const BlockHeader*>(bytes_of(buffer) - kHeader)->bytes;
}

// ---- The table's functions ---------------------------------------------------


/// The level of the plugin's own loops (loop_isa.hpp): the widest one that
/// oneDNN's effective ISA (its cap included) covers and the CPU runs.
LoopIsa choose_loop_isa() {
#if STRATA_CPU_ISA_CLONES
  const auto effective = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const auto covers = [&](dnnl_cpu_isa_t isa) {
    return (effective & static_cast<unsigned>(isa)) == static_cast<unsigned>(isa);
  };
  if (covers(dnnl_cpu_isa_avx512_core) && __builtin_cpu_supports("x86-64-v4")) return LoopIsa::avx512;
  if (covers(dnnl_cpu_isa_avx2) && __builtin_cpu_supports("x86-64-v3")) return LoopIsa::avx2;
#endif
  return LoopIsa::generic;
}

/// Parses the options into `threads` (0: all cores) and applies "isa".
strata_status parse_options(const char* options_json, int64_t& threads, strata_error* error) {
  nlohmann::json options;
  try {
    options = nlohmann::json::parse(options_json != nullptr ? options_json : "{}");
  } catch (const nlohmann::json::exception& e) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: bad options: %s", e.what());
  }
  if (!options.is_object()) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: options must be a JSON object, got %s",
                options.type_name());
  }
  threads = 0;
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
  return STRATA_OK;
}

}  // namespace

// ---- The backend (strata/plugin/backend.hpp) -----------------------------------

strata_status CpuState::probe(strata_probe_args& args) {
  // Any x86-64/AArch64 Linux host runs this build; nothing to open.
  args.score = 50;
  return STRATA_OK;
}

std::unique_ptr<CpuState> CpuState::init(strata_init_args& args) {
  int64_t threads = 0;
  plugin::check(parse_options(args.options_json, threads, args.error));
  // Without "threads" (or 0) in the configuration, STRATA_NUM_THREADS
  // chooses, else OpenMP's default (OMP_NUM_THREADS, else every core).
  if (threads == 0) {
    if (const char* env = std::getenv("STRATA_NUM_THREADS"); env != nullptr && *env != '\0') {
      char* end = nullptr;
      const long long n = std::strtoll(env, &end, 10);
      if (*end != '\0' || n < 1 || n > kMaxThreads) {
        plugin::check(fail(args.error, STRATA_ERROR_INVALID_ARGUMENT,
                           "cpu: STRATA_NUM_THREADS=\"%s\" must be an integer in [1, %lld]", env,
                           static_cast<long long>(kMaxThreads)));
      }
      threads = n;
    }
  }
  auto state = std::make_unique<CpuState>();
  state->host = args.host;
  state->threads = threads > 0 ? static_cast<int>(threads) : omp_get_max_threads();
  state->properties = make_props();
  g_loop_isa.store(choose_loop_isa(), std::memory_order_relaxed);
  // The host's logger already names the plugin ("strata.cpu").
  const std::string line = std::to_string(state->threads) + " threads, isa " + isa_name() + ", loops " +
                           loop_isa_name(loop_isa());
  plugin::log(args.host, STRATA_LOG_INFO, kPluginName, line.c_str());
  return state;  // the probe's score stands
}

CpuState::~CpuState() {
  clear_matmul_cache();
  // What the loops ran in (loop_isa.hpp), for the tests and for anyone who
  // wonders whether the wide loops are used.
  char line[160];
  std::snprintf(line, sizeof line, "loop runs: %s %llu, %s %llu, %s %llu", loop_isa_name(LoopIsa::avx512),
                static_cast<unsigned long long>(loop_runs(LoopIsa::avx512)), loop_isa_name(LoopIsa::avx2),
                static_cast<unsigned long long>(loop_runs(LoopIsa::avx2)), loop_isa_name(LoopIsa::generic),
                static_cast<unsigned long long>(loop_runs(LoopIsa::generic)));
  plugin::log(host, STRATA_LOG_DEBUG, kPluginName, line);
}

const plugin::KernelTable& CpuState::kernels(Device&) const { return kernel_table(); }

strata_status CpuState::alloc(Device&, strata_alloc_args& args) {
  if (args.kind != STRATA_MEMORY_DEVICE && args.kind != STRATA_MEMORY_PINNED_HOST) {
    return fail(args.error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: alloc: unknown memory kind %d",
                static_cast<int>(args.kind));
  }
  // Both kinds are the same aligned host memory; the stream is irrelevant
  // (everything is synchronous).
  const size_t bytes = args.bytes;
  if (bytes > SIZE_MAX - kHeader - kAlignment) {
    return fail(args.error, STRATA_ERROR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", bytes);
  }
  // aligned_alloc wants a multiple of the alignment; 0 bytes still gets a
  // unique buffer.
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* block = std::aligned_alloc(kAlignment, kHeader + rounded);
  if (block == nullptr) return fail(args.error, STRATA_ERROR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", bytes);
  static_cast<BlockHeader*>(block)->bytes = bytes;
  char* buffer = static_cast<char*>(block) + kHeader;

  const uint64_t in_use = g_memory.in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t peak = g_memory.peak.load(std::memory_order_relaxed);
  while (in_use > peak && !g_memory.peak.compare_exchange_weak(peak, in_use, std::memory_order_relaxed)) {
  }
  g_memory.allocations.fetch_add(1, std::memory_order_relaxed);

  args.buffer = reinterpret_cast<strata_buffer>(buffer);
  args.host_pointer = buffer;
  return STRATA_OK;
}

strata_status CpuState::free(Device&, strata_alloc_args& args) {
  if (args.buffer == nullptr) return STRATA_OK;
  char* block = bytes_of(args.buffer) - kHeader;
  g_memory.in_use.fetch_sub(reinterpret_cast<const BlockHeader*>(block)->bytes, std::memory_order_relaxed);
  std::free(block);
  return STRATA_OK;
}

namespace {

const char* copy_kind_name(strata_copy_kind kind) {
  switch (kind) {
    case STRATA_COPY_HOST_TO_DEVICE: return "host to device";
    case STRATA_COPY_DEVICE_TO_HOST: return "device to host";
    case STRATA_COPY_DEVICE_TO_DEVICE: return "device to device";
    default: return "?";
  }
}

/// Whether [offset, offset + bytes) lies inside `buffer`; fails otherwise.
bool in_range(const strata_copy_args* args, const char* role, strata_buffer buffer, size_t offset, strata_status& st) {
  if (buffer == nullptr) {
    st = fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: memory copy (%s): no %s buffer",
              copy_kind_name(args->kind), role);
    return false;
  }
  const size_t size = buffer_size(buffer);
  if (offset > size || args->bytes > size - offset) {
    st = fail(args->error, STRATA_ERROR_INVALID_ARGUMENT,
              "cpu: memory copy (%s): %zu bytes at offset %zu run past the end of a %s buffer of %zu bytes",
              copy_kind_name(args->kind), args->bytes, offset, role, size);
    return false;
  }
  return true;
}

}  // namespace

/// All three kinds, synchronously (STRATA_COPY_ASYNC may complete early;
/// there is no `done` event to record: the device has no events).
strata_status CpuState::copy(Device&, strata_copy_args& args) {
  const size_t bytes = args.bytes;
  strata_status st = STRATA_OK;
  switch (args.kind) {
    case STRATA_COPY_HOST_TO_DEVICE:
      if (!in_range(&args, "destination", args.dst, args.dst_offset, st)) return st;
      if (bytes == 0) return STRATA_OK;
      if (args.src_host == nullptr) {
        return fail(args.error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: memory copy (host to device): no host source");
      }
      std::memcpy(bytes_of(args.dst) + args.dst_offset, args.src_host, bytes);
      return STRATA_OK;
    case STRATA_COPY_DEVICE_TO_HOST:
      if (!in_range(&args, "source", args.src, args.src_offset, st)) return st;
      if (bytes == 0) return STRATA_OK;
      if (args.dst_host == nullptr) {
        return fail(args.error, STRATA_ERROR_INVALID_ARGUMENT,
                    "cpu: memory copy (device to host): no host destination");
      }
      std::memcpy(args.dst_host, bytes_of(args.src) + args.src_offset, bytes);
      return STRATA_OK;
    case STRATA_COPY_DEVICE_TO_DEVICE:
      if (!in_range(&args, "destination", args.dst, args.dst_offset, st) ||
          !in_range(&args, "source", args.src, args.src_offset, st)) {
        return st;
      }
      // memmove: both ranges may lie in one buffer.
      if (bytes > 0) {
        std::memmove(bytes_of(args.dst) + args.dst_offset, bytes_of(args.src) + args.src_offset, bytes);
      }
      return STRATA_OK;
    default: break;  // a kind from a newer minor
  }
  return fail(args.error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: memory copy: unknown copy kind %d",
              static_cast<int>(args.kind));
}

strata_status CpuState::memory_info(Device&, strata_memory_args& args) {
  args.total_bytes = physical_memory_bytes();
  args.free_bytes = std::min(available_memory_bytes(), args.total_bytes);
  return STRATA_OK;
}

strata_status CpuState::memory_stats(Device&, strata_memory_args& args) {
  // No cache of its own: what is reserved is what is in use.
  args.bytes_in_use = g_memory.in_use.load(std::memory_order_relaxed);
  args.bytes_reserved = args.bytes_in_use;
  args.peak_bytes_in_use = std::max(g_memory.peak.load(std::memory_order_relaxed), args.bytes_in_use);
  args.allocations = g_memory.allocations.load(std::memory_order_relaxed);
  return STRATA_OK;
}

strata_status CpuState::memory_trim(Device&, strata_memory_args&) {
  malloc_trim(0);  // hands free heap pages back to the system
  return STRATA_OK;
}

// ---- strata.native_handles v1 --------------------------------------------------

strata_status CpuState::buffer_pointer(Device&, strata_native_args& args) {
  if (args.buffer == nullptr) {
    return fail(args.error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: native_handles.buffer_pointer: no buffer");
  }
  args.handle = args.buffer;  // a buffer is its host address
  args.api = "host";
  return STRATA_OK;
}

strata_status CpuState::stream_handle(Device&, strata_native_args& args) {
  args.handle = nullptr;  // no streams: work runs on the calling thread
  args.api = "host";
  return STRATA_OK;
}

// ---- strata.buffer_views v1 ---------------------------------------------------

strata_status CpuState::create_view(Device&, strata_view_args& args) {
  if (args.address == nullptr) {
    return fail(args.error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: buffer_views.create_view: no address");
  }
  // Any host address will do: the kernels take element-aligned operands
  // (views at any offset reach them today), and the host checked that.
  std::unique_lock lock(g_views.mutex);
  g_views.sizes.emplace(static_cast<const char*>(args.address), args.bytes);
  g_views.live.fetch_add(1, std::memory_order_release);
  args.buffer = reinterpret_cast<strata_buffer>(args.address);  // a buffer is its host address
  return STRATA_OK;
}

strata_status CpuState::destroy_view(Device&, strata_view_args& args) {
  std::unique_lock lock(g_views.mutex);
  auto [first, last] = g_views.sizes.equal_range(bytes_of(args.buffer));
  if (first == last) {
    return fail(args.error, STRATA_ERROR_INVALID_ARGUMENT, "cpu: buffer_views.destroy_view: %p is not a view",
                static_cast<void*>(args.buffer));
  }
  g_views.sizes.erase(first);
  g_views.live.fetch_sub(1, std::memory_order_release);
  return STRATA_OK;
}

const strata_extension* CpuState::extensions() {
  return plugin::buffer_views<CpuState>(plugin::native_handles<CpuState>());
}

/// What decides probe and init here (ABI 2.1, section 10): the thread
/// count and oneDNN's ISA cap come from these.
const char* const CpuState::kProbeEnvironment[] = {"STRATA_NUM_THREADS", "OMP_*", "GOMP_*", "KMP_*",
                                                  "ONEDNN_*",           "DNNL_*", nullptr};

}  // namespace strata::cpu

/// The plugin's one exported symbol (strata_plugin.h): the table
/// make_api<CpuState>() builds. No streams or events (HAS_STREAMS unset): the
/// host uses the NULL stream.
STRATA_PLUGIN_BACKEND(strata::cpu::CpuState)
