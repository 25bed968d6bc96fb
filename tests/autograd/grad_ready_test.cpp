// Gradient-ready hooks (Tensor::register_grad_ready_hook) and set_grad: a
// leaf's hook fires as soon as its total in a pass is final, before the
// nodes that do not lead to it have run, and only with that total.
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using strata_test::real_dtype;

Tensor vec(std::vector<double> v) {
  int64_t n = static_cast<int64_t>(v.size());
  return from_data(v, {n}, {.dtype = real_dtype()});
}

TEST(GradReady, FiresWhenTheLeafIsCompleteBeforeTheRestOfThePassRuns) {
  // loss = sum(b * (a * x)): the last node to send `b` its gradient is the
  // outermost mul; `a`'s gradient needs the inner mul, which runs after it.
  Tensor x = vec({1, 2, 3});
  Tensor a = vec({2, 2, 2}).set_requires_grad();
  Tensor b = vec({5, 6, 7}).set_requires_grad();
  std::vector<std::string> order;
  a.register_grad_ready_hook([&](const Tensor& g, const GradReadyInfo& info) {
    order.push_back("a");
    EXPECT_EQ(info.level, 0u);
    EXPECT_TRUE(info.accumulates);
    EXPECT_REALS_EQ(g.to_vector<double>(), (std::vector<double>{5, 12, 21}));
  });
  b.register_grad_ready_hook([&](const Tensor& g, const GradReadyInfo&) {
    order.push_back("b");
    EXPECT_REALS_EQ(g.to_vector<double>(), (std::vector<double>{2, 4, 6}));
  });
  // A probe between the two: an intermediate's hook fires when its node runs.
  Tensor ax = a * x;
  ax.register_hook([&](const Tensor& g) {
    order.push_back("ax");
    return Tensor();
  });
  sum(b * ax).backward();
  ASSERT_EQ(order, (std::vector<std::string>{"b", "ax", "a"}));
  EXPECT_REALS_EQ(a.grad().to_vector<double>(), (std::vector<double>{5, 12, 21}));
}

TEST(GradReady, SeesTheTotalOfALeafUsedSeveralTimes) {
  Tensor w = vec({1, 2}).set_requires_grad();
  int calls = 0;
  w.register_grad_ready_hook([&](const Tensor& g, const GradReadyInfo&) {
    ++calls;
    EXPECT_REALS_EQ(g.to_vector<double>(), (std::vector<double>{3, 5}));  // d/dw (w*w + w) = 2w + 1
  });
  sum(w * w + w).backward();
  EXPECT_EQ(calls, 1);
}

TEST(GradReady, FiresForTapeSourcesWithTheTapeLevelAndNotForOthers) {
  Tensor w = vec({1, 2}).set_requires_grad();
  Tensor v = vec({3, 4}).set_requires_grad();
  std::vector<GradReadyInfo> seen;
  w.register_grad_ready_hook([&](const Tensor&, const GradReadyInfo& info) { seen.push_back(info); });
  int v_calls = 0;
  v.register_grad_ready_hook([&](const Tensor&, const GradReadyInfo&) { ++v_calls; });
  GradientTape tape;
  Tensor y = sum(w * v);
  auto g = tape.gradient(y, {w});
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].level, tape.id());
  EXPECT_FALSE(seen[0].accumulates);
  EXPECT_EQ(v_calls, 0);  // not a source of that pass
  EXPECT_FALSE(w.grad().defined());
}

TEST(GradReady, NotFiredWhenNoGradientReachesTheLeaf) {
  Tensor w = vec({1, 2}).set_requires_grad();
  Tensor u = vec({1, 2}).set_requires_grad();
  int calls = 0;
  u.register_grad_ready_hook([&](const Tensor&, const GradReadyInfo&) { ++calls; });
  sum(w * 2.0).backward();
  EXPECT_EQ(calls, 0);
}

TEST(GradReady, AThrowingHookFailsThePassAndLeavesGradUnchanged) {
  Tensor w = vec({1, 2}).set_requires_grad();
  w.register_grad_ready_hook([](const Tensor&, const GradReadyInfo&) { throw ValueError("boom"); });
  EXPECT_THROW(sum(w * w).backward(), ValueError);
  EXPECT_FALSE(w.grad().defined());
}

TEST(SetGrad, ReplacesAndClearsWithChecks) {
  Tensor w = vec({1, 2}).set_requires_grad();
  w.set_grad(vec({7, 8}));
  EXPECT_REALS_EQ(w.grad().to_vector<double>(), (std::vector<double>{7, 8}));
  sum(w).backward();
  EXPECT_REALS_EQ(w.grad().to_vector<double>(), (std::vector<double>{8, 9}));
  w.set_grad(Tensor());
  EXPECT_FALSE(w.grad().defined());
  EXPECT_THROW(w.set_grad(vec({1, 2, 3})), ShapeError);
  const DType narrower = real_dtype() == DType::f64 ? DType::f32 : DType::f16;
  EXPECT_THROW(w.set_grad(zeros({2}, {.dtype = narrower})), DTypeError);  // f32 into f64, or f16 into f32
  Tensor plain = vec({1, 2});
  EXPECT_THROW(plain.set_grad(vec({1, 2})), Error);
  Tensor nonleaf = w * 2.0;
  EXPECT_THROW(nonleaf.set_grad(vec({1, 2})), Error);
}

}  // namespace
