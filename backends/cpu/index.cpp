// index.cpp — index_select, gather and scatter_add (docs/ops.md, "Indexing").
//
// All three walk the *index* positions p and address the data tensor at p with
// p[dim] replaced by index[p]. That is a strided walk in which the data
// operand has stride 0 along `dim`, plus `index[p] * data.strides[dim]`:
// index_select is gather with the 1-D index broadcast to the output's shape.
// Indices are validated before anything is written.
#include "complex.hpp"
#include "data.hpp"
#include "kernel.hpp"
#include "strided.hpp"

#include <string>

namespace strata::cpu {
namespace {

/// First index value outside [0, limit), walking `index` over its shape.
struct BadIndex {
  int64_t position = -1;  // flat position in the index tensor; -1: none
  int64_t value = 0;
};

BadIndex find_bad_index(const strata_tensor& index, int64_t limit) {
  const int64_t* p = data<const int64_t>(index);
  const Layout<1> l = make_layout<1>(index.rank, index.shape, {index.strides});
  BadIndex bad;
  int64_t pos = 0;
  for_each_run(l, 0, l.numel(), [&](const int64_t* off, int64_t count) {
    const int64_t s = l.inner_stride(0);
    for (int64_t i = 0; bad.position < 0 && i < count; ++i) {
      const int64_t v = p[off[0] + i * s];
      if (v < 0 || v >= limit) bad = {pos + i, v};
    }
    pos += count;
  });
  return bad;
}

strata_status check_indices(const KernelCall& call, const char* op, const strata_tensor& index, int dim,
                            int64_t limit) {
  const BadIndex bad = find_bad_index(index, limit);
  if (bad.position < 0) return STRATA_OK;
  return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT,
              "%s: index %lld out of range for dim %d of size %lld (at flat index position %lld)", op,
              static_cast<long long>(bad.value), dim, static_cast<long long>(limit),
              static_cast<long long>(bad.position));
}

/// "bad dim or operand shapes", with the dim and the operands.
strata_status bad_operands(const KernelCall& call, const char* op, int rank) {
  std::string operands;
  for (int k = 0; k < call.n_in(); ++k) operands += (k > 0 ? ", " : "") + plugin::describe(call.in(k));
  const int64_t dim = plugin::attr_int(call.abi, "dim", INT64_MIN);
  const std::string dim_text = dim == INT64_MIN ? std::string("missing") : std::to_string(dim);
  return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: bad dim (%s, for rank %d) or operand shapes (%s -> %s)",
              op, dim_text.c_str(), rank, operands.c_str(), plugin::describe(call.out()).c_str());
}

/// Strides of `t` with stride[dim] zeroed: the data operand of the walk.
struct DimlessStrides {
  int64_t v[kMaxRank];
  DimlessStrides(const strata_tensor& t, int dim) {
    for (int d = 0; d < t.rank; ++d) v[d] = d == dim ? 0 : t.strides[d];
  }
};

/// y[p] = x[p with p[dim] = index[p]] over y's shape; `index_strides` are the
/// index operand's strides over y's shape (possibly broadcast).
template <class T>
void gather_walk(const strata_tensor& yt, const strata_tensor& xt, const strata_tensor& it,
                 const int64_t* index_strides, int dim, int threads) {
  T* const y = data<T>(yt);
  const T* const x = data<const T>(xt);
  const int64_t* const index = data<const int64_t>(it);
  const int64_t dim_stride = xt.strides[dim];
  const DimlessStrides xs(xt, dim);
  const Layout<3> l = make_layout<3>(yt.rank, yt.shape, {yt.strides, xs.v, index_strides});
  parallel_runs(l, threads, 1, [&](const int64_t* off, int64_t count) {
    const int64_t s0 = l.inner_stride(0), s1 = l.inner_stride(1), s2 = l.inner_stride(2);
    for (int64_t i = 0; i < count; ++i) {
      y[off[0] + i * s0] = x[off[1] + i * s1 + index[off[2] + i * s2] * dim_stride];
    }
  });
}

