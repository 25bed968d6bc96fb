// f32 GEMM 1024^3, single thread: the CPU plugin (oneDNN) against OpenBLAS's
// cblas_sgemm in the same run. Target: Strata >= 0.9x OpenBLAS.
#include <strata/strata.hpp>

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <vector>

namespace {

using namespace strata;

constexpr int64_t kN = 1024;

void set_flops(benchmark::State& state, int64_t n) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(n * n * n), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}

void BM_Strata_Sgemm(benchmark::State& state) {
  int64_t n = state.range(0);
  manual_seed(1);
  Tensor a = randn({n, n});
  Tensor b = randn({n, n});
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
  set_flops(state, n);
}
BENCHMARK(BM_Strata_Sgemm)->Arg(kN)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_OpenBLAS_Sgemm(benchmark::State& state) {
  int n = static_cast<int>(state.range(0));
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, n);
}
BENCHMARK(BM_OpenBLAS_Sgemm)->Arg(kN)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  // Single-threaded comparison: one thread for the CPU plugin (set before the
  // plugin initialises) and for OpenBLAS.
  Config config = Config::builtin_default();
  config.devices["cpu"].threads = 1;
  config.log_level = "warn";
  runtime().configure(config);
  openblas_set_num_threads(1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
