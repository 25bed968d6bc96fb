// Optimizer-update benchmark: one Adam (and SGD with momentum) step over
// 4 f32 parameters of 1024 x 1024 (4 M elements: 16 MiB of parameters, as
// much of gradients and of each state tensor; an Adam step moves 112 MiB,
// more than the 32 MiB L3 of the development machine, though one
// parameter's 28 MiB fits), three ways:
//  - BM_Strata_*/fused: nn::Adam / nn::SGD, one fused kernel per parameter
//    (ops adam_step, sgd_momentum_step; docs/ops.md, "Optimizer updates");
//  - BM_Strata_*/unfused: the same update as the chain of out-of-place
//    elementwise ops the optimizers ran before (one op per operation);
//  - BM_Torch_*: torch::optim::Adam / SGD of libtorch (1.13, its default
//    for-loop implementation) on the same values, when libtorch is present.
// Memory traffic: the fused Adam step reads p, g, m, v and writes p, m, v —
// 7 x 16 MiB in all — and SGD with momentum 5 x 16 MiB; "GB/s" is that
// traffic over the time (compare bench_bandwidth's ceiling).
// Results are checked before timing: fused and unfused agree bitwise after
// a step, libtorch within 1e-6. One thread unless STRATA_BENCH_THREADS says
// otherwise, on both sides.
#include <strata/strata.hpp>

#include <benchmark/benchmark.h>

#include "bench_common.hpp"

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <unistd.h>

#ifdef STRATA_HAVE_TORCH
#include <torch/torch.h>
#endif

namespace {

using namespace strata;
using strata::bench::RatioReporter;

constexpr int64_t kRows = 1024, kCols = 1024;
constexpr int kParams = 4;
constexpr double kLr = 1e-3;

std::vector<float> values(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(kRows * kCols));
  for (float& x : v) x = normal(rng);
  return v;
}

struct Params {
  std::vector<Tensor> p;
  Params() {
    for (int k = 0; k < kParams; ++k) {
      p.push_back(from_data(values(1 + k), {kRows, kCols}).set_requires_grad());
      p.back().set_grad(from_data(values(100 + k), {kRows, kCols}));
    }
  }
};

/// The unfused Adam update, one public op per operation (as nn::Adam did).
struct UnfusedAdam {
  std::vector<Tensor> m, v;
  int64_t t = 0;
  void step(std::vector<Tensor>& ps) {
    NoGradGuard no_grad;
    ++t;
    const double bc1 = 1.0 - std::pow(0.9, static_cast<double>(t)), bc2 = 1.0 - std::pow(0.999, static_cast<double>(t));
    m.resize(ps.size());
    v.resize(ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      Tensor g = ps[i].grad();
      m[i] = m[i].defined() ? m[i] * 0.9 + g * (1.0 - 0.9) : g * (1.0 - 0.9);
      v[i] = v[i].defined() ? v[i] * 0.999 + square(g) * (1.0 - 0.999) : square(g) * (1.0 - 0.999);
      Tensor denom = sqrt(v[i]) * (1.0 / std::sqrt(bc2)) + 1e-8;
      ps[i].detach().copy_(ps[i].detach() - m[i] / denom * (kLr / bc1));
    }
  }
};

struct UnfusedSgd {
  std::vector<Tensor> b;
  void step(std::vector<Tensor>& ps) {
    NoGradGuard no_grad;
    b.resize(ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      Tensor g = ps[i].grad();
      b[i] = b[i].defined() ? b[i] * 0.9 + g * (1.0 - 0.0) : g.clone();
      ps[i].detach().copy_(ps[i].detach() - b[i] * kLr);
    }
  }
};

void set_traffic(benchmark::State& state, int streams) {
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(streams) * kParams * kRows * kCols * 4.0 * static_cast<double>(state.iterations()) * 1e-9,
      benchmark::Counter::kIsRate);
}

bool check_fused_equals_unfused(bool adam) {
  Params a, b;
  if (adam) {
    nn::Adam opt(a.p, {.lr = kLr});
    opt.step();
    UnfusedAdam ref;
    ref.step(b.p);
  } else {
    nn::SGD opt(a.p, {.lr = kLr, .momentum = 0.9});
    opt.step();
    UnfusedSgd ref;
    ref.step(b.p);
  }
  for (int k = 0; k < kParams; ++k)
    if (a.p[k].detach().to_bytes() != b.p[k].detach().to_bytes()) return false;
  return true;
}

