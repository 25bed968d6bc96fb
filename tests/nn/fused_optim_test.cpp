// fused_optim_test.cpp — the fused optimizer updates (ops sgd_step,
// sgd_momentum_step, adam_step; one kernel per parameter on cpu:0) against
// the unfused updates the optimizers ran before, written here with public
// ops: equal to the last bit, for f32 and f64 (CPU kernels) and bf16/f16
// (the ops' decompositions), on lengths that are no multiple of any vector
// width, over several steps, with gradients holding NaN, ±inf, ±0 and
// denormals. Also: a strided parameter, and state that must not alias the
// caller's tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <strata/strata.hpp>
#include <vector>

#include "optim_cases.hpp"

#include "../common/test_device.hpp"

namespace {

using namespace strata;

constexpr int64_t kLength = 1037;  // 64 vectors of 16, and 13 more
constexpr int kSteps = 4;

/// Gradient of step `s`: random, with special values at fixed places when
/// `specials`.
Tensor gradient(int s, DType dtype, bool specials) {
  manual_seed(100 + static_cast<uint64_t>(s));
  Tensor g = randn({kLength}, {.dtype = DType::f64});
  if (specials) {
    std::vector<double> v = g.to_vector<double>();
    const double inf = std::numeric_limits<double>::infinity();
    const double special[] = {std::nan(""), inf, -inf, 0.0, -0.0, 1e-40, -1e-310, 1e30};
    for (size_t k = 0; k < std::size(special); ++k) v[(k * 131 + static_cast<size_t>(s)) % v.size()] = special[k];
    g = from_data(v, {kLength});
  }
  return g.to(dtype);
}

Tensor initial(DType dtype) {
  manual_seed(7);
  return randn({kLength}, {.dtype = DType::f64}).to(dtype);
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.to_bytes() == b.to_bytes(); }

// The unfused updates, as nn::SGD and nn::Adam computed them before the
// fused ops (one public op per arithmetic operation).
struct UnfusedSgd {
  nn::SGDOptions o;
  Tensor buf;
  void step(Tensor& p, Tensor g) {
    if (o.weight_decay != 0.0) g = g + p * o.weight_decay;
    if (o.momentum != 0.0) {
      buf = buf.defined() ? buf * o.momentum + g * (1.0 - o.dampening) : g.clone();
      g = o.nesterov ? g + buf * o.momentum : buf;
    }
    p = p - g * o.lr;
  }
};

struct UnfusedAdam {
  nn::AdamOptions o;
  bool decoupled = false;
  Tensor m, v;
  int64_t t = 0;
  void step(Tensor& p, Tensor g) {
    Tensor value = p;
    if (o.weight_decay != 0.0) {
      if (decoupled) {
        value = value * (1.0 - o.lr * o.weight_decay);
      } else {
        g = g + value * o.weight_decay;
      }
    }
    m = m.defined() ? m * o.beta1 + g * (1.0 - o.beta1) : g * (1.0 - o.beta1);
    v = v.defined() ? v * o.beta2 + square(g) * (1.0 - o.beta2) : square(g) * (1.0 - o.beta2);
    ++t;
    const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
    Tensor denom = sqrt(v) * (1.0 / std::sqrt(bc2)) + o.eps;
    p = value - m / denom * (o.lr / bc1);
  }
};

/// Runs kSteps of `opt` (fused) and of `reference` (unfused) from the same
/// start and gradients; every step's parameter and state must agree bitwise.
template <class Reference>
void expect_same_updates(DType dtype, bool specials, const std::function<std::unique_ptr<nn::Optimizer>(Tensor&)>& make,
                         Reference reference, const std::vector<std::string>& state_names) {
  Tensor p = initial(dtype).set_requires_grad();
  std::unique_ptr<nn::Optimizer> opt = make(p);
  Tensor q = initial(dtype);
  for (int s = 0; s < kSteps; ++s) {
    Tensor g = gradient(s, dtype, specials);
    p.set_grad(g);
    opt->step();
    reference.step(q, g);
    ASSERT_TRUE(same_bits(p.detach(), q)) << opt->name() << " " << dtype_name(dtype) << " step " << s
                                          << ": parameter differs from the unfused update";
    nn::NamedTensors state = opt->state_dict();
    for (const std::string& name : state_names) {
      const Tensor* mine = nullptr;
      for (const auto& [n, t] : state)
        if (n == "param.0." + name) mine = &t;
      ASSERT_NE(mine, nullptr) << name;
      const Tensor& theirs = name == "momentum_buffer" ? reference.buffer() : reference.state(name);
      EXPECT_TRUE(same_bits(*mine, theirs)) << opt->name() << " " << dtype_name(dtype) << " step " << s << ": " << name;
    }
  }
}

struct SgdReference : UnfusedSgd {
  const Tensor& buffer() const { return buf; }
  const Tensor& state(const std::string&) const { return buf; }
};
struct AdamReference : UnfusedAdam {
  const Tensor& buffer() const { return m; }
  const Tensor& state(const std::string& name) const { return name == "exp_avg" ? m : v; }
};

TEST(FusedOptim, SgdEqualsTheUnfusedUpdateBitForBit) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  for (DType dtype : nn_test::kUpdateDtypes) {
    for (bool specials : {false, true}) {
      for (const nn::SGDOptions& o : nn_test::kSgdCases) {
        SCOPED_TRACE("momentum " + std::to_string(o.momentum) + " specials " + std::to_string(specials));
        std::vector<std::string> names;
        if (o.momentum != 0.0) names.push_back("momentum_buffer");
        SgdReference ref;
        ref.o = o;
        expect_same_updates(
            dtype, specials, [&](Tensor& p) { return std::make_unique<nn::SGD>(std::vector<Tensor>{p}, o); }, ref,
            names);
      }
    }
  }
}

