// checkpointing_test.cpp — checkpointing policies on layer sequences
// (checkpoint_sequential, CheckpointContext from code and JSON, selective
// recomputation), the memory tracker, backward hooks and gradient
// accumulation.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <stdexcept>
#include <strata/strata.hpp>
#include <thread>

#include "../common/test_device.hpp"

namespace {

using namespace strata;

/// `layers` x (Linear -> Activation) at width `width`, the weights drawn
/// after manual_seed(seed).
template <class Activation>
std::shared_ptr<nn::Sequential> mlp(int layers, int64_t width, uint64_t seed) {
  manual_seed(seed);
  auto seq = std::make_shared<nn::Sequential>();
  for (int i = 0; i < layers; ++i) {
    seq->emplace_back<nn::Linear>(width, width);
    seq->emplace_back<Activation>();
  }
  return seq;
}

/// 8 x (Linear -> GELU) at width 64: GELU decomposes into several saved
/// elementwise steps, as activations do in real models.
std::shared_ptr<nn::Sequential> gelu_mlp(int layers = 8, int64_t width = 64) { return mlp<nn::GELU>(layers, width, 3); }

/// Linear -> ReLU pairs: nn::Sequential runs each as one fused linear op, so
/// the stages are equal.
std::shared_ptr<nn::Sequential> relu_mlp(int layers, int64_t width) { return mlp<nn::ReLU>(layers, width, 5); }

/// A small CNN: conv -> relu -> pool -> conv -> relu -> flatten -> linear.
std::shared_ptr<nn::Sequential> small_cnn() {
  manual_seed(5);
  auto seq = std::make_shared<nn::Sequential>();
  seq->emplace_back<nn::Conv2d>(1, 4, 3, 1, 1);
  seq->emplace_back<nn::ReLU>();
  seq->emplace_back<nn::MaxPool2d>(2);
  seq->emplace_back<nn::Conv2d>(4, 4, 3, 1, 1);
  seq->emplace_back<nn::ReLU>();
  seq->emplace_back<nn::Flatten>();
  seq->emplace_back<nn::Linear>(4 * 4 * 4, 10);
  return seq;
}

std::vector<CheckpointPolicy> every_policy() {
  return {CheckpointPolicy::every_n(2),       CheckpointPolicy::every_n(1),  CheckpointPolicy::sqrt_n(),
          CheckpointPolicy::memory_budget(1), CheckpointPolicy::selective(), CheckpointPolicy::min_peak()};
}

/// d sum(model(x)^2) / d parameters, under `policy` (nullptr: none).
std::vector<Tensor> parameter_grads(nn::Sequential& model, const Tensor& x, const CheckpointPolicy* policy) {
  std::optional<CheckpointContext> scope;
  if (policy != nullptr) scope.emplace(*policy);
  GradientTape tape;
  Tensor y = model(x);
  return tape.gradient(sum(y * y), model.parameters());
}

/// d sum(g^2) / dx with g = d sum(model(x)^2) / dx, under `policy`
/// (nullptr: none): a second-order pass through the recomputations.
Tensor input_second_derivative(nn::Sequential& model, const Tensor& x, const CheckpointPolicy* policy) {
  std::optional<CheckpointContext> scope;
  if (policy != nullptr) scope.emplace(*policy);
  Tensor xi = x.detach();
  GradientTape second;
  second.watch(xi);
  GradientTape first({.higher_order = true});
  first.watch(xi);
  Tensor y = model(xi);
  Tensor g = first.gradient(sum(y * y), {xi})[0];
  return second.gradient(sum(g * g), {xi})[0];
}

void expect_bitwise(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_TRUE(a[k].defined() && b[k].defined()) << what << ": gradient " << k;
    EXPECT_EQ(a[k].to_vector<double>(), b[k].to_vector<double>()) << what << ": gradient " << k;
  }
}

TEST(CheckpointPolicy, EveryPolicyGivesBitwiseEqualGradientsForAnMlp) {
  auto model = gelu_mlp();
  Tensor x = randn({16, 64});
  std::vector<Tensor> plain = parameter_grads(*model, x, nullptr);
  for (const CheckpointPolicy& p : every_policy()) {
    expect_bitwise(plain, parameter_grads(*model, x, &p), strategy_name(p.strategy));
  }
}

TEST(CheckpointPolicy, EveryPolicyGivesBitwiseEqualGradientsForASmallCnn) {
  auto model = small_cnn();
  Tensor x = randn({4, 1, 8, 8});
  std::vector<Tensor> plain = parameter_grads(*model, x, nullptr);
  for (const CheckpointPolicy& p : every_policy()) {
    CheckpointPolicy q = p;
    if (q.strategy == CheckpointStrategy::selective) q = CheckpointPolicy::selective({"matmul", "max"});
    expect_bitwise(plain, parameter_grads(*model, x, &q), strategy_name(q.strategy));
  }
}

