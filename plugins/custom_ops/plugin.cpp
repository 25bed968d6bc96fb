// plugin.cpp — the custom_ops plugin's table: manifest, lifecycle, its one
// device and that device's memory, and the registration of its ops.
//
// Why a device of its own. The plugin exists for its ops (swiglu.cpp), whose
// kernels it adds to the CPU plugin's devices with host->register_kernels.
// But the Strata loader refuses a plugin whose init reports no device
// ("the plugin reports no devices", core/src/runtime/plugins/plugin_loader.cpp) and retires
// the ops it registered, so the plugin serves one small device, custom_ops:0:
// host memory (Blocks from operator new), the two ops' kernels, and
// strata::fill and strata::copy so that tensors can be created on it and
// moved to and from it; every other op run there falls back to the CPU
// plugin under the default policy, counted like any fallback. It reports
// type CPU with probe score 10, so the runtime never picks it as the default
// device while cpu:0 (score 50) is there: cpu:0 stays where programs run,
// custom_ops:0 is used only when asked for by name.
#include "common.hpp"
#include "swiglu.hpp"

#include <strata/plugin/backend.hpp>
#include <strata/plugin/options.hpp>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace custom_ops {
namespace {

using strata::plugin::dtype_size;
using strata::plugin::fail;
using strata::plugin::guarded;

/// The plugin: what init received, and the backend class make_api<Plugin>()
/// turns into the C table (strata/plugin/backend.hpp: the SDK checks struct
/// sizes, the state and the device index before a member runs, and turns
/// exceptions into statuses). One device, custom_ops:0; no streams.
struct Plugin {
  static constexpr const char* kName = kPluginName;
  static constexpr const char* kVendor = "Strata project (example third-party plugin)";
  static constexpr const char* kVersion = "1.0.0";
  static const char* const kProbeEnvironment[];
  struct Device {};

  const strata_host_api* host = nullptr;
  Device device0;

  Plugin() = default;
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;
  ~Plugin();  // shutdown

  static strata_status probe(strata_probe_args& args);
  static std::unique_ptr<Plugin> init(strata_init_args& args);
  int32_t device_count() const { return 1; }
  Device& device(int32_t) { return device0; }
  strata_device_props props(Device&) const;
  const strata::plugin::KernelTable& kernels(Device&) const;
  strata_status alloc(Device&, strata_alloc_args& args);
  void free(Device&, strata_alloc_args& args);
  strata_status copy(Device&, strata_copy_args& args);
};

/// The live state, for the kernels' check that a call is this plugin's
/// (is_own_state); null before init and after shutdown.
std::atomic<Plugin*> g_live{nullptr};
/// The host's services, for log() (set by init; plugins are never unloaded).
const strata_host_api* g_host = nullptr;

void log(strata_log_level level, const std::string& message) {
  strata::plugin::log(g_host, level, kPluginName, message.c_str());
}

strata::plugin::KernelTable& own_kernels();
strata::plugin::KernelTable& cpu_kernels();

}  // namespace

strata_status Plugin::probe(strata_probe_args& args) {
  // Plain C++ on the host: runs anywhere. 10 ("software device"): below the
  // CPU plugin's 50, so custom_ops:0 never becomes the default device.
  args.score = 10;
  return STRATA_OK;
}

