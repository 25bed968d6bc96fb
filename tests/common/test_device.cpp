// test_device.cpp — the device the device-generic suites run on
// (docs/testing.md, "Every suite on every device"). Linked into every test
// program strata_add_test builds: before the first case runs, the device
// STRATA_TEST_DEVICE names ("vulkan:0") becomes the runtime's default
// device, so that a suite written against the default device runs on it.
// A case about one device names it; a case that reconfigures the runtime
// gets the default its configuration selects. Unset: the configuration's
// choice (cpu:0 on a machine without a GPU).
#include "test_main.hpp"

#include <gtest/gtest.h>
#include <strata/strata.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

/// After each case: the work it left queued on the default device ends
/// within the case. A case may end with work in flight (a result it never
/// read); at the program's exit the driver may be torn down under it
/// (lavapipe JIT-compiles a dispatch when it runs, with an LLVM whose exit
/// handlers have run: backends/vulkan/README.md, "Limits").
class SynchronizeAfterEachCase : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo&) override {
    try {
      strata::runtime().synchronize(strata::runtime().default_device());
    } catch (const std::exception& e) {
      // A deferred error the case left behind belongs to that case.
      ADD_FAILURE() << "work the case left queued on the default device failed: " << e.what();
    }
  }
};

void select_test_device() {
  const char* id = std::getenv("STRATA_TEST_DEVICE");
  if (id == nullptr || *id == '\0') return;
  ::testing::UnitTest::GetInstance()->listeners().Append(new SynchronizeAfterEachCase);  // owned by GoogleTest
  try {
    strata::Device device(id);
    strata::runtime().set_default_device(device);
    std::fprintf(stderr, "strata tests: default device %s (STRATA_TEST_DEVICE)\n", device.str().c_str());
  } catch (const strata::Error& e) {
    // Not a skip: a run asked for this device, and every case would
    // otherwise pass on another one without a word.
    std::fprintf(stderr, "strata tests: STRATA_TEST_DEVICE=%s cannot be the default device: %s\n", id, e.what());
    std::exit(1);
  }
}

/// The default device now, or "" when there is none (a case that left the
/// runtime without devices); never throws into the recorder.
std::string current_default_device() {
  try {
    return strata::runtime().default_device().str();
  } catch (const std::exception&) {
    return "";
  }
}

[[maybe_unused]] const bool registered = (strata_test::before_tests = &select_test_device,
                                          strata_test::default_device = &current_default_device, true);

}  // namespace