TEST(CheckpointPolicy, PlansSegments) {
  auto segs = CheckpointPolicy::sqrt_n().plan(16);
  ASSERT_EQ(segs.size(), 4u);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(segs[k].begin, 4 * k);
    EXPECT_EQ(segs[k].end, 4 * k + 4);
    EXPECT_EQ(segs[k].checkpointed, k < 3) << "the last segment is kept, not recomputed";
  }
  auto every3 = CheckpointPolicy::every_n(3).plan(7);
  ASSERT_EQ(every3.size(), 3u);
  EXPECT_EQ(every3[2].begin, 6u);
  EXPECT_EQ(every3[2].end, 7u);
  EXPECT_TRUE(CheckpointPolicy::none().plan(0).empty());
  EXPECT_FALSE(CheckpointPolicy::none().plan(5)[0].checkpointed);
  EXPECT_THROW(CheckpointPolicy::every_n(0), ValueError);
}

using Segments = std::vector<CheckpointPolicy::Segment>;

/// The activation peak of a plan in units of one stage's activations, as
/// checkpoint.hpp counts it: recomputing segment j < k (from 1) holds the
/// inputs of segments 2..j, its stages and the sequence's output; the kept
/// last segment holds k - 1 inputs and its stages.
size_t unit_peak(const Segments& plan) {
  size_t peak = 0;
  const size_t k = plan.size();
  for (size_t j = 1; j <= k; ++j) {
    const size_t len = plan[j - 1].end - plan[j - 1].begin;
    peak = std::max(peak, j < k ? j + len : k - 1 + len);
  }
  return peak;
}

/// Stages run again in backward: those of the checkpointed segments.
size_t recomputed(const Segments& plan) {
  size_t n = 0;
  for (const auto& s : plan) n += s.checkpointed ? s.end - s.begin : 0;
  return n;
}

/// Every split of n stages into segments (the last kept, the others
/// checkpointed): bit g of `cuts` set cuts after stage g.
Segments split_of(size_t n, uint32_t cuts) {
  Segments out;
  size_t begin = 0;
  for (size_t g = 0; g + 1 < n; ++g) {
    if ((cuts >> g & 1u) == 0) continue;
    out.push_back({begin, g + 1, true});
    begin = g + 1;
  }
  out.push_back({begin, n, false});
  return out;
}

TEST(CheckpointPolicy, MinPeakPlansTheLeastPeakOfAnyOneLevelSplit) {
  EXPECT_STREQ(strategy_name(CheckpointStrategy::min_peak), "min_peak");
  // 16 stages: lengths 5, 4, 3, 2 and a kept 2: peak 6 (sqrt_n's 4 x 4: 7).
  Segments p16 = CheckpointPolicy::min_peak().plan(16);
  std::vector<size_t> lengths;
  for (const auto& s : p16) lengths.push_back(s.end - s.begin);
  EXPECT_EQ(lengths, (std::vector<size_t>{5, 4, 3, 2, 2}));
  EXPECT_EQ(unit_peak(p16), 6u);
  EXPECT_EQ(unit_peak(CheckpointPolicy::sqrt_n().plan(16)), 7u);
  EXPECT_EQ(unit_peak(CheckpointPolicy::min_peak().plan(64)), 12u);
  EXPECT_EQ(unit_peak(CheckpointPolicy::sqrt_n().plan(64)), 15u);
  // Against every split of up to 14 stages: the least peak, and of the
  // splits with that peak the fewest stages recomputed.
  for (size_t n = 1; n <= 14; ++n) {
    Segments mine = CheckpointPolicy::min_peak().plan(n);
    size_t best_peak = n + 1, best_recomputed = n + 1;
    for (uint32_t cuts = 0; cuts < (1u << (n - 1)); ++cuts) {
      Segments other = split_of(n, cuts);
      const size_t peak = unit_peak(other), again = recomputed(other);
      if (peak < best_peak || (peak == best_peak && again < best_recomputed)) {
        best_peak = peak;
        best_recomputed = again;
      }
    }
    EXPECT_EQ(unit_peak(mine), best_peak) << n << " stages";
    EXPECT_EQ(recomputed(mine), best_recomputed) << n << " stages";
  }
  // Larger sequences: a cover of [0, n), the last segment kept, and never
  // a higher peak than sqrt_n's.
  for (size_t n = 1; n <= 300; ++n) {
    Segments mine = CheckpointPolicy::min_peak().plan(n);
    ASSERT_FALSE(mine.empty());
    size_t at = 0;
    for (size_t j = 0; j < mine.size(); ++j) {
      EXPECT_EQ(mine[j].begin, at) << n << " stages, segment " << j;
      EXPECT_GT(mine[j].end, mine[j].begin) << n << " stages, segment " << j;
      EXPECT_EQ(mine[j].checkpointed, j + 1 < mine.size()) << n << " stages, segment " << j;
      at = mine[j].end;
    }
    EXPECT_EQ(at, n);
    EXPECT_LE(unit_peak(mine), unit_peak(CheckpointPolicy::sqrt_n().plan(n))) << n << " stages";
  }
}

/// Peak bytes above the starting point while computing the gradient with
/// respect to the input, parameters frozen (their gradients, equal under
/// every policy, would hide the activations).
uint64_t activation_peak(nn::Sequential& model, const Tensor& x, const CheckpointPolicy* policy) {
  std::vector<Tensor> params = model.parameters();
  for (Tensor& p : params) p.set_requires_grad(false);
  std::optional<CheckpointContext> scope;
  if (policy != nullptr) scope.emplace(*policy);
  MemoryScope mem(x.device());
  {
    GradientTape tape;
    tape.watch(x);
    Tensor y = model(x);
    Tensor g = tape.gradient(sum(y * y), {x})[0];
  }
  for (Tensor& p : params) p.set_requires_grad(true);
  return mem.peak_bytes();
}

