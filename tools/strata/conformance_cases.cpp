// conformance_cases.cpp — the op cases of `strata plugin check`: one family
// of input generators per kind of op (docs/ops.md), run for every kernel the
// device claims, one case per primitive it lacks (expected to fall back), and
// derivatives to third order for the differentiable float ops it claims.
#include "conformance_support.hpp"

#include <strata/nn/functional.hpp>
#include <strata/plugin/philox.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

namespace strata::cli::conformance {

namespace {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

enum class Family {
  unary, binary, compare, where, reduce, arg_reduce, matmul, linear, index_select, gather, scatter_add, softmax,
  pointwise_backward, softmax_backward, amp_unscale, optim_update, copy, cast, fill, random_uniform, random_normal,
  bernoulli, fused,
};

/// What the checker knows of an op of the contract.
struct OpSpec {
  Family family;
  Fn fn;                       // the op through the public API (not for cast, fill, random)
  ValueRange range{};          // of the first input (unary, binary's first)
  ValueRange range2{};         // of the second input
  bool differentiable = false; // checked to third order
  int diff_input = 0;          // the input the derivatives are taken with respect to
};

const std::vector<DType> kFloats{DType::f32, DType::f64, DType::f16, DType::bf16};

Fn binary(Tensor (*f)(const Tensor&, const Tensor&)) {
  return [f](const std::vector<Tensor>& in) { return f(in[0], in[1]); };
}

/// strata::fused_elementwise's case: a chain over all n inputs that
/// touches the transcendental statements (sin, tanh, exp, sigmoid), a
/// constant and a backward helper; with `outputs` 2 to 6, the tanh's, the
/// sigmoid's, the exp's, the product's and the sum's values are outputs
/// too, in that order (the op's widest signatures).
std::string fused_chain_text(int n, int outputs) {
  std::string text = "in " + std::to_string(n) + "\n";
  int v = n;
  auto line = [&](const std::string& body) {
    text += "%" + std::to_string(v) + " = " + body + "\n";
    return "%" + std::to_string(v++);
  };
  // The second input multiplies, the others add: a product of eight values
  // in [-2, 2] is ill-conditioned at third order in f32 (the CPU's own f32
  // derivatives are 1e-3 off the f64 ones there).
  std::string acc = line("sin %0");
  for (int k = 1; k < n; ++k) acc = line((k == 1 ? "mul " : "add ") + acc + " %" + std::to_string(k));
  const std::string sum = line("add " + acc + " 0x1p-1");
  const std::string t = line("tanh " + sum);
  const std::string e = line("exp " + line("mul " + t + " 0x1p-1"));
  const std::string s = line("sigmoid " + line("sub " + e + " %0"));
  const std::string y = line("tanh_backward " + s + " " + t);
  const std::string values[] = {y, t, s, e, acc, sum};
  text += "out";
  for (int m = 0; m < outputs && m < 6; ++m) text += " " + values[m];
  return text;
}
Tensor fused_chain(const std::vector<Tensor>& in) {
  return fused_elementwise(in, fused_chain_text(static_cast<int>(in.size()), 1));
}
/// A kernel of several outputs: every output, flattened, one after another.
Fn fused_chain_outputs(int outputs) {
  return [outputs](const std::vector<Tensor>& in) {
    std::vector<Tensor> flat;
    for (const Tensor& y : fused_elementwise_outputs(in, fused_chain_text(static_cast<int>(in.size()), outputs))) {
      flat.push_back(y.reshape({-1}));
    }
    return cat(flat, 0);
  };
}

bool tagged(const OpInfo& op, const char* tag) { return std::ranges::find(op.tags, tag) != op.tags.end(); }

/// The range input `k` of `op` is drawn from: its test domain (docs/ops.md,
/// "Test domains").
ValueRange domain_range(const OpInfo& op, int k) {
  const OpTestDomain& d = op.domain;
  if (d.nonzero_input == k) return {0.5, 2.0, false, 0.0, true};
  if (d.grid >= 1.0) return {d.lo, d.hi, true};
  return {d.lo, d.hi, false, d.grid};
}

/// The pointwise ops' specs, derived from the registry: every primitive or
/// composite the core tags pointwise that takes no attributes (copy and
/// cast have families of their own, complex ops are not in the matrix).
/// Unary ops, binary ops (comparisons of the compare family) and backward
/// ops (differentiated in their saved input) by arity and tags; ranges from
/// each op's test domain. Derivatives (the device against the reference, to
/// third order) for every op its domain gives derivative orders: ops with
/// kinks too, whose random inputs never sit on one.
void add_pointwise_specs(std::map<std::string, OpSpec>& t) {
  for (const OpInfo& op : runtime().ops()) {
    if (!op.plugin.empty() || (op.kind != "primitive" && op.kind != "composite")) continue;
    if (!tagged(op, "pointwise") || tagged(op, "complex") || tagged(op, "data_movement") || !op.attrs.empty()) continue;
    if (op.n_inputs != 1 && op.n_inputs != 2) continue;
    Family family = op.n_inputs == 1         ? Family::unary
                    : tagged(op, "backward") ? Family::pointwise_backward
                    : op.dtypes == "compare" ? Family::compare
                                             : Family::binary;
    Fn fn = [name = op.name](const std::vector<Tensor>& in) { return call_op(name, in)[0]; };
    const bool derivatives = op.differentiable && op.domain.orders >= 1;
    t[op.name] = {family, std::move(fn), domain_range(op, 0), op.n_inputs == 2 ? domain_range(op, 1) : ValueRange{},
                  derivatives, family == Family::pointwise_backward ? 1 : 0};
  }
}

/// The reductions' specs, derived from the registry: every core op tagged
/// reduction with a "dims" attribute (its cases pass the dims: op_cases),
/// index-valued ones (argmax) as arg reductions; ranges from the test
/// domains, derivatives as for the pointwise ops.
void add_reduction_specs(std::map<std::string, OpSpec>& t) {
  for (const OpInfo& op : runtime().ops()) {
    if (!op.plugin.empty() || !tagged(op, "reduction") || (op.kind != "primitive" && op.kind != "composite")) continue;
    if (std::ranges::none_of(op.attrs, [](const OpAttrInfo& a) { return a.name == "dims"; })) continue;
    const Family family = op.dtypes == "index" ? Family::arg_reduce : Family::reduce;
    t[op.name] = {family, nullptr, domain_range(op, 0), {}, op.differentiable && op.domain.orders >= 1, 0};
  }
}

const std::map<std::string, OpSpec>& op_table() {
  static const std::map<std::string, OpSpec> table = [] {
    std::map<std::string, OpSpec> t;
    add_pointwise_specs(t);
    add_reduction_specs(t);
    auto domain = [](const char* name, int k) {  // the test domain of input k of a core op
      for (const OpInfo& op : runtime().ops()) {
        if (op.name == name) return domain_range(op, k);
      }
      throw Error(std::string("conformance: no op ") + name);
    };
    t["strata::where"] = {Family::where, [](const std::vector<Tensor>& in) { return where(in[0], in[1], in[2]); },
                          {}, {}, true, 1};
    t["strata::matmul"] = {Family::matmul, binary(matmul), {}, {}, true, 0};
    t["strata::linear"] = {Family::linear,
                           [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }, {}, {}, true, 0};
    t["strata::index_select"] = {Family::index_select, nullptr, {}, {}, true, 0};
    t["strata::gather"] = {Family::gather, nullptr, {}, {}, true, 0};
    t["strata::scatter_add"] = {Family::scatter_add, nullptr, {}, {}, true, 0};
    t["strata::softmax"] = {Family::softmax, nullptr, {}, {}, true, 0};
    t["strata::log_softmax"] = {Family::softmax, nullptr, {}, {}, true, 0};
    t["strata::softmax_backward"] = {Family::softmax_backward, nullptr, {}, domain("strata::softmax_backward", 1),
                                     true, 1};
    t["strata::log_softmax_backward"] = {Family::softmax_backward, nullptr, {},
                                         domain("strata::log_softmax_backward", 1), true, 1};
    t["strata::fused_elementwise"] = {Family::fused, fused_chain, {}, {}, true, 0};
    t["strata::amp_unscale"] = {Family::amp_unscale, nullptr, {}, {}, false, 0};
    t["strata::sgd_step"] = {Family::optim_update, nullptr, {}, {}, false, 0};
    t["strata::sgd_momentum_step"] = {Family::optim_update, nullptr, {}, {}, false, 0};
    t["strata::adam_step"] = {Family::optim_update, nullptr, {}, {}, false, 0};
    t["strata::copy"] = {Family::copy, nullptr, {}, {}, false, 0};
    t["strata::cast"] = {Family::cast, nullptr, {}, {}, false, 0};
    t["strata::fill"] = {Family::fill, nullptr, {}, {}, false, 0};
    t["strata::random_uniform"] = {Family::random_uniform, nullptr, {}, {}, false, 0};
    t["strata::random_normal"] = {Family::random_normal, nullptr, {}, {}, false, 0};
    t["strata::bernoulli"] = {Family::bernoulli, nullptr, {}, {}, false, 0};
    return t;
  }();
  return table;
}

struct Signature {
  std::vector<DType> in, out;
};

/// "f32,i64->f32" -> dtypes; nullopt when a name is unknown.
std::optional<Signature> parse_signature(const std::string& text) {
  const size_t arrow = text.find("->");
  if (arrow == std::string::npos) return std::nullopt;
  auto list = [](const std::string& part, std::vector<DType>& out) {
    size_t start = 0;
    while (start < part.size()) {
      size_t comma = part.find(',', start);
      if (comma == std::string::npos) comma = part.size();
      out.push_back(dtype_from_name(part.substr(start, comma - start)));
      start = comma + 1;
    }
  };
  Signature s;
  try {
    list(text.substr(0, arrow), s.in);
    list(text.substr(arrow + 2), s.out);
  } catch (const Error&) {
    return std::nullopt;
  }
  return s;
}

/// The dtype that places a kernel in the matrix: the data input's (where's
/// values, an index op's source), else the output's (fill, random ops).
DType primary_dtype(Family family, const Signature& sig) {
  if (family == Family::where && sig.in.size() >= 2) return sig.in[1];
  if (!sig.in.empty()) return sig.in[0];
  return sig.out.empty() ? DType::f32 : sig.out[0];
}

/// One op case before it is wrapped: inputs, the function, the tolerance
/// scaling of accumulating ops.
struct OpCase {
  std::string label;
  std::vector<Operand> inputs;
  Fn fn;
  double terms = 1.0;  // accumulated terms per output element
};

/// Shapes of elementwise cases: a view shape with its layout.
struct ShapeCase {
  Shape shape;
  Layout layout;
  bool large;
};

const std::vector<ShapeCase> kElementwiseShapes{
    {{}, Layout::contiguous, false},      {{3, 4}, Layout::contiguous, false},
    {{7, 13, 3}, Layout::contiguous, false}, {{6, 5}, Layout::transposed, false},
    {{4, 9}, Layout::stepped, false},     {{100003}, Layout::contiguous, true},
};

double magnitude(const std::vector<Operand>& ops) {
  double m = 0.0;
  for (const Operand& op : ops) {
    for (double v : op.values) m = std::max(m, std::fabs(v));
  }
  return m;
}

/// The op cases of one op in one signature.
std::vector<OpCase> op_cases(const std::string& op, const OpSpec& spec, const Signature& sig, bool quick,
                             std::mt19937_64& rng) {
  std::vector<OpCase> cases;
  const DType t = primary_dtype(spec.family, sig);
  auto in_range = [&](ValueRange r, DType dtype) {
    if (is_integral(dtype) && !r.integral) return ValueRange{-20.0, 20.0, true};
    return r;
  };
  auto add_case = [&](std::string label, std::vector<Operand> inputs, Fn fn, double terms = 1.0) {
    cases.push_back({std::move(label), std::move(inputs), std::move(fn), terms});
  };
  switch (spec.family) {
    case Family::unary:
      for (const ShapeCase& s : kElementwiseShapes) {
        if (quick && s.large) continue;
        add_case("", {random_operand(rng, s.shape, t, s.layout, in_range(spec.range, t))}, spec.fn);
      }
      break;
    case Family::binary:
    case Family::compare: {
      ValueRange r2 = spec.range2;
      if (op == "strata::div" && is_integral(t)) r2 = {1.0, 5.0, true};  // no division by zero
      struct Pair {
        Shape a, b;
        Layout la, lb;
        bool large;
      };
      const std::vector<Pair> pairs{{{}, {}, Layout::contiguous, Layout::contiguous, false},
                                    {{3, 4}, {3, 4}, Layout::contiguous, Layout::contiguous, false},
                                    {{3, 1}, {1, 4}, Layout::contiguous, Layout::contiguous, false},
                                    {{}, {5, 3}, Layout::contiguous, Layout::contiguous, false},
                                    {{7, 13, 3}, {7, 13, 3}, Layout::contiguous, Layout::contiguous, false},
                                    {{6, 5}, {6, 5}, Layout::transposed, Layout::stepped, false},
                                    {{100003}, {100003}, Layout::contiguous, Layout::contiguous, true}};
      for (const Pair& p : pairs) {
        if (quick && p.large) continue;
        add_case("", {random_operand(rng, p.a, t, p.la, in_range(spec.range, t)),
                      random_operand(rng, p.b, t, p.lb, in_range(r2, t))},
                 spec.fn);
      }
      break;
    }
    case Family::fused: {
      // Every operand of the signature drawn alike; then the last one a
      // broadcast scalar (the shape rule expands it: stride 0). A signature
      // of several outputs runs a program of that many.
      const Fn fn = sig.out.size() > 1 ? fused_chain_outputs(static_cast<int>(sig.out.size())) : spec.fn;
      for (const ShapeCase& s : kElementwiseShapes) {
        if (quick && s.large) continue;
        std::vector<Operand> ops;
        for (size_t k = 0; k < sig.in.size(); ++k) ops.push_back(random_operand(rng, s.shape, t, s.layout, spec.range));
        add_case("", std::move(ops), fn);
      }
      if (sig.in.size() > 1) {
        std::vector<Operand> ops;
        for (size_t k = 0; k + 1 < sig.in.size(); ++k) ops.push_back(random_operand(rng, {3, 4}, t, Layout::contiguous, spec.range));
        ops.push_back(random_operand(rng, {}, t, Layout::contiguous, spec.range));
        add_case("a broadcast scalar", std::move(ops), fn);
      }
      break;
    }
    case Family::where: {
      struct Triple {
        Shape c, a, b;
        Layout l;
        bool large;
      };
      for (const Triple& s : std::vector<Triple>{{{3, 1}, {1, 4}, {3, 4}, Layout::contiguous, false},
                                                 {{}, {}, {}, Layout::contiguous, false},
                                                 {{7, 13, 3}, {7, 13, 3}, {7, 13, 3}, Layout::contiguous, false},
                                                 {{6, 5}, {6, 5}, {6, 5}, Layout::transposed, false},
                                                 {{100003}, {100003}, {100003}, Layout::contiguous, true}}) {
        if (quick && s.large) continue;
        add_case("", {random_operand(rng, s.c, DType::boolean, s.l), random_operand(rng, s.a, t, s.l, in_range({}, t)),
                      random_operand(rng, s.b, t, s.l, in_range({}, t))},
                 spec.fn);
      }
      break;
    }
    case Family::reduce:
    case Family::arg_reduce: {
      const bool arg = spec.family == Family::arg_reduce;
      // Any reduction by name: the op's output keeps the reduced dims (size
      // 1); without keepdim they are dropped from the result.
      auto reducer = [op](Shape dims, bool keepdim) -> Fn {
        return [op, dims, keepdim](const std::vector<Tensor>& in) {
          Tensor y = call_op(op, {in[0]}, {{"dims", dims}})[0];
          if (keepdim) return y;
          Shape kept;
          for (int64_t d = 0; d < y.dim(); ++d) {
            if (std::ranges::find(dims, d) == dims.end()) kept.push_back(y.size(d));
          }
          return y.reshape(kept);
        };
      };
      ValueRange r = in_range(spec.range, t);
      if (t == DType::boolean) r = {};
      std::vector<std::pair<Shape, bool>> dim_sets;
      if (arg) {
        dim_sets = {{{0}, false}, {{1}, true}, {{2}, false}};
      } else {
        dim_sets = {{{0}, false}, {{1}, true}, {{2}, false}, {{0, 2}, false}, {{0, 1, 2}, false}};
      }
      const Shape base{4, 5, 6};
      for (const auto& [dims, keepdim] : dim_sets) {
        int64_t terms = 1;
        for (int64_t d : dims) terms *= base[static_cast<size_t>(d)];
        add_case("dims " + shape_string(dims) + (keepdim ? " keepdim" : ""), {random_operand(rng, base, t,
                 Layout::contiguous, r)}, reducer(dims, keepdim), static_cast<double>(terms));
      }
      add_case("dims [1] of a transposed view", {random_operand(rng, {6, 5}, t, Layout::transposed, r)},
               reducer({1}, false), 5.0);
      if (!quick) {
        const bool product = op == "strata::prod";
        if (!product || t == DType::f32 || t == DType::f64) {
          const int64_t n = product ? 1001 : 100003;
          ValueRange large = product ? ValueRange{0.99, 1.01} : arg ? ValueRange{-2.0, 2.0} : r;
          if (is_integral(t)) large = r;
          add_case("all of a large tensor", {random_operand(rng, {n}, t, Layout::contiguous, large)},
                   reducer({0}, false), static_cast<double>(n));
        }
      }
      break;
    }
    case Family::matmul: {
      struct Mm {
        Shape a, b;
        Layout la, lb;
        bool large;
      };
      for (const Mm& m : std::vector<Mm>{{{3, 4}, {4, 5}, Layout::contiguous, Layout::contiguous, false},
                                         {{2, 3, 4}, {2, 4, 5}, Layout::contiguous, Layout::contiguous, false},
                                         {{2, 3, 4}, {4, 5}, Layout::contiguous, Layout::contiguous, false},
                                         {{3, 4}, {4, 5}, Layout::transposed, Layout::transposed, false},
                                         {{17, 33}, {33, 9}, Layout::contiguous, Layout::contiguous, false},
                                         {{300, 300}, {300, 300}, Layout::contiguous, Layout::contiguous, true}}) {
        if (quick && m.large) continue;
        ValueRange r = in_range({-1.0, 1.0}, t);
        if (is_integral(t)) r = {-3.0, 3.0, true};
        add_case("", {random_operand(rng, m.a, t, m.la, r), random_operand(rng, m.b, t, m.lb, r)}, spec.fn,
                 static_cast<double>(m.a.back()));
      }
      break;
    }
    case Family::linear: {
      // x [..., K], weight [N, K], bias [N]; with and without the fused relu.
      struct Lin {
        Shape x;
        int64_t n;
        Layout lx;
        FusedActivation act;
        bool large;
      };
      for (const Lin& l : std::vector<Lin>{{{3, 4}, 5, Layout::contiguous, FusedActivation::none, false},
                                           {{3, 4}, 5, Layout::contiguous, FusedActivation::relu, false},
                                           {{2, 3, 4}, 2, Layout::contiguous, FusedActivation::relu, false},
                                           {{4}, 3, Layout::contiguous, FusedActivation::none, false},
                                           {{4, 3}, 6, Layout::transposed, FusedActivation::none, false},
                                           {{64, 300}, 130, Layout::contiguous, FusedActivation::relu, true}}) {
        if (quick && l.large) continue;
        const ValueRange r = in_range({-1.0, 1.0}, t);
        const int64_t k = l.x.back();
        Fn fn = [act = l.act](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2], act); };
        add_case(l.act == FusedActivation::relu ? "relu" : "",
                 {random_operand(rng, l.x, t, l.lx, r), random_operand(rng, {l.n, k}, t, Layout::contiguous, r),
                  random_operand(rng, {l.n}, t, Layout::contiguous, r)},
                 fn, static_cast<double>(k + 1));
      }
      break;
    }
    case Family::index_select: {
      auto fn_for = [](int64_t dim) -> Fn {
        return [dim](const std::vector<Tensor>& in) { return index_select(in[0], dim, in[1]); };
      };
      auto index = [&](std::vector<double> v) {
        const Shape shape{static_cast<int64_t>(v.size())};
        Operand o = operand_of(shape, std::move(v), DType::i64);
        o.keep_dtype = true;
        return o;
      };
      ValueRange r = in_range({}, t);
      add_case("dim 0", {random_operand(rng, {5, 4}, t, Layout::contiguous, r), index({4, 0, 2, 2})}, fn_for(0));
      add_case("dim 1", {random_operand(rng, {5, 4}, t, Layout::contiguous, r), index({3, 0})}, fn_for(1));
      add_case("dim 1 of a transposed view", {random_operand(rng, {6, 5}, t, Layout::transposed, r), index({4, 1, 0})},
               fn_for(1));
      if (!quick) {
        std::vector<double> idx(64);
        std::uniform_int_distribution<int> pick(0, 999);
        for (double& v : idx) v = pick(rng);
        add_case("dim 0 of [1000, 100]", {random_operand(rng, {1000, 100}, t, Layout::contiguous, r), index(idx)},
                 fn_for(0));
      }
      break;
    }
    case Family::gather:
    case Family::scatter_add: {
      const bool scatter = spec.family == Family::scatter_add;
      ValueRange r = in_range({}, t);
      auto index = [&](const Shape& shape, int64_t bound) {
        Operand o = random_operand(rng, shape, DType::i64, Layout::contiguous, {0.0, double(bound - 1), true});
        o.keep_dtype = true;
        return o;
      };
      for (int64_t dim : {int64_t{0}, int64_t{1}}) {
        const Shape x{4, 5};
        const Shape ishape = dim == 0 ? Shape{3, 5} : Shape{4, 2};
        if (scatter) {
          add_case("dim " + std::to_string(dim), {random_operand(rng, x, t, Layout::contiguous, r), index(ishape, x[size_t(dim)]),
                   random_operand(rng, ishape, t, Layout::contiguous, r)},
                   [dim](const std::vector<Tensor>& in) { return scatter_add(in[0], dim, in[1], in[2]); }, 4.0);
        } else {
          add_case("dim " + std::to_string(dim), {random_operand(rng, x, t, Layout::contiguous, r), index(ishape, x[size_t(dim)])},
                   [dim](const std::vector<Tensor>& in) { return gather(in[0], dim, in[1]); });
        }
      }
      break;
    }
    case Family::softmax: {
      const bool log_form = op == "strata::log_softmax";
      auto fn_for = [log_form](int64_t dim) -> Fn {
        return [log_form, dim](const std::vector<Tensor>& in) {
          return log_form ? log_softmax(in[0], dim) : softmax(in[0], dim);
        };
      };
      for (int64_t dim : {0, 1, 2}) {
        add_case("dim " + std::to_string(dim), {random_operand(rng, {4, 5, 6}, t, Layout::contiguous, {-3.0, 3.0})},
                 fn_for(dim), 6.0);
      }
      add_case("dim 0 of a transposed view", {random_operand(rng, {6, 5}, t, Layout::transposed, {-3.0, 3.0})}, fn_for(0),
               6.0);
      if (!quick) {
        add_case("dim 1 of [100, 1000]", {random_operand(rng, {100, 1000}, t, Layout::contiguous, {-3.0, 3.0})},
                 fn_for(1), 1000.0);
      }
      break;
    }
    case Family::pointwise_backward:
      for (const ShapeCase& s : kElementwiseShapes) {
        if (quick && s.large) continue;
        add_case("", {random_operand(rng, s.shape, t, s.layout), random_operand(rng, s.shape, t, s.layout, spec.range2)},
                 spec.fn);
      }
      break;
    case Family::softmax_backward: {
      const bool log_form = op == "strata::log_softmax_backward";
      for (int64_t dim : {0, 1, 2}) {
        add_case("dim " + std::to_string(dim),
                 {random_operand(rng, {4, 5, 6}, t), random_operand(rng, {4, 5, 6}, t, Layout::contiguous, spec.range2)},
                 [log_form, dim](const std::vector<Tensor>& in) {
                   return log_form ? log_softmax_backward(in[0], in[1], dim) : softmax_backward(in[0], in[1], dim);
                 },
                 6.0);
      }
      break;
    }
    case Family::amp_unscale: {
      const double inf = std::numeric_limits<double>::infinity();
      for (double poison : {0.0, inf, std::nan("")}) {
        Operand g = random_operand(rng, {7, 5}, t);
        if (poison != 0.0 || std::isnan(poison)) g.values[11] = poison;
        Operand scale = operand_of({}, {0.125}, DType::f32);
        scale.keep_dtype = true;
        const std::string label = std::isnan(poison) ? "a NaN in grad" : poison != 0.0 ? "an Inf in grad" : "finite grad";
        // Both outputs, flattened into one tensor: y, then found_inf.
        add_case(label, {g, scale}, [](const std::vector<Tensor>& in) {
          auto [y, found] = amp_unscale(in[0], in[1]);
          return cat({y.reshape({-1}).to(DType::f64), found.reshape({1}).to(DType::f64)});
        });
      }
      break;
    }
    case Family::optim_update: {
      // The update runs on copies of the state (it writes in place); the
      // result is the new parameter and state, flattened end to end.
      // Gradients keep away from 0 so that Adam's m / (√v + eps) is well
      // conditioned; the second moment is non-negative.
      const ValueRange grad{0.1, 2.0};
      auto flat = [](std::initializer_list<Tensor> parts) {
        std::vector<Tensor> v;
        for (const Tensor& part : parts) v.push_back(part.reshape({-1}));
        return cat(v);
      };
      const Shape shape{7, 5};
      // The group cases' parameters: a matrix, a vector no vector width
      // divides, a scalar.
      const Shape kGroupShapes[] = {{7, 5}, {13}, {}};
      // A group's operands, parameter by parameter: (p, g, state...) drawn
      // from `ranges`; and, from the inputs of a case, column k of every
      // parameter (the gradients, column 1, read; the rest cloned: updated).
      auto group_of = [&rng, t, &kGroupShapes](std::initializer_list<ValueRange> ranges) {
        std::vector<Operand> group;
        for (const Shape& s : kGroupShapes) {
          for (const ValueRange& r : ranges) group.push_back(random_operand(rng, s, t, Layout::contiguous, r));
        }
        return group;
      };
      auto column = [](const std::vector<Tensor>& in, size_t per, size_t k) {
        std::vector<Tensor> out;
        for (size_t j = k; j < in.size(); j += per) out.push_back(k == 1 ? in[j] : in[j].clone());
        return out;
      };
      if (op == "strata::sgd_step") {
        for (double wd : {0.0, 0.01}) {
          add_case(wd == 0.0 ? "lr 0.1" : "lr 0.1, weight decay 0.01",
                   {random_operand(rng, shape, t), random_operand(rng, shape, t, Layout::contiguous, grad)},
                   [wd](const std::vector<Tensor>& in) {
                     Tensor p = in[0].clone();
                     sgd_step_(p, in[1], 0.1, wd);
                     return p;
                   },
                   4.0);
        }
        // Three parameters of different shapes in one call of the group
        // form (one kernel call where the kernel takes groups,
        // STRATA_KERNEL_GROUPED): each must equal its update alone.
        add_case("a group of 3 parameters, weight decay 0.01", group_of({{}, grad}),
                 [flat, column](const std::vector<Tensor>& in) {
                   std::vector<Tensor> ps = column(in, 2, 0);
                   sgd_step_(ps, column(in, 2, 1), 0.1, 0.01);
                   return flat({ps[0], ps[1], ps[2]});
                 },
                 4.0);
      } else if (op == "strata::sgd_momentum_step") {
        const SgdMomentumUpdate updates[] = {
            {.lr = 0.1, .momentum = 0.9, .first = true},
            {.lr = 0.1, .momentum = 0.9},
            {.lr = 0.05, .weight_decay = 0.01, .momentum = 0.8, .dampening = 0.1},
            {.lr = 0.05, .weight_decay = 0.01, .momentum = 0.8, .nesterov = true},
        };
        for (const SgdMomentumUpdate& u : updates) {
          const std::string label = std::string(u.first ? "first step" : "later step") +
                                    (u.dampening != 0.0 ? ", dampening" : "") + (u.nesterov ? ", Nesterov" : "") +
                                    (u.weight_decay != 0.0 ? ", weight decay" : "");
          add_case(label,
                   {random_operand(rng, shape, t), random_operand(rng, shape, t, Layout::contiguous, grad),
                    random_operand(rng, shape, t)},
                   [u, flat](const std::vector<Tensor>& in) {
                     Tensor p = in[0].clone(), b = in[2].clone();
                     sgd_momentum_step_(p, in[1], b, u);
                     return flat({p, b});
                   },
                   8.0);
        }
        add_case("a group of 3 parameters, later step, Nesterov", group_of({{}, grad, {}}),
                 [flat, column](const std::vector<Tensor>& in) {
                   std::vector<Tensor> ps = column(in, 3, 0), bs = column(in, 3, 2);
                   sgd_momentum_step_(ps, column(in, 3, 1), bs, {.lr = 0.05, .momentum = 0.8, .nesterov = true});
                   return flat({ps[0], ps[1], ps[2], bs[0], bs[1], bs[2]});
                 },
                 8.0);
      } else {
        const AdamUpdate updates[] = {
            {.step_size = 1e-3 / 0.1, .inv_sqrt_bias2 = 1.0 / std::sqrt(0.001), .first = true},
            {.step_size = 1e-3 / 0.19, .inv_sqrt_bias2 = 1.0 / std::sqrt(0.001999)},
            {.decay_mode = WeightDecay::l2, .weight_decay = 0.01, .step_size = 0.01, .inv_sqrt_bias2 = 2.0},
            {.decay_mode = WeightDecay::decoupled, .weight_decay = 0.01, .decay = 0.9999, .step_size = 0.01,
             .inv_sqrt_bias2 = 2.0},
        };
        for (const AdamUpdate& u : updates) {
          const char* mode = u.decay_mode == WeightDecay::l2          ? ", L2 weight decay"
                             : u.decay_mode == WeightDecay::decoupled ? ", decoupled weight decay"
                                                                       : "";
          add_case(std::string(u.first ? "first step" : "later step") + mode,
                   {random_operand(rng, shape, t), random_operand(rng, shape, t, Layout::contiguous, grad),
                    random_operand(rng, shape, t), random_operand(rng, shape, t, Layout::contiguous, {0.0, 1.0})},
                   [u, flat](const std::vector<Tensor>& in) {
                     Tensor p = in[0].clone(), m = in[2].clone(), v = in[3].clone();
                     adam_step_(p, in[1], m, v, u);
                     return flat({p, m, v});
                   },
                   16.0);
        }
        add_case("a group of 3 parameters, later step, decoupled weight decay", group_of({{}, grad, {}, {0.0, 1.0}}),
                 [flat, column](const std::vector<Tensor>& in) {
                   std::vector<Tensor> ps = column(in, 4, 0), ms = column(in, 4, 2), vs = column(in, 4, 3);
                   adam_step_(ps, column(in, 4, 1), ms, vs,
                              {.decay_mode = WeightDecay::decoupled, .weight_decay = 0.01, .decay = 0.9999,
                               .step_size = 0.01, .inv_sqrt_bias2 = 2.0});
                   return flat({ps[0], ps[1], ps[2], ms[0], ms[1], ms[2], vs[0], vs[1], vs[2]});
                 },
                 16.0);
      }
      break;
    }
    case Family::copy: {
      auto into_strided = [](const std::vector<Tensor>& in) {
        Tensor dst = zeros({6, 9}, {.dtype = in[0].dtype(), .device = in[0].device()});
        dst.slice(1, 1, 9, 2).copy_(in[0]);
        return dst;
      };
      auto into_transposed = [](const std::vector<Tensor>& in) {
        Tensor dst = zeros({6, 9}, {.dtype = in[0].dtype(), .device = in[0].device()});
        dst.mT().copy_(in[0]);
        return dst;
      };
      auto compact = [](const std::vector<Tensor>& in) { return in[0].contiguous(); };
      auto clone = [](const std::vector<Tensor>& in) { return in[0].clone(); };
      ValueRange r = in_range({-100.0, 100.0}, t);
      add_case("into a step-2 slice of [6, 9]", {random_operand(rng, {6, 4}, t, Layout::contiguous, r)}, into_strided);
      add_case("into a transposed view of [6, 9]", {random_operand(rng, {9, 6}, t, Layout::contiguous, r)}, into_transposed);
      add_case("contiguous() of a transposed view", {random_operand(rng, {5, 7}, t, Layout::transposed, r)}, compact);
      add_case("contiguous() of a step-2 slice", {random_operand(rng, {3, 11}, t, Layout::stepped, r)}, compact);
      add_case("clone of a scalar", {random_operand(rng, {}, t, Layout::contiguous, r)}, clone);
      if (!quick) add_case("clone, large", {random_operand(rng, {100003}, t, Layout::contiguous, r)}, clone);
      break;
    }
    default: break;  // cast, fill and random ops have cases of their own
  }
  return cases;
}

