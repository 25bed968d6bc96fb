// dispatch.cpp — op registry, kernel lookup, decomposition and fallback.
#include "abi_attrs.hpp"
#include "config_internal.hpp"
#include "device_record.hpp"
#include "dispatch_hooks.hpp"
#include "host_data.hpp"
#include "op.hpp"
#include "runtime_internal.hpp"
#include "plugin_host.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <strata/plugin/strata_plugin.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <vector>

namespace strata::detail {

namespace {

std::vector<const OpDef*>& registry() {
  static auto* ops = [] {  // never destroyed: ops outlive static teardown
    auto* v = new std::vector<const OpDef*>();
    v->reserve(kMaxOps);  // never reallocates (see kMaxOps)
    return v;
  }();
  return *ops;
}

constexpr std::string_view kCoreNamespace = "strata::";

/// The core's op names, for the configuration's "fallback.ops" and "amp"
/// lists (checked by the loader in the layer below, which cannot see the
/// registry). Plugin-defined ops are registered later and namespaced; the
/// loader leaves those alone.
std::vector<std::string> core_op_names() {
  std::vector<std::string> names;
  for (const OpDef* op : registry()) {
    if (op->plugin_op == nullptr) names.emplace_back(op->name);
  }
  return names;
}

[[maybe_unused]] const bool g_op_names_installed = (config::set_op_names_source(&core_op_names), true);

}  // namespace

const OpDef& define_op(OpDef def) {
  // Callers check both first (the core's ops are few and unique; a plugin's
  // register_op names what it refuses): what reaches here is a bug, thrown
  // rather than abort()ed so a plugin's init can never end the process.
  if (find_op(def.name) != nullptr) throw Error("op '" + std::string(def.name) + "' is defined twice");
  if (registry().size() >= kMaxOps) {
    throw Error("op '" + std::string(def.name) + "' does not fit the op table of " + std::to_string(kMaxOps) + " ops");
  }
  auto* stored = new OpDef(def);
  stored->id = static_cast<int>(registry().size());
  if (def.name.find("::") == std::string_view::npos) {
    stored->kernel_name_storage = std::string(kCoreNamespace) + std::string(def.name);
    stored->kernel_name = stored->kernel_name_storage;
  } else {
    stored->kernel_name = stored->name;
  }
  registry().push_back(stored);
  return *stored;
}

const std::vector<const OpDef*>& all_ops() { return registry(); }

const OpDef* find_op(std::string_view name) {
  for (const OpDef* op : registry()) {
    if (op->name == name) return op;
  }
  return nullptr;
}

const OpDef* find_kernel_op(std::string_view qualified) {
  if (qualified.starts_with(kCoreNamespace)) {
    std::string_view bare = qualified.substr(kCoreNamespace.size());
    if (bare.find("::") != std::string_view::npos) return nullptr;
    return find_op(bare);
  }
  if (qualified.find("::") == std::string_view::npos) return nullptr;
  return find_op(qualified);
}

namespace {
[[noreturn, gnu::cold]] void throw_rank_too_high(std::span<const int64_t> s) {
  throw ShapeError("result of rank " + std::to_string(s.size()) + " exceeds the maximum rank " +
                   std::to_string(STRATA_MAX_RANK) + " (shape " + shape_string(s) + ")");
}
}  // namespace

void OutputMeta::set_shape(std::span<const int64_t> s) {
  if (s.size() > STRATA_MAX_RANK) [[unlikely]] throw_rank_too_high(s);  // callers check first, to name the op
  rank = static_cast<int32_t>(s.size());
  std::copy(s.begin(), s.end(), shape.begin());
}

namespace {
const Attr* find_attr(const Attrs* attrs, std::string_view name) {
  if (attrs == nullptr) return nullptr;
  for (const Attr& a : *attrs) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

/// The attribute `name`, which must hold an integer (INT, BOOL, DTYPE or an
/// integral SCALAR) or, with `list`, INTS. Ops called by name (call_op) get
/// attributes from strangers, so the kind is checked.
const Attr& require_attr(const Attrs* attrs, std::string_view name, std::string_view op, bool list) {
  const Attr* a = find_attr(attrs, name);
  if (a == nullptr) throw Error(std::string(op) + ": missing attribute '" + std::string(name) + "'");
  const bool ok = list ? a->kind == STRATA_ATTR_INTS
                       : a->kind == STRATA_ATTR_INT || a->kind == STRATA_ATTR_BOOL || a->kind == STRATA_ATTR_DTYPE ||
                             (a->kind == STRATA_ATTR_SCALAR && a->scalar_dtype != STRATA_F64);
  if (!ok) {
    throw ValueError(std::string(op) + ": attribute '" + std::string(name) + "' must be " +
                     (list ? "INTS" : "an integer (INT)") + ", got " + plugin::attr_kind_name(a->kind));
  }
  return *a;
}
}  // namespace

const Attr* OpCall::attr(std::string_view name) const { return find_attr(attrs, name); }

int64_t GradContext::attr_int(std::string_view name) const {
  return require_attr(attrs, name, "derivative rule", false).i;
}

const std::vector<int64_t>& GradContext::attr_ints(std::string_view name) const {
  return require_attr(attrs, name, "derivative rule", true).ints;
}

int64_t OpCall::attr_int(std::string_view name) const { return require_attr(attrs, name, describe(), false).i; }

const std::vector<int64_t>& OpCall::attr_ints(std::string_view name) const {
  return require_attr(attrs, name, describe(), true).ints;
}

int64_t OpCall::attr_dim(std::string_view name, int64_t rank) const {
  int64_t d = attr_int(name);
  if (d < 0 || d >= std::max<int64_t>(rank, 1)) {
    throw IndexError(describe() + ": attribute '" + std::string(name) + "' = " + std::to_string(d) +
                     " is not a dimension of a rank-" + std::to_string(rank) + " input (0 to " +
                     std::to_string(std::max<int64_t>(rank, 1) - 1) + ")");
  }
  return d;
}

const std::vector<int64_t>& OpCall::attr_dims(std::string_view name, int64_t rank) const {
  const std::vector<int64_t>& dims = attr_ints(name);
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] < 0 || dims[k] >= rank || (k > 0 && dims[k] <= dims[k - 1])) {
      throw IndexError(describe() + ": attribute '" + std::string(name) + "' = " + shape_string(dims) +
                       " is not a strictly increasing list of dimensions of a rank-" + std::to_string(rank) +
                       " input");
    }
  }
  return dims;
}

