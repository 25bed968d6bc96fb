// kernels_reduce.cpp — the reductions sum, prod, max, min, argmax, argmin and
// matmul (docs/ops.md, "Reductions", "Linear algebra").
//
// Demonstrates: the INTS attribute `dims`; outputs that keep the input's rank
// with reduced dims of size 1; integer sums widened to i64 (`bool->i64`);
// NaN propagation and first-occurrence ties; and matmul over batch dims
// whose strides may be 0 (batch broadcasting applied by the host). Loops are
// plain and single-threaded: this device is about the ABI, not speed.
#include "kernel_launch.hpp"

#include <limits>

namespace example {
namespace {

/// Accumulator of sum/prod: f64 for floats (f32 sums accumulate in double,
/// which is "at least f32"), i64 for integers and bool.
template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

/// sum and prod: a fold with `Op` from `Identity` in the accumulator type.
template <class T, const char* const& Name, int Identity, acc_t<T> (*Op)(acc_t<T>, acc_t<T>)>
struct FoldR {
  static constexpr const char* name = Name;
  using State = acc_t<T>;
  static State init() { return State(Identity); }
  static State step(State s, T v, int64_t) { return Op(s, static_cast<State>(v)); }
  template <class Out>
  static Out finish(State s) {
    return static_cast<Out>(s);  // integers: wraps to the output's width
  }
};

constexpr const char* kSumName = STRATA_OP_SUM;
constexpr const char* kProdName = STRATA_OP_PROD;
template <class T>
using SumR = FoldR<T, kSumName, 0, wrap_add<acc_t<T>>>;
template <class T>
using ProdR = FoldR<T, kProdName, 1, wrap_mul<acc_t<T>>>;

/// max (Greater) and min; a NaN wins over everything.
template <class T, bool Greater>
struct ExtremumR {
  static constexpr const char* name = Greater ? STRATA_OP_MAX : STRATA_OP_MIN;
  using State = T;
  static State init() {
    if constexpr (std::is_floating_point_v<T>) {
      return Greater ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    } else {
      return Greater ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    }
  }
  static State step(State s, T v, int64_t) { return (Greater ? v > s : v < s) || is_nan(v) ? v : s; }
  template <class Out>
  static Out finish(State s) {
    return s;
  }
};

/// argmax / argmin along one dim: the first occurrence wins, and the first
/// NaN beats every number.
template <class T, bool Greater>
struct ArgExtremumR {
  static constexpr const char* name = Greater ? STRATA_OP_ARGMAX : STRATA_OP_ARGMIN;
  static constexpr bool single_dim = true;
  struct State {
    T value;
    int64_t index;
  };
  static State init() { return {T(0), -1}; }
  static State step(State s, T v, int64_t index) {
    if (s.index < 0) return {v, index};
    if (is_nan(s.value)) return s;
    return is_nan(v) || (Greater ? v > s.value : v < s.value) ? State{v, index} : s;
  }
  template <class Out>
  static Out finish(State s) {
    return s.index < 0 ? 0 : s.index;
  }
};

template <class R>
constexpr bool single_dim() {
  if constexpr (requires { R::single_dim; }) {
    return R::single_dim;
  } else {
    return false;
  }
}

template <class R, class In, class Out>
strata_status reduce_kernel(const strata_kernel_call* call) noexcept {
  return run_kernel(call, R::name, [&] {
    const Launch l = prepare(call, {dtype_v<In>}, {dtype_v<Out>});
    const std::vector<int> dims = reduced_dims(l);
    if (single_dim<R>() && dims.size() != 1) l.reject("attribute 'dims' must name exactly one dim");
    const View &x = l.in[0], &y = l.out[0];
    // The walk over y visits every kept position (x's strides there; the
    // reduced dims have size 1 in y); the inner walk covers the reduced dims.
    std::array<int64_t, STRATA_MAX_RANK> inner{};
    for (int d = 0; d < x.rank; ++d) inner[static_cast<size_t>(d)] = 1;
    for (int d : dims) inner[static_cast<size_t>(d)] = x.shape[d];
    l.submit([x, y, inner] {
      const In* const in = x.data<In>();
      Out* const out = y.data<Out>();
      walk<2>(y.rank, y.shape, {y.strides, x.strides}, [&](const auto& off) {
        typename R::State s = R::init();
        int64_t k = 0;
        walk<1>(x.rank, inner.data(), {x.strides}, [&](const auto& r) { s = R::step(s, in[off[1] + r[0]], k++); });
        out[off[0]] = R::template finish<Out>(s);
      });
    });
    return STRATA_OK;
  });
}

template <class T>
strata_status matmul_kernel(const strata_kernel_call* call) noexcept {
  return run_kernel(call, STRATA_OP_MATMUL, [&] {
    const Launch l = prepare(call, {dtype_v<T>, dtype_v<T>}, {dtype_v<T>});
    const View &a = l.in[0], &b = l.in[1], &y = l.out[0];
    const int r = y.rank;
    if (r < 2 || a.rank != r || b.rank != r) l.reject("operands must have one rank of at least 2");
    const int64_t m = a.shape[r - 2], k = a.shape[r - 1], n = b.shape[r - 1];
    if (b.shape[r - 2] != k || y.shape[r - 2] != m || y.shape[r - 1] != n) l.reject("shapes do not multiply");
    for (int d = 0; d < r - 2; ++d) {
      if (a.shape[d] != y.shape[d] || b.shape[d] != y.shape[d]) l.reject("batch dims differ");
    }
    l.submit([a, b, y, m, k, n, r] {
      const T* const pa = a.data<T>();
      const T* const pb = b.data<T>();
      T* const py = y.data<T>();
      const int64_t as0 = a.strides[r - 2], as1 = a.strides[r - 1];
      const int64_t bs0 = b.strides[r - 2], bs1 = b.strides[r - 1];
      const int64_t ys0 = y.strides[r - 2], ys1 = y.strides[r - 1];
      std::vector<double> row(static_cast<size_t>(n));
      walk<3>(r - 2, y.shape, {y.strides, a.strides, b.strides}, [&](const auto& off) {
        for (int64_t i = 0; i < m; ++i) {
          std::fill(row.begin(), row.end(), 0.0);
          for (int64_t p = 0; p < k; ++p) {
            const double av = static_cast<double>(pa[off[1] + i * as0 + p * as1]);
            const T* const brow = pb + off[2] + p * bs0;
            for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] += av * static_cast<double>(brow[j * bs1]);
          }
          for (int64_t j = 0; j < n; ++j) py[off[0] + i * ys0 + j * ys1] = static_cast<T>(row[static_cast<size_t>(j)]);
        }
      });
    });
    return STRATA_OK;
  });
}

template <template <class> class R, class TypeList>
void add_same(strata::plugin::KernelTable& t, TypeList types) {
  for_each_type(types, [&]<class T>() { add_kernel(t, R<T>::name, signature<T, T>(), &reduce_kernel<R<T>, T, T>); });
}

}  // namespace