// ---- cast, fill and random ops: compared with values computed on the host ----------------

/// A value of dtype `from` converted to `to` by the contract of cast.
double cast_value(double v, DType to) {
  if (to == DType::boolean) return v != 0.0 ? 1.0 : 0.0;
  if (is_integral(to)) return std::trunc(v);
  return v;
}

Outcome run_cast(const Context& ctx, DType from, DType to, const Shape& shape, Layout layout, std::mt19937_64& rng) {
  ValueRange r = is_integral(from) ? ValueRange{-50.0, 50.0, true} : ValueRange{-50.0, 50.0};
  Operand x = random_operand(rng, shape, from, layout, r);
  Tensor y = cast(on_device(x, ctx.dut), to);
  std::vector<double> src = materialise(x, ctx.reference, from).to_vector<double>();
  std::vector<double> want;
  for (double v : src) want.push_back(cast_value(v, to));
  Tolerance tol = tolerance_for(to);
  tol.atol = is_floating(to) ? tol.rtol * 50.0 : 0.0;  // the largest value is 50
  return compare_values(y.to_vector<double>(), want, tol, describe(x) + " to " + std::string(dtype_name(to)));
}

Outcome run_fill(const Context& ctx, DType t, const Shape& shape, double value) {
  Tensor y = full(shape, value, {.dtype = t, .device = ctx.dut});
  const double want = cast_value(value, t);
  return compare_values(y.to_vector<double>(), std::vector<double>(static_cast<size_t>(numel_of(shape)), want),
                        tolerance_for(t), "full(" + shape_string(shape) + ", " + std::to_string(value) + ")");
}

