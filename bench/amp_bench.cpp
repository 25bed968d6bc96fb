// Mixed-precision benchmark: one training step of a matmul-heavy MLP in f32
// against the same step under bf16 autocast, with libtorch measured in the
// same run when it is installed (tools/install-bench-deps.sh).
//
// The step: 4 Linear layers 1024 -> 1024 (ReLU between them, the last one's
// 1024 outputs are the logits), batch 256, cross-entropy loss on the f32
// logits, backward, plain SGD update (lr 0.01) of all weights and biases.
// About 6.4 GFLOP per step, so tens of ms on one core.
//  - BM_Strata_MlpStep/f32 vs /bf16: the bf16 variant runs forward and loss
//    inside strata::Autocast({.dtype = DType::bf16}) (matmuls on oneDNN's
//    bf16 kernels in the CPU plugin); backward and the optimizer step run
//    outside the scope, as in examples/example_digits.cpp.
//    Targets (issue 17): bf16 >= 1.6x faster than f32 (f32/bf16 >= 1.6);
//    against libtorch's same step, bf16 <= 1.0x and f32 <= 0.9x.
//  - BM_Torch_MlpStep/f32 vs /bf16: the same model (torch::nn::Linear,
//    PyTorch's default init), torch::optim::SGD, cross_entropy. libtorch
//    1.13 has CPU autocast (at::autocast::set_cpu_enabled +
//    set_autocast_cpu_dtype(kBFloat16), the C++ side of Python's
//    torch.autocast("cpu", torch.bfloat16)); TorchCpuAutocast below enters
//    and leaves it exactly as Python's context manager does.
//    libtorch runs f32 matmuls on its BLAS (Debian: OpenBLAS) and bf16 ones
//    on oneDNN (mkldnn), the same libdnnl the CPU plugin uses.
// Both sides run one thread (devices.cpu.threads = 1; torch::set_num_threads(1)
// and openblas_set_num_threads(1)), as bench_matmul and bench_autograd do:
// the development machines have two shared cores, and one thread keeps the
// ratios stable. All work then runs on the calling thread, so CPU time is a
// fair second reading when the machine is loaded. STRATA_BENCH_THREADS=N
// sets another count, on both sides.
//
// After the runs the program prints the ratios (medians when repeated), in
// real and in CPU time: f32/bf16 per framework, Strata/libtorch per precision.
#include <strata/strata.hpp>

#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#ifdef STRATA_HAVE_TORCH
#include <ATen/autocast_mode.h>
#include <dlfcn.h>
#include <torch/torch.h>
#endif

namespace {

using strata::bench::RatioReporter;
using strata::bench::configure_cpu_only;
using strata::bench::set_openblas_threads;

/// This program's thread count (STRATA_BENCH_THREADS overrides).
int threads_for_this_bench() { return strata::bench::bench_threads(1); }

using namespace strata;

constexpr int64_t kWidth = 1024;
constexpr int64_t kBatch = 256;
constexpr int kLayers = 4;
constexpr double kLr = 0.01;

/// One thread unless STRATA_BENCH_THREADS says otherwise (both frameworks).

/// The same inputs and class targets for both frameworks.
struct Data {
  std::vector<float> x;
  std::vector<int64_t> y;
  Data() {
    std::mt19937_64 rng(11);
    std::normal_distribution<float> normal;
    std::uniform_int_distribution<int64_t> label(0, kWidth - 1);
    x.resize(static_cast<size_t>(kBatch * kWidth));
    for (float& v : x) v = normal(rng);
    y.resize(static_cast<size_t>(kBatch));
    for (int64_t& v : y) v = label(rng);
  }
};

const Data& data() {
  static const Data d;
  return d;
}

/// The result checked before timing: the first step's cross-entropy of
/// 1024 classes from a fresh model must be near ln(1024) = 6.93.
bool first_loss_ok(benchmark::State& state, double first) {
  if (std::fabs(first - std::log(static_cast<double>(kWidth))) < 0.5) return true;
  state.SkipWithError(("first loss " + std::to_string(first) + " is not near ln(1024): the step is wrong").c_str());
  return false;
}

void BM_Strata_MlpStep(benchmark::State& state, bool bf16) {
  manual_seed(7);
  nn::Sequential model;
  for (int i = 0; i < kLayers; ++i) {
    if (i > 0) model.emplace_back<nn::ReLU>();
    model.emplace_back<nn::Linear>(kWidth, kWidth);
  }
  nn::SGD opt(model.parameters(), {.lr = kLr});
  Tensor x = from_data(data().x, {kBatch, kWidth});
  Tensor y = from_data(data().y, {kBatch}, {.dtype = DType::i64});
  Device device = x.device();

  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<Autocast> scope;
      if (bf16) scope.emplace(AutocastOptions{.dtype = DType::bf16});
      loss = nn::functional::cross_entropy(cast(model(x), DType::f32), y);
    }
    loss.backward();
    opt.step();
    runtime().synchronize(device);
    return loss;
  };
  double first = step().item<double>();  // warm-up: oneDNN primitives, allocator cache
  if (!first_loss_ok(state, first)) return;
  for (auto _ : state) {
    Tensor loss = step();
    benchmark::DoNotOptimize(loss.impl());
  }
  state.counters["first_loss"] = first;
  state.SetLabel(bf16 ? "autocast bf16" : "f32");
}
BENCHMARK_CAPTURE(BM_Strata_MlpStep, f32, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Strata_MlpStep, bf16, true)->Unit(benchmark::kMillisecond)->UseRealTime();

