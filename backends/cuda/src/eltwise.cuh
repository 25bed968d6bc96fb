// eltwise.cuh — the elementwise map kernels (0 to 3 inputs, any strides) that
// every elementwise op is an instance of, and the functor adaptors that
// lift a compute-type operation to storage types.
//
// Operands are coalesced on the host first (kernel_math.hpp): dims that are
// contiguous in every operand merge, so a compact call runs a flat loop and
// only genuinely strided views pay for the index arithmetic. Grid-stride
// loops with 64-bit indices; the output may be strided too (copy).
#pragma once

#include <initializer_list>

#include "kernel_common.cuh"

namespace strata::gpu {

/// Records a data-dependent kernel failure for the next synchronisation
/// point (state.hpp, DeviceFailure). The first failure since the last report
/// keeps its details; later ones only count.
__device__ inline void report_failure(DeviceFailure* f, int kind, int op, long long value, long long bound) {
  if (atomicAdd(&f->count, 1u) == 0u) {
    f->kind = kind;
    f->op = op;
    f->value = value;
    f->bound = bound;
    __threadfence_system();
  }
}

#define STRATA_GRID_STRIDE(i, n)                                                       \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <class F, class Y>
__global__ void map0_kernel(F f, Y* y, Shape s, Operand oy, int64_t n, bool compact) {
  STRATA_GRID_STRIDE(i, n) {
    const int64_t yi = compact ? oy.offset + i : offset_of(s, oy, i);
    y[yi] = f(i);
  }
}

/// Compact operands: each thread takes kUnroll elements a grid stride apart
/// per step and loads them all before computing, so that kUnroll loads per
/// operand are in flight at once. One element at a time left the H200's
/// f32 add at 53 % of PyTorch's bandwidth (2.25 against 4.30 TB/s).
inline constexpr int kUnroll = 4;

template <class F, class Y, class A>
__device__ void map1_compact(F f, Y* y, const A* a, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    A av[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) av[u] = a[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) y[i + u * stride] = f(av[u]);
  }
  for (; i < n; i += stride) y[i] = f(a[i]);
}

/// Four elements in one aligned load or store (16 bytes for 4-byte types).
template <class T>
struct alignas(sizeof(T) * 4) Vec4 {
  T v[4];
};

template <class T>
__device__ bool vec4_aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(Vec4<T>) == 0;
}

template <class F, class Y, class A, class B>
__device__ void map2_compact(F f, Y* y, const A* a, const B* b, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (vec4_aligned(y) && vec4_aligned(a) && vec4_aligned(b)) {  // the same for every thread
    // Whole vectors of four, then the last n % 4 elements one by one.
    const int64_t vectors = n / 4;
    auto* yv = reinterpret_cast<Vec4<Y>*>(y);
    const auto* av = reinterpret_cast<const Vec4<A>*>(a);
    const auto* bv = reinterpret_cast<const Vec4<B>*>(b);
    for (int64_t v = i; v < vectors; v += stride) {
      const Vec4<A> x = av[v];
      const Vec4<B> z = bv[v];
      Vec4<Y> r;
#pragma unroll
      for (int u = 0; u < 4; ++u) r.v[u] = f(x.v[u], z.v[u]);
      yv[v] = r;
    }
    for (int64_t j = vectors * 4 + i; j < n; j += stride) y[j] = f(a[j], b[j]);
    return;
  }
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    A av[kUnroll];
    B bv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      av[u] = a[i + u * stride];
      bv[u] = b[i + u * stride];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) y[i + u * stride] = f(av[u], bv[u]);
  }
  for (; i < n; i += stride) y[i] = f(a[i], b[i]);
}

template <class F, class Y, class A>
__global__ void map1_kernel(F f, Y* y, const A* a, Shape s, Operand oy, Operand oa, int64_t n, bool compact) {
  if (compact) {
    map1_compact(f, y + oy.offset, a + oa.offset, n);
    return;
  }
  STRATA_GRID_STRIDE(i, n) { y[offset_of(s, oy, i)] = f(a[offset_of(s, oa, i)]); }
}

template <class F, class Y, class A, class B>
__global__ void map2_kernel(F f, Y* y, const A* a, const B* b, Shape s, Operand oy, Operand oa, Operand ob, int64_t n,
                            bool compact) {
  if (compact) {
    map2_compact(f, y + oy.offset, a + oa.offset, b + ob.offset, n);
    return;
  }
  STRATA_GRID_STRIDE(i, n) { y[offset_of(s, oy, i)] = f(a[offset_of(s, oa, i)], b[offset_of(s, ob, i)]); }
}

template <class F, class Y, class A, class B, class C>
__global__ void map3_kernel(F f, Y* y, const A* a, const B* b, const C* c, Shape s, Operand oy, Operand oa,
                            Operand ob, Operand oc, int64_t n, bool compact) {
  STRATA_GRID_STRIDE(i, n) {
    if (compact) {
      y[oy.offset + i] = f(a[oa.offset + i], b[ob.offset + i], c[oc.offset + i]);
    } else {
      y[offset_of(s, oy, i)] = f(a[offset_of(s, oa, i)], b[offset_of(s, ob, i)], c[offset_of(s, oc, i)]);
    }
  }
}