/// rand / randn / bernoulli on the device, bit for bit equal to
/// the Philox reference of philox.h for the same seed.
Outcome run_random(const Context& ctx, Family family, DType t, const Shape& shape) {
  const uint64_t seed = 0x5eedc0deULL;
  const int64_t n = numel_of(shape);
  manual_seed(seed);
  std::vector<float> host(static_cast<size_t>(n));
  Tensor y;
  if (family == Family::random_uniform) {
    y = rand(shape, {.dtype = t, .device = ctx.dut});
    for (int64_t i = 0; i < n; ++i) host[size_t(i)] = strata_philox_uniform(strata_philox_word(uint64_t(i), 0, seed));
  } else if (family == Family::random_normal) {
    y = randn(shape, {.dtype = t, .device = ctx.dut});
    for (int64_t i = 0; i < n; ++i) host[size_t(i)] = strata_philox_normal(uint64_t(i), 0, seed);
  } else {
    // The mask alone (no multiply on the device: a broken mul fails its own
    // cases, not this one).
    y = bernoulli(shape, 0.5, {.dtype = t, .device = ctx.dut});
    const uint32_t threshold = strata_philox_threshold(0.5);
    for (int64_t i = 0; i < n; ++i) {
      host[size_t(i)] = (strata_philox_word(uint64_t(i), 0, seed) >> 8) < threshold ? 1.0f : 0.0f;
    }
  }
  // The f32 values rounded to t on the host (from_data converts on the host).
  std::vector<uint8_t> want =
      from_data(std::span<const float>(host), shape, {.dtype = t, .device = ctx.reference}).to_bytes();
  std::vector<uint8_t> got = y.to_bytes();
  const size_t es = dtype_size(t);
  for (size_t i = 0; i < got.size() && i < want.size(); i += es) {
    if (std::memcmp(&got[i], &want[i], es) != 0) {
      Outcome o{Status::fail, "", 0.0};
      std::vector<double> g = y.to_vector<double>();
      o.message = "element " + std::to_string(i / es) + " of " + std::string(dtype_name(t)) + shape_string(shape) +
                  " is " + std::to_string(g[i / es]) + ", philox.h gives " + std::to_string(host[i / es]) +
                  " (seed " + std::to_string(seed) + ", offset 0; bit for bit required)";
      o.max_error = std::fabs(g[i / es] - host[i / es]);
      return o;
    }
  }
  if (got.size() != want.size()) return {Status::fail, "wrong byte count", 0.0};
  return {Status::pass, "", 0.0};
}

