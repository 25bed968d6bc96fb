// example_second_order — Newton-CG on L2-regularised multinomial logistic
// regression over the UCI digits: each Newton step solves H·d = -g with
// conjugate gradients, using only Hessian-vector products (forward over
// reverse; the Hessian is never formed). Prints its convergence next to
// plain gradient descent, iteration by iteration.
#include "digits_data.hpp"

#include <CLI/CLI.hpp>
#include <strata/strata.hpp>

#include <cmath>
#include <cstdio>

namespace {

using namespace strata;

double dot(const Tensor& a, const Tensor& b) { return sum(a * b).item<double>(); }

/// Solves H d = -g approximately by conjugate gradients with HVPs.
Tensor newton_direction(const Fn& loss, const Tensor& w, const Tensor& g, int max_iters, double tol,
                        int* hvps) {
  Tensor d = zeros_like(w);
  Tensor r = neg(g);
  Tensor p = r;
  double rr = dot(r, r);
  double stop = tol * tol * rr;
  for (int k = 0; k < max_iters && rr > stop; ++k) {
    Tensor hp = hvp(loss, w, p).detach();
    ++*hvps;
    double alpha = rr / dot(p, hp);
    d = d + alpha * p;
    r = r - alpha * hp;
    double rr_next = dot(r, r);
    p = r + (rr_next / rr) * p;
    rr = rr_next;
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Newton-CG with Hessian-vector products vs gradient descent on the digits"};
  int iterations = 10;
  double l2 = 1e-3;
  double gd_lr = 1.0;
  std::string config;
  std::string data;
  app.add_option("--iterations", iterations, "outer iterations of each method")->check(CLI::PositiveNumber);
  app.add_option("--l2", l2, "L2 regularisation")->check(CLI::NonNegativeNumber);
  app.add_option("--gd-lr", gd_lr, "gradient descent step size")->check(CLI::PositiveNumber);
  app.add_option("--config", config, "configuration file");
  app.add_option("--data", data, "path of digits.csv.gz");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!config.empty()) runtime().load_config(config);
    Device device = runtime().default_device();
    digits::Dataset ds = digits::load(digits::data_file(data), device);
    Tensor x = cast(pad(ds.train.x, {0, 1}, 1.0), DType::f64);  // bias column
    Tensor xt = cast(pad(ds.test.x, {0, 1}, 1.0), DType::f64);
    Fn loss = [&](const Tensor& w) {
      Tensor logits = matmul(x, w.reshape({65, 10}));
      return nn::functional::cross_entropy(logits, ds.train.y) + (0.5 * l2) * sum(w * w);
    };
    auto test_acc = [&](const Tensor& w) {
      Tensor pred = argmax(matmul(xt, w.reshape({65, 10})), 1);
      return mean(cast(eq(pred, ds.test.y), DType::f64)).item<double>();
    };
    auto value_grad = value_and_grad(loss);
    Tensor w_newton = zeros({650}, {.dtype = DType::f64, .device = device});
    Tensor w_gd = w_newton;
    std::printf("device %s; %lld training images; loss = cross entropy + %.0e/2 |w|^2\n", device.str().c_str(),
                static_cast<long long>(x.size(0)), l2);
    std::printf("%4s  %14s %8s %6s  %14s %8s\n", "iter", "newton-cg loss", "test acc", "hvps", "grad-desc loss",
                "test acc");
    int hvps = 0;
    double newton_loss = 0, gd_loss = 0;
    for (int it = 1; it <= iterations; ++it) {
      auto [ln, gn] = value_grad(w_newton);
      Tensor d = newton_direction(loss, w_newton, gn.detach(), 20, 1e-3, &hvps);
      // Backtracking line search on the Newton direction.
      double step = 1.0;
      double slope = dot(gn, d);
      double l0 = ln.item<double>();
      while (step > 1e-4 && loss(w_newton + step * d).item<double>() > l0 + 1e-4 * step * slope) step *= 0.5;
      w_newton = (w_newton + step * d).detach();
      auto [lg, gg] = value_grad(w_gd);
      w_gd = (w_gd - gd_lr * gg).detach();
      newton_loss = loss(w_newton).item<double>();
      gd_loss = loss(w_gd).item<double>();
      std::printf("%4d  %14.6f %8.3f %6d  %14.6f %8.3f\n", it, newton_loss, test_acc(w_newton), hvps, gd_loss,
                  test_acc(w_gd));
    }
    std::printf("final: newton-cg loss %.6f (test accuracy %.3f) vs gradient descent %.6f (%.3f)\n", newton_loss,
                test_acc(w_newton), gd_loss, test_acc(w_gd));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_second_order: %s\n", e.what());
    return 1;
  }
}
