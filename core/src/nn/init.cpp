// init.cpp — parameter initialisers.
#include <cmath>
#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/nn/init.hpp>
#include <strata/ops.hpp>
#include <string>

#include "util.hpp"

namespace strata::nn::init {

using detail::num;

namespace {

void check_target(const Tensor& t, const char* fn) {
  if (!t.defined()) throw ValueError(std::string(fn) + ": undefined tensor");
  if (!is_floating(t.dtype())) throw DTypeError(std::string(fn) + ": tensor must be floating, got " + type_string(t));
}

/// The dtype random numbers are drawn in for `t` (half types draw in f32).
DType draw_dtype(const Tensor& t) { return t.dtype() == DType::f64 ? DType::f64 : DType::f32; }

/// Writes `value` into `t` in place without recording.
void assign(Tensor& t, const Tensor& value) {
  NoGradGuard no_grad;
  t.detach().copy_(value);
}

int64_t fan(const Tensor& t, FanMode mode, const char* fn) {
  auto [in, out] = fan_in_and_fan_out(t);
  int64_t f = mode == FanMode::fan_in ? in : out;
  if (f == 0) throw ValueError(std::string(fn) + ": zero fan for an empty tensor " + type_string(t));
  return f;
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv:
    case Nonlinearity::sigmoid:
      return 1.0;
    case Nonlinearity::tanh:
      return 5.0 / 3.0;
    case Nonlinearity::relu:
      return std::sqrt(2.0);
    case Nonlinearity::leaky_relu:
      return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::selu:
      return 3.0 / 4.0;
  }
  return 1.0;
}

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t) {
  if (!t.defined() || t.dim() < 2) {
    throw ValueError("fan_in_and_fan_out: needs a tensor with at least 2 dims, got " + type_string(t));
  }
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

void uniform_(Tensor& t, double a, double b) {
  check_target(t, "uniform_");
  if (!(a <= b)) throw ValueError("uniform_: needs a <= b, got a=" + num(a) + ", b=" + num(b));
  NoGradGuard no_grad;
  assign(t, rand(t.sizes(), {.dtype = draw_dtype(t), .device = t.device()}) * (b - a) + a);
}

void normal_(Tensor& t, double mean, double std) {
  check_target(t, "normal_");
  if (!(std >= 0.0)) throw ValueError("normal_: std must be >= 0, got " + num(std));
  NoGradGuard no_grad;
  assign(t, randn(t.sizes(), {.dtype = draw_dtype(t), .device = t.device()}) * std + mean);
}

void constant_(Tensor& t, double value) {
  check_target(t, "constant_");
  assign(t, full(t.sizes(), value, {.dtype = t.dtype(), .device = t.device()}));
}

void zeros_(Tensor& t) { constant_(t, 0.0); }
void ones_(Tensor& t) { constant_(t, 1.0); }

void xavier_uniform_(Tensor& t, double gain) {
  check_target(t, "xavier_uniform_");
  auto [in, out] = fan_in_and_fan_out(t);
  double r = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  uniform_(t, -r, r);
}

void xavier_normal_(Tensor& t, double gain) {
  check_target(t, "xavier_normal_");
  auto [in, out] = fan_in_and_fan_out(t);
  normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)));
}

void kaiming_uniform_(Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_target(t, "kaiming_uniform_");
  double bound = std::sqrt(3.0) * calculate_gain(nonlinearity, a) /
                 std::sqrt(static_cast<double>(fan(t, mode, "kaiming_uniform_")));
  uniform_(t, -bound, bound);
}

void kaiming_normal_(Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_target(t, "kaiming_normal_");
  double std = calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(t, mode, "kaiming_normal_")));
  normal_(t, 0.0, std);
}

}  // namespace strata::nn::init