// ---- running an op case -------------------------------------------------------------------

Outcome run_op_case(const Context& ctx, const OpCase& c, DType out_dtype) {
  std::vector<Tensor> dut_in, ref_in;
  for (const Operand& op : c.inputs) {
    dut_in.push_back(on_device(op, ctx.dut));
    ref_in.push_back(on_reference(op, ctx.reference));
  }
  Tensor got = c.fn(dut_in);
  if (got.dtype() != out_dtype) {
    return {Status::skip,
            "the core calls this op with output " + std::string(dtype_name(got.dtype())) + ", not " +
                std::string(dtype_name(out_dtype)) + ": the kernel's signature is never used",
            0.0};
  }
  Tensor want = c.fn(ref_in);
  Tolerance tol = accumulated(tolerance_for(out_dtype), c.terms, magnitude(c.inputs));
  if (!is_floating(out_dtype)) tol = {};
  return compare(got, want, tol, describe(c.inputs) + (c.label.empty() ? "" : ", " + c.label));
}

/// The tolerance of a derivative row: the dtype's, grown with the terms the
/// op sums and the size of its inputs.
Tolerance gradient_tolerance(const OpCase& c, DType t) {
  const Tolerance tol = t == DType::f64 ? Tolerance{1e-9, 1e-8} : Tolerance{1e-4, 1e-4};
  return accumulated(tol, c.terms * 4.0, magnitude(c.inputs));
}

