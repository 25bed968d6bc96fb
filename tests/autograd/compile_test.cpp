// compile_test.cpp — strata::compile and the fusion pass: compiled and eager
// results (values, gradients to second order) agree, the cache traces once
// per signature and sees weights updated in place, functions that cannot be
// replayed fall back with their reason, and the fusion report names why a
// chain split. Public API only; on the default device.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <random>
#include <strata/strata.hpp>
#include <thread>

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using strata_test::real_dtype;

std::vector<double> host(const Tensor& t) { return t.detach().to(Device("cpu:0")).to_vector<double>(); }

/// Bit for bit where the fused kernel promises it (the CPU plugin), else to
/// the dtype's tolerance (a device that runs the decomposition computes
/// the same ops, but its kernels need not match one another across calls).
void expect_same(const Tensor& got, const Tensor& want, double rtol = 0.0) {
  ASSERT_EQ(got.sizes(), want.sizes());
  ASSERT_EQ(got.dtype(), want.dtype());
  const std::vector<double> a = host(got), b = host(want);
  for (size_t i = 0; i < a.size(); ++i) {
    if (rtol == 0.0) {
      EXPECT_EQ(a[i], b[i]) << "element " << i;
    } else {
      EXPECT_NEAR(a[i], b[i], rtol * (1.0 + std::abs(b[i]))) << "element " << i;
    }
  }
}

int count_ops(const Graph& g, const std::string& op) {
  int n = 0;
  for (const GraphNode& node : g.nodes) n += node.op == op ? 1 : 0;
  return n;
}

/// A chain of 14 elementwise ops over an input and a captured weight.
struct Chain {
  Tensor w;
  std::vector<Tensor> operator()(const std::vector<Tensor>& in) const {
    const Tensor& x = in[0];
    Tensor y = sin(x * w) + exp(x) * 0.5;
    y = tanh(y) - sigmoid(x);
    return {relu(y * y + 0.25) / (abs(x) + 1.0)};
  }
};

TEST(Compile, AFusedChainMatchesEagerValuesAndGradientsToSecondOrder) {
  manual_seed(11);
  const DType t = real_dtype();
  Chain chain{randn({64}, {.dtype = t, .requires_grad = true})};
  auto compiled = compile([&chain](const std::vector<Tensor>& in) { return chain(in); });
  Tensor x = randn({64}, {.dtype = t, .requires_grad = true});
  expect_same(compiled({x})[0], chain({x})[0]);  // the first call: the trace's own run
  Tensor x2 = randn({64}, {.dtype = t, .requires_grad = true});
  Tensor got = compiled({x2})[0], want = chain({x2})[0];
  const bool cpu = x.device() == Device("cpu:0");
  expect_same(got, want);

  CompileStats s = compiled.stats();
  EXPECT_EQ(s.calls, 2u);
  EXPECT_EQ(s.traces, 1u);
  EXPECT_EQ(s.replays, 1u);
  EXPECT_EQ(s.fused_regions, 1u);
  EXPECT_EQ(s.fused_ops, 14u);
  std::shared_ptr<const Graph> g = compiled.graph_for({x2});
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(count_ops(*g, "fused_elementwise"), 1);
  EXPECT_EQ(g->nodes.size(), 1u) << "every op of the chain is in the region";
  EXPECT_EQ(g->input_dtypes.size(), 2u) << "the weight is captured as an input, not a constant";

  // First order, both inputs; the fused op's derivative walks its program
  // with the ops' own rules.
  const double rtol = cpu ? 0.0 : strata_test::tolerance(t).rtol;
  chain.w.set_grad(Tensor());
  sum(got).backward();
  const Tensor gx = x2.grad(), gw = chain.w.grad();
  x2.set_grad(Tensor());
  chain.w.set_grad(Tensor());
  sum(want).backward();
  expect_same(gx, x2.grad(), rtol == 0.0 ? 1e-14 : rtol);
  expect_same(gw, chain.w.grad(), rtol == 0.0 ? 1e-14 : rtol);
  // Second order: a Hessian-vector product through the compiled function.
  Fn fc = [&](const Tensor& v) { return sum(compiled({v})[0]); };
  Fn fe = [&](const Tensor& v) { return sum(chain({v})[0]); };
  Tensor v = randn({64}, {.dtype = t});
  Tensor xd = x2.detach();
  expect_same(hvp(fc, xd, v), hvp(fe, xd, v), cpu ? 1e-12 : 1e-3);
  expect_same(jvp(fc, xd, v).second, jvp(fe, xd, v).second, cpu ? 1e-12 : 1e-3);
}

