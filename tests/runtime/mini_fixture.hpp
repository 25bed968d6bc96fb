// mini_fixture.hpp — the runtime test configuration (test-config.json) with
// the "mini" test accelerator (fill, copy and add; stores f32, i64, bool),
// fallback statistics reset for each case.
#pragma once

#include <strata/strata.hpp>

#include <gtest/gtest.h>

namespace strata_test {

class OnMini : public ::testing::Test {
 protected:
  void SetUp() override {
    strata::runtime().load_config(STRATA_TEST_CONFIG);
    strata::runtime().reset_fallback_stats();
    mini = strata::Device("mini:0");
  }
  strata::Device mini;
};

}  // namespace strata_test
