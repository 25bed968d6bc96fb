// f32 GEMM 1024^3, single thread: the CPU plugin (oneDNN) against OpenBLAS's
// cblas_sgemm in the same run (when OpenBLAS was found at configure time).
// Target: Strata >= 0.9x OpenBLAS.
#include <strata/strata.hpp>

#include "bench_common.hpp"

#include <benchmark/benchmark.h>
#ifdef STRATA_HAVE_OPENBLAS
#include <cblas.h>
#endif

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

#ifdef STRATA_HAVE_OPENBLAS
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
#endif

}  // namespace

int main(int argc, char** argv) {
  strata::bench::unpin_openblas(argv);
  // Single-threaded comparison: one thread for the CPU plugin (set before the
  // plugin initialises) and for OpenBLAS.
  strata::bench::configure_cpu_only(1);
  strata::bench::set_openblas_threads(1);
  strata::bench::print_peers("OpenBLAS");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
