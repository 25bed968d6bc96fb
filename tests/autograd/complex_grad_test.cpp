// complex_grad_test.cpp — gradients of complex ops in PyTorch's convention
// (docs/complex.md): the gradient of a real loss L with respect to z = x + iy
// is dL/dx + i·dL/dy. Every op with a complex definition is checked against
// finite differences (gradcheck perturbs the real and imaginary parts
// apart), a few to second order, the JVPs against complex finite
// differences, and plain SGD on a real loss of complex parameters against
// the trajectory that convention prescribes.
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../common/complex_values.hpp"

namespace strata_test {
namespace {

using namespace strata;

/// A real scalar that depends on every part of a tensor y: with fixed weights
/// w, sum(Re(conj(w)·y)) for a complex y (so the output gradient reaching y
/// is w, with both parts) and sum(Re(w)·y) for a real one.
Tensor real_loss(const Tensor& y, unsigned seed) {
  const CValues w = random_complex(static_cast<size_t>(y.numel()), seed, -1.0, 1.0);
  Tensor wt = ctensor(w, y.sizes(), is_complex(y.dtype()) ? y.dtype() : to_complex(y.dtype()), y.device());
  if (is_complex(y.dtype())) return sum(real(conj(wt) * y));
  return sum(real(wt) * y);
}

struct Case {
  std::string name;
  std::function<Tensor(const Tensor&)> f;  // of a c128 input (or f64, with real_input)
  Shape shape{2, 3};
  bool real_input = false;
};

/// Every op with a complex definition, its input(s) kept away from branch
/// cuts and kinks; binary ops once per differentiated operand.
std::vector<Case> cases() {
  const Tensor c = ctensor(away_from_cuts(6, 21), {2, 3});  // a second, fixed operand
  const Tensor r = from_data(std::vector<double>{0.5, -1.0, 1.5, 2.0, -0.25, 0.75}, {2, 3});
  const Tensor cond = from_data(std::vector<int64_t>{1, 0, 0, 1, 1, 0}, {2, 3}).to(boolean);
  const Tensor m = ctensor(random_complex(12, 22), {3, 4});
  return {
      {"neg", [](const Tensor& z) { return neg(z); }},
      {"exp", [](const Tensor& z) { return exp(z); }},
      {"log", [](const Tensor& z) { return log(z); }},
      {"sqrt", [](const Tensor& z) { return sqrt(z); }},
      {"reciprocal", [](const Tensor& z) { return reciprocal(z); }},
      {"conj", [](const Tensor& z) { return conj(z); }},
      {"real", [](const Tensor& z) { return real(z); }},
      {"imag", [](const Tensor& z) { return imag(z); }},
      {"abs", [](const Tensor& z) { return abs(z); }},
      {"angle", [](const Tensor& z) { return angle(z); }},
      {"add", [c](const Tensor& z) { return z + c; }},
      {"sub a", [c](const Tensor& z) { return z - c; }},
      {"sub b", [c](const Tensor& z) { return c - z; }},
      {"mul", [c](const Tensor& z) { return z * c; }},
      {"mul self", [](const Tensor& z) { return z * z; }},
      {"div a", [c](const Tensor& z) { return z / c; }},
      {"div b", [c](const Tensor& z) { return c / z; }},
      {"pow base", [c](const Tensor& z) { return pow(z, c * 0.5); }},
      {"pow exponent", [c](const Tensor& z) { return pow(c, z * 0.5); }},
      {"pow scalar", [](const Tensor& z) { return pow(z, 3.0); }},
      {"mul real", [r](const Tensor& z) { return z * r; }},
      {"where", [c, cond](const Tensor& z) { return where(cond, z, c * z); }},
      {"sum dim", [](const Tensor& z) { return sum(z, {1}); }},
      {"mean", [](const Tensor& z) { return mean(z, {0}, true); }},
      {"prod", [](const Tensor& z) { return prod(z, {1}); }},
      {"matmul a", [m](const Tensor& z) { return matmul(z, m); }},
      {"matmul b", [m](const Tensor& z) { return matmul(m.mT(), z.mT()); }},
      {"matmul transposed", [](const Tensor& z) { return matmul(z.mT(), z); }},
      {"views", [](const Tensor& z) { return z.mT().slice(0, 1, 3).reshape({4}).expand({2, 4}); }},
      {"joins", [](const Tensor& z) { return pad(cat({z, z.slice(0, 0, 1) * 2.0}, 0), {1, 1}); }},
      {"indexing", [](const Tensor& z) {
         Tensor index = from_data(std::vector<int64_t>{2, 0, 2}, {3});
         Tensor picked = index_select(z, 1, index);  // [2, 3]
         return scatter_add(picked, 0, from_data(std::vector<int64_t>{1, 0, 1}, {1, 3}), gather(z, 1, index.reshape({1, 3})));
       }},
      // Real inputs.
      {"cast from real", [](const Tensor& x) { return cast(x, c128) * ctensor({cd(1, 2)}, {}); }, {2, 3}, true},
      {"complex re", [r](const Tensor& x) { return complex(x, r); }, {2, 3}, true},
      {"complex im", [r](const Tensor& x) { return complex(r, x * x); }, {2, 3}, true},
      {"polar abs", [r](const Tensor& x) { return polar(x, r); }, {2, 3}, true},
      {"polar angle", [r](const Tensor& x) { return polar(r, x); }, {2, 3}, true},
  };
}

Tensor input_of(const Case& c, unsigned seed) {
  if (c.real_input) return from_data(std::vector<double>{0.7, -1.2, 1.9, 0.4, -0.6, 1.1}, c.shape);
  return ctensor(away_from_cuts(6, seed), c.shape);
}

TEST(ComplexGrad, EveryOpAgainstFiniteDifferences) {
  unsigned seed = 100;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Tensor x = input_of(c, seed++);
    GradcheckResult r = gradcheck([&](const Tensor& z) { return real_loss(c.f(z), 7); }, x);
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// PyTorch's convention, by hand: d|z|^2 = 2z, and for a holomorphic f the
// gradient of Re(conj(w)·f(z)) is w·conj(f'(z)).
TEST(ComplexGrad, GradientsAreThoseOfPyTorchsConvention) {
  Tensor z = ctensor({cd(1.5, -2), cd(0, 0.5)}, {2});
  EXPECT_TRUE(close(cvalues(grad([](const Tensor& x) { return sum(real(x * conj(x))); })(z)), {cd(3, -4), cd(0, 1)},
                    1e-15));
  EXPECT_TRUE(close(cvalues(grad([](const Tensor& x) { return sum(abs(x) * abs(x)); })(z)), {cd(3, -4), cd(0, 1)},
                    1e-15));
  const cd w(0.3, -0.7);
  const Tensor wt = ctensor({w}, {});
  const CValues zs = cvalues(z);
  CValues want;
  for (cd v : zs) want.push_back(w * std::conj(std::exp(v)));
  EXPECT_TRUE(close(cvalues(grad([&](const Tensor& x) { return sum(real(conj(wt) * exp(x))); })(z)), want, 1e-15));
  // abs: z/|z| (0 at 0); real: the real gradient as complex; imag: i·g.
  EXPECT_TRUE(close(cvalues(grad([](const Tensor& x) { return sum(abs(x)); })(ctensor({cd(3, 4), cd(0, 0)}, {2}))),
                    {cd(0.6, 0.8), cd(0, 0)}, 1e-15));
  EXPECT_EQ(cvalues(grad([](const Tensor& x) { return sum(imag(x) * 3.0); })(z)), (CValues{cd(0, 3), cd(0, 3)}));
  EXPECT_EQ(cvalues(grad([](const Tensor& x) { return sum(real(x) * 3.0); })(z)), (CValues{cd(3, 0), cd(3, 0)}));
  // Between complex dtypes the gradient is cast back.
  Tensor g64 = grad([&](const Tensor& v) { return sum(real(conj(cast(wt, c64)) * cast(v, c64))); })(z);
  EXPECT_EQ(g64.dtype(), c128);
  EXPECT_TRUE(close(cvalues(g64), {w, w}, 1e-7));
  // A real leaf mixed into complex arithmetic gets a real gradient: the real part.
  Tensor x = from_data(std::vector<double>{2.0}, {1});
  Tensor gx = grad([&](const Tensor& v) { return sum(real(v * ctensor({cd(1, 5)}, {1}) * ctensor({cd(0, 1)}, {1}))); })(x);
  EXPECT_EQ(gx.dtype(), f64);
  EXPECT_EQ(gx.to_vector<double>(), (std::vector<double>{-5.0}));
}

// gradcheck itself: a wrong imaginary part must be caught, and named.
TEST(ComplexGrad, GradcheckPerturbsBothParts) {
  Tensor z = ctensor({cd(1, 2), cd(-0.5, 0.25)}, {2});
  GradcheckResult ok = gradcheck([](const Tensor& x) { return sum(abs(x)); }, z);
  EXPECT_TRUE(ok.ok) << ok.message;
  // real(x) + imag(x).detach(): the gradient misses the imaginary direction.
  GradcheckResult bad = gradcheck([](const Tensor& x) { return sum(real(x) + imag(x.detach())); }, z);
  EXPECT_FALSE(bad.ok);
  EXPECT_TRUE(bad.worst_imaginary);
  EXPECT_NE(bad.message.find("(imaginary part)"), std::string::npos) << bad.message;
  EXPECT_THROW(gradcheck([](const Tensor& x) { return sum(x); }, z), DTypeError);  // not a real function
}

TEST(ComplexGrad, SecondOrderAgainstFiniteDifferences) {
  const Tensor v = ctensor(random_complex(4, 31, -1.0, 1.0), {4});
  const Tensor m = ctensor(random_complex(16, 32), {4, 4});
  const std::vector<std::pair<std::string, Fn>> functions{
      {"|w z^2|^2", [](const Tensor& z) { return sum(real(z * z * conj(z * z))); }},
      {"Re log", [](const Tensor& z) { return sum(real(log(z) * ctensor({cd(0.5, 2)}, {}))); }},
      {"abs exp", [](const Tensor& z) { return sum(abs(exp(z) * z)); }},
      {"angle", [](const Tensor& z) { return sum(angle(z) * angle(z)); }},
      {"quadratic form", [m](const Tensor& z) { return real(sum(conj(z) * matmul(m, z))); }},
      {"prod sqrt", [](const Tensor& z) { return real(prod(sqrt(z)) * ctensor({cd(1, -1)}, {})); }},
  };
  for (const auto& [name, function] : functions) {
    SCOPED_TRACE(name);
    const Tensor z = ctensor(away_from_cuts(4, 33), {4});
    // The derivative of a real function of the gradient: differentiates the rules.
    Fn through_gradient = [h = function, &v](const Tensor& x) { return sum(real(conj(v) * grad(h)(x))); };
    GradcheckResult r = gradcheck(through_gradient, z, {.eps = 1e-5, .atol = 1e-6, .rtol = 1e-4, .four_point = true});
    EXPECT_TRUE(r.ok) << r.message;
  }
}

/// (F(z + h·v) - F(z - h·v)) / 2h: the derivative of F along the complex
/// direction v, as a map of R^2n.
CValues directional(const std::function<Tensor(const Tensor&)>& f, const Tensor& z, const Tensor& v) {
  const double h = 1e-5;
  const CValues zs = cvalues(z), vs = cvalues(v);
  auto at = [&](double s) {
    CValues moved(zs.size());
    std::vector<double> real_parts(zs.size());
    for (size_t i = 0; i < zs.size(); ++i) {
      moved[i] = zs[i] + s * vs[i];
      real_parts[i] = moved[i].real();
    }
    return cvalues(f(is_complex(z.dtype()) ? ctensor(moved, z.sizes(), z.dtype()) : from_data(real_parts, z.sizes())));
  };
  // Four points: O(h^4).
  const CValues p1 = at(h), m1 = at(-h), p2 = at(2 * h), m2 = at(-2 * h);
  CValues d(p1.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = (-p2[i] + 8.0 * p1[i] - 8.0 * m1[i] + m2[i]) / (12 * h);
  return d;
}

TEST(ComplexGrad, ForwardModeAgainstFiniteDifferences) {
  unsigned seed = 200;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Tensor x = input_of(c, seed++);
    const Tensor v = c.real_input ? from_data(std::vector<double>{0.3, -0.8, 0.5, 1.0, -0.2, 0.6}, c.shape)
                                  : ctensor(random_complex(6, seed), c.shape);
    auto [y, t] = jvp(c.f, x, v);
    EXPECT_TRUE(close(cvalues(t), directional(c.f, x, v), 1e-7, 1e-7));
  }
}

// A refused op leaves the tape as it was: the gradient afterwards is that of
// the ops that ran.
TEST(ComplexGrad, ARefusedOpRecordsNothing) {
  Tensor z = ctensor({cd(3, 4)}, {1});
  GradientTape tape;
  tape.watch(z);
  Tensor m = abs(z);
  const uint64_t saved = tape.saved_bytes();
  EXPECT_THROW(relu(z), DTypeError);
  EXPECT_THROW(lt(z, m), DTypeError);
  EXPECT_EQ(tape.saved_bytes(), saved);
  Tensor y = sum(m);
  EXPECT_TRUE(close(cvalues(tape.gradient(y, {z})[0]), {cd(0.6, 0.8)}, 1e-15));
}

// Activation checkpointing recomputes complex ops and gives the same gradient.
TEST(ComplexGrad, CheckpointedComplexOpsGiveTheSameGradient) {
  const std::function<Tensor(const Tensor&)> block = [](const Tensor& z) {
    return exp(z) * conj(z) + sum(matmul(z, z.mT()), {1}, true);
  };
  auto loss = [&](const Tensor& z, bool recompute) {
    Tensor h = recompute ? checkpoint(block, z) : block(z);
    return sum(real(h * conj(h)));
  };
  const Tensor z0 = ctensor(random_complex(6, 51, -1.0, 1.0), {3, 2});
  const CValues plain = cvalues(grad([&](const Tensor& z) { return loss(z, false); })(z0));
  const CValues checkpointed = cvalues(grad([&](const Tensor& z) { return loss(z, true); })(z0));
  EXPECT_EQ(checkpointed, plain);
}

// ---- training: plain SGD on a real loss of complex parameters --------------------------------

/// The fit of a complex scalar z to t ≈ z·w in least squares:
/// L(z) = Σ|z·w_k - t_k|², whose gradient in PyTorch's convention is
/// 2·Σ conj(w_k)·(z·w_k - t_k), and whose minimiser is Σ conj(w)·t / Σ|w|².
TEST(ComplexGrad, SgdOnARealLossOfAComplexParameterConvergesAsInPyTorch) {
  const CValues w{cd(1, 0.5), cd(-0.5, 1), cd(0.25, -0.75)};
  const CValues t{cd(2, 1), cd(0, -1), cd(1, 1)};
  const Tensor wt = ctensor(w, {3}), tt = ctensor(t, {3});
  auto loss_of = [&](const Tensor& z) {
    Tensor d = z * wt - tt;
    return sum(real(d * conj(d)));
  };
  const double lr = 0.1;
  // The trajectory by hand.
  cd expected = cd(0, 0);
  auto step_by_hand = [&](cd z) {
    cd g = 0;
    for (size_t k = 0; k < w.size(); ++k) g += 2.0 * std::conj(w[k]) * (z * w[k] - t[k]);
    return z - lr * g;
  };
  Tensor z = zeros({}, {.dtype = c128});
  z.set_requires_grad(true);
  nn::SGD optimizer({z}, {.lr = lr});
  for (int step = 0; step < 200; ++step) {
    optimizer.zero_grad();
    loss_of(z).backward();
    optimizer.step();
    expected = step_by_hand(expected);
    if (step < 5) {
      EXPECT_TRUE(close({z.detach().item<cd>()}, {expected}, 1e-14)) << "step " << step;
    }
  }
  cd num = 0, den = 0;
  for (size_t k = 0; k < w.size(); ++k) num += std::conj(w[k]) * t[k], den += std::norm(w[k]);
  EXPECT_TRUE(close({z.detach().item<cd>()}, {num / den}, 1e-10));
  // The same in c64 with the plain update z ← z − lr·grad written out.
  Tensor z64 = zeros({}, {.dtype = c64});
  const Tensor w64 = cast(wt, c64), t64 = cast(tt, c64);
  for (int step = 0; step < 200; ++step) {
    Tensor g = grad([&](const Tensor& x) {
      Tensor d = x * w64 - t64;
      return sum(abs(d) * abs(d));
    })(z64);
    z64 = z64 - g * lr;
  }
  EXPECT_TRUE(close({z64.item<cd>()}, {num / den}, 1e-5));
}

/// A complex linear least-squares problem: X W ≈ T for W [3, 2], trained by
/// SGD with momentum on mean(|X W - T|²) from W = 0; T was made from a known W.
TEST(ComplexGrad, SgdWithMomentumSolvesComplexLeastSquares) {
  const Tensor x = ctensor(random_complex(8 * 3, 41, -1.0, 1.0), {8, 3});
  const Tensor w_true = ctensor(random_complex(6, 42), {3, 2});
  const Tensor target = matmul(x, w_true);
  Tensor w = zeros({3, 2}, {.dtype = c128});
  w.set_requires_grad(true);
  nn::SGD optimizer({w}, {.lr = 0.2, .momentum = 0.9});
  double first = 0, last = 0;
  for (int step = 0; step < 400; ++step) {
    optimizer.zero_grad();
    Tensor d = matmul(x, w) - target;
    Tensor loss = mean(real(d * conj(d)));
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    loss.backward();
    optimizer.step();
  }
  EXPECT_LT(last, 1e-12 * first);
  EXPECT_TRUE(close(cvalues(w.detach()), cvalues(w_true), 1e-6, 1e-6));
}

}  // namespace
}  // namespace strata_test