/// The coalesced iteration space of an output and its inputs.
template <int N>
struct Space {
  Shape shape;
  Operand ops[N];  // output first
  int64_t n;
  bool compact;
};

template <int N>
Space<N> space_of(const strata_tensor& y, std::initializer_list<const strata_tensor*> inputs) {
  Space<N> sp{};
  sp.shape = shape_of(y);
  sp.ops[0] = operand_of(y);
  int k = 1;
  for (const strata_tensor* t : inputs) {
    if (k < N) sp.ops[k++] = operand_of(*t);
  }
  sp.n = element_count(y);
  coalesce(sp.shape, sp.ops, N);
  sp.compact = true;
  for (int j = 0; j < N; ++j) sp.compact = sp.compact && is_compact(sp.shape, sp.ops[j]);
  return sp;
}

template <class Y, class F>
strata_status map0(Launch& l, F f, const char* kernel) {
  const strata_tensor& y = l.out();
  Space<1> sp = space_of<1>(y, {});
  map0_kernel<<<grid_for(sp.n, l.device), kThreads, 0, l.stream>>>(f, base<Y>(y), sp.shape, sp.ops[0], sp.n,
                                                                   sp.compact);
  return launch_result(l, kernel);
}

template <class Y, class A, class F>
strata_status map1(Launch& l, F f, const char* kernel) {
  const strata_tensor& y = l.out();
  Space<2> sp = space_of<2>(y, {&l.in(0)});
  map1_kernel<<<grid_for(sp.n, l.device), kThreads, 0, l.stream>>>(f, base<Y>(y), base<const A>(l.in(0)), sp.shape,
                                                                   sp.ops[0], sp.ops[1], sp.n, sp.compact);
  return launch_result(l, kernel);
}

template <class Y, class A, class B, class F>
strata_status map2(Launch& l, F f, const char* kernel) {
  const strata_tensor& y = l.out();
  Space<3> sp = space_of<3>(y, {&l.in(0), &l.in(1)});
  map2_kernel<<<grid_for(sp.n, l.device), kThreads, 0, l.stream>>>(f, base<Y>(y), base<const A>(l.in(0)),
                                                                   base<const B>(l.in(1)), sp.shape, sp.ops[0],
                                                                   sp.ops[1], sp.ops[2], sp.n, sp.compact);
  return launch_result(l, kernel);
}

template <class Y, class A, class B, class C, class F>
strata_status map3(Launch& l, F f, const char* kernel) {
  const strata_tensor& y = l.out();
  Space<4> sp = space_of<4>(y, {&l.in(0), &l.in(1), &l.in(2)});
  map3_kernel<<<grid_for(sp.n, l.device), kThreads, 0, l.stream>>>(
      f, base<Y>(y), base<const A>(l.in(0)), base<const B>(l.in(1)), base<const C>(l.in(2)), sp.shape, sp.ops[0],
      sp.ops[1], sp.ops[2], sp.ops[3], sp.n, sp.compact);
  return launch_result(l, kernel);
}

// ---- Adaptors: compute-type functors on storage types -------------------------------

/// T -> T through the compute type: Op{}(compute) -> compute.
template <class T, class Op>
struct Unary {
  __device__ T operator()(T x) const { return Scalar<T>::store(Op{}(Scalar<T>::load(x))); }
};

/// T, T -> T through the compute type.
template <class T, class Op>
struct Binary {
  __device__ T operator()(T a, T b) const {
    return Scalar<T>::store(Op{}(Scalar<T>::load(a), Scalar<T>::load(b)));
  }
};

/// T, T -> bool.
template <class T, class Op>
struct Compare {
  __device__ bool8 operator()(T a, T b) const {
    return Scalar<bool8>::store(Op{}(Scalar<T>::load(a), Scalar<T>::load(b)));
  }
};

// ---- Kernel records of two-input maps -----------------------------------------------

/// An op computed element by element from two inputs of dtype T into Out
/// through the storage functor F.
template <const char* const& Op, class Out, class T, class F>
struct Map2Kernel {
  static constexpr const char* op = Op;
  using inputs = Types<T, T>;
  using outputs = Types<Out>;
  static strata_status run(Launch& l) { return map2<Out, T, T>(l, F{}, Op); }
};

/// T, T -> T through the compute-type functor F (add, the activations'
/// backward ops, ...).
template <const char* const& Op, class T, class F>
using BinaryKernel = Map2Kernel<Op, T, T, Binary<T, F>>;

/// T, T -> bool through the compute-type predicate F.
template <const char* const& Op, class T, class F>
using CompareKernel = Map2Kernel<Op, bool8, T, Compare<T, F>>;

}  // namespace strata::gpu
