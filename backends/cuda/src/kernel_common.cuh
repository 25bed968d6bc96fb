// kernel_common.cuh — how a kernel implementation becomes a strata_kernel_fn,
// and what every kernel file shares: operand views, launch geometry, launch
// error checks.
//
// A kernel is an "Impl" struct:
//
//   struct AddF32 {
//     static constexpr const char* op = STRATA_OP_ADD;
//     using inputs = Types<float, float>;  // signature "f32,f32->f32"
//     using outputs = Types<float>;
//     static strata_status run(Launch& l);  // queues the work on l.stream
//   };
//
// `entry<Impl>` checks the call against the SDK's typed signature (struct
// size, operand counts, each descriptor's size, dtype and rank), finds the
// device, makes it current, runs
// the body, and turns a launch error (cudaGetLastError) into a status naming
// the kernel; nothing throws across the ABI. `add<Impl>(table)` registers it.
#pragma once

#include <strata/plugin/strata_ops.h>
#include <strata/plugin/strata_plugin.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

#include "dtypes.cuh"
#include "kernel_math.hpp"
#include "state.hpp"

namespace strata::gpu {

using plugin::fail;

/// A list of element types (plugin::TypeList): operand lists of an Impl, and
/// the dtypes a kernel template is registered for with for_each_type.
template <class... T>
using Types = plugin::TypeList<T...>;
using plugin::for_each_type;

using FloatTypes = Types<float, double, half_t, bfloat16_t>;
using NumericTypes = Types<float, double, half_t, bfloat16_t, int32_t, int64_t>;
using AllTypes = Types<float, double, half_t, bfloat16_t, int32_t, int64_t, bool8>;

/// What a kernel body gets.
struct Launch {
  const strata_kernel_call& call;
  Device& device;
  cudaStream_t stream;
  strata_error* error;

  const strata_tensor& in(int k) const { return *call.inputs[k]; }
  const strata_tensor& out(int k = 0) const { return *call.outputs[k]; }
};

/// Element pointer of a descriptor (offset applied).
template <class T>
T* data(const strata_tensor& t) {
  return reinterpret_cast<T*>(t.buffer) + t.offset;
}
/// The base pointer of a descriptor's buffer (offset not applied).
template <class T>
T* base(const strata_tensor& t) {
  return reinterpret_cast<T*>(t.buffer);
}

/// The iteration shape of a descriptor.
inline Shape shape_of(const strata_tensor& t) {
  Shape s{};
  s.rank = t.rank;
  for (int d = 0; d < t.rank; ++d) s.n[d] = t.shape[d];
  return s;
}
/// A descriptor as an operand of `base<T>(t)` (offset kept in the operand).
inline Operand operand_of(const strata_tensor& t) {
  Operand o{};
  o.offset = t.offset;
  for (int d = 0; d < t.rank; ++d) o.stride[d] = t.strides[d];
  return o;
}

inline int64_t element_count(const strata_tensor& t) { return plugin::numel(t); }

inline constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n items, at most 32 resident blocks'
/// worth per multiprocessor.
inline unsigned grid_for(int64_t n, const Device& d, int threads = kThreads) {
  const int64_t wanted = (n + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(d.multiprocessors) * 32;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, cap)));
}

/// After a launch: a launch error as a status naming the kernel and op.
strata_status launch_result(const Launch& l, const char* kernel);

/// Scratch memory on the call's stream (the host's workspace service).
strata_status workspace(const Launch& l, size_t bytes, void** out);

// ---- Entry ---------------------------------------------------------------------------

/// The operands of Impl (the SDK's typed spec, strata/plugin/kernel.hpp).
template <class Impl>
using SignatureOf = plugin::Signature<typename Impl::inputs, typename Impl::outputs>;

template <class Impl>
strata_status entry(const strata_kernel_call* call) noexcept {
  using Sig = SignatureOf<Impl>;
  if (!Sig::accepts(call)) [[unlikely]] {
    return Sig::refuse(call, Impl::op);
  }
  Device* d = device_of(call->state, call->device, call->error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (cudaError_t e = make_current(*d); e != cudaSuccess) return runtime_failure(e, d, Impl::op, call->error);
  return plugin::guarded(call->error, Impl::op, [&]() -> strata_status {
    Launch l{*call, *d, native_stream(*d, call->stream), call->error};
    return Impl::run(l);
  });
}

/// Registers Impl under its op and signature.
template <class Impl>
void add(plugin::KernelTable& table, uint32_t flags = STRATA_KERNEL_STRIDED_INPUTS) {
  table.add(Impl::op, SignatureOf<Impl>::text(), &entry<Impl>, flags);
}

}  // namespace strata::gpu
