// index.cu — index_select, gather and scatter_add (docs/ops.md "Indexing").
// Operands are compact (registered without STRATA_KERNEL_STRIDED_INPUTS).
//
// An index outside [0, size) is never read or written: the element is
// skipped (0 for the selecting ops) and the failure is recorded for the next
// synchronisation point, which reports STRATA_ERROR_DEFERRED naming the op
// and the index — no value is read back to the host to check it.
// scatter_add adds with atomics, so the order of additions into one element
// (and the rounding of a float sum) is not deterministic, as in PyTorch.
#include "eltwise.cuh"
#include "kernels.hpp"

namespace strata::gpu {
namespace {

/// Sizes of a compact tensor around `dim`: outer x n x inner.
struct Around {
  int64_t outer, n, inner;
};

Around around(const strata_tensor& t, int dim) {
  Around a{1, t.shape[dim], 1};
  for (int d = 0; d < dim; ++d) a.outer *= t.shape[d];
  for (int d = dim + 1; d < t.rank; ++d) a.inner *= t.shape[d];
  return a;
}

template <class T>
__global__ void index_select_kernel(const T* x, const int64_t* index, T* y, Around xs, int64_t len, int64_t n,
                                    DeviceFailure* failure) {
  STRATA_GRID_STRIDE(i, n) {
    const int64_t k = i % xs.inner;
    const int64_t j = (i / xs.inner) % len;
    const int64_t o = i / (xs.inner * len);
    const int64_t idx = index[j];
    if (idx < 0 || idx >= xs.n) {
      report_failure(failure, kIndexOutOfRange, kTagIndexSelect, idx, xs.n);
      y[i] = T{};
      continue;
    }
    y[i] = x[(o * xs.n + idx) * xs.inner + k];
  }
}

/// Element offset of `coord` in a compact tensor of shape `s`, with coord[dim] replaced by `at`.
__device__ inline int64_t compact_offset(const Shape& s, const int64_t* coord, int dim, int64_t at) {
  int64_t off = 0;
  for (int d = 0; d < s.rank; ++d) off = off * s.n[d] + (d == dim ? at : coord[d]);
  return off;
}

template <class T>
__global__ void gather_kernel(const T* x, Shape xs, const int64_t* index, Shape is, T* y, int dim, int64_t n,
                              DeviceFailure* failure) {
  int64_t coord[kMaxRank];
  STRATA_GRID_STRIDE(i, n) {
    const int64_t idx = index[i];
    if (idx < 0 || idx >= xs.n[dim]) {
      report_failure(failure, kIndexOutOfRange, kTagGather, idx, xs.n[dim]);
      y[i] = T{};
      continue;
    }
    unravel(is, i, coord);
    y[i] = x[compact_offset(xs, coord, dim, idx)];
  }
}

// atomicAdd for every numeric storage type.
__device__ inline void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ inline void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ inline void atomic_add(int32_t* p, int32_t v) { atomicAdd(reinterpret_cast<int*>(p), static_cast<int>(v)); }
__device__ inline void atomic_add(int64_t* p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));  // two's complement
}
/// 16-bit floats: compare-and-swap on the aligned 32-bit word holding them.
template <class T>
__device__ inline void atomic_add_16(T* p, float v) {
  auto* word = reinterpret_cast<unsigned int*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3});
  const unsigned shift = (reinterpret_cast<uintptr_t>(p) & 2u) ? 16u : 0u;
  unsigned int old = *word, assumed = 0;
  do {
    assumed = old;
    const T current{static_cast<uint16_t>((assumed >> shift) & 0xffffu)};
    const T sum = Scalar<T>::store(Scalar<T>::load(current) + v);
    const unsigned int updated = (assumed & ~(0xffffu << shift)) | (static_cast<unsigned int>(sum.bits) << shift);
    old = atomicCAS(word, assumed, updated);
  } while (old != assumed);
}
__device__ inline void atomic_add(half_t* p, half_t v) { atomic_add_16(p, Scalar<half_t>::load(v)); }
__device__ inline void atomic_add(bfloat16_t* p, bfloat16_t v) { atomic_add_16(p, Scalar<bfloat16_t>::load(v)); }