/// Derivatives of orders 1 to 3 of sum(op(x, ...) * w) with respect to the
/// op's `diff_input`, on the device and on the reference in f64. On the
/// device only the op (its kernel, and the ops its derivative rules call)
/// runs there: its result moves to the reference, where the weights and the
/// sum are, so that a broken kernel of the checker's own helpers (mul, sum)
/// fails its own case rather than every derivative row.
Outcome run_gradients(const Context& ctx, const OpCase& c, int diff_input, DType t) {
  std::string report;
  double worst = 0.0;
  Tensor got_out = c.fn([&] {
    std::vector<Tensor> in;
    for (const Operand& op : c.inputs) in.push_back(on_device(op, ctx.dut));
    return in;
  }());
  std::mt19937_64 rng = rng_for(c.label + "weights");
  Operand w = random_operand(rng, got_out.sizes(), t, Layout::contiguous, {0.5, 1.5});
  for (int order = 1; order <= 3; ++order) {
    auto derivative = [&](Device device, bool reference) {
      std::vector<Tensor> in;
      for (const Operand& op : c.inputs) in.push_back(reference ? on_reference(op, device) : on_device(op, device));
      Tensor weights = reference ? on_reference(w, device) : on_device(w, ctx.reference);
      Fn fn = c.fn;
      const size_t k = static_cast<size_t>(diff_input);
      strata::Fn f = [fn, in, weights, k, at = ctx.reference](const Tensor& x) {
        std::vector<Tensor> args = in;
        args[k] = x;
        return sum(fn(args).to(at) * weights);
      };
      return nth_grad(f, order)(in[k]);
    };
    Tensor got = derivative(ctx.dut, false);
    Tensor want = derivative(ctx.reference, true);
    const std::string what = describe(c.inputs) + ", VJP of order " + std::to_string(order);
    Outcome o = compare(got, want, gradient_tolerance(c, t), what);
    if (o.status != Status::pass) return o;
    worst = std::max(worst, o.max_error);
  }
  // Forward mode: the JVP along a fixed direction, which runs the op's JVP
  // rule (not its VJP) on the device.
  Operand v = random_operand(rng, on_device(c.inputs[static_cast<size_t>(diff_input)], ctx.reference).sizes(), t,
                             Layout::contiguous, {0.5, 1.5});
  auto tangent = [&](Device device, bool reference) {
    std::vector<Tensor> in;
    for (const Operand& op : c.inputs) in.push_back(reference ? on_reference(op, device) : on_device(op, device));
    Fn fn = c.fn;
    const size_t k = static_cast<size_t>(diff_input);
    strata::Fn f = [fn, in, k](const Tensor& x) {
      std::vector<Tensor> args = in;
      args[k] = x;
      return fn(args);
    };
    return jvp(f, in[k], reference ? on_reference(v, device) : on_device(v, device)).second;
  };
  Outcome o = compare(tangent(ctx.dut, false), tangent(ctx.reference, true), gradient_tolerance(c, t),
                      describe(c.inputs) + ", JVP");
  if (o.status != Status::pass) return o;
  return {Status::pass, "VJP orders 1, 2, 3 and JVP", std::max(worst, o.max_error)};
}

