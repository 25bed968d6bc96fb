// checkpoint_amp_test.cpp — activation checkpointing (gradients equal to an
// uncheckpointed run, bitwise on CPU, with captured weights, higher order,
// nesting, dropout, autocast, forward mode; failures leave no state) and
// mixed precision (autocast policies, GradScaler's schedule, amp_unscale).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <strata/strata.hpp>

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using strata_test::real_dtype;

/// A tanh MLP whose weights are captured (not passed as inputs).
struct Mlp {
  std::vector<Tensor> w;
  explicit Mlp(int layers, int64_t width = 16, DType dtype = DType::f32) {
    manual_seed(11);
    for (int i = 0; i < layers; ++i) {
      w.push_back(randn({width, width}, {.dtype = dtype}) * (1.0 / std::sqrt(static_cast<double>(width))));
      w.back().set_requires_grad(true);
    }
  }
  Tensor layer(int i, const Tensor& x) const { return tanh(matmul(x, w[static_cast<size_t>(i)])); }
  Tensor plain(const Tensor& x) const {
    Tensor h = x;
    for (size_t i = 0; i < w.size(); ++i) h = layer(static_cast<int>(i), h);
    return h;
  }
  /// Two layers per checkpointed segment.
  Tensor checkpointed(const Tensor& x) const {
    Tensor h = x;
    for (size_t i = 0; i < w.size(); i += 2) {
      h = checkpoint(
          [this, i](const Tensor& in) {
            Tensor y = layer(static_cast<int>(i), in);
            return i + 1 < w.size() ? layer(static_cast<int>(i + 1), y) : y;
          },
          h);
    }
    return h;
  }
};

void expect_bitwise(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_TRUE(a[k].defined() && b[k].defined()) << k;
    EXPECT_EQ(a[k].to_vector<double>(), b[k].to_vector<double>()) << "gradient " << k;
  }
}

TEST(Checkpoint, GradientsOfCapturedWeightsAreBitwiseEqual) {
  Mlp m(6);
  Tensor x = randn({8, 16});
  std::vector<Tensor> plain, ckpt;
  {
    GradientTape tape;
    plain = tape.gradient(sum(m.plain(x)), m.w);
  }
  {
    GradientTape tape;
    ckpt = tape.gradient(sum(m.checkpointed(x)), m.w);
  }
  expect_bitwise(plain, ckpt);
}

TEST(Checkpoint, KeepsOnlySegmentInputsForBackward) {
  Mlp m(8, 64);
  Tensor x = randn({256, 64});  // activations dominate, as in training
  uint64_t plain_bytes, ckpt_bytes;
  {
    GradientTape tape;
    Tensor y = m.plain(x);
    plain_bytes = tape.saved_bytes();
  }
  {
    GradientTape tape;
    Tensor y = m.checkpointed(x);
    ckpt_bytes = tape.saved_bytes();
  }
  // Plain: each layer's matmul keeps x and W, its tanh its output (not
  // x@W: tanh's VJP reads only the output). Checkpointed: each segment of two
  // layers keeps its input and the two weights (not its output, which it
  // recomputes). The tape counts a tensor once per node that keeps it.
  const uint64_t activation = 256 * 64 * 4, weight = 64 * 64 * 4;
  EXPECT_EQ(plain_bytes, 8 * (2 * activation + weight));
  EXPECT_EQ(ckpt_bytes, 4 * (activation + 2 * weight));
  EXPECT_LT(ckpt_bytes, plain_bytes);
}

TEST(Checkpoint, BackwardAccumulatesIntoLeaves) {
  Mlp m(4);
  Tensor x = randn({4, 16});
  sum(m.plain(x)).backward();
  std::vector<Tensor> plain;
  for (Tensor& w : m.w) {
    plain.push_back(w.grad());
    w.zero_grad();
  }
  sum(m.checkpointed(x)).backward();
  std::vector<Tensor> ckpt;
  for (const Tensor& w : m.w) ckpt.push_back(w.grad());
  expect_bitwise(plain, ckpt);
}