/// Times steps of `opt` (fused) or of `ref` (unfused) on `ps`.
template <class Ref>
void time_steps(benchmark::State& state, bool fused, nn::Optimizer& opt, Ref& ref, Params& ps, int streams) {
  for (auto _ : state) {
    if (fused) {
      opt.step();
    } else {
      ref.step(ps.p);
    }
    runtime().synchronize(ps.p[0].device());
  }
  set_traffic(state, streams);
}

void BM_Strata_Adam(benchmark::State& state, bool fused) {
  if (!check_fused_equals_unfused(true)) {
    state.SkipWithError("fused and unfused Adam disagree");
    return;
  }
  Params ps;
  nn::Adam opt(ps.p, {.lr = kLr});
  UnfusedAdam ref;
  time_steps(state, fused, opt, ref, ps, 7);
}
BENCHMARK_CAPTURE(BM_Strata_Adam, fused, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Strata_Adam, unfused, false)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Strata_SgdMomentum(benchmark::State& state, bool fused) {
  if (!check_fused_equals_unfused(false)) {
    state.SkipWithError("fused and unfused SGD disagree");
    return;
  }
  Params ps;
  nn::SGD opt(ps.p, {.lr = kLr, .momentum = 0.9});
  UnfusedSgd ref;
  time_steps(state, fused, opt, ref, ps, 5);  // reads p, g, b; writes p, b
}
BENCHMARK_CAPTURE(BM_Strata_SgdMomentum, fused, true)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Strata_SgdMomentum, unfused, false)->Unit(benchmark::kMillisecond)->UseRealTime();

// --- A group of many small parameters: one update per parameter against
// the group as one kernel call (PyTorch's foreach/fused optimizers update a
// whole group per kernel) and against one parameter of all the elements.
// 256 parameters of 64 x 64 (1 M elements, 4 MiB, in L2/L3), as a
// transformer's norms and biases are many and small:
//  - BM_Strata_AdamGroup/per_parameter: adam_step_ called once per
//    parameter (what nn::Adam did before it grouped its parameters);
//  - BM_Strata_AdamGroup/grouped: nn::Adam, which updates the 256
//    parameters with one adam_step_ over the group: on cpu:0 one kernel
//    call, one pass over the 1 M elements end to end;
//  - BM_Strata_AdamGroup/flat: the same elements as one parameter, one
//    adam_step: the floor for any grouping;
//  - BM_Strata_GatherGroupGradients: cat of the 256 gradients into one flat
//    tensor, which a flat-buffer update would pay every step while gradients
//    arrive as separate tensors from backward;
//  - BM_Torch_AdamGroup: torch::optim::Adam over the same 256 parameters.
constexpr int kGroupParams = 256;
constexpr int64_t kGroupSide = 64;

std::vector<Tensor> group_params(int count, int64_t elements) {
  std::vector<Tensor> ps;
  for (int k = 0; k < count; ++k) {
    ps.push_back(randn({elements}).set_requires_grad());
    ps.back().set_grad(randn({elements}));
  }
  return ps;
}

/// Adam as nn::Adam computed it per parameter before grouping: the same
/// update, one adam_step_ call each.
struct PerParameterAdam {
  std::vector<Tensor> m, v;
  int64_t t = 0;
  void step(const std::vector<Tensor>& ps) {
    NoGradGuard no_grad;
    ++t;
    const bool first = m.empty();
    for (size_t i = 0; first && i < ps.size(); ++i) {
      m.push_back(zeros_like(ps[i].detach()));
      v.push_back(zeros_like(ps[i].detach()));
    }
    const double bc1 = 1.0 - std::pow(0.9, static_cast<double>(t)), bc2 = 1.0 - std::pow(0.999, static_cast<double>(t));
    const AdamUpdate u{.step_size = kLr / bc1, .inv_sqrt_bias2 = 1.0 / std::sqrt(bc2), .first = first};
    for (size_t i = 0; i < ps.size(); ++i) adam_step_(ps[i].detach(), ps[i].grad(), m[i], v[i], u);
  }
};

enum class GroupWay { per_parameter, grouped, flat };

