// complex.cpp — kernels of the complex dtypes c64 and c128 (docs/complex.md):
// add, sub, mul, div, pow, neg, exp, log, sqrt, reciprocal, conj; the parts
// real, imag, abs, angle, complex(re, im) and polar; eq, ne and where; sum and
// prod; and matmul. Copy, fill and casts are in data.cpp with the other dtypes'.
//
// Elementwise kernels are functors over std::complex for the shared loop
// (elementwise.hpp). mul is the textbook formula, as PyTorch's c10::complex
// computes it (C's Annex G recovery of infinities, which GCC's operator*
// calls a library routine for, is not done); div is std::complex's, which
// scales to avoid overflow. Reductions accumulate in c128; matmul is a plain
// blocked GEMM over split real and imaginary panels (oneDNN has no complex
// types, and BLAS is not a dependency of this plugin).
#include "complex.hpp"
#include "elementwise.hpp"
#include "matmul.hpp"

#include <algorithm>
#include <complex>
#include <vector>

namespace strata::cpu {
namespace {

template <class R>
std::complex<R> times(std::complex<R> a, std::complex<R> b) {
  return {a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real()};
}

// One functor per op: FUNCTOR(Type, op name, cost relative to a copy, expression).
#define STRATA_CPU_COMPLEX_UNARY(Type, op, op_cost, ...) \
  struct Type {                                          \
    static constexpr const char* name = op;              \
    static constexpr int64_t cost = op_cost;             \
    template <class C>                                   \
    auto operator()(C z) const {                         \
      return __VA_ARGS__;                                \
    }                                                    \
  }
#define STRATA_CPU_COMPLEX_BINARY(Type, op, op_cost, ...) \
  struct Type {                                           \
    static constexpr const char* name = op;               \
    static constexpr int64_t cost = op_cost;              \
    template <class C>                                    \
    auto operator()(C a, C b) const {                     \
      return __VA_ARGS__;                                 \
    }                                                     \
  }

STRATA_CPU_COMPLEX_UNARY(Neg, STRATA_OP_NEG, 1, -z);
STRATA_CPU_COMPLEX_UNARY(Conj, STRATA_OP_CONJ, 1, std::conj(z));
STRATA_CPU_COMPLEX_UNARY(Exp, STRATA_OP_EXP, 16, std::exp(z));
STRATA_CPU_COMPLEX_UNARY(Log, STRATA_OP_LOG, 16, std::log(z));
STRATA_CPU_COMPLEX_UNARY(Sqrt, STRATA_OP_SQRT, 16, std::sqrt(z));
STRATA_CPU_COMPLEX_UNARY(Reciprocal, STRATA_OP_RECIPROCAL, 4, C(1) / z);
// Complex -> real.
STRATA_CPU_COMPLEX_UNARY(RealPart, STRATA_OP_REAL, 1, z.real());
STRATA_CPU_COMPLEX_UNARY(ImagPart, STRATA_OP_IMAG, 1, z.imag());
STRATA_CPU_COMPLEX_UNARY(Abs, STRATA_OP_ABS, 4, std::abs(z));  // hypot: no overflow of |z|^2
STRATA_CPU_COMPLEX_UNARY(Angle, STRATA_OP_ANGLE, 8, std::arg(z));

STRATA_CPU_COMPLEX_BINARY(Add, STRATA_OP_ADD, 1, a + b);
STRATA_CPU_COMPLEX_BINARY(Sub, STRATA_OP_SUB, 1, a - b);
STRATA_CPU_COMPLEX_BINARY(Mul, STRATA_OP_MUL, 2, times(a, b));
STRATA_CPU_COMPLEX_BINARY(Div, STRATA_OP_DIV, 4, a / b);
STRATA_CPU_COMPLEX_BINARY(Pow, STRATA_OP_POW, 32, std::pow(a, b));
STRATA_CPU_COMPLEX_BINARY(Eq, STRATA_OP_EQ, 1, a == b);
STRATA_CPU_COMPLEX_BINARY(Ne, STRATA_OP_NE, 1, a != b);
// Real parts -> complex. polar as r·cos θ + i·r·sin θ: std::polar leaves a
// negative r undefined, the op does not.
STRATA_CPU_COMPLEX_BINARY(MakeComplex, STRATA_OP_COMPLEX, 1, std::complex<C>(a, b));
STRATA_CPU_COMPLEX_BINARY(Polar, STRATA_OP_POLAR, 16, std::complex<C>(a * std::cos(b), a * std::sin(b)));

#undef STRATA_CPU_COMPLEX_UNARY
#undef STRATA_CPU_COMPLEX_BINARY

struct Where {
  static constexpr const char* name = STRATA_OP_WHERE;
  template <class C>
  C operator()(bool cond, C a, C b) const {
    return cond ? a : b;
  }
};

// --- sum and prod -------------------------------------------------------------

/// sum (Product false) and prod of a complex tensor over the dims the output
/// has as 1, accumulated in c128 (f32 parts would lose digits over long sums).
template <class T, bool Product>
struct Reduce {
  static constexpr const char* name = Product ? STRATA_OP_PROD : STRATA_OP_SUM;
  using signature = T(T);
  static constexpr uint32_t flags = kStrided;

