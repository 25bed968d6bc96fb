// kernel_call.cpp — running a prepared call on its device: the output checks,
// the kernel for its dtype signature (one call, or a group of calls in one
// kernel call), then the op's decomposition or the CPU fallback when there is
// no kernel. The workspace service a kernel calls back into lives here too.
#include "runtime/dispatch/dispatch_internal.hpp"
#include "runtime/dispatch/op_census.hpp"

#include "base/config_internal.hpp"
#include "runtime/device/device_table.hpp"
#include "runtime/dispatch/abi_attrs.hpp"
#include "runtime/tensor/host_data.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <strata/plugin/strata_plugin.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace strata::detail {

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

}  // namespace

namespace {

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
  kc.host = dev.plugin.host;
  kc.workspace = &workspace_service;
  kc.host_context = &host_context;
  kc.error = &err;
  kc.attr_missing = &attr_missing_service;
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
  // Compact copies of the inputs the kernel needs compact (rarely any: only
  // those are constructed).
  boost::container::static_vector<Tensor, kMaxInputs> compacted;
  // Not value-initialised: only the fields up to each rank are read.
  std::array<strata_tensor, kMaxInputs + kMaxOutputs> desc;
  std::array<const strata_tensor*, kMaxInputs + kMaxOutputs> desc_ptr;
  auto describe_into = [](const Tensor& t, strata_tensor& d) { describe_tensor(*t.impl(), d); };
  for (int k = 0; k < call.n_inputs; ++k) {
    const Tensor& t = call.in(k);
    bool compact = (kernel.flags & STRATA_KERNEL_STRIDED_INPUTS) == 0 && !t.impl()->is_contiguous();
    if (compact) compacted.push_back(compact_copy(dev, t));
    describe_into(compact ? compacted.back() : t, desc[static_cast<size_t>(k)]);
    desc_ptr[static_cast<size_t>(k)] = &desc[static_cast<size_t>(k)];
  }
  outputs.tensors.clear();
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

/// The census entry of `call` (op_census.hpp), out of execute()'s way.
[[gnu::cold, gnu::noinline]] void note_census(const OpCall& call, DeviceRecord& dev) {
  census_note(call, dev, call_key(call), call_signature(call));
}

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
  for (int k = 0; k < results.size(); ++k) {
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

}  // namespace

void throw_kernel_failure(DeviceRecord& dev, strata_status status, const strata_error& err, const std::string& what) {
  const std::string message = message_text(err);
  if (status == STRATA_ERROR_INVALID_ARGUMENT) throw ValueError(what + ": " + message);
  if (status == STRATA_ERROR_OUT_OF_MEMORY) throw OutOfMemoryError(what + ": " + message);
  if (status == STRATA_ERROR_DEVICE_LOST || status == STRATA_ERROR_DEFERRED) dev.check(status, err, what);
  throw DeviceError(what + ": kernel failed: " + message);
}

namespace {

/// The DTypeError for result `k` of `call`, of a dtype `dev` does not store.
[[noreturn, gnu::cold, gnu::noinline]] void refuse_result(const DeviceRecord& dev, const OpCall& call, int k) {
  throw_cannot_store(dev, call.outputs[static_cast<size_t>(k)].dtype, call.describe());
}

}  // namespace

OpResult execute(OpCall& call, bool& decomposed) {
  DeviceRecord& dev = device_record(call.device);
  const OpDef& op = *call.op;
  if (op_census_open()) [[unlikely]] note_census(call, dev);

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
  bool declined = false;
  if (const KernelSlot* kernel = dev.find_kernel(op.id, call_key(call))) {
    OpResult results;
    strata_error err;
    err.struct_size = sizeof(err);
    err.message[0] = '\0';
    strata_status status = run_kernel(dev, *kernel, call, results, err);
    if (status == STRATA_OK) return results;
    if (status != STRATA_ERROR_UNSUPPORTED) throw_kernel_failure(dev, status, err, call.describe());
    reason = "the kernel declined the call (" + message_text(err) + ")";
    declined = true;
  } else {
    reason = "no kernel for signature " + call_signature(call);
    if (dev.kernel_excluded(op.name, call_key(call))) {
      reason += " (set aside by devices." + dev.id + ".exclude_kernels)";
    }
  }
  if (op.kind == OpKind::composite && op.decompose != nullptr) {
    decomposed = true;  // its primitives recorded themselves
    if (declined) {
      record_declined(dev, op.name, call_signature(call), reason);
      if (op_census_open()) [[unlikely]] census_declined(call, dev, call_signature(call));
    }
    OpResult parts;
    try {
      for (Tensor& t : op.decompose(call)) parts.push_back(std::move(t));
    } catch (const DTypeError& e) {  // an intermediate the device cannot hold (a bool mask on an f32-only device)
      throw DTypeError(std::string(e.what()) + " (in the decomposition of " + std::string(op.name) + ", which " +
                       dev.id + " has no kernel for)");
    }
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

}  // namespace strata::detail
