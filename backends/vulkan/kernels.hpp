// kernels.hpp — how a kernel becomes a strata_kernel_fn, and the helpers the
// kernel sources share: operand checks, dim merging, parameter upload,
// pipeline lookup and dispatch, reading small tensors back to the host.
//
// A kernel is a struct:
//
//   struct Exp {
//     static constexpr const char* name = "exp";
//     static strata_status run(Call& call);
//   };
//
// `entry<K>` is what the table holds: it resolves device and stream, locks
// the stream, validates every descriptor against its buffer, and turns
// exceptions into statuses (nothing throws across the ABI).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <mutex>
#include <new>
#include <strata/plugin/strata_plugin.hpp>
#include <string>
#include <vector>

#include "device.hpp"
#include "shaders/opcodes.h"

namespace strata::vulkan {

using plugin::fail;

/// One kernel invocation, with the stream locked.
struct Call {
  Device& device;
  Stream& stream;
  const char* op;
  const strata_tensor* in;
  int32_t n_in;
  const strata_tensor& out;
  const strata_attrs* attrs;
  strata_error* error;
};

/// "f32[2, 3]" for messages.
std::string describe(const strata_tensor& t);
/// "f32" / "f16" / ... as used in shader variant names.
inline const char* tag(strata_dtype d) { return plugin::dtype_name(d); }
/// Buffer device address of a descriptor's first element.
VkDeviceAddress address_of(const strata_tensor& t);
/// Checks a descriptor against its buffer and the kernels' 32-bit indexing.
strata_status check_tensor(const Call& call, const strata_tensor& t, const char* role);

/// Looks up the pipeline `shader`/`op` and records its dispatch with `push`.
strata_status launch(Call& call, const char* shader, int32_t op, const void* push, uint32_t push_bytes, uint32_t gx,
                     uint32_t gy = 1, uint32_t gz = 1);
/// Copies `bytes` of parameters for the next dispatch to the stream's
/// parameter arena; *address receives their device address.
strata_status params(Call& call, const void* data, size_t bytes, VkDeviceAddress* address);

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

/// Waits for the stream and copies the elements of `t` to the host in
/// row-major order (for the host-side checks of indices and divisors).
strata_status read_elements(Call& call, const strata_tensor& t, std::vector<int64_t>& values);

/// Records an elementwise dispatch (eltwise.comp variant `shader`).
strata_status launch_eltwise(Call& call, const char* shader, int32_t op, const strata_tensor& y,
                             const strata_tensor* inputs, int n_inputs, uint64_t fill_bits = 0);

template <class K>
strata_status entry(const strata_kernel_context* ctx, const strata_tensor* inputs, int32_t n_inputs,
                    const strata_tensor* outputs, int32_t n_outputs, const strata_attrs* attrs,
                    strata_error* error) noexcept {
  try {
    if (ctx == nullptr || ctx->struct_size < sizeof(strata_kernel_context)) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: missing kernel context", K::name);
    }
    Device* device = device_of(ctx->state, ctx->device_index, error);
    if (device == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    if (n_outputs != 1 || outputs == nullptr || (n_inputs > 0 && inputs == nullptr)) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: expected 1 output, got %d (%s)", K::name, n_outputs,
                  device->id().c_str());
    }
    Stream& stream = stream_of(*device, ctx->stream);
    std::lock_guard lock(stream.mutex());
    Call call{*device, stream, K::name, inputs, n_inputs, outputs[0], attrs, error};
    if (strata_status s = check_tensor(call, outputs[0], "output"); s != STRATA_OK) return s;
    for (int32_t k = 0; k < n_inputs; ++k) {
      if (strata_status s = check_tensor(call, inputs[k], "input"); s != STRATA_OK) return s;
    }
    return K::run(call);
  } catch (const std::bad_alloc&) {
    return fail(error, STRATA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", K::name);
  } catch (const std::exception& e) {
    return fail(error, STRATA_ERROR_INTERNAL, "%s: %s", K::name, e.what());
  } catch (...) {
    return fail(error, STRATA_ERROR_INTERNAL, "%s: unknown exception", K::name);
  }
}

/// A device's kernel table, assembled from every kernel file's registration.
class KernelTable {
 public:
  /// The table for a device storing the dtypes of `dtype_mask`.
  explicit KernelTable(uint32_t dtype_mask) : dtype_mask_(dtype_mask) {}
  /// Whether the device stores `dtype`.
  bool stores(strata_dtype dtype) const { return (dtype_mask_ & STRATA_DTYPE_BIT(dtype)) != 0; }
  /// Adds (op, "in,in->out") when the device stores every dtype involved.
  template <class K>
  void add(std::initializer_list<strata_dtype> ins, strata_dtype out, uint32_t flags) {
    std::string sig;
    for (strata_dtype d : ins) {
      if (!stores(d)) return;
      sig += (sig.empty() ? "" : ",");
      sig += tag(d);
    }
    if (!stores(out)) return;
    sig += "->";
    sig += tag(out);
    signatures_.push_back(std::move(sig));
    entries_.push_back(plugin::kernel(K::name, signatures_.back().c_str(), &entry<K>, flags));
  }
  const std::vector<strata_kernel_entry>& entries() const { return entries_; }

 private:
  uint32_t dtype_mask_;
  std::deque<std::string> signatures_;  // stable c_str() pointers
  std::vector<strata_kernel_entry> entries_;
};

inline constexpr strata_dtype kAllTypes[] = {STRATA_F32, STRATA_F16, STRATA_I32, STRATA_I64, STRATA_BOOL};
inline constexpr strata_dtype kFloatTypes[] = {STRATA_F32, STRATA_F16};
inline constexpr strata_dtype kNumericTypes[] = {STRATA_F32, STRATA_F16, STRATA_I32, STRATA_I64};
inline constexpr uint32_t kStrided = STRATA_KERNEL_STRIDED_INPUTS;

void register_elementwise_kernels(KernelTable& table);
void register_reduce_kernels(KernelTable& table);
void register_matmul_kernels(KernelTable& table);
void register_index_kernels(KernelTable& table);

/// The table of `device`, built on first use and kept until the process exits.
const std::vector<strata_kernel_entry>& kernel_table(Device& device);

/// The INT attribute "dim" resolved against `rank`; -1 when absent or out of range.
int dim_attr(const strata_attrs* attrs, int rank);

}  // namespace strata::vulkan
