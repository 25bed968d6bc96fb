// The CPU plugin's optimizer kernels (strata::sgd_step, sgd_momentum_step,
// adam_step; f32 and f64) as groups, through the C ABI only: they declare
// STRATA_KERNEL_GROUPED; a call of k applications equals k calls of one, bit
// for bit, also where the kernel's two threads split the pass inside an
// application; malformed groups are refused with the op, the counts and the
// application named. Also the SDK's plugin::group_count.
#include "plugin_fixture.hpp"

#include <strata/plugin/strata_plugin.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace strata::cpu_abi {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::vector<float> random_values(size_t n, unsigned seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(SdkGroups, GroupCount) {
  const strata_tensor* operands[12] = {};
  strata_kernel_call call{};
  call.struct_size = sizeof(call);
  call.inputs = operands;
  call.outputs = operands;
  auto count = [&](int32_t n_inputs, int32_t n_outputs, int32_t in, int32_t out) {
    call.n_inputs = n_inputs;
    call.n_outputs = n_outputs;
    return plugin::group_count(call, in, out);
  };
  EXPECT_EQ(count(4, 3, 4, 3), 1);
  EXPECT_EQ(count(12, 9, 4, 3), 3);
  EXPECT_EQ(count(8, 5, 4, 3), 0);   // outputs of no group
  EXPECT_EQ(count(6, 3, 4, 3), 0);   // inputs of no group
  EXPECT_EQ(count(0, 0, 4, 3), 0);   // nothing
  EXPECT_EQ(count(4, 3, 0, 3), 0);   // a signature without inputs takes no groups
  EXPECT_EQ(count(-4, -3, 4, 3), 0);
  call.outputs = nullptr;
  EXPECT_EQ(count(4, 3, 4, 3), 0);
}

class OptimGroup : public CpuAbiTest {};

TEST_F(OptimGroup, TheUpdateKernelsTakeGroups) {
  int grouped = 0;
  for (const strata_kernel_entry* e : kernel_entries()) {
    const bool update = std::strcmp(e->op, "strata::sgd_step") == 0 ||
                        std::strcmp(e->op, "strata::sgd_momentum_step") == 0 ||
                        std::strcmp(e->op, "strata::adam_step") == 0;
    EXPECT_EQ((e->flags & STRATA_KERNEL_GROUPED) != 0, update) << e->op << " " << e->signature;
    grouped += update ? 1 : 0;
  }
  EXPECT_EQ(grouped, 6) << "three updates for f32 and f64";
}

// Adam over three parameters of 5, 40 000 and 3 elements: one grouped call
// against one call each. With two threads the pass is cut into chunks that
// end inside the 40 000-element parameter.
TEST_F(OptimGroup, AGroupEqualsOneCallPerApplicationBitForBit) {
  const std::vector<int64_t> lengths{5, 40000, 3};
  Attrs attrs;
  attrs.integer("decay_mode", 2).real("weight_decay", 0.01).real("decay", 0.999).real("beta1", 0.9)
      .real("beta2", 0.999).real("step_size", 0.01).real("inv_sqrt_bias2", 2.0).real("eps", 1e-8)
      .integer("first", 0);
  const char* sig = "f32,f32,f32,f32->f32,f32,f32";
  std::vector<DeviceTensor*> together, alone;  // p, g, m, v of each parameter in turn
  for (size_t j = 0; j < lengths.size(); ++j) {
    const auto n = static_cast<size_t>(lengths[j]);
    for (int operand = 0; operand < 4; ++operand) {
      const std::vector<float> v = random_values(n, static_cast<unsigned>(10 * j + operand), operand == 3 ? 0.0f : -2.0f);
      together.push_back(&tensor<float>(STRATA_F32, {lengths[j]}, v));
      alone.push_back(&tensor<float>(STRATA_F32, {lengths[j]}, v));
    }
  }
  auto operands = [](const std::vector<DeviceTensor*>& ts, size_t j, std::vector<const strata_tensor*>& in,
                     std::vector<const strata_tensor*>& out) {
    for (int operand = 0; operand < 4; ++operand) in.push_back(&ts[4 * j + operand]->desc());
    for (int operand : {0, 2, 3}) out.push_back(&ts[4 * j + operand]->desc());  // in place
  };
  std::vector<const strata_tensor*> in, out;
  for (size_t j = 0; j < lengths.size(); ++j) operands(together, j, in, out);
  ASSERT_EQ(run_raw("strata::adam_step", sig, in, out.data(), static_cast<int32_t>(out.size()), attrs), STRATA_OK)
      << message();
  for (size_t j = 0; j < lengths.size(); ++j) {
    std::vector<const strata_tensor*> in1, out1;
    operands(alone, j, in1, out1);
    ASSERT_EQ(run_raw("strata::adam_step", sig, in1, out1.data(), 3, attrs), STRATA_OK) << message();
  }
  for (size_t t = 0; t < together.size(); ++t) {
    const std::vector<float> a = together[t]->download<float>(), b = alone[t]->download<float>();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << "parameter " << t / 4 << ", operand " << t % 4;
  }
}

TEST_F(OptimGroup, MalformedGroupsAreRefused) {
  Attrs attrs;
  attrs.real("lr", 0.1).real("weight_decay", 0.0);
  DeviceTensor& p0 = tensor<float>(STRATA_F32, {4}, random_values(4, 1));
  DeviceTensor& g0 = tensor<float>(STRATA_F32, {4}, random_values(4, 2));
  DeviceTensor& p1 = tensor<float>(STRATA_F32, {3}, random_values(3, 3));
  DeviceTensor& g1 = tensor<float>(STRATA_F32, {2}, random_values(2, 4));
  DeviceTensor& d1 = tensor<double>(STRATA_F64, {3}, std::vector<double>{1, 2, 3});
  const char* sig = "f32,f32->f32";

  // Three inputs and two outputs: no group of (2 -> 1).
  std::vector<const strata_tensor*> in{&p0.desc(), &g0.desc(), &p1.desc()};
  const strata_tensor* out2[] = {&p0.desc(), &p1.desc()};
  EXPECT_EQ(run_raw("strata::sgd_step", sig, in, out2, 2, attrs), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(message(), "strata::sgd_step: expected 2 inputs and 1 outputs, or k times as many")) << message();
  EXPECT_TRUE(contains(message(), "got 3 and 2")) << message();

  // Application 1's gradient has another element count.
  in = {&p0.desc(), &g0.desc(), &p1.desc(), &g1.desc()};
  EXPECT_EQ(run_raw("strata::sgd_step", sig, in, out2, 2, attrs), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(message(), "input 1 of application 1 is f32[2]")) << message();

  // Application 1's parameter is f64.
  in = {&p0.desc(), &g0.desc(), &d1.desc(), &g1.desc()};
  const strata_tensor* out_d[] = {&p0.desc(), &d1.desc()};
  EXPECT_EQ(run_raw("strata::sgd_step", sig, in, out_d, 2, attrs), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(message(), "application 1 of a group of 2")) << message();
  EXPECT_TRUE(contains(message(), "f64")) << message();
}

}  // namespace
}  // namespace strata::cpu_abi
