// conformance_plugin_ops.cpp — `strata plugin check` for the kernels of
// plugin-defined ops ("acme::softplus"), which docs/ops.md has no generator
// for: the cases come from the op's registered schema (inputs, outputs,
// attributes, derivative rules) and its test domain.
//
// Forward: the device's result against cpu:0 in f64 when cpu:0 can run the
// op (a kernel there, or a decomposition), else not compared, and said so.
// Derivatives: every order up to two of the VJP, and the JVP, each against
// central finite differences of the op itself — in f64 on cpu:0 when it runs
// there, else on the device in the kernel's dtype with a wider tolerance —
// so a kernel and a derivative rule that disagree fail, naming the op, the
// direction (VJP of order n, JVP), the input and the worst element.
//
// The plugin's own cases (strata.test_cases, add_exported_cases) run the
// same way on the inputs and attributes it gives, against the outputs it
// expects when it gives them.
#include "conformance_support.hpp"

#include <strata/plugin_cases.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace strata::cli::conformance {

namespace {

/// Every plugin op's inputs are drawn from one shape; an op that takes
/// other shapes refuses them in its infer rule, and the case says so.
const Shape kShape{3, 4};

/// The highest derivative order checked (the second order differentiates
/// the op's VJP rule).
constexpr int kMaxOrder = 2;

std::string domain_text(const OpTestDomain& d) {
  char text[96];
  if (d.declared) {
    std::snprintf(text, sizeof text, "its declared domain [%g, %g]", d.lo, d.hi);
  } else {
    std::snprintf(text, sizeof text, "the default domain [%g, %g] (a plugin op's schema declares none)", d.lo, d.hi);
  }
  return text;
}

/// Where the finite differences run: in f64 on cpu:0 when the op (and, for
/// the second order, its VJP rule) runs there, else on the device under
/// test in the kernel's dtype.
struct Where {
  Device device;
  bool reference = false;
  std::string text() const { return reference ? "in f64 on " + device.str() : "on " + device.str(); }
};

/// The value the checker gives a required FLOAT attribute: away from 0 and
/// 1, so that a rule that drops or squares it is seen.
constexpr double kFloatAttr = 1.25;

/// A plugin op's case: its inputs as operands, its attributes, and the op
/// run on them.
struct PluginOpCase {
  std::string op;
  std::vector<Operand> inputs;
  std::vector<OpAttr> attrs;
  std::string what;  // the inputs and attributes, described
  /// The inputs are the plugin's own (a strata.test_cases case): the op
  /// refusing them is a failure, not a skip.
  bool given = false;

  std::vector<Tensor> run(const std::vector<Tensor>& in) const { return call_op(op, in, attrs); }

  std::vector<Tensor> tensors(Device device, bool reference) const {
    std::vector<Tensor> in;
    for (const Operand& o : inputs) in.push_back(reference ? on_reference(o, device) : on_device(o, device));
    return in;
  }
};

/// The scalar whose derivatives are checked: sum over the op's outputs of
/// sum(output * weights), with input `k` replaced by x. The weights and the
/// sums run on the reference, so only the op (and its rules) runs on the
/// device.
struct Objective {
  const PluginOpCase* c;
  std::vector<Tensor> args;
  std::vector<Tensor> weights;  // on `at`
  size_t k = 0;
  Device at;

