// grouped_optim_test.cpp — the optimizer updates over a group of parameters
// (the span forms of sgd_step_, sgd_momentum_step_ and adam_step_; one
// kernel call per group on cpu:0, whose f32 and f64 kernels take groups)
// against one update per parameter: equal to the last bit, for f32 and f64
// (CPU kernels) and bf16/f16 (the ops' decompositions), over several steps,
// on parameters of lengths that are no multiple of any vector width and
// whose sum is large enough that the kernel's threads split the group in the
// middle of parameters, with gradients holding NaN, ±inf, ±0 and denormals.
// Also: nn::Adam and nn::SGD, which update their parameters as groups of
// equal step counts, against one optimizer per parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <strata/strata.hpp>
#include <vector>

#include "optim_cases.hpp"

#include "../common/test_device.hpp"

namespace {

using namespace strata;

// 40 000 + ... elements: above the CPU plugin's parallel grain, so with two
// or more threads the chunks of the pass end inside parameters.
const std::vector<int64_t> kLengths{1, 15, 16, 17, 1037, 40000, 3, 8191, 5000};

std::vector<Tensor> values(DType dtype, uint64_t seed, bool specials) {
  std::vector<Tensor> out;
  manual_seed(seed);
  for (int64_t n : kLengths) {
    std::vector<double> v = randn({n}, {.dtype = DType::f64}).to_vector<double>();
    if (specials && n > 8) {
      const double inf = std::numeric_limits<double>::infinity();
      const double special[] = {std::nan(""), inf, -inf, 0.0, -0.0, 1e-40, -1e-310, 1e30};
      for (size_t k = 0; k < std::size(special); ++k) v[(k * 131 + seed) % v.size()] = special[k];
    }
    out.push_back(from_data(v, {n}).to(dtype));
  }
  return out;
}

std::vector<Tensor> clones(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.clone());
  return out;
}

void expect_same(const std::vector<Tensor>& group, const std::vector<Tensor>& alone, const std::string& what) {
  ASSERT_EQ(group.size(), alone.size());
  for (size_t j = 0; j < group.size(); ++j) {
    EXPECT_EQ(group[j].to_bytes(), alone[j].to_bytes()) << what << ", parameter " << j << " of "
                                                        << group[j].numel() << " elements";
  }
}

constexpr int kSteps = 3;

TEST(GroupedOptim, SgdOfAGroupEqualsOneUpdatePerParameterBitForBit) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  for (DType dtype : nn_test::kUpdateDtypes) {
    for (const nn::SGDOptions& o : nn_test::kSgdCases) {
      const std::string what = std::string(dtype_name(dtype)) + " SGD momentum " + std::to_string(o.momentum) +
                               (o.nesterov ? " Nesterov" : "") + " wd " + std::to_string(o.weight_decay);
      std::vector<Tensor> ps = values(dtype, 1, false), qs = clones(ps);
      std::vector<Tensor> bs, cs;
      for (const Tensor& p : ps) bs.push_back(zeros_like(p));
      cs = clones(bs);
      for (int s = 0; s < kSteps; ++s) {
        const std::vector<Tensor> gs = values(dtype, 10 + static_cast<uint64_t>(s), true);
        const SgdMomentumUpdate u{.lr = o.lr, .weight_decay = o.weight_decay, .momentum = o.momentum,
                                  .dampening = o.dampening, .nesterov = o.nesterov, .first = s == 0};
        if (o.momentum == 0.0) {
          sgd_step_(ps, gs, o.lr, o.weight_decay);
          for (size_t j = 0; j < qs.size(); ++j) sgd_step_(qs[j], gs[j], o.lr, o.weight_decay);
        } else {
          sgd_momentum_step_(ps, gs, bs, u);
          for (size_t j = 0; j < qs.size(); ++j) sgd_momentum_step_(qs[j], gs[j], cs[j], u);
          expect_same(bs, cs, what + " step " + std::to_string(s) + " buffer");
        }
        expect_same(ps, qs, what + " step " + std::to_string(s));
      }
    }
  }
}

