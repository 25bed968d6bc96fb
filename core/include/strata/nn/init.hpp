// nn/init.hpp — parameter initialisers (PyTorch's torch.nn.init).
//
// Each fills a floating tensor in place (without recording on any tape),
// drawing from the global generator on the tensor's own device, so
// manual_seed makes the values reproducible. Fan-based initialisers need at
// least 2 dims: fan_in = size(1)·receptive field, fan_out = size(0)·receptive
// field, receptive field = product of dims 2.. (1 for a matrix).
#pragma once

#include <cstdint>
#include <strata/tensor.hpp>
#include <utility>

namespace strata::nn::init {

/// Which fan scales a kaiming initialiser.
enum class FanMode { fan_in, fan_out };

/// Nonlinearities with a recommended gain.
enum class Nonlinearity { linear, conv, sigmoid, tanh, relu, leaky_relu, selu };

/// PyTorch's calculate_gain: 1 for linear/conv/sigmoid, 5/3 for tanh, √2 for
/// relu, √(2/(1+slope²)) for leaky_relu (slope = `param`), 3/4 for selu.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

/// (fan_in, fan_out) of a weight; ValueError for fewer than 2 dims.
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);

/// U(a, b). ValueError unless a <= b.
void uniform_(Tensor& t, double a = 0.0, double b = 1.0);
/// N(mean, std²). ValueError for std < 0.
void normal_(Tensor& t, double mean = 0.0, double std = 1.0);
/// Every element = value.
void constant_(Tensor& t, double value);
/// Every element = 0.
void zeros_(Tensor& t);
/// Every element = 1.
void ones_(Tensor& t);
/// U(−r, r), r = gain·√(6/(fan_in+fan_out)).
void xavier_uniform_(Tensor& t, double gain = 1.0);
/// N(0, s²), s = gain·√(2/(fan_in+fan_out)).
void xavier_normal_(Tensor& t, double gain = 1.0);
/// U(−r, r), r = √3·gain/√fan with gain = calculate_gain(nonlinearity, a).
void kaiming_uniform_(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                      Nonlinearity nonlinearity = Nonlinearity::leaky_relu);
/// N(0, s²), s = gain/√fan.
void kaiming_normal_(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                     Nonlinearity nonlinearity = Nonlinearity::leaky_relu);

}  // namespace strata::nn::init