  static strata_status run(const KernelCall& call) {
    const strata_tensor &xt = call.in(0), &yt = call.out();
    if (xt.rank != yt.rank) return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: rank mismatch", name);
    ReductionLayout layout;
    if (int bad = 0; !reduction_layout(xt, yt, layout, bad)) {
      return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: output dim %d must be 1 or the input's", name, bad);
    }
    const Layout<2>& kept = layout.kept;
    const Layout<1>& reduced = layout.reduced;
    const T* const x = data<const T>(xt);
    T* const y = data<T>(yt);
    const int64_t n_reduced = reduced.numel();
    parallel_for(
        kept.numel(), call.threads,
        [&](int64_t b, int64_t e) {
          for_each_run(kept, b, e, [&](const int64_t* off, int64_t count) {
            for (int64_t i = 0; i < count; ++i) {
              const T* xo = x + off[0] + i * kept.inner_stride(0);
              c128 total = Product ? c128(1.0) : c128(0.0);
              for_each_run(reduced, 0, n_reduced, [&](const int64_t* roff, int64_t rcount) {
                const int64_t s = reduced.inner_stride(0);
                for (int64_t r = 0; r < rcount; ++r) {
                  const c128 v(xo[roff[0] + r * s]);
                  total = Product ? times(total, v) : total + v;
                }
              });
              y[off[1] + i * kept.inner_stride(1)] = T(total);
            }
          });
        },
        n_reduced);
    return STRATA_OK;
  }
};

// --- matmul --------------------------------------------------------------------

/// y = a @ b for one matrix of the batch: B is packed into split real and
/// imaginary K x N planes, then each row of y accumulates a row of A times
/// panels of B in split accumulators, loops the compiler vectorises.
template <class R>
void gemm_one(const std::complex<R>* a, int64_t ars, int64_t acs, const std::complex<R>* b, int64_t brs, int64_t bcs,
              std::complex<R>* y, int64_t yrs, int64_t ycs, int64_t M, int64_t K, int64_t N, int threads) {
  constexpr int64_t kPanelN = 256;  // columns of y per pass: 2 x 256 accumulators stay in L1
  std::vector<R> br(static_cast<size_t>(K * N)), bi(static_cast<size_t>(K * N));
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t j = 0; j < N; ++j) {
      const std::complex<R> v = b[k * brs + j * bcs];
      br[static_cast<size_t>(k * N + j)] = v.real();
      bi[static_cast<size_t>(k * N + j)] = v.imag();
    }
  }
  parallel_for(
      M, threads,
      [&](int64_t row_begin, int64_t row_end) {
        R acc_r[kPanelN], acc_i[kPanelN];
        for (int64_t i = row_begin; i < row_end; ++i) {
          for (int64_t j0 = 0; j0 < N; j0 += kPanelN) {
            const int64_t width = std::min(kPanelN, N - j0);
            std::fill_n(acc_r, width, R(0));
            std::fill_n(acc_i, width, R(0));
            for (int64_t k = 0; k < K; ++k) {
              const std::complex<R> av = a[i * ars + k * acs];
              const R ar = av.real(), ai = av.imag();
              const R* pr = br.data() + k * N + j0;
              const R* pi = bi.data() + k * N + j0;
              for (int64_t j = 0; j < width; ++j) {
                acc_r[j] += ar * pr[j] - ai * pi[j];
                acc_i[j] += ar * pi[j] + ai * pr[j];
              }
            }
            for (int64_t j = 0; j < width; ++j) y[i * yrs + (j0 + j) * ycs] = {acc_r[j], acc_i[j]};
          }
        }
      },
      4 * K * N);
}

