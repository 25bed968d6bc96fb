// nn.cpp — fused kernels for composite and backward ops (docs/ops.md,
// "Composites" and "Backward ops"): the elementwise ones are functors for the
// elementwise machinery; softmax and friends work along one dim.
#include "elementwise.hpp"
#include "pointwise.hpp"
#include "scalar_math.hpp"
#include "vector_math.hpp"

#include <cmath>
#include <vector>
#include <limits>
#include <numbers>
#include <type_traits>

namespace strata::cpu {
namespace {

// ---- Elementwise composites and backward ops ------------------------------

template <class C>
C normal_cdf(C x) {
  return C(0.5) * (C(1) + erf_of(x * C(std::numbers::sqrt2 / 2)));
}
template <class C>
C normal_pdf(C x) {
  return exp_of(C(-0.5) * x * x) * C(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
}

struct Gelu {
  static constexpr const char* name = STRATA_OP_GELU;
  static constexpr int64_t cost = 8;
  template <class C>
  C operator()(C x) const {
    return x * normal_cdf(x);
  }
};

struct Silu {
  static constexpr const char* name = STRATA_OP_SILU;
  static constexpr int64_t cost = 8;
  template <class C>
  C operator()(C x) const {
    return x / (C(1) + std::exp(-x));
  }
};

struct GeluBackward {  // (grad, x)
  static constexpr const char* name = STRATA_OP_GELU_BACKWARD;
  static constexpr int64_t cost = 16;
  template <class C>
  C operator()(C g, C x) const {
    return g * (normal_cdf(x) + x * normal_pdf(x));
  }
};

// ---- Ops along one dim ------------------------------------------------------
//
// A "row" is the `n` elements along `dim` at a fixed position of the other
// dims, `stride` apart (1 when dim is the last, the common case, passed as
// Unit so the loops vectorise).

/// The row's maximum; its first NaN when it holds one.
template <class T, class S>
compute_t<T> row_max(const T* x, int64_t n, S stride) {
  using C = compute_t<T>;
  int64_t i = 0;
  C m = -std::numeric_limits<C>::infinity();
  if constexpr (std::is_same_v<S, Unit>) {
    // Branch-free over 16 lanes (max is order-independent but for the sign
    // of a zero maximum), NaNs only flagged: the compiler turns this into
    // vector max and compare instructions. The scalar loop below was a
    // mispredicted branch per element.
    constexpr int kLanes = 16;
    C lane[kLanes];
    bool nan[kLanes] = {};
    for (C& l : lane) l = m;
    for (; i + kLanes <= n; i += kLanes) {
      for (int k = 0; k < kLanes; ++k) {
        const C v = Scalar<T>::load(x[i + k]);
        lane[k] = v > lane[k] ? v : lane[k];
        nan[k] = nan[k] | (v != v);
      }
    }
    bool any_nan = false;
    for (int k = 0; k < kLanes; ++k) {
      m = lane[k] > m ? lane[k] : m;
      any_nan = any_nan | nan[k];
    }
    if (any_nan) i = 0, m = -std::numeric_limits<C>::infinity();  // rare: find the first NaN below
  }
  for (; i < n; ++i) {
    const C v = Scalar<T>::load(x[i * stride]);
    if (is_nan(v)) return v;
    m = v > m ? v : m;
  }
  return m;
}

/// Sum of f(i) over the row.
template <class C, class F>
C row_sum(int64_t n, F&& f) {
  C s = 0;
  for (int64_t i = 0; i < n; ++i) s += f(i);
  return s;
}

/// For an f32 row of stride 1: e[i] = exp(src[i] - shift) into a per-thread
/// buffer, through SLEEF's array loop (vectorised); nullptr otherwise, and
/// the caller computes element by element with exp_c (the same bits).
template <class T, class S>
const float* exp_row(const T* src, int64_t n, S, compute_t<T> shift) {
  if constexpr (std::is_same_v<T, float> && std::is_same_v<S, Unit>) {
    thread_local std::vector<float> buffer;
    buffer.resize(static_cast<size_t>(n));
    float* e = buffer.data();
    for (int64_t i = 0; i < n; ++i) e[i] = src[i] - shift;
    vmath::exp(e, e, n);
    return e;
  } else {
    return nullptr;
  }
}

/// exp(x[i] - max) over one row of n elements at stride s: from
/// exp_row's vectorised buffer when it made one, else element by element
/// (the same bits). `m` is the row's max.
template <class T, class S>
struct ShiftedExp {
  using C = compute_t<T>;
  const T* x;
  S s;
  C m;
  const float* pre;
  ShiftedExp(const T* row, int64_t n, S stride)
      : x(row), s(stride), m(row_max(row, n, stride)), pre(exp_row(row, n, stride, m)) {}
  C operator()(int64_t i) const { return pre != nullptr ? pre[i] : exp_of(Scalar<T>::load(x[i * s]) - m); }
};

struct Softmax {  // y = exp(x - max) / sum(exp(x - max))
  static constexpr const char* name = STRATA_OP_SOFTMAX;
  static constexpr int arity = 1;
  template <class T, class S>
  static void row(T* y, const T* x, int64_t n, S s) {
    using C = compute_t<T>;
    const ShiftedExp<T, S> e(x, n, s);
    if constexpr (std::is_same_v<T, C>) {  // keep exp in y: computed once
      const C sum = row_sum<C>(n, [&](int64_t i) { return y[i * s] = e(i); });
      const C inv = C(1) / sum;
      for (int64_t i = 0; i < n; ++i) y[i * s] *= inv;
    } else {  // 16-bit y would round the intermediate: recompute instead
      const C inv = C(1) / row_sum<C>(n, e);
      for (int64_t i = 0; i < n; ++i) y[i * s] = Scalar<T>::store(e(i) * inv);
    }
  }
};

struct LogSoftmax {  // y = x - max - log(sum(exp(x - max)))
  static constexpr const char* name = STRATA_OP_LOG_SOFTMAX;
  static constexpr int arity = 1;
  template <class T, class S>
  static void row(T* y, const T* x, int64_t n, S s) {
    using C = compute_t<T>;
    const ShiftedExp<T, S> e(x, n, s);
    const C log_sum = log_of(row_sum<C>(n, e));
    // (x - m) - log_sum, not x - (m + log_sum): m + log_sum would round away
    // log_sum's digits when |m| is large.
    for (int64_t i = 0; i < n; ++i) y[i * s] = Scalar<T>::store((Scalar<T>::load(x[i * s]) - e.m) - log_sum);
  }
};

struct SoftmaxBackward {  // (grad, y = softmax(x)): dx = y * (grad - sum(grad * y))
  static constexpr const char* name = STRATA_OP_SOFTMAX_BACKWARD;
  static constexpr int arity = 2;
  template <class T, class S>
  static void row(T* dx, const T* g, const T* y, int64_t n, S s) {
    using C = compute_t<T>;
    const auto ld = [](T v) { return Scalar<T>::load(v); };
    const C dot = row_sum<C>(n, [&](int64_t i) { return ld(g[i * s]) * ld(y[i * s]); });
    for (int64_t i = 0; i < n; ++i) dx[i * s] = Scalar<T>::store(ld(y[i * s]) * (ld(g[i * s]) - dot));
  }
};

struct LogSoftmaxBackward {  // (grad, y = log_softmax(x)): dx = grad - exp(y) * sum(grad)
  static constexpr const char* name = STRATA_OP_LOG_SOFTMAX_BACKWARD;
  static constexpr int arity = 2;
  template <class T, class S>
  static void row(T* dx, const T* g, const T* y, int64_t n, S s) {
    using C = compute_t<T>;
    const auto ld = [](T v) { return Scalar<T>::load(v); };
    const C sum = row_sum<C>(n, [&](int64_t i) { return ld(g[i * s]); });
    if (const float* e = exp_row(y, n, s, C(0))) {  // f32, stride 1: exp(y) vectorised
      for (int64_t i = 0; i < n; ++i) dx[i * s] = Scalar<T>::store(ld(g[i * s]) - e[i] * sum);
    } else {
      for (int64_t i = 0; i < n; ++i) dx[i * s] = Scalar<T>::store(ld(g[i * s]) - exp_of(ld(y[i * s])) * sum);
    }
  }
};

/// The kernel of a row op: compact inputs of the output's shape, viewed as
/// [outer, n, inner] around `dim`; one row per (outer, inner) position.
template <class Op, class T>
struct AlongDim {
  static constexpr const char* name = Op::name;
  using signature = std::conditional_t<Op::arity == 1, T(T), T(T, T)>;
  static constexpr uint32_t flags = 0;  // composites receive compact inputs

  static strata_status run(const KernelCall& call) {
    const strata_tensor& y = call.out();
    for (int i = 0; i < call.n_in(); ++i) {
      if (!same_shape(call.in(i), y) || !plugin::is_contiguous(call.in(i)) || !plugin::is_contiguous(y)) {
        return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: operands must be compact and of one shape",
                    name);
      }
    }
    int64_t outer = 1, n = 1, inner = 1;
    if (y.rank > 0) {  // a scalar is one row of one element
      const int dim = dim_attr(call, y.rank);
      if (dim < 0) {
        return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: attribute 'dim' missing or out of range for %s",
                    name, plugin::describe(y).c_str());
      }
      for (int d = 0; d < dim; ++d) outer *= y.shape[d];
      n = y.shape[dim];
      for (int d = dim + 1; d < y.rank; ++d) inner *= y.shape[d];
    }
    T* const out = data<T>(y);
    const T* const a = data<const T>(call.in(0));
    const T* const b = Op::arity == 2 ? data<const T>(call.in(1)) : nullptr;
    const auto one_row = [&](int64_t r, auto stride) {
      const int64_t base = r / inner * n * inner + r % inner;
      if constexpr (Op::arity == 1) {
        Op::row(out + base, a + base, n, stride);
      } else {
        Op::row(out + base, a + base, b + base, n, stride);
      }
    };
    parallel_for(
        outer * inner, call.threads,
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            if (inner == 1) {
              one_row(r, Unit{});
            } else {
              one_row(r, inner);
            }
          }
        },
        n * 8);
    return STRATA_OK;
  }
};

}  // namespace

void register_nn_kernels(plugin::KernelTable& table) {
  constexpr FloatTypes f;
  add_unary<Gelu>(table, f);
  add_unary<Silu>(table, f);
  add_binary<ReluBackward>(table, f);
  add_binary<SigmoidBackward>(table, f);
  add_binary<TanhBackward>(table, f);
  add_binary<GeluBackward>(table, f);
  for_each_type(f, [&]<class T>() {
    add<AlongDim<Softmax, T>>(table);
    add<AlongDim<LogSoftmax, T>>(table);
    add<AlongDim<SoftmaxBackward, T>>(table);
    add<AlongDim<LogSoftmaxBackward, T>>(table);
  });
}

}  // namespace strata::cpu