// A call autograd records is traced for its backward pass: the fused op also
// writes the costly values its backward program reads instead of
// recomputing them; the same call under no_grad is a signature of its own,
// without them. Gradients agree with eager either way (first order above).
TEST(Compile, ADifferentiatedCallSavesCostlyValuesForTheBackwardPass) {
  manual_seed(13);
  const DType t = real_dtype();
  Chain chain{randn({32}, {.dtype = t, .requires_grad = true})};
  auto compiled = compile([&chain](const std::vector<Tensor>& in) { return chain(in); });
  const Tensor x = randn({32}, {.dtype = t});
  Tensor y = compiled({x})[0];  // x takes no gradient, but the captured weight does
  {
    NoGradGuard no_grad;
    compiled({x});
  }
  const CompileStats s = compiled.stats();
  EXPECT_EQ(s.traces, 2u) << "grad mode is part of the signature";
  ASSERT_EQ(s.signatures.size(), 2u);
  EXPECT_NE(s.signatures[0].find(" no_grad"), std::string::npos) << s.signatures[0];
  const FusionReport with = compiled.report_for({x});  // grad mode on again
  ASSERT_EQ(with.regions.size(), 1u) << with.text();
  // exp, tanh and sigmoid: their derivatives read their values (the
  // division's, which its derivative reads too, is the output already;
  // sin's derivative reads its argument, and cos is computed either way).
  EXPECT_EQ(with.regions[0].saved, 3) << with.text();
  EXPECT_EQ(with.regions[0].outputs, 4) << with.text();
  EXPECT_NE(with.text().find("4 outputs, 3 saved for the backward pass"), std::string::npos) << with.text();
  std::shared_ptr<const Graph> g = compiled.graph_for({x});
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->nodes.front().outputs.size(), 4u);
  EXPECT_EQ(g->outputs.size(), 1u) << "saved values are no outputs of the graph";
  {
    NoGradGuard no_grad;
    const FusionReport without = compiled.report_for({x});
    ASSERT_EQ(without.regions.size(), 1u);
    EXPECT_EQ(without.regions[0].saved, 0);
    EXPECT_EQ(without.regions[0].outputs, 1);
  }
  // The weight as an input: a replay and its backward pass are two fused
  // ops (where kernels serve every signature: the CPU and Vulkan plugins'),
  // the backward one reading the saved values, and no op of the chain runs
  // on its own.
  auto by_weight = compile([&x](const std::vector<Tensor>& in) { return Chain{in[0]}({x}); });
  Fn through = [&by_weight](const Tensor& w) { return sum(by_weight({w})[0]); };
  Fn eager = [&x](const Tensor& w) { return sum(Chain{w}({x})[0]); };
  const Tensor w = chain.w.detach();
  grad(through)(w);  // the trace
  const bool cpu = x.device() == Device("cpu:0");
  runtime().start_op_census();
  const Tensor gw = grad(through)(w);
  int fused_calls = 0, unfused = 0;
  for (const OpUse& use : runtime().stop_op_census()) {
    if (use.op == "strata::fused_elementwise") fused_calls += static_cast<int>(use.count);
    if (use.op == "strata::tanh" || use.op == "strata::exp" || use.op == "strata::sigmoid" || use.op == "strata::sin")
      ++unfused;
  }
  if (cpu || x.device() == Device("vulkan:0")) {
    EXPECT_EQ(fused_calls, 2) << "the forward and one backward program";
    EXPECT_EQ(unfused, 0);
  }
  expect_same(gw, grad(eager)(w), cpu ? 1e-14 : strata_test::tolerance(t).rtol);
  Tensor v = randn({32}, {.dtype = t});
  expect_same(hvp(through, w, v), hvp(eager, w, v), cpu ? 1e-12 : 1e-3);
  expect_same(hvp(through, w, v, HvpMode::reverse_over_reverse), hvp(eager, w, v, HvpMode::reverse_over_reverse),
              cpu ? 1e-12 : 1e-3);
}

TEST(Compile, TracesOncePerSignatureAndReadsCapturedWeightsAtEachCall) {
  manual_seed(12);
  const DType t = real_dtype();
  Tensor w = randn({8}, {.dtype = t});
  auto compiled = compile([&w](const std::vector<Tensor>& in) { return std::vector<Tensor>{tanh(in[0] * w) + 1.0}; });
  Tensor x = randn({8}, {.dtype = t});
  compiled({x});
  {
    NoGradGuard no_grad;
    w.copy_(w * -2.0);  // an optimizer's in-place update
  }
  expect_same(compiled({x})[0], tanh(x * w) + 1.0);
  compiled({randn({3, 8}, {.dtype = t})});  // a new shape: a new trace
  compiled({randn({3, 8}, {.dtype = t})});
  CompileStats s = compiled.stats();
  EXPECT_EQ(s.traces, 2u);
  EXPECT_EQ(s.replays, 2u);
  // Without the fusion pass the trace replays as recorded.
  auto unfused = compile([&w](const std::vector<Tensor>& in) { return std::vector<Tensor>{tanh(in[0] * w) + 1.0}; },
                         {.fuse = false});
  unfused({x});
  expect_same(unfused({x})[0], tanh(x * w) + 1.0);
  ASSERT_NE(unfused.graph_for({x}), nullptr);
  EXPECT_EQ(count_ops(*unfused.graph_for({x}), "fused_elementwise"), 0);
  EXPECT_EQ(unfused.graph_for({x})->nodes.size(), 3u);
  EXPECT_EQ(unfused.stats().fused_regions, 0u);

  // At most max_signatures traces are kept: the least recently used goes
  // (a sum: not elementwise, so each shape is its own signature).
  auto small = compile([](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(exp(in[0]) + 1.0)}; },
                       {.max_signatures = 2});
  for (int64_t n : {1, 2, 1, 3, 2}) small({ones({n}, {.dtype = t})});
  EXPECT_EQ(small.stats().traces, 4u) << "size 2 was dropped when size 3 came";
  EXPECT_EQ(small.stats().replays, 1u);
}

