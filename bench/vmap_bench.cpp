// vmap benchmark (docs/vmap.md): what the batching transform buys over the
// loop it replaces, in the same run, and libtorch's loop beside it when
// libtorch is present (libtorch 1.13's C++ API has no vmap; functorch and
// JAX are measured by bench/vmap_peers.py).
//
//  - Per-sample gradients of a 784-128-10 tanh MLP (squared error against a
//    one-hot target) at batch 64: BM_Strata_PerSampleMlp_Loop (one tape per
//    example), BM_Strata_PerSampleMlp_Vmap (strata::per_sample_grad),
//    BM_Torch_PerSampleMlp_Loop (torch::autograd::grad per example).
//  - The same for a 784-10 linear model, at batch 1, 8, 64 and 256 (the
//    cliff guard: vmap must not lose to the loop at any size).
//  - jacfwd of x ↦ tanh(W x), 256 → 256: BM_Strata_Jacfwd_Vmap (today's
//    jacfwd, one batched pass) against BM_Strata_Jacfwd_Loop (one jvp per
//    input element, the jacfwd this replaced).
//  - The functional transforms against the tape programs they stand for, on
//    a 256-512-512-10 tanh MLP at batch 128 (squared error): the gradient
//    by a GradientTape, by grad over the parameter list, and by grad over
//    one flat parameter vector (sliced into the layers); the HVP by nested
//    tapes (reverse over reverse), by hvp over the list (forward over
//    reverse, and reverse over reverse), and by hvp over the flat vector.
//  - fixed_point under vmap: Heron's square root of 256 lanes of 16 values
//    (each lane needing its own iteration count), the lanes iterated
//    together with finished ones masked (BM_Strata_FixedPoint_Vmap) against
//    one solve per lane (BM_Strata_FixedPoint_Loop).
// Every program's results are checked against the loop before timing. One
// thread on both sides (STRATA_BENCH_THREADS=N sets another count).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "bench_common.hpp"

#ifdef STRATA_HAVE_TORCH
#include <torch/torch.h>
#endif

