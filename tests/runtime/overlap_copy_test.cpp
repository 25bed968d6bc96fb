// copy_ between overlapping views of one buffer reads the source whole before
// writing (PyTorch refuses such copies; Strata defines them), on the CPU and
// on the mini test accelerator, whose copy kernel walks front to back and
// would otherwise smear the first element along.
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include "mini_fixture.hpp"

namespace {

using OverlapCopy = strata_test::OnMini;

void check_shift(strata::Device device) {
  const std::vector<float> values{0, 1, 2, 3, 4, 5, 6, 7};
  strata::Tensor x = strata::from_data(values, {8}, {.device = device});
  x.slice(0, 1, 8).copy_(x.slice(0, 0, 7));  // shift right by one, overlapping
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 0, 1, 2, 3, 4, 5, 6})) << device.str();
  strata::Tensor y = strata::from_data(values, {8}, {.device = device});
  y.slice(0, 0, 7).copy_(y.slice(0, 1, 8));  // shift left by one
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 7})) << device.str();
  strata::Tensor z = strata::from_data(values, {8}, {.device = device});
  z.copy_(z);  // onto itself: unchanged
  EXPECT_EQ(z.to_vector<float>(), values) << device.str();
}

TEST_F(OverlapCopy, ReadsTheSourceWholeOnTheCpu) { check_shift(strata::Device("cpu:0")); }
TEST_F(OverlapCopy, ReadsTheSourceWholeOnAFrontToBackDevice) { check_shift(mini); }

}  // namespace
