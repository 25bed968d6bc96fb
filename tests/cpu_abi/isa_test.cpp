// cpu_isa_test: the CPU plugin's loops compute the same bits at every
// instruction-set level (loop_isa.hpp). cpu_isa_dump runs every elementwise
// kernel on special values (NaN, ±inf, ±0, denormals, extremes) in compact,
// broadcast and transposed layouts and hashes each output; it runs once per
// level — as the CPU allows it, capped at AVX2, and capped at SSE4.1 (the
// baseline loops), each in its own process because oneDNN fixes its ISA cap
// once per process — and the outputs must be identical.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Dump {
  std::string loops;
  std::vector<std::string> lines;
};

Dump run_dump(const std::string& options) {
  const std::string command = std::string(STRATA_ISA_DUMP) + " '" + options + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed");
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  const int status = ::pclose(pipe);
  if (status != 0) throw std::runtime_error("cpu_isa_dump " + options + " failed: " + text);
  Dump d;
  std::stringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("loops: ", 0) == 0) {
      d.loops = line.substr(7);
    } else {
      d.lines.push_back(line);
    }
  }
  return d;
}

void expect_same(const Dump& a, const Dump& b) {
  ASSERT_EQ(a.lines.size(), b.lines.size()) << a.loops << " vs " << b.loops;
  int differ = 0;
  for (size_t i = 0; i < a.lines.size(); ++i) {
    if (a.lines[i] != b.lines[i] && ++differ <= 20) {
      ADD_FAILURE() << a.loops << ": " << a.lines[i] << "\n" << b.loops << ": " << b.lines[i];
    }
  }
  EXPECT_EQ(differ, 0) << "kernel calls whose output differs between " << a.loops << " and " << b.loops;
}

TEST(CpuIsa, EveryLevelComputesTheSameBits) {
  const Dump best = run_dump("{}");
  const Dump avx2 = run_dump(R"({"isa": "avx2"})");
  const Dump base = run_dump(R"({"isa": "sse41"})");
  EXPECT_EQ(base.loops, "x86-64 (SSE2)") << "the sse41 cap must select the baseline loops";
  // 35 ops over their dtypes, 4 layouts each: 876 kernel calls here.
  ASSERT_GT(base.lines.size(), 800u);
  std::printf("levels: %s | %s | %s, %zu kernel calls each\n", best.loops.c_str(), avx2.loops.c_str(),
              base.loops.c_str(), base.lines.size());
  expect_same(best, base);
  expect_same(avx2, base);
}

}  // namespace
