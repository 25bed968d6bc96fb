// softmax.cu — fused softmax, log_softmax and their backward ops along `dim`
// (docs/ops.md: composite and backward ops; compact operands of one shape).
//
// One block per row (a row is the `n` elements along dim at one position of
// the other dims, RowPlan of kernel_math.hpp). The row is read once per
// pass: max, then the sum of exp(x - max), then the outputs, each pass's
// block-wide combination by the shared tree_step. 16-bit floats compute in f32.
#include <algorithm>
#include <cmath>

#include "eltwise.cuh"
#include "kernels.hpp"

namespace strata::gpu {
namespace {

constexpr int kRowThreads = 256;

template <class C, class Op>
__device__ C block_combine(C* buf, C v) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int stride = static_cast<int>(blockDim.x) / 2; stride > 0; stride /= 2) {
    tree_step<C, Op>(buf, static_cast<int>(threadIdx.x), stride);
    __syncthreads();
  }
  const C r = buf[0];
  __syncthreads();  // buf is reused by the next combination
  return r;
}

enum RowOp { kSoftmax, kLogSoftmax, kSoftmaxBackward, kLogSoftmaxBackward };

/// Forward: a = x. Backward: a = grad, b = y (the forward's output).
template <class T, RowOp Kind>
__global__ void row_kernel(const T* a, const T* b, T* out, RowPlan p) {
  using C = compute_t<T>;
  __shared__ C buf[kRowThreads];
  const int64_t rows = p.outer * p.inner;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    if constexpr (Kind == kSoftmax || Kind == kLogSoftmax) {
      C m = MaxOp<C>::identity();
      for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) m = MaxOp<C>::combine(m, Scalar<T>::load(a[row_offset(p, row, j)]));
      m = block_combine<C, MaxOp<C>>(buf, m);
      C s = C(0);
      for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) s += ::exp(Scalar<T>::load(a[row_offset(p, row, j)]) - m);
      s = block_combine<C, SumOp<C>>(buf, s);
      if constexpr (Kind == kSoftmax) {
        const C inv = C(1) / s;
        for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) {
          const int64_t o = row_offset(p, row, j);
          out[o] = Scalar<T>::store(::exp(Scalar<T>::load(a[o]) - m) * inv);
        }
      } else {
        // (x - m) - log(s), not x - (m + log(s)): m + log(s) would round away
        // log(s)'s digits when |m| is large (the CPU plugin's order too).
        const C log_sum = ::log(s);
        for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) {
          const int64_t o = row_offset(p, row, j);
          out[o] = Scalar<T>::store((Scalar<T>::load(a[o]) - m) - log_sum);
        }
      }
    } else if constexpr (Kind == kSoftmaxBackward) {
      // y * (grad - sum(grad * y))
      C s = C(0);
      for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) {
        const int64_t o = row_offset(p, row, j);
        s += Scalar<T>::load(a[o]) * Scalar<T>::load(b[o]);
      }
      s = block_combine<C, SumOp<C>>(buf, s);
      for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) {
        const int64_t o = row_offset(p, row, j);
        const C y = Scalar<T>::load(b[o]);
        out[o] = Scalar<T>::store(y * (Scalar<T>::load(a[o]) - s));
      }
    } else {
      // grad - exp(y) * sum(grad)
      C s = C(0);
      for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) s += Scalar<T>::load(a[row_offset(p, row, j)]);
      s = block_combine<C, SumOp<C>>(buf, s);
      for (int64_t j = threadIdx.x; j < p.n; j += blockDim.x) {
        const int64_t o = row_offset(p, row, j);
        out[o] = Scalar<T>::store(Scalar<T>::load(a[o]) - ::exp(Scalar<T>::load(b[o])) * s);
      }
    }
  }
}

template <const char* const& Op, class T, RowOp Kind>
struct RowKernel {
  static constexpr const char* op = Op;
  static constexpr bool backward = Kind == kSoftmaxBackward || Kind == kLogSoftmaxBackward;
  using inputs = std::conditional_t<backward, Types<T, T>, Types<T>>;
  using outputs = Types<T>;
  static strata_status run(Launch& l) {
    const strata_tensor& y = l.out();
    const int64_t dim = plugin::attr_int(l.call, "dim", -1);
    const int dims = std::max(y.rank, 1);  // a scalar is one row of one element: dim 0 (docs/ops.md)
    if (dim < 0 || dim >= dims) {
      return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: attribute 'dim' %lld is outside [0, %d) for %s", Op,
                  static_cast<long long>(dim), dims, plugin::describe(y).c_str());
    }
    const RowPlan p = make_row_plan(shape_of(y), static_cast<int>(dim));
    const int64_t rows = p.outer * p.inner;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65535LL * 16));
    const T* b = backward ? data<const T>(l.in(1)) : nullptr;
    row_kernel<T, Kind><<<blocks, kRowThreads, 0, l.stream>>>(data<const T>(l.in(0)), b, data<T>(y), p);
    return launch_result(l, "row_kernel");
  }
};

constexpr const char* kSoftmaxName = STRATA_OP_SOFTMAX;
constexpr const char* kLogSoftmaxName = STRATA_OP_LOG_SOFTMAX;
constexpr const char* kSoftmaxBackwardName = STRATA_OP_SOFTMAX_BACKWARD;
constexpr const char* kLogSoftmaxBackwardName = STRATA_OP_LOG_SOFTMAX_BACKWARD;

template <class T>
void add_float(plugin::KernelTable& t) {
  add<RowKernel<kSoftmaxName, T, kSoftmax>>(t, 0);
  add<RowKernel<kLogSoftmaxName, T, kLogSoftmax>>(t, 0);
  add<RowKernel<kSoftmaxBackwardName, T, kSoftmaxBackward>>(t, 0);
  add<RowKernel<kLogSoftmaxBackwardName, T, kLogSoftmaxBackward>>(t, 0);
}

}  // namespace

void register_softmax_kernels(plugin::KernelTable& t) {
  for_each_type(FloatTypes{}, [&]<class T>() { add_float<T>(t); });
}

}  // namespace strata::gpu