TEST(CheckpointPolicy, PeakMemoryDropsUnderEachPolicy) {
  auto model = gelu_mlp(16, 128);
  Tensor x = randn({64, 128});
  uint64_t none = activation_peak(*model, x, nullptr);
  ASSERT_GT(none, 0u);
  std::vector<std::pair<CheckpointPolicy, double>> expected = {
      {CheckpointPolicy::every_n(4), 0.6},
      {CheckpointPolicy::sqrt_n(), 0.6},
      {CheckpointPolicy::min_peak(), 0.6},
      {CheckpointPolicy::memory_budget(none / 4), 0.6},
      {CheckpointPolicy::selective(), 0.8},
  };
  for (const auto& [policy, ratio] : expected) {
    uint64_t peak = activation_peak(*model, x, &policy);
    std::printf("%-14s peak %8llu bytes, %.2f of no checkpointing\n", strategy_name(policy.strategy),
                static_cast<unsigned long long>(peak), static_cast<double>(peak) / static_cast<double>(none));
    EXPECT_LT(static_cast<double>(peak), ratio * static_cast<double>(none))
        << strategy_name(policy.strategy) << ": " << peak << " bytes vs " << none << " without checkpointing";
  }
}

/// Bytes the forward pass leaves allocated (the tape, its saved tensors and
/// the output alive), and how many checkpointed segments it recorded.
std::pair<uint64_t, int> forward_kept(nn::Sequential& model, const Tensor& x, const CheckpointPolicy& policy) {
  std::vector<Tensor> params = model.parameters();
  for (Tensor& p : params) p.set_requires_grad(false);
  CheckpointContext scope(policy);
  MemoryScope mem(x.device());
  GradientTape tape;
  tape.watch(x);
  Tensor y = model(x);
  const auto kept = static_cast<uint64_t>(std::max<int64_t>(mem.current_bytes(), 0));
  int segments = 0;
  for (const GraphNode& n : recorded_graph({y}).nodes) segments += n.op == "checkpoint" ? 1 : 0;
  for (Tensor& p : params) p.set_requires_grad(true);
  return {kept, segments};
}

// What memory_budget promises (checkpoint.hpp): the stages it keeps hold at
// most the budget, and the forward pass keeps that plus one activation per
// checkpointed segment. And it spends the budget: it stops keeping stages
// only when the next would not fit, never far below the budget.
TEST(CheckpointPolicy, MemoryBudgetKeepsWhatItPromises) {
  auto model = gelu_mlp(16, 128);
  Tensor x = randn({64, 128});
  const uint64_t activation = 64 * 128 * sizeof(float);
  const uint64_t all = forward_kept(*model, x, CheckpointPolicy::none()).first;
  const uint64_t stage = all / 32;  // 16 Linear and 16 GELU stages; the largest is at most twice the mean
  ASSERT_GT(stage, 0u);
  for (double share : {0.1, 0.25, 0.5, 0.75}) {
    const auto budget = static_cast<uint64_t>(share * static_cast<double>(all));
    const auto [kept, segments] = forward_kept(*model, x, CheckpointPolicy::memory_budget(budget));
    std::printf("budget %.2f of %llu bytes: kept %llu bytes, %d checkpointed segments\n", share,
                static_cast<unsigned long long>(all), static_cast<unsigned long long>(kept), segments);
    EXPECT_GT(segments, 0) << "a budget of " << share << " of the whole checkpoints something";
    EXPECT_LE(kept, budget + static_cast<uint64_t>(segments) * activation)
        << "budget " << budget << " bytes, " << segments << " segments of " << activation << "-byte outputs";
    EXPECT_GE(kept + 4 * stage, budget) << "budget " << budget << ": the kept stages stop well short of it";
  }
}

TEST(CheckpointPolicy, MinPeakHoldsLessThanSqrtNForEqualLayers) {
  // 16 fused Linear + ReLU layers of equal size, the plans' unit model:
  // sqrt_n peaks at 7 layers' outputs, min_peak at 6.
  auto seq = relu_mlp(16, 64);
  Tensor x = randn({32, 64});
  const uint64_t layer = 32 * 64 * sizeof(float);
  CheckpointPolicy sqrt_n = CheckpointPolicy::sqrt_n(), min_peak = CheckpointPolicy::min_peak();
  const uint64_t a = activation_peak(*seq, x, &sqrt_n), b = activation_peak(*seq, x, &min_peak);
  EXPECT_EQ(a - b, layer) << "sqrt_n " << a << " bytes, min_peak " << b << " bytes";
}

