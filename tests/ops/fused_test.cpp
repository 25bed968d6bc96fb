// fused_test.cpp — strata::fused_elementwise: a program equals its ops run
// one by one (bit for bit: the CPU plugin's fused kernel runs each
// statement with the unfused op's loop, and a device without a kernel runs
// the ops themselves), on every device; its derivatives (reverse, forward,
// second order) equal those of the unfused chain; malformed programs are
// refused naming the line.
#include <cstring>
#include <strata/plugin/fused_program.hpp>

#include "device_fixture.hpp"

namespace strata_test {
namespace {

namespace s = strata;
namespace fp = strata::plugin::fused;
using s::DType;

class Fused : public DeviceTest {
 protected:
  /// Bit-for-bit equality of two device tensors (NaNs of equal bits equal).
  static void expect_same_bits(const Tensor& got, const Tensor& want) {
    ASSERT_EQ(got.sizes(), want.sizes());
    ASSERT_EQ(got.dtype(), want.dtype());
    const s::Device host("cpu:0");
    const std::vector<double> a = got.to(host).to(DType::f64).to_vector<double>(),
                              b = want.to(host).to(DType::f64).to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) {
        ADD_FAILURE() << "element " << i << ": " << a[i] << " against " << b[i];
        return;
      }
    }
  }
  /// The program's ops one by one, through the public functions: output m.
  static Tensor unfused(const fp::Program& p, const std::vector<Tensor>& in, size_t m = 0) {
    std::vector<Tensor> v = in;
    auto of = [&](const fp::Operand& o) {
      return o.is_constant() ? s::scalar_tensor(o.constant, {.dtype = in[0].dtype(), .device = in[0].device()})
                             : v[static_cast<size_t>(o.value)];
    };
    for (const fp::Statement& st : p.body) {
      v.push_back(s::call_op(
          std::string("strata::") + fp::name(st.op),
          fp::arity(st.op) == 2 ? std::vector<Tensor>{of(st.a), of(st.b)} : std::vector<Tensor>{of(st.a)}, {})[0]);
    }
    return v[static_cast<size_t>(p.outputs[m])];
  }
  /// Whether the device under test has kernels for the op (every
  /// signature): the CPU plugin and the Vulkan plugin; any other decomposes
  /// it (the CUDA/HIP plugin's kernel has not run on a GPU yet).
  static bool has_kernel() {
    const std::string d = GetParam();
    return d == "cpu:0" || d.rfind("vulkan:", 0) == 0;
  }
  static fp::Program parsed(const std::string& text) {
    fp::Program p;
    std::string error;
    EXPECT_TRUE(fp::Program::parse(text, p, error)) << error;
    return p;
  }
};
STRATA_INSTANTIATE_ON_DEVICES(Fused);

// Every op of the vocabulary alone, on 4099 elements (four tiles of the CPU
// kernel and a tail), f32 and f64: the same bits as the op itself.
TEST_P(Fused, EveryStatementGivesTheBitsOfItsOp) {
  for (DType dtype : dtypes({s::f32, s::f64})) {
    Operand x = operand({4099}, dtype, Layout::contiguous, 0.1, 3.0);  // positive: log, sqrt
    Operand y = operand({4099}, dtype, Layout::contiguous, -2.0, 2.0);
    for (int k = 0; k < fp::kOpCount; ++k) {
      const fp::Op op = static_cast<fp::Op>(k);
      STRATA_TRACE(s::dtype_name(dtype) << " " << fp::name(op));
      const std::string text =
          std::string("in 2\n%2 = ") + fp::name(op) + (fp::arity(op) == 2 ? " %1 %0" : " %0") + "\nout %2";
      expect_same_bits(s::fused_elementwise({x.dev, y.dev}, text), unfused(parsed(text), {x.dev, y.dev}));
    }
  }
}

