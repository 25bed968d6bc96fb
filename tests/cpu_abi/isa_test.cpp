// cpu_isa_test: the CPU plugin's loops compute the same bits at every
// instruction-set level (loop_isa.hpp). cpu_isa_dump runs every elementwise
// kernel on special values (NaN, ±inf, ±0, denormals, extremes) in compact,
// broadcast and transposed layouts and hashes each output; it runs once per
// level — as the CPU allows it, capped at AVX2, and capped at SSE4.1 (the
// baseline loops), each in its own process because oneDNN fixes its ISA cap
// once per process — and the outputs must be identical. Each level must also
// be the one this CPU allows under its cap, and the plugin's count of the
// loops it ran (logged at shutdown) must show them running there: equal
// bits alone would pass a plugin stuck in its baseline loops.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Dump {
  std::string loops;  // the level the plugin claims
  std::string runs;   // "x86-64-v4 (AVX-512) N, x86-64-v3 (AVX2) M, x86-64 (SSE2) K"
  std::vector<std::string> lines;
};

/// The loops the plugin ran at `level` ("x86-64-v3 (AVX2)"), from its count.
long long runs_at(const Dump& d, const std::string& level) {
  const size_t at = d.runs.find(level + " ");
  if (at == std::string::npos) throw std::runtime_error("no count for " + level + " in \"" + d.runs + "\"");
  return std::stoll(d.runs.substr(at + level.size() + 1));
}

constexpr const char* kV4 = "x86-64-v4 (AVX-512)";
constexpr const char* kV3 = "x86-64-v3 (AVX2)";
constexpr const char* kBase = "x86-64 (SSE2)";

/// The level the plugin must reach with no cap: the widest this CPU runs
/// (oneDNN, which the level follows, supports both on such a CPU). The wide
/// copies of the loops exist in GCC builds for x86-64 only (loop_isa.hpp);
/// this test is built by the same compiler as the plugin.
std::string widest_level() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  if (__builtin_cpu_supports("x86-64-v4")) return kV4;
  if (__builtin_cpu_supports("x86-64-v3")) return kV3;
#endif
  return kBase;
}

/// The claim is `level`, and every loop the plugin counted ran there.
void expect_reaches(const Dump& d, const std::string& level) {
  EXPECT_EQ(d.loops, level) << "the level the plugin claims";
  for (const char* other : {kV4, kV3, kBase}) {
    const long long n = runs_at(d, other);
    if (other == level) {
      if (level != kBase) {
        EXPECT_GT(n, 400) << "loops run at the claimed " << other << ": " << d.runs;
      }
    } else {
      EXPECT_EQ(n, 0) << "loops run at " << other << " while the plugin claims " << level;
    }
  }
}

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
    } else if (line.rfind("runs: ", 0) == 0) {
      d.runs = line.substr(6);
    } else if (line.rfind("calls: ", 0) != 0) {
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
  // Each level is the one the CPU allows under the cap, and the loops ran
  // there: not only the same bits, but the wide code really running.
  expect_reaches(base, kBase);
  const std::string widest = widest_level();
  expect_reaches(best, widest);
  expect_reaches(avx2, widest == kBase ? std::string(kBase) : std::string(kV3));
  std::printf("loop runs: %s | %s | %s\n", best.runs.c_str(), avx2.runs.c_str(), base.runs.c_str());
  // 35 ops over their dtypes, 4 layouts each: 876 kernel calls here.
  ASSERT_GT(base.lines.size(), 800u);
  std::printf("levels: %s | %s | %s, %zu kernel calls each\n", best.loops.c_str(), avx2.loops.c_str(),
              base.loops.c_str(), base.lines.size());
  expect_same(best, base);
  expect_same(avx2, base);
}

}  // namespace
