// index.cpp — index_select, gather, scatter_add (index.comp).
//
// docs/ops.md requires an out-of-range index to be an error naming it. The
// index tensor lives on the device, so checking it on the host would make
// every indexing op a synchronisation point. Instead the shader checks each
// index as it reads it: an index outside [0, size) is never followed (the
// output element becomes 0, or the scatter entry is skipped) and the first
// one is recorded in the device's error record; the kernel returns OK and
// the next synchronisation point reports STRATA_ERROR_DEFERRED naming the
// op, the device and the index (README.md, "Deferred errors").
#include "kernels.hpp"

namespace strata::vulkan {
namespace {

/// index.comp's parameter block (std430).
struct IndexParams {
  uint32_t rank, dim, n, index_stride, bound;
  uint32_t y_shape[MAX_RANK];
  uint32_t x_stride[MAX_RANK];
  uint32_t index_shape[MAX_RANK];
  uint32_t index_strides[MAX_RANK];
};

struct IndexPush {
  VkDeviceAddress y, x, index, p;
  VkDeviceAddress err;  // the device's deferred-error record
  uint32_t site;        // the OpSpec id it names the op by
};

/// The shapes docs/ops.md requires (the shader reads and writes by them):
/// index_select: y is x with y[dim] = len(index); gather: y has the index's
/// shape; scatter_add: y has the base's shape and src the index's; for
/// gather and scatter_add the index fits inside x (base) off `dim`.
strata_status check_shapes(const Call& c, int op, int dim) {
  const strata_tensor& x = c.input(0);
  const strata_tensor& index = c.input(1);
  const strata_tensor& y = c.out;
  const bool scatter = op == OP_SCATTER_ADD;
  bool ok = !scatter || c.input(2).rank == index.rank;
  for (int32_t d = 0; ok && d < x.rank; ++d) {
    if (op == OP_INDEX_SELECT) {
      ok = y.shape[d] == (d == dim ? index.shape[0] : x.shape[d]);
    } else {
      ok = (d == dim || index.shape[d] <= x.shape[d]) && y.shape[d] == (scatter ? x.shape[d] : index.shape[d]);
      if (scatter) ok = ok && c.input(2).shape[d] == index.shape[d];
    }
  }
  if (ok) return STRATA_OK;
  return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT,
              "%s: shapes %s, index %s%s%s -> %s do not match along dim %d on %s", c.op, describe(x).c_str(),
              describe(index).c_str(), scatter ? ", src " : "", scatter ? describe(c.input(2)).c_str() : "",
              describe(y).c_str(), dim, c.device.id().c_str());
}

/// index_select, gather, scatter_add: the opcode OP_* is the entry's.
struct Indexing {
  static strata_status run(Call& c) {
    const int op = c.spec.code;
    const int arity = op == OP_SCATTER_ADD ? 3 : 2;
    const std::string& dev = c.device.id();
    if (strata_status s = expect_inputs(c, arity); s != STRATA_OK) return s;
    const strata_tensor& x = c.input(0);  // x, or base for scatter_add
    const strata_tensor& index = c.input(1);
    const strata_tensor& y = c.out;
    const int dim = dim_attr(c, x.rank);
    if (dim < 0 || x.rank == 0 || y.rank != x.rank || index.dtype != STRATA_I64) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: bad operands %s, %s (dim attribute %s) on %s", c.op,
                  describe(x).c_str(), describe(index).c_str(), dim < 0 ? "missing or out of range" : "ok",
                  dev.c_str());
    }
    if (op == OP_INDEX_SELECT && index.rank != 1) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: index %s must be 1-D on %s", c.op,
                  describe(index).c_str(), dev.c_str());
    }
    if (op != OP_INDEX_SELECT && index.rank != x.rank) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: index %s must have the rank of %s on %s", c.op,
                  describe(index).c_str(), describe(x).c_str(), dev.c_str());
    }
    if (strata_status s = check_shapes(c, op, dim); s != STRATA_OK) return s;

    IndexParams p{};
    p.rank = static_cast<uint32_t>(x.rank);
    p.dim = static_cast<uint32_t>(dim);
    p.n = static_cast<uint32_t>(plugin::numel(y));
    p.index_stride = static_cast<uint32_t>(index.rank == 1 ? index.strides[0] : 0);
    p.bound = static_cast<uint32_t>(x.shape[dim]);
    const strata_tensor& values = op == OP_SCATTER_ADD ? c.input(2) : x;
    for (int d = 0; d < x.rank; ++d) {
      p.y_shape[d] = static_cast<uint32_t>(y.shape[d]);
      p.x_stride[d] = static_cast<uint32_t>(values.strides[d]);
      if (op != OP_INDEX_SELECT) {
        p.index_shape[d] = static_cast<uint32_t>(index.shape[d]);
        p.index_strides[d] = static_cast<uint32_t>(index.strides[d]);
      }
    }
    if (op == OP_SCATTER_ADD) {
      // y = base first; the scatter then adds into y.
      const std::string copy = std::string("unary_") + tag(y.dtype) + "_" + tag(x.dtype);
      const strata_tensor* base[1] = {&x};
      if (strata_status s = launch_eltwise(c, copy.c_str(), OP_COPY, y, base, 1); s != STRATA_OK) return s;
    }
    IndexPush push{address_of(y), address_of(values), address_of(index), 0, c.device.deferred->address(), c.spec.id};
    if (strata_status s = params(c, &p, sizeof(p), &push.p); s != STRATA_OK) return s;
    const std::string shader = std::string("index_") + tag(y.dtype);
    return launch(c, shader.c_str(), &push, sizeof(push), groups_for(p.n, INDEX_GROUP));
  }
};

}  // namespace

void register_index_kernels(Registry& r) {
  for (strata_dtype d : kAllTypes) {
    r.add<Indexing>(STRATA_OP_INDEX_SELECT, OP_INDEX_SELECT, {d, STRATA_I64}, d);
    r.add<Indexing>(STRATA_OP_GATHER, OP_GATHER, {d, STRATA_I64}, d);
  }
  for (strata_dtype d : kNumericTypes) r.add<Indexing>(STRATA_OP_SCATTER_ADD, OP_SCATTER_ADD, {d, STRATA_I64, d}, d);
}

}  // namespace strata::vulkan
