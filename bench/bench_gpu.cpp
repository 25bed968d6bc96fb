// bench_gpu.cpp — the CUDA (or HIP) plugin's performance targets
// (docs/performance.md, "GPU"). Its peer is PyTorch on the same GPU:
// bench/gpu_torch_peer.py prints the same cases, and the ratios are taken
// from one run of both on one machine (tools/run-gpu-bench.sh).
//
//   BM_GpuCopy/n        device-to-device copy of n f32 (the bandwidth reference)
//   BM_GpuAdd/n         c = a + b on n f32 (target: >= 85% of the copy's bytes/s)
//   BM_GpuMatmul/dtype  8192^3 matmul in f16 (0), bf16 (1) and f32 (2, no TF32 on either side)
//                       (target: >= 0.95x torch.matmul)
//   BM_GpuQueuedAdds    10,000 one-element adds queued, then one sync (target: <= 0.6x PyTorch's time per op)
//   BM_GpuMlpStep/amp   the digits MLP's training step (64 -> 128 -> 128 -> 10, ReLU, batch 64,
//                       cross-entropy, backward, SGD), f32 (0) or under bf16 autocast (1)
//                       (target: <= 1.0x PyTorch eager's time)
//   BM_GpuMlpHvp        Hessian-vector product (forward-over-reverse) of a 3-layer tanh MLP's loss
//                       (batch 64, width 512) in its first weight (target: <= 1.0x torch.func.jvp(grad))
//
// The device is $STRATA_BENCH_GPU (default cuda:0). Without it every case is
// skipped with the plugin's reason; results are checked before timing.
// tools/verify-gpu.sh --dry-run runs the cases but the matmuls on cpu:0,
// which proves the program, not a figure.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <span>
#include <strata/strata.hpp>
#include <string>
#include <vector>

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
  const DType dtype = state.range(0) == 0 ? DType::f16 : state.range(0) == 1 ? DType::bf16 : DType::f32;
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
BENCHMARK(BM_GpuMatmul)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

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

/// The digits MLP of examples/example_digits.cpp on `dev`, and a batch of
/// 64 random images with random labels (the peer draws its own: only the
/// shapes and the work are the same).
struct DigitsStep {
  nn::Sequential model;
  Tensor x, y;
  explicit DigitsStep(Device dev) {
    manual_seed(5);
    model.emplace_back<nn::Linear>(64, 128);
    model.emplace_back<nn::ReLU>();
    model.emplace_back<nn::Linear>(128, 128);
    model.emplace_back<nn::ReLU>();
    model.emplace_back<nn::Linear>(128, 10);
    model.to(dev);
    x = randn({64, 64}, {.device = dev});
    std::vector<int64_t> labels(64);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7 + 3) % 10);
    y = from_data(std::span<const int64_t>(labels), {64}).to(dev);
  }
};

void BM_GpuMlpStep(benchmark::State& state) {
  auto dev = gpu_or_skip(state);
  if (!dev) return;
  const bool bf16 = state.range(0) == 1;
  DigitsStep s(*dev);
  nn::SGD opt(s.model.parameters(), {.lr = 0.05});
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<Autocast> scope;
      if (bf16) scope.emplace(AutocastOptions{.dtype = DType::bf16, .device = *dev});
      loss = nn::functional::cross_entropy(cast(s.model(s.x), DType::f32), s.y);
    }
    loss.backward();
    opt.step();
    return loss;
  };
  // Checked before timing: a fresh model's loss is near ln(10), and a few
  // steps on one batch lower it.
  const double first = step().item<double>();
  for (int i = 0; i < 20; ++i) step();
  const double later = step().item<double>();
  if (!(std::fabs(first - std::log(10.0)) < 0.5 && later < first)) {
    const std::string why = "the step is wrong: loss " + std::to_string(first) + " then " + std::to_string(later);
    state.SkipWithError(why.c_str());
    return;
  }
  runtime().synchronize(*dev);
  for (auto _ : state) {
    Tensor loss = step();
    runtime().synchronize(*dev);
    benchmark::DoNotOptimize(loss.impl());
  }
  state.SetLabel(bf16 ? "autocast bf16" : "f32");
}
BENCHMARK(BM_GpuMlpStep)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_GpuMlpHvp(benchmark::State& state) {
  auto dev = gpu_or_skip(state);
  if (!dev) return;
  manual_seed(7);
  const Tensor x = randn({64, 512}, {.device = *dev});
  const Tensor w1 = randn({512, 512}, {.device = *dev}) * (1.0 / 22.6);
  const Tensor w2 = randn({512, 512}, {.device = *dev}) * (1.0 / 22.6);
  const Tensor w3 = randn({512, 512}, {.device = *dev}) * (1.0 / 22.6);
  const Tensor v = randn({512, 512}, {.device = *dev});
  auto loss = [&](const Tensor& w) {
    Tensor h = tanh(matmul(tanh(matmul(tanh(matmul(x, w)), w2)), w3));
    return mean(h * h);
  };
  // Checked before timing: forward-over-reverse against reverse-over-reverse
  // (two exact ways to the same product; f32 rounding apart).
  const Tensor hv = hvp(loss, w1, v);
  const Tensor rr = hvp(loss, w1, v, HvpMode::reverse_over_reverse);
  const double err = amax(abs(hv - rr)).item<double>(), scale = amax(abs(rr)).item<double>();
  if (!(err <= 1e-3 * scale)) {
    state.SkipWithError(("forward-over-reverse HVP differs from reverse-over-reverse by " + std::to_string(err) +
                         " (largest element " + std::to_string(scale) + ")")
                            .c_str());
    return;
  }
  runtime().synchronize(*dev);
  for (auto _ : state) {
    Tensor r = hvp(loss, w1, v);
    runtime().synchronize(*dev);
    benchmark::DoNotOptimize(r.impl());
  }
  state.SetLabel("forward-over-reverse");
}
BENCHMARK(BM_GpuMlpHvp)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
