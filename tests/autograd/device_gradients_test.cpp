// device_gradients_test.cpp — the gradient checks' op list (op_cases.hpp) on
// every available device other than cpu:0, in f32: first, second and third
// order reverse mode and the JVP, against cpu:0's f32 results on the same
// inputs. The f64 finite-difference checks run on cpu:0 only
// (higher_order_test.cpp, rules_test.cpp); this suite makes sure each
// backend's kernels, as the engine records and differentiates them again,
// give what the checked CPU path gives.
//
// Tolerance: |device - cpu| <= kAtol + kRtol |cpu|, kAtol = 1e-4,
// kRtol = 1e-3. f32's unit roundoff is 6e-8; the backends sum in another
// order and use their own exp/tanh/erf, and each order of differentiation
// runs the previous order's ops again, compounding those differences (the
// third order of exp(b x) goes through some 30 ops). 1e-3 relative is far
// below what a wrong rule or kernel gives (O(1) relative).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "../common/required_devices.hpp"
#include "op_cases.hpp"

namespace {

using op_cases::f64_uniform;
using op_cases::OpCase;
using strata::Device;
using strata::DType;
using strata::Fn;
using strata::Tensor;

// mini:0 lives in the test plugin directory: searched too (after the
// configured paths), set before the runtime first starts.
const bool kPluginPath = [] {
  setenv("STRATA_PLUGIN_PATH", STRATA_TEST_PLUGIN_DIR, 0);
  setenv("STRATA_LOG_LEVEL", "error", 0);  // the directory's refused plugins
  return true;
}();

constexpr double kAtol = 1e-4;
constexpr double kRtol = 1e-3;

Fn order_up(const Fn& g, const Tensor& w) {
  Fn dg = strata::grad(g);
  return [dg, w](const Tensor& x) { return strata::sum(dg(x) * w); };
}

/// The derivatives compared, in f32 on `device`: gradients of the first
/// three orders (as many as the case has) and the JVP of the op along v.
std::vector<std::vector<double>> derivatives(const OpCase& c, const Device& device) {
  auto on = [&](const Tensor& t) { return t.to(DType::f32).to(device); };
  Tensor x = on(f64_uniform(c.shape, c.lo, c.hi, 1));
  Tensor w_out = on(f64_uniform(c.op(x).sizes(), 0.5, 1.5, 2));
  Tensor w1 = on(f64_uniform(c.shape, -1.0, 1.0, 3)), w2 = on(f64_uniform(c.shape, -1.0, 1.0, 4));
  Tensor v = on(f64_uniform(c.shape, -1.0, 1.0, 5));
  auto op = c.op;
  Fn f = [op, w_out](const Tensor& t) { return strata::sum(op(t) * w_out); };
  std::vector<Fn> orders{f, order_up(f, w1)};
  orders.push_back(order_up(orders[1], w2));
  std::vector<std::vector<double>> out;
  for (int order = 1; order <= c.max_order; ++order) {
    Tensor g = strata::grad(orders[static_cast<size_t>(order - 1)])(x);
    EXPECT_EQ(g.device(), device) << c.name << " order " << order;
    EXPECT_EQ(g.dtype(), DType::f32) << c.name << " order " << order;
    out.push_back(g.to_vector<double>());
  }
  auto [y, ydot] = strata::jvp(op, x, v);
  out.push_back(ydot.to_vector<double>());
  return out;
}

class DeviceGradients : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override { STRATA_ACQUIRE_DEVICE(GetParam(), device_); }
  Device device_;
};

TEST_P(DeviceGradients, EveryOrderAndTheJvpMatchCpuF32) {
  const Device cpu("cpu:0");
  int compared = 0;
  for (const OpCase& c : op_cases::cases(DType::f32, device_)) {
    SCOPED_TRACE(c.name + " on " + GetParam());
    std::vector<std::vector<double>> got = derivatives(c, device_);
    // The same case with its operands on cpu:0.
    OpCase ref_case = c;
    for (const OpCase& r : op_cases::cases(DType::f32, cpu)) {
      if (r.name == c.name) ref_case = r;
    }
    std::vector<std::vector<double>> want = derivatives(ref_case, cpu);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      const std::string what = k + 1 == got.size() ? "JVP" : "order " + std::to_string(k + 1);
      ASSERT_EQ(got[k].size(), want[k].size()) << what;
      int shown = 0;
      for (size_t i = 0; i < got[k].size(); ++i) {
        if (std::fabs(got[k][i] - want[k][i]) > kAtol + kRtol * std::fabs(want[k][i]) && shown++ < 3) {
          ADD_FAILURE() << c.name << " " << what << " [" << i << "]: " << GetParam() << " " << got[k][i]
                        << ", cpu:0 " << want[k][i];
        }
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 100);
}

/// to_device is differentiable: a gradient flows back across devices,
/// cpu:0 -> device -> cpu:0, and arrives on cpu:0 in the leaf's dtype.
TEST_P(DeviceGradients, GradientFlowsBackAcrossDevices) {
  const Device cpu("cpu:0");
  // On cpu:0 by name: on a machine with a GPU the default device is the GPU.
  Tensor x = strata::from_data(std::vector<float>{0.5f, -1.0f, 2.0f}, {3}, {.device = cpu});
  Fn f = [&](const Tensor& t) {
    Tensor there = t.to(device_);
    EXPECT_EQ(there.device(), device_);
    return strata::sum(strata::exp(there * 2.0).to(cpu) * 3.0);
  };
  Tensor g = strata::grad(f)(x);
  EXPECT_EQ(g.device(), cpu);
  EXPECT_EQ(g.dtype(), DType::f32);
  std::vector<double> gv = g.to_vector<double>();
  const double xs[] = {0.5, -1.0, 2.0};
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(gv[i], 6.0 * std::exp(2.0 * xs[i]), 1e-4 * 6.0 * std::exp(2.0 * xs[i]));
  // And the second derivative: 12 exp(2x).
  Tensor h = strata::hvp(f, x, strata::ones({3}));
  std::vector<double> hv = h.to_vector<double>();
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(hv[i], 12.0 * std::exp(2.0 * xs[i]), 1e-4 * 12.0 * std::exp(2.0 * xs[i]));
}

std::vector<const char*> devices() {
  static std::vector<std::string> ids = [] {
    std::vector<std::string> v{"vulkan:0", "mini:0", "cuda:0", "hip:0"};
    for (const std::string& id : strata_test::split_ids(std::getenv("STRATA_TEST_DEVICES"))) {
      if (id != "cpu:0" && std::find(v.begin(), v.end(), id) == v.end()) v.push_back(id);
    }
    return v;
  }();
  std::vector<const char*> out;
  for (const std::string& id : ids) out.push_back(id.c_str());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceGradients, ::testing::ValuesIn(devices()),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string s = p.param;
                           std::replace(s.begin(), s.end(), ':', '_');
                           return s;
                         });

}  // namespace