template <class T>
__global__ void scatter_add_kernel(T* y, Shape ys, const int64_t* index, const T* src, Shape is, int dim, int64_t n,
                                   DeviceFailure* failure) {
  int64_t coord[kMaxRank];
  STRATA_GRID_STRIDE(i, n) {
    const int64_t idx = index[i];
    if (idx < 0 || idx >= ys.n[dim]) {
      report_failure(failure, kIndexOutOfRange, kTagScatterAdd, idx, ys.n[dim]);
      continue;
    }
    unravel(is, i, coord);
    atomic_add(&y[compact_offset(ys, coord, dim, idx)], src[i]);
  }
}

strata_status dim_attr(const Launch& l, const char* op, int rank, int* dim) {
  const int64_t d = plugin::attr_int(l.call, "dim", -1);
  if (d < 0 || d >= rank) {
    return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: attribute 'dim' %lld is outside [0, %d)", op,
                static_cast<long long>(d), rank);
  }
  *dim = static_cast<int>(d);
  return STRATA_OK;
}

template <class T>
struct IndexSelect {
  static constexpr const char* op = STRATA_OP_INDEX_SELECT;
  using inputs = Types<T, int64_t>;
  using outputs = Types<T>;
  static strata_status run(Launch& l) {
    int dim = 0;
    if (strata_status s = dim_attr(l, op, l.in(0).rank, &dim); s != STRATA_OK) return s;
    const int64_t n = element_count(l.out());
    index_select_kernel<T><<<grid_for(n, l.device), kThreads, 0, l.stream>>>(
        data<const T>(l.in(0)), data<const int64_t>(l.in(1)), data<T>(l.out()), around(l.in(0), dim),
        element_count(l.in(1)), n, l.device.failure_device);
    return launch_result(l, "index_select_kernel");
  }
};

template <class T>
struct Gather {
  static constexpr const char* op = STRATA_OP_GATHER;
  using inputs = Types<T, int64_t>;
  using outputs = Types<T>;
  static strata_status run(Launch& l) {
    int dim = 0;
    if (strata_status s = dim_attr(l, op, l.in(0).rank, &dim); s != STRATA_OK) return s;
    const int64_t n = element_count(l.out());
    gather_kernel<T><<<grid_for(n, l.device), kThreads, 0, l.stream>>>(
        data<const T>(l.in(0)), shape_of(l.in(0)), data<const int64_t>(l.in(1)), shape_of(l.in(1)), data<T>(l.out()),
        dim, n, l.device.failure_device);
    return launch_result(l, "gather_kernel");
  }
};

template <class T>
struct ScatterAdd {
  static constexpr const char* op = STRATA_OP_SCATTER_ADD;
  using inputs = Types<T, int64_t, T>;
  using outputs = Types<T>;
  static strata_status run(Launch& l) {
    int dim = 0;
    if (strata_status s = dim_attr(l, op, l.in(0).rank, &dim); s != STRATA_OK) return s;
    const strata_tensor& y = l.out();
    const size_t bytes = static_cast<size_t>(element_count(y)) * sizeof(T);
    if (cudaError_t e = cudaMemcpyAsync(data<T>(y), data<const T>(l.in(0)), bytes, cudaMemcpyDeviceToDevice, l.stream);
        e != cudaSuccess) {
      return runtime_failure(e, &l.device, op, l.error);
    }
    const int64_t n = element_count(l.in(1));
    scatter_add_kernel<T><<<grid_for(n, l.device), kThreads, 0, l.stream>>>(
        data<T>(y), shape_of(y), data<const int64_t>(l.in(1)), data<const T>(l.in(2)), shape_of(l.in(1)), dim, n,
        l.device.failure_device);
    return launch_result(l, "scatter_add_kernel");
  }
};

template <class T>
void add_selecting(plugin::KernelTable& t) {
  add<IndexSelect<T>>(t, 0);
  add<Gather<T>>(t, 0);
}

}  // namespace

void register_index_kernels(plugin::KernelTable& t) {
  for_each_type(AllTypes{}, [&]<class T>() { add_selecting<T>(t); });
  for_each_type(NumericTypes{}, [&]<class T>() { add<ScatterAdd<T>>(t, 0); });
}

}  // namespace strata::gpu
