// activation.cu — the backward kernels of the activations (relu, sigmoid,
// tanh, gelu) and the fused AMP non-finite check and unscale (docs/ops.md,
// "Backward ops" and amp_unscale). Float dtypes; 16-bit compute in f32.
#include <cmath>

#include "eltwise.cuh"
#include "kernels.hpp"
#include "pointwise_ops.hpp"

namespace strata::gpu {
namespace {

using ops::ReluBackward;  // fused_elementwise's vocabulary: shared with its interpreter
using ops::SigmoidBackward;
using ops::TanhBackward;
/// grad * (Phi(x) + x phi(x)).
struct GeluBackward {
  template <class C>
  __device__ C operator()(C g, C x) const {
    const C cdf = C(0.5) * (C(1) + ::erf(x * C(0.70710678118654752440)));
    const C pdf = C(0.39894228040143267794) * ::exp(C(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};


constexpr const char* kRelu = STRATA_OP_RELU_BACKWARD;
constexpr const char* kSigmoid = STRATA_OP_SIGMOID_BACKWARD;
constexpr const char* kTanh = STRATA_OP_TANH_BACKWARD;
constexpr const char* kGelu = STRATA_OP_GELU_BACKWARD;

/// y = grad * inv_scale over a compact grad; found_inf = 1 when any grad
/// element is NaN or infinite (found_inf was zeroed before the launch).
template <class T>
__global__ void amp_unscale_kernel(const T* grad, const float* inv_scale, T* y, float* found_inf, int64_t n) {
  using C = compute_t<T>;
  const C scale = static_cast<C>(*inv_scale);
  bool bad = false;
  STRATA_GRID_STRIDE(i, n) {
    const C g = Scalar<T>::load(grad[i]);
    bad = bad || !(g - g == C(0));  // NaN and +-inf give NaN
    y[i] = Scalar<T>::store(g * scale);
  }
  if (bad) *found_inf = 1.0f;  // a benign race: every writer writes 1
}

template <class T>
struct AmpUnscaleKernel {
  static constexpr const char* op = STRATA_OP_AMP_UNSCALE;
  using inputs = Types<T, float>;
  using outputs = Types<T, float>;
  static strata_status run(Launch& l) {
    const int64_t n = element_count(l.in(0));
    float* found = data<float>(l.out(1));
    if (cudaError_t e = cudaMemsetAsync(found, 0, sizeof(float), l.stream); e != cudaSuccess) {
      return runtime_failure(e, &l.device, op, l.error);
    }
    amp_unscale_kernel<T><<<grid_for(n, l.device), kThreads, 0, l.stream>>>(
        data<const T>(l.in(0)), data<const float>(l.in(1)), data<T>(l.out(0)), found, n);
    return launch_result(l, "amp_unscale_kernel");
  }
};

template <class T>
void add_float(plugin::KernelTable& t) {
  // Backward ops and amp_unscale see compact operands of equal shape.
  add<BinaryKernel<kRelu, T, ReluBackward>>(t, 0);
  add<BinaryKernel<kSigmoid, T, SigmoidBackward>>(t, 0);
  add<BinaryKernel<kTanh, T, TanhBackward>>(t, 0);
  add<BinaryKernel<kGelu, T, GeluBackward>>(t, 0);
  add<AmpUnscaleKernel<T>>(t, 0);
}

}  // namespace

void register_activation_kernels(plugin::KernelTable& t) {
  for_each_type(FloatTypes{}, [&]<class T>() { add_float<T>(t); });
}

}  // namespace strata::gpu
