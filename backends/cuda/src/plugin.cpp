// plugin.cpp — the GPU plugin's entry symbol, its table built by
// make_api<State>() (strata/plugin/backend.hpp), and the members behind probe,
// init (options, devices), shutdown (~State), the kernel table and the
// strata.native_handles extension, chained to strata.collectives
// (collectives.cpp). Memory and copies are in memory.cpp, streams and events
// in streams.cpp, kernels in the *.cu files.
//
// One source, two plugins: built by nvcc this is libstrata_plugin_cuda.so,
// built by hipcc with STRATA_GPU_HIP it is libstrata_plugin_hip.so.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "collectives.hpp"
#include "entry_points.hpp"
#include <strata/plugin/backend.hpp>
#include "kernels.hpp"
#include "state.hpp"

namespace strata::gpu {

using plugin::fail;

const char* op_tag_name(int tag) {
  switch (tag) {
    case kTagIndexSelect: return STRATA_OP_INDEX_SELECT;
    case kTagGather: return STRATA_OP_GATHER;
    case kTagScatterAdd: return STRATA_OP_SCATTER_ADD;
    case kTagDiv: return STRATA_OP_DIV;
    default: return "a kernel";
  }
}

std::string describe(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

Device* device_of(strata_plugin_state state, int32_t device, strata_error* error) {
  State* st = as_state(state);
  if (st == nullptr) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: no plugin state", kPluginName);
    return nullptr;
  }
  if (device < 0 || static_cast<size_t>(device) >= st->devices.size()) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: no device %d (the plugin has %zu)", kPluginName, device,
         st->devices.size());
    return nullptr;
  }
  return st->devices[static_cast<size_t>(device)].get();
}

cudaError_t make_current(const Device& d) {
  thread_local int current = -1;
  if (current == d.ordinal) return cudaSuccess;
  cudaError_t e = cudaSetDevice(d.ordinal);
  if (e == cudaSuccess) current = d.ordinal;
  return e;
}

strata_status runtime_failure(cudaError_t e, const Device* d, const char* what, strata_error* error) {
  const std::string where = d != nullptr ? d->id : std::string(kPluginName);
  switch (e) {
    case cudaErrorMemoryAllocation:
      return fail(error, STRATA_ERROR_OUT_OF_MEMORY, "%s on %s: %s", what, where.c_str(), describe(e).c_str());
    // Sticky errors: the context is corrupt and every later call fails.
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
#if !defined(STRATA_GPU_HIP)  // CUDA's finer-grained sticky errors
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
#endif
      return fail(error, STRATA_ERROR_DEVICE_LOST, "%s on %s: %s; the device context is lost", what, where.c_str(),
                  describe(e).c_str());
    default:
      return fail(error, STRATA_ERROR_DEVICE, "%s on %s: %s", what, where.c_str(), describe(e).c_str());
  }
}

strata_status State::deferred(Device& d, strata_error* error) {
  std::lock_guard lock(d.failure_mutex);
  volatile DeviceFailure* f = d.failure;
  const unsigned int count = f->count;
  if (count == 0) return STRATA_OK;
  const int kind = f->kind;
  const char* op = op_tag_name(f->op);
  const long long value = f->value;
  const long long bound = f->bound;
  f->count = 0;
  char more[64] = "";
  if (count > 1) std::snprintf(more, sizeof(more), " (and %u more failures)", count - 1);
  if (kind == kIntegerDivisionByZero) {
    return fail(error, STRATA_ERROR_DEFERRED, "%s on %s: integer division by zero%s (reported at synchronisation)",
                op, d.id.c_str(), more);
  }
  return fail(error, STRATA_ERROR_DEFERRED, "%s on %s: index %lld out of range [0, %lld)%s (reported at synchronisation)",
              op, d.id.c_str(), value, bound, more);
}

namespace {

// ---- Options -------------------------------------------------------------------

/// The plugin's options: {"threads": n} is accepted (every device setting
/// reaches every plugin) and unused; anything else is an error.
strata_status check_options(const char* json, strata_error* error) {
  const nlohmann::json options = nlohmann::json::parse(json != nullptr ? json : "{}");
  if (!options.is_object()) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: options must be a JSON object, got %s", kPluginName,
                options.type_name());
  }
  for (const auto& [key, value] : options.items()) {
    if (key == "threads") continue;
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: unknown option \"%s\" (known: threads)", kPluginName,
                key.c_str());
  }
  return STRATA_OK;
}

