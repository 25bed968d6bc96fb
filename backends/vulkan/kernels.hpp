// kernels.hpp — how a kernel becomes a strata_kernel_fn, and the helpers the
// kernel sources share: operand checks, dim merging, parameter upload,
// pipeline lookup and dispatch.
//
// A kernel family is a struct with a `run`:
//
//   struct Unary {
//     static strata_status run(Call& call);  // call.spec->code is the opcode
//   };
//
// and is registered per op with the op's name constant (strata_ops.h) and
// the shader opcode it runs with: `reg.add<Unary>(STRATA_OP_EXP, OP_EXP,
// {d}, d)`. The op, the opcode and the signature become an OpSpec, handed to
// the host as the entry's user_data and back to the kernel in
// call->user_data, so no kernel ever maps op names to opcodes itself.
// `entry<K>` is what the table holds: it checks the call struct and its
// operands against the signature (the SDK's plugin::operands_match),
// resolves device and stream, validates every descriptor against its
// buffer, locks the stream's recording batch and turns exceptions into
// statuses (nothing throws across the ABI).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <span>
#include <stdexcept>
#include <strata/plugin/kernel.hpp>
#include <strata/plugin/strata_plugin.hpp>
#include <string>

#include "device.hpp"
#include "shaders/opcodes.h"

namespace strata::vulkan {

using plugin::describe;
using plugin::fail;

/// What a kernel entry carries in its user_data: the op it implements and
/// the shader's opcode (specialization constant 0). `id` names the op in
/// deferred-error records, which shaders write without knowing names.
struct OpSpec {
  static constexpr int kMaxOperands = 14;  // fused_elementwise's most: 8 inputs, 6 outputs (fused_ops.hpp)
  const char* op;                         // a STRATA_OP_* constant
  int32_t code;
  uint32_t id;
  /// The entry's signature: n_in inputs' dtypes, then the n_out outputs'
  /// (prepare checks each call against it: plugin::operands_match).
  int32_t n_in;
  int32_t n_out;
  std::array<strata_dtype, kMaxOperands> dtypes;

  const strata_dtype* in() const { return dtypes.data(); }
  const strata_dtype* out() const { return dtypes.data() + n_in; }
};
/// The interned spec of (op, code, signature): one per entry for the process.
const OpSpec& op_spec(const char* op, int32_t code, std::span<const strata_dtype> ins,
                      std::span<const strata_dtype> outs);
/// The spec with `id`, or nullptr.
const OpSpec* op_spec_by_id(uint32_t id);

/// One kernel invocation, with the stream's batch locked.
struct Call {
  Device& device;
  Stream& stream;
  const OpSpec& spec;
  const char* op;  // spec.op: "strata::add"
  const strata_tensor* const* in;
  int32_t n_in;
  const strata_tensor& out;       // output 0
  const strata_kernel_call& abi;  // attributes (plugin::attr_* take it); all outputs
  strata_error* error;

