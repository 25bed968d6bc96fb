// random.cpp — the random-number primitives (random_uniform, random_normal,
// bernoulli) and the global generator; rand and randn (creation.cpp) and
// dropout's mask (nn/functional.cpp) draw through random_tensor and
// bernoulli_tensor.
//
// The primitives are counter-based (Philox4x32-10, strata/plugin/philox.h is
// their bit-for-bit definition): element i of a call's output depends only on
// (seed, offset, i), so every backend generates them on its own device and
// gives the same bits, and a device without kernels falls back to the CPU
// with the same bits too. The generator is just (seed, offset): every call
// takes the next offset, so calls never share counters, and its state is two
// integers that checkpointing saves and replays.
#include "ops/batching.hpp"
#include "runtime/dispatch/op.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <strata/runtime.hpp>

#include <charconv>
#include <cmath>
#include <mutex>
#include <string>
#include <string_view>

namespace strata {

namespace {

namespace tag = detail::op_tag;
constexpr detail::AttrDecl kDrawAttrs[] = {{"seed", STRATA_ATTR_INT}, {"offset", STRATA_ATTR_INT}};
constexpr detail::AttrDecl kBernoulliAttrs[] = {
    {"seed", STRATA_ATTR_INT}, {"offset", STRATA_ATTR_INT}, {"p", STRATA_ATTR_FLOAT}};

using detail::Attr;
using detail::Attrs;
using detail::OpCall;
using detail::OpDef;

/// The attributes every random op needs: "seed" and "offset" (INT, the
/// 64-bit patterns), plus "p" (FLOAT) for bernoulli.
void check_random_call(OpCall& call) {
  const char* required[] = {"seed", "offset"};
  for (const char* name : required) {
    const Attr* a = call.attr(name);
    if (a == nullptr || a->kind != STRATA_ATTR_INT) {
      throw ValueError(call.describe() + ": expected attribute '" + name + "' of kind INT");
    }
  }
}

void float_output_rule(OpCall& call) {
  check_random_call(call);
  if (!is_floating(call.out().dtype)) {
    throw DTypeError(call.describe() + ": the output must be floating-point, got " +
                     std::string(dtype_name(call.out().dtype)));
  }
}

void bernoulli_rule(OpCall& call) {
  check_random_call(call);
  const Attr* p = call.attr("p");
  if (p == nullptr || p->kind != STRATA_ATTR_FLOAT) {
    throw ValueError(call.describe() + ": expected attribute 'p' of kind FLOAT");
  }
  if (!(p->f >= 0.0 && p->f <= 1.0)) {
    throw ValueError(call.describe() + ": p must be in [0, 1], got " + std::to_string(p->f));
  }
}

// No derivative rules: a random draw has no inputs and is a constant.
const OpDef& kRandomUniform = detail::define_op({.name = "random_uniform",
                                                 .tags = tag::random | tag::creation,
                                                 .attrs = kDrawAttrs,
                                                 .dtypes = detail::DTypeFamily::float_only,
                                                 .n_inputs = 0,
                                                 .prepare = float_output_rule});
const OpDef& kRandomNormal = detail::define_op({.name = "random_normal",
                                                .tags = tag::random | tag::creation,
                                                .attrs = kDrawAttrs,
                                                .dtypes = detail::DTypeFamily::float_only,
                                                .n_inputs = 0,
                                                .prepare = float_output_rule});
const OpDef& kBernoulli = detail::define_op({.name = "bernoulli",
                                             .tags = tag::random | tag::creation,
                                             .attrs = kBernoulliAttrs,
                                             .dtypes = detail::DTypeFamily::any,
                                             .n_inputs = 0,
                                             .prepare = bernoulli_rule});

/// The global generator: a seed and the offset the next call takes.
struct Generator {
  static constexpr uint64_t kDefaultSeed = 0x5eed5eedULL;
  std::mutex mutex;
  uint64_t seed = kDefaultSeed;
  uint64_t offset = 0;
};

Generator& generator() {
  static Generator g;
  return g;
}

struct Draw {
  uint64_t seed;
  uint64_t offset;
};

/// (seed, offset) for one call; advances the offset.
Draw next_draw() {
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  return {g.seed, g.offset++};
}

constexpr std::string_view kStatePrefix = "philox4x32-10 ";

/// Runs one random op on `device` with a fresh offset.
Tensor draw_once(const OpDef& op, Device device, DType dtype, std::span<const int64_t> shape, const double* p) {
  const Draw d = next_draw();
  Attrs attrs{Attr::integer("seed", static_cast<int64_t>(d.seed)),
              Attr::integer("offset", static_cast<int64_t>(d.offset))};
  if (p != nullptr) attrs.push_back(Attr::real("p", *p));
  return detail::dispatch_creation(op, device, dtype, shape, attrs);
}

/// One draw; inside vmap, by its randomness, one per lane (a draw of the
/// lanes' shape, so a lane's numbers do not depend on the device), one every
/// lane shares, or an error (ops/batching.cpp).
Tensor draw(const OpDef& op, Device device, DType dtype, std::span<const int64_t> shape, const double* p) {
  if (detail::vmap_frames().empty()) [[likely]] return draw_once(op, device, dtype, shape, p);
  return detail::draw_in_vmap(op.name, shape, [&](std::span<const int64_t> lanes_shape) {
    return draw_once(op, device, dtype, lanes_shape, p);
  });
}

}  // namespace

void manual_seed(uint64_t seed) {
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  g.seed = seed;
  g.offset = 0;
}

RngState get_rng_state() {
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  return {std::string(kStatePrefix) + std::to_string(g.seed) + " " + std::to_string(g.offset)};
}

void set_rng_state(const RngState& state) {
  // Exactly "philox4x32-10 <seed> <offset>", both decimal uint64.
  std::string_view text = state.data;
  uint64_t seed = 0, offset = 0;
  bool ok = text.starts_with(kStatePrefix);
  if (ok) {
    const char* p = text.data() + kStatePrefix.size();
    const char* end = text.data() + text.size();
    auto [after_seed, e1] = std::from_chars(p, end, seed);
    ok = e1 == std::errc() && after_seed != p && after_seed < end && *after_seed == ' ';
    if (ok) {
      const char* q = after_seed + 1;
      auto [after_offset, e2] = std::from_chars(q, end, offset);
      ok = e2 == std::errc() && after_offset != q && after_offset == end;
    }
  }
  if (!ok) {
    std::string shown = state.data.size() > 60 ? state.data.substr(0, 60) + "..." : state.data;
    throw ValueError("set_rng_state: not a state from get_rng_state() (expected \"" + std::string(kStatePrefix) +
                     "<seed> <offset>\", got \"" + shown + "\")");
  }
  Generator& g = generator();
  std::lock_guard lock(g.mutex);
  g.seed = seed;
  g.offset = offset;
}

namespace detail {
Tensor random_tensor(RandomDraw kind, std::span<const int64_t> shape, DType dtype, Device device) {
  return draw(kind == RandomDraw::uniform ? kRandomUniform : kRandomNormal, device, dtype, shape, nullptr);
}

/// 1 with probability p, else 0, of `dtype` on `device` (dropout's mask).
Tensor bernoulli_tensor(std::span<const int64_t> shape, double p, DType dtype, Device device) {
  if (!(p >= 0.0 && p <= 1.0)) throw ValueError("bernoulli: p must be in [0, 1], got " + std::to_string(p));
  return draw(kBernoulli, device, dtype, shape, &p);
}
}  // namespace detail

}  // namespace strata