namespace {

using namespace strata;

constexpr int64_t kIn = 784, kHidden = 128, kOut = 10;

struct Problem {
  std::vector<Tensor> params;  // w1 [in, hidden], b1, w2 [hidden, out], b2 (or w [in, out], b)
  Tensor x, target;            // [batch, in], [batch, out]
};

Problem make_problem(bool hidden, int64_t batch) {
  manual_seed(42);
  Problem p;
  if (hidden) {
    p.params = {randn({kIn, kHidden}) * (1.0 / std::sqrt(double(kIn))), zeros({kHidden}),
                randn({kHidden, kOut}) * (1.0 / std::sqrt(double(kHidden))), zeros({kOut})};
  } else {
    p.params = {randn({kIn, kOut}) * (1.0 / std::sqrt(double(kIn))), zeros({kOut})};
  }
  p.x = rand({batch, kIn});
  Tensor labels = cast(floor(rand({batch}) * double(kOut)), DType::i64);
  p.target = cast(eq(labels.unsqueeze(1), arange(kOut, {.dtype = DType::i64}).unsqueeze(0)), DType::f32);
  return p;
}

/// One example's loss: x [in], target [out].
Tensor example_loss(const std::vector<Tensor>& w, const std::vector<Tensor>& ex) {
  Tensor h = ex[0];
  for (size_t l = 0; l + 1 < w.size(); l += 2) {
    h = matmul(h, w[l]) + w[l + 1];
    if (l + 2 < w.size()) h = tanh(h);
  }
  Tensor d = h - ex[1];
  return sum(d * d);
}

/// Detached copies of `params`, watched by `tape`.
std::vector<Tensor> watched(GradientTape& tape, const std::vector<Tensor>& params) {
  std::vector<Tensor> w;
  for (const Tensor& t : params) {
    w.push_back(t.detach());
    tape.watch(w.back());
  }
  return w;
}

std::vector<Tensor> loop_grads(const Problem& p) {
  std::vector<std::vector<Tensor>> per(p.params.size());
  for (int64_t i = 0; i < p.x.size(0); ++i) {
    GradientTape tape;
    const std::vector<Tensor> w = watched(tape, p.params);
    std::vector<Tensor> g = tape.gradient(example_loss(w, {p.x.select(0, i), p.target.select(0, i)}), w);
    for (size_t k = 0; k < g.size(); ++k) per[k].push_back(g[k]);
  }
  std::vector<Tensor> out;
  for (auto& v : per) out.push_back(stack(v, 0));
  return out;
}

std::vector<Tensor> vmap_grads(const Problem& p) { return per_sample_grad(example_loss, p.params, {p.x, p.target}); }

void BM_Strata_PerSampleMlp_Loop(benchmark::State& state) {
  Problem p = make_problem(true, 64);
  for (auto _ : state) benchmark::DoNotOptimize(loop_grads(p));
}
void BM_Strata_PerSampleMlp_Vmap(benchmark::State& state) {
  Problem p = make_problem(true, 64);
  for (auto _ : state) benchmark::DoNotOptimize(vmap_grads(p));
}
void BM_Strata_PerSampleLinear_Loop(benchmark::State& state) {
  Problem p = make_problem(false, state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(loop_grads(p));
}
void BM_Strata_PerSampleLinear_Vmap(benchmark::State& state) {
  Problem p = make_problem(false, state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(vmap_grads(p));
}

// --- jacfwd, 256 -> 256 ---------------------------------------------------------

constexpr int64_t kJac = 256;
Tensor jac_weight() {
  manual_seed(7);
  return randn({kJac, kJac}) * (1.0 / 16.0);
}
Tensor jacobian_loop(const Fn& f, const Tensor& x) {
  std::vector<Tensor> columns;
  for (int64_t i = 0; i < x.numel(); ++i) {
    Tensor e =
        cast(eq(arange(x.numel(), {.dtype = DType::i64}), full({}, double(i), {.dtype = DType::i64})), DType::f32);
    columns.push_back(jvp(f, x, e).second);
  }
  return stack(columns, 1);
}
void BM_Strata_Jacfwd_Loop(benchmark::State& state) {
  Tensor w = jac_weight(), x = rand({kJac});
  Fn f = [&](const Tensor& v) { return tanh(matmul(w, v)); };
  for (auto _ : state) benchmark::DoNotOptimize(jacobian_loop(f, x));
}
void BM_Strata_Jacfwd_Vmap(benchmark::State& state) {
  Tensor w = jac_weight(), x = rand({kJac});
  Fn f = [&](const Tensor& v) { return tanh(matmul(w, v)); };
  for (auto _ : state) benchmark::DoNotOptimize(jacfwd(f, x));
}

// --- transforms against tapes, 256-512-512-10 ---------------------------------------

struct Mlp4 {
  std::vector<Tensor> params;  // w1, b1, w2, b2, w3, b3
  std::vector<Tensor> v;       // a direction for the HVP, one per parameter
  Tensor x, target;
  Mlp4() {
    manual_seed(11);
    const int64_t widths[] = {256, 512, 512, 10};
    for (int l = 0; l < 3; ++l) {
      params.push_back(randn({widths[l], widths[l + 1]}) * (1.0 / std::sqrt(double(widths[l]))));
      params.push_back(zeros({widths[l + 1]}));
    }
    for (const Tensor& p : params) v.push_back(randn(p.sizes()));
    x = randn({128, 256});
    target = randn({128, 10});
  }
  Tensor loss(const std::vector<Tensor>& w) const {
    Tensor h = x;
    for (size_t l = 0; l < w.size(); l += 2) {
      h = matmul(h, w[l]) + w[l + 1];
      if (l + 2 < w.size()) h = tanh(h);
    }
    Tensor d = h - target;
    return mean(d * d);
  }
  /// The parameters as one flat vector, and back (slices of it).
  Tensor flat(const std::vector<Tensor>& w) const {
    std::vector<Tensor> parts;
    for (const Tensor& t : w) parts.push_back(t.reshape({-1}));
    return cat(parts, 0);
  }
  std::vector<Tensor> unflat(const Tensor& f) const {
    std::vector<Tensor> out;
    int64_t at = 0;
    for (const Tensor& p : params) {
      out.push_back(f.slice(0, at, at + p.numel()).reshape(p.sizes()));
      at += p.numel();
    }
    return out;
  }
};

std::vector<Tensor> tape_gradient(const Mlp4& m) {
  GradientTape tape;
  const std::vector<Tensor> w = watched(tape, m.params);
  return tape.gradient(m.loss(w), w);
}
std::vector<Tensor> tape_hvp(const Mlp4& m) {
  GradientTape outer;
  const std::vector<Tensor> w = watched(outer, m.params);
  Tensor dot;
  {
    GradientTape inner({.higher_order = true});
    for (const Tensor& t : w) inner.watch(t);
    std::vector<Tensor> g = inner.gradient(m.loss(w), w);
    for (size_t k = 0; k < g.size(); ++k) dot = k == 0 ? sum(g[k] * m.v[k]) : dot + sum(g[k] * m.v[k]);
  }
  return outer.gradient(dot, w);
}

/// The loss through strata::compile (bias+tanh and the last layer's
/// bias, difference and square fused), differentiated by tapes.
CompiledFunction compiled_loss(const Mlp4& m) {
  return compile([&m](const std::vector<Tensor>& w) { return std::vector<Tensor>{m.loss(w)}; });
}
std::vector<Tensor> compiled_gradient(const Mlp4& m, const CompiledFunction& loss) {
  GradientTape tape;
  const std::vector<Tensor> w = watched(tape, m.params);
  return tape.gradient(loss(w)[0], w);
}
std::vector<Tensor> compiled_hvp(const Mlp4& m, const CompiledFunction& loss) {
  GradientTape outer;
  const std::vector<Tensor> w = watched(outer, m.params);
  Tensor dot;
  {
    GradientTape inner({.higher_order = true});
    for (const Tensor& t : w) inner.watch(t);
    std::vector<Tensor> g = inner.gradient(loss(w)[0], w);
    for (size_t k = 0; k < g.size(); ++k) dot = k == 0 ? sum(g[k] * m.v[k]) : dot + sum(g[k] * m.v[k]);
  }
  return outer.gradient(dot, w);
}
void BM_Strata_Grad_Compiled(benchmark::State& state) {
  Mlp4 m;
  const CompiledFunction loss = compiled_loss(m);
  for (auto _ : state) benchmark::DoNotOptimize(compiled_gradient(m, loss));
}
void BM_Strata_Hvp_Compiled(benchmark::State& state) {
  Mlp4 m;
  const CompiledFunction loss = compiled_loss(m);
  for (auto _ : state) benchmark::DoNotOptimize(compiled_hvp(m, loss));
}

void BM_Strata_Grad_Tape(benchmark::State& state) {
  Mlp4 m;
  for (auto _ : state) benchmark::DoNotOptimize(tape_gradient(m));
}
void BM_Strata_Grad_Transform(benchmark::State& state) {
  Mlp4 m;
  ScalarFn f = [&](const std::vector<Tensor>& w) { return m.loss(w); };
  for (auto _ : state) benchmark::DoNotOptimize(grad(f, m.params));
}
void BM_Strata_Grad_FlatTransform(benchmark::State& state) {
  Mlp4 m;
  Tensor flat = m.flat(m.params);
  Fn f = [&](const Tensor& w) { return m.loss(m.unflat(w)); };
  for (auto _ : state) benchmark::DoNotOptimize(grad(f)(flat));
}
void BM_Strata_Hvp_NestedTapes(benchmark::State& state) {
  Mlp4 m;
  for (auto _ : state) benchmark::DoNotOptimize(tape_hvp(m));
}
template <HvpMode mode>
void BM_Strata_Hvp_Transform(benchmark::State& state) {
  Mlp4 m;
  ScalarFn f = [&](const std::vector<Tensor>& w) { return m.loss(w); };
  for (auto _ : state) benchmark::DoNotOptimize(hvp(f, m.params, m.v, mode));
}
void BM_Strata_Hvp_FlatTransform(benchmark::State& state) {
  Mlp4 m;
  Tensor flat = m.flat(m.params), v = m.flat(m.v);
  Fn f = [&](const Tensor& w) { return m.loss(m.unflat(w)); };
  for (auto _ : state) benchmark::DoNotOptimize(hvp(f, flat, v));
}
BENCHMARK(BM_Strata_Grad_Tape)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Strata_Grad_Compiled)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Strata_Hvp_Compiled)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Strata_Grad_Transform)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Strata_Grad_FlatTransform)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Strata_Hvp_NestedTapes)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Strata_Hvp_Transform<HvpMode::forward_over_reverse>)
    ->Name("BM_Strata_Hvp_TransformFwdRev")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Strata_Hvp_Transform<HvpMode::reverse_over_reverse>)
    ->Name("BM_Strata_Hvp_TransformRevRev")
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Strata_Hvp_FlatTransform)->Unit(benchmark::kMillisecond);