TEST(CheckpointPolicy, AFusedLinearReluIsOneStage) {
  STRATA_REQUIRE_KERNELS("linear");  // counts linear nodes, which a decomposition does not record
  // 16 Linear + ReLU pairs (32 modules) run as 16 fused linear ops, so sqrt_n
  // makes ceil(sqrt(16)) = 4 segments of 4 layers: three checkpoints and the
  // last segment's four linear nodes, recorded as they ran.
  auto seq = relu_mlp(16, 8);
  Tensor x = randn({2, 8}).set_requires_grad();
  CheckpointContext scope(CheckpointPolicy::sqrt_n());
  Tensor y = (*seq)(x);
  int checkpoints = 0, linears = 0;
  for (const GraphNode& n : recorded_graph({y}).nodes) {
    checkpoints += n.op == "checkpoint" ? 1 : 0;
    linears += n.op == "linear" ? 1 : 0;
  }
  EXPECT_EQ(checkpoints, 3);
  EXPECT_EQ(linears, 4);
}

TEST(CheckpointPolicy, WorksWithHigherOrderAndNestedSequences) {
  auto inner = gelu_mlp(2, 8);
  auto outer = std::make_shared<nn::Sequential>();
  outer->push_back(inner);
  outer->emplace_back<nn::Linear>(8, 8);
  outer->emplace_back<nn::Tanh>();
  outer->push_back(gelu_mlp(2, 8));
  Tensor x = randn({3, 8});
  Tensor plain = input_second_derivative(*outer, x, nullptr);
  for (const CheckpointPolicy& p : every_policy()) {
    Tensor c = input_second_derivative(*outer, x, &p);
    EXPECT_LT(amax(abs(c - plain)).item<double>(), 1e-5) << strategy_name(p.strategy);
  }
}

TEST(CheckpointPolicy, DropoutInsideSegmentsReplaysItsMask) {
  manual_seed(9);
  auto model = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 4; ++i) {
    model->emplace_back<nn::Linear>(32, 32);
    model->emplace_back<nn::ReLU>();
    model->emplace_back<nn::Dropout>(0.3);
  }
  Tensor x = randn({8, 32});
  manual_seed(100);
  std::vector<Tensor> plain = parameter_grads(*model, x, nullptr);
  CheckpointPolicy p = CheckpointPolicy::sqrt_n();
  manual_seed(100);
  expect_bitwise(plain, parameter_grads(*model, x, &p), "sqrt_n with dropout");
}

TEST(CheckpointPolicy, UnderAutocastGradientsMatch) {
  STRATA_REQUIRE_DTYPES(strata::DType::bf16);
  auto model = gelu_mlp(4, 32);
  Tensor x = randn({8, 32});
  auto grads = [&](const CheckpointPolicy* policy) {
    Autocast amp({.dtype = DType::bf16});
    return parameter_grads(*model, x, policy);
  };
  std::vector<Tensor> plain = grads(nullptr);
  for (const CheckpointPolicy& p : every_policy()) expect_bitwise(plain, grads(&p), strategy_name(p.strategy));
}

TEST(CheckpointPolicy, ContextsNestAndEndWithTheirScope) {
  EXPECT_EQ(CheckpointContext::current(), nullptr);
  {
    CheckpointContext outer(CheckpointPolicy::sqrt_n());
    EXPECT_EQ(CheckpointContext::current()->strategy, CheckpointStrategy::sqrt_n);
    {
      CheckpointContext inner(CheckpointPolicy::every_n(3));
      EXPECT_EQ(CheckpointContext::current()->strategy, CheckpointStrategy::every_n);
      EXPECT_EQ(CheckpointContext::current()->every, 3);
    }
    EXPECT_EQ(CheckpointContext::current()->strategy, CheckpointStrategy::sqrt_n);
  }
  EXPECT_EQ(CheckpointContext::current(), nullptr);
  CheckpointPolicy bad;
  bad.strategy = CheckpointStrategy::every_n;
  bad.every = 0;
  EXPECT_THROW(CheckpointContext{bad}, ValueError);
  EXPECT_EQ(CheckpointContext::current(), nullptr);
}

TEST(CheckpointPolicy, ComesFromTheConfigurationFile) {
  Config saved = runtime().config();
  Config c = Config::from_string(R"({"version": 1, "checkpoint": {"policy": "selective", "save_ops": ["matmul"]}})",
                                 "ckpt.json", ".");
  runtime().configure(c);
  CheckpointPolicy p = CheckpointPolicy::from_config();
  EXPECT_EQ(p.strategy, CheckpointStrategy::selective);
  EXPECT_EQ(p.save_ops, std::set<std::string>{"matmul"});
  {
    CheckpointContext scope;  // the configuration's policy
    EXPECT_EQ(CheckpointContext::current()->strategy, CheckpointStrategy::selective);
  }
  runtime().configure(Config::from_string(R"({"version": 1, "checkpoint": {"policy": "min_peak"}})", "ckpt.json", "."));
  EXPECT_EQ(CheckpointPolicy::from_config().strategy, CheckpointStrategy::min_peak);
  runtime().configure(Config::from_string(R"({"version": 1, "checkpoint": {"policy": "memory_budget", "budget": "2MiB"}})",
                                          "ckpt.json", "."));
  EXPECT_EQ(CheckpointPolicy::from_config().budget_bytes, 2u << 20);
  runtime().configure(saved);
  EXPECT_EQ(CheckpointPolicy::from_config().strategy, CheckpointStrategy::none);
}

