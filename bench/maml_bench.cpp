// MAML benchmark: one second-order MAML meta-step (Finn et al. 2017's sine
// regression setup, as examples/example_maml.cpp runs it) in Strata and in
// libtorch, in the same run.
//
// The meta-step: a meta-batch of 25 tasks, each with K = 10 support and 10
// query points (x in [-5, 5], y = A·sin(x − φ)); the model an MLP 1-40-40-1
// with ReLU (1,761 parameters, f32). Per task, `inner` SGD steps (lr 0.01)
// on the support set with the inner gradients kept differentiable, then the
// query loss at the adapted parameters; the meta-loss is the mean over the
// tasks, its gradient flows back through every inner step (double
// backward), and one Adam step (lr 1e-3) updates the meta-parameters.
// Inner steps: 1 and 5 (the benchmarks' "/inner1" and "/inner5").
//  - BM_Strata_MamlStep: the example's program — the model an nn::Sequential
//    run with substituted parameters through nn::functional_call, inner
//    gradients from a GradientTape with higher_order, the inner update
//    nn::functional::sgd, the outer update nn::Adam.
//  - BM_Strata_MamlStepExplicit: the same with the network written as a
//    function of explicit parameter tensors (functional::linear, relu) and
//    the inner update written out (θ − α·g) — the shape of the libtorch
//    program, so the difference to BM_Strata_MamlStep is what the Module
//    plumbing and the functional optimizer cost.
//  - BM_Torch_MamlStep: libtorch 1.13, the network as a function of explicit
//    parameter tensors (torch::linear, torch::relu), inner gradients from
//    torch::autograd::grad(..., create_graph = true), θ − α·g, meta-loss
//    backward(), torch::optim::Adam — what higher/learn2learn do in Python.
// Same initial weights (PyTorch's default init, drawn on the host) and the
// same tasks on both sides. Before timing, main() computes the meta-loss and
// meta-gradient of each program for 1 and 5 inner steps from those weights
// and refuses to run unless they agree (Strata's two programs bit for bit,
// Strata and libtorch to 1e-4 relative in f32).
// Both sides run one thread (devices.cpu.threads = 1; torch::set_num_threads
// (1)), STRATA_BENCH_THREADS=N sets another count on both. After the runs
// the program prints the ratios (medians when repeated), in real and CPU
// time.
#include <strata/strata.hpp>

#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#ifdef STRATA_HAVE_TORCH
#include <torch/torch.h>
#endif