/// Which dtypes the contract defines an op for (for the fallback cases of
/// the primitives a device lacks).
std::vector<DType> contract_dtypes(const std::string& op, Family family) {
  std::vector<DType> numbers = kFloats;
  numbers.push_back(DType::i32);
  numbers.push_back(DType::i64);
  static const std::set<std::string> integral_unary{"strata::neg", "strata::abs", "strata::sign", "strata::relu"};
  switch (family) {
    case Family::unary:
      if (op == "strata::logical_not") return {DType::boolean};
      return integral_unary.count(op) != 0 ? numbers : kFloats;
    case Family::binary:
      if (op == "strata::logical_and" || op == "strata::logical_or") return {DType::boolean};
      return op == "strata::pow" ? kFloats : numbers;
    case Family::compare:
      if (op == "strata::eq" || op == "strata::ne") numbers.push_back(DType::boolean);
      return numbers;
    case Family::where:
    case Family::copy:
    case Family::fill: numbers.push_back(DType::boolean); return numbers;
    case Family::reduce:
    case Family::arg_reduce:
    case Family::index_select:
    case Family::gather:
    case Family::scatter_add: return numbers;
    case Family::matmul:
    case Family::linear:
    case Family::random_uniform:
    case Family::random_normal:
    case Family::bernoulli: return kFloats;
    default: return {};
  }
}

