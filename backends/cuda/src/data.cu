// data.cu — data movement: fill, cast and copy (docs/ops.md), for every
// stored dtype. copy takes strided inputs and a strided output; a compact
// copy is a cudaMemcpyAsync.
#include "eltwise.cuh"
#include "kernels.hpp"

namespace strata::gpu {
namespace {

template <class T>
struct FillKernel {
  static constexpr const char* op = STRATA_OP_FILL;
  using inputs = Types<>;
  using outputs = Types<T>;
  struct F {
    T value;
    __device__ T operator()(int64_t) const { return value; }
  };
  static strata_status run(Launch& l) {
    const strata_attr* a = plugin::attr_of_kind(l.call, "value", STRATA_ATTR_SCALAR);
    if (a == nullptr) return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: missing attribute 'value'", op);
    T v{};
    if (a->scalar_dtype == STRATA_F64) {
      v = convert<T, double>(a->f);
    } else {
      v = convert<T, int64_t>(a->i);
    }
    return map0<T>(l, F{v}, op);
  }
};

template <class To, class From>
struct CastKernel {
  static constexpr const char* op = STRATA_OP_CAST;
  using inputs = Types<From>;
  using outputs = Types<To>;
  struct F {
    __device__ To operator()(From x) const { return convert<To, From>(x); }
  };
  static strata_status run(Launch& l) { return map1<To, From>(l, F{}, op); }
};

template <class T>
struct CopyKernel {
  static constexpr const char* op = STRATA_OP_COPY;
  using inputs = Types<T>;
  using outputs = Types<T>;
  struct F {
    __device__ T operator()(T x) const { return x; }
  };
  static strata_status run(Launch& l) {
    const strata_tensor& y = l.out();
    const strata_tensor& x = l.in(0);
    if (plugin::is_contiguous(y) && plugin::is_contiguous(x)) {
      const size_t bytes = static_cast<size_t>(element_count(y)) * sizeof(T);
      if (cudaError_t e = cudaMemcpyAsync(data<T>(y), data<const T>(x), bytes, cudaMemcpyDeviceToDevice, l.stream);
          e != cudaSuccess) {
        return runtime_failure(e, &l.device, op, l.error);
      }
      return STRATA_OK;
    }
    return map1<T, T>(l, F{}, op);
  }
};

template <class To, class... From>
void add_casts_to(plugin::KernelTable& t, Types<From...>) {
  (
      [&] {
        if constexpr (!std::is_same_v<To, From>) add<CastKernel<To, From>>(t);
      }(),
      ...);
}

template <class... T>
void add_all(plugin::KernelTable& t, Types<T...>) {
  (add<FillKernel<T>>(t), ...);
  (add<CopyKernel<T>>(t), ...);
  (add_casts_to<T>(t, Types<T...>{}), ...);
}

}  // namespace

void register_data_kernels(plugin::KernelTable& t) {
  add_all(t, AllTypes{});
}

}  // namespace strata::gpu
