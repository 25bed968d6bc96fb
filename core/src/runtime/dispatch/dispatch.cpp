// dispatch.cpp — one op call from the public API to its results: the call
// assembled from inputs and attributes, then the steps every call takes
// (dispatch_internal.hpp: inputs checked, the before hook (autocast), the
// shape rule; execute (kernel_call.cpp); presets' versions and the after
// hook (recording)), and the hooks through which the autograd layer joins in.
#include "runtime/dispatch/dispatch_internal.hpp"

#include "runtime/dispatch/vmap_state.hpp"

#include "runtime/tensor/host_data.hpp"

#include <strata/error.hpp>

#include <string>
#include <vector>

namespace strata::detail {

void refuse_complex(const OpCall& call, int k) {
  throw DTypeError(call.describe() + ": " + std::string(call.op->name) + " has no complex definition (input " +
                   std::to_string(k) + " is " + std::string(dtype_name(call.in(k).dtype())) +
                   "); docs/complex.md lists the ops that take complex tensors");
}

void refuse_placeholder(const OpCall& call, int k) {
  throw Error("internal: " + std::string(call.op->name) + ": input " + std::to_string(k) + " (" +
              type_string(call.in(k)) + ") has no storage: a derivative rule read the values of an operand its op " +
              "does not keep (OpDef::vjp_reads_inputs / vjp_reads_outputs)");
}

namespace {

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

std::vector<VmapFrame>& vmap_frames() {
  thread_local std::vector<VmapFrame> frames;
  return frames;
}

const VmapFrame* find_vmap_frame(uint64_t level) {
  for (const VmapFrame& f : vmap_frames())
    if (f.level == level) return &f;
  return nullptr;
}

namespace {
constinit BatchedDispatch g_batched = nullptr;
}
void set_batched_dispatch(BatchedDispatch run) { g_batched = run; }
BatchedDispatch batched_dispatch() { return g_batched; }

std::string batching_kind(const OpDef& op) {
  if (op.batch != nullptr) return "own rule";
  if (op.plugin_batch != nullptr) return "plugin rule";
  if (op.batch_leading_dims) return "leading dims";
  switch (op.kind) {
    case OpKind::view:
      return "view function";
    case OpKind::join:
      return (op.tags & op_tag::autograd) != 0 ? "function" : "join function";
    case OpKind::transfer:
      return "join function";
    default:
      break;
  }
  if ((op.tags & op_tag::creation) != 0) return "creation";
  if ((op.tags & op_tag::pointwise) != 0) return "pointwise";
  if ((op.tags & op_tag::reduction) != 0) return "reduction";
  if ((op.tags & op_tag::along_dim) != 0) return "along dim";
  if (op.decompose != nullptr) return "decomposition";
  return "loop";
}

OpResult dispatch_call(OpCall& call) {
  // A batched operand (vmap): the op's batching rule runs the call on the
  // lanes; its own calls come back through here on unbatched tensors.
  if (const uint64_t level = top_batch_level(call); level != 0) [[unlikely]] {
    if (g_batched == nullptr) throw Error("internal: a batched tensor reached dispatch without the vmap layer");
    return g_batched(call, level);
  }
  if (g_hooks.around != nullptr) return g_hooks.around(call, dispatch_untraced);
  return dispatch_untraced(call);
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
  if (op.n_inputs < 0) {  // 1 to kMaxInputs (fused_elementwise)
    if (inputs.empty() || inputs.size() > static_cast<size_t>(kMaxInputs)) {
      throw Error(std::string(op.name) + ": expected 1 to " + std::to_string(kMaxInputs) + " inputs, got " +
                  std::to_string(inputs.size()));
    }
  } else if (static_cast<int>(inputs.size()) != op.n_inputs) {
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
