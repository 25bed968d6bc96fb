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
#include "strided.hpp"

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
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) y[i] = Scalar<Out>::store(op(Scalar<Ins>::load(std::get<I>(x)[i])...));
        },
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
      for (int64_t i = 0; i < count; ++i) yy[i] = Scalar<Out>::store(op(Scalar<Ins>::load(std::get<I>(xx)[i])...));
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