DType OpCall::attr_dtype(std::string_view name) const {
  int64_t v = attr_int(name);
  if (!is_dtype_value(v)) {
    throw ValueError(describe() + ": attribute '" + std::string(name) + "' = " + std::to_string(v) +
                     " is not a dtype of the op set");
  }
  return static_cast<DType>(v);
}

std::string OpCall::describe() const {
  std::string s(op != nullptr ? op->name : "?");
  s += "(";
  for (int k = 0; k < n_inputs; ++k) {
    if (k > 0) s += ", ";
    s += type_string(in(k));
  }
  s += ")";
  if (device.valid()) s += " on " + device.str();
  return s;
}

namespace {

/// A compact row-major copy for a kernel that needs one: through the
/// device's own copy kernel when it takes strided inputs, else through the
/// host (a minimal backend's copy may not, and must not recurse into itself).
Tensor compact_copy(DeviceRecord& dev, const Tensor& t) {
  static const OpDef* copy_op = find_op("copy");
  DType dt = t.impl()->dtype;
  uint64_t key = signature_key(&dt, 1, &dt, 1);
  const KernelSlot* copy = dev.find_kernel(copy_op->id, key);
  if (copy != nullptr && (copy->flags & STRATA_KERNEL_STRIDED_INPUTS) != 0) return t.contiguous();
  std::vector<uint8_t> bytes = read_bytes(t);
  return upload_bytes(bytes.data(), dt, t.impl()->sizes(), dev, "copy");
}

[[noreturn, gnu::cold, gnu::noinline]] void throw_result_too_large(const OpCall& call, int k) {
  const OutputMeta& out = call.outputs[static_cast<size_t>(k)];
  int64_t numel = 0;
  throw ShapeError(call.describe() + ": result " + std::to_string(k) + " is too large: " +
                   shape_problem(out.sizes(), out.dtype, numel));
}

/// Output k of `call`, new on `dev`. execute() checked its element count
/// and dtype first, so that a refusal names the whole call.
Tensor new_output(DeviceRecord& dev, const OpCall& call, int k) {
  const OutputMeta& out = call.outputs[static_cast<size_t>(k)];
  return make_tensor(dev, out.dtype, out.sizes(), call.op->name);
}

/// The host side of one kernel call: what the workspace service needs, and
/// the blocks it handed out (released when the kernel returns).
struct KernelHostContext {
  DeviceRecord* device;
  const OpCall* call;
  std::vector<std::pair<strata_buffer, size_t>> workspace;
};

strata_status workspace_service(strata_workspace_args* args) noexcept {
  if (args == nullptr || args->struct_size < STRATA_WORKSPACE_ARGS_MIN_SIZE || args->call == nullptr ||
      args->call->struct_size < STRATA_KERNEL_CALL_MIN_SIZE || args->call->host_context == nullptr) {
    return STRATA_ERROR_INVALID_ARGUMENT;
  }
  auto* ctx = static_cast<KernelHostContext*>(args->call->host_context);
  try {
    size_t block = 0;
    strata_buffer b = ctx->device->allocator.allocate(args->bytes, &block, args->call->stream);
    ctx->workspace.emplace_back(b, block);
    args->buffer = b;
    return STRATA_OK;
  } catch (const std::exception& e) {
    if (args->error != nullptr) {
      std::snprintf(args->error->message, sizeof(args->error->message), "workspace of %zu bytes: %s", args->bytes,
                    e.what());
    }
    return dynamic_cast<const OutOfMemoryError*>(&e) != nullptr ? STRATA_ERROR_OUT_OF_MEMORY : STRATA_ERROR_INTERNAL;
  }
}

/// Calls `kernel` on `dev` for `call`'s op and attributes with the operand
/// descriptors given (one call's, or a group's end to end), under the
/// device's issue lock. Returns the plugin's status. Inlined: the one-call
/// path (run_kernel) is every eager op's.
[[gnu::always_inline]] inline strata_status call_kernel(DeviceRecord& dev, const KernelSlot& kernel, const OpCall& call,
                          const strata_tensor* const* inputs, int n_inputs, const strata_tensor* const* outputs,
                          int n_outputs, strata_error& err) {
  AttrViews attrs(call.attrs);
  KernelHostContext host_context{&dev, &call, {}};
  strata_kernel_call kc;
  kc.struct_size = sizeof(kc);
  kc.op = call.op->kernel_name.data();  // NUL-terminated: a literal or a std::string
  kc.op_version = call.op->version;
  kc.state = dev.plugin.state;
  kc.device = dev.index;
  kc.stream = dev.stream;
  kc.user_data = kernel.user_data;
  kc.inputs = inputs;
  kc.n_inputs = n_inputs;
  kc.outputs = outputs;
  kc.n_outputs = n_outputs;
  kc.attrs = attrs.data();
  kc.n_attrs = attrs.count();
  kc.host = &host_api();
  kc.workspace = &workspace_service;
  kc.host_context = &host_context;
  kc.error = &err;
  strata_status status;
  {
    DeviceRecord::IssueLock lock(dev);
    status = kernel.fn(&kc);
  }
  // Stream-ordered: the workspace goes back tagged with the kernel's stream,
  // so later work on that stream may reuse it at once.
  for (const auto& [buffer, bytes] : host_context.workspace) dev.allocator.release(buffer, bytes, dev.stream);
  return status;
}

/// Builds descriptors and runs one kernel. Returns the plugin's status.
strata_status run_kernel(DeviceRecord& dev, const KernelSlot& kernel, OpCall& call, OpResult& outputs,
                         strata_error& err) {
  dev.ensure_alive();
  std::array<Tensor, kMaxInputs> compacted;  // only for inputs the kernel needs compact
  // Not value-initialised: only the fields up to each rank are read.
  std::array<strata_tensor, kMaxInputs + kMaxOutputs> desc;
  std::array<const strata_tensor*, kMaxInputs + kMaxOutputs> desc_ptr;
  auto describe_into = [](const Tensor& t, strata_tensor& d) { describe_tensor(*t.impl(), d); };
  for (int k = 0; k < call.n_inputs; ++k) {
    const Tensor& t = call.in(k);
    bool compact = (kernel.flags & STRATA_KERNEL_STRIDED_INPUTS) == 0 && !t.impl()->is_contiguous();
    if (compact) compacted[static_cast<size_t>(k)] = compact_copy(dev, t);
    describe_into(compact ? compacted[static_cast<size_t>(k)] : t, desc[static_cast<size_t>(k)]);
    desc_ptr[static_cast<size_t>(k)] = &desc[static_cast<size_t>(k)];
  }
  outputs.count = 0;
  for (int k = 0; k < call.n_outputs; ++k) {
    const Tensor& preset = call.preset[static_cast<size_t>(k)];
    outputs.push_back(preset.defined() ? preset : new_output(dev, call, k));
    size_t at = static_cast<size_t>(call.n_inputs + k);
    describe_into(outputs[k], desc[at]);
    desc_ptr[at] = &desc[at];
  }
  return call_kernel(dev, kernel, call, desc_ptr.data(), call.n_inputs, desc_ptr.data() + call.n_inputs,
                     call.n_outputs, err);
}

/// `sink(inputs, n_inputs, outputs, n_outputs)` over `call`'s signature:
/// its inputs' dtypes and its outputs' (as the shape rule set them).
template <class Sink>
[[gnu::always_inline]] inline auto with_dtypes(const OpCall& call, Sink&& sink) {
  std::array<DType, kMaxInputs> in;  // only the first n_inputs / n_outputs are read
  std::array<DType, kMaxOutputs> out;
  for (int k = 0; k < call.n_inputs; ++k) in[static_cast<size_t>(k)] = call.in(k).impl()->dtype;
  for (int k = 0; k < call.n_outputs; ++k) out[static_cast<size_t>(k)] = call.outputs[static_cast<size_t>(k)].dtype;
  return sink(in.data(), call.n_inputs, out.data(), call.n_outputs);
}

/// The kernel-table key of `call`'s signature.
[[gnu::always_inline]] inline uint64_t call_key(const OpCall& call) { return with_dtypes(call, signature_key); }

std::string call_signature(const OpCall& call) { return with_dtypes(call, signature_string); }

/// Runs the call on the CPU plugin and moves the results back.
OpResult run_on_cpu(OpCall& call, DeviceRecord& dev, const std::string& reason) {
  std::string signature = call_signature(call);
  DeviceRecord* cpu = cpu_device();
  if (cpu == nullptr || cpu == &dev) {
    throw DeviceError(call.describe() + ": " + reason + ", and the CPU plugin " +
                      (cpu == nullptr ? "is not loaded" : "has no kernel either") + " to fall back to");
  }
  record_fallback(dev, call.op->name, signature, reason);
  InternalWork internal;  // the op is recorded once, on its own device, by dispatch_call
  OpCall on_cpu = call;
  on_cpu.device = cpu->device();
  on_cpu.preset = {};
  for (int k = 0; k < call.n_inputs; ++k) on_cpu.inputs[static_cast<size_t>(k)] = call.in(k).to(on_cpu.device);
  OpResult results = dispatch_call(on_cpu);
  for (int k = 0; k < results.count; ++k) {
    const Tensor& preset = call.preset[static_cast<size_t>(k)];
    if (preset.defined()) {  // results written into an existing (strided) tensor
      write_bytes(preset, read_bytes(results[k]));
      results[k] = preset;
    } else {
      results[k] = results[k].to(dev.device());
    }
  }
  return results;
}

/// The error of a kernel's failure `status` (neither OK nor UNSUPPORTED),
/// naming `what` (the call).
[[noreturn, gnu::cold, gnu::noinline]] void throw_kernel_failure(DeviceRecord& dev, strata_status status,
                                                                 const strata_error& err, const std::string& what) {
  const std::string message = message_text(err);
  if (status == STRATA_ERROR_INVALID_ARGUMENT) throw ValueError(what + ": " + message);
  if (status == STRATA_ERROR_OUT_OF_MEMORY) throw OutOfMemoryError(what + ": " + message);
  if (status == STRATA_ERROR_DEVICE_LOST || status == STRATA_ERROR_DEFERRED) dev.check(status, err, what);
  throw DeviceError(what + ": kernel failed: " + message);
}

/// The DTypeError for result `k` of `call`, of a dtype `dev` does not store.
[[noreturn, gnu::cold, gnu::noinline]] void refuse_result(const DeviceRecord& dev, const OpCall& call, int k) {
  throw_cannot_store(dev, call.outputs[static_cast<size_t>(k)].dtype, call.describe());
}

OpResult execute(OpCall& call, bool& decomposed) {
  DeviceRecord& dev = device_record(call.device);
  const OpDef& op = *call.op;

  bool outputs_empty = true;
  for (int k = 0; k < call.n_outputs; ++k) {
    // Results only of dtypes the device stores (check_stores): refused here,
    // before any kernel, decomposition or CPU fallback, so that the error
    // names the call and a fallback never brings back what the device cannot hold.
    if (!dev.stores(call.out(k).dtype)) [[unlikely]] refuse_result(dev, call, k);
    // The element count, checked: a shape rule (a plugin's too) may give a
    // result no tensor can have; the error names the call.
    const int64_t n = fitting_numel(call.out(k).sizes(), call.out(k).dtype);
    if (n < 0) [[unlikely]] throw_result_too_large(call, k);
    outputs_empty = outputs_empty && n == 0;
  }
  bool inputs_empty = false;
  for (int k = 0; k < call.n_inputs; ++k) inputs_empty = inputs_empty || call.in(k).numel() == 0;
  if (outputs_empty || inputs_empty) {
    // Empty tensors never reach a kernel (docs/ops.md).
    if (!outputs_empty && op.empty_passthrough >= 0) {
      OpResult out;
      out.push_back(call.in(op.empty_passthrough).clone());
      return out;
    }
    if (!outputs_empty && !op.empty_fill) {
      throw ShapeError(call.describe() + ": the op is undefined on an empty tensor");
    }
    OpResult out;
    for (int k = 0; k < call.n_outputs; ++k) {
      const Tensor& preset = call.preset[static_cast<size_t>(k)];
      out.push_back(preset.defined() ? preset : new_output(dev, call, k));
      auto sizes = call.out(k).sizes();
      if (!outputs_empty) out[k] = full(Shape(sizes.begin(), sizes.end()), *op.empty_fill, {call.out(k).dtype, call.device});
    }
    return out;
  }

  std::string reason;
  if (const KernelSlot* kernel = dev.find_kernel(op.id, call_key(call))) {
    OpResult results;
    strata_error err;
    err.struct_size = sizeof(err);
    err.message[0] = '\0';
    strata_status status = run_kernel(dev, *kernel, call, results, err);
    if (status == STRATA_OK) return results;
    if (status != STRATA_ERROR_UNSUPPORTED) throw_kernel_failure(dev, status, err, call.describe());
    reason = "the kernel declined the call (" + message_text(err) + ")";
  } else {
    reason = "no kernel for signature " + call_signature(call);
  }
  if (op.kind == OpKind::composite && op.decompose != nullptr) {
    decomposed = true;  // its primitives recorded themselves
    OpResult parts;
    for (Tensor& t : op.decompose(call)) parts.push_back(std::move(t));
    // Preset outputs (an in-place op such as adam_step) receive the results.
    for (int k = 0; k < call.n_outputs; ++k) {
      Tensor preset = call.preset[static_cast<size_t>(k)];
      if (!preset.defined()) continue;
      preset.copy_(parts[k]);
      parts[k] = preset;
    }
    return parts;
  }
  if (fallback_policy(op.id) == FallbackPolicy::error) {
    throw DeviceError(call.describe() + ": " + reason + " on " + dev.id + " (fallback policy \"error\")");
  }
  return run_on_cpu(call, dev, reason);
}

}  // namespace