TEST(CheckpointPolicy, BadConfigurationNamesTheKey) {
  auto error_of = [](const std::string& text) {
    try {
      Config::from_string(text, "ckpt.json", ".");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e = error_of(R"({"version": 1, "checkpoint": {"policy": "every_n"}})");
  EXPECT_NE(e.find("ckpt.json: /checkpoint: policy \"every_n\" needs \"every\""), std::string::npos) << e;
  e = error_of(R"({"version": 1, "checkpoint": {"policy": "sqrt_n", "budget": 100}})");
  EXPECT_NE(e.find("/checkpoint/budget: only used by policy \"memory_budget\""), std::string::npos) << e;
  e = error_of(R"({"version": 1, "checkpoint": {"policy": "sqrt"}})");
  EXPECT_NE(e.find("/checkpoint/policy"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean \"sqrt_n\""), std::string::npos) << e;
  e = error_of(R"({"version": 1, "checkpoint": {"policy": "every_n", "every": 0}})");
  EXPECT_NE(e.find("/checkpoint/every: expected a positive integer"), std::string::npos) << e;
  e = error_of(R"({"version": 1, "checkpoint": {"policy": "memory_budget", "budget": "12 parsecs"}})");
  EXPECT_NE(e.find("/checkpoint/budget"), std::string::npos) << e;
  EXPECT_THROW(CheckpointPolicy::selective({"matmul", "convolution"}), ValueError);

  Config saved = runtime().config();
  runtime().configure(Config::from_string(
      R"({"version": 1, "checkpoint": {"policy": "selective", "save_ops": ["convolution"]}})", "ckpt.json", "."));
  try {
    CheckpointContext scope;
    ADD_FAILURE() << "an unknown op in save_ops was accepted";
  } catch (const ConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("ckpt.json: /checkpoint/save_ops: 'convolution' is not an op"),
              std::string::npos)
        << err.what();
  }
  runtime().configure(saved);
}

TEST(CheckpointSequential, ExplicitSegmentsMatchAndBadArgumentsAreRefused) {
  auto model = gelu_mlp(3, 16);
  Tensor x = randn({4, 16});
  std::vector<Tensor> plain = parameter_grads(*model, x, nullptr);
  for (int64_t segments : {1, 2, 3, 6, 50}) {
    GradientTape tape;
    Tensor y = nn::checkpoint_sequential(model->modules(), x, segments);
    expect_bitwise(plain, tape.gradient(sum(y * y), model->parameters()), std::to_string(segments) + " segments");
  }
  EXPECT_THROW(nn::checkpoint_sequential(model->modules(), x, 0), ValueError);
  EXPECT_THROW(nn::checkpoint_sequential({nullptr}, x, 1), ValueError);
  EXPECT_THROW(checkpoint_sequential(std::vector<Stage>{Stage()}, x, 1), ValueError);
}

TEST(CheckpointSequential, ASegmentsLastOpIsAnsweredByItsKeptOutput) {
  // A segment's output is the next segment's input, kept anyway, so its
  // recomputation does not run the segment's last op again. Seen here
  // through a stage that breaks the determinism contract on purpose: the
  // scale `c` changes between the forward and the backward pass. exp's
  // derivative reads exp's output, so it shows which value the recomputation
  // used. Loss sum(y^2), y = exp(x * c) with c = 1 forward and 2 after:
  //   kept output:      dL/dx = 2 y * y * 2          = 4 exp(2x)
  //   recomputed (no reuse, the public checkpoint):   4 exp(x) exp(2x) = 4 exp(3x)
  Tensor x = randn({3, 4});
  auto grad = [&](bool sequential) {
    Tensor c = ones({4});
    Stage scaled_exp = [&](const Tensor& h) { return exp(h * c); };
    Stage square = [](const Tensor& h) { return h * h; };
    Tensor xi = x.detach();
    GradientTape tape;
    tape.watch(xi);
    Tensor y = sequential ? checkpoint_sequential({scaled_exp, square}, xi, 2) : square(checkpoint(scaled_exp, xi));
    c.copy_(full({4}, 2.0));
    return tape.gradient(sum(y), {xi})[0];
  };
  auto relative_error = [](const Tensor& got, const Tensor& want) {
    return amax(abs(got - want) / abs(want)).item<double>();
  };
  EXPECT_LT(relative_error(grad(true), exp(x * 2.0) * 4.0), 1e-5);
  EXPECT_LT(relative_error(grad(false), exp(x * 3.0) * 4.0), 1e-5);
}

TEST(CheckpointSequential, LayersWhoseLastOpIsReusedGiveBitwiseEqualGradients) {
  STRATA_REQUIRE_DTYPES(strata::DType::bf16);
  // Fused Linear + ReLU, Linear then Tanh (tanh's derivative reads its
  // output): every segment's last op is answered from its kept output.
  // First order is bitwise; second order sums the recomputation's terms in
  // another order, so it agrees to rounding (f32: within 1e-5 of the
  // largest element).
  auto relus = relu_mlp(9, 16);
  auto tanhs = mlp<nn::Tanh>(5, 16, 7);
  Tensor x = randn({4, 16});
  for (nn::Sequential* model : {relus.get(), tanhs.get()}) {
    std::vector<Tensor> plain = parameter_grads(*model, x, nullptr);
    for (const CheckpointPolicy& p : every_policy()) {
      expect_bitwise(plain, parameter_grads(*model, x, &p), strategy_name(p.strategy));
    }
  }
  {
    // Under autocast the last op is a bf16 linear whose inputs autocast
    // casts: answered all the same, its casts recorded as they would be
    // without checkpointing.
    Autocast amp({.dtype = DType::bf16});
    std::vector<Tensor> plain = parameter_grads(*relus, x, nullptr);
    for (const CheckpointPolicy& p : every_policy()) {
      expect_bitwise(plain, parameter_grads(*relus, x, &p), std::string("autocast, ") + strategy_name(p.strategy));
    }
  }
  Tensor plain = input_second_derivative(*tanhs, x, nullptr);
  const double scale = amax(abs(plain)).item<double>();
  ASSERT_GT(scale, 0.0);
  for (const CheckpointPolicy& p : every_policy()) {
    Tensor c = input_second_derivative(*tanhs, x, &p);
    EXPECT_LT(amax(abs(c - plain)).item<double>(), 1e-5 * scale) << strategy_name(p.strategy);
  }
}

TEST(CheckpointSequential, ARecomputationThatRunsMoreOpsAfterTheLastIsReported) {
  // The first run ends with exp; the recomputation runs exp (answered from
  // the kept output) and then one more op: not the same function.
  int calls = 0;
  Stage changing = [&](const Tensor& h) {
    Tensor y = exp(h);
    return calls++ == 0 ? y : y * 2.0;
  };
  Stage square = [](const Tensor& h) { return h * h; };
  Tensor x = randn({3, 4}).set_requires_grad();
  GradientTape tape;
  Tensor y = checkpoint_sequential({changing, square}, x, 2);
  try {
    tape.gradient(sum(y), {x});
    FAIL() << "a recomputation running more ops than the first run was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deterministic"), std::string::npos) << e.what();
  }
}