template <class T>
struct Matmul {
  static constexpr const char* name = STRATA_OP_MATMUL;
  using signature = T(T, T);
  static constexpr uint32_t flags = kStrided;

  static strata_status run(const KernelCall& call) {
    const strata_tensor &a = call.in(0), &b = call.in(1), &y = call.out();
    if (!matmul_shapes_ok(a, b, y)) return refuse_matmul_shapes(call.error, name, a, b, y);
    const int r = y.rank;
    const int64_t M = y.shape[r - 2], N = y.shape[r - 1], K = a.shape[r - 1];
    const Layout<3> batches = batch_layout(y, a, b);  // operands y, a, b
    for_each_run(batches, 0, batches.numel(), [&](const int64_t* off, int64_t count) {
      for (int64_t t = 0; t < count; ++t) {
        gemm_one(data<const T>(a) + off[1] + t * batches.inner_stride(1), a.strides[r - 2], a.strides[r - 1],
                 data<const T>(b) + off[2] + t * batches.inner_stride(2), b.strides[r - 2], b.strides[r - 1],
                 data<T>(y) + off[0] + t * batches.inner_stride(0), y.strides[r - 2], y.strides[r - 1], M, K, N,
                 call.threads);
      }
    });
    return STRATA_OK;
  }
};

template <class T>
void register_type(plugin::KernelTable& table) {
  using R = typename T::value_type;
  add_unary<Neg>(table, TypeList<T>{});
  add_unary<Conj>(table, TypeList<T>{});
  add_unary<Exp>(table, TypeList<T>{});
  add_unary<Log>(table, TypeList<T>{});
  add_unary<Sqrt>(table, TypeList<T>{});
  add_unary<Reciprocal>(table, TypeList<T>{});
  add<Elementwise<RealPart, R, T>>(table);
  add<Elementwise<ImagPart, R, T>>(table);
  add<Elementwise<Abs, R, T>>(table);
  add<Elementwise<Angle, R, T>>(table);
  add_binary<Add>(table, TypeList<T>{});
  add_binary<Sub>(table, TypeList<T>{});
  add_binary<Mul>(table, TypeList<T>{});
  add_binary<Div>(table, TypeList<T>{});
  add_binary<Pow>(table, TypeList<T>{});
  add<Elementwise<Eq, bool8, T, T>>(table);
  add<Elementwise<Ne, bool8, T, T>>(table);
  add<Elementwise<MakeComplex, T, R, R>>(table);
  add<Elementwise<Polar, T, R, R>>(table);
  add<Elementwise<Where, T, bool8, T, T>>(table);
  add<Reduce<T, false>>(table);
  add<Reduce<T, true>>(table);
  add<Matmul<T>>(table);
}

}  // namespace

void register_complex_kernels(plugin::KernelTable& table) {
  register_type<c64>(table);
  register_type<c128>(table);
}

}  // namespace strata::cpu
