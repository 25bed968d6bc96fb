// native_view: a tensor's memory through its plugin's strata.native_handles
// extension — the CPU plugin's host addresses (offset applied), and a clear
// error on a device whose plugin has no such extension (the mini test
// accelerator).
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include "mini_fixture.hpp"

namespace {

using NativeView = strata_test::OnMini;

TEST_F(NativeView, CpuTensorsAreHostMemoryWithTheirOffsetApplied) {
  const std::vector<float> values{1, 2, 3, 4, 5, 6};
  strata::Tensor t = strata::from_data(values, {2, 3}, {.device = strata::Device("cpu:0")});
  strata::NativeView v = strata::native_view(t);
  EXPECT_EQ(v.api, "host");
  const float* p = static_cast<const float*>(v.data);
  EXPECT_EQ(p[0], 1.0f);
  EXPECT_EQ(p[5], 6.0f);
  strata::NativeView row = strata::native_view(t.slice(0, 1, 2));
  EXPECT_EQ(static_cast<const float*>(row.data), p + 3);
  // Writing through it changes the tensor (a collective's in-place result).
  static_cast<float*>(v.data)[1] = 20.0f;
  EXPECT_EQ(t.to_vector<float>()[1], 20.0f);
}

TEST_F(NativeView, ADeviceWithoutTheExtensionIsAClearError) {
  strata::Tensor t = strata::zeros({3}, {.device = mini});
  try {
    strata::native_view(t);
    FAIL() << "mini:0 has no strata.native_handles extension";
  } catch (const strata::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("mini:0's plugin \"mini\" offers no strata.native_handles extension"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