void check_same_device(const OpCall& call) {
  for (int k = 1; k < call.n_inputs; ++k) {
    const Tensor& t = call.in(k);
    if (t.defined() && t.impl()->device != call.in(0).impl()->device) {
      throw DeviceError(call.describe() + ": expected all tensors on one device, found " + call.in(0).device().str() +
                        " (input 0) and " + t.device().str() + " (input " + std::to_string(k) +
                        "); move one explicitly with to()");
    }
  }
}

namespace {

/// The DTypeError for a complex input `k` of an op without a complex definition.
[[noreturn, gnu::cold, gnu::noinline]] void refuse_complex(const OpCall& call, int k) {
  throw DTypeError(call.describe() + ": " + std::string(call.op->name) + " has no complex definition (input " +
                   std::to_string(k) + " is " + std::string(dtype_name(call.in(k).dtype())) +
                   "); docs/complex.md lists the ops that take complex tensors");
}

/// A storage-less input: the placeholder a recorded node keeps for an operand
/// whose values its VJP declared it does not read (OpDef::vjp_reads_inputs),
/// reaching an op — a derivative rule that breaks its declaration.
[[noreturn, gnu::cold, gnu::noinline]] void refuse_placeholder(const OpCall& call, int k) {
  throw Error("internal: " + std::string(call.op->name) + ": input " + std::to_string(k) + " (" +
              type_string(call.in(k)) + ") has no storage: a derivative rule read the values of an operand its op " +
              "does not keep (OpDef::vjp_reads_inputs / vjp_reads_outputs)");
}

/// Every input has values, and complex inputs reach only the ops defined for
/// them (OpDef::takes_complex).
void check_inputs(const OpCall& call) {
  for (int k = 0; k < call.n_inputs; ++k) {
    if (!call.in(k).defined()) continue;
    const TensorImpl& t = *call.in(k).impl();
    if (t.storage == nullptr) [[unlikely]] refuse_placeholder(call, k);
    if (!call.op->takes_complex && is_complex(t.dtype)) [[unlikely]] refuse_complex(call, k);
  }
}

/// Before a call runs: complex inputs refused, autocast, the op's shape rule.
inline void prepare_dispatch(OpCall& call, const DispatchHooks& hooks) {
  check_inputs(call);
  if (hooks.before_prepare != nullptr) hooks.before_prepare(call);
  if (call.op->prepare != nullptr) call.op->prepare(call);
}

/// A preset output (copy_'s destination, an optimizer update's state) was
/// written in place: its version moves once the op ran.
inline void bump_presets(const OpCall& call) {
  for (int k = 0; k < call.n_outputs; ++k) {
    if (call.preset[static_cast<size_t>(k)].defined()) bump_version(call.preset[static_cast<size_t>(k)]);
  }
}

/// After a call ran: its presets' versions move, then (before recording,
/// which saves the new versions) the after hook sees it, unless it was
/// decomposed: a decomposition's primitives were checked and recorded
/// themselves. An op that failed wrote nothing and gets neither.
inline void finish_dispatch(const OpCall& call, OpResult& result, bool decomposed, const DispatchHooks& hooks) {
  bump_presets(call);
  if (!decomposed && hooks.after != nullptr) hooks.after(call, result, true);
}

OpResult dispatch_untraced(OpCall& call) {
  const DispatchHooks& hooks = dispatch_hooks();
  prepare_dispatch(call, hooks);
  OpResult result = execute(call, call.decomposed);
  finish_dispatch(call, result, call.decomposed, hooks);
  return result;
}

constinit DispatchHooks g_hooks{};
}  // namespace