namespace {

using namespace strata;
using strata::bench::RatioReporter;
namespace F = strata::nn::functional;

constexpr int kTasks = 25;
constexpr int64_t kShots = 10;
constexpr double kInnerLr = 0.01;
constexpr double kMetaLr = 1e-3;
/// The layers' (in, out) features: 1-40-40-1.
constexpr int64_t kLayers[3][2] = {{1, 40}, {40, 40}, {40, 1}};

// --- the same weights and tasks for both frameworks (host data) --------------

struct HostTensor {
  std::vector<float> values;
  std::vector<int64_t> shape;
};

/// w0, b0, w1, b1, w2, b2 as PyTorch initialises Linear: uniform ±1/√in.
const std::vector<HostTensor>& initial_weights() {
  static const std::vector<HostTensor> weights = [] {
    std::mt19937_64 rng(5);
    std::vector<HostTensor> out;
    for (const auto& [in, outf] : kLayers) {
      std::uniform_real_distribution<float> u(-1.0f / std::sqrt(static_cast<float>(in)),
                                              1.0f / std::sqrt(static_cast<float>(in)));
      HostTensor w{std::vector<float>(static_cast<size_t>(in * outf)), {outf, in}};
      HostTensor b{std::vector<float>(static_cast<size_t>(outf)), {outf}};
      for (float& v : w.values) v = u(rng);
      for (float& v : b.values) v = u(rng);
      out.push_back(std::move(w));
      out.push_back(std::move(b));
    }
    return out;
  }();
  return weights;
}

struct HostTask {
  std::vector<float> x_support, y_support, x_query, y_query;
};

const std::vector<HostTask>& tasks() {
  static const std::vector<HostTask> all = [] {
    std::mt19937_64 rng(6);
    auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
    std::vector<HostTask> out;
    for (int t = 0; t < kTasks; ++t) {
      const double amplitude = uniform(0.1, 5.0), phase = uniform(0.0, std::numbers::pi);
      HostTask task;
      for (auto* xy : {&task.x_support, &task.x_query}) {
        auto& y = xy == &task.x_support ? task.y_support : task.y_query;
        for (int64_t i = 0; i < kShots; ++i) {
          const double x = uniform(-5.0, 5.0);
          xy->push_back(static_cast<float>(x));
          y.push_back(static_cast<float>(amplitude * std::sin(x - phase)));
        }
      }
      out.push_back(std::move(task));
    }
    return out;
  }();
  return all;
}

/// A program's result for the check: the meta-loss and the meta-gradient.
struct MetaResult {
  double loss = 0.0;
  std::vector<std::vector<float>> gradient;
};

// --- Strata ----------------------------------------------------------------------

struct StrataTask {
  Tensor x_support, y_support, x_query, y_query;
};

std::vector<StrataTask> strata_tasks() {
  std::vector<StrataTask> out;
  for (const HostTask& t : tasks()) {
    out.push_back({from_data(t.x_support, {kShots, 1}), from_data(t.y_support, {kShots, 1}),
                   from_data(t.x_query, {kShots, 1}), from_data(t.y_query, {kShots, 1})});
  }
  return out;
}

/// The network as a function of explicit parameters [w0, b0, w1, b1, w2, b2].
Tensor strata_mlp(const std::vector<Tensor>& p, const Tensor& x) {
  Tensor h = relu(nn::functional::linear(x, p[0], p[1]));
  h = relu(nn::functional::linear(h, p[2], p[3]));
  return nn::functional::linear(h, p[4], p[5]);
}

/// One MAML learner in Strata; `module` picks the example's program
/// (functional_call + functional::sgd) or the explicit one.
class StrataMaml {
 public:
  explicit StrataMaml(bool module) : module_(module), tasks_(strata_tasks()) {
    for (const auto& [in, out] : kLayers) {
      model_.emplace_back<nn::Linear>(in, out);
      if (out != 1) model_.emplace_back<nn::ReLU>();
    }
    std::vector<Tensor> params = model_.parameters();
    NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].copy_(from_data(initial_weights()[i].values, initial_weights()[i].shape));
    }
    optimizer_ = std::make_unique<nn::Adam>(params, nn::AdamOptions{.lr = kMetaLr});
  }

  Tensor meta_loss(int inner_steps) {
    const std::vector<Tensor> theta = model_.parameters();
    Tensor total;
    for (const StrataTask& task : tasks_) {
      std::vector<Tensor> fast = theta;
      F::SGDState state;
      for (int k = 0; k < inner_steps; ++k) {
        GradientTape tape({.higher_order = true});
        for (const Tensor& p : fast) tape.watch(p);
        Tensor loss = nn::functional::mse_loss(forward(fast, task.x_support), task.y_support);
        std::vector<Tensor> g = tape.gradient(loss, fast);
        if (module_) {
          F::SGDStepResult r = F::sgd(fast, g, state, {.lr = kInnerLr});
          fast = std::move(r.params);
          state = std::move(r.state);
        } else {
          for (size_t i = 0; i < fast.size(); ++i) fast[i] = fast[i] - g[i] * kInnerLr;
        }
      }
      Tensor query = nn::functional::mse_loss(forward(fast, task.x_query), task.y_query);
      total = total.defined() ? total + query : query;
    }
    return total / static_cast<double>(tasks_.size());
  }

  /// One meta-step; returns the meta-loss (a 0-d tensor, not read back).
  Tensor step(int inner_steps) {
    optimizer_->zero_grad();
    Tensor loss = meta_loss(inner_steps);
    loss.backward();
    optimizer_->step();
    return loss;
  }

  MetaResult check(int inner_steps) {
    optimizer_->zero_grad();
    Tensor loss = meta_loss(inner_steps);
    loss.backward();
    MetaResult r{loss.item<double>(), {}};
    for (const Tensor& p : model_.parameters()) r.gradient.push_back(p.grad().to_vector<float>());
    optimizer_->zero_grad();
    return r;
  }

 private:
  Tensor forward(const std::vector<Tensor>& params, const Tensor& x) {
    return module_ ? nn::functional_call(model_, params, x) : strata_mlp(params, x);
  }

  bool module_;
  std::vector<StrataTask> tasks_;
  nn::Sequential model_;
  std::unique_ptr<nn::Adam> optimizer_;
};

