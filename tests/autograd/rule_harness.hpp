// rule_harness.hpp — calling derivative rules directly (no autograd engine)
// and checking them against central finite differences, in f64 on the
// default device.
//
// An op is run through dispatch_call, which applies its shape rule, so the
// GradContext a rule sees holds exactly the prepared inputs an engine would
// hand it. Inputs are built at the output shape, so preparing changes nothing
// and perturbing an input perturbs what the op computes on.
#pragma once

#include "runtime/dispatch/op.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>
#include <strata/strata.hpp>
#include <string>
#include <vector>

namespace rules_test {

namespace s = strata;
namespace d = strata::detail;
using s::Shape;
using s::Tensor;
using Tensors = std::vector<Tensor>;
using Rng = std::mt19937;

inline constexpr double kEps = 1e-6;   // finite-difference step
inline constexpr double kTol = 1e-6;   // |analytic - numeric| <= kTol * (1 + |numeric|)

// --- tensors from and to the host --------------------------------------------

inline std::vector<double> host(const Tensor& t) { return t.to_vector<double>(); }
inline Tensor f64(const std::vector<double>& values, const Shape& shape) { return s::from_data(values, shape); }
inline int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t v : shape) n *= v;
  return n;
}
inline Tensor uniform(Rng& rng, const Shape& shape, double lo = -2.0, double hi = 2.0) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<size_t>(numel(shape)));
  for (double& x : v) x = u(rng);
  return f64(v, shape);
}
/// |x| in [lo, hi] with a random sign: away from the kink at 0 (abs, relu).
inline Tensor nonzero(Rng& rng, const Shape& shape, double lo = 0.2, double hi = 2.0) {
  std::vector<double> v = host(uniform(rng, shape, lo, hi));
  std::bernoulli_distribution flip(0.5);
  for (double& x : v) x = flip(rng) ? -x : x;
  return f64(v, shape);
}
/// Away from integers and half-integers (floor, ceil, round are flat there).
inline Tensor off_grid(Rng& rng, const Shape& shape) {
  std::vector<double> v = host(uniform(rng, shape, 0.1, 0.4));
  std::uniform_int_distribution<int> whole(-3, 2);
  std::bernoulli_distribution upper(0.5);
  for (double& x : v) x += whole(rng) + (upper(rng) ? 0.5 : 0.0);
  return f64(v, shape);
}
inline Tensor indices(Rng& rng, const Shape& shape, int64_t below) {
  std::uniform_int_distribution<int64_t> u(0, below - 1);
  std::vector<int64_t> v(static_cast<size_t>(numel(shape)));
  for (int64_t& x : v) x = u(rng);
  return s::from_data(v, shape);
}
inline Tensor coin(Rng& rng, const Shape& shape) {
  std::vector<double> v = host(uniform(rng, shape, 0.0, 1.0));
  for (double& x : v) x = x < 0.5 ? 0.0 : 1.0;
  return s::cast(f64(v, shape), s::boolean);
}

inline double dot(const Tensor& a, const Tensor& b) {
  std::vector<double> x = host(a), y = host(b);
  EXPECT_EQ(x.size(), y.size());
  double acc = 0.0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) acc += x[i] * y[i];
  return acc;
}
/// sum_k <a_k, b_k>, skipping pairs with an undefined side (a zero).
inline double dot(const Tensors& a, const Tensors& b) {
  double acc = 0.0;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    if (a[k].defined() && b[k].defined()) acc += dot(a[k], b[k]);
  }
  return acc;
}
/// `t` with element i moved by delta.
inline Tensor nudged(const Tensor& t, int64_t i, double delta) {
  std::vector<double> v = host(t);
  v[static_cast<size_t>(i)] += delta;
  return f64(v, t.sizes());
}
/// x + scale * t (t undefined: x).
inline Tensor along(const Tensor& x, const Tensor& t, double scale) {
  if (!t.defined()) return x;
  std::vector<double> v = host(x), dv = host(t);
  for (size_t i = 0; i < v.size(); ++i) v[i] += scale * dv[i];
  return f64(v, x.sizes());
}

