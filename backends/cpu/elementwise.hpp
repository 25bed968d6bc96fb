// elementwise.hpp — the one loop behind every elementwise kernel.
//
// `map<Out, Ins...>(y, xs, threads, op)` computes y[p] = op(xs[p]...) for every
// position p of y's shape, where op is a functor over compute types (f16/bf16
// arrive as float, bool as bool). Inputs have y's shape with any strides
// (stride 0 included) and so may y. An op is then one functor:
//
//   struct Add {
//     static constexpr const char* name = STRATA_OP_ADD;
//     template <class C> C operator()(C a, C b) const { return a + b; }
//   };
//
// and `Elementwise<Add, float, float, float>` is its f32 kernel. A functor may
// declare `static constexpr int64_t cost` (relative to a copy) to parallelise
// earlier, and `template <class... Ts> static strata_status validate(const
// KernelCall&)` to reject inputs before anything is written.
#pragma once

#include "kernel.hpp"
#include "loop_isa.hpp"
#include "strided.hpp"

#include <algorithm>
#include <array>
#include <tuple>
#include <utility>

namespace strata::cpu {

template <class Op>
constexpr int64_t op_cost() {
  if constexpr (requires { Op::cost; }) {
    return Op::cost;
  } else {
    return 1;
  }
}

namespace detail {

/// y[i] = op(x[i]...) for i < n, every operand contiguous: the loop the
/// auto-vectoriser turns into SIMD code, in the instruction set of the caller.
template <class Out, class... Ins, class Op, size_t... I>
[[gnu::always_inline]] inline void contiguous_body(Out* y, const std::tuple<const Ins*...>& x, int64_t n, const Op& op,
                                                   std::index_sequence<I...>) {
  for (int64_t i = 0; i < n; ++i) y[i] = Scalar<Out>::store(op(Scalar<Ins>::load(std::get<I>(x)[i])...));
}

#if STRATA_CPU_ISA_CLONES
template <class Out, class... Ins, class Op>
[[gnu::target("arch=x86-64-v4"), gnu::noinline]] void contiguous_v4(Out* y, std::tuple<const Ins*...> x, int64_t n,
                                                                    Op op) {
  contiguous_body<Out, Ins...>(y, x, n, op, std::index_sequence_for<Ins...>{});
}
template <class Out, class... Ins, class Op>
[[gnu::target("arch=x86-64-v3"), gnu::noinline]] void contiguous_v3(Out* y, std::tuple<const Ins*...> x, int64_t n,
                                                                    Op op) {
  contiguous_body<Out, Ins...>(y, x, n, op, std::index_sequence_for<Ins...>{});
}
#endif

/// The contiguous loop in the instruction set loop_isa() selects
/// (loop_isa.hpp). Short runs stay in the baseline copy, inlined, where a
/// call would cost more than the wider vectors save.
template <class Out, class... Ins, class Op>
[[gnu::always_inline]] inline void contiguous(Out* y, const std::tuple<const Ins*...>& x, int64_t n, const Op& op) {
#if STRATA_CPU_ISA_CLONES
  if (n >= 64) {
    switch (dispatch_loop_isa()) {
      case LoopIsa::avx512: return contiguous_v4<Out, Ins...>(y, x, n, op);
      case LoopIsa::avx2: return contiguous_v3<Out, Ins...>(y, x, n, op);
      case LoopIsa::generic: break;
    }
  }
#endif
  contiguous_body<Out, Ins...>(y, x, n, op, std::index_sequence_for<Ins...>{});
}

template <class Out, class... Ins, class Op, size_t... I>
[[gnu::always_inline]] inline void map_impl(const strata_tensor& yt, const strata_tensor* const* xt, int threads,
                                            const Op& op, std::index_sequence<I...>) {
  Out* const y = data<Out>(yt);
  const std::tuple<const Ins*...> x{data<const Ins>(*xt[I])...};
  const int64_t n = plugin::numel(yt);
  constexpr int64_t cost = op_cost<Op>();

  if (all_contiguous(yt, *xt[I]...)) {
    parallel_for(
        n, threads,
        [&](int64_t b, int64_t e) { contiguous<Out, Ins...>(y + b, {std::get<I>(x) + b...}, e - b, op); },
        cost);
    return;
  }

  constexpr int N = 1 + sizeof...(Ins);
  const Layout<N> l = make_layout<N>(yt.rank, yt.shape, {yt.strides, xt[I]->strides...});
  parallel_runs(l, threads, cost, [&](const int64_t* off, int64_t count) {
    Out* const yy = y + off[0];
    const std::tuple<const Ins*...> xx{std::get<I>(x) + off[I + 1]...};
    const int64_t ys = l.inner_stride(0);
    if (ys == 1 && ((l.inner_stride(I + 1) == 1) && ...)) {
      contiguous<Out, Ins...>(yy, xx, count, op);
    } else if (ys == 1 && ((l.inner_stride(I + 1) == 0 || l.inner_stride(I + 1) == 1) && ...)) {
      // Some inputs are broadcast along the run (stride 0: a scalar operand,
      // a bias). They are read from a chunk filled with their value, so that
      // the loop is the contiguous one above, which vectorises; the generic
      // strided loop below does not.
      constexpr int64_t kChunk = 256;
      std::tuple<std::array<Ins, kChunk>...> filled;
      const int64_t fill = std::min(count, kChunk);
      ((l.inner_stride(I + 1) == 0 ? std::fill_n(std::get<I>(filled).data(), fill, std::get<I>(xx)[0]) : nullptr),
       ...);
      for (int64_t c = 0; c < count; c += kChunk) {
        const int64_t m = std::min(kChunk, count - c);
        contiguous<Out, Ins...>(
            yy + c, {(l.inner_stride(I + 1) == 0 ? std::get<I>(filled).data() : std::get<I>(xx) + c)...}, m, op);
      }
    } else {
      const int64_t xs[] = {l.inner_stride(I + 1)..., 0};
      for (int64_t i = 0; i < count; ++i) {
        yy[i * ys] = Scalar<Out>::store(op(Scalar<Ins>::load(std::get<I>(xx)[i * xs[I]])...));
      }
    }
  });
}

}  // namespace detail

/// y[p] = op(xs[0][p], xs[1][p], ...) over y's shape; xs points at
/// sizeof...(Ins) descriptors of y's shape (the host's pointer array).
template <class Out, class... Ins, class Op>
[[gnu::always_inline]] inline void map(const strata_tensor& y, const strata_tensor* const* xs, int threads,
                                       const Op& op) {
  detail::map_impl<Out, Ins...>(y, xs, threads, op, std::index_sequence_for<Ins...>{});
}

/// The kernel of elementwise functor Op with signature Out(Ins...).
template <class Op, class Out, class... Ins>
struct Elementwise {
  static constexpr const char* name = Op::name;
  using signature = Out(Ins...);
  static constexpr uint32_t flags = kStrided;

