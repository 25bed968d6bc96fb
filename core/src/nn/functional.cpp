// functional.cpp — conv2d, max_pool2d, layer_norm, dropout and the losses,
// composed from the differentiable ops of ops.hpp.
#include <limits>
#include <strata/compile.hpp>
#include <strata/error.hpp>
#include <strata/vmap.hpp>
#include <strata/nn/functional.hpp>
#include <strata/ops.hpp>
#include <string>
#include <vector>

#include "util.hpp"

namespace strata::detail {
/// 1 with probability p, else 0 (ops/random.cpp).
Tensor bernoulli_tensor(std::span<const int64_t> shape, double p, DType dtype, Device device);
}  // namespace strata::detail

namespace strata::nn::functional {

using detail::num;

namespace {

std::string pair_str(std::array<int64_t, 2> p) {
  return "(" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + ")";
}

void check_defined(const Tensor& t, const char* op, const char* what) {
  if (!t.defined()) throw ValueError(std::string(op) + ": " + what + " is an undefined tensor");
}

/// Output length of a sliding window along one dim (0 or less: does not fit).
int64_t window_count(int64_t size, int64_t kernel, int64_t stride, int64_t dilation) {
  int64_t room = size - dilation * (kernel - 1) - 1;
  return room < 0 ? 0 : room / stride + 1;  // C++ division truncates toward zero
}

/// The kh·kw strided windows of `xp` [N, C, Hp, Wp] stacked along a new dim
/// 2: [N, C, kh·kw, Ho, Wo], window (i, j) at index i·kw + j.
Tensor stacked_windows(const Tensor& xp, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                       std::array<int64_t, 2> dilation, int64_t ho, int64_t wo) {
  std::vector<Tensor> windows;
  windows.reserve(static_cast<size_t>(kernel[0] * kernel[1]));
  for (int64_t i = 0; i < kernel[0]; ++i) {
    int64_t h0 = i * dilation[0];
    Tensor rows = xp.slice(2, h0, h0 + stride[0] * (ho - 1) + 1, stride[0]);
    for (int64_t j = 0; j < kernel[1]; ++j) {
      int64_t w0 = j * dilation[1];
      windows.push_back(rows.slice(3, w0, w0 + stride[1] * (wo - 1) + 1, stride[1]));
    }
  }
  return stack(windows, 2);
}

void check_positive(std::array<int64_t, 2> v, const char* op, const char* what) {
  if (v[0] <= 0 || v[1] <= 0) throw ShapeError(std::string(op) + ": " + what + " must be positive, got " + pair_str(v));
}

Tensor reduce(const Tensor& per_element, Reduction reduction) {
  switch (reduction) {
    case Reduction::none:
      return per_element;
    case Reduction::sum:
      return sum(per_element);
    case Reduction::mean:
      return mean(per_element);
  }
  return per_element;
}

/// Checks log-probabilities/logits [N, C] against class-index targets [N].
void check_classification(const char* op, const Tensor& scores, const Tensor& targets) {
  check_defined(scores, op, "input");
  check_defined(targets, op, "targets");
  if (!is_floating(scores.dtype())) {
    throw DTypeError(std::string(op) + ": input must be floating, got " + type_string(scores));
  }
  if (scores.dim() != 2) {
    throw ShapeError(std::string(op) + ": input must be [N, C], got " + type_string(scores));
  }
  if (targets.dtype() != DType::i64) {
    throw DTypeError(std::string(op) + ": targets must be i64 class indices, got " + type_string(targets));
  }
  if (targets.dim() != 1 || targets.size(0) != scores.size(0)) {
    throw ShapeError(std::string(op) + ": targets must be [N] = [" + std::to_string(scores.size(0)) + "] for input " +
                     type_string(scores) + ", got " + type_string(targets));
  }
  // Under strata::compile (the read would be a guard on the label range,
  // read back at every replay and failing whenever the labels' minimum or
  // maximum changes) and for
  // labels batched by vmap (each lane has its own) the labels are not read
  // on the host: the gather kernel checks every index on every run
  // (docs/ops.md), naming the one out of range.
  if (targets.numel() == 0 || is_compiling() || is_batched(targets)) return;
  int64_t lo = amin(targets).item<int64_t>();
  int64_t hi = amax(targets).item<int64_t>();
  int64_t classes = scores.size(1);
  if (lo < 0 || hi >= classes) {
    throw ValueError(std::string(op) + ": target class " + std::to_string(lo < 0 ? lo : hi) + " is out of range [0, " +
                     std::to_string(classes) + ") for input " + type_string(scores));
  }
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, FusedActivation activation) {
  check_defined(x, "linear", "input");
  check_defined(weight, "linear", "weight");
  if (weight.dim() != 2) throw ShapeError("linear: weight must be [out, in], got " + type_string(weight));
  if (x.dim() < 1 || x.size(-1) != weight.size(1)) {
    throw ShapeError("linear: input " + type_string(x) + " does not fit weight " + type_string(weight) +
                     " (last input dim must equal " + std::to_string(weight.size(1)) + ")");
  }
  if (!bias.defined()) {
    Tensor y = matmul(x, weight.mT());
    return activation == FusedActivation::relu ? relu(y) : y;
  }
  if (bias.dim() != 1 || bias.size(0) != weight.size(0)) {
    throw ShapeError("linear: bias must be [" + std::to_string(weight.size(0)) + "], got " + type_string(bias));
  }
  return strata::linear(x, weight, bias, activation);
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  check_defined(x, "conv2d", "input");
  check_defined(weight, "conv2d", "weight");
  if (x.dim() == 3) return conv2d(x.unsqueeze(0), weight, bias, options).squeeze(0);
  if (x.dim() != 4) throw ShapeError("conv2d: input must be [N, C, H, W] or [C, H, W], got " + type_string(x));
  if (weight.dim() != 4) throw ShapeError("conv2d: weight must be [O, C, kh, kw], got " + type_string(weight));
  check_positive(options.stride, "conv2d", "stride");
  check_positive(options.dilation, "conv2d", "dilation");
  if (options.padding[0] < 0 || options.padding[1] < 0) {
    throw ShapeError("conv2d: padding must be >= 0, got " + pair_str(options.padding));
  }
  const int64_t n = x.size(0), c = x.size(1), o = weight.size(0);
  const std::array<int64_t, 2> kernel = {weight.size(2), weight.size(3)};
  if (weight.size(1) != c) {
    throw ShapeError("conv2d: input " + type_string(x) + " has " + std::to_string(c) + " channels but weight " +
                     type_string(weight) + " expects " + std::to_string(weight.size(1)));
  }
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != o)) {
    throw ShapeError("conv2d: bias must be [" + std::to_string(o) + "], got " + type_string(bias));
  }
  const auto [ph, pw] = options.padding;
  const int64_t ho = window_count(x.size(2) + 2 * ph, kernel[0], options.stride[0], options.dilation[0]);
  const int64_t wo = window_count(x.size(3) + 2 * pw, kernel[1], options.stride[1], options.dilation[1]);
  if (ho <= 0 || wo <= 0 || kernel[0] <= 0 || kernel[1] <= 0) {
    throw ShapeError("conv2d: kernel " + pair_str(kernel) + " with dilation " + pair_str(options.dilation) +
                     " does not fit input " + type_string(x) + " padded by " + pair_str(options.padding));
  }
  Tensor xp = (ph > 0 || pw > 0) ? pad(x, {pw, pw, ph, ph}, 0.0) : x;
  // im2col: columns [N·Ho·Wo, C·kh·kw] in the (c, i, j) order of the
  // weight's flattening, then one matmul.
  Tensor cols = stacked_windows(xp, kernel, options.stride, options.dilation, ho, wo)
                    .permute({0, 3, 4, 1, 2})
                    .reshape({n * ho * wo, c * kernel[0] * kernel[1]});
  Tensor y = matmul(cols, weight.reshape({o, c * kernel[0] * kernel[1]}).mT());
  if (bias.defined()) y = y + bias;
  return y.reshape({n, ho, wo, o}).permute({0, 3, 1, 2});
}

Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, const MaxPool2dOptions& options) {
  check_defined(x, "max_pool2d", "input");
  if (x.dim() == 3) return max_pool2d(x.unsqueeze(0), kernel, options).squeeze(0);
  if (x.dim() != 4) throw ShapeError("max_pool2d: input must be [N, C, H, W] or [C, H, W], got " + type_string(x));
  check_positive(kernel, "max_pool2d", "kernel");
  std::array<int64_t, 2> stride = options.stride;
  if (stride[0] == 0 && stride[1] == 0) stride = kernel;
  check_positive(stride, "max_pool2d", "stride");
  check_positive(options.dilation, "max_pool2d", "dilation");
  const auto [ph, pw] = options.padding;
  if (ph < 0 || pw < 0 || 2 * ph > kernel[0] || 2 * pw > kernel[1]) {
    throw ShapeError("max_pool2d: padding " + pair_str(options.padding) + " must be >= 0 and at most half the kernel " +
                     pair_str(kernel));
  }
  if ((ph > 0 || pw > 0) && !is_floating(x.dtype())) {
    throw DTypeError("max_pool2d: padding needs a floating input (padded with -inf), got " + type_string(x));
  }
  const int64_t ho = window_count(x.size(2) + 2 * ph, kernel[0], stride[0], options.dilation[0]);
  const int64_t wo = window_count(x.size(3) + 2 * pw, kernel[1], stride[1], options.dilation[1]);
  if (ho <= 0 || wo <= 0) {
    throw ShapeError("max_pool2d: kernel " + pair_str(kernel) + " does not fit input " + type_string(x) + " padded by " +
                     pair_str(options.padding));
  }
  Tensor xp = (ph > 0 || pw > 0) ? pad(x, {pw, pw, ph, ph}, -std::numeric_limits<double>::infinity()) : x;
  return amax(stacked_windows(xp, kernel, stride, options.dilation, ho, wo), {2});
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  check_defined(x, "layer_norm", "input");
  const auto k = static_cast<int64_t>(normalized_shape.size());
  if (k == 0) throw ShapeError("layer_norm: normalized_shape must not be empty");
  Shape trailing;
  if (x.dim() >= k) trailing.assign(x.shape().end() - k, x.shape().end());
  if (trailing != normalized_shape) {
    throw ShapeError("layer_norm: input " + type_string(x) + " does not end with normalized_shape " +
                     shape_string(normalized_shape));
  }
  for (const Tensor* p : {&weight, &bias}) {
    if (p->defined() && p->sizes() != normalized_shape) {
      throw ShapeError("layer_norm: weight and bias must have shape " + shape_string(normalized_shape) + ", got " +
                       type_string(*p));
    }
  }
  Shape dims;
  for (int64_t d = -k; d < 0; ++d) dims.push_back(d);
  Tensor centered = x - mean(x, dims, true);
  Tensor var = mean(square(centered), dims, true);
  Tensor y = centered * rsqrt(var + eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training) {
  check_defined(x, "dropout", "input");
  if (!(p >= 0.0 && p <= 1.0)) throw ValueError("dropout: p must be in [0, 1], got " + num(p));
  if (!training || p == 0.0) return x;
  if (!is_floating(x.dtype())) throw DTypeError("dropout: input must be floating, got " + type_string(x));
  if (p == 1.0) return x * 0.0;
  // The mask is drawn on x's device (the bernoulli primitive), in x's dtype.
  Tensor keep = strata::detail::bernoulli_tensor(x.shape(), 1.0 - p, x.dtype(), x.device());
  return x * keep * (1.0 / (1.0 - p));
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_defined(input, "mse_loss", "input");
  check_defined(target, "mse_loss", "target");
  if (input.sizes() != target.sizes()) {
    throw ShapeError("mse_loss: input " + type_string(input) + " and target " + type_string(target) +
                     " must have the same shape");
  }
  // square() of a complex difference is not |d|^2; refuse rather than return
  // a complex "loss" (docs/complex.md: mean(abs(d) * abs(d)) is the real one).
  for (const Tensor* t : {&input, &target}) {
    if (is_complex(t->dtype())) {
      throw DTypeError("mse_loss: has no complex definition, got " + type_string(*t) +
                       " (write the loss with abs(), e.g. mean(abs(input - target) * abs(input - target)))");
    }
  }
  return reduce(square(input - target), reduction);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, Reduction reduction) {
  check_classification("nll_loss", log_probs, targets);
  Tensor picked = gather(log_probs, 1, targets.unsqueeze(1)).squeeze(1);
  return reduce(-picked, reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction, double label_smoothing) {
  check_classification("cross_entropy", logits, targets);
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0)) {
    throw ValueError("cross_entropy: label_smoothing must be in [0, 1], got " + num(label_smoothing));
  }
  Tensor log_probs = log_softmax(logits, 1);
  Tensor loss = -gather(log_probs, 1, targets.unsqueeze(1)).squeeze(1);
  if (label_smoothing > 0.0) {
    // ε/C · Σ_c −log p_c = ε · mean_c(−log p_c).
    loss = loss * (1.0 - label_smoothing) - mean(log_probs, {1}) * label_smoothing;
  }
  return reduce(loss, reduction);
}

}  // namespace strata::nn::functional