// A graph of elementwise ops only, on inputs of one shape, serves every
// shape of the traced ranks: a new batch size replays, values exact.
TEST(Compile, AnElementwiseTraceServesEveryShapeOfItsRanks) {
  const DType t = real_dtype();
  auto f = compile(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{tanh(in[0] * in[1] + 0.5) * sigmoid(in[1])}; });
  auto eager = [](const Tensor& a, const Tensor& b) { return tanh(a * b + 0.5) * sigmoid(b); };
  for (int64_t n : {64, 1000, 7, 64}) {
    Tensor a = randn({n}, {.dtype = t}), b = randn({n}, {.dtype = t});
    expect_same(f({a, b})[0], eager(a, b));
  }
  CompileStats s = f.stats();
  EXPECT_EQ(s.traces, 1u);
  EXPECT_EQ(s.shape_free_traces, 1u);
  EXPECT_EQ(s.replays, 3u);
  // Another rank, or inputs of two shapes (broadcast): traced for themselves.
  Tensor m = randn({3, 5}, {.dtype = t}), row = randn({5}, {.dtype = t});
  expect_same(f({m, m})[0], eager(m, m));
  expect_same(f({m, row})[0], eager(m, row));
  expect_same(f({m, row})[0], eager(m, row));
  s = f.stats();
  EXPECT_EQ(s.traces, 3u);
  EXPECT_EQ(s.shape_free_traces, 2u) << "[3, 5] with [5] is not one shape";
  const std::string d(dtype_name(t)), at = "@" + m.device().str();
  EXPECT_EQ(s.signatures, (std::vector<std::string>{d + "[3, 5]" + at + " " + d + "[5]" + at,
                                                    d + "[rank 2]" + at + " " + d + "[rank 2]" + at,
                                                    d + "[rank 1]" + at + " " + d + "[rank 1]" + at}));
  // A captured tensor of rank 1 fixes the shape.
  Tensor w = randn({4}, {.dtype = t});
  auto g = compile([&w](const std::vector<Tensor>& in) { return std::vector<Tensor>{exp(in[0] * w)}; });
  g({randn({4}, {.dtype = t})});
  EXPECT_EQ(g.stats().shape_free_traces, 0u);
}

