// rules_second_order_test.cpp — second derivatives from differentiating the
// rules: the VJP of f is, as a function of (x, v), one op B applied to
// (v, saved) — relu_backward(v, x), sigmoid_backward(v, y), mul(v, y) for exp,
// ... — with saved the input, the output, or another op of x. So its own VJP
// and JVP come from B's rules chained into f's (or the saved op's). Those are
// checked against finite differences of the VJP rule itself.
#include "rule_harness.hpp"

namespace rules_test {
namespace {

/// f's VJP is backward(v, saved) with saved = x ("input"), f(x) ("output"),
/// or the named op applied to x.
struct Chain {
  std::string op;
  std::string backward;
  std::string saved;
  double lo = -2.0, hi = 2.0;  // where x is drawn
  d::Attrs attrs{};
  Shape shape{2, 3};
  bool nonzero_x = false;  // keep x away from 0 (relu's kink)
  bool zero_second = false;  // piecewise linear: D²f = 0 where defined
};

std::ostream& operator<<(std::ostream& os, const Chain& c) {
  return os << c.op << " (VJP = " << c.backward << "(v, " << c.saved << "))";
}

const std::vector<Chain>& chains() {
  static const std::vector<Chain> list = {
      {"relu", "relu_backward", "input", 0.2, 2.0, {}, {2, 3}, true, true},
      {"sigmoid", "sigmoid_backward", "output"},
      {"tanh", "tanh_backward", "output"},
      {"gelu", "gelu_backward", "input"},
      {"softmax", "softmax_backward", "output", -2.0, 2.0, {d::Attr::integer("dim", 1)}},
      {"softmax", "softmax_backward", "output", -2.0, 2.0, {d::Attr::integer("dim", 0)}, {3, 2, 2}},
      {"log_softmax", "log_softmax_backward", "output", -2.0, 2.0, {d::Attr::integer("dim", 1)}},
      {"log_softmax", "log_softmax_backward", "output", -2.0, 2.0, {d::Attr::integer("dim", 0)}, {4}},
      {"exp", "mul", "output"},
      {"sin", "mul", "cos"},
      {"log", "div", "input", 0.3, 3.0},
  };
  return list;
}

class SecondOrder : public ::testing::TestWithParam<Chain> {
 protected:
  const Chain& chain() const { return GetParam(); }
  const d::Attrs* attrs() const { return chain().attrs.empty() ? nullptr : &chain().attrs; }
  const d::OpDef& f() const { return op_named(chain().op); }
  const d::OpDef& backward() const { return op_named(chain().backward); }

  /// The rule under test, as a function: h(x, v) = VJP_f(x)(v).
  Tensor h(const Tensor& x, const Tensor& v) const {
    return apply(f().derivative.vjp, run(f(), {x}, attrs()), {v}, attrs())[0];
  }
  /// The saved tensor of B, and how a gradient or tangent in it reaches x.
  Tensor saved(const Evaluated& ef) const {
    if (chain().saved == "input") return ef.inputs[0];
    if (chain().saved == "output") return ef.outputs[0];
    return run(op_named(chain().saved), {ef.inputs[0]}, nullptr).outputs[0];
  }
  Tensor saved_to_x(const Evaluated& ef, const Tensor& g_saved) const {  // reverse
    if (chain().saved == "input") return g_saved;
    if (chain().saved == "output") return apply(f().derivative.vjp, ef, {g_saved}, attrs())[0];
    const d::OpDef& op = op_named(chain().saved);
    return apply(op.derivative.vjp, run(op, {ef.inputs[0]}, nullptr), {g_saved}, nullptr)[0];
  }
  Tensor x_to_saved(const Evaluated& ef, const Tensor& tx) const {  // forward
    if (chain().saved == "input") return tx;
    if (chain().saved == "output") return apply(f().derivative.jvp, ef, {tx}, attrs())[0];
    const d::OpDef& op = op_named(chain().saved);
    return apply(op.derivative.jvp, run(op, {ef.inputs[0]}, nullptr), {tx}, nullptr)[0];
  }

