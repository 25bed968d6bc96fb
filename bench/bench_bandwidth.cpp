// bench_bandwidth.cpp — memory-bound CPU ops against the machine's memory
// bandwidth, measured in the same run (docs/performance.md, "Physical
// limits"). For 16 M-element f32 tensors (64 MiB each, far beyond the
// caches):
//
//   BM_StreamCopy, BM_StreamTriad   STREAM-style loops on plain arrays (the
//                                   ceiling: c = a; a = b + s*c), OpenMP
//                                   with the same thread count as Strata
//   BM_Op/<name>                    Strata's add, mul, exp, tanh, sin, erf,
//                                   log1p, sum and the f32 -> bf16 cast on
//                                   cpu:0 (the transcendental ones are
//                                   compute-bound on SLEEF's 1-ULP loops)
//
// Every case reports bytes moved per second ("GB/s": bytes read + written,
// as STREAM counts them); the program then prints each op's fraction of the
// triad's bandwidth (medians when repeated). Results are checked before
// timing. Threads: STRATA_BENCH_THREADS (default: the CPU plugin's default,
// every core), the same for the STREAM loops.
#include <omp.h>

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <strata/strata.hpp>
#include <vector>

#include "bench_common.hpp"

namespace {

using namespace strata;

constexpr int64_t kN = int64_t{1} << 24;
int g_threads = 0;

/// Bytes moved per iteration, as GB/s.
void set_bandwidth(benchmark::State& state, double bytes) {
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

std::vector<float>& array(int which) {
  static std::vector<std::vector<float>> arrays(3, std::vector<float>(static_cast<size_t>(kN)));
  return arrays[static_cast<size_t>(which)];
}

// The STREAM loops. Each thread runs its static share of the range through a
// restrict-qualified function compiled for the widest vectors this CPU runs
// (GCC's function multiversioning picks the clone at load time), as the
// plugin's own loops are (backends/cpu/loop_isa.hpp). Written as a plain
// `omp parallel for` over shared pointers, GCC cannot rule out aliasing and
// the triad ran at 24 GB/s at one thread where memcpy moves 43: the ceiling
// must be the memory's, not the loop's.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STRATA_BENCH_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define STRATA_BENCH_CLONES
#endif

STRATA_BENCH_CLONES void copy_range(float* __restrict c, const float* __restrict a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) c[i] = a[i];
}

STRATA_BENCH_CLONES void triad_range(float* __restrict a, const float* __restrict b, const float* __restrict c,
                                     float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

/// fn(begin, end) on each thread's static share of [0, kN).
template <class F>
void in_parallel(F&& fn) {
#pragma omp parallel num_threads(g_threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    fn(kN * t / nt, kN * (t + 1) / nt);
  }
}

void stream_copy(float* c, const float* a) {
  in_parallel([&](int64_t b, int64_t e) { copy_range(c + b, a + b, e - b); });
}

void stream_triad(float* a, const float* b, const float* c, float s) {
  in_parallel([&](int64_t lo, int64_t hi) { triad_range(a + lo, b + lo, c + lo, s, hi - lo); });
}

void BM_StreamCopy(benchmark::State& state) {
  float* a = array(0).data();
  float* c = array(2).data();
#pragma omp parallel for num_threads(g_threads) schedule(static)
  for (int64_t i = 0; i < kN; ++i) a[i] = 1.0f;
  for (auto _ : state) {
    stream_copy(c, a);
    benchmark::ClobberMemory();
  }
  if (c[kN - 1] != 1.0f) state.SkipWithError("copy gave a wrong result");
  set_bandwidth(state, 2.0 * kN * sizeof(float));
}
BENCHMARK(BM_StreamCopy)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_StreamTriad(benchmark::State& state) {
  float* a = array(0).data();
  float* b = array(1).data();
  float* c = array(2).data();
#pragma omp parallel for num_threads(g_threads) schedule(static)
  for (int64_t i = 0; i < kN; ++i) {
    b[i] = 2.0f;
    c[i] = 0.5f;
  }
  const float s = 3.0f;
  for (auto _ : state) {
    stream_triad(a, b, c, s);
    benchmark::ClobberMemory();
  }
  if (a[kN / 2] != 3.5f) state.SkipWithError("triad gave a wrong result");
  set_bandwidth(state, 3.0 * kN * sizeof(float));
}
BENCHMARK(BM_StreamTriad)->Unit(benchmark::kMillisecond)->UseRealTime();

struct OpCase {
  const char* name;
  double bytes_per_element;  // read + written
  Tensor (*run)(const Tensor& a, const Tensor& b);
  double (*expected)(double a, double b);  // of element 0 (a = 0.25, b = 2)
};

const OpCase kCases[] = {
    {"add", 12, [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }},
    {"mul", 12, [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }},
    {"exp", 8, [](const Tensor& a, const Tensor&) { return exp(a); }, [](double a, double) { return std::exp(a); }},
    {"tanh", 8, [](const Tensor& a, const Tensor&) { return tanh(a); }, [](double a, double) { return std::tanh(a); }},
    {"sin", 8, [](const Tensor& a, const Tensor&) { return sin(a); }, [](double a, double) { return std::sin(a); }},
    {"erf", 8, [](const Tensor& a, const Tensor&) { return erf(a); }, [](double a, double) { return std::erf(a); }},
    {"log1p", 8, [](const Tensor& a, const Tensor&) { return log1p(a); }, [](double a, double) { return std::log1p(a); }},
    {"sum", 4, [](const Tensor& a, const Tensor&) { return sum(a); },
     [](double a, double) { return a * static_cast<double>(kN); }},
    {"cast_f32_to_bf16", 6, [](const Tensor& a, const Tensor&) { return a.to(DType::bf16); },
     [](double a, double) { return a; }},
};

void BM_Op(benchmark::State& state) {
  const OpCase& c = kCases[state.range(0)];
  state.SetLabel(c.name);
  Tensor a = full({kN}, 0.25);
  Tensor b = full({kN}, 2.0);
  Tensor y = c.run(a, b);
  const double got = y.to(DType::f64).reshape({-1}).slice(0, 0, 1).item<double>();
  const double want = c.expected(0.25, 2.0);
  if (std::fabs(got - want) > 1e-6 * std::fabs(want) + 1e-6) {
    state.SkipWithError((std::string(c.name) + " gave a wrong result").c_str());
    return;
  }
  for (auto _ : state) {
    Tensor r = c.run(a, b);
    benchmark::DoNotOptimize(r.impl());
  }
  set_bandwidth(state, c.bytes_per_element * static_cast<double>(kN));
}
BENCHMARK(BM_Op)->DenseRange(0, std::size(kCases) - 1)->Unit(benchmark::kMillisecond)->UseRealTime();

/// The console output, plus each case's GB/s (the median when repeated) and
/// label, for the fractions printed at the end.
class BandwidthReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      auto it = r.counters.find("GB/s");
      if (r.error_occurred || it == r.counters.end()) continue;
      const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (!median && r.run_type != Run::RT_Iteration) continue;
      const std::string name = r.report_label.empty() ? r.run_name.function_name : r.report_label;
      if (median || gbps_.count(name) == 0) gbps_[name] = it->second.value;
    }
  }
  void print_fractions() const {
    auto triad = gbps_.find("BM_StreamTriad");
    if (triad == gbps_.end() || triad->second <= 0) return;
    std::printf("\nFraction of the STREAM triad's %.1f GB/s:\n", triad->second);
    for (const auto& [name, gbps] : gbps_) std::printf("  %-20s %7.1f GB/s  %5.0f%%\n", name.c_str(), gbps, 100.0 * gbps / triad->second);
  }

 private:
  std::map<std::string, double> gbps_;
};

}  // namespace

int main(int argc, char** argv) {
  g_threads = strata::bench::bench_threads(omp_get_num_procs());
  strata::bench::configure_cpu_only(g_threads);
  benchmark::Initialize(&argc, argv);
  BandwidthReporter reporter;
  std::printf("threads: %d (Strata's cpu:0 and the STREAM loops)\n", g_threads);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.print_fractions();
  benchmark::Shutdown();
  return 0;
}