TEST(Compile, WhatCannotBeReplayedFallsBackWithItsReason) {
  const DType t = real_dtype();
  Tensor counter = zeros({1}, {.dtype = t});
  auto writes = compile([&counter](const std::vector<Tensor>& in) {
    counter.copy_(counter + 1.0);
    return std::vector<Tensor>{exp(in[0])};
  });
  Tensor x = randn({4}, {.dtype = t});
  for (int k = 0; k < 3; ++k) expect_same(writes({x})[0], exp(x));
  EXPECT_EQ(host(counter)[0], 3.0) << "the write happens once per call, fallback or not";
  CompileStats s = writes.stats();
  ASSERT_EQ(s.fallbacks.size(), 1u);
  EXPECT_NE(s.fallbacks[0].reason.find("in-place op"), std::string::npos) << s.fallbacks[0].reason;
  EXPECT_NE(s.fallbacks[0].reason.find("made outside the function"), std::string::npos) << s.fallbacks[0].reason;
  EXPECT_EQ(s.traces, 1u);
  EXPECT_EQ(s.eager_calls, 2u);
  EXPECT_EQ(writes.graph_for({x}), nullptr);

  auto draws = compile([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0] + rand(in[0].sizes(), {.dtype = in[0].dtype()})};
  });
  Tensor a = draws({x})[0], b = draws({x})[0];
  EXPECT_NE(host(a), host(b)) << "every call draws afresh";
  ASSERT_EQ(draws.stats().fallbacks.size(), 1u);
  EXPECT_NE(draws.stats().fallbacks[0].reason.find("random"), std::string::npos) << draws.stats().fallbacks[0].reason;


  // .grad is autograd state, not an op: backward() inside the function
  // (it accumulates into the leaves' .grad), reading .grad, and clearing
  // it would not be repeated by a replay, so the signature runs eagerly,
  // and every call accumulates as eager backward() does.
  Tensor w = full({4}, 0.5, {.dtype = t, .requires_grad = true});
  auto steps = compile([&w](const std::vector<Tensor>& in) {
    Tensor loss = sum(tanh(in[0] * w));
    loss.backward();
    return std::vector<Tensor>{loss};
  });
  steps({x});
  const std::vector<double> once = host(w.grad());
  steps({x});
  const std::vector<double> twice = host(w.grad());
  for (size_t k = 0; k < once.size(); ++k) EXPECT_DOUBLE_EQ(twice[k], 2.0 * once[k]);
  ASSERT_EQ(steps.stats().fallbacks.size(), 1u);
  EXPECT_NE(steps.stats().fallbacks[0].reason.find("calls backward()"), std::string::npos)
      << steps.stats().fallbacks[0].reason;
  EXPECT_NE(steps.stats().fallbacks[0].reason.find("GradientTape::gradient"), std::string::npos);
  auto reads_grad = compile([&w](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * w.grad()}; });
  expect_same(reads_grad({x})[0], x * w.grad());
  w.set_grad(w.grad() * 3.0);
  expect_same(reads_grad({x})[0], x * w.grad());
  ASSERT_EQ(reads_grad.stats().fallbacks.size(), 1u);
  EXPECT_NE(reads_grad.stats().fallbacks[0].reason.find("reads a tensor's .grad"), std::string::npos);
  auto clears = compile([&w](const std::vector<Tensor>& in) {
    w.zero_grad();
    return std::vector<Tensor>{exp(in[0])};
  });
  clears({x});
  w.set_grad(ones({4}, {.dtype = t}));
  clears({x});
  EXPECT_FALSE(w.grad().defined()) << "every call clears it";
  ASSERT_EQ(clears.stats().fallbacks.size(), 1u);
  EXPECT_NE(clears.stats().fallbacks[0].reason.find("zero_grad"), std::string::npos);
  // trace() refuses them as well: a saved graph would not write .grad.
  EXPECT_THROW(trace(
                   [&w](const std::vector<Tensor>& in) {
                     sum(in[0] * w).backward();
                     return std::vector<Tensor>{in[0]};
                   },
                   {x}),
               Error);

  // The function's own errors are the caller's, and nothing is kept.
  auto bad = compile([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + in[1]}; });
  EXPECT_THROW(bad({ones({2}), ones({3})}), ShapeError);
  EXPECT_TRUE(bad.stats().fallbacks.empty());
  EXPECT_THROW(bad({Tensor(), ones({2})}), Error);
  EXPECT_THROW(compile(TraceFn()), Error);
}