inline bool close(double analytic, double numeric, double tol = kTol) {
  return std::fabs(analytic - numeric) <= tol * (1.0 + std::fabs(numeric));
}
/// Elementwise closeness, reporting the first few mismatches.
inline void expect_close(const Tensor& analytic, const std::vector<double>& numeric, const std::string& what,
                         double tol = kTol) {
  ASSERT_TRUE(analytic.defined()) << what << ": undefined";
  std::vector<double> a = host(analytic);
  ASSERT_EQ(a.size(), numeric.size()) << what << ": shape " << d::shape_string(analytic.shape());
  int shown = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!close(a[i], numeric[i], tol) && shown++ < 4) {
      ADD_FAILURE() << what << " [" << i << "]: rule " << a[i] << ", finite differences " << numeric[i];
    }
  }
}

// --- running an op and its rules ------------------------------------------------

/// One call of an op: inputs as prepared, outputs.
struct Evaluated {
  Tensors inputs;
  Tensors outputs;
};

inline const d::OpDef& op_named(const std::string& name) {
  const d::OpDef* op = d::find_op(name);
  if (op == nullptr) throw std::runtime_error("no op named " + name);
  return *op;
}

inline Evaluated run(const d::OpDef& op, const Tensors& inputs, const d::Attrs* attrs) {
  d::OpCall call;
  call.op = &op;
  call.attrs = attrs;
  call.n_outputs = op.n_outputs;
  call.n_inputs = static_cast<int>(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) call.inputs[k] = inputs[k];
  call.device = inputs.at(0).device();
  d::OpResult out = d::dispatch_call(call);
  return {Tensors(call.inputs.begin(), call.inputs.begin() + call.n_inputs), out.to_vector()};
}

/// Calls a rule as the engine would: `grads` are output gradients (VJP) or
/// input tangents (JVP).
inline Tensors apply(d::DerivativeRule rule, const Evaluated& e, const Tensors& grads, const d::Attrs* attrs) {
  d::GradContext c{.inputs = e.inputs, .outputs = e.outputs, .grads = grads, .attrs = attrs};
  return rule(c);
}

/// One test point of an op: its inputs (at the output shape) and attributes.
/// f64 inputs are differentiated; the others (indices, conditions) are not.
struct Case {
  std::string op;
  Tensors inputs;
  d::Attrs attrs;
  std::string label;

  bool differentiable(size_t k) const { return inputs[k].dtype() == s::f64; }
  const d::Attrs* attr_ptr() const { return attrs.empty() ? nullptr : &attrs; }
};

inline std::string describe(const Case& c) {
  std::ostringstream os;
  os << c.op << "(";
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    os << (k > 0 ? ", " : "") << s::dtype_name(c.inputs[k].dtype()) << d::shape_string(c.inputs[k].shape());
  }
  os << ")" << (c.label.empty() ? "" : " " + c.label);
  return os.str();
}

/// The scalar <v, f(inputs)>.
inline double pairing(const Case& c, const Tensors& inputs, const Tensors& v) {
  return dot(v, run(op_named(c.op), inputs, c.attr_ptr()).outputs);
}

/// Numeric gradient of <v, f> in input k, one central difference per element.
inline std::vector<double> numeric_gradient(const Case& c, const Tensors& v, size_t k) {
  std::vector<double> g(static_cast<size_t>(c.inputs[k].numel()));
  Tensors plus = c.inputs, minus = c.inputs;
  for (int64_t i = 0; i < c.inputs[k].numel(); ++i) {
    plus[k] = nudged(c.inputs[k], i, kEps);
    minus[k] = nudged(c.inputs[k], i, -kEps);
    g[static_cast<size_t>(i)] = (pairing(c, plus, v) - pairing(c, minus, v)) / (2 * kEps);
  }
  return g;
}

/// Numeric directional derivative of output j along the tangents.
inline std::vector<double> numeric_tangent(const Case& c, const Tensors& tangents, size_t j) {
  Tensors plus, minus;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    plus.push_back(along(c.inputs[k], tangents[k], kEps));
    minus.push_back(along(c.inputs[k], tangents[k], -kEps));
  }
  std::vector<double> hi = host(run(op_named(c.op), plus, c.attr_ptr()).outputs[j]);
  std::vector<double> lo = host(run(op_named(c.op), minus, c.attr_ptr()).outputs[j]);
  for (size_t i = 0; i < hi.size(); ++i) hi[i] = (hi[i] - lo[i]) / (2 * kEps);
  return hi;
}