  const strata_tensor& input(int k) const { return *in[k]; }
  const strata_tensor& output(int m) const { return *abi.outputs[m]; }
};

/// "f32" / "f16" / ... as used in shader variant names.
inline const char* tag(strata_dtype d) { return plugin::dtype_name(d); }
/// Buffer device address of a descriptor's first element.
VkDeviceAddress address_of(const strata_tensor& t);

/// Looks up the pipeline `shader`/`call.spec.code` and records its dispatch
/// with `push`.
strata_status launch(Call& call, const char* shader, const void* push, uint32_t push_bytes, uint32_t gx,
                     uint32_t gy = 1, uint32_t gz = 1);
/// The same with an explicit opcode (scatter_add's preceding copy).
strata_status launch_op(Call& call, const char* shader, int32_t op, const void* push, uint32_t push_bytes, uint32_t gx,
                        uint32_t gy = 1, uint32_t gz = 1);
/// Copies `bytes` of parameters for the next dispatch to the stream's
/// parameter arena; *address receives their device address.
strata_status params(Call& call, const void* data, size_t bytes, VkDeviceAddress* address);
/// INVALID_ARGUMENT unless the call has `n` inputs.
strata_status expect_inputs(const Call& call, int n);

/// Work groups per dimension of one dispatch: Vulkan's guaranteed minimum of
/// maxComputeWorkGroupCount, so it holds on every device.
inline constexpr uint32_t kMaxGroups = 65535;
/// Work groups for `n` items of `group` each, capped at kMaxGroups: the
/// shaders loop (grid stride) over the rest.
uint32_t groups_for(uint64_t n, uint32_t group);

/// Dims merged across operands: shape and per-operand strides, rank >= 1.
struct Merged {
  int rank = 0;
  std::array<int64_t, MAX_RANK> shape{};
  std::array<std::array<int64_t, MAX_RANK>, 4> strides{};
};
/// Drops size-1 dims and merges neighbours that are contiguous in every
/// operand. `strides[k]` are operand k's strides over `shape`.
Merged merge_dims(int rank, const int64_t* shape, const int64_t* const* strides, int operands);

/// Records an elementwise dispatch (eltwise.comp variant `shader`) of
/// opcode `op` over `n_inputs` inputs.
strata_status launch_eltwise(Call& call, const char* shader, int32_t op, const strata_tensor& y,
                             const strata_tensor* const* inputs, int n_inputs, uint64_t fill_bits = 0);

/// The INT attribute "dim" resolved against `rank`; -1 when absent or out of
/// range. Another kind throws std::invalid_argument (INVALID_ARGUMENT).
int dim_attr(const Call& call, int rank);

/// Validates the call struct and its operands and resolves device and
/// stream; the part of entry<K> that does not depend on K.
strata_status prepare(const strata_kernel_call& call, const OpSpec& spec, Device** device, Stream** stream);

template <class K>
strata_status entry(const strata_kernel_call* call) noexcept {
  // A call struct below 2.0's size has no error field we may write to.
  if (!plugin::large_enough(call, STRATA_KERNEL_CALL_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  const auto* spec = static_cast<const OpSpec*>(call->user_data);
  if (spec == nullptr) {
    return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: vulkan kernel called without its entry's user_data",
                call->op != nullptr ? call->op : "?");
  }
  return plugin::guarded(call->error, spec->op, [&]() -> strata_status {
    Device* device = nullptr;
    Stream* stream = nullptr;
    if (strata_status s = prepare(*call, *spec, &device, &stream); s != STRATA_OK) return s;
    Call c{*device, *stream, *spec, spec->op, call->inputs, call->n_inputs, *call->outputs[0], *call, call->error};
    try {
      // The host serialises calls per stream; this lock only keeps
      // stream_synchronize (any thread) off the batch being recorded.
      std::lock_guard lock(stream->mutex());
      return K::run(c);
    } catch (const std::invalid_argument& e) {  // plugin::attr_of_kind: an attribute of the wrong kind
      return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s)", e.what(), device->id().c_str());
    }
  });
}

/// Builds a device's kernel table: adds an entry when the device stores
/// every dtype of its signature.
class Registry {
 public:
  Registry(plugin::KernelTable& table, uint64_t dtype_mask) : table_(table), dtype_mask_(dtype_mask) {}
  bool stores(strata_dtype dtype) const { return (dtype_mask_ & STRATA_DTYPE_BIT(dtype)) != 0; }
  /// (op, "in,in->out") running K with shader opcode `code`.
  template <class K>
  void add(const char* op, int32_t code, std::initializer_list<strata_dtype> ins, strata_dtype out,
           uint32_t flags = STRATA_KERNEL_STRIDED_INPUTS) {
    add_entry(op, code, {ins.begin(), ins.size()}, {&out, 1}, flags, &entry<K>);
  }
  /// (op, "in,in->out,out"): several outputs.
  template <class K>
  void add(const char* op, int32_t code, std::span<const strata_dtype> ins, std::span<const strata_dtype> outs,
           uint32_t flags = STRATA_KERNEL_STRIDED_INPUTS) {
    add_entry(op, code, ins, outs, flags, &entry<K>);
  }

 private:
  void add_entry(const char* op, int32_t code, std::span<const strata_dtype> ins, std::span<const strata_dtype> outs,
                 uint32_t flags, strata_kernel_fn fn);
  plugin::KernelTable& table_;
  uint64_t dtype_mask_;
};

inline constexpr strata_dtype kAllTypes[] = {STRATA_F32, STRATA_F16, STRATA_I32, STRATA_I64, STRATA_BOOL};
inline constexpr strata_dtype kFloatTypes[] = {STRATA_F32, STRATA_F16};
inline constexpr strata_dtype kNumericTypes[] = {STRATA_F32, STRATA_F16, STRATA_I32, STRATA_I64};

void register_elementwise_kernels(Registry& reg);
void register_reduce_kernels(Registry& reg);
void register_matmul_kernels(Registry& reg);
void register_index_kernels(Registry& reg);
void register_random_kernels(Registry& reg);
void register_fused_kernels(Registry& reg);

/// The table of `device`, built on first use and kept until the process exits.
const plugin::KernelTable& kernel_table(const Device& device);

}  // namespace strata::vulkan