// A value the function reads on the host (a branch, a number) is a guard:
// each path gets its own trace, replayed while its guards hold; a value
// that changes at every call runs eagerly after four traces, the guard
// named in the reason. Values the function made from constants need none.
TEST(Compile, AHostReadIsAGuardAndEachPathGetsItsTrace) {
  const DType t = real_dtype();
  int runs = 0;  // calls that ran the function (traced it)
  auto branches = compile([&runs](const std::vector<Tensor>& in) {
    ++runs;
    const bool positive = gt(sum(in[0]), zeros({}, {.dtype = in[0].dtype()})).item<bool>();
    return std::vector<Tensor>{positive ? exp(in[0]) : neg(in[0])};
  });
  const Tensor up = full({3}, 1.0, {.dtype = t}), down = full({3}, -1.0, {.dtype = t});
  expect_same(branches({up})[0], exp(up));
  expect_same(branches({up * 2.0})[0], exp(up * 2.0));    // the guard holds: a replay
  expect_same(branches({down})[0], neg(down));            // it fails: a second trace
  expect_same(branches({down * 3.0})[0], neg(down * 3.0));
  expect_same(branches({up * 0.5})[0], exp(up * 0.5));    // the first trace again
  EXPECT_EQ(runs, 2);
  CompileStats s = branches.stats();
  EXPECT_TRUE(s.fallbacks.empty());
  EXPECT_EQ(s.traces, 2u);
  EXPECT_EQ(s.replays, 3u);
  EXPECT_EQ(s.guard_failures, 1u);
  ASSERT_EQ(s.signatures.size(), 2u);
  EXPECT_NE(s.signatures[0].find("(1 guard)"), std::string::npos) << s.signatures[0];
  // A guarded graph replays only inside its compiled function.
  const auto g = branches.graph_for({up});
  ASSERT_NE(g, nullptr);
  try {
    g->save(std::filesystem::temp_directory_path() / "strata_guarded.json");
    ADD_FAILURE() << "a guarded graph was saved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a guard of strata::compile"), std::string::npos) << e.what();
  }

  // A number read from a tensor made before the call: a new value, a new trace.
  Tensor scale = full({}, 2.0, {.dtype = t});
  auto reads_weight =
      compile([&scale](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * scale.item<double>()}; });
  expect_same(reads_weight({up})[0], up * 2.0);
  scale.copy_(full({}, 3.0, {.dtype = t}));
  expect_same(reads_weight({up})[0], up * 3.0);
  expect_same(reads_weight({up})[0], up * 3.0);
  EXPECT_EQ(reads_weight.stats().guard_failures, 1u);
  EXPECT_EQ(reads_weight.stats().replays, 1u);
  EXPECT_TRUE(reads_weight.stats().fallbacks.empty());

  // A value that changes at every call: four traces, then eager, the
  // guard's values in the reason; every result right.
  auto scaled = compile([](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0] * sum(in[0]).item<double>()};
  });
  for (int k = 1; k <= 6; ++k) {
    const Tensor x = full({2}, static_cast<double>(k), {.dtype = t});
    expect_same(scaled({x})[0], x * (2.0 * k));
  }
  s = scaled.stats();
  EXPECT_EQ(s.traces, 4u);
  EXPECT_EQ(s.eager_calls, 2u);
  ASSERT_EQ(s.fallbacks.size(), 1u);
  EXPECT_NE(s.fallbacks[0].reason.find("the guards of 4 traces"), std::string::npos) << s.fallbacks[0].reason;
  EXPECT_NE(s.fallbacks[0].reason.find("guard #1: the function read"), std::string::npos) << s.fallbacks[0].reason;
  EXPECT_NE(s.fallbacks[0].reason.find("now it reads "), std::string::npos) << s.fallbacks[0].reason;
  EXPECT_EQ(s.fallbacks[0].reason.substr(s.fallbacks[0].reason.size() - 3), " 10") << s.fallbacks[0].reason;  // 5 + 5

  auto reads_own =
      compile([](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * full({}, 2.0).item<double>()}; });
  reads_own({up});
  reads_own({up});
  EXPECT_EQ(reads_own.stats().replays, 1u);
  EXPECT_EQ(reads_own.graph_for({up})->nodes.size(), 1u) << "no guard on a value made from constants";
}

TEST(Compile, InsideATraceItRunsEagerlySoTheOuterTraceSeesItsOps) {
  auto inner = compile([](const std::vector<Tensor>& in) { return std::vector<Tensor>{exp(sin(in[0]))}; });
  Tensor x = randn({5});
  Graph g = trace([&inner](const std::vector<Tensor>& in) { return inner(in); }, {x});
  EXPECT_EQ(count_ops(g, "sin"), 1);
  EXPECT_EQ(count_ops(g, "exp"), 1);
  EXPECT_EQ(inner.stats().eager_calls, 1u);
}

TEST(Fuse, TheReportNamesEachRegionAndWhyChainsSplit) {
  const DType t = real_dtype();
  Tensor x = randn({4, 3}, {.dtype = t}), m = randn({3, 3}, {.dtype = t});
  Tensor b = randn({3}, {.dtype = t});
  Graph g = trace(
      [&](const std::vector<Tensor>& in) {
        Tensor h = tanh(in[0] * 2.0 + 1.0);  // region 1 ends: h is an output and read by matmul
        Tensor z = matmul(h, m);
        Tensor e = exp(b) * 3.0;         // broadcast: [3] against [4, 3]
        Tensor y = sin(z) * e + cos(z);  // region 2 reads z, e
        return std::vector<Tensor>{y, h};
      },
      {x});
  FusionReport report;
  Graph f = fuse(g, &report);
  ASSERT_EQ(report.regions.size(), 3u) << report.text();
  EXPECT_EQ(count_ops(f, "fused_elementwise"), 3);
  EXPECT_EQ(count_ops(f, "matmul"), 1);
  const std::string text = report.text();
  std::printf("%s", text.c_str());
  EXPECT_NE(text.find("3 ops (mul add tanh)"), std::string::npos) << text;
  EXPECT_NE(text.find("its shape [3] differs from the region's [4, 3]"), std::string::npos) << text;
  // Same values as the unfused graph, after a save and load of the fused one.
  const auto path = std::filesystem::temp_directory_path() / ("strata_fuse_" + std::to_string(::getpid()) + ".json");
  f.save(path);
  Graph loaded = Graph::load(path);
  std::filesystem::remove(path);
  Tensor x2 = randn({4, 3}, {.dtype = t});
  std::vector<Tensor> want = g.run({x2}), got = loaded.run({x2});
  expect_same(got[0], want[0]);
  expect_same(got[1], want[1]);

  // Five distinct tensors: more than the fused op reads.
  std::vector<Tensor> five;
  for (int k = 0; k < 5; ++k) five.push_back(randn({6}, {.dtype = t}));
  Graph wide = trace(
      [](const std::vector<Tensor>& in) { return std::vector<Tensor>{(((in[0] * in[1]) + in[2]) * in[3]) - in[4]}; },
      five);
  FusionReport wide_report;
  Graph fw = fuse(wide, &wide_report);
  EXPECT_NE(wide_report.text().find("would read 5 tensors"), std::string::npos) << wide_report.text();
  expect_same(fw.run(five)[0], wide.run(five)[0]);
  // Nothing to fuse says so; a graph not from trace() is refused.
  FusionReport none;
  fuse(trace([](const std::vector<Tensor>& in) { return std::vector<Tensor>{sum(in[0])}; }, {x}), &none);
  EXPECT_EQ(none.text(), "no elementwise chain to fuse\n");
  EXPECT_THROW(fuse(Graph{}), Error);

  // Grad mode splits a chain: a region replays in one mode.
  Graph modes = trace(
      [](const std::vector<Tensor>& in) {
        Tensor a = sin(in[0]) * 2.0;
        NoGradGuard off;
        return std::vector<Tensor>{exp(a) + 1.0};
      },
      {x});
  FusionReport modes_report;
  Graph fm = fuse(modes, &modes_report);
  ASSERT_EQ(modes_report.regions.size(), 2u) << modes_report.text();
  EXPECT_NE(modes_report.text().find("it ran with grad mode on, the region with it off"), std::string::npos)
      << modes_report.text();
  ASSERT_EQ(fm.nodes.size(), 2u);
  EXPECT_FALSE(fm.nodes[0].no_grad);
  EXPECT_TRUE(fm.nodes[1].no_grad);
  expect_same(fm.run({x})[0], modes.run({x})[0]);
}