// The bench's 10-op chain, with a constant and a broadcast scalar input.
const char* const kChain =
    "in 2\n"
    "%2 = mul %0 %1\n"
    "%3 = sin %2\n"
    "%4 = add %3 0x1.8p-1\n"
    "%5 = tanh %4\n"
    "%6 = mul %5 %0\n"
    "%7 = exp %6\n"
    "%8 = sub %7 %1\n"
    "%9 = sigmoid %8\n"
    "%10 = mul %9 %9\n"
    "%11 = add %10 %0\n"
    "out %11";

TEST_P(Fused, AChainGivesTheBitsOfItsOps) {
  const fp::Program p = parsed(kChain);
  // f16: each statement's value rounded as its op stores it.
  for (DType dtype : dtypes({s::f32, s::f64, s::f16})) {
    for (const Shape& shape : std::vector<Shape>{{}, {7}, {3, 1500}, {0, 4}}) {
      STRATA_TRACE(s::dtype_name(dtype) << shape_str(shape));
      Operand x = operand(shape, dtype), y = operand(shape, dtype);
      expect_same_bits(s::fused_elementwise({x.dev, y.dev}, kChain), unfused(p, {x.dev, y.dev}));
      // A broadcast second input (a scalar), and a transposed first one.
      Tensor c = make({}, {0.375}, dtype);
      expect_same_bits(s::fused_elementwise({x.dev, c}, kChain), unfused(p, {x.dev, c.expand(x.dev.sizes())}));
    }
    // A transposed input: the kernels decline it (with their reason,
    // recorded) and the ops run one by one on the device.
    Operand t = operand({40, 30}, dtype, Layout::transposed), u = operand({40, 30}, dtype);
    s::runtime().reset_fallback_stats();
    s::runtime().start_op_census();
    expect_same_bits(s::fused_elementwise({t.dev, u.dev}, kChain), unfused(p, {t.dev, u.dev}));
    std::string served;
    for (const s::OpUse& use : s::runtime().stop_op_census())
      if (use.op == "strata::fused_elementwise") served = use.how;
    if (has_kernel() && dtype != s::f16) {
      EXPECT_EQ(served, "kernel (declined calls decomposed)");
      bool recorded = false;
      for (const s::DeclinedKernelRecord& r : s::runtime().declined_kernels()) {
        recorded = recorded || (r.op == "fused_elementwise" && r.device == GetParam() &&
                                r.reason.find("compact") != std::string::npos && r.count == 1);
      }
      EXPECT_TRUE(recorded) << "no declined-kernel record naming the layout";
    }
  }
  // How the device served it: the CPU and Vulkan plugins' kernels on
  // compact operands; a device without one, the ops one by one.
  Operand x = operand({3, 5}, DType::f32), y = operand({3, 5}, DType::f32);
  s::runtime().start_op_census();
  (void)s::fused_elementwise({x.dev, y.dev}, kChain);
  std::string how;
  for (const s::OpUse& use : s::runtime().stop_op_census())
    if (use.op == "strata::fused_elementwise") how = use.how;
  EXPECT_EQ(how, has_kernel() ? "kernel" : "decomposition");
  // A broadcast operand (the core expands it: stride 0) is one value to
  // the kernels, not a layout to decline.
  Operand one = operand({}, DType::f32);
  s::runtime().start_op_census();
  const Tensor got = s::fused_elementwise({x.dev, one.dev}, kChain);
  how.clear();
  for (const s::OpUse& use : s::runtime().stop_op_census())
    if (use.op == "strata::fused_elementwise") how = use.how;
  EXPECT_EQ(how, has_kernel() ? "kernel" : "decomposition");
  const fp::Program chain = parsed(kChain);
  expect_same_bits(got, unfused(chain, {x.dev, one.dev}, 0));
}