  Tensor operator()(const Tensor& x) const {
    std::vector<Tensor> in = args;
    in[k] = x;
    const std::vector<Tensor> outs = c->run(in);
    Tensor total;
    for (size_t o = 0; o < outs.size() && o < weights.size(); ++o) {
      Tensor term = sum(outs[o].to(at) * weights[o].to(outs[o].dtype()));
      total = o == 0 ? term : total + term;
    }
    return total;
  }
};

/// The derivative of order `order` of the objective (order 0: itself), as
/// the scalar whose gradient is the next order: order 0 is the objective,
/// order n the sum of the n-th derivative.
Fn order_scalar(const Objective& f, int order) {
  if (order == 0) return f;
  Fn d = nth_grad(f, order);
  return [d](const Tensor& x) { return sum(d(x)); };
}

/// The operand for differences in f64 on the reference: its values as the
/// device sees them (rounded to its dtype), then held in f64, so that a step
/// of 1e-6 is not rounded away.
Operand in_f64(const Operand& x) {
  Operand wide = x;
  if (x.dtype == DType::f32) {
    for (double& v : wide.values) v = static_cast<double>(static_cast<float>(v));
  }
  wide.dtype = DType::f64;
  return wide;
}

/// Central differences of `g` (scalar-valued) at the operand `x`, element by
/// element, with steps h·max(1, |x_i|).
std::vector<double> central_differences(const Fn& g, const Operand& operand, Device device, bool reference,
                                        double h) {
  const Operand x = reference ? in_f64(operand) : operand;
  std::vector<double> out(x.values.size());
  for (size_t i = 0; i < x.values.size(); ++i) {
    const double step = h * std::max(1.0, std::fabs(x.values[i]));
    Operand plus = x, minus = x;
    plus.values[i] += step;
    minus.values[i] -= step;
    const double up = g(reference ? on_reference(plus, device) : on_device(plus, device)).to_vector<double>()[0];
    const double down = g(reference ? on_reference(minus, device) : on_device(minus, device)).to_vector<double>()[0];
    out[i] = (up - down) / (2.0 * step);
  }
  return out;
}

/// Whether the objective (and its derivatives to `order`) can be evaluated
/// on cpu:0 in f64: a kernel or decomposition of the op there.
bool runs_on_reference(const Context& ctx, const PluginOpCase& c, const std::vector<Tensor>& weights, int order) {
  if (ctx.reference_is_dut) return false;
  try {
    Objective f{&c, c.tensors(ctx.reference, true), weights, 0, ctx.reference};
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      if (!is_floating(c.inputs[k].dtype)) continue;
      f.k = k;
      (void)order_scalar(f, order)(f.args[k]).to_vector<double>();
      return true;
    }
  } catch (const Error&) {
  }
  return false;
}

/// Runs the op on the device under test into `outs`; a skip when its shape
/// rule refuses the checker's inputs (not a fault of the kernel or rules).
std::optional<Outcome> run_on_device(const Context& ctx, const PluginOpCase& c, std::vector<Tensor>& outs) {
  if (c.given) {
    outs = c.run(c.tensors(ctx.dut, false));
    return std::nullopt;
  }
  try {
    outs = c.run(c.tensors(ctx.dut, false));
  } catch (const ShapeError& e) {
    return Outcome{Status::skip, std::string("the op refuses the checker's inputs: ") + e.what(), 0.0};
  } catch (const ValueError& e) {
    return Outcome{Status::skip, std::string("the op refuses the checker's inputs: ") + e.what(), 0.0};
  }
  return std::nullopt;
}

Outcome run_forward(const Context& ctx, const PluginOpCase& c, bool differentiable, const std::string& domain) {
  std::vector<Tensor> got;
  if (std::optional<Outcome> refused = run_on_device(ctx, c, got)) return *refused;
  std::vector<Tensor> want;
  try {
    if (ctx.reference_is_dut) throw Error("the device under test is the reference");
    want = c.run(c.tensors(ctx.reference, true));
  } catch (const Error& e) {
    return {Status::skip,
            "forward not compared: " + ctx.reference.str() + " cannot run " + c.op + " (" + e.what() + ")" +
                (differentiable ? "; its derivatives are checked against its own kernel" : ""),
            0.0};
  }
  double worst = 0.0;
  for (size_t o = 0; o < got.size() && o < want.size(); ++o) {
    Outcome r = compare(got[o], want[o], tolerance_for(got[o].dtype()),
                        c.what + (got.size() > 1 ? ", output " + std::to_string(o) : ""));
    if (r.status != Status::pass) return r;
    worst = std::max(worst, r.max_error);
  }
  return {Status::pass, "against " + ctx.reference.str() + " in f64, on " + domain, worst};
}

