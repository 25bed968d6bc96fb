// bench_gpu.cpp — the CUDA (or HIP) plugin's performance targets
// (docs/performance.md, "GPU"). Its peer is PyTorch on the same GPU:
// bench/gpu_torch_peer.py prints the same cases, and the ratios are taken
// from one run of both on one machine (tools/run-gpu-bench.sh).
//
//   BM_GpuCopy/n        device-to-device copy of n f32 (the bandwidth reference)
//   BM_GpuAdd/n         c = a + b on n f32 (target: >= 85% of the copy's bytes/s)
//   BM_GpuMatmul/dtype  8192^3 matmul in f16 (0) and bf16 (1) (target: >= 0.9x torch.matmul)
//   BM_GpuQueuedAdds    10,000 one-element adds queued, then one sync (target: <= PyTorch)
//
// The device is $STRATA_BENCH_GPU (default cuda:0). Without it every case is
// skipped with the plugin's reason; results are checked before timing.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <strata/strata.hpp>
#include <string>

namespace {

using namespace strata;

std::string gpu_id() {
  const char* env = std::getenv("STRATA_BENCH_GPU");
  return env != nullptr && *env != '\0' ? env : "cuda:0";
}

std::optional<Device> gpu_or_skip(benchmark::State& state) {
  const std::string id = gpu_id();
  try {
    return Device(id);
  } catch (const Error& e) {
    std::string reason = id + " not available: " + e.what();
    const std::string plugin = id.substr(0, id.find(':'));
    for (const PluginInfo& p : runtime().plugins()) {
      if (p.name == plugin && !p.loaded) reason += "; plugin " + plugin + " refused: " + p.reason;
    }
    state.SkipWithError(reason.c_str());
    return std::nullopt;
  }
}

void set_bytes(benchmark::State& state, int64_t bytes_per_iteration) {
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes_per_iteration) * 1e-9 *
                                                  static_cast<double>(state.iterations()),
                                              benchmark::Counter::kIsRate);
}

void BM_GpuCopy(benchmark::State& state) {
  auto dev = gpu_or_skip(state);
  if (!dev) return;
  const int64_t n = state.range(0);
  Tensor x = full({n}, 1.5, {.device = *dev});
  Tensor y = x.clone();
  if (amax(y).item<double>() != 1.5 || amin(y).item<double>() != 1.5) {
    state.SkipWithError("copy gave a wrong result");
    return;
  }
  runtime().synchronize(*dev);
  for (auto _ : state) {
    Tensor c = x.clone();
    runtime().synchronize(*dev);
    benchmark::DoNotOptimize(c.impl());
  }
  set_bytes(state, 2 * n * 4);
}
BENCHMARK(BM_GpuCopy)->Arg(int64_t{1} << 26)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GpuAdd(benchmark::State& state) {
  auto dev = gpu_or_skip(state);
  if (!dev) return;
  const int64_t n = state.range(0);
  Tensor a = full({n}, 1.25, {.device = *dev});
  Tensor b = full({n}, 2.0, {.device = *dev});
  Tensor check = add(a, b);
  if (amax(check).item<double>() != 3.25 || amin(check).item<double>() != 3.25) {
    state.SkipWithError("add gave a wrong result");
    return;
  }
  runtime().synchronize(*dev);
  for (auto _ : state) {
    Tensor c = add(a, b);
    runtime().synchronize(*dev);
    benchmark::DoNotOptimize(c.impl());
  }
  set_bytes(state, 3 * n * 4);
}
BENCHMARK(BM_GpuAdd)->Arg(int64_t{1} << 26)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GpuMatmul(benchmark::State& state) {
  auto dev = gpu_or_skip(state);
  if (!dev) return;
  const DType dtype = state.range(0) == 0 ? DType::f16 : DType::bf16;
  constexpr int64_t kN = 8192;
  manual_seed(1);
  Tensor a = randn({kN, kN}, {.device = *dev}).to(dtype);
  Tensor b = randn({kN, kN}, {.device = *dev}).to(dtype);
  // Checked against an f32 product on a corner, before timing.
  Tensor c = matmul(a, b);
  Tensor ref = matmul(a.slice(0, 0, 4).to(DType::f32), b.slice(1, 0, 4).to(DType::f32));
  const double err = amax(abs(sub(c.slice(0, 0, 4).slice(1, 0, 4).to(DType::f32), ref))).item<double>();
  if (!(err < 2.0)) {  // |c| ~ sqrt(8192) ~ 90; 16-bit outputs round at ~0.5
    state.SkipWithError(("matmul differs from the f32 reference by " + std::to_string(err)).c_str());
    return;
  }
  runtime().synchronize(*dev);
  for (auto _ : state) {
    Tensor y = matmul(a, b);
    runtime().synchronize(*dev);
    benchmark::DoNotOptimize(y.impl());
  }
  state.SetLabel(std::string(dtype_name(dtype)));
  state.counters["TFLOP/s"] = benchmark::Counter(2.0 * std::pow(static_cast<double>(kN), 3) * 1e-12 *
                                                     static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GpuMatmul)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GpuQueuedAdds(benchmark::State& state) {
  auto dev = gpu_or_skip(state);
  if (!dev) return;
  constexpr int kOps = 10000;
  Tensor one = full({1}, 1.0, {.device = *dev});
  Tensor x = zeros({1}, {.device = *dev});
  for (auto _ : state) {
    for (int k = 0; k < kOps; ++k) x = add(x, one);
    runtime().synchronize(*dev);
  }
  state.counters["s/op"] =
      benchmark::Counter(static_cast<double>(kOps) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  const double expected = static_cast<double>(kOps) * static_cast<double>(state.iterations());
  if (x.item<double>() != expected) state.SkipWithError("the queued adds gave a wrong sum");
}
BENCHMARK(BM_GpuQueuedAdds)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
