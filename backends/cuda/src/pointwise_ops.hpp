// pointwise_ops.hpp — the compute-type operations of the elementwise ops that
// strata::fused_elementwise's programs are made of, as __host__ __device__
// functors. unary.cu, binary.cu and activation.cu map them over tensors; the
// fused interpreter (fused_eval.hpp) applies them statement by statement, so
// a program gives the bits of its ops run one by one on this device.
// tests/gpu_math runs the host path (the C library's functions there, the
// device's libm on a GPU). C is float, double, int32_t or int64_t.
#pragma once

#include <math.h>  // ::exp & co. for float and double (host path)

#include "kernel_math.hpp"  // STRATA_HD

namespace strata::gpu::ops {

// Unary.
struct Neg { template <class C> STRATA_HD C operator()(C x) const { return -x; } };
struct Abs { template <class C> STRATA_HD C operator()(C x) const { return x < C(0) ? -x : x; } };
struct Sign {
  template <class C>
  STRATA_HD C operator()(C x) const {
    if (x != x) return x;  // NaN stays NaN
    return x > C(0) ? C(1) : (x < C(0) ? C(-1) : C(0));
  }
};
struct Relu {
  template <class C>
  STRATA_HD C operator()(C x) const {
    return x != x ? x : (x > C(0) ? x : C(0));
  }
};
struct Exp { template <class C> STRATA_HD C operator()(C x) const { return ::exp(x); } };
struct Log { template <class C> STRATA_HD C operator()(C x) const { return ::log(x); } };
struct Log1p { template <class C> STRATA_HD C operator()(C x) const { return ::log1p(x); } };
struct Expm1 { template <class C> STRATA_HD C operator()(C x) const { return ::expm1(x); } };
struct Sqrt { template <class C> STRATA_HD C operator()(C x) const { return ::sqrt(x); } };
struct Sin { template <class C> STRATA_HD C operator()(C x) const { return ::sin(x); } };
struct Cos { template <class C> STRATA_HD C operator()(C x) const { return ::cos(x); } };
struct Tanh { template <class C> STRATA_HD C operator()(C x) const { return ::tanh(x); } };
struct Sigmoid { template <class C> STRATA_HD C operator()(C x) const { return C(1) / (C(1) + ::exp(-x)); } };
struct Reciprocal { template <class C> STRATA_HD C operator()(C x) const { return C(1) / x; } };

// Binary.
struct Add { template <class C> STRATA_HD C operator()(C a, C b) const { return a + b; } };
struct Sub { template <class C> STRATA_HD C operator()(C a, C b) const { return a - b; } };
struct Mul { template <class C> STRATA_HD C operator()(C a, C b) const { return a * b; } };
struct FloatDiv { template <class C> STRATA_HD C operator()(C a, C b) const { return a / b; } };

// The activations' backward ops: (gradient, saved value).
struct ReluBackward {
  template <class C>
  STRATA_HD C operator()(C g, C x) const {
    return x > C(0) ? g : C(0);
  }
};
struct SigmoidBackward {
  template <class C>
  STRATA_HD C operator()(C g, C y) const {
    return g * y * (C(1) - y);
  }
};
struct TanhBackward {
  template <class C>
  STRATA_HD C operator()(C g, C y) const {
    return g * (C(1) - y * y);
  }
};

}  // namespace strata::gpu::ops
