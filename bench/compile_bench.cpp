// compile benchmark (issue 37; docs/ops.md, "Fused elementwise programs"):
// the 10-op f32 elementwise chain of issue 37 at 1K, 64K and 4M elements,
// 1 thread, in the same run:
//
//  - BM_Eager_Forward / BM_Eager_ForwardBackward: the chain as ten op calls
//    (and its gradient by a tape);
//  - BM_Fused_Forward / BM_Fused_ForwardBackward: the chain as one
//    strata::fused_elementwise call (its gradient: the op's VJP, one fused
//    backward program per input, each recomputing the forward);
//  - BM_Compiled_Forward / BM_Compiled_ForwardBackward: the eager chain
//    through strata::compile (traced once, the ten ops fused by the pass
//    into one op: the fused op's time plus the replay's overhead), and
//    BM_Compiled_FirstCall: a cold compile (trace, fuse, run) at 1K;
//  - bench/compile_peers.py: JAX's jit and eager, PyTorch eager, on the
//    same chain and sizes (Python peers, run separately);
//  - BM_HandFused_Forward: the chain as one loop over the elements written
//    by hand with SLEEF's AVX-512 functions (the same 1-ULP ones the CPU
//    plugin uses; libm's scalar ones where the CPU lacks AVX-512): the
//    peer issue 37 names, the limit of one pass with this math, and
//  - BM_MemoryFloor: reading the two inputs and writing the output once
//    (a copy-like loop): the bandwidth floor;
//  - BM_DigitsStep_Eager / BM_DigitsStep_Compiled: one training step of the
//    demo's 64-128-128-10 ReLU MLP (batch 64, cross-entropy, Adam): eager
//    (zero_grad, forward, backward, step) against the loss and its
//    gradients compiled (a tape inside, returned; Adam outside), the
//    issue's "digits step" target. Synthetic inputs of the demo's shapes:
//    the time does not depend on the pixel values.
//
// Results are checked against each other before timing: the fused op gives
// the eager chain's bits. Prints the ratios at the end.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sleef.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace {

using namespace strata;

/// x·y → sin → +0.75 → tanh → ·x → exp → −y → sigmoid → square → +x.
const char* const kChain =
    "in 2\n%2 = mul %0 %1\n%3 = sin %2\n%4 = add %3 0x1.8p-1\n%5 = tanh %4\n%6 = mul %5 %0\n"
    "%7 = exp %6\n%8 = sub %7 %1\n%9 = sigmoid %8\n%10 = mul %9 %9\n%11 = add %10 %0\nout %11";

Tensor eager(const Tensor& x, const Tensor& y) {
  Tensor t = sigmoid(exp(tanh(sin(x * y) + 0.75) * x) - y);
  return t * t + x;
}
Tensor fused(const Tensor& x, const Tensor& y) { return fused_elementwise({x, y}, kChain); }
const CompiledFunction& compiled_chain() {
  static const CompiledFunction f =
      compile([](const std::vector<Tensor>& in) { return std::vector<Tensor>{eager(in[0], in[1])}; });
  return f;
}
Tensor compiled(const Tensor& x, const Tensor& y) { return compiled_chain()({x, y})[0]; }

// sleef.h declares its AVX-512 functions only where the compiler targets
// AVX-512; this file is built for the baseline, so declare them here.
#ifndef __AVX512F__
extern "C" {
__m512 Sleef_sinf16_u10avx512f(__m512);
__m512 Sleef_tanhf16_u10avx512f(__m512);
__m512 Sleef_expf16_u10avx512f(__m512);
}
#endif

[[gnu::target("avx512f,fma")]] int64_t hand_fused_avx512(const float* x, const float* y, float* out, int64_t n) {
  const __m512 three_quarters = _mm512_set1_ps(0.75f), one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(y + i);
    const __m512 t = _mm512_mul_ps(
        Sleef_tanhf16_u10avx512f(_mm512_add_ps(Sleef_sinf16_u10avx512f(_mm512_mul_ps(a, b)), three_quarters)), a);
    const __m512 e = _mm512_sub_ps(b, Sleef_expf16_u10avx512f(t));  // -(exp(t) - y)
    const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, Sleef_expf16_u10avx512f(e)));
    _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_mul_ps(s, s), a));
  }
  return i;
}