const DispatchHooks& dispatch_hooks() { return g_hooks; }
void set_dispatch_hooks(const DispatchHooks& hooks) { g_hooks = hooks; }

OpResult dispatch_precomputed(OpCall& call, OpResult precomputed) {
  const DispatchHooks& hooks = dispatch_hooks();
  prepare_dispatch(call, hooks);
  if (hooks.after != nullptr) hooks.after(call, precomputed, false);
  return precomputed;
}

OpResult dispatch_call(OpCall& call) {
  if (g_hooks.around != nullptr) return g_hooks.around(call, dispatch_untraced);
  return dispatch_untraced(call);
}

// --- Groups of calls (dispatch_group) ------------------------------------------

namespace {

/// The elements [lo, hi) of a storage that an operand of call `call` may touch.
struct Extent {
  const Storage* storage;
  int64_t lo, hi;
  size_t call;
};

void add_extent(std::vector<Extent>& out, const Tensor& t, size_t call) {
  const TensorImpl& i = *t.impl();
  int64_t lo = i.offset, hi = i.offset + 1;
  for (int32_t d = 0; d < i.rank; ++d) {
    const int64_t reach = (i.shape[static_cast<size_t>(d)] - 1) * i.strides[static_cast<size_t>(d)];
    (reach < 0 ? lo : hi) += reach;
  }
  out.push_back({i.storage.get(), lo, hi, call});
}

/// Whether an operand of one call shares memory with an operand of another
/// (a call's outputs are usually its own inputs: that is not an overlap).
/// One sweep over the extents sorted by storage and start, keeping the
/// furthest end seen and the furthest end of any other call.
bool extents_overlap(std::span<const OpCall> calls) {
  std::vector<Extent> extents;
  extents.reserve(calls.size() * static_cast<size_t>(kMaxInputs + kMaxOutputs));
  for (size_t c = 0; c < calls.size(); ++c) {
    const OpCall& call = calls[c];
    for (int k = 0; k < call.n_inputs; ++k) add_extent(extents, call.in(k), c);
    for (int k = 0; k < call.n_outputs; ++k) add_extent(extents, call.preset[static_cast<size_t>(k)], c);
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return a.storage != b.storage ? std::less<const Storage*>()(a.storage, b.storage) : a.lo < b.lo;
  });
  const Storage* storage = nullptr;
  int64_t furthest = 0, furthest_other = 0;  // ends: of any call, of calls other than `leader`
  size_t leader = 0;
  for (const Extent& e : extents) {
    if (e.storage != storage) {
      storage = e.storage;
      furthest = furthest_other = std::numeric_limits<int64_t>::min();
      leader = e.call;
    }
    if (e.lo < (e.call == leader ? furthest_other : furthest)) return true;
    if (e.call == leader) {
      furthest = std::max(furthest, e.hi);
    } else if (e.hi > furthest) {
      furthest_other = furthest;  // the old leader's end is the furthest of the rest
      furthest = e.hi;
      leader = e.call;
    } else {
      furthest_other = std::max(furthest_other, e.hi);
    }
  }
  return false;
}