#ifdef STRATA_HAVE_TORCH
std::vector<torch::Tensor> torch_params(const Problem& p) {
  std::vector<torch::Tensor> out;
  for (const Tensor& t : p.params) {
    std::vector<float> v = t.to_vector<float>();
    std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
    out.push_back(torch::from_blob(v.data(), shape, torch::kFloat32).clone().requires_grad_(true));
  }
  return out;
}
torch::Tensor torch_of(const Tensor& t) {
  std::vector<float> v = t.to_vector<float>();
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  return torch::from_blob(v.data(), shape, torch::kFloat32).clone();
}
std::vector<torch::Tensor> torch_loop(const std::vector<torch::Tensor>& w, const torch::Tensor& x,
                                      const torch::Tensor& target) {
  std::vector<std::vector<torch::Tensor>> per(w.size());
  for (int64_t i = 0; i < x.size(0); ++i) {
    torch::Tensor h = x[i];
    for (size_t l = 0; l + 1 < w.size(); l += 2) {
      h = torch::matmul(h, w[l]) + w[l + 1];
      if (l + 2 < w.size()) h = torch::tanh(h);
    }
    torch::Tensor d = h - target[i];
    std::vector<torch::Tensor> g = torch::autograd::grad({(d * d).sum()}, w);
    for (size_t k = 0; k < g.size(); ++k) per[k].push_back(g[k]);
  }
  std::vector<torch::Tensor> out;
  for (auto& v : per) out.push_back(torch::stack(v, 0));
  return out;
}
void BM_Torch_PerSampleMlp_Loop(benchmark::State& state) {
  Problem p = make_problem(true, 64);
  auto w = torch_params(p);
  auto x = torch_of(p.x), t = torch_of(p.target);
  for (auto _ : state) benchmark::DoNotOptimize(torch_loop(w, x, t));
}
void BM_Torch_PerSampleLinear_Loop(benchmark::State& state) {
  Problem p = make_problem(false, state.range(0));
  auto w = torch_params(p);
  auto x = torch_of(p.x), t = torch_of(p.target);
  for (auto _ : state) benchmark::DoNotOptimize(torch_loop(w, x, t));
}
#endif

