// optim_test.cpp — SGD (momentum, dampening, Nesterov, weight decay), Adam
// and AdamW against update sequences computed here in plain double
// arithmetic; state dicts; the learning-rate schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <strata/strata.hpp>

#include "nn_test_util.hpp"

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using strata_test::real_dtype;
using namespace nn_test;

/// The quadratic L(p) = Σ c·(p − t)², gradient 2c(p − t), for the tests.
const std::vector<double> kC = {1.0, 0.5, 2.0, 0.25};
const std::vector<double> kT = {0.3, -1.0, 2.0, 0.5};
const std::vector<double> kP0 = {1.0, 2.0, -0.5, 0.0};

Tensor quadratic(const Tensor& p) { return sum(make_real(kC, {4}) * square(p - make_real(kT, {4}))); }
std::vector<double> quadratic_grad(const std::vector<double>& p) {
  std::vector<double> g;
  for (size_t i = 0; i < p.size(); ++i) g.push_back(2.0 * kC[i] * (p[i] - kT[i]));
  return g;
}

/// Runs `steps` optimizer steps on the quadratic and returns p after each.
std::vector<std::vector<double>> run(nn::Optimizer& opt, Tensor& p, int steps) {
  std::vector<std::vector<double>> out;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    quadratic(p).backward();
    opt.step();
    out.push_back(p.to_vector<double>());
  }
  return out;
}

TEST(SGD, HandComputedSteps) {
  // p = 1, loss p², lr 0.1: plain p ← p − 0.2p; momentum 0.9: buffer 2 then
  // 0.9·2 + 1.6 = 3.4.
  Tensor p = make_real({1.0}, {1}).set_requires_grad();
  nn::SGD plain({p}, {.lr = 0.1});
  for (double expected : {0.8, 0.64}) {
    plain.zero_grad();
    sum(square(p)).backward();
    plain.step();
    EXPECT_REAL_NEAR(p.item<double>(), expected, 1e-15);
  }
  Tensor q = make_real({1.0}, {1}).set_requires_grad();
  nn::SGD momentum({q}, {.lr = 0.1, .momentum = 0.9});
  for (double expected : {0.8, 0.46}) {
    momentum.zero_grad();
    sum(square(q)).backward();
    momentum.step();
    EXPECT_REAL_NEAR(q.item<double>(), expected, 1e-15);
  }
}

struct SGDCase {
  const char* label;
  nn::SGDOptions o;
};
void PrintTo(const SGDCase& c, std::ostream* os) { *os << c.label; }

class SGDVariants : public ::testing::TestWithParam<SGDCase> {};