TEST(Checkpoint, HigherOrderGradientsMatch) {
  Mlp m(4, 8, real_dtype());
  Tensor x = randn({3, 8}, {.dtype = real_dtype()});
  Tensor v = randn({3, 8}, {.dtype = real_dtype()});
  Fn plain = [&](const Tensor& t) { return sum(m.plain(t)); };
  Fn ckpt = [&](const Tensor& t) { return sum(m.checkpointed(t)); };
  expect_bitwise({grad(plain)(x)}, {grad(ckpt)(x)});
  // Second order through the recomputation: the same values up to the
  // order of a few additions (the recomputed graph accumulates in another
  // order), so to 1e-13 relative in f64 (f32's tolerance in f32) rather
  // than bitwise.
  std::vector<double> a = hvp(plain, x, v, HvpMode::reverse_over_reverse).to_vector<double>();
  std::vector<double> b = hvp(ckpt, x, v, HvpMode::reverse_over_reverse).to_vector<double>();
  const double rel = real_dtype() == DType::f64 ? 1e-13 : strata_test::tolerance(real_dtype()).rtol;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], rel * (1.0 + std::fabs(a[i]))) << i;
  Tensor fa = hvp(plain, x, v);  // forward-over-reverse: fn runs directly under forward mode
  Tensor fb = hvp(ckpt, x, v);
  EXPECT_EQ(fa.to_vector<double>(), fb.to_vector<double>());
}

TEST(Checkpoint, NestedCheckpointsMatch) {
  Mlp m(4);
  Tensor x = randn({4, 16});
  auto nested = [&](const Tensor& in) {
    return checkpoint(
        [&](const Tensor& a) {
          Tensor h = checkpoint([&](const Tensor& b) { return m.layer(1, m.layer(0, b)); }, a);
          return m.layer(3, checkpoint([&](const Tensor& b) { return m.layer(2, b); }, h));
        },
        in);
  };
  GradientTape t1;
  std::vector<Tensor> plain = t1.gradient(sum(m.plain(x)), m.w);
  GradientTape t2;
  std::vector<Tensor> ckpt = t2.gradient(sum(nested(x)), m.w);
  expect_bitwise(plain, ckpt);
}

TEST(Checkpoint, DropoutReplaysTheSameMask) {
  Mlp m(2);
  Tensor x = randn({4, 16});
  auto dropout = [](const Tensor& h) { return h * cast(gt(rand(h.sizes()), full({}, 0.5)), DType::f32) * 2.0; };
  manual_seed(99);
  GradientTape t1;
  std::vector<Tensor> plain = t1.gradient(sum(m.layer(1, dropout(m.layer(0, x)))), m.w);
  manual_seed(99);
  GradientTape t2;
  Tensor y = checkpoint([&](const Tensor& in) { return m.layer(1, dropout(m.layer(0, in))); }, x);
  (void)rand({100});  // draws between forward and backward must not matter
  std::vector<Tensor> ckpt = t2.gradient(sum(y), m.w);
  expect_bitwise(plain, ckpt);
}

TEST(Checkpoint, UnderAutocastGradientsMatch) {
  STRATA_REQUIRE_DTYPES(strata::DType::bf16);
  Mlp m(4);
  Tensor x = randn({4, 16});
  std::vector<Tensor> plain, ckpt;
  {
    GradientTape tape;
    Tensor loss;
    {
      Autocast ac({.dtype = DType::bf16});
      loss = sum(cast(m.plain(x), DType::f32));
    }
    plain = tape.gradient(loss, m.w);
  }
  {
    GradientTape tape;
    Tensor loss;
    {
      Autocast ac({.dtype = DType::bf16});
      loss = sum(cast(m.checkpointed(x), DType::f32));
    }
    ckpt = tape.gradient(loss, m.w);  // recomputed in bf16 although backward runs outside the scope
  }
  EXPECT_EQ(plain[0].dtype(), DType::f32);
  expect_bitwise(plain, ckpt);
}

TEST(Checkpoint, ForwardModeMatches) {
  Mlp m(2, 8, real_dtype());
  Tensor x = randn({2, 8}, {.dtype = real_dtype()});
  Tensor v = randn({2, 8}, {.dtype = real_dtype()});
  auto [y1, t1] = jvp([&](const Tensor& t) { return m.plain(t); }, x, v);
  auto [y2, t2] = jvp([&](const Tensor& t) { return m.checkpointed(t); }, x, v);
  EXPECT_EQ(t1.to_vector<double>(), t2.to_vector<double>());
}