BENCHMARK(BM_Strata_PerSampleMlp_Loop)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Strata_PerSampleMlp_Vmap)->Unit(benchmark::kMillisecond);
constexpr int64_t kBatches[] = {1, 8, 64, 256};

/// Registered under names with the batch in them ("BM_..._Vmap/b64"), so
/// that the ratios can find each size.
void register_sizes(const char* name, void (*fn)(benchmark::State&)) {
  for (int64_t b : kBatches) {
    benchmark::RegisterBenchmark((std::string(name) + "/b" + std::to_string(b)).c_str(), fn)
        ->Arg(b)
        ->Unit(benchmark::kMicrosecond);
  }
}
// --- fixed_point under vmap ----------------------------------------------------

Tensor heron(const Tensor& x, const std::vector<Tensor>& p) { return (x + p[0] / x) * 0.5; }
Tensor fixed_point_sqrt(const Tensor& a) { return fixed_point(heron, ones_like(a), {a}).x; }
Tensor heron_inputs() {
  manual_seed(13);
  return rand({256, 16}, {.dtype = DType::f64}) * 8.0 + 0.5;
}
Tensor fixed_point_loop(const Tensor& a) {
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < a.size(0); ++i) rows.push_back(fixed_point_sqrt(a.select(0, i)));
  return stack(rows, 0);
}
void BM_Strata_FixedPoint_Loop(benchmark::State& state) {
  Tensor a = heron_inputs();
  for (auto _ : state) benchmark::DoNotOptimize(fixed_point_loop(a));
}
void BM_Strata_FixedPoint_Vmap(benchmark::State& state) {
  Tensor a = heron_inputs();
  for (auto _ : state) benchmark::DoNotOptimize(vmap(Fn(fixed_point_sqrt))(a));
}
BENCHMARK(BM_Strata_FixedPoint_Loop)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Strata_FixedPoint_Vmap)->Unit(benchmark::kMillisecond);

