// kernels_index_random.cpp — index_select, gather, scatter_add and the random
// primitives random_uniform, random_normal, bernoulli (docs/ops.md,
// "Indexing", "Random numbers").
//
// Demonstrates: deferred errors for data-dependent failures (strata_plugin.h
// section 2): the index values live in device memory, so the issuing side
// cannot check them without a read-back (which the contract forbids); the
// worker checks them before writing anything and, for an index out of range,
// throws a DeferredFailure naming op, device, value and range, reported as
// STRATA_ERROR_DEFERRED at the next synchronisation point while the output
// stays untouched. And the Philox reference of philox.h, bit for bit (this
// file is compiled with -ffp-contract=off, see CMakeLists.txt), with
// bernoulli's threshold computed once on the issuing side.
#include "kernel_launch.hpp"

#include <strata/plugin/philox.h>

#include <cmath>

namespace example {
namespace {

/// Throws a DeferredFailure when an index of `index` lies outside [0, limit).
void check_indices(const View& index, int64_t limit, int dim, const std::string& where) {
  const int64_t* const p = index.data<int64_t>();
  int64_t position = 0;
  walk<1>(index.rank, index.shape, {index.strides}, [&](const auto& off) {
    const int64_t v = p[off[0]];
    if (v < 0 || v >= limit) {
      throw DeferredFailure(where + ": index " + std::to_string(v) + " out of range [0, " + std::to_string(limit) +
                            ") for dim " + std::to_string(dim) + " (at flat index position " +
                            std::to_string(position) + ")");
    }
    ++position;
  });
}

/// `strides` with the entry of `dim` zeroed: a data operand addressed by index along dim.
std::array<int64_t, STRATA_MAX_RANK> without_dim(const View& v, int dim) {
  std::array<int64_t, STRATA_MAX_RANK> s{};
  for (int d = 0; d < v.rank; ++d) s[static_cast<size_t>(d)] = d == dim ? 0 : v.strides[d];
  return s;
}

/// A walk over `walked` may address `data` along every dim but `dim`.
bool fits_except(const View& walked, const View& data, int dim) {
  if (walked.rank != data.rank) return false;
  for (int d = 0; d < walked.rank; ++d) {
    if (d != dim && walked.shape[d] > data.shape[d]) return false;
  }
  return true;
}

/// y[p] = x[p with p[dim] = index[p]], walking y; `index_strides` are the
/// index operand's strides over y's shape.
template <class T>
void gather_walk(const View& y, const View& x, const View& index, const int64_t* index_strides, int dim) {
  T* const out = y.data<T>();
  const T* const in = x.data<T>();
  const int64_t* const idx = index.data<int64_t>();
  const auto xs = without_dim(x, dim);
  const int64_t step = x.strides[dim];
  walk<3>(y.rank, y.shape, {y.strides, xs.data(), index_strides},
          [&](const auto& off) { out[off[0]] = in[off[1] + idx[off[2]] * step]; });
}

template <class T>
strata_status index_select_kernel(const strata_kernel_call* call) noexcept {
  return run_kernel(call, STRATA_OP_INDEX_SELECT, [&] {
    const Launch l = prepare(call, {dtype_v<T>, STRATA_I64}, {dtype_v<T>});
    const View &x = l.in[0], &index = l.in[1], &y = l.out[0];
    const int dim = dim_attr(l, x.rank);
    if (index.rank != 1 || !fits_except(y, x, dim) || y.shape[dim] != index.shape[0]) {
      l.reject("index must be 1-D and the output x's shape with shape[dim] = len(index)");
    }
    l.submit([x, index, y, dim, where = l.where()] {
      check_indices(index, x.shape[dim], dim, where);
      std::array<int64_t, STRATA_MAX_RANK> index_strides{};  // the 1-D index runs along dim
      index_strides[static_cast<size_t>(dim)] = index.strides[0];
      gather_walk<T>(y, x, index, index_strides.data(), dim);
    });
    return STRATA_OK;
  });
}

template <class T>
strata_status gather_kernel(const strata_kernel_call* call) noexcept {
  return run_kernel(call, STRATA_OP_GATHER, [&] {
    const Launch l = prepare(call, {dtype_v<T>, STRATA_I64}, {dtype_v<T>});
    const View &x = l.in[0], &index = l.in[1], &y = l.out[0];
    const int dim = dim_attr(l, x.rank);
    if (!fits_except(index, x, dim) || !index.same_shape(y)) {
      l.reject("index must have x's rank, fit x outside dim, and the output's shape");
    }
    l.submit([x, index, y, dim, where = l.where()] {
      check_indices(index, x.shape[dim], dim, where);
      gather_walk<T>(y, x, index, index.strides, dim);
    });
    return STRATA_OK;
  });
}

template <class T>
strata_status scatter_add_kernel(const strata_kernel_call* call) noexcept {
  return run_kernel(call, STRATA_OP_SCATTER_ADD, [&] {
    const Launch l = prepare(call, {dtype_v<T>, STRATA_I64, dtype_v<T>}, {dtype_v<T>});
    const View &base = l.in[0], &index = l.in[1], &src = l.in[2], &y = l.out[0];
    const int dim = dim_attr(l, base.rank);
    if (!fits_except(index, base, dim) || !index.same_shape(src) || !base.same_shape(y)) {
      l.reject("index and src must have one shape that fits base outside dim; the output has base's shape");
    }
    l.submit([base, index, src, y, dim, where = l.where()] {
      check_indices(index, base.shape[dim], dim, where);  // before anything is written
      T* const out = y.data<T>();
      const T* const b = base.data<T>();
      walk<2>(y.rank, y.shape, {y.strides, base.strides}, [&](const auto& off) { out[off[0]] = b[off[1]]; });
      const int64_t* const idx = index.data<int64_t>();
      const T* const s = src.data<T>();
      const auto ys = without_dim(y, dim);
      const int64_t step = y.strides[dim];
      walk<3>(index.rank, index.shape, {ys.data(), index.strides, src.strides}, [&](const auto& off) {
        T& target = out[off[0] + idx[off[1]] * step];
        target = wrap_add(target, s[off[2]]);
      });
    });
    return STRATA_OK;
  });
}

// ---- Random numbers --------------------------------------------------------------

enum class Dist { uniform, normal, bernoulli };

template <class T, Dist D>
strata_status random_kernel(const strata_kernel_call* call) noexcept {
  constexpr const char* name = D == Dist::uniform  ? STRATA_OP_RANDOM_UNIFORM
                               : D == Dist::normal ? STRATA_OP_RANDOM_NORMAL
                                                   : STRATA_OP_BERNOULLI;
  return run_kernel(call, name, [&] {
    const Launch l = prepare(call, {}, {dtype_v<T>});
    const strata_attr* seed_attr = strata::plugin::attr_of_kind(*l.call, "seed", STRATA_ATTR_INT);
    const strata_attr* offset_attr = strata::plugin::attr_of_kind(*l.call, "offset", STRATA_ATTR_INT);
    if (seed_attr == nullptr || offset_attr == nullptr) l.reject("missing attribute 'seed' or 'offset'");
    const uint64_t seed = static_cast<uint64_t>(seed_attr->i);  // 64-bit patterns in an INT
    const uint64_t offset = static_cast<uint64_t>(offset_attr->i);
    uint32_t threshold = 0;
    if constexpr (D == Dist::bernoulli) {
      if (strata::plugin::find_attr(*l.call, "p") == nullptr) l.reject("missing attribute 'p'");
      const double p = strata::plugin::attr_float(*l.call, "p", 0.0);
      if (!(p >= 0.0 && p <= 1.0)) l.reject("attribute 'p' = " + std::to_string(p) + " is outside [0, 1]");
      threshold = strata_philox_threshold(p);  // once, on the issuing side
    }
    l.submit([y = l.out[0], seed, offset, threshold] {
      T* const out = y.data<T>();
      uint64_t i = 0;  // row-major element number: the counter
      walk<1>(y.rank, y.shape, {y.strides}, [&](const auto& off) {
        if constexpr (D == Dist::uniform) {
          out[off[0]] = static_cast<T>(strata_philox_uniform(strata_philox_word(i, offset, seed)));
        } else if constexpr (D == Dist::normal) {
          out[off[0]] = static_cast<T>(strata_philox_normal(i, offset, seed));
        } else {
          out[off[0]] = static_cast<T>((strata_philox_word(i, offset, seed) >> 8) < threshold ? 1 : 0);
        }
        ++i;
      });
    });
    return STRATA_OK;
  });
}

}  // namespace

void register_index_kernels(strata::plugin::KernelTable& t) {
  for_each_type(AllTypes{}, [&]<class T>() {
    add_kernel(t, STRATA_OP_INDEX_SELECT, signature<T, T, int64_t>(), &index_select_kernel<T>);
    add_kernel(t, STRATA_OP_GATHER, signature<T, T, int64_t>(), &gather_kernel<T>);
  });
  for_each_type(NumericTypes{}, [&]<class T>() {
    add_kernel(t, STRATA_OP_SCATTER_ADD, signature<T, T, int64_t, T>(), &scatter_add_kernel<T>);
  });
}

void register_random_kernels(strata::plugin::KernelTable& t) {
  for_each_type(FloatTypes{}, [&]<class T>() {
    add_kernel(t, STRATA_OP_RANDOM_UNIFORM, signature<T>(), &random_kernel<T, Dist::uniform>);
    add_kernel(t, STRATA_OP_RANDOM_NORMAL, signature<T>(), &random_kernel<T, Dist::normal>);
  });
  for_each_type(AllTypes{}, [&]<class T>() {
    add_kernel(t, STRATA_OP_BERNOULLI, signature<T>(), &random_kernel<T, Dist::bernoulli>);
  });
}

}  // namespace example