TEST_P(SGDVariants, MatchReferenceSequence) {
  const nn::SGDOptions o = GetParam().o;
  Tensor p = make_real(kP0, {4}).set_requires_grad();
  nn::SGD opt({p}, o);
  std::vector<std::vector<double>> got = run(opt, p, 5);
  std::vector<double> ref = kP0, buf;
  for (int s = 0; s < 5; ++s) {
    std::vector<double> g = quadratic_grad(ref);
    for (size_t i = 0; i < 4; ++i) g[i] += o.weight_decay * ref[i];
    if (o.momentum != 0.0) {
      if (buf.empty()) {
        buf = g;
      } else {
        for (size_t i = 0; i < 4; ++i) buf[i] = o.momentum * buf[i] + (1.0 - o.dampening) * g[i];
      }
      for (size_t i = 0; i < 4; ++i) g[i] = o.nesterov ? g[i] + o.momentum * buf[i] : buf[i];
    }
    for (size_t i = 0; i < 4; ++i) ref[i] -= o.lr * g[i];
    for (size_t i = 0; i < 4; ++i) EXPECT_REAL_NEAR(got[static_cast<size_t>(s)][i], ref[i], 1e-14) << "step " << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Options, SGDVariants,
    ::testing::Values(SGDCase{"plain", {.lr = 0.1}}, SGDCase{"momentum", {.lr = 0.05, .momentum = 0.9}},
                      SGDCase{"dampening", {.lr = 0.05, .momentum = 0.8, .dampening = 0.3}},
                      SGDCase{"nesterov", {.lr = 0.05, .momentum = 0.9, .nesterov = true}},
                      SGDCase{"nesterov_weight_decay",
                              {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.1, .nesterov = true}}));

/// Adam in doubles (decoupled: AdamW).
std::vector<std::vector<double>> reference_adam(const nn::AdamOptions& o, bool decoupled, int steps) {
  std::vector<double> p = kP0, m(4, 0.0), v(4, 0.0);
  std::vector<std::vector<double>> out;
  for (int t = 1; t <= steps; ++t) {
    std::vector<double> g = quadratic_grad(p);
    for (size_t i = 0; i < 4; ++i) {
      if (decoupled) {
        p[i] *= 1.0 - o.lr * o.weight_decay;
      } else {
        g[i] += o.weight_decay * p[i];
      }
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
      double mhat = m[i] / (1 - std::pow(o.beta1, t)), vhat = v[i] / (1 - std::pow(o.beta2, t));
      p[i] -= o.lr * mhat / (std::sqrt(vhat) + o.eps);
    }
    out.push_back(p);
  }
  return out;
}

TEST(Adam, ThreeStepsOnAQuadratic) {
  const nn::AdamOptions o{.lr = 0.1};
  Tensor p = make_real(kP0, {4}).set_requires_grad();
  nn::Adam opt({p}, o);
  auto got = run(opt, p, 3);
  auto ref = reference_adam(o, false, 3);
  // The first step moves every coordinate by lr against its gradient's sign
  // (m̂/√v̂ = g/|g|).
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[0][i], kP0[i] - 0.1 * (kP0[i] > kT[i] ? 1 : -1), 1e-7);
  for (size_t s = 0; s < 3; ++s) {
    for (size_t i = 0; i < 4; ++i) EXPECT_REAL_NEAR(got[s][i], ref[s][i], 1e-13) << "step " << s;
  }
  EXPECT_EQ(opt.step_count(), 3);
}

TEST(Adam, WeightDecayCoupledAndDecoupled) {
  const nn::AdamOptions o{.lr = 0.05, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.3};
  Tensor p = make_real(kP0, {4}).set_requires_grad();
  nn::Adam adam({p}, o);
  auto got = run(adam, p, 4);
  auto ref = reference_adam(o, false, 4);
  for (size_t s = 0; s < 4; ++s) {
    for (size_t i = 0; i < 4; ++i) EXPECT_REAL_NEAR(got[s][i], ref[s][i], 1e-13) << "Adam step " << s;
  }
  Tensor q = make_real(kP0, {4}).set_requires_grad();
  nn::AdamW adamw({q}, o);
  EXPECT_EQ(adamw.name(), "AdamW");
  auto got_w = run(adamw, q, 4);
  auto ref_w = reference_adam(o, true, 4);
  for (size_t s = 0; s < 4; ++s) {
    for (size_t i = 0; i < 4; ++i) EXPECT_REAL_NEAR(got_w[s][i], ref_w[s][i], 1e-13) << "AdamW step " << s;
  }
  EXPECT_NE(got_w[3][0], got[3][0]);  // the two decays differ
}

