// Activation checkpointing benchmarks: a 16-layer MLP (Linear 1024
// -> 1024 + ReLU, batch 128) on the CPU plugin, without checkpointing and
// under each CheckpointPolicy; and a 64-layer one without checkpointing,
// with sqrt_n and with min_peak, to show how the savings grow with depth
// (the second argument of each case is the layer count).
//
//  - BM_CheckpointStep/<policy>: one training step (forward, mean-square
//    loss, backward into every parameter's grad). Target (issue 17) for
//    sqrt_n: at most 1.33x the time of no checkpointing.
//  - BM_CheckpointMemory/<policy>: peak bytes allocated above the starting
//    point during forward + backward, the counter "peak_MiB"; and the bytes
//    allocated once the model's forward pass is done, "forward_MiB": the
//    activations the graph keeps for backward (the usual meaning of
//    activation memory; the output is one of them, ReLU keeps it). Target
//    (issue 17) for sqrt_n: at most 40% of no checkpointing's activation
//    memory.
//    The parameters are frozen for this measurement and a tape takes the
//    gradient with respect to the input only: the activations saved are the
//    same as in training, while the parameter gradients (64 MiB, equal under
//    every policy) neither hide them nor keep the graph alive on the
//    implicit backward() level.
#include <strata/strata.hpp>

#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace strata;

constexpr int64_t kWidth = 1024;
constexpr int64_t kBatch = 128;

struct Model {
  nn::Sequential seq;
  Tensor x;
  explicit Model(int64_t layers) {
    manual_seed(1);
    for (int64_t i = 0; i < layers; ++i) {
      seq.emplace_back<nn::Linear>(kWidth, kWidth);
      seq.emplace_back<nn::ReLU>();
    }
    x = randn({kBatch, kWidth});
  }
};

/// The model of `layers` Linear + ReLU pairs (16: the target's; 64: how the
/// savings scale with depth), built once.
Model& model(int64_t layers) {
  static std::map<int64_t, std::unique_ptr<Model>> models;
  auto& m = models[layers];
  if (!m) m = std::make_unique<Model>(layers);
  return *m;
}

CheckpointPolicy policy_of(int64_t k) {
  switch (k) {
    case 1: return CheckpointPolicy::sqrt_n();
    case 2: return CheckpointPolicy::every_n(2);
    case 3: return CheckpointPolicy::selective();
    case 4: return CheckpointPolicy::memory_budget(16ull << 20);
    case 5: return CheckpointPolicy::min_peak();
    default: return CheckpointPolicy::none();
  }
}

void set_label(benchmark::State& state) {
  CheckpointPolicy p = policy_of(state.range(0));
  std::string label = strategy_name(p.strategy);
  if (p.strategy == CheckpointStrategy::every_n) label += "(2)";
  if (p.strategy == CheckpointStrategy::memory_budget) label += "(16MiB)";
  state.SetLabel(label + ", " + std::to_string(state.range(1)) + " layers");
}

/// The parameters' gradients of one step under the policy (for the check).
std::vector<Tensor> step_gradients(Model& m, const CheckpointPolicy& policy) {
  CheckpointContext scope(policy);
  m.seq.zero_grad();
  Tensor y = m.seq(m.x);
  mean(y * y).backward();
  std::vector<Tensor> grads;
  for (const Tensor& p : m.seq.parameters()) grads.push_back(p.grad().clone());
  return grads;
}

void BM_CheckpointStep(benchmark::State& state) {
  Model& m = model(state.range(1));
  // Checked before timing: every policy gives the gradients of no
  // checkpointing, bit for bit (docs/mixed-precision-and-checkpointing.md).
  if (state.range(0) != 0) {
    std::vector<Tensor> want = step_gradients(m, CheckpointPolicy::none());
    std::vector<Tensor> got = step_gradients(m, policy_of(state.range(0)));
    for (size_t i = 0; i < want.size(); ++i) {
      if (got[i].to_bytes() != want[i].to_bytes()) {
        state.SkipWithError(("parameter " + std::to_string(i) + "'s gradient differs from no checkpointing").c_str());
        return;
      }
    }
  }
  CheckpointContext scope(policy_of(state.range(0)));
  for (auto _ : state) {
    m.seq.zero_grad();
    Tensor y = m.seq(m.x);
    mean(y * y).backward();
    runtime().synchronize(m.x.device());
  }
  set_label(state);
}
/// Every policy at 16 layers; none, sqrt_n and min_peak at 64.
void policies_and_depths(benchmark::internal::Benchmark* b) {
  for (int64_t policy = 0; policy <= 5; ++policy) b->Args({policy, 16});
  b->Args({0, 64});
  b->Args({1, 64});
  b->Args({5, 64});
}
BENCHMARK(BM_CheckpointStep)->Apply(policies_and_depths)->Unit(benchmark::kMillisecond)->UseRealTime();

/// Clears requires_grad on every parameter for a scope.
class Frozen {
 public:
  explicit Frozen(nn::Module& m) : params_(m.parameters()) {
    for (Tensor& p : params_) p.set_requires_grad(false);
  }
  ~Frozen() {
    for (Tensor& p : params_) p.set_requires_grad(true);
  }

 private:
  std::vector<Tensor> params_;
};

void BM_CheckpointMemory(benchmark::State& state) {
  Model& m = model(state.range(1));
  m.seq.zero_grad();
  Frozen frozen(m.seq);
  CheckpointContext scope(policy_of(state.range(0)));
  uint64_t peak = 0;
  int64_t forward = 0;
  for (auto _ : state) {
    MemoryScope mem(m.x.device());
    {
      GradientTape tape;
      tape.watch(m.x);
      Tensor y = m.seq(m.x);
      forward = mem.current_bytes();
      Tensor g = tape.gradient(mean(y * y), {m.x})[0];
      benchmark::DoNotOptimize(g.impl());
    }
    peak = mem.peak_bytes();
  }
  state.counters["peak_MiB"] = static_cast<double>(peak) / (1 << 20);
  state.counters["forward_MiB"] = static_cast<double>(forward) / (1 << 20);
  set_label(state);
}
BENCHMARK(BM_CheckpointMemory)
    ->Apply(policies_and_depths)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);

}  // namespace

BENCHMARK_MAIN();
