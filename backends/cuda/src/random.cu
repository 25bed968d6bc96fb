// random.cu — random_uniform, random_normal and bernoulli: counter-based
// Philox4x32-10, bit for bit the C reference strata/plugin/philox.h (its
// functions are __host__ __device__ under nvcc and hipcc), so a seed gives
// the same tensor here as on the CPU. This file is compiled without FMA
// contraction (-fmad=false / -ffp-contract=off, CMakeLists.txt): the normal
// transform is defined with separate + - * roundings.
//
// One thread computes one Philox block, i.e. four consecutive elements.
#include <strata/plugin/philox.h>

#include "eltwise.cuh"
#include "kernels.hpp"

namespace strata::gpu {
namespace {

enum Dist { kUniform, kNormal, kBernoulli };

template <class T, Dist D>
__global__ void philox_kernel(T* y, int64_t n, uint64_t seed, uint64_t offset, uint32_t threshold) {
  const int64_t blocks = (n + 3) / 4;
  STRATA_GRID_STRIDE(k, blocks) {
    const strata_philox_block b = strata_philox4x32_10(static_cast<uint64_t>(k), offset, seed);
    const int64_t first = 4 * k;
    if constexpr (D == kNormal) {
      for (uint32_t pair = 0; pair < 4 && first + pair < n; pair += 2) {
        float z_even = 0.0f, z_odd = 0.0f;
        strata_philox_box_muller(b.v[pair], b.v[pair + 1], &z_even, &z_odd);
        y[first + pair] = Scalar<T>::store(z_even);
        if (first + pair + 1 < n) y[first + pair + 1] = Scalar<T>::store(z_odd);
      }
    } else {
      for (int j = 0; j < 4 && first + j < n; ++j) {
        if constexpr (D == kUniform) {
          y[first + j] = Scalar<T>::store(strata_philox_uniform(b.v[j]));
        } else {
          y[first + j] = convert<T, bool8>(bool8{static_cast<uint8_t>((b.v[j] >> 8) < threshold ? 1 : 0)});
        }
      }
    }
  }
}

template <const char* const& Op, class T, Dist D>
struct RandomKernel {
  static constexpr const char* op = Op;
  using inputs = Types<>;
  using outputs = Types<T>;
  static strata_status run(Launch& l) {
    const strata_tensor& y = l.out();
    if (!plugin::is_contiguous(y)) {
      return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: output %s must be contiguous", op,
                  plugin::describe(y).c_str());
    }
    const strata_attr* seed = plugin::attr_of_kind(l.call, "seed", STRATA_ATTR_INT);
    const strata_attr* offset = plugin::attr_of_kind(l.call, "offset", STRATA_ATTR_INT);
    if (seed == nullptr || offset == nullptr) {
      return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: missing attribute '%s' (INT)", op,
                  seed == nullptr ? "seed" : "offset");
    }
    uint32_t threshold = 0;
    if constexpr (D == kBernoulli) {
      const strata_attr* p = plugin::attr_of_kind(l.call, "p", STRATA_ATTR_FLOAT);
      if (p == nullptr) return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: missing attribute 'p' (FLOAT)", op);
      if (!(p->f >= 0.0 && p->f <= 1.0)) {
        return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: p must be in [0, 1], got %g", op, p->f);
      }
      threshold = strata_philox_threshold(p->f);
    }
    const int64_t n = element_count(y);
    philox_kernel<T, D><<<grid_for((n + 3) / 4, l.device), kThreads, 0, l.stream>>>(
        data<T>(y), n, static_cast<uint64_t>(seed->i), static_cast<uint64_t>(offset->i), threshold);
    return launch_result(l, "philox_kernel");
  }
};

constexpr const char* kUniformName = STRATA_OP_RANDOM_UNIFORM;
constexpr const char* kNormalName = STRATA_OP_RANDOM_NORMAL;
constexpr const char* kBernoulliName = STRATA_OP_BERNOULLI;

template <class T>
void add_float(plugin::KernelTable& t) {
  add<RandomKernel<kUniformName, T, kUniform>>(t, 0);
  add<RandomKernel<kNormalName, T, kNormal>>(t, 0);
}

}  // namespace

void register_random_kernels(plugin::KernelTable& t) {
  for_each_type(FloatTypes{}, [&]<class T>() { add_float<T>(t); });
  for_each_type(AllTypes{}, [&]<class T>() { add<RandomKernel<kBernoulliName, T, kBernoulli>>(t, 0); });
}

}  // namespace strata::gpu