TEST(Checkpoint, AThrowingFunctionLeavesNoState) {
  Mlp m(2);
  Tensor x = randn({2, 16});
  GradientTape tape;
  EXPECT_THROW(checkpoint(
                   [&](const Tensor& in) -> Tensor {
                     Tensor h = m.layer(0, in);
                     throw ValueError("boom");
                   },
                   x),
               ValueError);
  EXPECT_EQ(tape.saved_bytes(), 0u);
  EXPECT_TRUE(is_grad_enabled());
  // Recording, tracing and checkpointing still work afterwards.
  Tensor y = checkpoint([&](const Tensor& in) { return m.layer(0, in); }, x);
  EXPECT_EQ(tape.gradient(sum(y), {m.w[0]})[0].sizes(), (Shape{16, 16}));
  Graph g = trace([](const std::vector<Tensor>& in) { return std::vector<Tensor>{exp(in[0])}; }, {x});
  EXPECT_EQ(g.nodes.size(), 1u);
}

// --- mixed precision ------------------------------------------------------------

TEST(Autocast, AppliesTheOpPolicies) {
  STRATA_REQUIRE_DTYPES(strata::DType::bf16);
  Tensor a = randn({4, 4});
  Tensor b = randn({4, 4});
  {
    Autocast ac({.dtype = DType::bf16});
    EXPECT_TRUE(autocast_enabled());
    Tensor c = matmul(a, b);
    EXPECT_EQ(c.dtype(), DType::bf16);        // lower_precision
    EXPECT_EQ(exp(c).dtype(), DType::f32);    // fp32
    EXPECT_EQ((c + a).dtype(), DType::f32);   // promote: widest
    EXPECT_EQ(tanh(c).dtype(), DType::bf16);  // not listed: unchanged
    {
      Autocast off({.enabled = false});
      EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
    }
    EXPECT_EQ(matmul(a, b).dtype(), DType::bf16);
  }
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
}

TEST(Autocast, ParametersGetGradientsInTheirOwnDtype) {
  Tensor w = randn({4, 4}, {.requires_grad = true});
  Tensor x = randn({2, 4});
  {
    Autocast ac({.dtype = DType::f16});
    sum(matmul(x, w)).backward();
  }
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  // The f16 result is close to the f32 one.
  std::vector<float> g = w.grad().to_vector<float>();
  std::vector<float> xs = sum(x, {0}).to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], xs[i / 4], 1e-2);
}

/// How many nodes of `op` the recorded history of `t` holds.
size_t count_nodes(const Tensor& t, const std::string& op) {
  const Graph g = recorded_graph({t});
  return static_cast<size_t>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const GraphNode& n) { return n.op == op; }));
}

// Inside one autocast region a parameter is cast once, whatever reads it.
TEST(Autocast, CastsAParameterOncePerRegion) {
  STRATA_REQUIRE_DTYPES(strata::DType::bf16);
  Tensor w = randn({4, 4}, {.requires_grad = true});
  Tensor x = randn({2, 4});
  Tensor y;
  {
    Autocast ac({.dtype = DType::bf16});
    y = matmul(x, w) + matmul(x * 2.0, w) + linear(x, w, zeros({4}));
  }
  EXPECT_EQ(count_nodes(y, "cast"), 1u);  // x has no history: its casts are not recorded
  sum(y).backward();
  // Every use sends its gradient through the one cast: d/dw[i][j] of the
  // two matmuls is (1 + 2)·Σₙ x[n][i], of the linear (x wᵀ) Σₙ x[n][j].
  std::vector<float> g = w.grad().to_vector<float>();
  std::vector<float> xs = sum(x, {0}).to_vector<float>();
  for (size_t k = 0; k < g.size(); ++k) {
    const float expected = 3.0f * xs[k / 4] + xs[k % 4];
    EXPECT_NEAR(g[k], expected, 0.05f * (1.0f + std::fabs(expected))) << k;
  }
  // A new region casts afresh.
  Tensor z;
  {
    Autocast ac({.dtype = DType::bf16});
    z = matmul(x, w);
  }
  EXPECT_EQ(count_nodes(z, "cast"), 1u);
  auto cast_id = [](const Tensor& t) {
    for (const GraphNode& n : recorded_graph({t}).nodes) {
      if (n.op == "cast") return n.id;
    }
    return uint64_t{0};
  };
  EXPECT_NE(cast_id(y), cast_id(z));
}

