// reduce.cu — sum, mean, prod, max, min, argmax, argmin over any set of dims
// (docs/ops.md "Reductions"), strided inputs.
//
// One block reduces one output element: each thread combines a strided
// slice of the reduced elements, then the block combines the threads'
// partials in shared memory with the tree of kernel_math.hpp (tree_step),
// the same code the CPU unit tests run. When there are few outputs and many
// elements each (a full sum), every output is split over several blocks that
// write partial states to workspace memory, and a second kernel combines
// them, so the whole GPU works on it. Float sums accumulate in f32 (f64 for
// f64), integer sums in i64; argmax/argmin keep the first occurrence and
// propagate NaN (ArgMaxOp/ArgMinOp are order-independent, so any tree gives
// the sequential answer).
#include "eltwise.cuh"
#include "kernels.hpp"

namespace strata::gpu {
namespace {

constexpr int kReduceThreads = 256;

enum Finish { kPlainValue, kMeanValue, kIndex };

/// One element's state: the value, or (value, index) for arg reductions.
template <class Op, class State, class Acc, Finish F>
__device__ State element_state(Acc v, int64_t r) {
  if constexpr (F == kIndex) {
    return State{v, r};
  } else {
    return static_cast<State>(v);
  }
}

template <class Out, class State, Finish F>
__device__ Out finish(State s, int64_t n_reduce) {
  if constexpr (F == kIndex) {
    return s.i;
  } else if constexpr (F == kMeanValue) {
    return Scalar<Out>::store(static_cast<compute_t<Out>>(s / static_cast<State>(n_reduce)));
  } else {
    return Scalar<Out>::store(static_cast<compute_t<Out>>(s));
  }
}

/// The block's tree over buf[0, blockDim.x); the result is in buf[0].
template <class State, class Op>
__device__ void block_tree(State* buf) {
  __syncthreads();
  for (int stride = static_cast<int>(blockDim.x) / 2; stride > 0; stride /= 2) {
    tree_step<State, Op>(buf, static_cast<int>(threadIdx.x), stride);
    __syncthreads();
  }
}

/// Task t reduces output t / splits over its part t % splits of the reduced
/// elements; with splits == 1 it writes the output, else a partial state.
template <class T, class Out, class Op, class State, Finish F>
__global__ void reduce_kernel(const T* x, ReducePlan p, int64_t splits, State* partial, Out* y) {
  __shared__ State buf[kReduceThreads];
  using Acc = compute_t<T>;
  const int64_t chunk = (p.n_reduce + splits - 1) / splits;
  for (int64_t task = blockIdx.x; task < p.n_out * splits; task += gridDim.x) {
    const int64_t out = task / splits;
    const int64_t begin = (task % splits) * chunk;
    const int64_t end = begin + chunk < p.n_reduce ? begin + chunk : p.n_reduce;
    State v = Op::identity();
    for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x) {
      const Acc value = Scalar<T>::load(x[reduce_input_offset(p, out, r)]);
      v = Op::combine(v, element_state<Op, State, Acc, F>(value, r));
    }
    buf[threadIdx.x] = v;
    block_tree<State, Op>(buf);
    if (threadIdx.x == 0) {
      if (splits == 1) {
        y[out] = finish<Out, State, F>(buf[0], p.n_reduce);
      } else {
        partial[task] = buf[0];
      }
    }
    __syncthreads();
  }
}

/// Combines the `splits` partial states of each output.
template <class Out, class Op, class State, Finish F>
__global__ void combine_kernel(const State* partial, int64_t splits, int64_t n_out, int64_t n_reduce, Out* y) {
  __shared__ State buf[kReduceThreads];
  for (int64_t out = blockIdx.x; out < n_out; out += gridDim.x) {
    State v = Op::identity();
    for (int64_t j = threadIdx.x; j < splits; j += blockDim.x) v = Op::combine(v, partial[out * splits + j]);
    buf[threadIdx.x] = v;
    block_tree<State, Op>(buf);
    if (threadIdx.x == 0) y[out] = finish<Out, State, F>(buf[0], n_reduce);
    __syncthreads();
  }
}

/// The "dims" attribute, checked against the input's rank.
strata_status reduced_dims(const Launch& l, const char* op, int64_t* dims, int* n_dims) {
  const strata_attr* a = plugin::attr_of_kind(l.call, "dims", STRATA_ATTR_INTS);
  const int rank = l.in(0).rank;
  if (a == nullptr || a->count < 1 || a->count > rank || a->ints == nullptr) {
    return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: attribute 'dims' must list 1 to %d dims", op, rank);
  }
  for (int64_t k = 0; k < a->count; ++k) {
    const int64_t d = a->ints[k];
    if (d < 0 || d >= rank || (k > 0 && d <= a->ints[k - 1])) {
      return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: attribute 'dims' must be sorted, unique and in [0, %d); entry %lld is %lld", op, rank,
                  static_cast<long long>(k), static_cast<long long>(d));
    }
    dims[k] = d;
  }
  *n_dims = static_cast<int>(a->count);
  return STRATA_OK;
}

