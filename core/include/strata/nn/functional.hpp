// nn/functional.hpp — stateless building blocks of the training toolkit:
// convolution, pooling, normalisation, dropout and the losses, written with
// the differentiable ops of ops.hpp (so every backend runs them and autograd
// differentiates them to any order).
#pragma once

#include <array>
#include <cstdint>
#include <strata/ops.hpp>
#include <strata/tensor.hpp>

namespace strata::nn {

/// How a loss combines its per-element values.
enum class Reduction { none, mean, sum };

namespace functional {

/// activation(x · weightᵀ + bias): x [..., in], weight [out, in], bias [out]
/// (optional). With a bias this is the op strata::linear (one fused pass on
/// backends that fuse it); without one, a matmul.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              FusedActivation activation = FusedActivation::none);

/// Parameters of conv2d: (height, width) pairs.
struct Conv2dOptions {
  std::array<int64_t, 2> stride = {1, 1};
  std::array<int64_t, 2> padding = {0, 0};  // zeros on both sides
  std::array<int64_t, 2> dilation = {1, 1};
};

/// 2-D cross-correlation (PyTorch's conv2d): x [N, C, H, W], weight
/// [O, C, kh, kw], bias [O] (optional) → [N, O, Ho, Wo] with
/// Ho = (H + 2·pad_h − dil_h·(kh − 1) − 1) / stride_h + 1. Built as im2col:
/// the kh·kw strided slices of the zero-padded input are stacked and
/// multiplied with the weight in one matmul. ShapeError for mismatched
/// channels, a kernel larger than the padded input, or non-positive
/// stride/dilation and negative padding.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& options = {});

/// Parameters of max_pool2d: (height, width) pairs; stride {0, 0} means
/// "equal to the kernel".
struct MaxPool2dOptions {
  std::array<int64_t, 2> stride = {0, 0};
  std::array<int64_t, 2> padding = {0, 0};  // -inf on both sides
  std::array<int64_t, 2> dilation = {1, 1};
};

/// Max over kh×kw windows of x [N, C, H, W] (or [C, H, W]) → [N, C, Ho, Wo].
/// Padding must be at most half the kernel (PyTorch's rule). Ties split the
/// gradient evenly between the tied elements (amax's rule), where PyTorch
/// gives it all to one of them.
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, const MaxPool2dOptions& options = {});

/// Normalises over the trailing dims `normalized_shape` (biased variance)
/// and applies weight/bias when defined (both shaped normalized_shape).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

/// Zeroes each element with probability p and scales the rest by 1/(1−p),
/// drawing from the global generator (strata::rand); identity when not
/// `training` or p == 0. ValueError unless 0 <= p <= 1.
Tensor dropout(const Tensor& x, double p, bool training = true);

/// Mean squared error; `input` and `target` must have the same shape.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);

/// Negative log-likelihood of `targets` (i64 [N], class indices in [0, C))
/// under `log_probs` [N, C]. mean averages over N.
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, Reduction reduction = Reduction::mean);

/// Cross entropy of `logits` [N, C] against class indices `targets` (i64
/// [N]): nll_loss(log_softmax(logits, 1), targets). With label_smoothing ε,
/// the target distribution is (1 − ε)·onehot + ε/C (PyTorch's definition).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction = Reduction::mean,
                     double label_smoothing = 0.0);

}  // namespace functional
}  // namespace strata::nn