// A value read outside its chain is one more output of the fused op (the
// fused node then stands before that reader), unless the reader leads back
// into the chain.
TEST(Fuse, AValueReadOutsideTheChainBecomesAnOutput) {
  const DType t = real_dtype();
  Tensor x = randn({4, 4}, {.dtype = t}), m = randn({4, 4}, {.dtype = t});
  Graph g = trace(
      [&](const std::vector<Tensor>& in) {
        Tensor y = sin(in[0]);  // read by the chain and by the matmul
        Tensor q = matmul(y, m);
        return std::vector<Tensor>{y * y + 1.0, q};
      },
      {x});
  FusionReport report;
  Graph f = fuse(g, &report);
  ASSERT_EQ(report.regions.size(), 1u) << report.text();
  EXPECT_EQ(report.regions[0].outputs, 2);
  EXPECT_NE(report.text().find("3 ops (sin mul add), 1 input, 2 outputs"), std::string::npos) << report.text();
  ASSERT_EQ(f.nodes.size(), 2u);
  EXPECT_EQ(f.nodes[0].op, "fused_elementwise") << "the matmul reads one of its outputs";
  Tensor x2 = randn({4, 4}, {.dtype = t, .requires_grad = true});
  std::vector<Tensor> want = g.run({x2}), got = f.run({x2});
  for (size_t k = 0; k < 2; ++k) expect_same(got[k], want[k]);
  Fn through_g = [&](const Tensor& v) {
    std::vector<Tensor> o = g.run({v});
    return sum(o[0]) + sum(o[1]);
  };
  Fn through_f = [&](const Tensor& v) {
    std::vector<Tensor> o = f.run({v});
    return sum(o[0]) + sum(o[1]);
  };
  // The fused op's backward program accumulates in another order than the
  // ops' own rules: equal to rounding.
  expect_same(grad(through_f)(x2.detach()), grad(through_g)(x2.detach()),
              t == DType::f64 ? 1e-12 : strata_test::tolerance(t).rtol);

  // The matmul's result comes back into the chain: sin stays out.
  Graph c = trace(
      [&](const std::vector<Tensor>& in) {
        Tensor y = sin(in[0]);
        return std::vector<Tensor>{exp(y * matmul(y, m))};
      },
      {x});
  FusionReport cycle;
  Graph cf = fuse(c, &cycle);
  EXPECT_NE(cycle.text().find("leads back into the region"), std::string::npos) << cycle.text();
  ASSERT_EQ(cycle.regions.size(), 1u) << cycle.text();
  EXPECT_EQ(cycle.regions[0].ops, (std::vector<std::string>{"mul", "exp"}));
  expect_same(cf.run({x2})[0], c.run({x2})[0]);
}

