// Autograd benchmarks, with libtorch measured in the same run when
// it is installed (tools/install-bench-deps.sh):
//  - tiny-op chain: 500 steps of y = y*c + d on 1-element f32 tensors,
//    forward + backward; time per step (two ops). Target <= 1/3 of libtorch.
//  - HVP on a 3-layer tanh MLP (width 512, batch 64) vs the gradient alone,
//    and vs libtorch's double-backward HVP. Target HVP <= 2.5x gradient.
//  - higher-order tracking overhead: peak allocator bytes while taking a
//    first-order gradient with higher_order on vs off. Target <= 1.2x.
#include <strata/strata.hpp>

#include "bench_common.hpp"

#include <benchmark/benchmark.h>

#ifdef STRATA_HAVE_TORCH
#include <torch/torch.h>
#endif

namespace {

using namespace strata;

constexpr int kChain = 500;

void BM_Strata_TinyChain(benchmark::State& state) {
  Tensor x = full({1}, 1.0, {.requires_grad = true});
  Tensor c = full({1}, 0.999);
  Tensor d = full({1}, 0.001);
  for (auto _ : state) {
    Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = y * c + d;
    y.backward();
    x.zero_grad();
  }
  state.counters["us_per_step"] = benchmark::Counter(static_cast<double>(state.iterations()) * kChain,
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert,
                                                     benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Strata_TinyChain)->Unit(benchmark::kMicrosecond);

struct Mlp {
  Tensor x, w1, w2, w3;
  Mlp() {
    manual_seed(7);
    x = randn({64, 512});
    w1 = randn({512, 512}) * (1.0 / 22.6);
    w2 = randn({512, 512}) * (1.0 / 22.6);
    w3 = randn({512, 512}) * (1.0 / 22.6);
  }
  Tensor loss(const Tensor& first) const {
    Tensor h = tanh(matmul(tanh(matmul(tanh(matmul(x, first)), w2)), w3));
    return mean(h * h);
  }
};

void BM_Strata_MlpGradient(benchmark::State& state) {
  Mlp m;
  for (auto _ : state) {
    Tensor g = grad([&](const Tensor& w) { return m.loss(w); })(m.w1);
    benchmark::DoNotOptimize(g.impl());
  }
}
BENCHMARK(BM_Strata_MlpGradient)->Unit(benchmark::kMillisecond);

void BM_Strata_MlpHvp(benchmark::State& state) {
  Mlp m;
  Tensor v = randn({512, 512});
  auto mode = state.range(0) == 0 ? HvpMode::forward_over_reverse : HvpMode::reverse_over_reverse;
  for (auto _ : state) {
    Tensor hv = hvp([&](const Tensor& w) { return m.loss(w); }, m.w1, v, mode);
    benchmark::DoNotOptimize(hv.impl());
  }
  state.SetLabel(state.range(0) == 0 ? "forward-over-reverse" : "reverse-over-reverse");
}
BENCHMARK(BM_Strata_MlpHvp)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_Strata_HigherOrderMemory(benchmark::State& state) {
  Mlp m;
  bool higher = state.range(0) != 0;
  Device dev = m.x.device();
  uint64_t peak = 0;
  for (auto _ : state) {
    runtime().empty_cache();
    runtime().reset_peak_memory(dev);
    uint64_t before = runtime().memory_stats(dev).allocated_bytes;
    GradientTape tape({.higher_order = higher});
    Tensor w = m.w1;
    tape.watch(w);
    Tensor g = tape.gradient(m.loss(w), {w})[0];
    benchmark::DoNotOptimize(g.impl());
    peak = std::max<uint64_t>(peak, runtime().memory_stats(dev).peak_allocated_bytes - before);
  }
  state.counters["peak_MiB"] = static_cast<double>(peak) / (1 << 20);
  state.SetLabel(higher ? "higher_order on" : "higher_order off");
}
BENCHMARK(BM_Strata_HigherOrderMemory)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);

#ifdef STRATA_HAVE_TORCH
void BM_Torch_TinyChain(benchmark::State& state) {
  torch::Tensor x = torch::ones({1}, torch::requires_grad());
  torch::Tensor c = torch::full({1}, 0.999);
  torch::Tensor d = torch::full({1}, 0.001);
  for (auto _ : state) {
    torch::Tensor y = x;
    for (int i = 0; i < kChain; ++i) y = y * c + d;
    y.backward();
    x.mutable_grad().reset();
  }
  state.counters["us_per_step"] = benchmark::Counter(static_cast<double>(state.iterations()) * kChain,
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert,
                                                     benchmark::Counter::kIs1000);
}
BENCHMARK(BM_Torch_TinyChain)->Unit(benchmark::kMicrosecond);

struct TorchMlp {
  torch::Tensor x, w1, w2, w3;
  TorchMlp() {
    torch::manual_seed(7);
    x = torch::randn({64, 512});
    w1 = (torch::randn({512, 512}) / 22.6).requires_grad_();
    w2 = torch::randn({512, 512}) / 22.6;
    w3 = torch::randn({512, 512}) / 22.6;
  }
  torch::Tensor loss() const {
    torch::Tensor h = torch::tanh(torch::matmul(torch::tanh(torch::matmul(torch::tanh(torch::matmul(x, w1)), w2)), w3));
    return (h * h).mean();
  }
};

void BM_Torch_MlpGradient(benchmark::State& state) {
  TorchMlp m;
  for (auto _ : state) {
    auto g = torch::autograd::grad({m.loss()}, {m.w1});
    benchmark::DoNotOptimize(g[0].data_ptr());
  }
}
BENCHMARK(BM_Torch_MlpGradient)->Unit(benchmark::kMillisecond);

void BM_Torch_MlpHvpDoubleBackward(benchmark::State& state) {
  TorchMlp m;
  torch::Tensor v = torch::randn({512, 512});
  for (auto _ : state) {
    auto g = torch::autograd::grad({m.loss()}, {m.w1}, {}, true, true);
    auto hv = torch::autograd::grad({(g[0] * v).sum()}, {m.w1});
    benchmark::DoNotOptimize(hv[0].data_ptr());
  }
}
BENCHMARK(BM_Torch_MlpHvpDoubleBackward)->Unit(benchmark::kMillisecond);
#endif

}  // namespace

int main(int argc, char** argv) {
  strata::bench::unpin_openblas(argv);
#ifdef STRATA_HAVE_TORCH
  torch::set_num_threads(1);
  strata::bench::set_openblas_threads(1);
#endif
  strata::bench::configure_cpu_only(1);  // both sides single-threaded
  strata::bench::print_peers();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