std::unique_ptr<Plugin> Plugin::init(strata_init_args& args) {
  using strata::plugin::Refusal;
  const strata_host_api* host = args.host;
  if (host == nullptr || host->struct_size < STRATA_HOST_API_MIN_SIZE || host->register_op == nullptr ||
      host->call_op == nullptr || host->register_kernels == nullptr || host->find_extension == nullptr) {
    throw Refusal(STRATA_ERROR_INVALID_ARGUMENT,
                  "the host services (" + std::to_string(host != nullptr ? host->struct_size : size_t{0}) +
                      " bytes) lack register_op, call_op, register_kernels or find_extension (ABI 2.0 hosts have "
                      "all four in " + std::to_string(STRATA_HOST_API_MIN_SIZE) + " bytes)");
  }
  // Refuses every key but "threads", which comes from per-device settings
  // (these kernels are single-threaded).
  (void)strata::plugin::Options(args.options_json, {"threads"});
  g_host = host;
  strata::plugin::check(register_swiglu_ops(host, args.error));
  // Kernels for the CPU plugin's devices. The CPU plugin may load after
  // this one: the host applies them to its devices whenever they open, and
  // the kernels look up its native handles only when they run.
  strata_kernel_registration reg{};
  reg.struct_size = sizeof(reg);
  reg.plugin_name = "cpu";
  reg.entries = cpu_kernels().data();
  reg.n_entries = static_cast<int32_t>(cpu_kernels().size());
  strata::plugin::check(host->register_kernels(&reg, args.error));
  (void)own_kernels();  // built now, not on a kernel-table query from another thread
  auto plugin = std::make_unique<Plugin>();
  plugin->host = host;
  g_live.store(plugin.get());
  log(STRATA_LOG_DEBUG, std::string("defined ") + kSwiglu + " and " + kSwigluBackward +
                            " with kernels for custom_ops:0 and the cpu plugin's devices");
  return plugin;
}

Plugin::~Plugin() {
  Plugin* self = this;
  g_live.compare_exchange_strong(self, nullptr);
}

// ---- the device -------------------------------------------------------------------------

strata_device_props Plugin::props(Device&) const {
  strata_device_props p{};
  p.struct_size = sizeof(p);
  std::snprintf(p.name, sizeof(p.name), "custom_ops host device (SwiGLU kernels in host memory)");
  p.type = STRATA_DEVICE_CPU;  // it is the CPU: never a default-device candidate ahead of cpu:0
  p.flags = STRATA_DEVICE_FREE_THREADED;  // kernels and copies share nothing; operator new is thread-safe
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  p.memory_bytes = pages > 0 && page_size > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size)
                                              : (uint64_t{1} << 30);
  p.dtype_mask = STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_F64) | STRATA_DTYPE_BIT(STRATA_I64) |
                 STRATA_DTYPE_BIT(STRATA_BOOL);
  p.compute_dtype_mask = STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_F64);
  std::snprintf(p.compute_capability, sizeof(p.compute_capability), "host");
  return p;
}

const strata::plugin::KernelTable& Plugin::kernels(Device&) const { return own_kernels(); }

// ---- memory -----------------------------------------------------------------------------

namespace {

constexpr std::align_val_t kAlignment{64};

/// The block behind `buffer`, checked to hold [offset, offset + bytes).
Block* checked_range(strata_copy_args& args, strata_buffer buffer, size_t offset, const char* which) {
  Block* block = block_of(buffer);
  if (block == nullptr) {
    fail(args.error, STRATA_ERROR_INVALID_ARGUMENT, "custom_ops: copy: the %s is not a custom_ops:0 buffer", which);
    return nullptr;
  }
  if (offset > block->bytes || args.bytes > block->bytes - offset) {
    fail(args.error, STRATA_ERROR_INVALID_ARGUMENT,
         "custom_ops: copy: %zu bytes at offset %zu of the %s run past its %zu bytes", args.bytes, offset, which,
         block->bytes);
    return nullptr;
  }
  return block;
}

}  // namespace

strata_status Plugin::alloc(Device&, strata_alloc_args& args) {
  auto* block = new (std::nothrow) Block{};
  unsigned char* data =
      block != nullptr ? static_cast<unsigned char*>(::operator new(args.bytes > 0 ? args.bytes : 1, kAlignment,
                                                                    std::nothrow))
                       : nullptr;
  if (data == nullptr) {
    delete block;
    return fail(args.error, STRATA_ERROR_OUT_OF_MEMORY, "custom_ops: alloc: cannot allocate %zu bytes on custom_ops:0",
                args.bytes);
  }
  block->bytes = args.bytes;
  block->data = data;
  args.buffer = reinterpret_cast<strata_buffer>(block);
  // Both memory kinds are host memory here; a PINNED_HOST block is its data.
  args.host_pointer = args.kind == STRATA_MEMORY_PINNED_HOST ? data : nullptr;
  return STRATA_OK;
}