// One compiled function called from four threads at once, on two
// signatures: every call gives the eager values, and the cache counts every
// call once (the threads preset runs it under ThreadSanitizer).
TEST(Threads, ACompiledFunctionCalledFromSeveralThreadsGivesTheEagerValues) {
  const DType t = real_dtype();
  const Tensor w = randn({16}, {.dtype = t});
  auto eager = [&w](const Tensor& x) { return tanh(x * w) + sin(x) * 0.5; };
  const CompiledFunction f = compile([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{eager(in[0])}; });
  const std::vector<Tensor> xs{randn({16}, {.dtype = t}), randn({3, 16}, {.dtype = t})};
  std::vector<Tensor> want;
  for (const Tensor& x : xs) want.push_back(eager(x));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = 0; i < 50; ++i) {
        const size_t s = static_cast<size_t>((i + k) % 2);
        const std::vector<double> got = host(f({xs[s]})[0]), expected = host(want[s]);
        if (got != expected) ++wrong;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  const CompileStats s = f.stats();
  EXPECT_EQ(s.calls, 200u);
  EXPECT_EQ(s.traces + s.replays, 200u);
  EXPECT_GE(s.traces, 2u);  // each signature at least once (two threads may trace one at the same time)
}

// Random programs of elementwise ops mixed with matrix products, broadcast
// operands and constants, values read many times and several outputs: the
// fused graph (saved and loaded again, so its order and numbering are what
// a file needs) gives the unfused graph's values and gradients.
TEST(Fuse, RandomGraphsKeepTheirValuesAndGradients) {
  const DType t = real_dtype();
  std::mt19937 rng(2026);
  const Tensor w = randn({6, 6}, {.dtype = t}) * 0.4, row = randn({6}, {.dtype = t});
  struct Step {
    int op;    // 0-7 unary, 8-10 binary, 11 matmul, 12 add the row, 13 times a constant
    int a, b;  // operand indices among the values so far
  };
  int regions = 0, multi_output = 0, saving = 0;
  for (int trial = 0; trial < 40; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    std::vector<Step> steps;
    const int n_steps = 4 + static_cast<int>(rng() % 14);
    for (int s = 0; s < n_steps; ++s) {
      const int values = 2 + s;
      steps.push_back(
          {static_cast<int>(rng() % 14), static_cast<int>(rng() % values), static_cast<int>(rng() % values)});
    }
    const int n_out = 1 + static_cast<int>(rng() % 3);
    auto program = [&](const std::vector<Tensor>& in) {
      std::vector<Tensor> v(in.begin(), in.end());
      for (const Step& s : steps) {
        const Tensor& a = v[static_cast<size_t>(s.a)];
        const Tensor& b = v[static_cast<size_t>(s.b)];
        Tensor y;
        switch (s.op) {
          case 0:
            y = neg(a);
            break;
          case 1:
            y = sin(a);
            break;
          case 2:
            y = cos(a);
            break;
          case 3:
            y = tanh(a);
            break;
          case 4:
            y = sigmoid(a);
            break;
          case 5:
            y = relu(a);
            break;
          case 6:
            y = abs(a);
            break;
          case 7:
            y = exp(tanh(a));
            break;  // bounded
          case 8:
            y = a + b;
            break;
          case 9:
            y = a - b;
            break;
          case 10:
            y = tanh(a * b);
            break;  // bounded
          case 11:
            y = matmul(a, w);
            break;
          case 12:
            y = a + row;
            break;
          default:
            y = a * 0.75;
            break;
        }
        v.push_back(y);
      }
      std::vector<Tensor> out;
      for (int k = 0; k < n_out; ++k) out.push_back(v[v.size() - 1 - static_cast<size_t>(k) * 2 % v.size()]);
      return out;
    };
    const std::vector<Tensor> x{randn({4, 6}, {.dtype = t}), randn({4, 6}, {.dtype = t})};
    const Graph g = trace(program, x);
    FusionReport report;
    const bool save = trial % 2 == 1;  // as compile fuses a differentiated call
    const Graph fused = fuse(g, &report, {.save_for_backward = save});
    regions += static_cast<int>(report.regions.size());
    for (const FusionRegion& r : report.regions) {
      multi_output += r.outputs > 1 ? 1 : 0;
      saving += r.saved > 0 ? 1 : 0;
    }
    const auto path = std::filesystem::temp_directory_path() /
                      ("strata_fuse_random_" + std::to_string(::getpid()) + "_" + std::to_string(trial) + ".json");
    fused.save(path);
    const Graph loaded = Graph::load(path);
    std::filesystem::remove(path);
    std::vector<Tensor> x2{randn({4, 6}, {.dtype = t, .requires_grad = true}),
                           randn({4, 6}, {.dtype = t, .requires_grad = true})};
    const std::vector<Tensor> want = g.run(x2), got = loaded.run(x2);
    ASSERT_EQ(got.size(), want.size()) << report.text();
    for (size_t k = 0; k < want.size(); ++k) expect_same(got[k], want[k]);
    // Gradients of a weighted sum of the outputs.
    auto loss_of = [](const Graph& graph) {
      return ScalarFn([&graph](const std::vector<Tensor>& in) {
        const std::vector<Tensor> out = graph.run(in);
        Tensor l = sum(out[0]);
        for (size_t k = 1; k < out.size(); ++k) l = l + sum(out[k] * static_cast<double>(k + 1));
        return l;
      });
    };
    const double tol = t == DType::f64 ? 1e-12 : strata_test::tolerance(t).rtol;
    const std::vector<Tensor> gw = grad(loss_of(g), x2), gg = grad(loss_of(loaded), x2);
    for (size_t k = 0; k < 2; ++k) {
      ASSERT_EQ(gw[k].defined(), gg[k].defined());
      if (gw[k].defined()) expect_same(gg[k], gw[k], tol);
    }
    // Second order (a backward program that reads saved values is itself
    // differentiated: their cotangents flow back into the forward op).
    if (save && gw[0].defined()) {
      const std::vector<Tensor> v{randn({4, 6}, {.dtype = t}), randn({4, 6}, {.dtype = t})};
      const std::vector<Tensor> hw = hvp(loss_of(g), x2, v, HvpMode::reverse_over_reverse),
                                hg = hvp(loss_of(loaded), x2, v, HvpMode::reverse_over_reverse);
      for (size_t k = 0; k < 2; ++k) {
        ASSERT_EQ(hw[k].defined(), hg[k].defined());
        if (hw[k].defined()) expect_same(hg[k], hw[k], t == DType::f64 ? 1e-10 : tol * 4);
      }
    }
  }
  std::printf("%d fused regions over 40 random programs, %d with several outputs, %d saving values\n", regions,
              multi_output, saving);
  EXPECT_GT(regions, 20);
  EXPECT_GT(multi_output, 0);
  EXPECT_GT(saving, 0);
}

