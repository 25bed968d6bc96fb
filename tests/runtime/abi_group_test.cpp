// The host's side of STRATA_KERNEL_GROUPED (strata_plugin.h, "Kernels"), on
// the "grouped" behaviour plugin, whose strata::sgd_step takes groups and
// counts how it is called (grouped_probe.h): a group of parameters is one
// kernel call with every application in order, results equal to one call
// per parameter; parameters that share memory are never grouped; a group
// the kernel declines runs one application at a time; a group it refuses
// is an error naming the group; every parameter is checked before any is
// updated. The CPU plugin's grouped kernels have their own tests
// (tests/nn/grouped_optim_test.cpp, tests/cpu_abi/test_optim_group.cpp).
#include <strata/strata.hpp>
#include <strata/plugin/strata_plugin.h>

#include "behaviour_test_support.hpp"
#include "grouped_probe.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using namespace strata;
using namespace behaviour_test;

class Grouped : public Behaviour {
 protected:
  void SetUp() override {
    Behaviour::SetUp();
    PluginInfo plugin = loaded_plugin("grouped");
    dev = Device("grouped:0");
    probe = probe_extension<grouped_probe_extension>(plugin.path, GROUPED_PROBE_EXTENSION, GROUPED_PROBE_VERSION);
    ASSERT_NE(probe, nullptr) << "no " << GROUPED_PROBE_EXTENSION << " on the table of the loaded " << plugin.path;
    probe->set_mode(GROUPED_RUN);
    probe->reset();
  }
  void TearDown() override {
    if (probe != nullptr) probe->set_mode(GROUPED_RUN);
  }

  /// Tensors of the given lengths with distinct values (seeded), on `device`.
  static std::vector<Tensor> tensors(const std::vector<int64_t>& lengths, uint64_t seed, Device device) {
    std::vector<Tensor> out;
    manual_seed(seed);
    for (int64_t n : lengths) out.push_back(randn({n}).to(device));
    return out;
  }

  /// The same update, one call per parameter on cpu:0 (its f32 kernel
  /// equals the op's decomposition to the last bit).
  static std::vector<std::vector<float>> reference(const std::vector<Tensor>& ps, const std::vector<Tensor>& gs,
                                                   double lr, double wd) {
    std::vector<std::vector<float>> out;
    for (size_t j = 0; j < ps.size(); ++j) {
      Tensor p = ps[j].to(Device("cpu:0")).clone();
      sgd_step_(p, gs[j].to(Device("cpu:0")), lr, wd);
      out.push_back(p.to_vector<float>());
    }
    return out;
  }

  static std::vector<std::vector<float>> values(const std::vector<Tensor>& ts) {
    std::vector<std::vector<float>> out;
    for (const Tensor& t : ts) out.push_back(t.to_vector<float>());
    return out;
  }

  Device dev;
  const grouped_probe_extension* probe = nullptr;
};

TEST_F(Grouped, AGroupIsOneKernelCallWithEveryApplicationInOrder) {
  const std::vector<int64_t> lengths{1, 3, 17, 64, 5};
  std::vector<Tensor> ps = tensors(lengths, 1, dev), gs = tensors(lengths, 2, dev);
  for (double wd : {0.0, 0.01}) {
    const auto want = reference(ps, gs, 0.1, wd);
    sgd_step_(ps, gs, 0.1, wd);
    EXPECT_EQ(values(ps), want) << "weight decay " << wd;
  }
  EXPECT_EQ(probe->calls(), 2u) << "one kernel call per group";
  EXPECT_EQ(probe->applications(), 10u);
  EXPECT_EQ(probe->largest(), 5u);
  EXPECT_EQ(probe->overlaps(), 0u);
  EXPECT_EQ(runtime().fallback_count(), 0u);
}

TEST_F(Grouped, AnOptimizerUpdatesItsParametersAsOneGroup) {
  const std::vector<int64_t> lengths{7, 1, 33, 2};
  std::vector<Tensor> on_dev = tensors(lengths, 3, dev), on_cpu = tensors(lengths, 3, Device("cpu:0"));
  for (size_t j = 0; j < lengths.size(); ++j) {
    on_dev[j].set_requires_grad();
    on_cpu[j].set_requires_grad();
  }
  nn::SGD a(on_dev, {.lr = 0.05, .weight_decay = 0.001});
  nn::SGD b(on_cpu, {.lr = 0.05, .weight_decay = 0.001});
  for (int step = 0; step < 3; ++step) {
    std::vector<Tensor> gs = tensors(lengths, 10 + static_cast<uint64_t>(step), Device("cpu:0"));
    for (size_t j = 0; j < lengths.size(); ++j) {
      if (step == 1 && j == 2) {  // a parameter without a gradient is left out
        on_dev[j].set_grad(Tensor());
        on_cpu[j].set_grad(Tensor());
        continue;
      }
      on_dev[j].set_grad(gs[j].to(dev));
      on_cpu[j].set_grad(gs[j]);
    }
    a.step();
    b.step();
    for (size_t j = 0; j < lengths.size(); ++j) {
      EXPECT_EQ(on_dev[j].detach().to_vector<float>(), on_cpu[j].detach().to_vector<float>())
          << "step " << step << ", parameter " << j;
    }
  }
  EXPECT_EQ(probe->calls(), 3u);
  EXPECT_EQ(probe->applications(), 11u);
  EXPECT_EQ(probe->largest(), 4u);
}