TEST(Autocast, AParameterWrittenInPlaceIsCastAgain) {
  STRATA_REQUIRE_DTYPES(strata::DType::bf16);
  Tensor w = ones({2, 2}, {.requires_grad = true});
  Tensor x = ones({1, 2});
  Autocast ac({.dtype = DType::bf16});
  EXPECT_EQ(matmul(x, w).to_vector<float>(), (std::vector<float>{2, 2}));
  {
    NoGradGuard no_grad;
    w.copy_(full({2, 2}, 3.0));
  }
  EXPECT_EQ(matmul(x, w).to_vector<float>(), (std::vector<float>{6, 6}));
}

TEST(Autocast, BackwardInsideTheRegionTwiceAccumulates) {
  STRATA_REQUIRE_DTYPES(strata::DType::bf16);
  // The cast's node is freed by the first backward: the second use casts again.
  Tensor w = ones({2, 2}, {.requires_grad = true});
  Tensor x = ones({1, 2});
  Autocast ac({.dtype = DType::bf16});
  for (int k = 0; k < 2; ++k) sum(matmul(x, w)).backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
}

TEST(Autocast, ATapeStartedInsideTheRegionSeesItsOwnCast) {
  STRATA_REQUIRE_DTYPES(strata::DType::bf16);
  Tensor w = full({2, 2}, 0.5, {.requires_grad = true});
  Tensor x = ones({1, 2});
  Autocast ac({.dtype = DType::bf16});
  Tensor first = matmul(x, w);  // cast recorded on the implicit level only
  GradientTape tape;
  Tensor second = matmul(x, w) * matmul(x, w);
  std::vector<Tensor> g = tape.gradient(sum(second), {w});
  // d/dw sum((x w)^2) = 2 xᵀ (x w) = 2 * 1 * 1 = 2 everywhere.
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{2, 2, 2, 2}));
  EXPECT_EQ(count_nodes(second, "cast"), 1u);
}

// The defaults are read off the op table (each OpDef names its category);
// these are the lists docs/amp.md documents.
TEST(Autocast, DefaultPolicyComesFromTheOpTable) {
  AutocastPolicy p = AutocastPolicy::defaults();
  EXPECT_EQ(p.lower_precision, (std::set<std::string>{"linear", "matmul"}));
  EXPECT_EQ(p.fp32, (std::set<std::string>{"amp_unscale", "erf", "exp", "expm1", "gelu", "gelu_backward", "log",
                                            "log1p", "log_softmax", "log_softmax_backward", "mean", "pow", "prod",
                                            "reciprocal", "rsqrt", "softmax", "softmax_backward", "sqrt", "sum"}));
  EXPECT_EQ(p.promote, (std::set<std::string>{"add", "cat", "div", "maximum", "minimum", "mul", "sub", "where"}));
}

TEST(Autocast, PolicyIsDataAndBadDtypesAreRefused) {
  STRATA_REQUIRE_DTYPES(strata::DType::bf16);
  AutocastPolicy saved = autocast_policy();
  AutocastPolicy p = AutocastPolicy::defaults();
  p.lower_precision.insert("tanh");
  set_autocast_policy(p);
  {
    Autocast ac({.dtype = DType::bf16});
    EXPECT_EQ(tanh(randn({3})).dtype(), DType::bf16);
  }
  set_autocast_policy(saved);
  EXPECT_THROW(Autocast({.dtype = DType::f64}), ValueError);
  EXPECT_THROW(Autocast({.dtype = DType::i32}), ValueError);
}

// On mini:0, the minimal test plugin's device, which stores f32 alone (it
// is loaded here for this: on a machine whose every device stores bf16 and
// f16 the case would otherwise have nothing to test).
TEST(Autocast, ADtypeTheDeviceCannotStoreIsADTypeErrorNamingIt) {
  Config c = Config::builtin_default();
  c.plugin_paths.push_back(STRATA_TEST_PLUGIN_DIR);
  c.prefer = {"cpu"};
  c.log_level = "error";
  runtime().configure(c);
  const Device mini("mini:0");
  for (DType d : {DType::bf16, DType::f16}) {
    try {
      Autocast ac({.dtype = d, .device = mini});
      FAIL() << "mini:0 accepted autocast to " << dtype_name(d);
    } catch (const DTypeError& e) {
      EXPECT_NE(std::string(e.what()).find("mini:0"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string(dtype_name(d))), std::string::npos) << e.what();
    }
    EXPECT_FALSE(autocast_enabled());  // the failed scope changed nothing
  }
}

