// The Vulkan plugin: matmul throughput and per-op launch overhead on
// vulkan:0, against a naive triple-loop matmul and the CPU plugin (cpu:0).
// Every timed iteration ends with a synchronisation, so queued work is
// counted. Run with --benchmark_repetitions=5 and quote medians
// (docs/performance.md); on a machine without Vulkan the vulkan:0 cases are
// reported as errors with the reason.
#include <benchmark/benchmark.h>

#include <strata/strata.hpp>
#include <string>
#include <vector>

namespace {

using namespace strata;

constexpr int64_t kN = 512;

/// vulkan:0, or nullopt after marking the benchmark as skipped with the reason.
std::optional<Device> vulkan_or_skip(benchmark::State& state) {
  try {
    return Device("vulkan:0");
  } catch (const Error&) {
    std::string reason = "vulkan:0 not available";
    for (const PluginInfo& p : runtime().plugins()) {
      if (p.name == "vulkan" && !p.loaded) reason += ": " + p.reason;
    }
    state.SkipWithError(reason.c_str());
    return std::nullopt;
  }
}

void set_flops(benchmark::State& state, int64_t n) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) * 1e-9 *
                             static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void BM_MatmulVulkan(benchmark::State& state) {
  auto dev = vulkan_or_skip(state);
  if (!dev) return;
  manual_seed(1);
  Tensor a = randn({kN, kN}, {.device = *dev});
  Tensor b = randn({kN, kN}, {.device = *dev});
  Tensor warm = matmul(a, b);  // pipeline creation outside the timing
  runtime().synchronize(*dev);
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    runtime().synchronize(*dev);
    benchmark::DoNotOptimize(c.impl());
  }
  set_flops(state, kN);
}
BENCHMARK(BM_MatmulVulkan)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_MatmulCpuPlugin(benchmark::State& state) {
  Device cpu("cpu:0");
  manual_seed(1);
  Tensor a = randn({kN, kN}, {.device = cpu});
  Tensor b = randn({kN, kN}, {.device = cpu});
  for (auto _ : state) {
    Tensor c = matmul(a, b);
    runtime().synchronize(cpu);
    benchmark::DoNotOptimize(c.impl());
  }
  set_flops(state, kN);
}
BENCHMARK(BM_MatmulCpuPlugin)->Unit(benchmark::kMillisecond)->UseRealTime();

/// The textbook i-j-k loop on host vectors: the floor any backend must beat.
void BM_MatmulNaiveLoops(benchmark::State& state) {
  std::vector<float> a(static_cast<size_t>(kN * kN)), b(a.size()), c(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 17) * 0.1f;
    b[i] = static_cast<float>(i % 13) * 0.2f;
  }
  for (auto _ : state) {
    for (int64_t i = 0; i < kN; ++i) {
      for (int64_t j = 0; j < kN; ++j) {
        float s = 0;
        for (int64_t k = 0; k < kN; ++k) s += a[static_cast<size_t>(i * kN + k)] * b[static_cast<size_t>(k * kN + j)];
        c[static_cast<size_t>(i * kN + j)] = s;
      }
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_flops(state, kN);
}
BENCHMARK(BM_MatmulNaiveLoops)->Unit(benchmark::kMillisecond)->UseRealTime();

/// Launch overhead: range(0) one-element adds, then one synchronisation.
/// items/s is ops per second (per-op cost = 1 / items_per_second).
void add_chain(benchmark::State& state, Device dev) {
  const int64_t ops = state.range(0);
  Tensor a = full({1}, 1.0, {.device = dev});
  Tensor b = full({1}, 2.0, {.device = dev});
  Tensor warm = add(a, b);
  runtime().synchronize(dev);
  for (auto _ : state) {
    Tensor c = a;
    for (int64_t i = 0; i < ops; ++i) c = add(c, b);
    runtime().synchronize(dev);
    benchmark::DoNotOptimize(c.impl());
  }
  state.SetItemsProcessed(state.iterations() * ops);
}

void BM_TinyAddVulkan(benchmark::State& state) {
  if (auto dev = vulkan_or_skip(state)) add_chain(state, *dev);
}
BENCHMARK(BM_TinyAddVulkan)->Arg(1)->Arg(100)->Arg(1000)->UseRealTime();

void BM_TinyAddCpuPlugin(benchmark::State& state) { add_chain(state, Device("cpu:0")); }
BENCHMARK(BM_TinyAddCpuPlugin)->Arg(1)->Arg(1000)->UseRealTime();

/// A host read after every op: the round trip a synchronous caller pays.
void BM_TinyAddReadBackVulkan(benchmark::State& state) {
  auto dev = vulkan_or_skip(state);
  if (!dev) return;
  Tensor a = full({1}, 1.0, {.device = *dev});
  Tensor b = full({1}, 2.0, {.device = *dev});
  for (auto _ : state) {
    Tensor c = add(a, b);
    benchmark::DoNotOptimize(c.item<float>());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TinyAddReadBackVulkan)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