Outcome run_derivatives(const Context& ctx, const PluginOpCase& c, const OpInfo& info, DType t,
                        const std::string& domain) {
  // Weights for each output, from the device's forward result shapes.
  std::vector<Tensor> outs;
  if (std::optional<Outcome> refused = run_on_device(ctx, c, outs)) return *refused;
  std::mt19937_64 rng = rng_for(c.op + " " + c.what + " weights");
  std::vector<Tensor> weights;
  for (const Tensor& y : outs) {
    weights.push_back(on_device(random_operand(rng, y.sizes(), DType::f64, Layout::contiguous, {0.5, 1.5}),
                                ctx.reference));
  }
  const int orders = std::min(kMaxOrder, info.domain.orders);
  const bool f64_reference = runs_on_reference(ctx, c, weights, orders - 1);
  const Where fd{f64_reference ? ctx.reference : ctx.dut, f64_reference};
  // Steps and tolerances: f64 differences are good to about 1e-8 relative;
  // on the device in f32 to about 1e-3.
  const bool precise = fd.reference || t == DType::f64;
  const double h = precise ? 1e-6 : 1e-2;
  const Tolerance tol = precise ? (t == DType::f64 ? Tolerance{1e-6, 1e-6} : Tolerance{2e-4, 2e-4})
                                : Tolerance{2e-2, 2e-2};
  std::string checked;
  double worst = 0.0;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    if (!is_floating(c.inputs[k].dtype) || ((info.domain.flat_inputs >> k) & 1u) != 0) continue;
    const std::string input = "input " + std::to_string(k);
    Objective on_dut{&c, c.tensors(ctx.dut, false), weights, k, ctx.reference};
    Objective on_fd{&c, c.tensors(fd.device, fd.reference), weights, k, ctx.reference};
    for (int order = 1; order <= orders; ++order) {
      const std::vector<double> got = nth_grad(on_dut, order)(on_dut.args[k]).to_vector<double>();
      const std::vector<double> want =
          central_differences(order_scalar(on_fd, order - 1), c.inputs[k], fd.device, fd.reference, h);
      Outcome o = compare_values(got, want, tol,
                                 c.what + "; VJP of order " + std::to_string(order) + " with respect to " + input +
                                     " against central differences " + fd.text());
      if (o.status != Status::pass) {
        o.message = c.op + ": VJP of order " + std::to_string(order) + ", " + input + ": " + o.message;
        return o;
      }
      worst = std::max(worst, o.max_error);
    }
    if (info.forward_mode) {
      // The JVP along v against (op(x + h v) - op(x - h v)) / 2h, output 0.
      const Operand v = random_operand(rng, c.inputs[k].base, c.inputs[k].dtype, Layout::contiguous, {0.5, 1.5});
      const size_t kk = k;
      auto first_output = [&c, kk](std::vector<Tensor> args) {
        return [&c, kk, args](const Tensor& x) {
          std::vector<Tensor> in = args;
          in[kk] = x;
          return c.run(in)[0];
        };
      };
      const std::vector<double> got =
          jvp(first_output(on_dut.args), on_dut.args[k], on_device(v, ctx.dut)).second.to_vector<double>();
      Operand plus = fd.reference ? in_f64(c.inputs[k]) : c.inputs[k];
      Operand minus = plus;
      for (size_t i = 0; i < plus.values.size(); ++i) {
        plus.values[i] += h * v.values[i];
        minus.values[i] -= h * v.values[i];
      }
      auto at = [&](const Operand& x) {
        return first_output(on_fd.args)(fd.reference ? on_reference(x, fd.device) : on_device(x, fd.device))
            .to_vector<double>();
      };
      const std::vector<double> up = at(plus), down = at(minus);
      std::vector<double> want(up.size());
      for (size_t i = 0; i < up.size(); ++i) want[i] = (up[i] - down[i]) / (2.0 * h);
      Outcome o = compare_values(got, want, tol,
                                 c.what + "; JVP along " + input + " against central differences " + fd.text());
      if (o.status != Status::pass) {
        o.message = c.op + ": JVP, " + input + ": " + o.message;
        return o;
      }
      worst = std::max(worst, o.max_error);
    }
    checked += (checked.empty() ? "" : ", ") + input;
  }
  if (checked.empty()) return {Status::skip, "no floating input to differentiate", 0.0};
  return {Status::pass,
          "VJP orders 1 to " + std::to_string(orders) + (info.forward_mode ? " and JVP" : "") + " of " + checked +
              " against central differences " + fd.text() + ", on " + domain,
          worst};
}

}  // namespace