TEST(Optimizer, SkipsParametersWithoutGradientAndRecordsNothing) {
  Tensor used = make_real({1.0, 2.0}, {2}).set_requires_grad();
  Tensor unused = make_real({5.0}, {1}).set_requires_grad();
  nn::Adam opt({used, unused}, {.lr = 0.1});
  const TensorImpl* impl = used.impl();
  sum(square(used)).backward();
  GradientTape tape;  // watches `used` (it requires grad)
  opt.step();
  EXPECT_EQ(unused.item<double>(), 5.0);
  EXPECT_NEAR(used.to_vector<double>()[0], 0.9, 1e-7);
  EXPECT_EQ(used.impl(), impl);  // updated in place
  EXPECT_TRUE(used.is_leaf());
  EXPECT_TRUE(used.requires_grad());
  for (const auto& [n, t] : opt.state_dict()) EXPECT_EQ(n.rfind("param.1.", 0), std::string::npos) << n;
  EXPECT_EQ(tape.saved_bytes(), 0u);  // the update was not recorded
}

TEST(Optimizer, ConstructionErrors) {
  Tensor p = zeros({2}, {.requires_grad = true});
  EXPECT_THROW(nn::SGD({}, {}), ValueError);
  expect_error<ValueError>([&] { nn::SGD({p, p}, {}); }, {"more than once"});
  expect_error<ValueError>([&] { nn::SGD({p}, {.lr = -1.0}); }, {"lr", "-1"});
  expect_error<ValueError>([&] { nn::SGD({p}, {.nesterov = true}); }, {"Nesterov"});
  expect_error<ValueError>([&] { nn::Adam({p}, {.beta1 = 1.0}); }, {"beta1"});
  // Infinite or NaN hyperparameters would stop (eps = inf divides every
  // update by inf) or poison the parameters: refused, named.
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  expect_error<ValueError>([&] { nn::Adam({p}, {.eps = inf}); }, {"eps must be finite and >= 0, got inf"});
  expect_error<ValueError>([&] { nn::Adam({p}, {.weight_decay = nan}); }, {"weight_decay must be finite"});
  expect_error<ValueError>([&] { nn::Adam({p}, {.lr = inf}); }, {"lr must be finite and >= 0"});
  expect_error<ValueError>([&] { nn::SGD({p}, {.momentum = inf}); }, {"momentum must be finite and >= 0"});
  EXPECT_THROW(nn::SGD({zeros({2}, {.dtype = DType::i64})}, {}), DTypeError);
  nn::SGD ok({p}, {.lr = 0.5});
  ok.set_lr(0.25);
  EXPECT_EQ(ok.lr(), 0.25);
  EXPECT_THROW(ok.set_lr(-0.1), ValueError);
}

TEST(Optimizer, StateDictRoundTripContinuesIdentically) {
  for (bool adam : {true, false}) {
    auto make = [&](Tensor& p) -> std::unique_ptr<nn::Optimizer> {
      if (adam) return std::make_unique<nn::AdamW>(std::vector<Tensor>{p}, nn::AdamOptions{.lr = 0.05});
      return std::make_unique<nn::SGD>(std::vector<Tensor>{p}, nn::SGDOptions{.lr = 0.05, .momentum = 0.9});
    };
    Tensor p = make_real(kP0, {4}).set_requires_grad();
    auto opt = make(p);
    run(*opt, p, 3);
    nn::NamedTensors saved = opt->state_dict();
    std::vector<double> saved_p = p.to_vector<double>();
    auto continued = run(*opt, p, 2);

    Tensor q = make_real(saved_p, {4}).set_requires_grad();
    auto fresh = make(q);
    fresh->set_lr(1.0);  // overwritten by the load
    fresh->load_state_dict(saved);
    EXPECT_EQ(fresh->lr(), 0.05);
    EXPECT_EQ(fresh->step_count(), 3);
    auto resumed = run(*fresh, q, 2);
    EXPECT_EQ(resumed, continued) << fresh->name();
  }
}

