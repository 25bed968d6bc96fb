// random.cpp — random_uniform, random_normal and bernoulli (docs/ops.md,
// "Random numbers"): Philox4x32-10 straight from the reference header
// strata/plugin/philox.h, one block of four elements per counter.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt): philox.h's
// binary32 arithmetic must run as written, unfused, for the bits to equal
// every other backend's.
#include "kernel.hpp"
#include "strided.hpp"

#include <strata/plugin/philox.h>

#include <algorithm>
#include <cmath>

namespace strata::cpu {
namespace {

/// Relative cost (a copy is 1) of a block of four elements, so that small
/// outputs stay on one thread.
constexpr int64_t kPhiloxCost = 24;
constexpr int64_t kNormalCost = 64;

/// The Philox key and the high half of its counter.
struct PhiloxKey {
  uint64_t seed;
  uint64_t offset;
};

/// "seed" and "offset" (INT, the 64-bit patterns); a missing one is an error.
strata_status read_stream(const KernelCall& call, const char* op, PhiloxKey& out) {
  const strata_attr* seed = plugin::attr_of_kind(call.abi, "seed", STRATA_ATTR_INT);
  const strata_attr* offset = plugin::attr_of_kind(call.abi, "offset", STRATA_ATTR_INT);
  if (seed == nullptr || offset == nullptr) {
    return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: missing attribute '%s' (INT)", op,
                seed == nullptr ? "seed" : "offset");
  }
  out = {static_cast<uint64_t>(seed->i), static_cast<uint64_t>(offset->i)};
  if (!plugin::is_contiguous(call.out())) {
    return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: output %s must be contiguous", op,
                plugin::describe(call.out()).c_str());
  }
  return STRATA_OK;
}

/// The body of a Philox kernel: reads the stream attributes, then calls
/// fill(block, y, first, m) for every block of four elements of the
/// n-element output y, where the block covers y[first, first + m), m <= 4.
template <class T, class Fill>
strata_status fill_blocks(const KernelCall& call, const char* op, int64_t cost, Fill&& fill) {
  PhiloxKey s{};
  if (const strata_status st = read_stream(call, op, s); st != STRATA_OK) return st;
  T* const y = data<T>(call.out());
  const int64_t n = plugin::numel(call.out());
  const int64_t blocks = n / 4 + (n % 4 != 0 ? 1 : 0);
  parallel_for(
      blocks, call.threads,
      [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          const strata_philox_block block = strata_philox4x32_10(static_cast<uint64_t>(k), s.offset, s.seed);
          fill(block, y, 4 * k, std::min<int64_t>(4, n - 4 * k));
        }
      },
      cost);
  return STRATA_OK;
}

template <class T>
struct RandomUniform {
  static constexpr const char* name = STRATA_OP_RANDOM_UNIFORM;
  using signature = T();
  static constexpr uint32_t flags = 0;
  static strata_status run(const KernelCall& call) {
    return fill_blocks<T>(call, name, kPhiloxCost, [](const strata_philox_block& b, T* y, int64_t first, int64_t m) {
      for (int64_t j = 0; j < m; ++j) y[first + j] = Scalar<T>::store(strata_philox_uniform(b.v[j]));
    });
  }
};

template <class T>
struct RandomNormal {
  static constexpr const char* name = STRATA_OP_RANDOM_NORMAL;
  using signature = T();
  static constexpr uint32_t flags = 0;
  static strata_status run(const KernelCall& call) {
    return fill_blocks<T>(call, name, kNormalCost, [](const strata_philox_block& b, T* y, int64_t first, int64_t m) {
      // strata_philox_normal, with the block computed once: lanes 0, 1 are
      // r*cos, r*sin of words 0, 1; lanes 2, 3 the same of words 2, 3.
      for (int64_t pair = 0; pair < m; pair += 2) {
        float z_even = 0.0f, z_odd = 0.0f;
        strata_philox_box_muller(b.v[pair], b.v[pair + 1], &z_even, &z_odd);
        y[first + pair] = Scalar<T>::store(z_even);
        if (pair + 1 < m) y[first + pair + 1] = Scalar<T>::store(z_odd);
      }
    });
  }
};

template <class T>
struct Bernoulli {
  static constexpr const char* name = STRATA_OP_BERNOULLI;
  using signature = T();
  static constexpr uint32_t flags = 0;
  static strata_status run(const KernelCall& call) {
    const strata_attr* pa = plugin::attr_of_kind(call.abi, "p", STRATA_ATTR_FLOAT);
    if (pa == nullptr) return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: missing attribute 'p' (FLOAT)", name);
    if (!(pa->f >= 0.0 && pa->f <= 1.0)) {
      return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: p must be in [0, 1], got %g", name, pa->f);
    }
    const uint32_t threshold = strata_philox_threshold(pa->f);
    const T one = store_from<T>(1), zero = store_from<T>(0);
    return fill_blocks<T>(call, name, kPhiloxCost, [&](const strata_philox_block& b, T* y, int64_t first, int64_t m) {
      for (int64_t j = 0; j < m; ++j) y[first + j] = (b.v[j] >> 8) < threshold ? one : zero;
    });
  }
};

}  // namespace

void register_random_kernels(plugin::KernelTable& table) {
  for_each_type(FloatTypes{}, [&]<class T>() {
    add<RandomUniform<T>>(table);
    add<RandomNormal<T>>(table);
  });
  for_each_type(AllTypes{}, [&]<class T>() { add<Bernoulli<T>>(table); });
}

}  // namespace strata::cpu
