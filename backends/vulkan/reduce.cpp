// reduce.cpp — sum, mean, prod, max, min, argmax, argmin (reduce.comp) and
// the fused softmax family along one dim (softmax.comp).
#include <vector>

#include "kernels.hpp"

namespace strata::vulkan {
namespace {

/// reduce.comp's parameter block (std430).
struct ReduceParams {
  uint32_t n_out;
  uint32_t n_red;
  uint32_t keep_rank;
  uint32_t red_rank;
  uint32_t keep_shape[MAX_RANK];
  uint32_t keep_stride[MAX_RANK];
  uint32_t red_shape[MAX_RANK];
  uint32_t red_stride[MAX_RANK];
};

struct ReducePush {
  VkDeviceAddress y, a, p;
  uint32_t mode;
  float scale;
};

/// Reduced-length threshold below which (with enough outputs) every thread
/// reduces one output on its own instead of a work group per output.
constexpr int64_t kThreadPerOutput = 64;

/// sum, prod, max, min, argmax, argmin (the opcode OP_* is the entry's),
/// and mean (OP_SUM scaled by 1/n).
template <bool Mean = false>
struct Reduce {
  static strata_status run(Call& c) {
    const char* name = c.op;
    const std::string& dev = c.device.id();
    if (c.n_in != 1 || c.out.rank != c.input(0).rank) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: expected one input of the output's rank, got %s -> %s on %s", name,
                  c.n_in > 0 ? describe(c.input(0)).c_str() : "none", describe(c.out).c_str(), dev.c_str());
    }
    const strata_tensor& x = c.input(0);
    const strata_tensor& y = c.out;
    bool reduced[MAX_RANK] = {};
    const strata_attr* dims = plugin::attr_of_kind(c.abi, "dims", STRATA_ATTR_INTS);
    if (dims == nullptr || (dims->count > 0 && dims->ints == nullptr) || (dims->count == 0 && x.rank > 0)) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: missing attribute 'dims' (%s on %s)", name,
                  describe(x).c_str(), dev.c_str());
    }
    for (int64_t k = 0; k < dims->count; ++k) {
      const int64_t d = dims->ints[k];
      if (d < 0 || d >= std::max(x.rank, 1)) {
        return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: dim %lld out of range for %s on %s", name,
                    static_cast<long long>(d), describe(x).c_str(), dev.c_str());
      }
      if (x.rank > 0) reduced[d] = true;
    }
    // Kept and reduced dims of x, each merged where x's strides allow.
    int64_t keep_shape[MAX_RANK], keep_stride[MAX_RANK], red_shape[MAX_RANK], red_stride[MAX_RANK];
    int nk = 0, nr = 0;
    for (int32_t d = 0; d < x.rank; ++d) {
      if (reduced[d]) {
        if (y.shape[d] != 1) {
          return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: reduced dim %d of the output %s is not 1 on %s",
                      name, d, describe(y).c_str(), dev.c_str());
        }
        red_shape[nr] = x.shape[d];
        red_stride[nr++] = x.strides[d];
      } else {
        if (y.shape[d] != x.shape[d]) {  // the shader writes one output per kept position of x
          return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: kept dim %d of the output %s differs from %s on %s",
                      name, d, describe(y).c_str(), describe(x).c_str(), dev.c_str());
        }
        keep_shape[nk] = x.shape[d];
        keep_stride[nk++] = x.strides[d];
      }
    }
    const int64_t* ks[1] = {keep_stride};
    const int64_t* rs[1] = {red_stride};
    const Merged keep = merge_dims(nk, keep_shape, ks, 1);
    const Merged red = merge_dims(nr, red_shape, rs, 1);
    ReduceParams p{};
    p.keep_rank = static_cast<uint32_t>(keep.rank);
    p.red_rank = static_cast<uint32_t>(red.rank);
    uint64_t n_out = 1, n_red = 1;
    for (int d = 0; d < keep.rank; ++d) {
      p.keep_shape[d] = static_cast<uint32_t>(keep.shape[static_cast<size_t>(d)]);
      p.keep_stride[d] = static_cast<uint32_t>(keep.strides[0][static_cast<size_t>(d)]);
      n_out *= p.keep_shape[d];
    }
    for (int d = 0; d < red.rank; ++d) {
      p.red_shape[d] = static_cast<uint32_t>(red.shape[static_cast<size_t>(d)]);
      p.red_stride[d] = static_cast<uint32_t>(red.strides[0][static_cast<size_t>(d)]);
      n_red *= p.red_shape[d];
    }
    p.n_out = static_cast<uint32_t>(n_out);
    p.n_red = static_cast<uint32_t>(n_red);
    ReducePush push{};
    push.y = address_of(y);
    push.a = address_of(x);
    if (strata_status s = params(c, &p, sizeof(p), &push.p); s != STRATA_OK) return s;
    const bool per_thread = static_cast<int64_t>(n_red) <= kThreadPerOutput && n_out >= REDUCE_GROUP;
    push.mode = per_thread ? 1u : 0u;
    push.scale = Mean ? static_cast<float>(1.0 / static_cast<double>(n_red)) : 1.0f;
    const std::string shader = std::string("reduce_") + tag(y.dtype) + "_" + tag(x.dtype);
    const uint32_t groups = per_thread ? groups_for(n_out, REDUCE_GROUP) : groups_for(n_out, 1);
    return launch(c, shader.c_str(), &push, sizeof(push), groups);
  }
};

