// module_test.cpp — Module: names, traversal, modes, device/dtype moves,
// state dicts and their errors.
#include <gtest/gtest.h>

#include <strata/strata.hpp>

#include "nn_test_util.hpp"

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using namespace nn_test;

/// A model with a nested Sequential, a head and a buffer.
class Net : public nn::Module {
 public:
  Net() {
    layers =
        register_module("layers", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                                      std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::ReLU>(),
                                      std::make_shared<nn::Linear>(4, 5, false)}));
    head = register_module("head", std::make_shared<nn::Linear>(5, 2));
    counter = zeros({2}, {.dtype = DType::i64});
    register_buffer("counter", &counter);
  }
  Tensor forward(const Tensor& x) override { return head->forward(layers->forward(x)); }
  std::string name() const override { return "Net"; }

  std::shared_ptr<nn::Sequential> layers;
  std::shared_ptr<nn::Linear> head;
  Tensor counter;
};

std::vector<std::string> names_of(const nn::NamedTensors& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}

TEST(Module, DottedNamesInRegistrationOrder) {
  Net net;
  EXPECT_EQ(
      names_of(net.named_parameters()),
      (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight", "head.weight", "head.bias"}));
  EXPECT_EQ(names_of(net.named_buffers()), (std::vector<std::string>{"counter"}));
  EXPECT_EQ(names_of(net.state_dict()), (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight",
                                                                  "head.weight", "head.bias", "counter"}));
  EXPECT_EQ(net.parameters().size(), 5u);
  ASSERT_EQ(net.named_children().size(), 2u);
  EXPECT_EQ(net.named_children()[0].first, "layers");
  EXPECT_EQ(net.children()[1].get(), net.head.get());
  for (const Tensor& p : net.parameters()) {
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(p.is_leaf());
  }
  EXPECT_EQ(net.layers->size(), 3u);
  EXPECT_EQ(net.layers->operator[](0).name(), "Linear");
  EXPECT_THROW((*net.layers)[3], IndexError);
}

TEST(Module, TiedModuleParametersAppearOnce) {
  auto shared = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential seq{shared, std::make_shared<nn::Tanh>(), shared};
  EXPECT_EQ(names_of(seq.named_parameters()), (std::vector<std::string>{"0.weight", "0.bias"}));
}

class Registrar : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  void add(const std::string& name, Tensor* t) { register_parameter(name, t); }
  Tensor a = ones({2});
  Tensor b = ones({2});
  Tensor idx = zeros({2}, {.dtype = DType::i64});
};

TEST(Module, RegistrationErrors) {
  Registrar r;
  r.add("a", &r.a);
  EXPECT_TRUE(r.a.requires_grad());
  expect_error<ValueError>([&] { r.add("a", &r.b); }, {"'a'", "already registered"});
  expect_error<ValueError>([&] { r.add("x.y", &r.b); }, {"x.y", "invalid"});
  expect_error<DTypeError>([&] { r.add("idx", &r.idx); }, {"idx", "i64"});
  EXPECT_THROW(nn::Sequential().push_back(nullptr), ValueError);
}

TEST(Module, TrainEvalPropagates) {
  Net net;
  EXPECT_TRUE(net.is_training());
  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(net.layers->is_training());
  EXPECT_FALSE((*net.layers)[1].is_training());
  net.train();
  EXPECT_TRUE((*net.layers)[2].is_training());
}

TEST(Module, ZeroGradClearsEveryGradient) {
  Net net;
  sum(net(randn({4, 3}))).backward();
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.grad().defined());
  net.zero_grad();
  for (const Tensor& p : net.parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Module, ToDTypeKeepsLeavesThatRequireGrad) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);  // f32 parameters made f64
  manual_seed(1);
  Net net;
  std::vector<float> before = net.head->weight.to_vector<float>();
  net.to(DType::f64);
  for (const auto& [n, p] : net.named_parameters()) {
    EXPECT_EQ(p.dtype(), DType::f64) << n;
    EXPECT_TRUE(p.is_leaf()) << n;
    EXPECT_TRUE(p.requires_grad()) << n;
  }
  EXPECT_EQ(net.counter.dtype(), DType::i64);  // integer buffers are not converted
  std::vector<double> after = net.head->weight.to_vector<double>();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(after[i], static_cast<double>(before[i]));
  // forward and backward work on the converted members
  Tensor y = net(random_real({2, 3}, 3));
  EXPECT_EQ(y.dtype(), DType::f64);
  sum(y).backward();
  EXPECT_TRUE(net.head->weight.grad().defined());
  EXPECT_THROW(net.to(DType::i32), DTypeError);
}