void add_plugin_op_cases(const Context& ctx, const KernelInfo& kernel, const OpInfo& info,
                         const std::vector<DType>& in, const std::vector<DType>& out, const Observe& observe,
                         std::vector<Case>& cases, std::vector<Case>& gradient_cases) {
  const std::string prefix = kernel.op + " " + kernel.signature;
  const std::string cell(dtype_name(in.empty() ? (out.empty() ? DType::f32 : out[0]) : in[0]));
  auto skip = [&](std::string why) {
    cases.push_back({prefix, kernel.op, cell, [why] { return Outcome{Status::skip, why, 0.0}; }});
  };
  // Required FLOAT attributes get kFloatAttr; the checker cannot choose
  // values of other kinds (an INT may be a dim, a STRING a mode).
  std::vector<OpAttr> attrs;
  std::string chosen, unknown;
  for (const OpAttrInfo& a : info.attrs) {
    if (!a.required) continue;
    if (a.kind == "FLOAT") {
      attrs.push_back({a.name, kFloatAttr});
      chosen += (chosen.empty() ? "" : ", ") + a.name + " = " + std::to_string(kFloatAttr).substr(0, 4);
    } else {
      unknown += (unknown.empty() ? "" : ", ") + a.name + " (" + a.kind + ")";
    }
  }
  if (!unknown.empty()) {
    return skip(kernel.op + " takes required attributes the checker cannot choose values for: " + unknown +
                "; test it through its callers");
  }
  if (info.n_inputs >= 0 && static_cast<size_t>(info.n_inputs) != in.size()) {
    return skip("the signature has " + std::to_string(in.size()) + " inputs, the op's schema " +
                std::to_string(info.n_inputs));
  }
  if (std::none_of(in.begin(), in.end(), is_floating)) {
    return skip("no floating input: the checker draws plugin ops' inputs from a real domain");
  }
  PluginOpCase c{kernel.op, {}, attrs, {}};
  std::mt19937_64 rng = rng_for(prefix);
  const OpTestDomain& d = info.domain;
  for (DType t : in) c.inputs.push_back(random_operand(rng, kShape, t, Layout::contiguous, {d.lo, d.hi}));
  c.what = describe(c.inputs) + (chosen.empty() ? "" : ", " + chosen + " (chosen by the checker)");
  const std::string domain = domain_text(d);
  cases.push_back({prefix + " " + c.what, kernel.op, cell,
                   observe(kernel.op, [&ctx, c, info, domain] {
                     return run_forward(ctx, c, info.differentiable, domain);
                   })});
  const DType t = in[static_cast<size_t>(std::find_if(in.begin(), in.end(), is_floating) - in.begin())];
  if (!info.differentiable || d.orders == 0) return;
  if (t != DType::f32 && t != DType::f64) {
    gradient_cases.push_back({prefix + " derivatives", kernel.op + " (derivatives)", cell, [] {
                                return Outcome{Status::skip, "derivatives are checked in f32 and f64", 0.0};
                              }});
    return;
  }
  gradient_cases.push_back({prefix + " derivatives, " + c.what, kernel.op + " (derivatives)", cell,
                            observe(kernel.op, [&ctx, c, info, t, domain] {
                              return run_derivatives(ctx, c, info, t, domain);
                            })});
}

namespace {

/// A tensor of a plugin's case as an operand (its values, its dtype).
Operand operand_from(const PluginTestTensor& t) { return operand_of(Shape(t.shape), t.values, t.dtype); }

/// The device's outputs against the outputs the plugin's case expects.
Outcome run_expected(const Context& ctx, const PluginOpCase& c, const PluginTestCase& pc) {
  std::vector<Tensor> got;
  (void)run_on_device(ctx, c, got);  // c.given: a refusal throws, and fails the row
  if (got.size() != pc.expected.size()) {
    return {Status::fail,
            pc.op + " gave " + std::to_string(got.size()) + " outputs; the case expects " +
                std::to_string(pc.expected.size()),
            0.0};
  }
  double worst = 0.0;
  for (size_t o = 0; o < got.size(); ++o) {
    const PluginTestTensor& e = pc.expected[o];
    const std::string output = "output " + std::to_string(o);
    if (got[o].dtype() != e.dtype) {
      return {Status::fail,
              output + " is " + std::string(dtype_name(got[o].dtype())) + "; the case expects " +
                  std::string(dtype_name(e.dtype)),
              0.0};
    }
    Operand want = operand_from(e);
    want.keep_dtype = true;
    const bool own = pc.rtol > 0.0 || pc.atol > 0.0;
    const Tolerance tol = own ? Tolerance{pc.atol, pc.rtol} : tolerance_for(e.dtype);
    Outcome r = compare(got[o], on_reference(want, ctx.reference), tol,
                        c.what + ", " + output + " against the case's expected " + shape_string(e.shape) +
                            (own ? " (the case's tolerance)" : ""));
    if (r.status != Status::pass) return r;
    worst = std::max(worst, r.max_error);
  }
  return {Status::pass, "against the outputs the plugin's case expects", worst};
}

}  // namespace

