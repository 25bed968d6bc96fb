// amp.cpp — amp_unscale: multiply a gradient by 1/scale and report whether
// it held a NaN or Inf, in one pass over memory (docs/ops.md, "amp_unscale").
#include "kernel.hpp"

#include <cmath>

namespace strata::cpu {
namespace {

/// Below this many elements the loop runs on one thread.
constexpr int64_t kParallelGrain = 1 << 15;

template <class T>
strata_status amp_unscale(const strata_kernel_context* ctx, const strata_tensor* in, int32_t n_in,
                          const strata_tensor* out, int32_t n_out, const strata_attrs*, strata_error* error) noexcept {
  const char* sig = Scalar<T>::name();
  if (n_in != 2 || n_out != 2) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "amp_unscale(%s): expected 2 inputs and 2 outputs, got %d and %d",
                sig, n_in, n_out);
  }
  if (in[0].dtype != Scalar<T>::dtype || out[0].dtype != Scalar<T>::dtype || in[1].dtype != STRATA_F32 ||
      out[1].dtype != STRATA_F32 || plugin::numel(in[1]) != 1) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                "amp_unscale(%s): expected (%s grad, f32 inv_scale of one element) -> (%s, f32)", sig, sig, sig);
  }
  // Compact operands (the kernel does not take strided inputs).
  const T* g = reinterpret_cast<const T*>(in[0].buffer) + in[0].offset;
  T* y = reinterpret_cast<T*>(out[0].buffer) + out[0].offset;
  using C = typename Scalar<T>::compute;  // f32 for f16/bf16/f32, f64 for f64
  const C inv = static_cast<C>(*(reinterpret_cast<const float*>(in[1].buffer) + in[1].offset));
  const int64_t n = plugin::numel(in[0]);
  int bad = 0;
  const int threads = n >= kParallelGrain ? kernel_threads(ctx) : 1;
#pragma omp parallel for num_threads(threads) reduction(| : bad) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    C v = Scalar<T>::load(g[i]);
    bad |= static_cast<int>(!std::isfinite(v));
    y[i] = Scalar<T>::store(v * inv);
  }
  *(reinterpret_cast<float*>(out[1].buffer) + out[1].offset) = bad != 0 ? 1.0f : 0.0f;
  return STRATA_OK;
}

template <class T>
void add_unscale(KernelTable& table) {
  std::string t = Scalar<T>::name();
  table.add("amp_unscale", t + ",f32->" + t + ",f32", &amp_unscale<T>, 0);
}

}  // namespace

void register_amp_kernels(KernelTable& table) {
  add_unscale<float>(table);
  add_unscale<double>(table);
  add_unscale<f16>(table);
  add_unscale<bf16>(table);
}

}  // namespace strata::cpu