TEST_F(Grouped, GradientsWithAutogradStateStillUpdateAsOneGroup) {
  // Gradients taken with create_graph have autograd state: the optimizer
  // detaches them, so the update is still one group, and not recorded.
  const std::vector<int64_t> lengths{5, 3};
  std::vector<Tensor> ps = tensors(lengths, 4, dev);
  const std::vector<Tensor> before = ps;
  std::vector<Tensor> gs, plain;
  for (size_t j = 0; j < ps.size(); ++j) {
    ps[j] = ps[j].clone().set_requires_grad();
    Tensor x = tensors({lengths[j]}, 20 + j, dev)[0].set_requires_grad();
    gs.push_back(x * 2.0);
    ASSERT_TRUE(gs.back().requires_grad());
    ps[j].set_grad(gs.back());
    plain.push_back(gs.back().detach());
  }
  nn::SGD opt(ps, {.lr = 0.25});
  opt.step();
  EXPECT_EQ(probe->calls(), 1u);
  EXPECT_EQ(probe->largest(), 2u);
  for (size_t j = 0; j < ps.size(); ++j) {
    EXPECT_EQ(ps[j].detach().to_vector<float>(), reference({before[j]}, {plain[j]}, 0.25, 0.0)[0]) << j;
    EXPECT_TRUE(ps[j].is_leaf()) << j;
  }
}

TEST_F(Grouped, ParametersThatShareMemoryAreUpdatedOneAtATime) {
  Tensor base = tensors({10}, 4, dev)[0];
  Tensor base_cpu = base.to(Device("cpu:0"));
  std::vector<Tensor> gs = tensors({6, 6}, 5, dev);
  // Overlapping views: the second update reads what the first wrote.
  std::vector<Tensor> ps{base.slice(0, 0, 6), base.slice(0, 4, 10)};
  sgd_step_(ps, gs, 0.5, 0.0);
  sgd_step_(base_cpu.slice(0, 0, 6), gs[0].to(Device("cpu:0")), 0.5, 0.0);
  sgd_step_(base_cpu.slice(0, 4, 10), gs[1].to(Device("cpu:0")), 0.5, 0.0);
  EXPECT_EQ(base.to_vector<float>(), base_cpu.to_vector<float>());
  EXPECT_EQ(probe->calls(), 2u);
  EXPECT_EQ(probe->largest(), 1u) << "overlapping parameters must not be grouped";

  // One parameter's gradient is the other parameter: also one at a time.
  probe->reset();
  std::vector<Tensor> ab = tensors({4, 4}, 6, dev);
  std::vector<Tensor> ab_cpu{ab[0].to(Device("cpu:0")), ab[1].to(Device("cpu:0"))};
  sgd_step_(ab, std::vector<Tensor>{ab[1], ab[0]}, 0.25, 0.0);
  sgd_step_(ab_cpu[0], ab_cpu[1], 0.25, 0.0);
  sgd_step_(ab_cpu[1], ab_cpu[0], 0.25, 0.0);
  EXPECT_EQ(values(ab), values(ab_cpu));
  EXPECT_EQ(probe->largest(), 1u);

  // Views of one storage that do not overlap are grouped.
  probe->reset();
  Tensor flat = tensors({10}, 7, dev)[0];
  std::vector<Tensor> halves{flat.slice(0, 0, 5), flat.slice(0, 5, 10)};
  const auto want = reference(halves, std::vector<Tensor>{gs[0].slice(0, 0, 5), gs[1].slice(0, 1, 6)}, 0.5, 0.0);
  sgd_step_(halves, std::vector<Tensor>{gs[0].slice(0, 0, 5), gs[1].slice(0, 1, 6)}, 0.5, 0.0);
  EXPECT_EQ(values(halves), want);
  EXPECT_EQ(probe->calls(), 1u);
  EXPECT_EQ(probe->largest(), 2u);
  EXPECT_EQ(probe->overlaps(), 0u) << "the host grouped applications that share memory";
}