// A function whose recomputation returns another shape is named as the
// checkpoint's fault, with both shapes — not as a seed that does not fit
// GradientTape::gradient.
TEST(Checkpoint, ARecomputationOfAnotherShapeIsNamed) {
  int calls = 0;
  auto changing = [&](const Tensor& h) { return calls++ == 0 ? h * 2.0 : sum(h, {0}, true) * 2.0; };
  Tensor x = randn({3, 4}).set_requires_grad();
  Tensor y = checkpoint(changing, x);
  try {
    sum(y).backward();
    FAIL() << "a recomputation of another shape was not reported";
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("checkpoint: output 0 had shape [3, 4] the first time and [1, 4] when recomputed"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find("GradientTape::gradient"), std::string::npos) << what;
  }
  EXPECT_FALSE(x.grad().defined());
}

TEST(CheckpointSequential, ARecomputationThatFailsAfterTheAnsweredOpCanBeRunAgain) {
  // The recomputation takes the kept output when it answers the segment's
  // last op. If the segment then fails, grad() is as before the pass, and a
  // second pass over the retained graph runs the op instead: the plain
  // gradient, d/dx sum(exp(x)^2) = 2 exp(2x).
  int calls = 0;
  Stage flaky = [&](const Tensor& h) {
    Tensor y = exp(h);
    if (calls++ == 1) throw std::runtime_error("the stage failed on its recomputation");
    return y;
  };
  Stage square = [](const Tensor& h) { return h * h; };
  Tensor x = randn({3, 4}).set_requires_grad();
  Tensor y = sum(checkpoint_sequential({flaky, square}, x, 2));
  EXPECT_ANY_THROW(y.backward({}, {.retain_graph = true}));
  EXPECT_FALSE(x.grad().defined());
  y.backward({}, {.retain_graph = true});
  ASSERT_TRUE(x.grad().defined());
  Tensor want = exp(x.detach() * 2.0) * 2.0;
  EXPECT_LT(amax(abs(x.grad() - want) / want).item<double>(), 1e-5);
  EXPECT_EQ(calls, 3);
}

TEST(SelectiveCheckpoint, ReusesKeptOutputsAndCatchesInPlaceWrites) {
  Tensor w = randn({8, 8});
  w.set_requires_grad(true);
  Tensor x = randn({4, 8});
  auto fn = [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{tanh(matmul(in[0], w)) * 2.0}; };
  Tensor plain, kept;
  {
    GradientTape tape;
    plain = tape.gradient(sum(fn({x})[0]), {w})[0];
  }
  {
    GradientTape tape;
    kept = tape.gradient(sum(checkpoint(fn, {x}, {"matmul"})[0]), {w})[0];
  }
  EXPECT_EQ(plain.to_vector<double>(), kept.to_vector<double>());

  // An in-place write to a kept output would make the recomputation use the
  // written value: refused, naming the op.
  auto writes = [&](const std::vector<Tensor>& in) {
    Tensor h = matmul(in[0], w);
    Tensor y = tanh(h);
    h.copy_(zeros_like(h));
    return std::vector<Tensor>{y};
  };
  GradientTape tape;
  Tensor y = checkpoint(writes, {x}, {"matmul"})[0];
  try {
    tape.gradient(sum(y), {w});
    FAIL() << "in-place write to a kept output not caught";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'matmul'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("modified in place"), std::string::npos) << e.what();
  }
}

