// layers.cpp — the layers of nn/layers.hpp.
#include <cmath>
#include <strata/error.hpp>
#include <strata/nn/init.hpp>
#include <strata/nn/layers.hpp>
#include <strata/ops.hpp>
#include <string>
#include <typeinfo>

#include "util.hpp"

namespace strata::nn {

using detail::num;

namespace {

void check_positive(int64_t v, const std::string& layer, const char* what) {
  if (v <= 0) throw ValueError(layer + ": " + what + " must be positive, got " + std::to_string(v));
}

/// PyTorch's default for Linear and Conv2d: kaiming_uniform(a=√5) for the
/// weight — uniform ±1/√fan_in — and uniform ±1/√fan_in for the bias.
void reset_like_torch(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in_and_fan_out(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias) {
  check_positive(in_features, "Linear", "in_features");
  check_positive(out_features, "Linear", "out_features");
  weight = empty({out_features, in_features});
  if (with_bias) bias = empty({out_features});
  reset_like_torch(weight, bias);
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

Tensor Linear::forward(const Tensor& x) { return functional::linear(x, weight, bias); }

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride, int64_t padding,
               bool with_bias)
    : Conv2d(in_channels, out_channels, {kernel_size, kernel_size},
             Conv2dConfig{.stride = {stride, stride}, .padding = {padding, padding}, .bias = with_bias}) {}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
               const Conv2dConfig& config)
    : options_{.stride = config.stride, .padding = config.padding, .dilation = config.dilation} {
  check_positive(in_channels, "Conv2d", "in_channels");
  check_positive(out_channels, "Conv2d", "out_channels");
  check_positive(kernel_size[0], "Conv2d", "kernel height");
  check_positive(kernel_size[1], "Conv2d", "kernel width");
  for (int k = 0; k < 2; ++k) {
    check_positive(config.stride[k], "Conv2d", "stride");
    check_positive(config.dilation[k], "Conv2d", "dilation");
    if (config.padding[k] < 0)
      throw ValueError("Conv2d: padding must be >= 0, got " + std::to_string(config.padding[k]));
  }
  weight = empty({out_channels, in_channels, kernel_size[0], kernel_size[1]});
  if (config.bias) bias = empty({out_channels});
  reset_like_torch(weight, bias);
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

Tensor Conv2d::forward(const Tensor& x) { return functional::conv2d(x, weight, bias, options_); }

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding)
    : kernel_{kernel_size, kernel_size}, options_{.stride = {stride, stride}, .padding = {padding, padding}} {
  check_positive(kernel_size, "MaxPool2d", "kernel_size");
  if (stride < 0)
    throw ValueError("MaxPool2d: stride must be >= 0 (0: the kernel size), got " + std::to_string(stride));
}

Tensor MaxPool2d::forward(const Tensor& x) { return functional::max_pool2d(x, kernel_, options_); }

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool affine)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  if (normalized_shape_.empty()) throw ValueError("LayerNorm: normalized_shape must not be empty");
  for (int64_t d : normalized_shape_) check_positive(d, "LayerNorm", "normalized_shape dims");
  if (!(eps >= 0.0)) throw ValueError("LayerNorm: eps must be >= 0, got " + num(eps));
  if (affine) {
    weight = ones(normalized_shape_);
    bias = zeros(normalized_shape_);
  }
  register_parameter("weight", &weight);
  register_parameter("bias", &bias);
}

Tensor LayerNorm::forward(const Tensor& x) { return functional::layer_norm(x, normalized_shape_, weight, bias, eps_); }

Dropout::Dropout(double p) : p_(p) {
  if (!(p >= 0.0 && p <= 1.0)) throw ValueError("Dropout: p must be in [0, 1], got " + num(p));
}

Tensor Dropout::forward(const Tensor& x) { return functional::dropout(x, p_, is_training()); }

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim) {
  check_positive(num_embeddings, "Embedding", "num_embeddings");
  check_positive(embedding_dim, "Embedding", "embedding_dim");
  weight = empty({num_embeddings, embedding_dim});
  init::normal_(weight);
  register_parameter("weight", &weight);
}

Tensor Embedding::forward(const Tensor& indices) {
  if (!indices.defined()) throw ValueError("Embedding: undefined indices");
  if (!is_integral(indices.dtype())) {
    throw DTypeError("Embedding: indices must be integers (i64), got " + type_string(indices));
  }
  Tensor flat = indices.to(DType::i64).reshape({-1});
  if (flat.numel() > 0) {
    int64_t lo = amin(flat).item<int64_t>();
    int64_t hi = amax(flat).item<int64_t>();
    if (lo < 0 || hi >= weight.size(0)) {
      throw ValueError("Embedding: index " + std::to_string(lo < 0 ? lo : hi) + " is out of range [0, " +
                       std::to_string(weight.size(0)) + ")");
    }
  }
  Shape out = indices.sizes();
  out.push_back(weight.size(1));
  return index_select(weight, 0, flat).reshape(out);
}

