// reduce.cpp — sum, prod, max, min, argmax, argmin and the fused mean
// (docs/ops.md, "Reductions" and "Composites").
//
// The output has the input's rank with reduced dims of size 1, so the reduced
// dims are read off the shapes (no attribute parsing). Input dims split into a
// "kept" layout (input and output strides) and a "reduced" layout (input
// strides), each collapsed. Three schedules:
//  - rows:    reduced elements adjacent in memory: each output reduces one
//             contiguous stretch with vectorisable lane accumulators;
//  - columns: the innermost kept dim is contiguous: a block of adjacent
//             outputs is accumulated together while walking the reduced dims;
//  - split:   few outputs, long reductions: threads reduce chunks of one
//             output and the partial states are combined in order.
#include "kernel.hpp"
#include "strided.hpp"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

namespace strata::cpu {
namespace {

/// Accumulator type: f32 for f32/f16/bf16, f64 for f64, i64 for integers.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<compute_t<T>, double>, double,
                                 std::conditional_t<std::is_floating_point_v<compute_t<T>>, float, int64_t>>;

// A reduction R<Acc> has a State, init(), step(state, value, index) for one
// element at `index` along the reduced dims, combine(earlier, later) for two
// partial states, finish<Out>(state, count), and kLanes: true when the order
// of steps does not matter (lane accumulators allowed).

/// A fold with `Op` from `Identity` (sum, prod): any order of steps.
template <class Acc, const char* const& Name, int Identity, Acc (*Op)(Acc, Acc)>
struct FoldR {
  static constexpr const char* name = Name;
  static constexpr bool kLanes = true;
  using State = Acc;
  static State init() { return Acc(Identity); }
  static State step(State s, Acc v, int64_t) { return Op(s, v); }
  static State combine(State a, State b) { return Op(a, b); }
  template <class Out>
  static Out finish(State s, int64_t) {
    return store_from<Out>(s);
  }
};

inline constexpr const char* kSumName = STRATA_OP_SUM;
inline constexpr const char* kProdName = STRATA_OP_PROD;
template <class Acc>
using SumR = FoldR<Acc, kSumName, 0, wrap_add<Acc>>;
template <class Acc>
using ProdR = FoldR<Acc, kProdName, 1, wrap_mul<Acc>>;

template <class Acc>
struct MeanR : SumR<Acc> {
  static constexpr const char* name = STRATA_OP_MEAN;
  template <class Out>
  static Out finish(Acc s, int64_t count) {
    return store_from<Out>(s / static_cast<Acc>(count));
  }
};

/// max (Greater = true) and min; NaN wins over everything.
template <class Acc, bool Greater>
struct ExtremumR {
  static constexpr const char* name = Greater ? STRATA_OP_MAX : STRATA_OP_MIN;
  static constexpr bool kLanes = true;
  using State = Acc;
  static State init() {
    if constexpr (std::is_floating_point_v<Acc>) {
      return Greater ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    } else {
      return Greater ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
    }
  }
  static State step(State s, Acc v, int64_t) { return (Greater ? v > s : v < s) || is_nan(v) ? v : s; }
  static State combine(State a, State b) { return step(a, b, 0); }
  template <class Out>
  static Out finish(State s, int64_t) {
    return store_from<Out>(s);
  }
};
template <class Acc>
using MaxR = ExtremumR<Acc, true>;
template <class Acc>
using MinR = ExtremumR<Acc, false>;

/// argmax / argmin: first occurrence wins; the first NaN beats any number.
template <class Acc, bool Greater>
struct ArgExtremumR {
  static constexpr const char* name = Greater ? STRATA_OP_ARGMAX : STRATA_OP_ARGMIN;
  static constexpr bool kLanes = false;
  struct State {
    Acc value;
    int64_t index;  // -1: empty
  };
  static bool better(Acc candidate, Acc incumbent) {
    if (is_nan(incumbent)) return false;
    return is_nan(candidate) || (Greater ? candidate > incumbent : candidate < incumbent);
  }
  static State init() { return {Acc(0), -1}; }
  static State step(State s, Acc v, int64_t index) {
    return s.index < 0 || better(v, s.value) ? State{v, index} : s;
  }
  static State combine(State a, State b) {
    if (b.index < 0) return a;
    return a.index < 0 || better(b.value, a.value) ? b : a;
  }
  template <class Out>
  static Out finish(State s, int64_t) {
    return s.index < 0 ? 0 : s.index;
  }
};
template <class Acc>
using ArgMaxR = ArgExtremumR<Acc, true>;
template <class Acc>
using ArgMinR = ArgExtremumR<Acc, false>;

/// Elements gathered into one partial state before it is folded into the
/// running total: a two-level cascade that bounds the rounding error of long
/// float sums (a single accumulator loses digits after ~1e5 terms).
constexpr int64_t kBlock = 4096;

/// Reduces n elements `stride` apart with 16 independent lanes (which the
/// compiler turns into vector registers when stride is Unit), block by block.
template <class R, class In, class S>
typename R::State reduce_run(const In* p, int64_t n, S stride) {
  using Acc = acc_t<In>;
  using State = typename R::State;
  constexpr int kLanes = 16;
  State total = R::init();
  if (n < 2 * kLanes) {  // tiny: lanes would cost more than they save
    for (int64_t i = 0; i < n; ++i) total = R::step(total, load_as<Acc>(p[i * stride]), 0);
    return total;
  }
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    State lane[kLanes];
    for (int j = 0; j < kLanes; ++j) lane[j] = R::init();
    int64_t i = b;
    for (; i + kLanes <= e; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) lane[j] = R::step(lane[j], load_as<Acc>(p[(i + j) * stride]), 0);
    }
    for (; i < e; ++i) lane[0] = R::step(lane[0], load_as<Acc>(p[i * stride]), 0);
    for (int w = kLanes / 2; w > 0; w /= 2) {
      for (int j = 0; j < w; ++j) lane[j] = R::combine(lane[j], lane[j + w]);
    }
    total = R::combine(total, lane[0]);
  }
  return total;
}