  Tensor draw_x(Rng& rng) const {
    return chain().nonzero_x ? nonzero(rng, chain().shape, chain().lo, chain().hi)
                             : uniform(rng, chain().shape, chain().lo, chain().hi);
  }
};

TEST_P(SecondOrder, TheVjpIsTheBackwardOp) {
  Rng rng(7);
  Tensor x = draw_x(rng), v = uniform(rng, chain().shape);
  Evaluated ef = run(f(), {x}, attrs());
  Tensor direct = run(backward(), {v, saved(ef)}, attrs()).outputs[0];
  expect_close(h(x, v), host(direct), "VJP rule vs " + chain().backward, 1e-12);
}

TEST_P(SecondOrder, ReverseOverReverseMatchesFiniteDifferences) {
  Rng rng(11);
  Tensor x = draw_x(rng), v = uniform(rng, chain().shape), w = uniform(rng, chain().shape, -1.0, 1.0);
  Evaluated ef = run(f(), {x}, attrs());
  Evaluated eb = run(backward(), {v, saved(ef)}, attrs());
  Tensors g = apply(backward().derivative.vjp, eb, {w}, attrs());  // {d/dv, d/dsaved} of <w, B(v, saved)>
  ASSERT_EQ(g.size(), 2u);
  Tensor gx = saved_to_x(ef, g[1]);

  std::vector<double> num_x(static_cast<size_t>(x.numel())), num_v(static_cast<size_t>(v.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    num_x[static_cast<size_t>(i)] = (dot(w, h(nudged(x, i, kEps), v)) - dot(w, h(nudged(x, i, -kEps), v))) / (2 * kEps);
    num_v[static_cast<size_t>(i)] = (dot(w, h(x, nudged(v, i, kEps))) - dot(w, h(x, nudged(v, i, -kEps)))) / (2 * kEps);
  }
  expect_close(gx, num_x, "d<w, VJP(x, v)>/dx");
  expect_close(g[0], num_v, "d<w, VJP(x, v)>/dv");
}

TEST_P(SecondOrder, ForwardOverReverseMatchesFiniteDifferences) {
  Rng rng(13);
  Tensor x = draw_x(rng), v = uniform(rng, chain().shape);
  Tensor tx = uniform(rng, chain().shape, -1.0, 1.0), tv = uniform(rng, chain().shape, -1.0, 1.0);
  Evaluated ef = run(f(), {x}, attrs());
  Evaluated eb = run(backward(), {v, saved(ef)}, attrs());
  Tensor th = apply(backward().derivative.jvp, eb, {tv, x_to_saved(ef, tx)}, attrs())[0];
  std::vector<double> hi = host(h(along(x, tx, kEps), along(v, tv, kEps)));
  std::vector<double> lo = host(h(along(x, tx, -kEps), along(v, tv, -kEps)));
  for (size_t i = 0; i < hi.size(); ++i) hi[i] = (hi[i] - lo[i]) / (2 * kEps);
  expect_close(th, hi, "JVP of the VJP along (tx, tv)");
}

/// With h = J(x)^T v, <a, dh along b> = v^T D²f[a, b], which is symmetric in
/// a and b: a check of the JVP of the VJP that needs no finite differences.
TEST_P(SecondOrder, MixedSecondDerivativesAreSymmetric) {
  Rng rng(17);
  Tensor x = draw_x(rng), v = uniform(rng, chain().shape);
  Tensor t1 = uniform(rng, chain().shape, -1.0, 1.0), t2 = uniform(rng, chain().shape, -1.0, 1.0);
  Evaluated ef = run(f(), {x}, attrs());
  Evaluated eb = run(backward(), {v, saved(ef)}, attrs());
  Tensor dh2 = apply(backward().derivative.jvp, eb, {Tensor(), x_to_saved(ef, t2)}, attrs())[0];
  if (chain().zero_second) {
    // The real claim: D²f = 0 (an undefined tangent means zero).
    if (dh2.defined()) {
      EXPECT_EQ(s::amax(s::abs(dh2)).item<double>(), 0.0);
    }
    return;
  }
  ASSERT_TRUE(dh2.defined()) << "the JVP of the VJP along x is undefined, but " << chain().op << " is not linear";
  auto second = [&](const Tensor& a, const Tensor& b) {
    Tensor dh = apply(backward().derivative.jvp, eb, {Tensor(), x_to_saved(ef, b)}, attrs())[0];
    EXPECT_TRUE(dh.defined());
    return dh.defined() ? dot(a, dh) : 0.0;
  };
  double ab = second(t1, t2), ba = second(t2, t1);
  EXPECT_GT(std::fabs(ab), 1e-6) << "v^T D²f[t1, t2] is zero: the symmetry check would be vacuous";
  EXPECT_TRUE(close(ab, ba, 1e-10)) << ab << " vs " << ba;
}

INSTANTIATE_TEST_SUITE_P(Ops, SecondOrder, ::testing::ValuesIn(chains()),
                         [](const ::testing::TestParamInfo<Chain>& p) {
                           return p.param.op + "_" + std::to_string(p.index);
                         });

}  // namespace
}  // namespace rules_test