#ifdef STRATA_HAVE_TORCH
/// libtorch's f32 matmuls go to its BLAS, Debian's pthread OpenBLAS, whose
/// own thread pool torch::set_num_threads does not size (it sizes OpenMP
/// and MKL). Found at run time so that nothing links OpenBLAS directly;
/// false when the process has no OpenBLAS.

/// torch.autocast("cpu", dtype=torch.bfloat16) for C++: what Python's
/// context manager does on enter and exit (libtorch 1.13).
class TorchCpuAutocast {
 public:
  TorchCpuAutocast()
      : enabled_(at::autocast::is_cpu_enabled()), dtype_(at::autocast::get_autocast_cpu_dtype()) {
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~TorchCpuAutocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(enabled_);
    at::autocast::set_autocast_cpu_dtype(dtype_);
  }
  TorchCpuAutocast(const TorchCpuAutocast&) = delete;
  TorchCpuAutocast& operator=(const TorchCpuAutocast&) = delete;

 private:
  bool enabled_;
  at::ScalarType dtype_;
};

void BM_Torch_MlpStep(benchmark::State& state, bool bf16) {
  // Strata's CPU plugin sets the calling thread's OpenMP team size before
  // its oneDNN calls, and libtorch sizes its parallel regions from the same
  // setting: restore libtorch's before each libtorch benchmark.
  torch::set_num_threads(threads_for_this_bench());
  set_openblas_threads(threads_for_this_bench());
  torch::manual_seed(7);
  torch::nn::Sequential model;
  for (int i = 0; i < kLayers; ++i) {
    if (i > 0) model->push_back(torch::nn::ReLU());
    model->push_back(torch::nn::Linear(kWidth, kWidth));
  }
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(kLr));
  std::vector<float> xs = data().x;
  std::vector<int64_t> ys = data().y;
  torch::Tensor x = torch::from_blob(xs.data(), {kBatch, kWidth}, torch::kFloat).clone();
  torch::Tensor y = torch::from_blob(ys.data(), {kBatch}, torch::kLong).clone();

  auto step = [&] {
    opt.zero_grad();
    torch::Tensor loss;
    {
      std::optional<TorchCpuAutocast> scope;
      if (bf16) scope.emplace();
      loss = torch::nn::functional::cross_entropy(model->forward(x).to(torch::kFloat), y);
    }
    loss.backward();
    opt.step();
    return loss;
  };
  double first = step().item<double>();
  if (!first_loss_ok(state, first)) return;
  for (auto _ : state) {
    torch::Tensor loss = step();
    benchmark::DoNotOptimize(loss.data_ptr());
  }
  state.counters["first_loss"] = first;
  state.SetLabel(bf16 ? "autocast bf16" : "f32");
}
BENCHMARK_CAPTURE(BM_Torch_MlpStep, f32, false)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Torch_MlpStep, bf16, true)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif


/// num/den in real time and, since every thread of work here is the calling
/// thread, in CPU time (less disturbed by other load on a shared machine).
void print_ratio(const RatioReporter& r, const char* what, const std::string& num, const std::string& den,
                 const char* target) {
  auto a = r.times(num), b = r.times(den);
  if (!a || !b) return;
  std::printf("  %-30s real %7.2f / %7.2f ms = %5.2fx   cpu %7.2f / %7.2f ms = %5.2fx  %s\n", what, a->real_ms,
              b->real_ms, a->real_ms / b->real_ms, a->cpu_ms, b->cpu_ms, a->cpu_ms / b->cpu_ms, target);
}

}  // namespace

int main(int argc, char** argv) {
  strata::bench::unpin_openblas(argv);
  const int threads = threads_for_this_bench();
#ifdef STRATA_HAVE_TORCH
  torch::set_num_threads(threads);
  const bool openblas = set_openblas_threads(threads);
#endif
  configure_cpu_only(threads);
  strata::bench::print_peers();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Colour as the console reporter's default: only on a terminal.
  RatioReporter reporter(isatty(STDOUT_FILENO) != 0 ? benchmark::ConsoleReporter::OO_Color
                                                    : benchmark::ConsoleReporter::OO_None);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::cout.flush();
  std::printf("\nratios (medians when repeated; %d thread%s each):\n", threads, threads == 1 ? "" : "s");
  print_ratio(reporter, "Strata f32 / Strata bf16", "BM_Strata_MlpStep/f32",
              "BM_Strata_MlpStep/bf16", "(target >= 1.6x)");
#ifdef STRATA_HAVE_TORCH
  print_ratio(reporter, "libtorch f32 / libtorch bf16", "BM_Torch_MlpStep/f32",
              "BM_Torch_MlpStep/bf16", "");
  print_ratio(reporter, "Strata f32 / libtorch f32", "BM_Strata_MlpStep/f32",
              "BM_Torch_MlpStep/f32", "(target <= 0.9x)");
  print_ratio(reporter, "Strata bf16 / libtorch bf16", "BM_Strata_MlpStep/bf16",
              "BM_Torch_MlpStep/bf16", "(target <= 1.0x)");
  std::printf("  libtorch %s: f32 GEMM on %s, oneDNN (mkldnn) %s\n", TORCH_VERSION,
              openblas ? "OpenBLAS (set to the same thread count)" : "its BLAS", at::hasMKLDNN() ? "on" : "off");
#endif
  benchmark::Shutdown();
  return 0;
}