/// Reduces the reduced-layout positions [begin, end) starting at x.
template <class R, class In>
typename R::State reduce_range(const In* x, const Layout<1>& red, int64_t begin, int64_t end) {
  using Acc = acc_t<In>;
  using State = typename R::State;
  State total = R::init(), block = R::init();
  int64_t in_block = 0;
  int64_t pos = begin;
  for_each_run(red, begin, end, [&](const int64_t* off, int64_t count) {
    const In* p = x + off[0];
    const int64_t stride = red.inner_stride(0);
    if constexpr (R::kLanes) {
      block = R::combine(block, stride == 1 ? reduce_run<R>(p, count, Unit{}) : reduce_run<R>(p, count, stride));
    } else {  // argmax/argmin: in order, with positions
      for (int64_t i = 0; i < count; ++i) block = R::step(block, load_as<Acc>(p[i * stride]), pos + i);
    }
    pos += count;
    if ((in_block += count) >= kBlock) {
      total = R::combine(total, block);
      block = R::init();
      in_block = 0;
    }
  });
  return R::combine(total, block);
}

template <template <class> class R_, class In, class Out>
struct Reduce {
  using R = R_<acc_t<In>>;
  using State = typename R::State;
  static constexpr const char* name = R::name;
  using signature = Out(In);
  static constexpr uint32_t flags = kStrided;
  static constexpr int64_t kColumnBlock = 256;

  static strata_status run(const KernelCall& call) {
    const strata_tensor& xt = call.in(0);
    const strata_tensor& yt = call.out();
    if (xt.rank != yt.rank) return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: rank mismatch", name);
    const In* const x = data<const In>(xt);
    Out* const y = data<Out>(yt);
    if constexpr (R::kLanes) {  // fast path: single-threaded full reduction of a compact tensor
      const int64_t n = plugin::numel(xt);
      if (plugin::numel(yt) == 1 && plugin::is_contiguous(xt) && (n < kParallelGrain || call.threads <= 1)) {
        *y = R::template finish<Out>(reduce_run<R>(x, n, Unit{}), n);
        return STRATA_OK;
      }
    }
    ReductionLayout layout;
    if (int bad = 0; !reduction_layout(xt, yt, layout, bad)) {
      return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: output dim %d must be 1 or the input's", name, bad);
    }
    if (!R::kLanes && layout.reduced_dims > 1) {
      return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: reduces exactly one dim, got %d", name,
                  layout.reduced_dims);
    }
    const Layout<2>& kept = layout.kept;
    const Layout<1>& red = layout.reduced;
    const int64_t n_out = kept.numel();
    const int64_t n_red = red.numel();