  // Inlined into entry<> by force (as is the loop below): a one-element add
  // is all call overhead, and GCC's heuristics stop short of it.
  [[gnu::always_inline]] static strata_status run(const KernelCall& call) {
    for (int i = 0; i < call.n_in(); ++i) {
      if (!same_shape(call.in(i), call.out())) {
        return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT,
                    "%s: input %d does not have the output's shape (inputs arrive broadcast)", name, i);
      }
    }
    if constexpr (requires { Op::template validate<Ins...>(call); }) {
      if (const strata_status s = Op::template validate<Ins...>(call); s != STRATA_OK) return s;
    }
    map<Out, Ins...>(call.out(), call.inputs(), call.threads, Op{});
    return STRATA_OK;
  }
};

/// Registers Elementwise<Op, T, T...> (arity inputs of T) for each T.
template <class Op, int Arity, class... Ts>
void add_same_type(plugin::KernelTable& table, TypeList<Ts...>) {
  const auto one = [&]<class T, size_t... I>(std::index_sequence<I...>) {
    add<Elementwise<Op, T, std::tuple_element_t<I, std::tuple<T, T, T>>...>>(table);
  };
  (one.template operator()<Ts>(std::make_index_sequence<Arity>{}), ...);
}

template <class Op, class... Ts>
void add_unary(plugin::KernelTable& table, TypeList<Ts...> types) {
  add_same_type<Op, 1>(table, types);
}

template <class Op, class... Ts>
void add_binary(plugin::KernelTable& table, TypeList<Ts...> types) {
  add_same_type<Op, 2>(table, types);
}

}  // namespace strata::cpu
