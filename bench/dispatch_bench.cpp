// Eager dispatch overhead: one op on one-element tensors, no autograd.
// Target: <= 0.3 us per tiny f32 add on the CPU plugin.
#include <strata/strata.hpp>

#include <benchmark/benchmark.h>

namespace {

using namespace strata;

void BM_TinyAdd(benchmark::State& state) {
  Tensor a = full({1}, 1.0);
  Tensor b = full({1}, 2.0);
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TinyAdd);

void BM_TinyAddBroadcastScalar(benchmark::State& state) {
  Tensor a = full({1}, 1.0);
  Tensor b = scalar_tensor(2.0);
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.impl());
  }
}
BENCHMARK(BM_TinyAddBroadcastScalar);

void BM_TinyView(benchmark::State& state) {
  Tensor a = full({4, 4}, 1.0);
  for (auto _ : state) {
    Tensor v = a.transpose(0, 1);
    benchmark::DoNotOptimize(v.impl());
  }
}
BENCHMARK(BM_TinyView);

}  // namespace

BENCHMARK_MAIN();