template <class T, class Out, class Op, class State, Finish F>
strata_status reduce(Launch& l, const char* op) {
  int64_t dims[kMaxRank];
  int n_dims = 0;
  if (strata_status s = reduced_dims(l, op, dims, &n_dims); s != STRATA_OK) return s;
  const strata_tensor& x = l.in(0);
  const ReducePlan p = make_reduce_plan(shape_of(x), operand_of(x), dims, n_dims);
  // Enough blocks to fill the GPU: split outputs when they are few and long.
  const int64_t want_blocks = static_cast<int64_t>(l.device.multiprocessors) * 4;
  int64_t splits = 1;
  if (p.n_out < want_blocks && p.n_reduce >= 16 * kReduceThreads) {
    splits = std::min<int64_t>((want_blocks + p.n_out - 1) / p.n_out, p.n_reduce / (4 * kReduceThreads));
    splits = std::max<int64_t>(splits, 1);
  }
  const int64_t tasks = p.n_out * splits;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(tasks, 65535LL * 16));
  Out* y = data<Out>(l.out());
  if (splits == 1) {
    reduce_kernel<T, Out, Op, State, F><<<blocks, kReduceThreads, 0, l.stream>>>(base<const T>(x), p, 1, nullptr, y);
    return launch_result(l, "reduce_kernel");
  }
  void* scratch = nullptr;
  if (strata_status s = workspace(l, static_cast<size_t>(tasks) * sizeof(State), &scratch); s != STRATA_OK) return s;
  State* partial = static_cast<State*>(scratch);
  reduce_kernel<T, Out, Op, State, F><<<blocks, kReduceThreads, 0, l.stream>>>(base<const T>(x), p, splits, partial, y);
  if (strata_status s = launch_result(l, "reduce_kernel"); s != STRATA_OK) return s;
  const unsigned out_blocks = static_cast<unsigned>(std::min<int64_t>(p.n_out, 65535));
  combine_kernel<Out, Op, State, F><<<out_blocks, kReduceThreads, 0, l.stream>>>(partial, splits, p.n_out, p.n_reduce, y);
  return launch_result(l, "reduce_combine_kernel");
}

template <class T>
using acc_of = compute_t<T>;

/// Sums accumulate in at least the compute type; integer sums in i64.
template <class T>
using sum_state = std::conditional_t<is_float_storage<T>, acc_of<T>, int64_t>;

template <const char* const& Op, class T, class Out, class Combiner, class State, Finish F>
struct ReduceKernel {
  static constexpr const char* op = Op;
  using inputs = Types<T>;
  using outputs = Types<Out>;
  static strata_status run(Launch& l) { return reduce<T, Out, Combiner, State, F>(l, Op); }
};

constexpr const char* kSum = STRATA_OP_SUM;
constexpr const char* kMean = STRATA_OP_MEAN;
constexpr const char* kProd = STRATA_OP_PROD;
constexpr const char* kMax = STRATA_OP_MAX;
constexpr const char* kMin = STRATA_OP_MIN;
constexpr const char* kArgMax = STRATA_OP_ARGMAX;
constexpr const char* kArgMin = STRATA_OP_ARGMIN;

template <class T>
void add_numeric(plugin::KernelTable& t) {
  using A = acc_of<T>;
  add<ReduceKernel<kProd, T, T, ProdOp<A>, A, kPlainValue>>(t);
  add<ReduceKernel<kMax, T, T, MaxOp<A>, A, kPlainValue>>(t);
  add<ReduceKernel<kMin, T, T, MinOp<A>, A, kPlainValue>>(t);
  add<ReduceKernel<kArgMax, T, int64_t, ArgMaxOp<A>, ArgPair<A>, kIndex>>(t);
  add<ReduceKernel<kArgMin, T, int64_t, ArgMinOp<A>, ArgPair<A>, kIndex>>(t);
  if constexpr (is_float_storage<T>) {
    add<ReduceKernel<kSum, T, T, SumOp<A>, A, kPlainValue>>(t);
    add<ReduceKernel<kMean, T, T, SumOp<A>, A, kMeanValue>>(t);
  } else {
    add<ReduceKernel<kSum, T, int64_t, SumOp<int64_t>, int64_t, kPlainValue>>(t);
  }
}

}  // namespace

void register_reduce_kernels(plugin::KernelTable& t) {
  for_each_type(NumericTypes{}, [&]<class T>() { add_numeric<T>(t); });
  add<ReduceKernel<kSum, bool8, int64_t, SumOp<int64_t>, int64_t, kPlainValue>>(t);
}

}  // namespace strata::gpu