TEST(SelectiveCheckpoint, ANondeterministicFunctionIsReported) {
  Tensor w = randn({8, 8});
  w.set_requires_grad(true);
  Tensor x = randn({4, 8});
  int calls = 0;
  auto fn = [&](const std::vector<Tensor>& in) {
    Tensor h = matmul(in[0], w);
    if (calls++ == 0) h = matmul(h, w);  // an extra matmul the first time only
    return std::vector<Tensor>{tanh(h)};
  };
  GradientTape tape;
  Tensor y = checkpoint(fn, {x}, {"matmul"})[0];
  try {
    tape.gradient(sum(y), {w});
    FAIL() << "a different op sequence on recomputation was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deterministic"), std::string::npos) << e.what();
  }
}

TEST(MemoryScope, MeasuresPeakAndCurrentAndNests) {
  const Device dev = runtime().default_device();  // where zeros() allocates
  MemoryScope outer(dev);
  Tensor a = zeros({1024, 256});  // 1 MiB
  {
    MemoryScope inner(dev);
    { Tensor b = zeros({1024, 512}); }  // 2 MiB, freed
    EXPECT_GE(inner.peak_bytes(), 2u << 20);
    EXPECT_LT(inner.current_bytes(), int64_t{1} << 20);
  }
  EXPECT_GE(outer.peak_bytes(), 3u << 20) << "the inner scope hid its peak from the outer one";
  EXPECT_GE(outer.current_bytes(), int64_t{1} << 20);
  EXPECT_GE(runtime().memory_stats(dev).peak_allocated_bytes, runtime().memory_stats(dev).allocated_bytes);
}

TEST(BackwardHooks, FireInRegistrationOrderWithTheOutputGradient) {
  auto model = gelu_mlp(2, 8);
  nn::Module& last = (*model)[3];  // the second GELU
  nn::BackwardHookManager hooks;
  std::vector<std::string> order;
  Tensor seen;
  hooks.add(last, [&](nn::Module& layer, const Tensor& g) {
    order.push_back("first:" + layer.name());
    seen = g;
  });
  hooks.add((*model)[0], [&](nn::Module&, const Tensor&) { order.push_back("layer0"); });
  hooks.add(last, [&](nn::Module&, const Tensor&) { order.push_back("second"); });
  Tensor x = randn({2, 8});
  Tensor y = (*model)(x);
  sum(y * 3.0).backward();
  EXPECT_EQ(order, (std::vector<std::string>{"first:GELU", "second", "layer0"}));
  ASSERT_TRUE(seen.defined());
  EXPECT_EQ(seen.to_vector<double>(), std::vector<double>(16, 3.0));
  EXPECT_EQ(hooks.size(), 3u);
  EXPECT_EQ(hooks.size(last), 2u);
}

TEST(BackwardHooks, RemoveByHandleOrByLayer) {
  auto model = gelu_mlp(1, 4);
  nn::BackwardHookManager hooks;
  int a = 0, b = 0, c = 0;
  nn::HookHandle ha = hooks.add((*model)[0], [&](nn::Module&, const Tensor&) { ++a; });
  hooks.add((*model)[0], [&](nn::Module&, const Tensor&) { ++b; });
  hooks.add((*model)[1], [&](nn::Module&, const Tensor&) { ++c; });
  auto run = [&] { sum((*model)(randn({2, 4}))).backward(); };
  run();
  EXPECT_EQ(std::make_tuple(a, b, c), std::make_tuple(1, 1, 1));
  EXPECT_TRUE(hooks.remove(ha));
  EXPECT_FALSE(hooks.remove(ha)) << "a handle removes once";
  run();
  EXPECT_EQ(std::make_tuple(a, b, c), std::make_tuple(1, 2, 2));
  EXPECT_EQ(hooks.remove((*model)[0]), 1u);
  run();
  EXPECT_EQ(std::make_tuple(a, b, c), std::make_tuple(1, 2, 3));
  nn::BackwardHookManager other;
  EXPECT_FALSE(other.remove(nn::HookHandle{ha.id + 2})) << "another manager's hook";
  hooks.clear();
  run();
  EXPECT_EQ(c, 3);
  EXPECT_THROW(hooks.add((*model)[0], nn::BackwardHook()), ValueError);
}

TEST(BackwardHooks, FireOnceForCheckpointedLayersAndNotWithoutRecording) {
  auto model = gelu_mlp(4, 8);
  nn::BackwardHookManager hooks;
  std::vector<int> fired(model->size(), 0);
  for (size_t i = 0; i < model->size(); ++i) {
    hooks.add((*model)[i], [&fired, i](nn::Module&, const Tensor&) { ++fired[i]; });
  }
  {
    CheckpointContext scope(CheckpointPolicy::sqrt_n());
    sum((*model)(randn({2, 8}))).backward();
  }
  EXPECT_EQ(fired, std::vector<int>(model->size(), 1));
  {
    NoGradGuard no_grad;
    (*model)(randn({2, 8}));
  }
  EXPECT_EQ(fired, std::vector<int>(model->size(), 1));
}