// The widest signature, 8 inputs into 6 outputs (more dtypes than a
// kernel key packs one by one: keyed by count and dtype), runs the kernel
// and gives each output its ops' bits.
TEST_P(Fused, TheWidestSignatureRunsItsKernel) {
  std::string text = "in 8\n";
  for (int k = 0; k < 8; ++k)
    text += "%" + std::to_string(8 + k) + " = " + (k % 2 == 0 ? "tanh" : "sin") + " %" + std::to_string(k) + "\n";
  for (int k = 0; k < 6; ++k)
    text += "%" + std::to_string(16 + k) + " = mul %" + std::to_string(8 + k) + " %" + std::to_string(9 + k) + "\n";
  text += "out %16 %17 %18 %19 %20 %21";
  const fp::Program p = parsed(text);
  std::vector<Tensor> in;
  for (int k = 0; k < 8; ++k) in.push_back(operand({2, 300}, DType::f32).dev);
  s::runtime().start_op_census();
  const std::vector<Tensor> got = s::fused_elementwise_outputs(in, text);
  std::string how;
  for (const s::OpUse& use : s::runtime().stop_op_census())
    if (use.op == "strata::fused_elementwise") how = use.how;
  EXPECT_EQ(how, has_kernel() ? "kernel" : "decomposition");
  ASSERT_EQ(got.size(), 6u);
  for (size_t m = 0; m < 6; ++m) expect_same_bits(got[m], unfused(p, in, m));
}