/// The signature the core uses for `op` on inputs of dtype `t` (for the
/// fallback cases).
Signature default_signature(const std::string& op, Family family, DType t) {
  Signature s;
  switch (family) {
    case Family::compare: return {{t, t}, {DType::boolean}};
    case Family::binary: return {{t, t}, {t}};
    case Family::where: return {{DType::boolean, t, t}, {t}};
    case Family::arg_reduce: return {{t}, {DType::i64}};
    case Family::reduce:
      return {{t}, {op == "strata::sum" && !is_floating(t) ? DType::i64 : t}};
    case Family::index_select:
    case Family::gather: return {{t, DType::i64}, {t}};
    case Family::scatter_add: return {{t, DType::i64, t}, {t}};
    case Family::linear: return {{t, t, t}, {t}};
    case Family::fill:
    case Family::random_uniform:
    case Family::random_normal:
    case Family::bernoulli: return {{}, {t}};
    default: return {{t}, {t}};
  }
}

/// The attributes `op`'s kernel on `dut` looked for that the op does not declare.
std::vector<AttrMisread> misreads_of(Device dut, const std::string& op) {
  std::vector<AttrMisread> out;
  for (AttrMisread& m : runtime().attr_misreads()) {
    if (m.device == dut.str() && m.op == op) out.push_back(std::move(m));
  }
  return out;
}

/// A failure message when `after` holds a read `before` did not (or more of one).
std::optional<std::string> new_misread(const std::vector<AttrMisread>& before, const std::vector<AttrMisread>& after) {
  for (const AttrMisread& m : after) {
    auto it = std::ranges::find_if(before, [&](const AttrMisread& b) { return b.attribute == m.attribute; });
    if (it == before.end() || it->count < m.count) {
      return "the kernel read attribute '" + m.attribute + "', which " + m.op + " does not declare (it takes: " +
             m.declared + ")";
    }
  }
  return std::nullopt;
}

/// Wraps a case body: counts the op's fallbacks around it, turns
/// exceptions into failures, and fails a kernel that looked for an
/// attribute its op does not declare. A claimed kernel whose call fell back declined
/// it (STRATA_ERROR_UNSUPPORTED); an op without a kernel falls back.
std::function<Outcome()> observed(const Context& ctx, const std::string& op, bool claimed, std::function<Outcome()> body) {
  return [&ctx, op, claimed, body = std::move(body)] {
    const uint64_t before = fallbacks_of(ctx.dut, op);
    const std::vector<AttrMisread> misread_before = misreads_of(ctx.dut, op);
    Outcome o;
    try {
      o = body();
    } catch (const std::exception& e) {
      o = {Status::fail, std::string("error: ") + e.what(), 0.0};
    }
    const bool fell_back = fallbacks_of(ctx.dut, op) > before;
    if (fell_back && o.status == Status::pass) {
      o.status = claimed ? Status::unsupported : Status::fallback;
      o.message = claimed ? "the kernel declined (STRATA_ERROR_UNSUPPORTED); the CPU computed it"
                          : "no kernel on " + ctx.dut.str() + "; the core fell back to cpu:0";
    } else if (!fell_back && !claimed && o.status == Status::pass && !ctx.reference_is_dut) {
      o.message = "no kernel claimed, yet nothing fell back";
    }
    if (o.status != Status::fail) {
      if (std::optional<std::string> misread = new_misread(misread_before, misreads_of(ctx.dut, op))) {
        o = {Status::fail, *misread, 0.0};
      }
    }
    return o;
  };
}

std::string cell_dtype(DType t) { return std::string(dtype_name(t)); }

}  // namespace