/// Random f64 tensors like `like` (cotangents of the outputs, tangents of
/// the differentiable inputs); undefined where `keep` says no.
inline Tensors random_like(Rng& rng, const Tensors& like, const std::vector<bool>& keep) {
  Tensors out;
  for (size_t k = 0; k < like.size(); ++k) out.push_back(keep[k] ? uniform(rng, like[k].sizes(), -1.0, 1.0) : Tensor());
  return out;
}

/// The first-order checks of an op at one point: VJP against numeric
/// gradients, JVP against numeric directional derivatives (all tangents,
/// then each alone), the adjoint identity, and zero in, zero out.
inline void check_first_order(const Case& c, Rng& rng) {
  SCOPED_TRACE(describe(c));
  const d::OpDef& op = op_named(c.op);
  ASSERT_NE(op.derivative.vjp, nullptr);
  ASSERT_NE(op.derivative.jvp, nullptr);
  Evaluated e = run(op, c.inputs, c.attr_ptr());
  size_t n_in = c.inputs.size();
  std::vector<bool> diff(n_in), outs(e.outputs.size(), true);
  for (size_t k = 0; k < n_in; ++k) diff[k] = c.differentiable(k);

  // Reverse mode.
  Tensors v = random_like(rng, e.outputs, outs);
  Tensors grads = apply(op.derivative.vjp, e, v, c.attr_ptr());
  ASSERT_EQ(grads.size(), n_in);
  for (size_t k = 0; k < n_in; ++k) {
    if (!diff[k]) {
      EXPECT_FALSE(grads[k].defined()) << "gradient of non-differentiable input " << k;
      continue;
    }
    ASSERT_TRUE(grads[k].defined()) << "input " << k;
    EXPECT_EQ(grads[k].sizes(), c.inputs[k].sizes()) << "input " << k;
    EXPECT_EQ(grads[k].dtype(), s::f64) << "input " << k;
    expect_close(grads[k], numeric_gradient(c, v, k), "VJP input " + std::to_string(k));
  }

  // Forward mode: every tangent, then one input at a time.
  Tensors t = random_like(rng, c.inputs, diff);
  Tensors tangent = apply(op.derivative.jvp, e, t, c.attr_ptr());
  ASSERT_EQ(tangent.size(), e.outputs.size());
  for (size_t j = 0; j < tangent.size(); ++j) {
    expect_close(tangent[j], numeric_tangent(c, t, j), "JVP output " + std::to_string(j));
    if (tangent[j].defined()) {
      EXPECT_EQ(tangent[j].sizes(), e.outputs[j].sizes());
    }
  }
  for (size_t k = 0; k < n_in; ++k) {
    if (!diff[k] || n_in == 1) continue;
    Tensors only(n_in);
    only[k] = t[k];
    Tensors partial = apply(op.derivative.jvp, e, only, c.attr_ptr());
    for (size_t j = 0; j < partial.size(); ++j) {
      std::vector<double> numeric = numeric_tangent(c, only, j);
      if (!partial[j].defined()) {  // allowed only when the partial is zero
        for (double x : numeric) EXPECT_NEAR(x, 0.0, kTol) << "JVP of input " << k << " alone is undefined";
      } else {
        expect_close(partial[j], numeric, "JVP of input " + std::to_string(k) + " alone");
      }
    }
  }

  // <v, J t> == <J^T v, t>.
  double lhs = dot(v, tangent);
  double rhs = dot(grads, t);
  EXPECT_TRUE(close(lhs, rhs, 1e-10)) << "adjoint identity: <v, JVP(t)> = " << lhs << ", <VJP(v), t> = " << rhs;

  // Zero (undefined) in gives zero out.
  for (const Tensor& g : apply(op.derivative.vjp, e, Tensors(e.outputs.size()), c.attr_ptr())) {
    if (g.defined()) {
      EXPECT_EQ(s::amax(s::abs(g)).item<double>(), 0.0);
    }
  }
  for (const Tensor& g : apply(op.derivative.jvp, e, Tensors(n_in), c.attr_ptr())) EXPECT_FALSE(g.defined());
}

}  // namespace rules_test