void hand_fused(const float* x, const float* y, float* out, int64_t n) {
  int64_t i = __builtin_cpu_supports("avx512f") ? hand_fused_avx512(x, y, out, n) : 0;
  for (; i < n; ++i) {
    const float a = std::tanh(std::sin(x[i] * y[i]) + 0.75f) * x[i];
    const float s = 1.0f / (1.0f + std::exp(-(std::exp(a) - y[i])));
    out[i] = s * s + x[i];
  }
}

struct Inputs {
  Tensor x, y;
  explicit Inputs(int64_t n) {
    manual_seed(37);
    x = rand({n}) * 2.0 - 1.0;
    y = rand({n}) * 2.0 - 1.0;
  }
};

void label(benchmark::State& state) { state.SetItemsProcessed(state.iterations() * state.range(0)); }

void BM_Eager_Forward(benchmark::State& state) {
  Inputs in(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(eager(in.x, in.y).impl());
  label(state);
}
void BM_Fused_Forward(benchmark::State& state) {
  Inputs in(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(fused(in.x, in.y).impl());
  label(state);
}
/// A cold compile: a new compiled function's first call (trace, fusion pass,
/// constants made, the eager run the trace is) on 1K elements.
void BM_Compiled_FirstCall(benchmark::State& state) {
  Inputs in(1024);
  for (auto _ : state) {
    CompiledFunction f = compile([](const std::vector<Tensor>& x) { return std::vector<Tensor>{eager(x[0], x[1])}; });
    benchmark::DoNotOptimize(f({in.x, in.y})[0].impl());
  }
}
void BM_Compiled_Forward(benchmark::State& state) {
  Inputs in(state.range(0));
  compiled(in.x, in.y);  // the trace
  for (auto _ : state) benchmark::DoNotOptimize(compiled(in.x, in.y).impl());
  label(state);
}
template <Tensor (*F)(const Tensor&, const Tensor&)>
void forward_backward(benchmark::State& state) {
  Inputs in(state.range(0));
  for (auto _ : state) {
    GradientTape tape;
    Tensor x = in.x.detach(), y = in.y.detach();
    tape.watch(x);
    tape.watch(y);
    benchmark::DoNotOptimize(tape.gradient(sum(F(x, y)), {x, y}));
  }
  label(state);
}
void BM_Eager_ForwardBackward(benchmark::State& state) { forward_backward<eager>(state); }
void BM_Fused_ForwardBackward(benchmark::State& state) { forward_backward<fused>(state); }
void BM_Compiled_ForwardBackward(benchmark::State& state) { forward_backward<compiled>(state); }
void BM_HandFused_Forward(benchmark::State& state) {
  const int64_t n = state.range(0);
  Inputs in(n);
  const std::vector<float> x = in.x.to_vector<float>(), y = in.y.to_vector<float>();
  std::vector<float> out(static_cast<size_t>(n));
  for (auto _ : state) {
    hand_fused(x.data(), y.data(), out.data(), n);
    benchmark::ClobberMemory();
  }
  label(state);
}
void BM_MemoryFloor(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(static_cast<size_t>(n), 0.5f), y(static_cast<size_t>(n), 0.25f), out(static_cast<size_t>(n));
  for (auto _ : state) {
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = x[static_cast<size_t>(i)] + y[static_cast<size_t>(i)];
    benchmark::ClobberMemory();
  }
  label(state);
}

/// The demo's model (examples/example_digits.cpp) and one batch.
struct DigitsStep {
  std::shared_ptr<nn::Linear> l1, l2, l3;
  std::vector<Tensor> params;
  std::unique_ptr<nn::Adam> opt;
  Tensor x, labels;
  DigitsStep() {
    manual_seed(37);
    l1 = std::make_shared<nn::Linear>(64, 128);
    l2 = std::make_shared<nn::Linear>(128, 128);
    l3 = std::make_shared<nn::Linear>(128, 10);
    for (const auto& l : {l1, l2, l3})
      for (const Tensor& p : l->parameters()) params.push_back(p);
    opt = std::make_unique<nn::Adam>(params, nn::AdamOptions{.lr = 3e-3});
    x = rand({64, 64});
    labels = cast(floor(rand({64}) * 10.0), DType::i64);
  }
  Tensor loss(const Tensor& in, const Tensor& y) const {
    return nn::functional::cross_entropy((*l3)(relu((*l2)(relu((*l1)(in))))), y);
  }
  /// The loss and the parameters' gradients, taken by a tape: what compiles.
  std::vector<Tensor> loss_and_grads(const std::vector<Tensor>& in) const {
    GradientTape tape;
    Tensor l = loss(in[0], in[1]);
    std::vector<Tensor> out = tape.gradient(l, params);
    out.insert(out.begin(), l);
    return out;
  }
  void eager_step() {
    opt->zero_grad();
    loss(x, labels).backward();
    opt->step();
  }
  void compiled_step(const CompiledFunction& f) {
    const std::vector<Tensor> r = f({x, labels});
    for (size_t k = 0; k < params.size(); ++k) params[k].set_grad(r[k + 1]);
    opt->step();
  }
  CompiledFunction compiled() const {
    return compile([this](const std::vector<Tensor>& in) { return loss_and_grads(in); });
  }
};

void BM_DigitsStep_Eager(benchmark::State& state) {
  DigitsStep s;
  for (int k = 0; k < 10; ++k) s.eager_step();  // allocator warm-up
  for (auto _ : state) s.eager_step();
}
void BM_DigitsStep_Compiled(benchmark::State& state) {
  DigitsStep s;
  const CompiledFunction f = s.compiled();
  for (int k = 0; k < 10; ++k) s.compiled_step(f);  // the trace, then warm-up
  if (f.stats().replays == 0 || !f.stats().fallbacks.empty()) {
    state.SkipWithError("the compiled step did not replay (it fell back)");
    return;
  }
  for (auto _ : state) s.compiled_step(f);
}
BENCHMARK(BM_DigitsStep_Eager)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DigitsStep_Compiled)->Unit(benchmark::kMicrosecond);

constexpr int64_t kSizes[] = {1 << 10, 1 << 16, 1 << 22};
BENCHMARK(BM_Compiled_FirstCall)->Unit(benchmark::kMicrosecond);

void register_all() {
  struct Entry {
    const char* name;
    void (*fn)(benchmark::State&);
  };
  const Entry entries[] = {{"BM_Eager_Forward", BM_Eager_Forward},
                           {"BM_Fused_Forward", BM_Fused_Forward},
                           {"BM_Compiled_Forward", BM_Compiled_Forward},
                           {"BM_HandFused_Forward", BM_HandFused_Forward},
                           {"BM_MemoryFloor", BM_MemoryFloor},
                           {"BM_Eager_ForwardBackward", BM_Eager_ForwardBackward},
                           {"BM_Fused_ForwardBackward", BM_Fused_ForwardBackward},
                           {"BM_Compiled_ForwardBackward", BM_Compiled_ForwardBackward}};
  for (const Entry& e : entries) {
    for (int64_t n : kSizes) {
      benchmark::RegisterBenchmark((std::string(e.name) + "/n" + std::to_string(n)).c_str(), e.fn)
          ->Arg(n)
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

/// Five compiled digits steps against five eager ones from the same
/// weights: the same losses and weights (the replay runs the traced ops in
/// the traced order; fusion of bias, ReLU and their derivatives keeps the
/// bits).
bool digits_steps_agree() {
  DigitsStep a, b;
  const CompiledFunction f = b.compiled();
  for (int k = 0; k < 5; ++k) {
    a.eager_step();
    b.compiled_step(f);
  }
  if (f.stats().replays != 4 || !f.stats().fallbacks.empty()) {
    std::fprintf(stderr, "the compiled digits step did not replay:\n%s\n",
                 f.stats().fallbacks.empty() ? "" : f.stats().fallbacks[0].reason.c_str());
    return false;
  }
  for (size_t k = 0; k < a.params.size(); ++k) {
    const std::vector<float> pa = a.params[k].to_vector<float>(), pb = b.params[k].to_vector<float>();
    for (size_t i = 0; i < pa.size(); ++i) {
      if (std::fabs(pa[i] - pb[i]) > 1e-5f * (1.0f + std::fabs(pa[i]))) {
        std::fprintf(stderr, "digits step: parameter %zu differs at %zu: eager %g, compiled %g\n", k, i, pa[i], pb[i]);
        return false;
      }
    }
  }
  return true;
}

/// The fused op against the eager chain (same bits) and the hand loop
/// (close: libm against SLEEF) before anything is timed.
bool programs_agree() {
  Inputs in(4099);
  Tensor a = eager(in.x, in.y), b = fused(in.x, in.y);
  const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  if (std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) != 0) {
    std::fprintf(stderr, "the fused chain's bits differ from the eager chain's\n");
    return false;
  }
  // The compiled chain: traced (the eager run), then replayed as one fused op.
  compiled(in.x, in.y);
  const std::vector<float> vc = compiled(in.x, in.y).to_vector<float>();
  const auto graph = compiled_chain().graph_for({in.x, in.y});
  if (graph == nullptr || graph->nodes.size() != 1 || graph->nodes[0].op != "fused_elementwise") {
    std::fprintf(stderr, "the compiled chain is not one fused op:\n%s", compiled_chain().report_for({in.x, in.y}).text().c_str());
    return false;
  }
  if (std::memcmp(va.data(), vc.data(), va.size() * sizeof(float)) != 0) {
    std::fprintf(stderr, "the compiled chain's bits differ from the eager chain's\n");
    return false;
  }
  // Gradients: the fused op's backward programs against the eager tape.
  Tensor xt = in.x.detach(), yt = in.y.detach();
  GradientTape tape;
  tape.watch(xt);
  tape.watch(yt);
  std::vector<Tensor> ge = tape.gradient(sum(eager(xt, yt)), {xt, yt});
  GradientTape tape2;
  tape2.watch(xt);
  tape2.watch(yt);
  std::vector<Tensor> gf = tape2.gradient(sum(compiled(xt, yt)), {xt, yt});
  for (size_t k = 0; k < 2; ++k) {
    const std::vector<float> e = ge[k].to_vector<float>(), c = gf[k].to_vector<float>();
    for (size_t i = 0; i < e.size(); ++i) {
      if (std::fabs(e[i] - c[i]) > 1e-5f * (1.0f + std::fabs(e[i]))) {
        std::fprintf(stderr, "gradient %zu differs at %zu: eager %g, compiled %g\n", k, i, e[i], c[i]);
        return false;
      }
    }
  }
  const std::vector<float> x = in.x.to_vector<float>(), y = in.y.to_vector<float>();
  std::vector<float> h(x.size());
  hand_fused(x.data(), y.data(), h.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < h.size(); ++i) {
    if (std::fabs(h[i] - va[i]) > 1e-5f * (1.0f + std::fabs(h[i]))) {
      std::fprintf(stderr, "the hand-fused loop differs at %zu: %g against %g\n", i, h[i], va[i]);
      return false;
    }
  }
  return digits_steps_agree();
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  const int threads = strata::bench::start_cpu_bench(argc, argv);
  if (threads < 0) return 1;
  if (!programs_agree()) return 1;
  strata::bench::RatioReporter reporter(isatty(STDOUT_FILENO) != 0 ? benchmark::ConsoleReporter::OO_Color
                                                                   : benchmark::ConsoleReporter::OO_None);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::cout.flush();
  std::printf("\nratios (medians when repeated; %d thread%s each):\n", threads, threads == 1 ? "" : "s");
  for (int64_t n : kSizes) {
    const std::string s = "/n" + std::to_string(n);
    const std::string at = " at " + std::to_string(n);
    reporter.print_ratio("fused / eager, forward" + at, "BM_Fused_Forward" + s, "BM_Eager_Forward" + s);
    reporter.print_ratio("fused / hand-fused loop, forward" + at, "BM_Fused_Forward" + s, "BM_HandFused_Forward" + s);
    reporter.print_ratio("fused / memory floor, forward" + at, "BM_Fused_Forward" + s, "BM_MemoryFloor" + s);
    reporter.print_ratio("fused / eager, forward+backward" + at, "BM_Fused_ForwardBackward" + s,
                "BM_Eager_ForwardBackward" + s);
    reporter.print_ratio("compiled / eager, forward" + at, "BM_Compiled_Forward" + s, "BM_Eager_Forward" + s);
    reporter.print_ratio("compiled / eager, forward+backward" + at, "BM_Compiled_ForwardBackward" + s,
                "BM_Eager_ForwardBackward" + s);
  }
  reporter.print_ratio("compiled / eager, digits training step", "BM_DigitsStep_Compiled", "BM_DigitsStep_Eager");
  benchmark::Shutdown();
  return 0;
}