/// extents_overlap, first ruling out the usual case cheaply: no storage is
/// shared by two calls (then nothing overlaps), found by sorting storage
/// pointers alone.
bool calls_overlap(std::span<const OpCall> calls) {
  std::vector<std::pair<const Storage*, size_t>> storages;  // (storage, call), once per call
  storages.reserve(calls.size() * static_cast<size_t>(kMaxInputs));
  for (size_t c = 0; c < calls.size(); ++c) {
    const OpCall& call = calls[c];
    const size_t first = storages.size();
    auto add = [&](const Tensor& t) {
      const Storage* s = t.impl()->storage.get();
      for (size_t k = first; k < storages.size(); ++k) {
        if (storages[k].first == s) return;
      }
      storages.emplace_back(s, c);
    };
    for (int k = 0; k < call.n_inputs; ++k) add(call.in(k));
    for (int k = 0; k < call.n_outputs; ++k) add(call.preset[static_cast<size_t>(k)]);
  }
  std::sort(storages.begin(), storages.end(),
            [](const auto& a, const auto& b) { return std::less<const Storage*>()(a.first, b.first); });
  for (size_t k = 1; k < storages.size(); ++k) {
    if (storages[k].first == storages[k - 1].first) return extents_overlap(calls);  // shared: look closer
  }
  return false;
}