void run_strata(benchmark::State& state, bool module, int inner_steps) {
  StrataMaml maml(module);
  Tensor first = maml.step(inner_steps);  // warm-up: allocator cache, primitives
  for (auto _ : state) {
    Tensor loss = maml.step(inner_steps);
    runtime().synchronize(loss.device());
    benchmark::DoNotOptimize(loss.impl());
  }
  state.counters["first_meta_loss"] = first.item<double>();
  state.SetLabel(std::to_string(kTasks) + " tasks, " + std::to_string(inner_steps) + " inner step" +
                 (inner_steps == 1 ? "" : "s"));
}

// Named by capture ("BM_Strata_MamlStep/inner1"), not by argument, so that
// the reporter keeps one time per inner-step count.
void BM_Strata_MamlStep(benchmark::State& state, int inner_steps) { run_strata(state, true, inner_steps); }
void BM_Strata_MamlStepExplicit(benchmark::State& state, int inner_steps) { run_strata(state, false, inner_steps); }
BENCHMARK_CAPTURE(BM_Strata_MamlStep, inner1, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Strata_MamlStep, inner5, 5)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Strata_MamlStepExplicit, inner1, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Strata_MamlStepExplicit, inner5, 5)->Unit(benchmark::kMillisecond)->UseRealTime();

// --- libtorch ----------------------------------------------------------------------

#ifdef STRATA_HAVE_TORCH
torch::Tensor torch_tensor(const std::vector<float>& values, std::vector<int64_t> shape) {
  return torch::from_blob(const_cast<float*>(values.data()), shape, torch::kFloat).clone();
}

class TorchMaml {
 public:
  TorchMaml() {
    for (const HostTensor& w : initial_weights()) params_.push_back(torch_tensor(w.values, w.shape).requires_grad_());
    for (const HostTask& t : tasks()) {
      tasks_.push_back({torch_tensor(t.x_support, {kShots, 1}), torch_tensor(t.y_support, {kShots, 1}),
                        torch_tensor(t.x_query, {kShots, 1}), torch_tensor(t.y_query, {kShots, 1})});
    }
    optimizer_ = std::make_unique<torch::optim::Adam>(params_, torch::optim::AdamOptions(kMetaLr));
  }

  torch::Tensor meta_loss(int inner_steps) {
    torch::Tensor total;
    for (const auto& task : tasks_) {
      std::vector<torch::Tensor> fast = params_;
      for (int k = 0; k < inner_steps; ++k) {
        torch::Tensor loss = torch::mse_loss(forward(fast, task[0]), task[1]);
        std::vector<torch::Tensor> g =
            torch::autograd::grad({loss}, fast, /*grad_outputs=*/{}, /*retain_graph=*/true, /*create_graph=*/true);
        for (size_t i = 0; i < fast.size(); ++i) fast[i] = fast[i] - g[i] * kInnerLr;
      }
      torch::Tensor query = torch::mse_loss(forward(fast, task[2]), task[3]);
      total = total.defined() ? total + query : query;
    }
    return total / static_cast<double>(tasks_.size());
  }

  torch::Tensor step(int inner_steps) {
    optimizer_->zero_grad();
    torch::Tensor loss = meta_loss(inner_steps);
    loss.backward();
    optimizer_->step();
    return loss;
  }

