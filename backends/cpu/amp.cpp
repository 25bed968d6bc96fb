// amp.cpp — amp_unscale: multiply a gradient by 1/scale and report whether
// it held a NaN or Inf, in one pass over memory (docs/ops.md, "amp_unscale").
#include "kernel.hpp"
#include "strided.hpp"

#include <atomic>
#include <cmath>

namespace strata::cpu {
namespace {

template <class T>
strata_status amp_unscale(const strata_kernel_call* call) noexcept {
  constexpr const char* op = STRATA_OP_AMP_UNSCALE;
  if (call == nullptr || call->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) [[unlikely]] {
    return refuse_small_call(call, op);
  }
  // (T grad, f32 inv_scale) -> (T, f32 found_inf)
  static constexpr strata_dtype kDtypes[] = {Scalar<T>::dtype, STRATA_F32, Scalar<T>::dtype, STRATA_F32};
  if (call->n_inputs != 2 || call->n_outputs != 2 || call->inputs == nullptr || call->outputs == nullptr ||
      !operand_ok(call->inputs[0], kDtypes[0]) || !operand_ok(call->inputs[1], kDtypes[1]) ||
      !operand_ok(call->outputs[0], kDtypes[2]) || !operand_ok(call->outputs[1], kDtypes[3])) [[unlikely]] {
    return refuse_operands(*call, op, kDtypes, 2, kDtypes + 2, 2);
  }
  const strata_tensor &grad = *call->inputs[0], &scale = *call->inputs[1];
  const strata_tensor &out = *call->outputs[0], &found = *call->outputs[1];
  strata_error* const error = call->error;
  if (plugin::numel(scale) != 1 || plugin::numel(found) != 1 || plugin::numel(out) != plugin::numel(grad)) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                "%s: expected (grad, inv_scale of one element) -> (grad's shape, one element), got (%s, %s) -> "
                "(%s, %s)",
                op, plugin::describe(grad).c_str(), plugin::describe(scale).c_str(), plugin::describe(out).c_str(),
                plugin::describe(found).c_str());
  }
  return run_guarded(error, op, [&] {
    // Compact operands (the kernel does not take strided inputs).
    const T* g = reinterpret_cast<const T*>(grad.buffer) + grad.offset;
    T* y = reinterpret_cast<T*>(out.buffer) + out.offset;
    using C = typename Scalar<T>::compute;  // f32 for f16/bf16/f32, f64 for f64
    const C inv = static_cast<C>(*(reinterpret_cast<const float*>(scale.buffer) + scale.offset));
    const int64_t n = plugin::numel(grad);
    std::atomic<bool> bad{false};
    parallel_for(n, kernel_threads(*call), [&](int64_t b, int64_t e) {
      int chunk_bad = 0;
      for (int64_t i = b; i < e; ++i) {
        C v = Scalar<T>::load(g[i]);
        chunk_bad |= static_cast<int>(!std::isfinite(v));
        y[i] = Scalar<T>::store(v * inv);
      }
      if (chunk_bad != 0) bad.store(true, std::memory_order_relaxed);
    });
    *(reinterpret_cast<float*>(found.buffer) + found.offset) = bad.load() ? 1.0f : 0.0f;
    return STRATA_OK;
  });
}

template <class T>
void add_unscale(plugin::KernelTable& table) {
  std::string t = Scalar<T>::name();
  table.add(STRATA_OP_AMP_UNSCALE, t + ",f32->" + t + ",f32", &amp_unscale<T>, 0, nullptr, STRATA_OP_VERSION);
}

}  // namespace

void register_amp_kernels(plugin::KernelTable& table) {
  for_each_type(FloatTypes{}, [&]<class T>() { add_unscale<T>(table); });
}

}  // namespace strata::cpu