std::vector<Case> build_cases(const Context& ctx) {
  std::vector<Case> cases;
  add_general_cases(ctx, cases);
  const auto& table = op_table();
  auto selected = [&](const std::string& op) { return !ctx.op_filter || std::regex_search(op, *ctx.op_filter); };
  auto stores = [&](DType t) { return std::find(ctx.info.dtypes.begin(), ctx.info.dtypes.end(), t) != ctx.info.dtypes.end(); };

  std::vector<Case> gradient_cases;
  std::set<std::pair<std::string, std::string>> seen;
  for (const KernelInfo& k : ctx.info.kernels) {
    if (!selected(k.op) || !seen.insert({k.op, k.signature}).second) continue;
    const auto spec_it = table.find(k.op);
    const std::optional<Signature> sig = parse_signature(k.signature);
    // The generators compare real values; complex kernels are checked by
    // Strata's own suites (tests/ops/complex_test.cpp), not here yet. The
    // cell is the first complex dtype of the signature (cast: its input).
    if (sig && (std::any_of(sig->in.begin(), sig->in.end(), is_complex) ||
                std::any_of(sig->out.begin(), sig->out.end(), is_complex))) {
      const bool cast = k.op == "strata::cast";
      const auto in = std::find_if(sig->in.begin(), sig->in.end(), is_complex);
      const DType column = cast ? sig->in[0] : in != sig->in.end() ? *in : sig->out[0];
      cases.push_back({k.op + " " + k.signature, cast ? k.op + " to " + cell_dtype(sig->out[0]) : k.op,
                       cell_dtype(column), [] {
                         return Outcome{Status::skip, "no conformance cases for complex dtypes yet (docs/complex.md)",
                                        0.0};
                       }});
      continue;
    }
    if (spec_it == table.end() && sig) {
      // A plugin-defined op: cases from its registered schema.
      const std::vector<OpInfo> ops = runtime().ops();
      const auto info = std::find_if(ops.begin(), ops.end(), [&](const OpInfo& o) {
        return o.name == k.op && !o.plugin.empty();
      });
      if (info != ops.end()) {
        const Observe observe = [&ctx](const std::string& op, std::function<Outcome()> body) {
          return observed(ctx, op, true, std::move(body));
        };
        add_plugin_op_cases(ctx, k, *info, sig->in, sig->out, observe, cases, gradient_cases);
        continue;
      }
    }
    if (spec_it == table.end() || !sig) {
      cases.push_back({k.op + " " + k.signature, k.op, sig ? cell_dtype(sig->out.empty() ? DType::f32 : sig->out[0]) : "?",
                       [op = k.op] {
                         return Outcome{Status::skip, "no conformance generator for " + op + " (not in docs/ops.md)", 0.0};
                       }});
      continue;
    }
    const OpSpec& spec = spec_it->second;
    const DType t = primary_dtype(spec.family, *sig);
    const std::string prefix = k.op + " " + k.signature;
    if (spec.family == Family::cast) {
      if (sig->in.empty() || sig->out.empty()) continue;
      const DType to = sig->out[0];
      const std::string row = k.op + " to " + cell_dtype(to);
      for (const ShapeCase& s : kElementwiseShapes) {
        if (ctx.quick && s.large) continue;
        const std::string name = prefix + " " + std::string(dtype_name(t)) + shape_string(s.shape) +
                                 (s.layout == Layout::contiguous ? "" : " view");
        cases.push_back({name, row, cell_dtype(t), observed(ctx, k.op, true, [&ctx, t, to, s, name] {
                           std::mt19937_64 rng = rng_for(name);
                           return run_cast(ctx, t, to, s.shape, s.layout, rng);
                         })});
      }
      continue;
    }
    if (spec.family == Family::fill) {
      const std::vector<double> values = t == DType::boolean ? std::vector<double>{0.0, 1.0}
                                         : is_integral(t)   ? std::vector<double>{0.0, -7.0, 123456.0}
                                                            : std::vector<double>{0.0, 1.0, -2.5, 0.1};
      for (const Shape& shape : {Shape{}, Shape{3, 4}, Shape{100003}}) {
        if (ctx.quick && shape.size() == 1) continue;
        for (double v : values) {
          cases.push_back({prefix + " " + shape_string(shape) + " = " + std::to_string(v), k.op, cell_dtype(t),
                           observed(ctx, k.op, true, [&ctx, t, shape, v] { return run_fill(ctx, t, shape, v); })});
        }
      }
      continue;
    }
    if (spec.family == Family::random_uniform || spec.family == Family::random_normal ||
        spec.family == Family::bernoulli) {
      if (!is_floating(t) && spec.family != Family::bernoulli) {
        cases.push_back({prefix, k.op, cell_dtype(t), [] {
                           return Outcome{Status::skip, "rand and randn draw floating tensors only", 0.0};
                         }});
        continue;
      }
      for (const Shape& shape : {Shape{1}, Shape{7}, Shape{3, 5}, Shape{1001}, Shape{100003}}) {
        if (ctx.quick && shape[0] == 100003) continue;
        const Family fam = spec.family;
        cases.push_back({prefix + " " + shape_string(shape), k.op, cell_dtype(t),
                         observed(ctx, k.op, true, [&ctx, fam, t, shape] { return run_random(ctx, fam, t, shape); })});
      }
      continue;
    }
    std::mt19937_64 rng = rng_for(prefix);
    std::vector<OpCase> op_cases_list = op_cases(k.op, spec, *sig, ctx.quick, rng);
    const DType out = sig->out.empty() ? t : sig->out[0];
    for (size_t i = 0; i < op_cases_list.size(); ++i) {
      const OpCase& c = op_cases_list[i];
      const std::string name = prefix + " #" + std::to_string(i + 1) + " " + describe(c.inputs) +
                               (c.label.empty() ? "" : ", " + c.label);
      const DType out_dtype = spec.family == Family::amp_unscale ? DType::f64 : out;
      cases.push_back({name, k.op, cell_dtype(t),
                       observed(ctx, k.op, true, [&ctx, c, out_dtype] { return run_op_case(ctx, c, out_dtype); })});
    }
    // Derivatives: f32 and f64, on the first case that is neither a scalar
    // nor large (the contract's float ops with derivative rules).
    if (spec.differentiable && (t == DType::f32 || t == DType::f64) && !op_cases_list.empty()) {
      for (const OpCase& c : op_cases_list) {
        if (c.inputs.empty() || c.inputs[0].base.empty() || numel_of(c.inputs[0].base) > 1000) continue;
        if (!is_floating(c.inputs[static_cast<size_t>(spec.diff_input)].dtype)) break;
        const int diff = spec.diff_input;
        gradient_cases.push_back({prefix + " derivatives to order 3, " + describe(c.inputs), k.op + " (derivatives)",
                                  cell_dtype(t),
                                  observed(ctx, k.op, true, [&ctx, c, diff, t] { return run_gradients(ctx, c, diff, t); })});
        break;
      }
    }
  }

  // Primitives the device has no kernel for: one small case per stored
  // dtype of the contract, expected to fall back to the CPU.
  for (const std::string& missing : ctx.info.missing_primitives) {
    const std::string op = missing.find("::") == std::string::npos ? "strata::" + missing : missing;
    const auto spec_it = table.find(op);
    if (!selected(op) || spec_it == table.end()) continue;
    const OpSpec& spec = spec_it->second;
    if (spec.family == Family::cast) continue;  // every pair would be a case; the matrix shows the claimed ones
    for (DType t : contract_dtypes(op, spec.family)) {
      if (!stores(t)) continue;
      const Signature sig = default_signature(op, spec.family, t);
      if (std::any_of(sig.in.begin(), sig.in.end(), [&](DType d) { return !stores(d); }) ||
          std::any_of(sig.out.begin(), sig.out.end(), [&](DType d) { return !stores(d); })) {
        continue;
      }
      const std::string name = op + " " + cell_dtype(t) + " (no kernel)";
      std::function<Outcome()> body;
      if (spec.family == Family::fill) {
        body = [&ctx, t] { return run_fill(ctx, t, {3, 4}, 1.0); };
      } else if (spec.family == Family::random_uniform || spec.family == Family::random_normal ||
                 spec.family == Family::bernoulli) {
        const Family fam = spec.family;
        body = [&ctx, fam, t] { return run_random(ctx, fam, t, {7}); };
      } else {
        std::mt19937_64 rng = rng_for(name);
        std::vector<OpCase> list = op_cases(op, spec, sig, true, rng);
        if (list.empty()) continue;
        // The first case that has a rank (a scalar may be special-cased by a core path).
        OpCase c = list.front();
        for (const OpCase& candidate : list) {
          if (!candidate.inputs.empty() && !candidate.inputs[0].base.empty()) {
            c = candidate;
            break;
          }
        }
        const DType out = sig.out.empty() ? t : sig.out[0];
        body = [&ctx, c, out] { return run_op_case(ctx, c, out); };
      }
      cases.push_back({name, op, cell_dtype(t), observed(ctx, op, false, body)});
    }
  }
  // The plugin's own cases (its strata.test_cases extension); the device
  // claims their op when it has a kernel of it.
  const Observe observe_exported = [&ctx](const std::string& op, std::function<Outcome()> body) {
    const bool claimed = std::any_of(ctx.info.kernels.begin(), ctx.info.kernels.end(),
                                     [&](const KernelInfo& k) { return k.op == op; });
    return observed(ctx, op, claimed, std::move(body));
  };
  add_exported_cases(ctx, observe_exported, cases, gradient_cases);
  add_queue_cases(ctx, cases);
  for (Case& g : gradient_cases) cases.push_back(std::move(g));
  return cases;
}

}  // namespace strata::cli::conformance