TEST_F(Grouped, AGroupOfSeveralDevicesIsOneCallPerDevice) {
  const std::vector<int64_t> lengths{5, 9, 2, 4};
  std::vector<Tensor> ps = tensors(lengths, 8, dev), gs = tensors(lengths, 9, dev);
  ps[1] = ps[1].to(Device("cpu:0"));
  gs[1] = gs[1].to(Device("cpu:0"));
  const auto want = reference(ps, gs, 0.125, 0.0);
  sgd_step_(ps, gs, 0.125, 0.0);
  EXPECT_EQ(values(ps), want);
  EXPECT_EQ(probe->calls(), 1u);
  EXPECT_EQ(probe->applications(), 3u);
  EXPECT_EQ(ps[1].device(), Device("cpu:0"));
}

TEST_F(Grouped, EmptyParametersAndStridedGradientsTakePartAsAlone) {
  std::vector<Tensor> ps = tensors({3, 0, 2}, 10, dev);
  Tensor wide = tensors({6}, 11, dev)[0];
  std::vector<Tensor> gs{wide.slice(0, 0, 6, 2), tensors({0}, 12, dev)[0], tensors({2}, 12, dev)[0]};
  ASSERT_FALSE(gs[0].is_contiguous());
  const auto want = reference(ps, gs, 0.5, 0.0);
  sgd_step_(ps, gs, 0.5, 0.0);
  EXPECT_EQ(values(ps), want);
  EXPECT_EQ(probe->calls(), 1u) << "the empty parameter never reaches a kernel";
  EXPECT_EQ(probe->largest(), 2u);
}

TEST_F(Grouped, AGroupTheKernelDeclinesRunsOneApplicationAtATime) {
  probe->set_mode(GROUPED_DECLINE);
  const std::vector<int64_t> lengths{4, 8, 1};
  std::vector<Tensor> ps = tensors(lengths, 13, dev), gs = tensors(lengths, 14, dev);
  const auto want = reference(ps, gs, 0.1, 0.0);
  sgd_step_(ps, gs, 0.1, 0.0);
  EXPECT_EQ(values(ps), want);
  EXPECT_EQ(probe->calls(), 4u) << "the declined group, then one call per parameter";
  EXPECT_EQ(probe->applications(), 6u);
  EXPECT_EQ(runtime().fallback_count(), 0u) << "each alone still runs on the device";
}

TEST_F(Grouped, AGroupTheKernelRefusesIsAnErrorNamingTheGroup) {
  probe->set_mode(GROUPED_FAIL);
  std::vector<Tensor> ps = tensors({4, 8, 1}, 15, dev), gs = tensors({4, 8, 1}, 16, dev);
  const std::string m = message_of<ValueError>("a refused group", [&] { sgd_step_(ps, gs, 0.1, 0.0); });
  EXPECT_TRUE(has(m, "sgd_step")) << m;
  EXPECT_TRUE(has(m, "grouped:0")) << m;
  EXPECT_TRUE(has(m, "2 more calls of a group")) << m;
  EXPECT_TRUE(has(m, "refuses groups on purpose")) << m;
  // The device carries on.
  probe->set_mode(GROUPED_RUN);
  const auto want = reference(ps, gs, 0.1, 0.0);
  sgd_step_(ps, gs, 0.1, 0.0);
  EXPECT_EQ(values(ps), want);
}

TEST_F(Grouped, EveryParameterIsCheckedBeforeAnyIsUpdated) {
  std::vector<Tensor> ps = tensors({4, 8, 3}, 17, dev), gs = tensors({4, 8, 2}, 18, dev);
  const auto before = values(ps);
  std::string m = message_of<ShapeError>("a gradient of the wrong shape", [&] { sgd_step_(ps, gs, 0.1, 0.0); });
  EXPECT_TRUE(has(m, "sgd_step_: parameter 2: grad must be like param")) << m;
  EXPECT_TRUE(has(m, "f32[3]")) << m;
  EXPECT_TRUE(has(m, "f32[2]")) << m;
  EXPECT_EQ(values(ps), before) << "no parameter may change";
  EXPECT_EQ(probe->calls(), 0u);

  m = message_of<ValueError>("lists of different lengths",
                             [&] { sgd_step_(ps, std::vector<Tensor>{gs[0], gs[1]}, 0.1, 0.0); });
  EXPECT_TRUE(has(m, "sgd_step_: 3 params but 2 grads")) << m;

  std::vector<Tensor> bufs = tensors({4, 8, 3}, 19, dev);
  bufs[1] = bufs[1].to(Device("cpu:0"));
  m = message_of<DeviceError>("a buffer on another device", [&] {
    sgd_momentum_step_(ps, std::vector<Tensor>{gs[0], gs[1], gs[0]}, bufs, {.lr = 0.1, .momentum = 0.9});
  });
  EXPECT_TRUE(has(m, "parameter 1: buffer")) << m;
  EXPECT_EQ(values(ps), before);
}

}  // namespace
