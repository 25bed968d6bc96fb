// functional_call_test.cpp — nn::functional_call: a module run with
// substituted parameters and buffers (by name or by position), the module's
// own tensors put back afterwards — also when forward() throws or the
// arguments are refused —, gradients flowing into the substitutes, and tied
// parameters replaced wherever they appear.
#include <gtest/gtest.h>

#include <memory>
#include <strata/strata.hpp>
#include <vector>

#include "nn_test_util.hpp"

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using strata_test::real_dtype;
using namespace nn_test;

/// 3 -> 4 -> 2 with ReLU, in strata_test::real_dtype().
struct Mlp {
  nn::Sequential model;
  Mlp() {
    manual_seed(3);
    model.emplace_back<nn::Linear>(3, 4);
    model.emplace_back<nn::ReLU>();
    model.emplace_back<nn::Linear>(4, 2);
    model.to(real_dtype());
  }
};

std::vector<const TensorImpl*> identities(const nn::Module& m) {
  std::vector<const TensorImpl*> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.impl());
  return out;
}

Tensor by_hand(const std::vector<Tensor>& w, const Tensor& x) {
  Tensor h = relu(nn::functional::linear(x, w[0], w[1]));
  return nn::functional::linear(h, w[2], w[3]);
}

TEST(FunctionalCall, RunsWithTheGivenParametersAndPutsTheModulesOwnBack) {
  Mlp m;
  const std::vector<const TensorImpl*> own = identities(m.model);
  const std::vector<Tensor> own_values = m.model.parameters();
  Tensor x = random_real({5, 3}, 1);
  std::vector<Tensor> replacement;
  uint32_t seed = 10;
  for (const Tensor& p : own_values) replacement.push_back(random_real(p.sizes(), seed++).set_requires_grad());
  Tensor out = nn::functional_call(m.model, replacement, x);
  expect_values(out, by_hand(replacement, x).to_vector<double>(), 0.0, "with the replacements");
  EXPECT_EQ(identities(m.model), own);
  expect_values(m.model(x), by_hand(own_values, x).to_vector<double>(), 0.0, "afterwards, with its own");
  // The output depends on the replacements, not on the module's own.
  sum(square(out)).backward();
  for (size_t i = 0; i < replacement.size(); ++i) {
    EXPECT_TRUE(replacement[i].grad().defined()) << i;
    EXPECT_FALSE(own_values[i].grad().defined()) << i;
  }
}

TEST(FunctionalCall, ByNameReplacesOnlyTheNamedOnes) {
  Mlp m;
  Tensor x = random_real({5, 3}, 2);
  Tensor new_bias = random_real({2}, 3);
  Tensor out = nn::functional_call(m.model, nn::NamedTensors{{"2.bias", new_bias}}, x);
  std::vector<Tensor> expected = m.model.parameters();
  expected[3] = new_bias;
  expect_values(out, by_hand(expected, x).to_vector<double>(), 0.0);
}

TEST(FunctionalCall, GradientsReachWhatTheReplacementsWereComputedFrom) {
  // θ' = θ − 0.5·θ² elementwise: d out / dθ = (1 − θ)·d out / dθ'.
  Mlp m;
  Tensor x = random_real({4, 3}, 4);
  std::vector<Tensor> theta = m.model.parameters();
  std::vector<Tensor> adapted;
  for (const Tensor& t : theta) adapted.push_back(t - 0.5 * square(t));
  sum(nn::functional_call(m.model, adapted, x)).backward();
  GradientTape tape;
  std::vector<Tensor> leaves;
  for (const Tensor& a : adapted) leaves.push_back(a.detach());
  for (const Tensor& l : leaves) tape.watch(l);
  std::vector<Tensor> d_adapted = tape.gradient(sum(by_hand(leaves, x)), leaves);
  for (size_t i = 0; i < theta.size(); ++i) {
    expect_values(theta[i].grad(), ((1.0 - theta[i].detach()) * d_adapted[i]).to_vector<double>(), 1e-14);
  }
}

TEST(FunctionalCall, TheModulesOwnTensorsComeBackWhenForwardThrows) {
  Mlp m;
  const std::vector<const TensorImpl*> own = identities(m.model);
  std::vector<Tensor> replacement;
  for (const Tensor& p : m.model.parameters()) replacement.push_back(zeros_like(p.detach()));
  Tensor wrong = random_real({5, 7}, 5);  // 7 features for a 3-feature layer
  EXPECT_THROW(nn::functional_call(m.model, replacement, wrong), ShapeError);
  EXPECT_EQ(identities(m.model), own);
  Tensor x = random_real({2, 3}, 6);
  expect_values(m.model(x), by_hand(m.model.parameters(), x).to_vector<double>(), 0.0);
}

