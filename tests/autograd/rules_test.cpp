// rules_test.cpp — every op's derivative rules (core/src/ops/*.cpp): that
// each differentiable op has a VJP and a JVP, and that they match central
// finite differences in f64 on a few shapes, with the adjoint identity
// <v, JVP(t)> = <VJP(v), t> between them.
#include "op_cases.hpp"
#include "rule_harness.hpp"

#include <functional>
#include <limits>
#include <map>
#include <set>

namespace rules_test {
namespace {

/// Ops without derivative rules, and why.
const std::set<std::string> kNotDifferentiable = {
    "eq",          "ne",         "lt", "le", "gt", "ge",  // boolean results
    "logical_and", "logical_or", "logical_not",           // boolean in and out
    "argmax",      "argmin",                              // integer results
    "fill",                                               // no inputs
    "random_uniform", "random_normal", "bernoulli",       // no inputs: random draws are constants
    "detach",                                             // cuts the graph by definition
    "amp_unscale",                                        // optimizer-side, never differentiated
    "sgd_step", "sgd_momentum_step", "adam_step",          // in-place optimizer updates
};

// --- the test points of each op ----------------------------------------------

using Gen = std::function<Tensor(Rng&, const Shape&)>;
Gen range(double lo, double hi) {
  return [=](Rng& rng, const Shape& shape) { return uniform(rng, shape, lo, hi); };
}
Gen away_from_zero(double lo = 0.2, double hi = 2.0) {
  return [=](Rng& rng, const Shape& shape) { return nonzero(rng, shape, lo, hi); };
}
const Gen kAny = range(-2.0, 2.0);
const Gen kOffGrid = off_grid;
const Gen kCoin = coin;

const std::vector<Shape> kShapes = {{}, {5}, {2, 3}, {2, 3, 2}};

using Cases = std::vector<Case>;

/// An elementwise op on every test shape, input k drawn from gens[k].
Cases pointwise(const std::string& op, const std::vector<Gen>& gens, Rng& rng) {
  Cases cases;
  for (const Shape& shape : kShapes) {
    Case c{op, {}, {}, ""};
    for (const Gen& gen : gens) c.inputs.push_back(gen(rng, shape));
    cases.push_back(c);
  }
  return cases;
}

/// An op with a `dim` attribute (softmax and friends) on a few shapes and dims.
Cases along_dim(const std::string& op, int n_inputs, Rng& rng) {
  Cases cases;
  for (auto [shape, dim] : std::vector<std::pair<Shape, int64_t>>{{{5}, 0}, {{3, 4}, 0}, {{3, 4}, 1}, {{2, 3, 2}, 1}}) {
    Case c{op, {}, {d::Attr::integer("dim", dim)}, "dim " + std::to_string(dim)};
    for (int k = 0; k < n_inputs; ++k) c.inputs.push_back(uniform(rng, shape));
    cases.push_back(c);
  }
  return cases;
}

/// A reduction (keepdim-shaped output, sorted `dims`) on a few shapes.
Cases reduction(const std::string& op, const Gen& gen, Rng& rng) {
  Cases cases;
  for (auto [shape, dims] : std::vector<std::pair<Shape, Shape>>{
           {{1}, {0}}, {{5}, {0}}, {{3, 4}, {0}}, {{3, 4}, {1}}, {{3, 4}, {0, 1}}, {{2, 3, 2}, {0, 2}}}) {
    cases.push_back({op, {gen(rng, shape)}, {d::Attr::list("dims", dims)}, "dims " + d::shape_string(dims)});
  }
  return cases;
}

Cases prod_cases(Rng& rng) {
  Cases cases = reduction("prod", away_from_zero(0.5, 1.5), rng);
  // Exact zeros: one in a slice, two in a slice (prod is multilinear, so
  // finite differences are exact there too).
  std::vector<double> v = host(nonzero(rng, {3, 4}, 0.5, 1.5));
  v[1] = 0.0;                   // row 0: one zero
  v[5] = v[6] = 0.0;            // row 1: two zeros
  for (Shape dims : {Shape{1}, Shape{0}, Shape{0, 1}}) {
    cases.push_back({"prod", {f64(v, {3, 4})}, {d::Attr::list("dims", dims)}, "zeros, dims " + d::shape_string(dims)});
  }
  return cases;
}

Case with_dim(const std::string& op, Tensors inputs, int64_t dim) {
  return {op, std::move(inputs), {d::Attr::integer("dim", dim)}, "dim " + std::to_string(dim)};
}
Tensor index_vector(std::vector<int64_t> v) { return s::from_data(v, {static_cast<int64_t>(v.size())}); }

/// The cases every differentiable pointwise op of the registry gets from its
/// manifest entry, with no line below: every test shape, input k drawn from
/// the op's test domain (away from 0 for the input it names nonzero, and for
/// ops with kinks, whose kinks sit at 0 or at ties).
void add_derived_cases(std::map<std::string, std::function<Cases(Rng&)>>& table) {
  for (const d::OpDef* op : d::all_ops()) {
    if (op->plugin_op != nullptr || (op->kind != d::OpKind::primitive && op->kind != d::OpKind::composite)) continue;
    if ((op->tags & d::op_tag::pointwise) == 0 || (op->tags & d::op_tag::complex) != 0 || !op->attrs.empty()) continue;
    if (op->derivative.vjp == nullptr || op->domain.orders < 1 || op->n_inputs < 1 || op->n_inputs > 2) continue;
    std::vector<Gen> gens;
    for (int k = 0; k < op->n_inputs; ++k) {
      const d::TestDomain& dom = op->domain;
      gens.push_back(dom.nonzero_input == k ? away_from_zero(0.5, 2.0)
                     : dom.orders == 1      ? away_from_zero()
                                            : range(dom.lo, dom.hi));
    }
    std::string name(op->name);
    table[name] = [name, gens](Rng& r) { return pointwise(name, gens, r); };
  }
}

const std::map<std::string, std::function<Cases(Rng&)>>& op_cases() {
  static const std::map<std::string, std::function<Cases(Rng&)>> table = [] {
    // The pointwise ops not derived (add_derived_cases): flat ones, where,
    // and every other family.
    std::map<std::string, std::function<Cases(Rng&)>> t = {
      // elementwise unary, flat
      {"sign", [](Rng& r) { return pointwise("sign", {away_from_zero()}, r); }},
      {"floor", [](Rng& r) { return pointwise("floor", {kOffGrid}, r); }},
      {"ceil", [](Rng& r) { return pointwise("ceil", {kOffGrid}, r); }},
      {"round", [](Rng& r) { return pointwise("round", {kOffGrid}, r); }},
      // where (the ties of the derived maximum and minimum: TieTest below)
      {"where", [](Rng& r) { return pointwise("where", {kCoin, kAny, kAny}, r); }},
      // neural-network composites and backward ops
      {"softmax", [](Rng& r) { return along_dim("softmax", 1, r); }},
      {"log_softmax", [](Rng& r) { return along_dim("log_softmax", 1, r); }},
      {"softmax_backward", [](Rng& r) { return along_dim("softmax_backward", 2, r); }},
      {"log_softmax_backward", [](Rng& r) { return along_dim("log_softmax_backward", 2, r); }},
      // reductions (ties of max/min: TieTest below)
      {"sum", [](Rng& r) { return reduction("sum", kAny, r); }},
      {"mean", [](Rng& r) { return reduction("mean", kAny, r); }},
      {"max", [](Rng& r) { return reduction("max", kAny, r); }},
      {"min", [](Rng& r) { return reduction("min", kAny, r); }},
      {"prod", prod_cases},
      // linear algebra and indexing
      {"matmul",
       [](Rng& r) {
         return Cases{{"matmul", {uniform(r, {3, 4}), uniform(r, {4, 2})}, {}, ""},
                      {"matmul", {uniform(r, {2, 3, 4}), uniform(r, {2, 4, 2})}, {}, "batched"},
                      {"matmul", {uniform(r, {1, 1}), uniform(r, {1, 3})}, {}, ""}};
       }},
      {"linear",
       [](Rng& r) {
         // relu: weights and inputs positive, biases of either sign and
         // large, so no pre-activation is near the kink at 0.
         const d::Attrs relu{d::Attr::string("activation", "relu")};
         return Cases{{"linear", {uniform(r, {4, 3}), uniform(r, {2, 3}), uniform(r, {2})}, {}, ""},
                      {"linear", {uniform(r, {2, 2, 3}), uniform(r, {5, 3}), uniform(r, {5})}, {}, "batched"},
                      {"linear", {uniform(r, {3}), uniform(r, {2, 3}), uniform(r, {2})}, {}, "vector"},
                      {"linear",
                       {uniform(r, {4, 3}, 0.2, 1.0), uniform(r, {6, 3}, 0.2, 1.0), nonzero(r, {6}, 4.0, 6.0)},
                       relu,
                       "relu"}};
       }},
      {"index_select",
       [](Rng& r) {
         return Cases{with_dim("index_select", {uniform(r, {4, 3}), index_vector({2, 0, 2})}, 0),
                      with_dim("index_select", {uniform(r, {4, 3}), index_vector({1, 1, 0, 2})}, 1),
                      with_dim("index_select", {uniform(r, {2, 3, 2}), index_vector({1, 1})}, 2)};
       }},
      {"gather",
       [](Rng& r) {
         return Cases{with_dim("gather", {uniform(r, {3, 4}), indices(r, {3, 2}, 4)}, 1),
                      with_dim("gather", {uniform(r, {3, 4}), indices(r, {2, 4}, 3)}, 0),
                      with_dim("gather", {uniform(r, {2, 3}), indices(r, {5, 3}, 2)}, 0)};
       }},
      // fused programs: the bench's chain, and every other smooth statement
      // (the rules see inputs broadcast already: fused_test.cpp differentiates
      // broadcast ones through the engine)
      {"fused_elementwise",
       [](Rng& r) {
         const d::Attrs chain{d::Attr::string("program",
                                              "in 2\n%2 = mul %0 %1\n%3 = sin %2\n%4 = add %3 0x1.8p-1\n"
                                              "%5 = tanh %4\n%6 = mul %5 %0\n%7 = exp %6\n%8 = sub %7 %1\n"
                                              "%9 = sigmoid %8\n%10 = div %9 %7\n%11 = cos %10\nout %11")};
         const d::Attrs rest{d::Attr::string("program",
                                             "in 3\n%3 = exp %0\n%4 = sqrt %3\n%5 = log %3\n%6 = log1p %4\n"
                                             "%7 = expm1 %1\n%8 = reciprocal %4\n%9 = neg %8\n"
                                             "%10 = tanh_backward %9 %5\n%11 = sigmoid_backward %10 %2\n"
                                             "%12 = add %11 %6\n%13 = mul %12 %7\nout %13")};
         return Cases{{"fused_elementwise", {uniform(r, {3, 4}), uniform(r, {3, 4})}, chain, "chain"},
                      {"fused_elementwise", {uniform(r, {3, 4}), uniform(r, {3, 4}), uniform(r, {3, 4})}, rest,
                       "the other statements"}};
       }},
      {"scatter_add",
       [](Rng& r) {
         return Cases{with_dim("scatter_add", {uniform(r, {3, 4}), indices(r, {2, 4}, 3), uniform(r, {2, 4})}, 0),
                      with_dim("scatter_add", {uniform(r, {3, 4}), indices(r, {3, 6}, 4), uniform(r, {3, 6})}, 1)};
       }},
  };
    add_derived_cases(t);
    return t;
  }();
  return table;
}

/// Views and joins (cat, pad) run without dispatch; their rules are checked
/// end to end in higher_order_test.cpp.
/// Ops without a kernel: views and joins (checked by the view tests), and
/// to_device (needs two devices: nn module_test moves a gradient back).
bool is_view(const d::OpDef& op) {
  return op.kind == d::OpKind::view || op.kind == d::OpKind::join || op.kind == d::OpKind::transfer;
}

// --- coverage ------------------------------------------------------------------

TEST(Coverage, EveryDifferentiableOpHasBothRules) {
  for (const d::OpDef* op : d::all_ops()) {
    std::string name(op->name);
    if (kNotDifferentiable.count(name) != 0) {
      EXPECT_EQ(op->derivative.vjp, nullptr) << name << " is listed as not differentiable but has a VJP";
      EXPECT_EQ(op->derivative.jvp, nullptr) << name << " is listed as not differentiable but has a JVP";
      continue;
    }
    EXPECT_NE(op->derivative.vjp, nullptr) << "op '" << name << "' has no VJP (or list it in kNotDifferentiable)";
    EXPECT_NE(op->derivative.jvp, nullptr) << "op '" << name << "' has no JVP (or list it in kNotDifferentiable)";
  }
}

/// Ops of complex values only (inputs or outputs): this harness is real; their
/// rules are checked against finite differences in complex_grad_test.cpp.
bool complex_valued(const d::OpDef& op) {
  for (std::string_view name : {"real", "imag", "conj", "angle", "complex", "polar"}) {
    if (op.name == name) return true;
  }
  return false;
}

TEST(Coverage, EveryOpWithRulesIsCheckedHere) {
  for (const d::OpDef* op : d::all_ops()) {
    // cast: CastTest
    if (op->derivative.vjp == nullptr || is_view(*op) || op->name == "cast" || complex_valued(*op)) continue;
    EXPECT_EQ(op_cases().count(std::string(op->name)), 1u) << "no finite-difference cases for '" << op->name << "'";
  }
  for (const auto& [name, cases] : op_cases()) EXPECT_NE(d::find_op(name), nullptr) << name;
}

/// Ops that keep placeholders for operands their VJP does not read
/// (OpDef::vjp_reads_inputs / vjp_reads_outputs, docs/autograd.md "What a node
/// keeps") must run through a tape and the engine, where the VJP sees those
/// placeholders, in higher_order_test.cpp: a rule that reads one fails there.
TEST(Coverage, EveryOpThatKeepsPlaceholdersRunsThroughTheEngine) {
  std::set<std::string> end_to_end;
  for (const op_cases::OpCase& c : op_cases::cases()) end_to_end.insert(c.name.substr(0, c.name.find('.')));
  for (const d::OpDef* op : d::all_ops()) {
    if (op->vjp_reads_inputs == 0xff && op->vjp_reads_outputs == 0xff) continue;
    // checkpoint: to third order in checkpoint_amp_test.cpp; cast: f64 finite
    // differences cannot see through a narrower dtype, so CastTest checks the
    // rule and the Autocast tests of checkpoint_amp_test.cpp the engine.
    if (op->name == "checkpoint" || op->name == "cast") continue;
    EXPECT_EQ(end_to_end.count(std::string(op->name)), 1u)
        << "'" << op->name << "' keeps placeholders but has no case in op_cases.hpp";
  }
}

// --- first order, per op ----------------------------------------------------------

class FirstOrder : public ::testing::TestWithParam<std::string> {};

TEST_P(FirstOrder, MatchesFiniteDifferences) {
  Rng rng(20240601u);
  for (const Case& c : op_cases().at(GetParam())(rng)) check_first_order(c, rng);
}

std::vector<std::string> op_names() {
  std::vector<std::string> names;
  for (const auto& entry : op_cases()) names.push_back(entry.first);
  return names;
}
INSTANTIATE_TEST_SUITE_P(Ops, FirstOrder, ::testing::ValuesIn(op_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// --- special points ------------------------------------------------------------------

Tensors vjp_of(const std::string& op, const Tensors& inputs, const Tensor& g, const d::Attrs* attrs = nullptr) {
  Evaluated e = run(op_named(op), inputs, attrs);
  return apply(op_named(op).derivative.vjp, e, {g}, attrs);
}
Tensor jvp_of(const std::string& op, const Tensors& inputs, const Tensors& t, const d::Attrs* attrs = nullptr) {
  Evaluated e = run(op_named(op), inputs, attrs);
  return apply(op_named(op).derivative.jvp, e, t, attrs)[0];
}
using V = std::vector<double>;

TEST(TieTest, MaximumAndMinimumSplitTiesEvenly) {
  Tensor a = f64({1, 2, 3}, {3}), b = f64({1, 5, 0}, {3}), g = f64({4, 4, 4}, {3});
  Tensors mx = vjp_of("maximum", {a, b}, g);
  EXPECT_EQ(host(mx[0]), (V{2, 0, 4}));
  EXPECT_EQ(host(mx[1]), (V{2, 4, 0}));
  Tensors mn = vjp_of("minimum", {a, b}, g);
  EXPECT_EQ(host(mn[0]), (V{2, 4, 0}));
  EXPECT_EQ(host(mn[1]), (V{2, 0, 4}));
  // The JVP uses the same weights: tangents 1 on a, 3 on b.
  EXPECT_EQ(host(jvp_of("maximum", {a, b}, {f64({1, 1, 1}, {3}), f64({3, 3, 3}, {3})})), (V{2, 3, 1}));
}

TEST(TieTest, MaxAndMinReductionsShareTheGradientAmongTies) {
  Tensor x = f64({1, 3, 3, 2, /**/ -1, -1, -1, 0}, {2, 4});
  d::Attrs dims{d::Attr::list("dims", {1})};
  EXPECT_EQ(host(vjp_of("max", {x}, f64({6, 6}, {2, 1}), &dims)[0]), (V{0, 3, 3, 0, 0, 0, 0, 6}));
  EXPECT_EQ(host(vjp_of("min", {x}, f64({6, 6}, {2, 1}), &dims)[0]), (V{6, 0, 0, 0, 2, 2, 2, 0}));
  Tensor t = f64({0, 1, 3, 0, 1, 2, 3, 0}, {2, 4});
  expect_close(jvp_of("max", {x}, {t}, &dims), {2, 0}, "max JVP", 1e-14);  // mean tangent over the ties
  expect_close(jvp_of("min", {x}, {t}, &dims), {0, 2}, "min JVP", 1e-14);
}

TEST(SpecialPoints, PowAtAZeroBaseIsFinite) {
  Tensor a = f64({0, 0, 2, 0}, {4}), b = f64({2, 0, 3, 0.5}, {4});
  Tensors g = vjp_of("pow", {a, b}, f64({1, 1, 1, 1}, {4}));
  EXPECT_EQ(host(g[0]), (V{0, 0, 12, std::numeric_limits<double>::infinity()}));  // 0.5 · 0^-0.5
  std::vector<double> gb = host(g[1]);
  EXPECT_EQ(gb[0], 0.0);
  EXPECT_EQ(gb[1], 0.0);
  EXPECT_NEAR(gb[2], 8 * std::log(2.0), 1e-12);
  EXPECT_EQ(gb[3], 0.0);
}

TEST(SpecialPoints, FlatOpsHaveZeroDerivatives) {
  Tensor x = f64({-1.5, 0.0, 2.5}, {3}), g = f64({1, 2, 3}, {3});
  for (const char* op : {"sign", "floor", "ceil", "round"}) {
    EXPECT_EQ(host(vjp_of(op, {x}, g)[0]), (V{0, 0, 0})) << op;
    EXPECT_EQ(host(jvp_of(op, {x}, {g})), (V{0, 0, 0})) << op;
  }
  Tensors relu_bw = vjp_of("relu_backward", {g, x}, g);
  EXPECT_EQ(host(relu_bw[0]), (V{0, 0, 3}));  // relu'(0) = 0, as PyTorch
  EXPECT_EQ(host(relu_bw[1]), (V{0, 0, 0}));
}

TEST(CastTest, GradientsCastBackAndTangentsCastAlong) {
  Tensor x = s::cast(f64({1.5, -2.25}, {2}), s::f32);
  d::Attrs to_f64{d::Attr::dtype("dtype", s::f64)};
  Tensor g = f64({0.5, 4}, {2});
  Tensor back = vjp_of("cast", {x}, g, &to_f64)[0];
  EXPECT_EQ(back.dtype(), s::f32);
  EXPECT_EQ(host(back), (V{0.5, 4}));
  Tensor forward = jvp_of("cast", {x}, {s::cast(g, s::f32)}, &to_f64);
  EXPECT_EQ(forward.dtype(), s::f64);
  EXPECT_EQ(host(forward), (V{0.5, 4}));
  // Integer sides carry no gradient.
  d::Attrs to_i64{d::Attr::dtype("dtype", s::i64)};
  EXPECT_FALSE(jvp_of("cast", {f64({1.5}, {1})}, {f64({1}, {1})}, &to_i64).defined());
  EXPECT_FALSE(vjp_of("cast", {s::from_data(std::vector<int64_t>{3}, {1})}, g.slice(0, 0, 1), &to_f64)[0].defined());
}

}  // namespace
}  // namespace rules_test