  MetaResult check(int inner_steps) {
    optimizer_->zero_grad();
    torch::Tensor loss = meta_loss(inner_steps);
    loss.backward();
    MetaResult r{loss.item<double>(), {}};
    for (const torch::Tensor& p : params_) {
      torch::Tensor g = p.grad().contiguous();
      r.gradient.emplace_back(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
    }
    optimizer_->zero_grad();
    return r;
  }

 private:
  static torch::Tensor forward(const std::vector<torch::Tensor>& p, const torch::Tensor& x) {
    torch::Tensor h = torch::relu(torch::linear(x, p[0], p[1]));
    h = torch::relu(torch::linear(h, p[2], p[3]));
    return torch::linear(h, p[4], p[5]);
  }

  std::vector<torch::Tensor> params_;
  std::vector<std::array<torch::Tensor, 4>> tasks_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
};

void BM_Torch_MamlStep(benchmark::State& state, int inner_steps) {
  // Strata's CPU plugin sets the calling thread's OpenMP team size before
  // its oneDNN calls, and libtorch sizes its parallel regions from the same
  // setting: restore libtorch's before each libtorch benchmark.
  torch::set_num_threads(strata::bench::bench_threads(1));
  TorchMaml maml;
  torch::Tensor first = maml.step(inner_steps);
  for (auto _ : state) {
    torch::Tensor loss = maml.step(inner_steps);
    benchmark::DoNotOptimize(loss.data_ptr());
  }
  state.counters["first_meta_loss"] = first.item<double>();
  state.SetLabel(std::to_string(kTasks) + " tasks, " + std::to_string(inner_steps) + " inner step" +
                 (inner_steps == 1 ? "" : "s"));
}
BENCHMARK_CAPTURE(BM_Torch_MamlStep, inner1, 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Torch_MamlStep, inner5, 5)->Unit(benchmark::kMillisecond)->UseRealTime();

/// The largest |a − b| / (|b| + scale) over the meta-gradients, with `scale`
/// the largest |b|/10 (so near-zero entries are compared absolutely).
double gradient_difference(const MetaResult& a, const MetaResult& b) {
  float scale = 0.0f;
  for (const auto& g : b.gradient) {
    for (float v : g) scale = std::max(scale, std::abs(v) / 10);
  }
  double worst = 0.0;
  for (size_t i = 0; i < a.gradient.size(); ++i) {
    for (size_t k = 0; k < a.gradient[i].size(); ++k) {
      const double d = std::abs(a.gradient[i][k] - b.gradient[i][k]) / (std::abs(b.gradient[i][k]) + scale);
      worst = std::max(worst, d);
    }
  }
  return worst;
}
#endif

/// The check before timing (see the top of the file); false on a mismatch.
bool programs_agree() {
  bool ok = true;
  for (int inner_steps : {1, 5}) {
    MetaResult module = StrataMaml(true).check(inner_steps);
    MetaResult explicit_program = StrataMaml(false).check(inner_steps);
    const bool same = module.loss == explicit_program.loss && module.gradient == explicit_program.gradient;
    std::printf("check, %d inner step%s: Strata meta-loss %.6f, explicit program %s", inner_steps,
                inner_steps == 1 ? "" : "s", module.loss, same ? "identical" : "DIFFERS");
    ok = ok && same;
#ifdef STRATA_HAVE_TORCH
    torch::set_num_threads(strata::bench::bench_threads(1));
    MetaResult torch_result = TorchMaml().check(inner_steps);
    const double loss_diff = std::abs(module.loss - torch_result.loss) / std::abs(torch_result.loss);
    const double grad_diff = gradient_difference(module, torch_result);
    const bool close = loss_diff < 1e-4 && grad_diff < 1e-4;
    std::printf("; libtorch meta-loss %.6f (relative difference %.1e), meta-gradient relative difference %.1e %s",
                torch_result.loss, loss_diff, grad_diff, close ? "(agree)" : "(DISAGREE)");
    ok = ok && close;
#endif
    std::printf("\n");
  }
  return ok;
}

void print_ratio(const RatioReporter& r, const std::string& what, const std::string& num, const std::string& den) {
  auto a = r.times(num), b = r.times(den);
  if (!a || !b) return;
  std::printf("  %-50s real %7.2f / %7.2f ms = %5.2fx   cpu %7.2f / %7.2f ms = %5.2fx\n", what.c_str(), a->real_ms,
              b->real_ms, a->real_ms / b->real_ms, a->cpu_ms, b->cpu_ms, a->cpu_ms / b->cpu_ms);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = strata::bench::start_cpu_bench(argc, argv);
  if (threads < 0) return 1;
  if (!programs_agree()) {
    std::fprintf(stderr, "bench_maml: the programs disagree; not timing them\n");
    return 1;
  }
  RatioReporter reporter(isatty(STDOUT_FILENO) != 0 ? benchmark::ConsoleReporter::OO_Color
                                                    : benchmark::ConsoleReporter::OO_None);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::cout.flush();
  std::printf("\nratios (medians when repeated; %d thread%s each):\n", threads, threads == 1 ? "" : "s");
  for (const std::string steps : {"1", "5"}) {
    const std::string inner = " (" + steps + " inner step" + (steps == "1" ? ")" : "s)");
    const std::string suffix = "/inner" + steps;
    print_ratio(reporter, "Strata functional_call / explicit" + inner, "BM_Strata_MamlStep" + suffix,
                "BM_Strata_MamlStepExplicit" + suffix);
#ifdef STRATA_HAVE_TORCH
    print_ratio(reporter, "Strata / libtorch" + inner, "BM_Strata_MamlStep" + suffix, "BM_Torch_MamlStep" + suffix);
    print_ratio(reporter, "Strata explicit / libtorch" + inner, "BM_Strata_MamlStepExplicit" + suffix,
                "BM_Torch_MamlStep" + suffix);
#endif
  }
  benchmark::Shutdown();
  return 0;
}