void BM_Strata_AdamGroup(benchmark::State& state, GroupWay way) {
  const int64_t per = kGroupSide * kGroupSide;
  // Checked first: the grouped optimizer's parameters equal the
  // per-parameter updates' bit for bit after two steps.
  {
    manual_seed(3);
    std::vector<Tensor> a = group_params(kGroupParams, per);
    std::vector<Tensor> b;
    for (const Tensor& p : a) {
      b.push_back(p.detach().clone().set_requires_grad());
      b.back().set_grad(p.grad());
    }
    nn::Adam opt(a, {.lr = kLr});
    PerParameterAdam ref;
    for (int s = 0; s < 2; ++s) {
      opt.step();
      ref.step(b);
    }
    for (int k = 0; k < kGroupParams; ++k) {
      if (a[k].detach().to_bytes() != b[k].detach().to_bytes()) {
        state.SkipWithError("the grouped Adam step differs from the per-parameter one");
        return;
      }
    }
  }
  manual_seed(3);
  std::vector<Tensor> ps = way == GroupWay::flat ? group_params(1, per * kGroupParams) : group_params(kGroupParams, per);
  nn::Adam opt(ps, {.lr = kLr});
  PerParameterAdam ref;
  if (way == GroupWay::per_parameter) {
    ref.step(ps);  // state allocated
    for (auto _ : state) ref.step(ps);
  } else {
    opt.step();
    for (auto _ : state) opt.step();
  }
  state.SetLabel(way == GroupWay::flat ? "1 x 1M elements" : "256 x 4096 elements");
}
BENCHMARK_CAPTURE(BM_Strata_AdamGroup, per_parameter, GroupWay::per_parameter)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Strata_AdamGroup, grouped, GroupWay::grouped)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_Strata_AdamGroup, flat, GroupWay::flat)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Strata_GatherGroupGradients(benchmark::State& state) {
  manual_seed(3);
  std::vector<Tensor> grads;
  for (const Tensor& p : group_params(kGroupParams, kGroupSide * kGroupSide)) grads.push_back(p.grad());
  for (auto _ : state) benchmark::DoNotOptimize(cat(grads, 0).impl());
}
BENCHMARK(BM_Strata_GatherGroupGradients)->Unit(benchmark::kMicrosecond)->UseRealTime();

#ifdef STRATA_HAVE_TORCH
std::vector<torch::Tensor> torch_params() {
  std::vector<torch::Tensor> out;
  for (int k = 0; k < kParams; ++k) {
    std::vector<float> p = values(1 + k), g = values(100 + k);
    torch::Tensor t = torch::from_blob(p.data(), {kRows, kCols}).clone().set_requires_grad(true);
    t.mutable_grad() = torch::from_blob(g.data(), {kRows, kCols}).clone();
    out.push_back(t);
  }
  return out;
}

/// libtorch's first step against Strata's: the same values within 1e-6.
bool check_torch(bool adam) {
  Params a;
  std::vector<torch::Tensor> t = torch_params();
  if (adam) {
    nn::Adam(a.p, {.lr = kLr}).step();
    torch::optim::Adam(t, torch::optim::AdamOptions(kLr)).step();
  } else {
    nn::SGD(a.p, {.lr = kLr, .momentum = 0.9}).step();
    torch::optim::SGD(t, torch::optim::SGDOptions(kLr).momentum(0.9)).step();
  }
  for (int k = 0; k < kParams; ++k) {
    std::vector<float> mine = a.p[k].detach().to_vector<float>();
    torch::Tensor theirs = t[k].detach().contiguous();
    const float* q = theirs.data_ptr<float>();
    for (size_t i = 0; i < mine.size(); i += 997)
      if (std::fabs(mine[i] - q[i]) > 1e-6f) return false;
  }
  return true;
}