/// The kernel that may run `call` in a group on `dev`: its operands are
/// non-empty, its outputs preset, compact and on `dev`, and the kernel for
/// its signature declares STRATA_KERNEL_GROUPED. nullptr otherwise.
const KernelSlot* group_kernel(const OpCall& call, DeviceRecord& dev) {
  for (int k = 0; k < call.n_inputs; ++k) {
    if (call.in(k).impl()->numel == 0) return nullptr;
  }
  for (int k = 0; k < call.n_outputs; ++k) {
    const Tensor& preset = call.preset[static_cast<size_t>(k)];
    if (!preset.defined()) return nullptr;
    const TensorImpl& p = *preset.impl();
    const OutputMeta& meta = call.outputs[static_cast<size_t>(k)];
    if (p.storage->device != &dev || p.dtype != meta.dtype || p.numel == 0 || !p.is_contiguous() ||
        !std::ranges::equal(p.sizes(), meta.sizes())) {
      return nullptr;
    }
  }
  const KernelSlot* kernel = dev.find_kernel(call.op->id, call_key(call));
  return kernel != nullptr && (kernel->flags & STRATA_KERNEL_GROUPED) != 0 ? kernel : nullptr;
}

/// Runs `calls` (at least two, one op, one kernel of `dev`, every output
/// preset) as one grouped kernel call: all inputs end to end, then all
/// outputs. Returns the plugin's status.
strata_status run_group_kernel(DeviceRecord& dev, const KernelSlot& kernel, std::span<OpCall* const> calls,
                               strata_error& err) {
  dev.ensure_alive();
  const OpCall& first = *calls.front();
  const size_t n_in = static_cast<size_t>(first.n_inputs), n_out = static_cast<size_t>(first.n_outputs);
  const size_t count = calls.size() * (n_in + n_out);
  // Not value-initialised: only the fields up to each rank are read.
  std::unique_ptr<strata_tensor[]> desc(new strata_tensor[count]);
  std::vector<const strata_tensor*> desc_ptr(count);
  std::vector<Tensor> compacted;  // inputs the kernel needs compact
  const bool strided = (kernel.flags & STRATA_KERNEL_STRIDED_INPUTS) != 0;
  for (size_t c = 0; c < calls.size(); ++c) {
    for (size_t k = 0; k < n_in; ++k) {
      const Tensor* t = &calls[c]->inputs[k];
      if (!strided && !t->impl()->is_contiguous()) t = &compacted.emplace_back(compact_copy(dev, *t));
      const size_t at = c * n_in + k;
      describe_tensor(*t->impl(), desc[at]);
      desc_ptr[at] = &desc[at];
    }
    for (size_t k = 0; k < n_out; ++k) {
      const size_t at = calls.size() * n_in + c * n_out + k;
      describe_tensor(*calls[c]->preset[k].impl(), desc[at]);
      desc_ptr[at] = &desc[at];
    }
  }
  const int total_in = static_cast<int>(calls.size() * n_in), total_out = static_cast<int>(calls.size() * n_out);
  return call_kernel(dev, kernel, first, desc_ptr.data(), total_in, desc_ptr.data() + total_in, total_out, err);
}