/// A walk over `walked`'s shape may address `data_t` (with its own index
/// along dim) when every other dim fits (the PyTorch rule for gather).
bool fits_except(const strata_tensor& walked, const strata_tensor& data_t, int dim) {
  if (walked.rank != data_t.rank) return false;
  for (int d = 0; d < walked.rank; ++d) {
    if (d != dim && walked.shape[d] > data_t.shape[d]) return false;
  }
  return true;
}

template <class T>
struct IndexSelect {
  static constexpr const char* name = STRATA_OP_INDEX_SELECT;
  using signature = T(T, int64_t);
  static constexpr uint32_t flags = kStrided;
  static strata_status run(const KernelCall& call) {
    const strata_tensor &x = call.in(0), &index = call.in(1), &y = call.out();
    const int dim = dim_attr(call, x.rank);
    if (dim < 0 || index.rank != 1 || !fits_except(y, x, dim) || y.shape[dim] != index.shape[0]) {
      return bad_operands(call, name, x.rank);
    }
    if (const strata_status s = check_indices(call, name, index, dim, x.shape[dim]); s != STRATA_OK) return s;
    int64_t index_strides[kMaxRank] = {};
    index_strides[dim] = index.strides[0];
    gather_walk<T>(y, x, index, index_strides, dim, call.threads);
    return STRATA_OK;
  }
};

template <class T>
struct Gather {
  static constexpr const char* name = STRATA_OP_GATHER;
  using signature = T(T, int64_t);
  static constexpr uint32_t flags = kStrided;
  static strata_status run(const KernelCall& call) {
    const strata_tensor &x = call.in(0), &index = call.in(1), &y = call.out();
    const int dim = dim_attr(call, x.rank);
    if (dim < 0 || !fits_except(index, x, dim) || !same_shape(index, y)) {
      return bad_operands(call, name, x.rank);
    }
    if (const strata_status s = check_indices(call, name, index, dim, x.shape[dim]); s != STRATA_OK) return s;
    gather_walk<T>(y, x, index, index.strides, dim, call.threads);
    return STRATA_OK;
  }
};

template <class T>
struct ScatterAdd {
  static constexpr const char* name = STRATA_OP_SCATTER_ADD;
  using signature = T(T, int64_t, T);
  static constexpr uint32_t flags = kStrided;
  static strata_status run(const KernelCall& call) {
    const strata_tensor &base = call.in(0), &index = call.in(1), &src = call.in(2), &yt = call.out();
    const int dim = dim_attr(call, base.rank);
    if (dim < 0 || !fits_except(index, base, dim) || !same_shape(index, src) || !same_shape(base, yt)) {
      return bad_operands(call, name, base.rank);
    }
    if (const strata_status s = check_indices(call, name, index, dim, base.shape[dim]); s != STRATA_OK) return s;
    copy_tensor(yt, base, call.threads);

    // Sequential: several positions may add into one element.
    T* const y = data<T>(yt);
    const int64_t* const idx = data<const int64_t>(index);
    const T* const s = data<const T>(src);
    const int64_t dim_stride = yt.strides[dim];
    const DimlessStrides ys(yt, dim);
    const Layout<3> l = make_layout<3>(index.rank, index.shape, {ys.v, index.strides, src.strides});
    for_each_run(l, 0, l.numel(), [&](const int64_t* off, int64_t count) {
      const int64_t s0 = l.inner_stride(0), s1 = l.inner_stride(1), s2 = l.inner_stride(2);
      for (int64_t i = 0; i < count; ++i) {
        T& target = y[off[0] + i * s0 + idx[off[1] + i * s1] * dim_stride];
        target = Scalar<T>::store(wrap_add(Scalar<T>::load(target), Scalar<T>::load(s[off[2] + i * s2])));
      }
    });
    return STRATA_OK;
  }
};

}  // namespace

void register_index_kernels(plugin::KernelTable& table) {
  const auto indexing = [&]<class T>() {
    add<IndexSelect<T>>(table);
    add<Gather<T>>(table);
  };
  for_each_type(AllTypes{}, indexing);
  for_each_type(ComplexTypes{}, indexing);
  for_each_type(NumericTypes{}, [&]<class T>() { add<ScatterAdd<T>>(table); });
  for_each_type(ComplexTypes{}, [&]<class T>() { add<ScatterAdd<T>>(table); });
}

}  // namespace strata::cpu