BENCHMARK(BM_Strata_Jacfwd_Loop)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Strata_Jacfwd_Vmap)->Unit(benchmark::kMillisecond);
#ifdef STRATA_HAVE_TORCH
BENCHMARK(BM_Torch_PerSampleMlp_Loop)->Unit(benchmark::kMillisecond);
#endif

double max_difference(const Tensor& a, const Tensor& b) { return amax(abs(a - b)).item<double>(); }

/// Every vmap program against its loop before anything is timed.
bool programs_agree() {
  bool ok = true;
  for (bool hidden : {true, false}) {
    Problem p = make_problem(hidden, 64);
    std::vector<Tensor> a = vmap_grads(p), b = loop_grads(p);
    for (size_t k = 0; k < a.size(); ++k) {
      const double d = max_difference(a[k], b[k]);
      if (!(d <= 1e-4)) {
        std::fprintf(stderr, "per-sample gradient %zu (%s) differs from the loop's by %g\n", k,
                     hidden ? "mlp" : "linear", d);
        ok = false;
      }
    }
  }
  Tensor w = jac_weight(), x = rand({kJac});
  Fn f = [&](const Tensor& v) { return tanh(matmul(w, v)); };
  if (const double d = max_difference(jacfwd(f, x), jacobian_loop(f, x)); !(d <= 1e-5)) {
    std::fprintf(stderr, "jacfwd differs from the loop's by %g\n", d);
    ok = false;
  }
  {
    Tensor a = heron_inputs();
    if (const double d = max_difference(vmap(Fn(fixed_point_sqrt))(a), fixed_point_loop(a)); !(d == 0.0)) {
      std::fprintf(stderr, "fixed_point under vmap differs from the loop's by %g\n", d);
      ok = false;
    }
  }
  Mlp4 m;
  ScalarFn loss = [&](const std::vector<Tensor>& p) { return m.loss(p); };
  std::vector<Tensor> g_tape = tape_gradient(m), g_list = grad(loss, m.params);
  std::vector<Tensor> g_flat = m.unflat(grad([&](const Tensor& p) { return m.loss(m.unflat(p)); })(m.flat(m.params)));
  std::vector<Tensor> h_tape = tape_hvp(m), h_fwd = hvp(loss, m.params, m.v),
                      h_rev = hvp(loss, m.params, m.v, HvpMode::reverse_over_reverse);
  std::vector<Tensor> h_flat =
      m.unflat(hvp([&](const Tensor& p) { return m.loss(m.unflat(p)); }, m.flat(m.params), m.flat(m.v)));
  const CompiledFunction compiled = compiled_loss(m);
  compiled_gradient(m, compiled);  // the trace
  std::vector<Tensor> g_compiled = compiled_gradient(m, compiled), h_compiled = compiled_hvp(m, compiled);
  if (compiled.stats().fused_regions != 3) {
    std::fprintf(stderr, "the compiled loss has %llu fused regions, expected 3:\n%s",
                 static_cast<unsigned long long>(compiled.stats().fused_regions),
                 compiled.report_for(m.params).text().c_str());
    ok = false;
  }
  for (size_t k = 0; k < g_tape.size(); ++k) {
    const double scale = 1e-4 * (1.0 + amax(abs(h_tape[k])).item<double>());
    const double worst =
        std::max({max_difference(g_tape[k], g_list[k]), max_difference(g_tape[k], g_flat[k]),
                  max_difference(h_tape[k], h_fwd[k]) / scale, max_difference(h_tape[k], h_rev[k]) / scale,
                  max_difference(h_tape[k], h_flat[k]) / scale, max_difference(g_tape[k], g_compiled[k]),
                  max_difference(h_tape[k], h_compiled[k]) / scale});
    if (!(worst <= 1.0)) {
      std::fprintf(stderr, "the transforms' gradient or HVP of parameter %zu differs from the tapes' (%g)\n", k, worst);
      ok = false;
    }
  }
  return ok;
}


}  // namespace