// Up to three outputs, each with the bits of its ops, and derivatives
// through all of them (cotangents on every output, or on some) against the
// unfused chain's; one backward program computes every gradient.
TEST_P(Fused, SeveralOutputsGiveTheirOpsBitsAndDifferentiate) {
  const char* const text = "in 2\n%2 = mul %0 %1\n%3 = sin %2\n%4 = tanh %3\n%5 = mul %4 %0\nout %5 %3 %2";
  const fp::Program p = parsed(text);
  for (DType dtype : dtypes({s::f32, s::f64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    Operand x = operand({4, 513}, dtype), y = operand({4, 513}, dtype);
    const std::vector<Tensor> got = s::fused_elementwise_outputs({x.dev, y.dev}, text);
    ASSERT_EQ(got.size(), 3u);
    for (size_t m = 0; m < 3; ++m) expect_same_bits(got[m], unfused(p, {x.dev, y.dev}, m));
    // Cotangents on two or three outputs: the inputs, the cotangents and the
    // forward's costly output (%3, a sin: read, not recomputed) go into one
    // backward program, both gradients come out of it.
    auto two = [&](const std::vector<Tensor>& outs) { return s::sum(outs[0]) + s::sum(outs[2] * outs[2]); };
    auto three = [&](const std::vector<Tensor>& outs) { return two(outs) + s::sum(outs[1] * 0.5); };
    const Tolerance tol = tolerance(dtype).scaled(8);
    const std::string t(s::dtype_name(dtype));
    for (int cotangents : {2, 3}) {
      auto weighted = [&](const std::vector<Tensor>& outs) { return cotangents == 2 ? two(outs) : three(outs); };
      s::ScalarFn fused = [&](const std::vector<Tensor>& in) { return weighted(s::fused_elementwise_outputs(in, text)); };
      s::ScalarFn plain = [&](const std::vector<Tensor>& in) {
        return weighted({unfused(p, in, 0), unfused(p, in, 1), unfused(p, in, 2)});
      };
      s::runtime().start_op_census();
      std::vector<Tensor> g = s::grad(fused, {x.dev, y.dev});
      uint64_t backward_calls = 0;
      for (const s::OpUse& use : s::runtime().stop_op_census()) {
        const std::string inputs(cotangents == 2 ? t + "," + t + "," + t + "," + t + "," + t
                                                 : t + "," + t + "," + t + "," + t + "," + t + "," + t);
        if (use.op == "strata::fused_elementwise" && use.signature == inputs + "->" + t + "," + t) {
          backward_calls += use.count;
        }
      }
      // Kernels of every signature: the CPU and Vulkan plugins'.
      if (std::string(GetParam()) == "cpu:0" || std::string(GetParam()) == "vulkan:0") {
        EXPECT_EQ(backward_calls, 1u);
      }
      std::vector<Tensor> h = s::grad(plain, {x.dev, y.dev});
      for (size_t k = 0; k < 2; ++k) EXPECT_CLOSE(g[k], to_host(h[k]), dtype, tol);
    }
    // A cotangent on one output only.
    s::ScalarFn first = [&](const std::vector<Tensor>& in) { return s::sum(s::fused_elementwise_outputs(in, text)[1]); };
    s::ScalarFn first_plain = [&](const std::vector<Tensor>& in) { return s::sum(unfused(p, in, 1)); };
    std::vector<Tensor> g = s::grad(first, {x.dev, y.dev}), h = s::grad(first_plain, {x.dev, y.dev});
    for (size_t k = 0; k < 2; ++k) EXPECT_CLOSE(g[k], to_host(h[k]), dtype, tol);
    // Second order through every output.
    Operand v = operand({4, 513}, dtype);
    s::ScalarFn fused = [&](const std::vector<Tensor>& in) { return three(s::fused_elementwise_outputs(in, text)); };
    s::ScalarFn plain = [&](const std::vector<Tensor>& in) {
      return three({unfused(p, in, 0), unfused(p, in, 1), unfused(p, in, 2)});
    };
    std::vector<Tensor> hv = s::hvp(fused, {x.dev, y.dev}, {v.dev, v.dev}), hu = s::hvp(plain, {x.dev, y.dev}, {v.dev, v.dev});
    for (size_t k = 0; k < 2; ++k) EXPECT_CLOSE(hv[k], to_host(hu[k]), dtype, tol.scaled(4));
  }
  Operand x = operand({3}, DType::f32);
  EXPECT_THROW(s::fused_elementwise({x.dev}, "in 1\n%1 = exp %0\n%2 = sin %0\nout %1 %2"), s::ValueError);
}

// Reverse and forward mode, to second order, against the unfused chain.
TEST_P(Fused, DerivativesEqualTheUnfusedChains) {
  const fp::Program p = parsed(kChain);
  for (DType dtype : dtypes({s::f32, s::f64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    Operand x = operand({5, 6}, dtype), y = operand({5, 6}, dtype), v = operand({5, 6}, dtype);
    s::ScalarFn fused = [&](const std::vector<Tensor>& in) { return s::sum(s::fused_elementwise(in, kChain)); };
    s::ScalarFn plain = [&](const std::vector<Tensor>& in) { return s::sum(unfused(p, in)); };
    const Tolerance tol = tolerance(dtype).scaled(8);
    std::vector<Tensor> g = s::grad(fused, {x.dev, y.dev}), h = s::grad(plain, {x.dev, y.dev});
    for (size_t k = 0; k < 2; ++k) EXPECT_CLOSE(g[k], to_host(h[k]), dtype, tol);
    // A broadcast input's gradient is summed to its shape.
    Tensor row = operand({6}, dtype).dev;
    g = s::grad(fused, {x.dev, row});
    h = s::grad(plain, {x.dev, row.expand({5, 6})});
    ASSERT_EQ(g[1].sizes(), Shape{6});
    EXPECT_CLOSE(g[1], to_host(s::sum(h[1], {0})), dtype, tol);
    // Forward mode.
    auto listed = [](const s::ScalarFn& f) {
      return s::ListFn([f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; });
    };
    const auto tangent = s::jvp(listed(fused), {x.dev, y.dev}, {v.dev, v.dev}).second;
    const auto tangent_u = s::jvp(listed(plain), {x.dev, y.dev}, {v.dev, v.dev}).second;
    EXPECT_CLOSE(tangent[0], to_host(tangent_u[0]), dtype, tol);
    // Second order: Hessian-vector products, both ways.
    std::vector<Tensor> hv = s::hvp(fused, {x.dev, y.dev}, {v.dev, v.dev}),
                        hu = s::hvp(plain, {x.dev, y.dev}, {v.dev, v.dev});
    std::vector<Tensor> hr = s::hvp(fused, {x.dev, y.dev}, {v.dev, v.dev}, s::HvpMode::reverse_over_reverse);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_CLOSE(hv[k], to_host(hu[k]), dtype, tol.scaled(4));
      EXPECT_CLOSE(hr[k], to_host(hu[k]), dtype, tol.scaled(4));
    }
  }
}

// The VJP of a program of up to three inputs, one of which needs a
// gradient, is itself one fused op (the forward recomputed and walked back
// in one pass): the same ops, in the same order, as the derivative table's
// walk, so the same bits. Here the walk of y = sin(x)·x + c·x is written
// out in the order it accumulates.
TEST_P(Fused, TheBackwardProgramGivesTheBitsOfTheDerivativeWalk) {
  const char* const text = "in 2\n%2 = sin %0\n%3 = mul %2 %0\n%4 = mul %1 %0\n%5 = add %3 %4\nout %5";
  for (DType dtype : dtypes({s::f32, s::f64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    Operand x = operand({3, 700}, dtype), c = operand({3, 700}, dtype), g = operand({3, 700}, dtype);
    auto gradient_in = [&](int k) {
      return s::vjp(
                 [&](const std::vector<Tensor>& in) {
                   return std::vector<Tensor>{s::fused_elementwise(k == 0 ? std::vector<Tensor>{in[0], c.dev}
                                                                          : std::vector<Tensor>{x.dev, in[0]},
                                                                   text)};
                 },
                 {k == 0 ? x.dev : c.dev}, {g.dev})
          .second[0];
    };
    s::runtime().start_op_census();
    const std::vector<Tensor> got{gradient_in(0), gradient_in(1)};
    int fused_calls = 0;
    for (const s::OpUse& use : s::runtime().stop_op_census())
      if (use.op == "strata::fused_elementwise") fused_calls += static_cast<int>(use.count);
    // Where the op has a kernel, a forward and a backward program per
    // gradient; where it is decomposed, autograd records the ops it ran.
    EXPECT_EQ(fused_calls, has_kernel() ? 4 : 2);
    // Walked back from %5: add passes g to %3 and %4; %4 = c·x gives c̄ = g·x,
    // x̄ = g·c; %3 = sin(x)·x gives sin̄ = g·x and x̄ += g·sin(x); sin gives
    // x̄ += sin̄·cos(x).
    const Tensor sx = s::sin(x.dev);
    Tensor xbar = g.dev * c.dev;
    xbar = xbar + g.dev * sx;
    xbar = xbar + (g.dev * x.dev) * s::cos(x.dev);
    expect_same_bits(got[0], xbar);
    expect_same_bits(got[1], g.dev * x.dev);
  }
  // Four inputs, the cotangent and four gradients: nine operands, the most
  // one call has.
  Operand a = operand({5}, DType::f32);
  std::vector<Tensor> four = s::vjp(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{s::fused_elementwise(in, "in 4\n%4 = mul %0 %1\n%5 = mul %2 %3\n%6 = add %4 %5\nout %6")};
      },
      {a.dev, a.dev, a.dev, a.dev}, {s::ones_like(a.dev)}).second;
  expect_same_bits(four[0], a.dev);
}

// Forward mode is one fused op too: a program over the inputs, their
// tangents and the costly outputs, pushing the tangents through the
// derivative table in the walk's order.
TEST_P(Fused, TheTangentProgramGivesTheBitsOfTheForwardWalk) {
  const char* const text = "in 2\n%2 = sin %0\n%3 = mul %2 %0\n%4 = mul %1 %0\n%5 = add %3 %4\nout %5";
  for (DType dtype : dtypes({s::f32, s::f64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    Operand x = operand({3, 700}, dtype), c = operand({3, 700}, dtype), t = operand({3, 700}, dtype);
    s::runtime().start_op_census();
    const Tensor got = s::jvp(
                           [&](const Tensor& in) {
                             return s::fused_elementwise({in, c.dev}, text);
                           },
                           x.dev, t.dev)
                           .second;
    int fused_calls = 0;
    for (const s::OpUse& use : s::runtime().stop_op_census())
      if (use.op == "strata::fused_elementwise") fused_calls += static_cast<int>(use.count);
    // The primal and the tangent program, where the op has a kernel.
    EXPECT_EQ(fused_calls, has_kernel() ? 2 : 1);
    // %2 = sin x: ṫ₂ = t·cos x; %3 = %2·x: ṫ₃ = ṫ₂·x + t·sin x; %4 = c·x:
    // ṫ₄ = t·c; %5: ṫ₃ + ṫ₄.
    Tensor dot3 = (t.dev * s::cos(x.dev)) * x.dev;
    dot3 = dot3 + t.dev * s::sin(x.dev);
    expect_same_bits(got, dot3 + t.dev * c.dev);
  }
}

// A derivative too wide for one op (six inputs and their six tangents are
// twelve reads) is linear in its seeds: it runs as several fused programs,
// each over a group of tangents, whose results add up.
TEST_P(Fused, ADerivativeTooWideForOneOpIsSplitByLinearity) {
  const char* const text =
      "in 6\n%6 = mul %0 %1\n%7 = mul %2 %3\n%8 = mul %4 %5\n%9 = add %6 %7\n%10 = add %9 %8\nout %10";
  for (DType dtype : dtypes({s::f32, s::f64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    std::vector<Tensor> x, t;
    for (int k = 0; k < 6; ++k) {
      x.push_back(operand({2, 50}, dtype).dev);
      t.push_back(operand({2, 50}, dtype).dev);
    }
    s::runtime().start_op_census();
    const std::vector<Tensor> got =
        s::jvp([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{s::fused_elementwise(in, text)}; }, x, t)
            .second;
    int fused_calls = 0;
    for (const s::OpUse& use : s::runtime().stop_op_census())
      if (use.op == "strata::fused_elementwise") fused_calls += static_cast<int>(use.count);
    // The primal, then the tangent in two programs (four tangents and the
    // four inputs their partials read fill one op's eight inputs).
    if (has_kernel()) {
      EXPECT_EQ(fused_calls, 3);
    }
    Tensor want = t[0] * x[1] + x[0] * t[1];
    for (int k = 2; k < 6; k += 2) want = want + (t[k] * x[k + 1] + x[k] * t[k + 1]);
    EXPECT_CLOSE(got[0], to_host(want), dtype, tolerance(dtype));
  }
}

TEST_P(Fused, MalformedProgramsAreRefusedNamingTheLine) {
  Operand x = operand({4}, DType::f32);
  auto refusal = [&](const std::string& text, const std::vector<Tensor>& in) {
    try {
      s::fused_elementwise(in, text);
    } catch (const s::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto expect = [&](const std::string& text, std::initializer_list<const char*> parts, int inputs = 1) {
    const std::string got = refusal(text, std::vector<Tensor>(static_cast<size_t>(inputs), x.dev));
    for (const char* part : parts) EXPECT_NE(got.find(part), std::string::npos) << "'" << part << "' in: " << got;
  };
  expect("in 1\n%1 = frobnicate %0\nout %1", {"fused_elementwise", "line 2", "'frobnicate' is no op"});
  expect("in 1\n%1 = sin %2\nout %1", {"line 2", "'%2' is no value defined before"});
  expect("in 1\n%2 = sin %0\nout %2", {"line 2", "expected '%1 = "});
  expect("in 1\n%1 = add %0\nout %1", {"line 2", "add takes 2 operand"});
  expect("in 1\n%1 = add 1 2\nout %1", {"line 2", "at least one value operand"});
  expect("in 1\n%1 = sin %0\nout %5", {"line 3", "'%5' is no value"});
  expect("in 1\n%1 = sin %0\nout %0", {"line 3", "'%0' is an input"});
  expect("in 1\n%1 = sin %0", {"'out <values>'"});
  expect("in 9\n%1 = sin %0\nout %1", {"line 1", "1 to 8"});
  expect("in 2\n%2 = sin %0\nout %2", {"reads 2 input(s), the call has 1"});
  expect("in 1\n%1 = sin %0\n%2 = cos %0\nout %1 %2", {"2 outputs"});
  EXPECT_NE(refusal("in 1\n%1 = sin %0\nout %1", std::vector<Tensor>(9, x.dev)).find("1 to 8"), std::string::npos);
  expect("in 1\n%1 = sin %0\nout %1 %1 %1 %1 %1 %1 %1", {"line 3", "1 to 6 outputs"});
}

}  // namespace
}  // namespace strata_test