void register_reduce_kernels(strata::plugin::KernelTable& t) {
  add_same<SumR>(t, FloatTypes{});
  for_each_type(Types<int32_t, int64_t, bool>{}, [&]<class T>() {  // integer sums are i64
    add_kernel(t, STRATA_OP_SUM, signature<int64_t, T>(), &reduce_kernel<SumR<T>, T, int64_t>);
  });
  add_same<ProdR>(t, NumericTypes{});
  for_each_type(NumericTypes{}, [&]<class T>() {
    add_kernel(t, STRATA_OP_MAX, signature<T, T>(), &reduce_kernel<ExtremumR<T, true>, T, T>);
    add_kernel(t, STRATA_OP_MIN, signature<T, T>(), &reduce_kernel<ExtremumR<T, false>, T, T>);
    add_kernel(t, STRATA_OP_ARGMAX, signature<int64_t, T>(), &reduce_kernel<ArgExtremumR<T, true>, T, int64_t>);
    add_kernel(t, STRATA_OP_ARGMIN, signature<int64_t, T>(), &reduce_kernel<ArgExtremumR<T, false>, T, int64_t>);
  });
  for_each_type(FloatTypes{}, [&]<class T>() { add_kernel(t, STRATA_OP_MATMUL, signature<T, T, T>(), &matmul_kernel<T>); });
}

}  // namespace example