// A training step's loss and gradients, taken inside the function with a
// tape and returned: cross_entropy's label check is left to the gather
// kernel (a host read would make the signature fall back), the backward
// pass is part of the trace, and every replay gives eager's values; a
// label out of range at a replay is the kernel's error, naming it.
TEST(Compile, ALossAndItsGradientsReplayWithTheKernelCheckingTheLabels) {
  const DType t = real_dtype();
  manual_seed(3);
  Tensor w = randn({5, 4}, {.dtype = t, .requires_grad = true});
  Tensor b = randn({4}, {.dtype = t, .requires_grad = true});
  auto step = [&](const std::vector<Tensor>& in) {
    GradientTape tape;
    Tensor loss = nn::functional::cross_entropy(relu(matmul(in[0], w) + b), in[1]);
    std::vector<Tensor> out = tape.gradient(loss, {w, b});
    out.insert(out.begin(), loss);
    return out;
  };
  auto compiled = compile(step);
  Tensor x = randn({6, 5}, {.dtype = t});
  Tensor labels = from_data(std::vector<int64_t>{0, 3, 1, 2, 3, 0}, {6}, {.dtype = DType::i64});
  for (int call = 0; call < 3; ++call) {
    Tensor xc = x * (1.0 + call);
    std::vector<Tensor> got = compiled({xc, labels}), want = step({xc, labels});
    ASSERT_EQ(got.size(), 3u);
    for (size_t k = 0; k < got.size(); ++k) expect_same(got[k], want[k], 1e-12);
  }
  CompileStats s = compiled.stats();
  EXPECT_TRUE(s.fallbacks.empty()) << s.fallbacks[0].reason;
  EXPECT_EQ(s.traces, 1u);
  EXPECT_EQ(s.replays, 2u);
  // The replay's results have history where eager's do: the loss does, the
  // gradients (a backward pass without create_graph) do not, and the
  // replay recorded none of the backward pass's ops.
  {
    GradientTape again;
    std::vector<Tensor> got = compiled({x, labels}), want = step({x, labels});
    for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k].requires_grad(), want[k].requires_grad()) << "output " << k;
    EXPECT_TRUE(got[0].requires_grad());
    std::vector<Tensor> g2 = again.gradient(got[0], {w, b});  // the replayed loss differentiates
    for (size_t k = 0; k < g2.size(); ++k) expect_same(g2[k], want[k + 1], 1e-12);
  }
  Tensor bad = from_data(std::vector<int64_t>{0, 3, 1, 7, 3, 0}, {6}, {.dtype = DType::i64});
  try {
    host(compiled({x, bad})[0]);  // a device may report it when the value is read
    ADD_FAILURE() << "a label out of range replayed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find('7'), std::string::npos) << e.what();
  }
  EXPECT_FALSE(is_compiling());
  bool inside = false;
  compile([&inside](const std::vector<Tensor>& in) {
    inside = is_compiling();
    return std::vector<Tensor>{in[0] + 1.0};
  })({x});
  EXPECT_TRUE(inside);
}

}  // namespace