void Plugin::free(Device&, strata_alloc_args& args) {
  Block* block = block_of(args.buffer);
  if (block == nullptr) {
    log(STRATA_LOG_ERROR, "free: a buffer that is not custom_ops:0's; ignored");
    return;
  }
  ::operator delete(block->data, kAlignment);
  block->magic = 0;
  delete block;
}

/// Synchronous: an ASYNC request completes before it returns, which the
/// ABI allows.
strata_status Plugin::copy(Device&, strata_copy_args& args) {
  if (args.bytes == 0) return STRATA_OK;
  switch (args.kind) {
    case STRATA_COPY_HOST_TO_DEVICE: {
      Block* dst = checked_range(args, args.dst, args.dst_offset, "destination");
      if (dst == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
      if (args.src_host == nullptr) return fail(args.error, STRATA_ERROR_INVALID_ARGUMENT, "custom_ops: copy: no host source");
      std::memcpy(dst->data + args.dst_offset, args.src_host, args.bytes);
      return STRATA_OK;
    }
    case STRATA_COPY_DEVICE_TO_HOST: {
      Block* src = checked_range(args, args.src, args.src_offset, "source");
      if (src == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
      if (args.dst_host == nullptr) return fail(args.error, STRATA_ERROR_INVALID_ARGUMENT, "custom_ops: copy: no host destination");
      std::memcpy(args.dst_host, src->data + args.src_offset, args.bytes);
      return STRATA_OK;
    }
    case STRATA_COPY_DEVICE_TO_DEVICE: {
      Block* dst = checked_range(args, args.dst, args.dst_offset, "destination");
      Block* src = dst != nullptr ? checked_range(args, args.src, args.src_offset, "source") : nullptr;
      if (src == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
      std::memmove(dst->data + args.dst_offset, src->data + args.src_offset, args.bytes);  // may overlap
      return STRATA_OK;
    }
    default:
      return fail(args.error, STRATA_ERROR_UNSUPPORTED, "custom_ops: copy: unknown copy kind %d",
                  static_cast<int>(args.kind));
  }
}

namespace {

// ---- strata::fill and strata::copy on custom_ops:0 ----------------------------------------

/// The operands of a fill or copy kernel, checked.
strata_status data_kernel_operands(const strata_kernel_call* c, int32_t n_inputs, std::array<unsigned char*, 2>& base) {
  if (!is_own_state(c->state) || c->device != 0) {
    return fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "custom_ops: %s: %s", c->op,
                is_own_state(c->state) ? "no such device (custom_ops serves custom_ops:0 only)"
                                       : "not this plugin's state (init did not run?)");
  }
  if (c->n_inputs != n_inputs || c->n_outputs != 1 || (n_inputs > 0 && c->inputs == nullptr) || c->outputs == nullptr) {
    return fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "custom_ops: %s: %d inputs and %d outputs, expected %d and 1",
                c->op, static_cast<int>(c->n_inputs), static_cast<int>(c->n_outputs), static_cast<int>(n_inputs));
  }
  for (int32_t k = 0; k <= n_inputs; ++k) {
    const strata_tensor* t = k < n_inputs ? c->inputs[k] : c->outputs[0];
    if (t == nullptr || t->struct_size < STRATA_TENSOR_MIN_SIZE || t->rank < 0 || t->rank > STRATA_MAX_RANK ||
        t->offset < 0 || dtype_size(t->dtype) == 0) {
      return fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "custom_ops: %s on custom_ops:0: malformed descriptor", c->op);
    }
    const char* role = k < n_inputs ? "input" : "output";
    if (strata_status st = operand_address(c, *t, Memory::own, role, &base[static_cast<size_t>(k)]); st != STRATA_OK) {
      return st;
    }
  }
  return STRATA_OK;
}

template <class T>
void fill_with(unsigned char* base, const strata_tensor& y, T value) {
  const int64_t n = strata::plugin::numel(y);
  for (int64_t i = 0; i < n; ++i) reinterpret_cast<T*>(base)[strided_index(y, i)] = value;
}

/// strata::fill: every element of y = the SCALAR attribute "value".
strata_status fill_kernel(const strata_kernel_call* c) noexcept {
  if (c == nullptr || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  return guarded(c->error, "custom_ops: strata::fill on custom_ops:0", [&]() -> strata_status {
    std::array<unsigned char*, 2> base{};
    if (strata_status st = data_kernel_operands(c, 0, base); st != STRATA_OK) return st;
    const strata_attr* v = strata::plugin::attr_of_kind(*c, "value", STRATA_ATTR_SCALAR);
    if (v == nullptr) {
      return fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "custom_ops: strata::fill on custom_ops:0: no attribute 'value'");
    }
    const bool real = v->scalar_dtype == STRATA_F64;
    const double f = real ? v->f : static_cast<double>(v->i);
    const int64_t i = real ? static_cast<int64_t>(v->f) : v->i;
    const strata_tensor& y = *c->outputs[0];
    switch (y.dtype) {
      case STRATA_F32: fill_with(base[0], y, static_cast<float>(f)); break;
      case STRATA_F64: fill_with(base[0], y, f); break;
      case STRATA_I64: fill_with(base[0], y, i); break;
      case STRATA_BOOL: fill_with(base[0], y, static_cast<unsigned char>(real ? f != 0.0 : i != 0)); break;
      default:
        return fail(c->error, STRATA_ERROR_UNSUPPORTED, "custom_ops: strata::fill on custom_ops:0: dtype %s",
                    strata::plugin::dtype_name(y.dtype));
    }
    return STRATA_OK;
  });
}

/// strata::copy: y[i] = x[i], both any strided view of one dtype and shape.
strata_status copy_kernel(const strata_kernel_call* c) noexcept {
  if (c == nullptr || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  return guarded(c->error, "custom_ops: strata::copy on custom_ops:0", [&]() -> strata_status {
    std::array<unsigned char*, 2> base{};
    if (strata_status st = data_kernel_operands(c, 1, base); st != STRATA_OK) return st;
    const strata_tensor& x = *c->inputs[0];
    const strata_tensor& y = *c->outputs[0];
    if (x.dtype != y.dtype || strata::plugin::numel(x) != strata::plugin::numel(y)) {
      return fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "custom_ops: strata::copy on custom_ops:0: %s into %s",
                  strata::plugin::describe(x).c_str(), strata::plugin::describe(y).c_str());
    }
    const size_t es = dtype_size(y.dtype);
    const int64_t n = strata::plugin::numel(y);
    for (int64_t i = 0; i < n; ++i) {
      std::memmove(base[1] + static_cast<size_t>(strided_index(y, i)) * es,
                   base[0] + static_cast<size_t>(strided_index(x, i)) * es, es);
    }
    return STRATA_OK;
  });
}

strata::plugin::KernelTable& own_kernels() {
  static strata::plugin::KernelTable* table = [] {
    auto* t = new strata::plugin::KernelTable();  // never freed: the host holds its entries until exit
    for (const char* dt : {"f32", "f64", "i64", "bool"}) {
      t->add(STRATA_OP_FILL, std::string("->") + dt, fill_kernel);
      t->add(STRATA_OP_COPY, std::string(dt) + "->" + dt, copy_kernel, STRATA_KERNEL_STRIDED_INPUTS);
    }
    add_swiglu_kernels(*t, Memory::own);
    return t;
  }();
  return *table;
}

strata::plugin::KernelTable& cpu_kernels() {
  static strata::plugin::KernelTable* table = [] {
    auto* t = new strata::plugin::KernelTable();
    add_swiglu_kernels(*t, Memory::cpu);
    return t;
  }();
  return *table;
}

}  // namespace