TEST(Autocast, ConfigurationOverridesTheLists) {
  Config c = Config::from_string(R"({"version": 1, "amp": {"fp32": ["tanh"], "lower_precision": []}})", "amp.json", ".");
  ASSERT_TRUE(c.amp_fp32.has_value());
  EXPECT_EQ(*c.amp_fp32, std::vector<std::string>{"tanh"});
  EXPECT_TRUE(c.amp_lower_precision->empty());
  EXPECT_FALSE(c.amp_promote.has_value());
  try {
    Config::from_string(R"({"version": 1, "amp": {"fp16": []}})", "amp.json", ".");
    FAIL() << "unknown key accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/amp/fp16"), std::string::npos) << e.what();
  }
}

TEST(AmpUnscale, UnscalesAndFlagsNonFiniteValuesInOnePass) {
  STRATA_REQUIRE_DTYPES(strata::DType::bf16);
  Tensor inv = full({}, 0.25);
  auto [y, found] = amp_unscale(from_data(std::vector<float>{4, 8, -2}, {3}), inv);
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, -0.5f}));
  EXPECT_EQ(found.item<float>(), 0.0f);
  float inf = std::numeric_limits<float>::infinity();
  float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(amp_unscale(from_data(std::vector<float>{1, inf}, {2}), inv).second.item<float>(), 1.0f);
  EXPECT_EQ(amp_unscale(from_data(std::vector<float>{nan, 1}, {2}), inv).second.item<float>(), 1.0f);
  EXPECT_EQ(amp_unscale(from_data(std::vector<float>{-inf}, {1}).to(DType::bf16), inv).second.item<float>(), 1.0f);
  EXPECT_THROW(amp_unscale(from_data(std::vector<int64_t>{1}, {1}), inv), DTypeError);
}

TEST(GradScaler, GrowsBacksOffAndSkipsExactlyAsSpecified) {
  GradScaler scaler({.init_scale = 1024.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 3});
  Tensor w = full({2}, 1.0, {.requires_grad = true});
  int steps_run = 0;
  auto step_with = [&](float g0) {
    w.zero_grad();
    // d(scale * sum(w * g))/dw = scale * g
    scaler.scale(sum(w * from_data(std::vector<float>{g0, 1.0f}, {2}))).backward();
    bool ran = scaler.step({w}, [&] { ++steps_run; });
    scaler.update();
    return ran;
  };
  EXPECT_EQ(scaler.scale(full({}, 1.0)).item<float>(), 1024.0f);
  EXPECT_TRUE(step_with(3.0f));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{3.0f, 1.0f}));  // unscaled in place
  EXPECT_TRUE(step_with(3.0f));
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  EXPECT_TRUE(step_with(3.0f));  // third clean step: growth
  EXPECT_EQ(scaler.get_scale(), 2048.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_FALSE(step_with(std::numeric_limits<float>::infinity()));  // skipped, backoff
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  EXPECT_FALSE(step_with(std::numeric_limits<float>::quiet_NaN()));
  EXPECT_EQ(scaler.get_scale(), 512.0);
  EXPECT_EQ(steps_run, 3);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  // State round trip.
  GradScaler other;
  other.load_state_dict(scaler.state_dict());
  EXPECT_EQ(other.get_scale(), 512.0);
  EXPECT_EQ(other.skipped_steps(), 2);
  EXPECT_THROW(other.load_state_dict({{"bogus", full({}, 1.0)}}), ValueError);
}

TEST(GradScaler, DefaultsAndFloor) {
  GradScaler d;
  EXPECT_EQ(d.get_scale(), 65536.0);
  GradScaler scaler({.init_scale = 4.0, .min_scale = 1.0});
  std::vector<Tensor> g{from_data(std::vector<float>{std::numeric_limits<float>::infinity()}, {1})};
  for (int i = 0; i < 5; ++i) {
    std::vector<Tensor> grads{g[0].clone()};
    scaler.unscale_gradients(grads);
    EXPECT_TRUE(scaler.found_inf());
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), 1.0);  // floored, with a warning logged once
  EXPECT_THROW(GradScaler({.growth_factor = 0.5}), ValueError);
}

}  // namespace
