// random.cpp — random_uniform, random_normal and bernoulli (random.comp), the
// counter-based random primitives of docs/ops.md ("Random numbers"). The
// shader ports the reference strata/plugin/philox.h line by line, so these
// kernels give the CPU's bits; the 64-bit seed and offset travel as pairs of
// 32-bit words in the push constants, bernoulli's threshold is computed here
// by the reference function itself.
#include <strata/plugin/philox.h>

#include "kernels.hpp"

namespace strata::vulkan {
namespace {

/// random.comp's push constants (std430: the address first, then words).
struct RandomPush {
  VkDeviceAddress y;
  uint32_t n;
  uint32_t seed_lo, seed_hi;
  uint32_t offset_lo, offset_hi;
  uint32_t threshold;
};
static_assert(sizeof(RandomPush) == 32);

/// One random op: the opcode OP_* is the entry's.
struct Random {
  static strata_status run(Call& c) {
    if (strata_status s = expect_inputs(c, 0); s != STRATA_OK) return s;
    const std::string& dev = c.device.id();
    const strata_attr* seed = plugin::attr_of_kind(c.abi, "seed", STRATA_ATTR_INT);
    const strata_attr* offset = plugin::attr_of_kind(c.abi, "offset", STRATA_ATTR_INT);
    if (seed == nullptr || offset == nullptr) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: missing attribute '%s' (INT) on %s", c.op,
                  seed == nullptr ? "seed" : "offset", dev.c_str());
    }
    if (!plugin::is_contiguous(c.out)) {
      return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: output %s must be contiguous on %s", c.op,
                  describe(c.out).c_str(), dev.c_str());
    }
    RandomPush push{};
    if (c.spec.code == OP_BERNOULLI) {
      const strata_attr* p = plugin::attr_of_kind(c.abi, "p", STRATA_ATTR_FLOAT);
      if (p == nullptr) {
        return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: missing attribute 'p' (FLOAT) on %s", c.op,
                    dev.c_str());
      }
      if (!(p->f >= 0.0 && p->f <= 1.0)) {
        return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: p must be in [0, 1], got %g on %s", c.op, p->f,
                    dev.c_str());
      }
      push.threshold = strata_philox_threshold(p->f);
    }
    const auto s = static_cast<uint64_t>(seed->i);
    const auto o = static_cast<uint64_t>(offset->i);
    push.y = address_of(c.out);
    push.n = static_cast<uint32_t>(plugin::numel(c.out));  // < 2^31: prepare() checked
    push.seed_lo = static_cast<uint32_t>(s);
    push.seed_hi = static_cast<uint32_t>(s >> 32);
    push.offset_lo = static_cast<uint32_t>(o);
    push.offset_hi = static_cast<uint32_t>(o >> 32);
    const uint64_t blocks = (uint64_t{push.n} + 3) / 4;
    const std::string shader = std::string("random_") + tag(c.out.dtype);
    return launch(c, shader.c_str(), &push, sizeof(push), groups_for(blocks, RANDOM_GROUP));
  }
};

}  // namespace

void register_random_kernels(Registry& r) {
  for (strata_dtype d : kFloatTypes) {
    r.add<Random>(STRATA_OP_RANDOM_UNIFORM, OP_RANDOM_UNIFORM, {}, d, 0);
    r.add<Random>(STRATA_OP_RANDOM_NORMAL, OP_RANDOM_NORMAL, {}, d, 0);
  }
  for (strata_dtype d : kAllTypes) r.add<Random>(STRATA_OP_BERNOULLI, OP_BERNOULLI, {}, d, 0);
}

}  // namespace strata::vulkan
