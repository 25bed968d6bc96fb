// ratio_reporter.hpp — a Google Benchmark console reporter that also keeps
// each benchmark's times (its median when repeated, else its single run), so
// a program can print peer ratios after the runs.
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::bench {

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