TEST(Module, ToDeviceMovesParametersAndKeepsThemTrainable) {
  Net net;
  Device here = net.head->weight.device();
  const TensorImpl* same = net.head->weight.impl();
  net.to(here);  // already there: nothing changes
  EXPECT_EQ(net.head->weight.impl(), same);
  Device other;
  for (const DeviceInfo& info : runtime().devices()) {
    if (!(info.device == here)) other = info.device;
  }
  if (!other.valid()) GTEST_SKIP() << "only one device (" << here.str() << ") is loaded; no move to test";
  manual_seed(4);
  Net reference;
  net.load_state_dict(reference.state_dict());
  net.to(other);
  for (const auto& [n, p] : net.named_parameters()) {
    EXPECT_EQ(p.device(), other) << n;
    EXPECT_TRUE(p.is_leaf() && p.requires_grad()) << n;
  }
  EXPECT_EQ(net.counter.device(), other);
  // Train one step on each device: same numbers, state stays on the device.
  Tensor x = randn({4, 3});
  nn::SGD on_other(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  nn::SGD on_here(reference.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 2; ++step) {
    sum(square(net(x.to(other)))).backward();
    on_other.step();
    sum(square(reference(x))).backward();
    on_here.step();
  }
  for (const auto& [n, t] : on_other.state_dict()) {
    if (t.dim() > 0) {
      EXPECT_EQ(t.device(), other) << n;
    }
  }
  auto a = net.state_dict(), b = reference.state_dict();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].second.device(), other);
    std::vector<double> va = a[i].second.to_vector<double>(), vb = b[i].second.to_vector<double>();
    for (size_t k = 0; k < va.size(); ++k) EXPECT_NEAR(va[k], vb[k], 1e-5) << a[i].first;
  }
}

TEST(Module, StateDictRoundTripKeepsIdentity) {
  manual_seed(1);
  Net a;
  manual_seed(2);
  Net b;
  b.counter.copy_(make_i64({7, 9}, {2}));
  const TensorImpl* weight_impl = a.head->weight.impl();
  a.load_state_dict(b.state_dict());
  EXPECT_EQ(a.head->weight.impl(), weight_impl);  // loaded in place
  EXPECT_TRUE(a.head->weight.requires_grad());
  EXPECT_TRUE(a.head->weight.is_leaf());
  auto sa = a.state_dict();
  auto sb = b.state_dict();
  for (size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].second.to_vector<double>(), sb[i].second.to_vector<double>()) << sa[i].first;
  }
  Tensor x = randn({3, 3});
  EXPECT_EQ(a(x).to_vector<float>(), b(x).to_vector<float>());
  // The state dict shares storage with the module.
  sb[0].second.copy_(zeros({4, 3}));
  EXPECT_EQ(b.layers->operator[](0).named_parameters()[0].second.to_vector<float>(), std::vector<float>(12, 0.0f));
}

TEST(Module, LoadStateDictMismatchesAreNamedAndChangeNothing) {
  manual_seed(3);
  Net net;
  std::vector<float> first = net.layers->named_parameters()[0].second.to_vector<float>();
  auto good = [] {
    Net other;
    return other.state_dict();
  };

  nn::NamedTensors wrong_shape = good();
  wrong_shape[3].second = zeros({2, 6});  // head.weight is [2, 5]
  expect_error<ShapeError>([&] { net.load_state_dict(wrong_shape); }, {"head.weight", "[2, 5]", "[2, 6]"});

  nn::NamedTensors wrong_dtype = good();
  wrong_dtype[4].second = zeros({2}, {.dtype = DType::f16});
  expect_error<DTypeError>([&] { net.load_state_dict(wrong_dtype); }, {"head.bias", "f32", "f16"});

  nn::NamedTensors missing = good();
  missing.erase(missing.begin() + 2);
  expect_error<ValueError>([&] { net.load_state_dict(missing); }, {"missing", "layers.2.weight"});

  nn::NamedTensors unexpected = good();
  unexpected.emplace_back("head.extra", zeros({1}));
  expect_error<ValueError>([&] { net.load_state_dict(unexpected); }, {"unexpected", "head.extra"});

  nn::NamedTensors duplicate = good();
  duplicate.push_back(duplicate[0]);
  expect_error<ValueError>([&] { net.load_state_dict(duplicate); }, {"duplicate", "layers.0.weight"});

  // None of the failed loads wrote the first parameter (checked before copying).
  EXPECT_EQ(net.layers->named_parameters()[0].second.to_vector<float>(), first);
}

}  // namespace