TEST(Optimizer, StateDictErrorsNameTheEntry) {
  Tensor p = make_real(kP0, {4}).set_requires_grad();
  nn::Adam opt({p}, {.lr = 0.1});
  run(opt, p, 1);
  nn::NamedTensors good = opt.state_dict();
  auto with = [&](const std::string& name, const Tensor& t) {
    nn::NamedTensors s = good;
    for (auto& [n, v] : s) {
      if (n == name) v = t;
    }
    return s;
  };
  expect_error<ShapeError>([&] { opt.load_state_dict(with("param.0.exp_avg", zeros({3}, {.dtype = real_dtype()}))); },
                           {"param.0.exp_avg", "[4]", "[3]"});
  expect_error<DTypeError>(
      [&] { opt.load_state_dict(with("param.0.exp_avg_sq", zeros({4}, {.dtype = DType::f16}))); },
      {"param.0.exp_avg_sq", std::string(dtype_name(real_dtype())), "f16"});
  // Hyperparameters are 0-d f64 tensors on the host, whatever the parameters' device.
  const Tensor beta2 = scalar_tensor(1.5, {.dtype = DType::f64, .device = Device("cpu:0")});
  expect_error<ValueError>([&] { opt.load_state_dict(with("beta2", beta2)); }, {"beta2"});
  nn::NamedTensors extra = good;
  extra.emplace_back("param.1.exp_avg", zeros({4}, {.dtype = real_dtype()}));
  expect_error<ValueError>([&] { opt.load_state_dict(extra); }, {"param.1.exp_avg", "parameter 1"});
  nn::NamedTensors unknown = good;
  unknown.emplace_back("param.0.momentum_buffer", zeros({4}, {.dtype = real_dtype()}));
  expect_error<ValueError>([&] { opt.load_state_dict(unknown); }, {"momentum_buffer"});
  nn::NamedTensors missing;
  for (const auto& e : good) {
    if (e.first != "eps") missing.push_back(e);
  }
  expect_error<ValueError>([&] { opt.load_state_dict(missing); }, {"missing", "'eps'"});
  // Nothing was changed by the failed loads.
  nn::NamedTensors after = opt.state_dict();
  ASSERT_EQ(after.size(), good.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].second.to_vector<double>(), good[i].second.to_vector<double>()) << after[i].first;
  }
}

TEST(LRScheduler, StepCosineAndWarmup) {
  Tensor p = zeros({1}, {.requires_grad = true});
  nn::SGD opt({p}, {.lr = 1.0});
  {
    nn::StepLR sched(opt, 2, 0.5);
    std::vector<double> lrs{sched.last_lr()};
    for (int i = 0; i < 5; ++i) {
      sched.step();
      lrs.push_back(opt.lr());
    }
    EXPECT_EQ(lrs, (std::vector<double>{1, 1, 0.5, 0.5, 0.25, 0.25}));
    sched.set_step(0);
  }
  {
    nn::CosineAnnealingLR sched(opt, 4, 0.1);
    for (int s = 1; s <= 6; ++s) {
      sched.step();
      double expected = s >= 4 ? 0.1 : 0.1 + 0.9 * (1 + std::cos(std::numbers::pi * s / 4.0)) / 2;
      EXPECT_NEAR(opt.lr(), expected, 1e-15) << "step " << s;
    }
    sched.set_step(0);
  }
  EXPECT_EQ(opt.lr(), 1.0);
  nn::LinearWarmup sched(opt, 3, 0.0, std::make_unique<nn::CosineAnnealingLR>(opt, 4));
  std::vector<double> lrs{opt.lr()};
  for (int i = 0; i < 8; ++i) {
    sched.step();
    lrs.push_back(sched.last_lr());
  }
  const double c1 = (1 + std::cos(std::numbers::pi / 4)) / 2, c3 = (1 + std::cos(3 * std::numbers::pi / 4)) / 2;
  std::vector<double> expected = {0, 1.0 / 3, 2.0 / 3, 1, c1, 0.5, c3, 0, 0};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(lrs[i], expected[i], 1e-15) << "step " << i;
  EXPECT_THROW(nn::StepLR(opt, 0), ValueError);
  EXPECT_THROW(nn::LinearWarmup(opt, 2, 1.5), ValueError);
}

}  // namespace