// Nothing in the environment decides what probe and init do (ABI 2.1,
// strata_plugin.h section 10): the host may keep its answer while the file
// and the options are unchanged.
const char* const Plugin::kProbeEnvironment[] = {nullptr};

bool is_own_state(strata_plugin_state state) {
  return state != nullptr && reinterpret_cast<Plugin*>(state) == g_live.load();
}

strata_status operand_address(const strata_kernel_call* call, const strata_tensor& t, Memory memory,
                              const char* role, unsigned char** out) {
  const char* op = call->op != nullptr ? call->op : "(no op)";
  int64_t last = t.offset;  // highest element index the view reaches
  for (int32_t d = 0; d < t.rank; ++d) {
    if (t.shape[d] < 0 || t.strides[d] < 0) {
      return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT, "custom_ops: %s: %s has a negative extent or stride",
                  op, role);
    }
    if (t.shape[d] > 0) last += (t.shape[d] - 1) * t.strides[d];
  }
  if (memory == Memory::own) {
    Block* block = block_of(t.buffer);
    if (block == nullptr) {
      return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT, "custom_ops: %s on custom_ops:0: %s is not a custom_ops:0 buffer",
                  op, role);
    }
    if (static_cast<uint64_t>(last + 1) * dtype_size(t.dtype) > block->bytes) {
      return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT,
                  "custom_ops: %s on custom_ops:0: %s (%s, offset %lld) reaches past its buffer of %zu bytes", op,
                  role, strata::plugin::describe(t).c_str(), static_cast<long long>(t.offset), block->bytes);
    }
    *out = block->data;
    return STRATA_OK;
  }
  // A CPU plugin's buffer: its address from that plugin's native handles.
  // Looked up per call: in init the CPU plugin may not have loaded yet.
  const strata_host_api* host = call->host;
  if (host == nullptr || host->struct_size < STRATA_HOST_API_MIN_SIZE || host->find_extension == nullptr) {
    return fail(call->error, STRATA_ERROR_UNSUPPORTED, "custom_ops: %s on cpu:%d: the kernel call carries no find_extension",
                op, static_cast<int>(call->device));
  }
  const strata_extension* e = host->find_extension("cpu", STRATA_EXT_NATIVE_HANDLES, STRATA_EXT_NATIVE_HANDLES_VERSION);
  if (e == nullptr || e->struct_size < sizeof(strata_ext_native_handles) ||
      reinterpret_cast<const strata_ext_native_handles*>(e)->buffer_pointer == nullptr) {
    return fail(call->error, STRATA_ERROR_UNSUPPORTED,
                "custom_ops: %s on cpu:%d: the cpu plugin offers no usable " STRATA_EXT_NATIVE_HANDLES
                " v1 extension (%s), so its buffers cannot be read",
                op, static_cast<int>(call->device), e == nullptr ? "find_extension returned NULL" : "struct too small");
  }
  const auto* handles = reinterpret_cast<const strata_ext_native_handles*>(e);
  strata_native_args na{};
  na.struct_size = sizeof(na);
  na.state = call->state;
  na.device = call->device;
  na.buffer = t.buffer;
  na.error = call->error;
  if (strata_status st = handles->buffer_pointer(&na); st != STRATA_OK) return st;  // the cpu plugin wrote why
  if (na.handle == nullptr || (na.api != nullptr && std::strcmp(na.api, "host") != 0)) {
    return fail(call->error, STRATA_ERROR_UNSUPPORTED,
                "custom_ops: %s on cpu:%d: the cpu plugin gave %s as a \"%s\" handle %p, not a host address", op,
                static_cast<int>(call->device), role, na.api != nullptr ? na.api : "(no api)", na.handle);
  }
  *out = static_cast<unsigned char*>(na.handle);
  return STRATA_OK;
}

}  // namespace custom_ops

/// The plugin's one exported symbol (strata_plugin.h): the table
/// make_api<Plugin>() builds from the class's members.
STRATA_PLUGIN_BACKEND(custom_ops::Plugin)