/// Calls of one device and one grouped kernel.
struct Group {
  DeviceRecord* dev;
  const KernelSlot* kernel;
  std::vector<OpCall*> calls;
};

}  // namespace

void dispatch_group(std::span<OpCall> calls) {
  if (calls.empty()) return;
  const DispatchHooks& hooks = dispatch_hooks();
  // Inside a trace, or with recorded inputs, each call goes through dispatch
  // as it is (traced, recorded) in turn.
  bool one_by_one = calls.size() == 1;
  for (size_t c = 0; !one_by_one && c < calls.size(); ++c) {
    const OpCall& call = calls[c];
    one_by_one = hooks.wants_external != nullptr &&
                 hooks.wants_external({call.inputs.data(), static_cast<size_t>(call.n_inputs)});
  }
  if (one_by_one) {
    for (OpCall& call : calls) dispatch_call(call);
    return;
  }
  for (OpCall& call : calls) {
    if (!call.op->groupable) throw Error(call.describe() + ": the op does not take groups");
    prepare_dispatch(call, hooks);
  }
  // Every call is valid and counts as run from here on: should a kernel fail
  // part way (or a hook throw), the calls not yet finished still move their
  // presets' versions, since any of them may have been written.
  size_t finished = 0;
  struct BumpUnfinished {
    std::span<OpCall> calls;
    const size_t& finished;
    ~BumpUnfinished() {
      for (size_t c = finished; c < calls.size(); ++c) bump_presets(calls[c]);
    }
  } unfinished{calls, finished};
  std::vector<Group> groups;
  std::vector<OpCall*> singles;
  for (OpCall& call : calls) {
    DeviceRecord& dev = device_record(call.device);
    const KernelSlot* kernel = group_kernel(call, dev);
    if (kernel == nullptr) {
      singles.push_back(&call);
      continue;
    }
    auto it = std::ranges::find_if(groups, [&](const Group& g) { return g.dev == &dev && g.kernel == kernel; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{&dev, kernel, {}});
    it->calls.push_back(&call);
  }
  std::vector<OpResult> results(calls.size());
  std::vector<uint8_t> decomposed(calls.size(), 0);
  auto run_single = [&](OpCall& call) {
    const auto c = static_cast<size_t>(&call - calls.data());
    bool d = false;
    results[c] = execute(call, d);
    decomposed[c] = d ? 1 : 0;
  };
  const bool grouping = std::ranges::any_of(groups, [](const Group& g) { return g.calls.size() > 1; });
  if (grouping && calls_overlap(calls)) {
    // Calls that share memory see one another's writes: in order, one by one.
    for (OpCall& call : calls) run_single(call);
  } else {
    for (const Group& g : groups) {
      if (g.calls.size() == 1) {
        run_single(*g.calls.front());
        continue;
      }
      strata_error err;
      err.struct_size = sizeof(err);
      err.message[0] = '\0';
      const strata_status status = run_group_kernel(*g.dev, *g.kernel, g.calls, err);
      if (status == STRATA_ERROR_UNSUPPORTED) {
        for (OpCall* call : g.calls) run_single(*call);  // each as if alone: kernel, decomposition, fallback
        continue;
      }
      if (status != STRATA_OK) {
        throw_kernel_failure(*g.dev, status, err,
                             g.calls.front()->describe() + " and " + std::to_string(g.calls.size() - 1) +
                                 " more calls of a group");
      }
      for (OpCall* call : g.calls) {
        OpResult& r = results[static_cast<size_t>(call - calls.data())];
        for (int k = 0; k < call->n_outputs; ++k) r.push_back(call->preset[static_cast<size_t>(k)]);
      }
    }
    for (OpCall* call : singles) run_single(*call);
  }
  while (finished < calls.size()) {
    const size_t c = finished++;
    finish_dispatch(calls[c], results[c], decomposed[c] != 0, hooks);
  }
}

namespace {
void prepare_call(OpCall& call, const OpDef& op, std::span<const Tensor> inputs, const Attrs* attrs) {
  call.op = &op;
  call.attrs = attrs;
  call.n_outputs = op.n_outputs;
  if (op.n_inputs == 0) {
    // Creation ops (fill, arange, the random draws) take no tensor at all:
    // they are called through their own functions, which give the shape.
    throw Error(std::string(op.name) + ": creates its output from a shape and attributes and takes no input tensor; "
                                       "call it through its own function (strata::full, strata::arange, "
                                       "strata::randn, ...), not by name with inputs");
  }
  if (static_cast<int>(inputs.size()) != op.n_inputs) {
    throw Error(std::string(op.name) + ": expected " + std::to_string(op.n_inputs) + " input" +
                (op.n_inputs == 1 ? "" : "s") + ", got " + std::to_string(inputs.size()));
  }
  int k = 0;
  for (const Tensor& t : inputs) {
    if (!t.defined()) throw Error(std::string(op.name) + ": input " + std::to_string(k) + " is an undefined tensor");
    call.inputs[static_cast<size_t>(k++)] = t;
  }
  call.n_inputs = k;
  call.device = call.in(0).impl()->device;
  check_same_device(call);
}
}  // namespace

std::vector<Tensor> dispatch(const OpDef& op, std::initializer_list<Tensor> inputs, const Attrs* attrs) {
  OpCall call;
  prepare_call(call, op, {inputs.begin(), inputs.size()}, attrs);
  return dispatch_call(call).to_vector();
}

Tensor dispatch1(const OpDef& op, std::initializer_list<Tensor> inputs, const Attrs* attrs) {
  OpCall call;
  prepare_call(call, op, {inputs.begin(), inputs.size()}, attrs);
  return std::move(dispatch_call(call)[0]);
}

Tensor dispatch_creation(const OpDef& op, Device device, DType dtype, std::span<const int64_t> shape,
                         const Attrs& attrs) {
  OpCall call;
  call.op = &op;
  call.device = device;
  call.n_inputs = 0;
  call.out().dtype = dtype;
  checked_numel(op.name, shape, dtype);
  call.out().set_shape(shape);
  call.attrs = &attrs;
  return std::move(dispatch_call(call)[0]);
}

OpResult dispatch_span(const OpDef& op, std::span<const Tensor> inputs, const Attrs* attrs) {
  OpCall call;
  prepare_call(call, op, inputs, attrs);
  return dispatch_call(call);
}

}  // namespace strata::detail
