// index.cpp — index_select, gather, scatter_add (index.comp).
//
// docs/ops.md requires an out-of-range index to fail the call with
// INVALID_ARGUMENT naming it. The index tensor lives on the device, so the
// kernel waits for the stream, reads the indices back and checks them on the
// host before it records the dispatch: each indexing op is a synchronisation
// point (the price of a synchronous, precise error).
#include "kernels.hpp"

namespace strata::vulkan {
namespace {

/// index.comp's parameter block (std430).
struct IndexParams {
  uint32_t rank, dim, n, index_stride;
  uint32_t y_shape[MAX_RANK];
  uint32_t x_stride[MAX_RANK];
  uint32_t index_shape[MAX_RANK];
  uint32_t index_strides[MAX_RANK];
};

struct IndexPush {
  VkDeviceAddress y, x, index, p;
};

strata_status check_indices(Call& c, const strata_tensor& index, int64_t size, int dim, const strata_tensor& x) {
  std::vector<int64_t> values;
  if (strata_status s = read_elements(c, index, values); s != STRATA_OK) return s;
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0 || values[i] >= size) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: index %lld (element %zu of the index) is out of range for dimension %d of size %lld of %s on %s",
                  c.op, static_cast<long long>(values[i]), i, dim, static_cast<long long>(size), describe(x).c_str(),
                  c.device.id().c_str());
    }
  }
  return STRATA_OK;
}

/// The shapes docs/ops.md requires (the shader reads and writes by them):
/// index_select: y is x with y[dim] = len(index); gather: y has the index's
/// shape; scatter_add: y has the base's shape and src the index's; for
/// gather and scatter_add the index fits inside x (base) off `dim`.
template <int Op>
strata_status check_shapes(const Call& c, int dim) {
  const strata_tensor& x = c.in[0];
  const strata_tensor& index = c.in[1];
  const strata_tensor& y = c.out;
  const bool scatter = Op == IX_SCATTER_ADD;
  bool ok = !scatter || c.in[2].rank == index.rank;
  for (int32_t d = 0; ok && d < x.rank; ++d) {
    if (Op == IX_INDEX_SELECT) {
      ok = y.shape[d] == (d == dim ? index.shape[0] : x.shape[d]);
    } else {
      ok = (d == dim || index.shape[d] <= x.shape[d]) && y.shape[d] == (scatter ? x.shape[d] : index.shape[d]);
      if (scatter) ok = ok && c.in[2].shape[d] == index.shape[d];
    }
  }
  if (ok) return STRATA_OK;
  return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT,
              "%s: shapes %s, index %s%s%s -> %s do not match along dim %d on %s", c.op, describe(x).c_str(),
              describe(index).c_str(), scatter ? ", src " : "", scatter ? describe(c.in[2]).c_str() : "",
              describe(y).c_str(), dim, c.device.id().c_str());
}

template <int Op>
struct Indexing {
  static constexpr const char* name = Op == IX_INDEX_SELECT ? "index_select"
                                      : Op == IX_GATHER     ? "gather"
                                                            : "scatter_add";
  static strata_status run(Call& c) {
    const int arity = Op == IX_SCATTER_ADD ? 3 : 2;
    const std::string dev = c.device.id();
    if (c.n_in != arity) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: expected %d inputs, got %d on %s", name, arity, c.n_in,
                  dev.c_str());
    }
    const strata_tensor& x = c.in[0];  // x, or base for scatter_add
    const strata_tensor& index = c.in[1];
    const strata_tensor& y = c.out;
    const int dim = dim_attr(c.attrs, x.rank);
    if (dim < 0 || x.rank == 0 || y.rank != x.rank || index.dtype != STRATA_I64) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: bad operands %s, %s (dim attribute %s) on %s", name,
                  describe(x).c_str(), describe(index).c_str(), dim < 0 ? "missing or out of range" : "ok",
                  dev.c_str());
    }
    if (Op == IX_INDEX_SELECT && index.rank != 1) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "index_select: index %s must be 1-D on %s",
                  describe(index).c_str(), dev.c_str());
    }
    if (Op != IX_INDEX_SELECT && index.rank != x.rank) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: index %s must have the rank of %s on %s", name,
                  describe(index).c_str(), describe(x).c_str(), dev.c_str());
    }
    if (strata_status s = check_shapes<Op>(c, dim); s != STRATA_OK) return s;
    if (strata_status s = check_indices(c, index, x.shape[dim], dim, x); s != STRATA_OK) return s;

    IndexParams p{};
    p.rank = static_cast<uint32_t>(x.rank);
    p.dim = static_cast<uint32_t>(dim);
    p.n = static_cast<uint32_t>(plugin::numel(y));
    p.index_stride = static_cast<uint32_t>(index.rank == 1 ? index.strides[0] : 0);
    const strata_tensor& values = Op == IX_SCATTER_ADD ? c.in[2] : x;
    for (int d = 0; d < x.rank; ++d) {
      p.y_shape[d] = static_cast<uint32_t>(y.shape[d]);
      p.x_stride[d] = static_cast<uint32_t>(values.strides[d]);
      if (Op != IX_INDEX_SELECT) {
        p.index_shape[d] = static_cast<uint32_t>(index.shape[d]);
        p.index_strides[d] = static_cast<uint32_t>(index.strides[d]);
      }
    }
    if (Op == IX_SCATTER_ADD) {
      // y = base first; the scatter then adds into y.
      const std::string copy = std::string("unary_") + tag(y.dtype) + "_" + tag(x.dtype);
      if (strata_status s = launch_eltwise(c, copy.c_str(), OP_COPY, y, &x, 1); s != STRATA_OK) return s;
    }
    IndexPush push{address_of(y), address_of(values), address_of(index), 0};
    if (strata_status s = params(c, &p, sizeof(p), &push.p); s != STRATA_OK) return s;
    const std::string shader = std::string("index_") + tag(y.dtype);
    return launch(c, shader.c_str(), Op, &push, sizeof(push), groups_for(p.n, INDEX_GROUP));
  }
};

}  // namespace

void register_index_kernels(KernelTable& t) {
  for (strata_dtype d : kAllTypes) {
    t.add<Indexing<IX_INDEX_SELECT>>({d, STRATA_I64}, d, kStrided);
    t.add<Indexing<IX_GATHER>>({d, STRATA_I64}, d, kStrided);
  }
  for (strata_dtype d : kNumericTypes) t.add<Indexing<IX_SCATTER_ADD>>({d, STRATA_I64, d}, d, kStrided);
}

}  // namespace strata::vulkan
