// Implicit differentiation against unrolling: the gradient of a loss of the
// fixed point x* = tanh(x* W + θ) / 2 (batch 32, width 256, f32) with
// respect to W and θ, the fixed point reached by 100 iterations from 0.
//
//  - BM_FixedPointGradient/implicit: fixed_point() (100 iterations with
//    recording off, tolerance 0) and one gradient: the adjoint system
//    (I − ∂f/∂x)ᵀ w = v solved by GMRES with VJPs, then one VJP for W, θ.
//  - BM_FixedPointGradient/unrolled: the 100 iterations recorded on a tape
//    and differentiated through.
//  - BM_TorchUnrolled (with libtorch): the unrolled gradient in libtorch.
// Each reports time per gradient and the counter "peak_MiB": the peak bytes
// allocated above the starting point during one forward + gradient.
// Both Strata variants' gradients are checked against each other before
// timing. One thread each (STRATA_BENCH_THREADS overrides).
#include "bench_common.hpp"

#include <strata/strata.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#ifdef STRATA_HAVE_TORCH
#include <torch/torch.h>
#endif

namespace {

using namespace strata;

constexpr int64_t kBatch = 32;
constexpr int64_t kWidth = 256;
constexpr int64_t kIterations = 100;

struct Problem {
  Tensor w, theta, weights;
  Problem() {
    manual_seed(3);
    w = randn({kWidth, kWidth}) * (0.5 / std::sqrt(static_cast<double>(kWidth)));
    theta = randn({kWidth});
    weights = randn({kBatch, kWidth});
  }
  static Tensor step(const Tensor& x, const std::vector<Tensor>& p) { return tanh(matmul(x, p[0]) + p[1]) * 0.5; }
  Tensor start() const { return zeros({kBatch, kWidth}); }
};

Problem& problem() {
  static Problem p;
  return p;
}

std::vector<Tensor> implicit_gradient(const Problem& p) {
  GradientTape tape;
  tape.watch(p.w);
  tape.watch(p.theta);
  ImplicitOptions o{.tolerance = 0.0, .max_iterations = kIterations, .on_nonconvergence = OnNonconvergence::accept};
  ImplicitSolution s = fixed_point(Problem::step, p.start(), {p.w, p.theta}, o);
  return tape.gradient(sum(s.x * p.weights), {p.w, p.theta});
}

std::vector<Tensor> unrolled_gradient(const Problem& p) {
  GradientTape tape;
  tape.watch(p.w);
  tape.watch(p.theta);
  Tensor x = p.start();
  for (int64_t k = 0; k < kIterations; ++k) x = Problem::step(x, {p.w, p.theta});
  return tape.gradient(sum(x * p.weights), {p.w, p.theta});
}

double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<double> x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    double scale = 0.0;
    for (double v : y) scale = std::max(scale, std::fabs(v));
    for (size_t j = 0; j < x.size(); ++j) worst = std::max(worst, std::fabs(x[j] - y[j]) / scale);
  }
  return worst;
}

void BM_FixedPointGradient(benchmark::State& state) {
  const bool implicit = state.range(0) == 0;
  Problem& p = problem();
  const double difference = max_relative_difference(implicit_gradient(p), unrolled_gradient(p));
  if (!(difference < 1e-4)) {
    state.SkipWithError(("implicit and unrolled gradients differ by " + std::to_string(difference)).c_str());
    return;
  }
  uint64_t peak = 0;
  {
    MemoryScope memory(p.w.device());
    std::vector<Tensor> g = implicit ? implicit_gradient(p) : unrolled_gradient(p);
    benchmark::DoNotOptimize(g[0].impl());
    peak = memory.peak_bytes();
  }
  for (auto _ : state) {
    std::vector<Tensor> g = implicit ? implicit_gradient(p) : unrolled_gradient(p);
    runtime().synchronize(g[0].device());
  }
  state.counters["peak_MiB"] = static_cast<double>(peak) / (1 << 20);
  state.SetLabel(implicit ? "implicit" : "unrolled");
}

double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double maximum(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

BENCHMARK(BM_FixedPointGradient)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", minimum)
    ->ComputeStatistics("max", maximum);

#ifdef STRATA_HAVE_TORCH
void BM_TorchUnrolled(benchmark::State& state) {
  Problem& p = problem();
  auto to_torch = [](const Tensor& t) {
    std::vector<float> v = t.to_vector<float>();
    const Shape shape = t.sizes();
    return torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, torch::kFloat32).clone().reshape(shape);
  };
  torch::Tensor w = to_torch(p.w).requires_grad_(), theta = to_torch(p.theta).requires_grad_();
  torch::Tensor weights = to_torch(p.weights);
  auto gradient = [&] {
    torch::Tensor x = torch::zeros({kBatch, kWidth});
    for (int64_t k = 0; k < kIterations; ++k) x = torch::tanh(torch::matmul(x, w) + theta) * 0.5;
    return torch::autograd::grad({(x * weights).sum()}, {w, theta});
  };
  // Checked against Strata's unrolled gradient before timing.
  std::vector<torch::Tensor> tg = gradient();
  std::vector<Tensor> sg = unrolled_gradient(p);
  std::vector<Tensor> as_strata;
  for (const torch::Tensor& t : tg) {
    torch::Tensor c = t.contiguous();
    as_strata.push_back(from_data(std::span<const float>(c.data_ptr<float>(), static_cast<size_t>(c.numel())),
                                  std::vector<int64_t>(c.sizes().begin(), c.sizes().end())));
  }
  const double difference = max_relative_difference(as_strata, sg);
  if (!(difference < 1e-4)) {
    state.SkipWithError(("libtorch's gradient differs from Strata's by " + std::to_string(difference)).c_str());
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(gradient());
  state.SetLabel("libtorch unrolled");
}
BENCHMARK(BM_TorchUnrolled)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->ComputeStatistics("min", minimum)
    ->ComputeStatistics("max", maximum);
#endif

}  // namespace

int main(int argc, char** argv) {
  strata::bench::unpin_openblas(argv);
  const int threads = strata::bench::bench_threads(1);
  strata::bench::configure_cpu_only(threads);
#ifdef STRATA_HAVE_TORCH
  torch::set_num_threads(threads);
  strata::bench::set_openblas_threads(threads);
#endif
  strata::bench::print_peers();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