void add_exported_cases(const Context& ctx, const Observe& observe, std::vector<Case>& cases,
                        std::vector<Case>& gradient_cases) {
  std::vector<PluginTestCase> list;
  try {
    list = plugin_test_cases(ctx.plugin.name);
  } catch (const Error& e) {
    cases.push_back({"plugin cases", "", "", [why = std::string(e.what())] { return Outcome{Status::fail, why, 0.0}; }});
    return;
  }
  const std::vector<OpInfo> ops = runtime().ops();
  for (const PluginTestCase& pc : list) {
    // --op selects cases by their op; one that names none (malformed) is always shown.
    if (ctx.op_filter && !pc.op.empty() && !std::regex_search(pc.op, *ctx.op_filter)) continue;
    const std::string name = (pc.op.empty() ? std::string() : pc.op + " ") + "(plugin case \"" + pc.name + "\")";
    const std::string cell = pc.inputs.empty() ? "-" : std::string(dtype_name(pc.inputs[0].dtype));
    // A malformed case, or one naming no op, is the plugin's data at fault,
    // not a kernel: a general row, so no kernel is set aside for it.
    if (!pc.error.empty()) {
      cases.push_back({name, "", "", [why = pc.error] { return Outcome{Status::fail, why, 0.0}; }});
      continue;
    }
    PluginOpCase c{pc.op, {}, pc.attrs, {}, true};
    for (const PluginTestTensor& t : pc.inputs) c.inputs.push_back(operand_from(t));
    c.what = describe(c.inputs) + (pc.attrs.empty() ? "" : " with the case's attributes");
    const auto info = std::find_if(ops.begin(), ops.end(), [&](const OpInfo& o) { return o.name == pc.op; });
    if (info == ops.end()) {
      cases.push_back({name, "", "", [op = pc.op] {
                         return Outcome{Status::fail, "the case calls " + op + ", which is no op of the registry",
                                        0.0};
                       }});
      continue;
    }
    const std::string where = "the plugin's inputs";
    if (pc.expected.empty()) {
      cases.push_back({name, pc.op, cell, observe(pc.op, [&ctx, c, where] { return run_forward(ctx, c, false, where); })});
    } else {
      cases.push_back({name, pc.op, cell, observe(pc.op, [&ctx, c, pc] { return run_expected(ctx, c, pc); })});
    }
    if (!pc.derivatives) continue;
    const std::string row = pc.op + " (derivatives)";
    const auto first_float = std::find_if(pc.inputs.begin(), pc.inputs.end(),
                                          [](const PluginTestTensor& t) { return is_floating(t.dtype); });
    std::function<Outcome()> body;
    if (!info->differentiable) {
      body = [op = pc.op] {
        return Outcome{Status::fail, "the case asks for derivatives, but " + op + " has no VJP rule", 0.0};
      };
    } else if (first_float == pc.inputs.end() ||
               (first_float->dtype != DType::f32 && first_float->dtype != DType::f64)) {
      body = [] { return Outcome{Status::skip, "derivatives are checked in f32 and f64", 0.0}; };
    } else {
      body = observe(pc.op, [&ctx, c, info = *info, t = first_float->dtype, where] {
        return run_derivatives(ctx, c, info, t, where);
      });
    }
    gradient_cases.push_back({name + " derivatives", row, cell, std::move(body)});
  }
}

}  // namespace strata::cli::conformance