struct SoftmaxPush {
  VkDeviceAddress y, a, b;
  uint32_t outer, n, inner;
};

/// softmax and log_softmax (OP_*, one input) and their backward ops (two).
struct AlongDim {
  static strata_status run(Call& c) {
    const char* name = c.op;
    const int arity = c.spec.code == OP_SOFTMAX || c.spec.code == OP_LOG_SOFTMAX ? 1 : 2;
    const strata_tensor& y = c.out;
    const std::string& dev = c.device.id();
    if (c.n_in != arity) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: expected %d inputs, got %d on %s", name, arity, c.n_in,
                  dev.c_str());
    }
    for (int k = 0; k < arity; ++k) {
      const strata_tensor& x = c.input(k);
      bool same = x.rank == y.rank && plugin::is_contiguous(x) && plugin::is_contiguous(y);
      for (int32_t d = 0; same && d < y.rank; ++d) same = x.shape[d] == y.shape[d];
      if (!same) {
        return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT,
                    "%s: operands must be compact and of one shape, got %s and %s on %s", name, describe(x).c_str(),
                    describe(y).c_str(), dev.c_str());
      }
    }
    SoftmaxPush push{};
    push.outer = push.n = push.inner = 1;
    if (y.rank > 0) {
      const int dim = dim_attr(c, y.rank);
      if (dim < 0) {
        return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: missing or bad attribute 'dim' for %s on %s", name,
                    describe(y).c_str(), dev.c_str());
      }
      for (int d = 0; d < dim; ++d) push.outer *= static_cast<uint32_t>(y.shape[d]);
      push.n = static_cast<uint32_t>(y.shape[dim]);
      for (int d = dim + 1; d < y.rank; ++d) push.inner *= static_cast<uint32_t>(y.shape[d]);
    }
    push.y = address_of(y);
    push.a = address_of(c.input(0));
    push.b = arity == 2 ? address_of(c.input(1)) : push.a;
    const std::string shader = std::string("softmax_") + tag(y.dtype);
    return launch(c, shader.c_str(), &push, sizeof(push),
                  groups_for(static_cast<uint64_t>(push.outer) * push.inner, 1));
  }
};

}  // namespace

void register_reduce_kernels(Registry& r) {
  for (strata_dtype d : kNumericTypes) {
    const bool integer = d == STRATA_I32 || d == STRATA_I64;
    r.add<Reduce<>>(STRATA_OP_SUM, OP_SUM, {d}, integer ? STRATA_I64 : d);
    r.add<Reduce<>>(STRATA_OP_PROD, OP_PROD, {d}, d);
    r.add<Reduce<>>(STRATA_OP_MAX, OP_MAX, {d}, d);
    r.add<Reduce<>>(STRATA_OP_MIN, OP_MIN, {d}, d);
    r.add<Reduce<>>(STRATA_OP_ARGMAX, OP_ARGMAX, {d}, STRATA_I64);
    r.add<Reduce<>>(STRATA_OP_ARGMIN, OP_ARGMIN, {d}, STRATA_I64);
  }
  r.add<Reduce<>>(STRATA_OP_SUM, OP_SUM, {STRATA_BOOL}, STRATA_I64);
  for (strata_dtype d : kFloatTypes) {
    r.add<Reduce<true>>(STRATA_OP_MEAN, OP_SUM, {d}, d);
    // Composites receive compact inputs (flags 0).
    r.add<AlongDim>(STRATA_OP_SOFTMAX, OP_SOFTMAX, {d}, d, 0);
    r.add<AlongDim>(STRATA_OP_LOG_SOFTMAX, OP_LOG_SOFTMAX, {d}, d, 0);
    r.add<AlongDim>(STRATA_OP_SOFTMAX_BACKWARD, OP_SOFTMAX_BACKWARD, {d, d}, d, 0);
    r.add<AlongDim>(STRATA_OP_LOG_SOFTMAX_BACKWARD, OP_LOG_SOFTMAX_BACKWARD, {d, d}, d, 0);
  }
}

}  // namespace strata::vulkan