Flatten::Flatten(int64_t start_dim, int64_t end_dim) : start_dim_(start_dim), end_dim_(end_dim) {}

Tensor Flatten::forward(const Tensor& x) {
  if (!x.defined()) throw ValueError("Flatten: undefined input");
  const int64_t rank = x.dim();
  if (rank == 0) return x.reshape({1});
  int64_t s = start_dim_ < 0 ? start_dim_ + rank : start_dim_;
  int64_t e = end_dim_ < 0 ? end_dim_ + rank : end_dim_;
  if (s < 0 || s >= rank || e < 0 || e >= rank || s > e) {
    throw IndexError("Flatten: dims " + std::to_string(start_dim_) + ".." + std::to_string(end_dim_) +
                     " are not a valid range for input " + type_string(x));
  }
  Shape out(x.shape().begin(), x.shape().begin() + s);
  int64_t merged = 1;
  for (int64_t d = s; d <= e; ++d) merged *= x.size(d);
  out.push_back(merged);
  out.insert(out.end(), x.shape().begin() + e + 1, x.shape().end());
  return x.reshape(out);
}

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor GELU::forward(const Tensor& x) { return gelu(x); }
Tensor SiLU::forward(const Tensor& x) { return silu(x); }
Tensor Softmax::forward(const Tensor& x) { return softmax(x, dim_); }
Tensor LogSoftmax::forward(const Tensor& x) { return log_softmax(x, dim_); }

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& m : modules) push_back(m);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  if (!module) throw ValueError("Sequential::push_back: null module at index " + std::to_string(modules_.size()));
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

Module& Sequential::operator[](size_t i) const {
  if (i >= modules_.size()) {
    throw IndexError("Sequential: index " + std::to_string(i) + " out of range for " + std::to_string(modules_.size()) +
                     " modules");
  }
  return *modules_[i];
}

namespace {

/// The Linear at `i` when it and the ReLU after it can run as one fused op
/// (strata::linear with its relu): exactly these two layer types (a subclass
/// may override forward), a bias (the op needs one), and no backward hooks
/// on either (a hook on the Linear would need its pre-activation output).
/// Null otherwise.
const Linear* fusable_linear_relu(const std::vector<std::shared_ptr<Module>>& modules, size_t i) {
  if (i + 1 >= modules.size() || modules[i] == nullptr || modules[i + 1] == nullptr) return nullptr;
  const Module& a = *modules[i];
  const Module& b = *modules[i + 1];
  if (typeid(a) != typeid(Linear) || typeid(b) != typeid(ReLU)) return nullptr;
  const auto& linear = static_cast<const Linear&>(a);
  if (!linear.bias.defined() || detail::has_backward_hooks(a) || detail::has_backward_hooks(b)) return nullptr;
  return &linear;
}

Tensor linear_relu(const Linear& l, const Tensor& x) {
  return functional::linear(x, l.weight, l.bias, FusedActivation::relu);
}

std::vector<Stage> stages_of(const std::vector<std::shared_ptr<Module>>& modules) {
  std::vector<Stage> stages;
  for (size_t i = 0; i < modules.size(); ++i) {
    if (modules[i] == nullptr) throw ValueError("checkpoint_sequential: module " + std::to_string(i) + " is null");
    if (fusable_linear_relu(modules, i) != nullptr) {
      // One stage for the pair: it is one op that keeps one tensor, so it
      // is one layer to the policies (√L counts it once).
      stages.push_back([m = modules[i]](const Tensor& t) { return linear_relu(static_cast<const Linear&>(*m), t); });
      ++i;
      continue;
    }
    stages.push_back([m = modules[i]](const Tensor& t) { return (*m)(t); });
  }
  return stages;
}

}  // namespace

Tensor Sequential::forward(const Tensor& x) {
  const CheckpointPolicy* policy = CheckpointContext::current();
  if (policy != nullptr && policy->strategy != CheckpointStrategy::none && is_training()) {
    return strata::checkpoint_sequential(stages_of(modules_), x, *policy);
  }
  Tensor y = x;
  for (size_t i = 0; i < modules_.size(); ++i) {
    if (const Linear* l = fusable_linear_relu(modules_, i)) {
      y = linear_relu(*l, y);
      ++i;  // the ReLU ran inside the fused op
    } else {
      y = (*modules_[i])(y);
    }
  }
  return y;
}

Tensor checkpoint_sequential(const std::vector<std::shared_ptr<Module>>& modules, const Tensor& input,
                             int64_t segments) {
  return strata::checkpoint_sequential(stages_of(modules), input, segments);
}

Tensor checkpoint_sequential(const std::vector<std::shared_ptr<Module>>& modules, const Tensor& input,
                             const CheckpointPolicy& policy) {
  return strata::checkpoint_sequential(stages_of(modules), input, policy);
}

}  // namespace strata::nn
