// matmul.cpp — batched matmul on strided operands (matmul.comp).
#include "kernels.hpp"

namespace strata::vulkan {
namespace {

/// matmul.comp's parameter block (std430).
struct MatmulParams {
  uint32_t m, n, k, batch;
  uint32_t a_row, a_col, b_row, b_col;
  uint32_t batch_rank, pad0, pad1, pad2;
  uint32_t batch_shape[MAX_RANK];
  uint32_t a_batch[MAX_RANK];
  uint32_t b_batch[MAX_RANK];
};

struct MatmulPush {
  VkDeviceAddress y, a, b, p;
};

struct Matmul {
  static strata_status run(Call& c) {
    const std::string& dev = c.device.id();
    if (strata_status s = expect_inputs(c, 2); s != STRATA_OK) return s;
    const strata_tensor& a = c.input(0);
    const strata_tensor& b = c.input(1);
    const strata_tensor& y = c.out;
    const int r = y.rank;
    bool ok = r >= 2 && a.rank == r && b.rank == r && plugin::is_contiguous(y);
    for (int d = 0; ok && d < r - 2; ++d) ok = a.shape[d] == y.shape[d] && b.shape[d] == y.shape[d];
    ok = ok && a.shape[r - 2] == y.shape[r - 2] && b.shape[r - 1] == y.shape[r - 1] && a.shape[r - 1] == b.shape[r - 2];
    if (!ok) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: shapes %s @ %s -> %s do not match on %s", c.op,
                  describe(a).c_str(), describe(b).c_str(), describe(y).c_str(), dev.c_str());
    }
    MatmulParams p{};
    p.m = static_cast<uint32_t>(y.shape[r - 2]);
    p.n = static_cast<uint32_t>(y.shape[r - 1]);
    p.k = static_cast<uint32_t>(a.shape[r - 1]);
    p.a_row = static_cast<uint32_t>(a.strides[r - 2]);
    p.a_col = static_cast<uint32_t>(a.strides[r - 1]);
    p.b_row = static_cast<uint32_t>(b.strides[r - 2]);
    p.b_col = static_cast<uint32_t>(b.strides[r - 1]);
    // Batch dims merged where a, b and the compact y allow.
    const int64_t* strides[3] = {a.strides, b.strides, y.strides};
    const Merged batch = merge_dims(r - 2, y.shape, strides, 3);
    p.batch_rank = static_cast<uint32_t>(batch.rank);
    uint64_t count = 1;
    for (int d = 0; d < batch.rank; ++d) {
      p.batch_shape[d] = static_cast<uint32_t>(batch.shape[static_cast<size_t>(d)]);
      p.a_batch[d] = static_cast<uint32_t>(batch.strides[0][static_cast<size_t>(d)]);
      p.b_batch[d] = static_cast<uint32_t>(batch.strides[1][static_cast<size_t>(d)]);
      count *= p.batch_shape[d];
    }
    p.batch = static_cast<uint32_t>(count);
    MatmulPush push{address_of(y), address_of(a), address_of(b), 0};
    if (strata_status s = params(c, &p, sizeof(p), &push.p); s != STRATA_OK) return s;
    const std::string shader = std::string("matmul_") + tag(y.dtype);
    return launch(c, shader.c_str(), &push, sizeof(push), groups_for(p.n, MATMUL_TILE), groups_for(p.m, MATMUL_TILE),
                  groups_for(count, 1));
  }
};

}  // namespace

void register_matmul_kernels(Registry& r) {
  for (strata_dtype d : kFloatTypes) r.add<Matmul>(STRATA_OP_MATMUL, 0, {d, d}, d);
}

}  // namespace strata::vulkan