// ---- Devices -------------------------------------------------------------------

void destroy_device(Device& d) {
  if (make_current(d) != cudaSuccess) return;  // a lost context: nothing can be released
  (void)cudaDeviceSynchronize();
  destroy_blas(d);
  if (d.default_stream.native != nullptr) (void)cudaStreamDestroy(d.default_stream.native);
  if (d.failure != nullptr) (void)cudaFreeHost(d.failure);
}

/// Fills `d` for runtime device `ordinal`.
strata_status open_device(Device& d, int ordinal, strata_error* error) {
  d.ordinal = ordinal;
  d.id = std::string(kPluginName) + ":" + std::to_string(d.index);
  if (cudaError_t e = make_current(d); e != cudaSuccess) return runtime_failure(e, &d, "cudaSetDevice", error);
  cudaDeviceProp p{};
  if (cudaError_t e = cudaGetDeviceProperties(&p, ordinal); e != cudaSuccess) {
    return runtime_failure(e, &d, "cudaGetDeviceProperties", error);
  }
  strata_device_props& props = d.props;
  props.struct_size = sizeof(props);
  std::snprintf(props.name, sizeof(props.name), "%.127s", p.name);
  props.type = p.integrated ? STRATA_DEVICE_IGPU : STRATA_DEVICE_GPU;
  props.flags = STRATA_DEVICE_HAS_STREAMS | STRATA_DEVICE_STAGE_PINNED;
  props.memory_bytes = p.totalGlobalMem;
  props.dtype_mask = STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_F64) | STRATA_DTYPE_BIT(STRATA_F16) |
                     STRATA_DTYPE_BIT(STRATA_BF16) | STRATA_DTYPE_BIT(STRATA_I32) | STRATA_DTYPE_BIT(STRATA_I64) |
                     STRATA_DTYPE_BIT(STRATA_BOOL);
  props.compute_dtype_mask = STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_F64) |
                             STRATA_DTYPE_BIT(STRATA_F16) | STRATA_DTYPE_BIT(STRATA_BF16) |
                             STRATA_DTYPE_BIT(STRATA_I32) | STRATA_DTYPE_BIT(STRATA_I64);
#if STRATA_GPU_HAS_GCN_ARCH_NAME
  std::snprintf(props.compute_capability, sizeof(props.compute_capability), "%.31s", p.gcnArchName);
#else
  std::snprintf(props.compute_capability, sizeof(props.compute_capability), "%d.%d", p.major, p.minor);
#endif
#if STRATA_GPU_HAS_PROP_UUID
  static_assert(sizeof(p.uuid) == sizeof(props.uuid));
  std::memcpy(props.uuid, &p.uuid, sizeof(props.uuid));
  props.flags |= STRATA_DEVICE_HAS_UUID;
#endif
  std::snprintf(props.pci_bus_id, sizeof(props.pci_bus_id), "%04x:%02x:%02x.0", static_cast<unsigned>(p.pciDomainID),
                static_cast<unsigned>(p.pciBusID), static_cast<unsigned>(p.pciDeviceID));
  d.multiprocessors = std::max(1, p.multiProcessorCount);

#if STRATA_GPU_HAS_MEMPOOLS
  int pools = 0;
  d.mempools = cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal) == cudaSuccess && pools != 0;
#endif
  if (cudaError_t e = cudaStreamCreateWithFlags(&d.default_stream.native, cudaStreamNonBlocking); e != cudaSuccess) {
    return runtime_failure(e, &d, "cudaStreamCreateWithFlags", error);
  }
  d.default_stream.device = &d;
  void* mapped = nullptr;
  if (cudaError_t e = cudaHostAlloc(&mapped, sizeof(DeviceFailure), cudaHostAllocMapped | cudaHostAllocPortable);
      e != cudaSuccess) {
    return runtime_failure(e, &d, "cudaHostAlloc (the failure record)", error);
  }
  d.failure = static_cast<DeviceFailure*>(mapped);
  std::memset(d.failure, 0, sizeof(DeviceFailure));
  void* device_view = nullptr;
  if (cudaError_t e = cudaHostGetDevicePointer(&device_view, mapped, 0); e != cudaSuccess) {
    return runtime_failure(e, &d, "cudaHostGetDevicePointer (the failure record)", error);
  }
  d.failure_device = static_cast<DeviceFailure*>(device_view);
  return STRATA_OK;
}