TEST(FusedOptim, AdamAndAdamWEqualTheUnfusedUpdateBitForBit) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  for (DType dtype : nn_test::kUpdateDtypes) {
    for (bool specials : {false, true}) {
      for (const nn::AdamOptions& o : nn_test::kAdamCases) {
        for (bool decoupled : {false, true}) {
          SCOPED_TRACE(std::string(decoupled ? "AdamW" : "Adam") + " wd " + std::to_string(o.weight_decay) +
                       " specials " + std::to_string(specials));
          AdamReference ref;
          ref.o = o;
          ref.decoupled = decoupled;
          expect_same_updates(
              dtype, specials,
              [&](Tensor& p) -> std::unique_ptr<nn::Optimizer> {
                if (decoupled) return std::make_unique<nn::AdamW>(std::vector<Tensor>{p}, o);
                return std::make_unique<nn::Adam>(std::vector<Tensor>{p}, o);
              },
              ref, {"exp_avg", "exp_avg_sq"});
        }
      }
    }
  }
}

TEST(FusedOptim, AStridedParameterIsUpdatedThroughItsView) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  // Every other element of a buffer: the update cannot be handed to a
  // kernel in place; the rest of the buffer must stay as it was.
  Tensor base = initial(DType::f32).reshape({-1}).slice(0, 0, 1036).reshape({518, 2});
  Tensor storage = base.clone();
  Tensor p = storage.select(1, 0);  // stride 2
  ASSERT_FALSE(p.is_contiguous());
  p.set_requires_grad();
  Tensor q = p.detach().clone();
  nn::Adam opt({p}, {.lr = 0.01});
  AdamReference ref;
  ref.o = {.lr = 0.01};
  for (int s = 0; s < 3; ++s) {
    Tensor g = gradient(s, DType::f32, false).slice(0, 0, 518);
    p.set_grad(g);
    opt.step();
    ref.step(q, g);
  }
  EXPECT_TRUE(same_bits(p.detach().contiguous(), q));
  EXPECT_TRUE(same_bits(storage.select(1, 1).contiguous(), base.select(1, 1).contiguous()))
      << "the update wrote outside the parameter's view";
}

TEST(FusedOptim, StateIsNeverSharedWithTheCallersTensors) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor p = initial(DType::f64).set_requires_grad();
  nn::Adam opt({p}, {.lr = 0.01});
  p.set_grad(gradient(0, DType::f64, false));
  opt.step();
  nn::NamedTensors saved = opt.state_dict();
  std::vector<std::vector<uint8_t>> before;
  for (const auto& [n, t] : saved) before.push_back(t.to_bytes());
  nn::Adam other({p}, {.lr = 0.01});
  other.load_state_dict(saved);
  for (int s = 1; s < 3; ++s) {
    p.set_grad(gradient(s, DType::f64, false));
    opt.step();
    other.step();
  }
  for (size_t k = 0; k < saved.size(); ++k)
    EXPECT_EQ(saved[k].second.to_bytes(), before[k]) << saved[k].first << " changed after later steps";
}

}  // namespace
