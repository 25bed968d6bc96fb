// bench_common.hpp — what the benchmarks with a libtorch peer share: the
// thread count both sides use, the CPU-only configuration, and a console
// reporter that keeps each benchmark's times (its median when repeated, else
// its single run) so a program can print peer ratios after the runs.
#pragma once

#include <strata/config.hpp>
#include <strata/runtime.hpp>

#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::bench {

/// STRATA_BENCH_THREADS when set to a positive number, else `fallback`.
inline int bench_threads(int fallback) {
  const char* env = std::getenv("STRATA_BENCH_THREADS");
  const int n = env != nullptr ? std::atoi(env) : 0;
  return n > 0 ? n : fallback;
}

/// Sets OpenBLAS's own pool (libtorch's f32 BLAS), which torch::set_num_threads
/// does not control; false when OpenBLAS is not loaded.
inline bool set_openblas_threads(int threads) {
  using SetThreads = void (*)(int);
  auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set != nullptr) set(threads);
  return set != nullptr;
}

/// The CPU plugin alone, with `threads` threads.
inline void configure_cpu_only(int threads) {
  Config config = Config::builtin_default();
  config.prefer = {"cpu"};
  config.disabled_plugins = {"cuda", "hip", "vulkan"};
  config.devices["cpu"].threads = threads;
  config.log_level = "warn";
  runtime().configure(config);
}

/// The console output plus each benchmark's real and CPU time in ms.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  explicit RatioReporter(OutputOptions options) : ConsoleReporter(options) {}
  struct Times {
    double real_ms, cpu_ms;
  };
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      const double to_ms = 1e3 / benchmark::GetTimeUnitMultiplier(r.time_unit);
      const Times t{r.GetAdjustedRealTime() * to_ms, r.GetAdjustedCPUTime() * to_ms};
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median") {
        median_[r.run_name.function_name] = t;
      } else if (r.run_type == Run::RT_Iteration) {
        single_[r.run_name.function_name] = t;
      }
    }
  }
  std::optional<Times> times(const std::string& name) const {
    if (auto it = median_.find(name); it != median_.end()) return it->second;
    if (auto it = single_.find(name); it != single_.end()) return it->second;
    return std::nullopt;
  }

 private:
  std::map<std::string, Times> median_, single_;
};

}  // namespace strata::bench
