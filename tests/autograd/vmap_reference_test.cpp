// vmap_reference_test.cpp — per-sample gradients, batched Jacobians and
// Hessians, and nested vmaps against PyTorch's functorch: the reference
// values were computed by functorch in float64
// (tests/autograd/data/gen_vmap_reference.py, PyTorch 1.13 from Debian) and
// are committed, so this test needs no PyTorch. The inputs are closed-form
// (value(i) = scale · sin(0.37 i + phase), element i in row-major order) and
// built here the same way; the results must agree to 1e-10 in f64 (on a
// device without f64, to f32's tolerance).
#include "autograd_test_util.hpp"

#include <strata/strata.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

using namespace strata;

namespace {

Tensor values(const Shape& shape, double scale, double phase) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * std::sin(0.37 * static_cast<double>(i) + phase);
  // Made on cpu:0 in f64, then in the test dtype on the test device.
  return from_data(std::span<const double>(v), shape, {.dtype = DType::f64, .device = Device("cpu:0")})
      .to(strata_test::real_dtype())
      .to(strata_test::test_device());
}

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(STRATA_VMAP_REFERENCE);
    if (!in) throw std::runtime_error(std::string("cannot open ") + STRATA_VMAP_REFERENCE);
    return nlohmann::json::parse(in);
  }();
  return j;
}

void expect_reference(const Tensor& got, const nlohmann::json& want, const std::string& what) {
  const Shape shape = want.at("shape").get<Shape>();
  const std::vector<double> expected = want.at("values").get<std::vector<double>>();
  ASSERT_EQ(got.sizes(), shape) << what;
  const std::vector<double> actual = got.to_vector<double>();
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], strata_test::bound_in(got.dtype(), 1e-10, expected[i]))
        << what << ", element " << i;
  }
}

}  // namespace

TEST(VmapReference, PerSampleGradientsOfAnMlpMatchFunctorch) {
  const std::vector<Tensor> params = {values({5, 4}, 0.6, 0.1), values({4}, 0.2, 0.2), values({4, 3}, 0.7, 0.3)};
  const Tensor xs = values({6, 5}, 1.0, 0.4), ys = values({6, 3}, 0.5, 0.5);
  auto loss = [](const std::vector<Tensor>& p, const std::vector<Tensor>& ex) {
    Tensor h = tanh(matmul(tanh(matmul(ex[0], p[0]) + p[1]), p[2]));
    Tensor d = h - ex[1];
    return sum(d * d);
  };
  std::vector<Tensor> g = per_sample_grad(loss, params, {xs, ys});
  const nlohmann::json& ref = reference().at("per_sample_mlp");
  expect_reference(g[0], ref.at("w1"), "w1");
  expect_reference(g[1], ref.at("b1"), "b1");
  expect_reference(g[2], ref.at("w2"), "w2");
}

TEST(VmapReference, BatchedJacobiansAndHessiansMatchFunctorch) {
  const Tensor w = values({3, 4}, 0.5, 0.3);
  auto f = [&](const Tensor& x) { return tanh(matmul(w, x)) * sin(x.slice(0, 0, 3)); };
  auto g = [](const Tensor& x) { return sum(sin(x) * x * x) + x.select(0, 0) * x.select(0, 1) * x.select(0, 2); };
  const Tensor batch = values({5, 4}, 0.9, 0.6);
  expect_reference(vmap([&](const Tensor& x) { return jacfwd(f, x); })(batch), reference().at("jacfwd"), "jacfwd");
  expect_reference(vmap([&](const Tensor& x) { return jacrev(f, x); })(batch), reference().at("jacrev"), "jacrev");
  expect_reference(vmap([&](const Tensor& x) { return hessian(g, x); })(batch), reference().at("hessian"), "hessian");
}

TEST(VmapReference, NestedVmapsMatchFunctorch) {
  const Tensor a = values({3, 4}, 1.0, 0.7), b = values({5, 4}, 1.0, 0.8);
  // vmap(vmap(h, in_dims=(0, None)), in_dims=(None, 0))(a, b): [5 (b's rows), 3 (a's rows)].
  auto h = [](const std::vector<Tensor>& ab) { return std::vector<Tensor>{sum(tanh(ab[0] * ab[1]))}; };
  auto inner = vmap(h, {0, std::nullopt});
  auto outer = vmap(inner, {std::nullopt, 0});
  expect_reference(outer({a, b})[0], reference().at("nested"), "nested");
}