/// Why the runtime sees no device, with the driver library's own complaint
/// when it cannot even be loaded (the common case on a machine without a GPU).
std::string no_device_reason(cudaError_t e) {
  std::string why = describe(e);
#if defined(STRATA_GPU_HIP)
  if (access("/dev/kfd", F_OK) != 0) why += "; /dev/kfd does not exist (the amdgpu kernel driver is not loaded)";
#else
  if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD) == nullptr &&
      dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr) {
    const char* dl = dlerror();
    why += "; the CUDA driver library libcuda.so.1 cannot be loaded: ";
    why += dl != nullptr ? dl : "unknown dlopen error";
  }
#endif
  return why;
}

// ---- Probe, init, shutdown, device properties, kernels ---------------------------

}  // namespace

State::~State() {
  for (auto& d : devices) destroy_device(*d);
}

strata_status State::probe(strata_probe_args& args) {
  // Touches no driver. Whether a device exists is init's question; a
  // discrete GPU outranks every other build of the backend.
  args.score = 200;
  return STRATA_OK;
}

std::unique_ptr<State> State::init(strata_init_args& args) {
  try {
    plugin::check(check_options(args.options_json, args.error));
  } catch (const nlohmann::json::exception& e) {
    throw plugin::Refusal(STRATA_ERROR_INVALID_ARGUMENT, std::string("bad options: ") + e.what());
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    throw plugin::Refusal(STRATA_ERROR_NO_DEVICE, std::string(STRATA_GPU_API) + "GetDeviceCount: " +
                                                      no_device_reason(e));
  }
  if (count == 0) throw plugin::Refusal(STRATA_ERROR_NO_DEVICE, "the driver reports 0 devices");
  auto st = std::make_unique<State>();  // on a throw, ~State releases the devices opened so far
  st->host = args.host;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    auto d = std::make_unique<Device>();
    d->index = static_cast<int>(st->devices.size());
    if (strata_status s = open_device(*d, ordinal, args.error); s != STRATA_OK) {
      destroy_device(*d);
      plugin::check(s);
    }
    st->devices.push_back(std::move(d));
  }
  return st;
}

const plugin::KernelTable& State::kernels(Device&) const { return kernel_table(); }

// ---- strata.native_handles v1 ----------------------------------------------------

strata_status State::buffer_pointer(Device&, strata_native_args& a) {
  a.handle = static_cast<void*>(a.buffer);  // buffers are device pointers
  a.api = STRATA_GPU_API;
  return STRATA_OK;
}

strata_status State::stream_handle(Device& d, strata_native_args& a) {
  a.handle = static_cast<void*>(native_stream(d, a.stream));
  a.api = STRATA_GPU_API;
  return STRATA_OK;
}

#if STRATA_GPU_HAS_NCCL
// strata.native_handles, chained to strata.collectives on NCCL (collectives.cpp).
const strata_extension* State::extensions() { return plugin::native_handles<State>(&kCollectives.base); }
#else
// The HIP build has no collectives (no RCCL).
const strata_extension* State::extensions() { return plugin::native_handles<State>(); }
#endif

/// What decides probe and init here (ABI 2.1, section 10): the CUDA and
/// NVIDIA driver variables (device visibility, ordering), ROCm's for the
/// HIP build of these sources, and NCCL's library.
const char* const State::kProbeEnvironment[] = {"CUDA_*", "NVIDIA_*", "NCCL_*", "HIP_*",  "ROCR_*", "HSA_*",
                                               "AMD_*",  "GPU_*",    "ROCM_*", "STRATA_NCCL_LIBRARY", nullptr};

}  // namespace strata::gpu

/// The plugin's one exported symbol (strata_plugin.h): the table
/// make_api<State>() builds from the class's members.
STRATA_PLUGIN_BACKEND(strata::gpu::State)