int main(int argc, char** argv) {
  register_sizes("BM_Strata_PerSampleLinear_Loop", BM_Strata_PerSampleLinear_Loop);
  register_sizes("BM_Strata_PerSampleLinear_Vmap", BM_Strata_PerSampleLinear_Vmap);
#ifdef STRATA_HAVE_TORCH
  register_sizes("BM_Torch_PerSampleLinear_Loop", BM_Torch_PerSampleLinear_Loop);
#endif
  const int threads = strata::bench::start_cpu_bench(argc, argv);
  if (threads < 0) return 1;
  if (!programs_agree()) {
    std::fprintf(stderr, "bench_vmap: vmap and the loop disagree; not timing them\n");
    return 1;
  }
  strata::bench::RatioReporter reporter(isatty(STDOUT_FILENO) != 0 ? benchmark::ConsoleReporter::OO_Color
                                                                   : benchmark::ConsoleReporter::OO_None);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::cout.flush();
  std::printf("\nratios (medians when repeated; %d thread%s each):\n", threads, threads == 1 ? "" : "s");
  reporter.print_ratio("per-sample MLP: vmap / loop", "BM_Strata_PerSampleMlp_Vmap", "BM_Strata_PerSampleMlp_Loop");
  for (int64_t n : kBatches) {
    const std::string b = "/b" + std::to_string(n);
    reporter.print_ratio("per-sample linear, batch " + std::to_string(n) + ": vmap / loop",
                "BM_Strata_PerSampleLinear_Vmap" + b, "BM_Strata_PerSampleLinear_Loop" + b);
  }
  reporter.print_ratio("jacfwd 256->256: vmap / per-element loop", "BM_Strata_Jacfwd_Vmap", "BM_Strata_Jacfwd_Loop");
  reporter.print_ratio("fixed_point, 256 lanes: vmap (masked) / loop", "BM_Strata_FixedPoint_Vmap",
              "BM_Strata_FixedPoint_Loop");
  reporter.print_ratio("grad over the list / tape", "BM_Strata_Grad_Transform", "BM_Strata_Grad_Tape");
  reporter.print_ratio("grad over a flat vector / tape", "BM_Strata_Grad_FlatTransform", "BM_Strata_Grad_Tape");
  reporter.print_ratio("hvp (fwd over rev) over the list / nested tapes", "BM_Strata_Hvp_TransformFwdRev",
              "BM_Strata_Hvp_NestedTapes");
  reporter.print_ratio("hvp (rev over rev) over the list / nested tapes", "BM_Strata_Hvp_TransformRevRev",
              "BM_Strata_Hvp_NestedTapes");
  reporter.print_ratio("hvp over a flat vector / nested tapes", "BM_Strata_Hvp_FlatTransform",
              "BM_Strata_Hvp_NestedTapes");
#ifdef STRATA_HAVE_TORCH
  reporter.print_ratio("per-sample MLP: Strata vmap / libtorch loop", "BM_Strata_PerSampleMlp_Vmap",
              "BM_Torch_PerSampleMlp_Loop");
  reporter.print_ratio("per-sample linear, batch 64: Strata vmap / libtorch loop",
              "BM_Strata_PerSampleLinear_Vmap/b64", "BM_Torch_PerSampleLinear_Loop/b64");
#endif
  benchmark::Shutdown();
  return 0;
}
