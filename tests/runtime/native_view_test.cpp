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

// tensor_from_native: a tensor over memory the caller owns, through the
// plugin's strata.buffer_views extension (ABI 2.7).
TEST_F(NativeView, ATensorOverCallerMemorySharesItAndReleasesItOnceItsLastTensorIsGone) {
  std::vector<float> owned{1, 2, 3, 4, 5, 6};
  int released = 0;
  {
    const strata::Device cpu("cpu:0");
    ASSERT_TRUE(strata::can_view_native(cpu));
    strata::Tensor t = strata::tensor_from_native(owned.data(), strata::DType::f32, std::vector<int64_t>{2, 3}, {},
                                                  cpu, [&] { ++released; });
    EXPECT_EQ(strata::native_view(t).data, owned.data());  // no copy
    owned[4] = 50.0f;  // the owner's write shows in the tensor
    EXPECT_EQ(t.to_vector<float>()[4], 50.0f);
    // Kernels read it and write it: ops over the view, an in-place op into it.
    EXPECT_EQ((t * 2.0).to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 100, 12}));
    t.copy_(t * 10.0);  // an in-place write through the view
    EXPECT_EQ(owned[0], 10.0f);
    // A strided view (the transpose, given by strides) and the copy
    // functions' range check (to_vector reads the whole span).
    strata::Tensor tt = strata::tensor_from_native(owned.data(), strata::DType::f32, std::vector<int64_t>{3, 2},
                                                   std::vector<int64_t>{1, 3}, cpu, [&] { ++released; });
    EXPECT_EQ(tt.to_vector<float>(), (std::vector<float>{10, 40, 20, 500, 30, 60}));
    strata::Tensor slice = t.slice(1, 1, 3);  // a view of the view keeps it alive
    t = strata::Tensor();
    tt = strata::Tensor();
    EXPECT_EQ(released, 1);
    EXPECT_EQ(slice.to_vector<float>(), (std::vector<float>{20, 30, 500, 60}));
  }
  EXPECT_EQ(released, 2);
}

TEST_F(NativeView, BadForeignMemoryIsRefusedNamingWhatAndTheCallerKeepsIt) {
  std::vector<double> owned(4, 1.0);
  int released = 0;
  auto release = [&] { ++released; };
  const strata::Device cpu("cpu:0");
  auto message = [&](auto&& make) -> std::string {
    try {
      make();
    } catch (const strata::Error& e) {
      return e.what();
    }
    return "no error";
  };
  const std::vector<int64_t> four{4};
  EXPECT_NE(message([&] {
              strata::tensor_from_native(reinterpret_cast<char*>(owned.data()) + 2, strata::DType::f64, four, {},
                                         cpu, release);
            }).find("tensor_from_native(f64[4] on cpu:0): the address"),
            std::string::npos);
  EXPECT_NE(message([&] {
              strata::tensor_from_native(owned.data(), strata::DType::f64, four, std::vector<int64_t>{-1}, cpu,
                                         release);
            }).find("stride -1 of dim 0 is negative"),
            std::string::npos);
  EXPECT_NE(message([&] {
              strata::tensor_from_native(owned.data(), strata::DType::f64, four, std::vector<int64_t>{1, 1}, cpu,
                                         release);
            }).find("2 strides for a shape of rank 1"),
            std::string::npos);
  EXPECT_NE(message([&] { strata::tensor_from_native(nullptr, strata::DType::f64, four, {}, cpu, release); })
                .find("the address is null"),
            std::string::npos);
  EXPECT_NE(message([&] {
              strata::tensor_from_native(owned.data(), strata::DType::f64, four, std::vector<int64_t>{INT64_MAX / 2},
                                         cpu, release);
            }).find("reach past any addressable memory"),
            std::string::npos);
  // mini:0's plugin has no strata.buffer_views extension.
  EXPECT_FALSE(strata::can_view_native(mini));
  EXPECT_NE(message([&] { strata::tensor_from_native(owned.data(), strata::DType::f32, four, {}, mini, release); })
                .find("mini:0's plugin \"mini\" offers no strata.buffer_views extension"),
            std::string::npos);
  EXPECT_EQ(released, 0);  // a refused call leaves the memory with its owner
  // An empty tensor needs no memory: it is given back at once.
  strata::Tensor empty = strata::tensor_from_native(nullptr, strata::DType::f64, std::vector<int64_t>{0, 3}, {}, cpu,
                                                    release);
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(released, 1);
}