void BM_Torch_Adam(benchmark::State& state) {
  if (!check_torch(true)) {
    state.SkipWithError("libtorch's Adam step differs from Strata's");
    return;
  }
  std::vector<torch::Tensor> ps = torch_params();
  torch::optim::Adam opt(ps, torch::optim::AdamOptions(kLr));
  for (auto _ : state) opt.step();
  set_traffic(state, 7);
}
BENCHMARK(BM_Torch_Adam)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Torch_SgdMomentum(benchmark::State& state) {
  if (!check_torch(false)) {
    state.SkipWithError("libtorch's SGD step differs from Strata's");
    return;
  }
  std::vector<torch::Tensor> ps = torch_params();
  torch::optim::SGD opt(ps, torch::optim::SGDOptions(kLr).momentum(0.9));
  for (auto _ : state) opt.step();
  set_traffic(state, 5);
}
BENCHMARK(BM_Torch_SgdMomentum)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Torch_AdamGroup(benchmark::State& state) {
  // The same values as BM_Strata_AdamGroup's; after one step each, both
  // sides agree within 1e-6 (checked before timing).
  manual_seed(3);
  std::vector<Tensor> mine = group_params(kGroupParams, kGroupSide * kGroupSide);
  std::vector<torch::Tensor> ps;
  for (const Tensor& p : mine) {
    std::vector<float> v = p.detach().to_vector<float>(), g = p.grad().to_vector<float>();
    ps.push_back(torch::from_blob(v.data(), {kGroupSide * kGroupSide}).clone().set_requires_grad(true));
    ps.back().mutable_grad() = torch::from_blob(g.data(), {kGroupSide * kGroupSide}).clone();
  }
  nn::Adam(mine, {.lr = kLr}).step();
  torch::optim::Adam opt(ps, torch::optim::AdamOptions(kLr));
  opt.step();
  for (int k = 0; k < kGroupParams; k += 17) {
    std::vector<float> a = mine[k].detach().to_vector<float>();
    torch::Tensor b = ps[k].detach().contiguous();
    for (size_t i = 0; i < a.size(); i += 97) {
      if (std::fabs(a[i] - b.data_ptr<float>()[i]) > 1e-6f) {
        state.SkipWithError("libtorch's Adam step differs from Strata's");
        return;
      }
    }
  }
  for (auto _ : state) opt.step();
  state.SetLabel("256 x 4096 elements");
}
BENCHMARK(BM_Torch_AdamGroup)->Unit(benchmark::kMicrosecond)->UseRealTime();
#endif

void print_ratio(const RatioReporter& r, const char* what, const std::string& num, const std::string& den) {
  auto a = r.times(num), b = r.times(den);
  if (!a || !b) return;
  std::printf("  %-34s %7.2f / %7.2f ms = %5.2fx\n", what, a->real_ms, b->real_ms, a->real_ms / b->real_ms);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = strata::bench::start_cpu_bench(argc, argv);
  if (threads < 0) return 1;
  RatioReporter reporter(isatty(STDOUT_FILENO) != 0 ? benchmark::ConsoleReporter::OO_Color
                                                    : benchmark::ConsoleReporter::OO_None);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\nratios (medians when repeated; %d thread%s each):\n", threads, threads == 1 ? "" : "s");
  print_ratio(reporter, "Adam fused / unfused", "BM_Strata_Adam/fused", "BM_Strata_Adam/unfused");
  print_ratio(reporter, "SGD momentum fused / unfused", "BM_Strata_SgdMomentum/fused", "BM_Strata_SgdMomentum/unfused");
  print_ratio(reporter, "Adam group per-parameter / flat", "BM_Strata_AdamGroup/per_parameter", "BM_Strata_AdamGroup/flat");
  print_ratio(reporter, "Adam group grouped / per-parameter", "BM_Strata_AdamGroup/grouped",
              "BM_Strata_AdamGroup/per_parameter");
  print_ratio(reporter, "Adam group grouped / flat", "BM_Strata_AdamGroup/grouped", "BM_Strata_AdamGroup/flat");
  print_ratio(reporter, "gather of the group's gradients / flat Adam", "BM_Strata_GatherGroupGradients",
              "BM_Strata_AdamGroup/flat");
#ifdef STRATA_HAVE_TORCH
  print_ratio(reporter, "Adam Strata / libtorch", "BM_Strata_Adam/fused", "BM_Torch_Adam");
  print_ratio(reporter, "SGD momentum Strata / libtorch", "BM_Strata_SgdMomentum/fused", "BM_Torch_SgdMomentum");
  print_ratio(reporter, "Adam group Strata grouped / libtorch", "BM_Strata_AdamGroup/grouped", "BM_Torch_AdamGroup");
#endif
  benchmark::Shutdown();
  return 0;
}