    if (n_out < call.threads && n_red >= kParallelGrain) {
      split(x, y, kept, red, call.threads);
    } else if (kept.inner_stride(0) == 1 && red.inner_stride(0) != 1 && kept.shape[kept.rank - 1] >= 8) {
      columns(x, y, kept, red, call.threads);
    } else {
      parallel_for(
          n_out, call.threads,
          [&](int64_t b, int64_t e) {
            for_each_run(kept, b, e, [&](const int64_t* off, int64_t count) {
              const int64_t xs = kept.inner_stride(0), ys = kept.inner_stride(1);
              for (int64_t i = 0; i < count; ++i) {
                const State s = reduce_range<R>(x + off[0] + i * xs, red, 0, n_red);
                y[off[1] + i * ys] = R::template finish<Out>(s, n_red);
              }
            });
          },
          n_red);
    }
    return STRATA_OK;
  }

  /// Each output's reduction split into chunks shared by the threads;
  /// partials combined in chunk order (argmax/argmin rely on it for "first
  /// occurrence wins"), so the result depends on the chunk count only.
  static void split(const In* x, Out* y, const Layout<2>& kept, const Layout<1>& red, int threads) {
    const int64_t n_red = red.numel();
    const int64_t chunks = std::max<int64_t>(chunk_count(n_red, threads, n_red), 1);
    std::vector<State> partial(static_cast<size_t>(chunks));
    for_each_run(kept, 0, kept.numel(), [&](const int64_t* off, int64_t count) {
      for (int64_t i = 0; i < count; ++i) {
        const In* xo = x + off[0] + i * kept.inner_stride(0);
        for_each_chunk(chunks, threads, [&](int64_t c) {
          partial[static_cast<size_t>(c)] = reduce_range<R>(xo, red, n_red * c / chunks, n_red * (c + 1) / chunks);
        });
        State s = R::init();
        for (const State& p : partial) s = R::combine(s, p);
        y[off[1] + i * kept.inner_stride(1)] = R::template finish<Out>(s, n_red);
      }
    });
  }

  /// Blocks of up to kColumnBlock adjacent outputs whose inputs are adjacent
  /// too: one pass over the reduced dims updates the whole block.
  static void columns(const In* x, Out* y, const Layout<2>& kept, const Layout<1>& red, int threads) {
    using Acc = acc_t<In>;
    const int64_t n_red = red.numel();
    const int64_t inner = kept.shape[kept.rank - 1];
    const int64_t blocks_per_row = (inner + kColumnBlock - 1) / kColumnBlock;
    const int64_t n_blocks = kept.numel() / inner * blocks_per_row;
    parallel_for(
        n_blocks, threads,
        [&](int64_t b, int64_t e) {
          State acc[kColumnBlock], total[kColumnBlock];  // per output: current block, running total
          for (int64_t blk = b; blk < e; ++blk) {
            const int64_t first = blk / blocks_per_row * inner + blk % blocks_per_row * kColumnBlock;
            const int64_t width = std::min(kColumnBlock, inner - blk % blocks_per_row * kColumnBlock);
            for_each_run(kept, first, first + width, [&](const int64_t* off, int64_t) {
              for (int64_t c = 0; c < width; ++c) acc[c] = total[c] = R::init();
              int64_t pos = 0;
              for_each_run(red, 0, n_red, [&](const int64_t* roff, int64_t count) {
                for (int64_t r = 0; r < count; ++r) {
                  const In* p = x + off[0] + roff[0] + r * red.inner_stride(0);
                  for (int64_t c = 0; c < width; ++c) acc[c] = R::step(acc[c], load_as<Acc>(p[c]), pos + r);
                  if ((pos + r + 1) % kBlock == 0) {  // cascade, as in reduce_range
                    for (int64_t c = 0; c < width; ++c) total[c] = R::combine(total[c], acc[c]);
                    for (int64_t c = 0; c < width; ++c) acc[c] = R::init();
                  }
                }
                pos += count;
              });
              const int64_t ys = kept.inner_stride(1);
              for (int64_t c = 0; c < width; ++c) {
                y[off[1] + c * ys] = R::template finish<Out>(R::combine(total[c], acc[c]), n_red);
              }
            });
          }
        },
        n_red * kColumnBlock);
  }
};

template <template <class> class R, class... Ts>
void add_same(plugin::KernelTable& table, TypeList<Ts...>) {
  (add<Reduce<R, Ts, Ts>>(table), ...);
}

template <template <class> class R, class... Ts>
void add_to_i64(plugin::KernelTable& table, TypeList<Ts...>) {
  (add<Reduce<R, Ts, int64_t>>(table), ...);
}

}  // namespace

void register_reduce_kernels(plugin::KernelTable& table) {
  add_same<SumR>(table, FloatTypes{});
  add_to_i64<SumR>(table, TypeList<int32_t, int64_t, bool8>{});  // integer sums are i64
  add_same<MeanR>(table, FloatTypes{});
  add_same<ProdR>(table, NumericTypes{});
  add_same<MaxR>(table, NumericTypes{});
  add_same<MinR>(table, NumericTypes{});
  add_to_i64<ArgMaxR>(table, NumericTypes{});
  add_to_i64<ArgMinR>(table, NumericTypes{});
}

}  // namespace strata::cpu