TEST(BackwardHooks, RegistrationIsThreadSafe) {
  auto model = gelu_mlp(2, 8);
  nn::BackwardHookManager hooks;
  std::atomic<int> calls{0};
  hooks.add((*model)[0], [&](nn::Module&, const Tensor&) { ++calls; });
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      nn::BackwardHookManager mine;
      while (!stop) {
        nn::HookHandle h = mine.add((*model)[static_cast<size_t>(t % 4)], [](nn::Module&, const Tensor&) {});
        mine.remove(h);
      }
    });
  }
  for (int i = 0; i < 50; ++i) sum((*model)(randn({2, 8}))).backward();
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(calls.load(), 50);
  EXPECT_EQ(hooks.size(), 1u);
}

TEST(BackwardHooks, ADestroyedLayerTakesItsHooksAlong) {
  nn::BackwardHookManager hooks;
  {
    nn::Linear layer(2, 2);
    hooks.add(layer, [](nn::Module&, const Tensor&) {});
    EXPECT_EQ(hooks.size(), 1u);
  }
  EXPECT_EQ(hooks.size(), 0u);
}

TEST(GradientAccumulator, MicroBatchesMakeTheFullBatchGradientAndStepOnlyAtTheBoundary) {
  auto run = [](int64_t micro) {
    manual_seed(21);
    nn::Sequential model{std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::Tanh>(),
                         std::make_shared<nn::Linear>(8, 3)};
    nn::SGD opt(model.parameters(), {.lr = 0.1});
    nn::GradientAccumulator acc(opt, 32 / micro);
    manual_seed(22);
    Tensor x = randn({32, 6});
    std::vector<int64_t> labels(32);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 3);
    Tensor y = from_data(labels, {32}, {.dtype = DType::i64});
    int steps = 0;
    for (int64_t b = 0; b < 32; b += micro) {
      CheckpointContext ckpt(CheckpointPolicy::every_n(1));  // composes with checkpointing
      bool stepped = acc.backward(nn::functional::cross_entropy(model(x.slice(0, b, b + micro)), y.slice(0, b, b + micro)));
      EXPECT_EQ(stepped, b + micro == 32) << "stepped after micro-batch ending at " << b + micro;
      steps += stepped ? 1 : 0;
    }
    EXPECT_EQ(steps, 1);
    EXPECT_EQ(opt.step_count(), 1);
    EXPECT_EQ(acc.pending(), 0);
    return model.parameters();
  };
  std::vector<Tensor> full = run(32);
  std::vector<Tensor> micro = run(8);
  ASSERT_EQ(full.size(), micro.size());
  for (size_t k = 0; k < full.size(); ++k) {
    EXPECT_LT(amax(abs(full[k] - micro[k])).item<double>(), 1e-6) << "parameter " << k;
  }
}

TEST(GradientAccumulator, FlushStepsAShortGroupAndScalerSkipsAnOverflowingGroup) {
  Tensor w = full({2}, 1.0, {.requires_grad = true});
  nn::SGD opt({w}, {.lr = 1.0});
  nn::GradientAccumulator acc(opt, 4);
  EXPECT_FALSE(acc.flush()) << "nothing accumulated";
  acc.backward(sum(w * 2.0));
  acc.backward(sum(w * 4.0));
  EXPECT_EQ(acc.pending(), 2);
  EXPECT_TRUE(acc.flush());
  // mean of the two micro-batch gradients (2 and 4) is 3: w = 1 - 3
  EXPECT_EQ(w.to_vector<double>(), std::vector<double>(2, -2.0));
  EXPECT_EQ(acc.step_count(), 1);

  GradScaler scaler({.init_scale = 8.0});
  nn::GradientAccumulator scaled(opt, 2);
  scaled.backward(sum(w), scaler);
  Tensor inf = full({}, std::numeric_limits<double>::infinity());
  EXPECT_TRUE(scaled.backward(sum(w * inf), scaler));
  EXPECT_EQ(w.to_vector<double>(), std::vector<double>(2, -2.0)) << "an overflow in one micro-batch skips the step";
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_EQ(scaler.get_scale(), 4.0);
  EXPECT_THROW(nn::GradientAccumulator(opt, 0), ValueError);
  EXPECT_THROW(scaled.backward(w), ShapeError);
}

TEST(AmpUnscaleKernel, OnePassForEveryFloatingDtypeAndLargeTensors) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Tensor g = full({70000}, 4.0, {.dtype = dt});
    Tensor inv = full({}, 0.25);
    auto [y, found] = amp_unscale(g, inv);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(amax(abs(cast(y, DType::f64) - 1.0)).item<double>(), 0.0) << dtype_name(dt);
    EXPECT_EQ(found.item<double>(), 0.0) << dtype_name(dt);
    std::vector<double> v(70000, 1.0);
    v[69999] = std::numeric_limits<double>::quiet_NaN();
    auto [y2, found2] = amp_unscale(from_data(v, {70000}, {.dtype = dt}), inv);
    EXPECT_EQ(found2.item<double>(), 1.0) << dtype_name(dt) << ": NaN at the end of a large tensor";
  }
  EXPECT_EQ(runtime().fallback_count(), 0u);
}

}  // namespace
