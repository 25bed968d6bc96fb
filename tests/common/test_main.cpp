// test_main.cpp — the main() of every GoogleTest program in tests/ (the
// target strata_gtest_main, in place of strata_gtest_main).
//
// Besides running the tests it records each case's outcome, so that the
// skip check (tests/skips, CTest "expected_skips") can hold every skip of a
// run against the checked-in list of expected skips: CTest runs each case
// in its own process and keeps no reason for a skip, so the record is
// written here, where the reason is known. One file per process, one line
// per case that ran:
//
//   <program> \t <Suite.Case> \t passed|failed|skipped \t <reason> \t <peers> \t <device>
//
// <reason> is the skip message (or, for a case that passed with some of its
// dtypes left out, "dtypes: " and the dtypes the device does not store);
// <peers> is how many cases of the suite share this case's device
// parameter (the last "/<x>" of its name), so the check can tell that a
// device ran none of a suite's cases even when each ran in its own process;
// <device> is the runtime's default device when the case ended (empty in a
// program without the runtime): the device a case without a device
// parameter ran on (STRATA_TEST_DEVICE, docs/testing.md).
//
// The folder is STRATA_TEST_RESULTS_DIR when set, else the build tree's
// Testing/results (compiled in); the CTest "expected_skips_reset" test
// empties it before a run.
#include "test_main.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace strata_test {
void (*before_tests)() = nullptr;
std::string (*default_device)() = nullptr;
}  // namespace strata_test

namespace {

std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\t' || c == '\r') c = ' ';
  }
  return s;
}

/// "Exp/cpu_0" -> "cpu_0"; "" for a name without a parameter.
std::string param_of(const std::string& name) {
  const size_t slash = name.rfind('/');
  return slash == std::string::npos ? std::string() : name.substr(slash + 1);
}

class OutcomeRecorder : public ::testing::EmptyTestEventListener {
 public:
  OutcomeRecorder(std::filesystem::path file, std::string program)
      : file_(std::move(file)), program_(std::move(program)) {}

  void OnTestEnd(const ::testing::TestInfo& info) override {
    const ::testing::TestResult& r = *info.result();
    std::string status = r.Failed() ? "failed" : r.Skipped() ? "skipped" : "passed";
    std::string reason;
    if (r.Skipped()) {
      for (int i = 0; i < r.total_part_count(); ++i) {
        if (r.GetTestPartResult(i).skipped()) reason = r.GetTestPartResult(i).message();
      }
    } else {
      for (int i = 0; i < r.test_property_count(); ++i) {
        if (std::string(r.GetTestProperty(i).key()) == "skipped_dtypes") {
          reason = std::string("dtypes: ") + r.GetTestProperty(i).value();
        }
      }
    }
    std::ofstream out(file_, std::ios::app);
    std::string device;
    if (strata_test::default_device != nullptr) device = strata_test::default_device();
    out << program_ << '\t' << info.test_suite_name() << '.' << info.name() << '\t' << status << '\t'
        << one_line(reason) << '\t' << peers(info) << '\t' << device << '\n';
  }

 private:
  /// Cases of `info`'s suite with the same device parameter (all of the
  /// suite's cases when it has none).
  static int peers(const ::testing::TestInfo& info) {
    const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
    const std::string param = param_of(info.name());
    for (int s = 0; s < unit.total_test_suite_count(); ++s) {
      const ::testing::TestSuite& suite = *unit.GetTestSuite(s);
      if (std::string(suite.name()) != info.test_suite_name()) continue;
      int n = 0;
      for (int t = 0; t < suite.total_test_count(); ++t) {
        if (param_of(suite.GetTestInfo(t)->name()) == param) ++n;
      }
      return n;
    }
    return 1;
  }

  std::filesystem::path file_;
  std::string program_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* env = std::getenv("STRATA_TEST_RESULTS_DIR");
  const std::filesystem::path dir = env != nullptr && *env != '\0' ? env : STRATA_TEST_RESULTS_DEFAULT_DIR;
  if (!::testing::GTEST_FLAG(list_tests)) {  // CTest's discovery lists the cases; nothing runs
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      std::fprintf(stderr, "test_main: cannot record outcomes in %s: %s\n", dir.c_str(), ec.message().c_str());
    } else {
      const std::string program = std::filesystem::path(argv[0]).filename().string();
      auto* recorder = new OutcomeRecorder(dir / (program + "." + std::to_string(::getpid()) + ".tsv"), program);
      ::testing::UnitTest::GetInstance()->listeners().Append(recorder);  // owned by GoogleTest
    }
  }
  if (strata_test::before_tests != nullptr && !::testing::GTEST_FLAG(list_tests)) strata_test::before_tests();
  return RUN_ALL_TESTS();
}