TEST(FunctionalCall, BadArgumentsAreRefusedBeforeAnythingIsReplaced) {
  Mlp m;
  const std::vector<const TensorImpl*> own = identities(m.model);
  Tensor x = random_real({2, 3}, 7);
  Tensor w = random_real({4, 3}, 8);
  const std::string dt(dtype_name(real_dtype()));
  expect_error<ValueError>([&] { nn::functional_call(m.model, nn::NamedTensors{{"1.weight", w}}, x); },
                           {"functional_call(Sequential)", "no parameter or buffer named '1.weight'", "'0.weight'"});
  expect_error<ValueError>(
      [&] { nn::functional_call(m.model, nn::NamedTensors{{"0.weight", w}, {"0.weight", w}}, x); },
      {"functional_call(Sequential)", "'0.weight' is given twice"});
  expect_error<ValueError>([&] { nn::functional_call(m.model, nn::NamedTensors{{"0.weight", Tensor()}}, x); },
                           {"the tensor for '0.weight' is undefined"});
  expect_error<ShapeError>(
      [&] { nn::functional_call(m.model, nn::NamedTensors{{"0.bias", w}}, x); },
      {"functional_call(Sequential): '0.bias' is " + dt + "[4] on", "the replacement is " + dt + "[4, 3]"});
  expect_error<DTypeError>([&] { nn::functional_call(m.model, nn::NamedTensors{{"0.weight", w.to(DType::f16)}}, x); },
                           {"'0.weight' is " + dt + "[4, 3]", "the replacement is f16[4, 3]"});
  expect_error<ValueError>([&] { nn::functional_call(m.model, std::vector<Tensor>{w}, x); },
                           {"functional_call(Sequential): 1 tensors for 4 parameters"});
  std::vector<Tensor> positional = m.model.parameters();
  positional[1] = w;
  expect_error<ShapeError>([&] { nn::functional_call(m.model, positional, x); },
                           {"functional_call(Sequential): '0.bias' (params[1]) is " + dt + "[4] on",
                            "the replacement is " + dt + "[4, 3]"});
  positional[1] = Tensor();
  expect_error<ValueError>([&] { nn::functional_call(m.model, positional, x); },
                           {"the tensor for '0.bias' (params[1]) is undefined"});
  EXPECT_EQ(identities(m.model), own);
}

/// One weight registered under two names, used twice; and a buffer.
class Tied : public nn::Module {
 public:
  Tied() {
    a = random_real({2, 2}, 9);
    b = a;
    register_parameter("a", &a);
    register_parameter("b", &b);
    scale = make_real({3.0}, {1});
    register_buffer("scale", &scale);
  }
  Tensor forward(const Tensor& x) override { return matmul(matmul(x, a), b) * scale; }
  std::string name() const override { return "Tied"; }
  Tensor a, b, scale;
};

TEST(FunctionalCall, TiedParametersAreReplacedEverywhereAndBuffersByName) {
  Tied t;
  ASSERT_EQ(t.named_parameters().size(), 1u);  // "a" only: b is the same tensor
  Tensor x = random_real({3, 2}, 10);
  Tensor w = random_real({2, 2}, 11);
  Tensor out = nn::functional_call(t, nn::NamedTensors{{"a", w}, {"scale", make_real({0.5}, {1})}}, x);
  expect_values(out, (matmul(matmul(x, w), w) * 0.5).to_vector<double>(), 1e-15);
  EXPECT_EQ(t.a.impl(), t.b.impl());
  expect_values(t.scale, {3.0}, 0.0);
  // A child registered twice (shared layer): replaced in both places.
  nn::Sequential twice;
  auto layer = std::make_shared<nn::Linear>(2, 2);
  twice.push_back(layer);
  twice.push_back(layer);
  twice.to(real_dtype());
  ASSERT_EQ(twice.parameters().size(), 2u);
  Tensor bias = random_real({2}, 12);
  Tensor got = nn::functional_call(twice, std::vector<Tensor>{w, bias}, x);
  Tensor once = nn::functional::linear(x, w, bias);
  expect_values(got, nn::functional::linear(once, w, bias).to_vector<double>(), 1e-15);
  EXPECT_NE(layer->weight.impl(), w.impl());
}

TEST(FunctionalCall, TheModulesOwnTensorsCanBeSwappedAround) {
  // Layer a (registered twice) gets layer b's parameters and b gets a's:
  // every member is matched to its replacement before any is written, so
  // a's members, visited twice, are not matched again after the swap.
  nn::Sequential net;
  auto a = std::make_shared<nn::Linear>(2, 2);
  auto b = std::make_shared<nn::Linear>(2, 2);
  net.push_back(a);
  net.push_back(b);
  net.push_back(a);
  net.to(real_dtype());
  ASSERT_EQ(net.parameters().size(), 4u);
  auto apply = [](const Tensor& in, const std::shared_ptr<nn::Linear>& layer) {
    return nn::functional::linear(in, layer->weight, layer->bias);
  };
  Tensor x = random_real({3, 2}, 13);
  Tensor got = nn::functional_call(net, {b->weight, b->bias, a->weight, a->bias}, x);
  expect_values(got, apply(apply(apply(x, b), a), b).to_vector<double>(), 1e-15);
  expect_values(net(x), apply(apply(apply(x, a), b), a).to_vector<double>(), 1e-15);
}

}  // namespace