TEST(GroupedOptim, AdamOfAGroupEqualsOneUpdatePerParameterBitForBit) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  const AdamUpdate updates[] = {
      {.step_size = 1e-3 / 0.1, .inv_sqrt_bias2 = 1.0 / std::sqrt(0.001)},
      {.decay_mode = WeightDecay::l2, .weight_decay = 0.01, .step_size = 0.01, .inv_sqrt_bias2 = 2.0},
      {.decay_mode = WeightDecay::decoupled, .weight_decay = 0.01, .decay = 0.9999, .step_size = 0.01,
       .inv_sqrt_bias2 = 2.0},
  };
  for (DType dtype : nn_test::kUpdateDtypes) {
    for (const AdamUpdate& base : updates) {
      const std::string what = std::string(dtype_name(dtype)) + " Adam decay mode " +
                               std::to_string(static_cast<int64_t>(base.decay_mode));
      std::vector<Tensor> ps = values(dtype, 2, false), qs = clones(ps);
      std::vector<Tensor> ms, vs;
      for (const Tensor& p : ps) {
        ms.push_back(zeros_like(p));
        vs.push_back(zeros_like(p));
      }
      std::vector<Tensor> ns = clones(ms), ws = clones(vs);
      for (int s = 0; s < kSteps; ++s) {
        const std::vector<Tensor> gs = values(dtype, 20 + static_cast<uint64_t>(s), true);
        AdamUpdate u = base;
        u.first = s == 0;
        adam_step_(ps, gs, ms, vs, u);
        for (size_t j = 0; j < qs.size(); ++j) adam_step_(qs[j], gs[j], ns[j], ws[j], u);
        const std::string at = what + " step " + std::to_string(s);
        expect_same(ps, qs, at);
        expect_same(ms, ns, at + " exp_avg");
        expect_same(vs, ws, at + " exp_avg_sq");
      }
    }
  }
}

/// `make(params)` builds an optimizer; one over all of kLengths' parameters
/// (grouped) and one per parameter must agree bitwise over four steps, in
/// one of which parameter 2 has no gradient (its step count then lags: two
/// groups from then on).
void expect_optimizer_groups_equal_alone(
    DType dtype, const std::function<std::unique_ptr<nn::Optimizer>(std::vector<Tensor>)>& make,
    const std::string& what) {
  std::vector<Tensor> ps = values(dtype, 3, false), qs = clones(ps);
  for (size_t j = 0; j < ps.size(); ++j) {
    ps[j].set_requires_grad();
    qs[j].set_requires_grad();
  }
  std::unique_ptr<nn::Optimizer> together = make(ps);
  std::vector<std::unique_ptr<nn::Optimizer>> alone;
  for (const Tensor& q : qs) alone.push_back(make({q}));
  for (int s = 0; s < 4; ++s) {
    const std::vector<Tensor> gs = values(dtype, 30 + static_cast<uint64_t>(s), false);
    for (size_t j = 0; j < ps.size(); ++j) {
      const bool skip = s == 1 && j == 2;
      ps[j].set_grad(skip ? Tensor() : gs[j]);
      qs[j].set_grad(skip ? Tensor() : gs[j]);
    }
    together->step();
    for (auto& opt : alone) opt->step();
    std::vector<Tensor> a, b;
    for (size_t j = 0; j < ps.size(); ++j) {
      a.push_back(ps[j].detach());
      b.push_back(qs[j].detach());
    }
    expect_same(a, b, what + " " + std::string(dtype_name(dtype)) + " step " + std::to_string(s));
  }
  // The state says the same of parameter 2, whose step count lags: its
  // entries "param.2.*" equal the lone optimizer's "param.0.*".
  const nn::NamedTensors state = together->state_dict();
  size_t compared = 0, expected = 0;
  for (const auto& [n, u] : alone[2]->state_dict()) {
    if (n.rfind("param.0.", 0) != 0) continue;
    ++expected;
    const std::string name = "param.2." + n.substr(8);
    for (const auto& [m, t] : state) {
      if (m != name) continue;
      EXPECT_EQ(t.to_bytes(), u.to_bytes()) << what << ": " << name;
      ++compared;
    }
  }
  EXPECT_EQ(compared, expected) << what << ": state entries of parameter 2 missing";
}

TEST(GroupedOptim, OptimizersEqualOneOptimizerPerParameter) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    expect_optimizer_groups_equal_alone(
        dtype, [](std::vector<Tensor> p) { return std::make_unique<nn::Adam>(std::move(p), nn::AdamOptions{.lr = 1e-2}); },
        "Adam");
    expect_optimizer_groups_equal_alone(
        dtype,
        [](std::vector<Tensor> p) {
          return std::make_unique<nn::AdamW>(std::move(p), nn::AdamOptions{.lr = 1e-2, .weight_decay = 0.1});
        },
        "AdamW");
    expect_optimizer_groups_equal_alone(
        dtype,
        [](std::vector<Tensor> p) {
          return std::make_unique<nn::SGD>(std::move(p), nn::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
        },
        "SGD Nesterov");
    expect_optimizer_groups_equal_alone(
        dtype, [](std::vector<Tensor> p) { return std::make_unique<nn::SGD>(std::move(p), nn::SGDOptions{.lr = 0.1}); },
        "SGD");
  }
}

}  // namespace
