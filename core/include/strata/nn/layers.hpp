// nn/layers.hpp — the layers of the training toolkit: Linear, Conv2d,
// MaxPool2d, LayerNorm, Dropout, Embedding, Flatten, activations and the
// Sequential container. Parameters are created on the runtime's default
// device in f32 (use Module::to to move or convert them) and initialised as
// PyTorch does, from the global generator (manual_seed makes them
// reproducible).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <strata/checkpoint.hpp>
#include <strata/nn/functional.hpp>
#include <strata/nn/module.hpp>
#include <string>

namespace strata::nn {

/// y = x·Wᵀ + b with W [out, in], b [out]. Init: kaiming_uniform(a=√5) for W
/// (uniform ±1/√in), uniform ±1/√in for b.
class Linear : public Module {
 public:
  /// ValueError unless both features are positive.
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Linear"; }

  Tensor weight;  ///< [out_features, in_features]
  Tensor bias;    ///< [out_features]; undefined without bias
};

/// Options of the Conv2d layer, (height, width) pairs.
struct Conv2dConfig {
  std::array<int64_t, 2> stride = {1, 1};
  std::array<int64_t, 2> padding = {0, 0};
  std::array<int64_t, 2> dilation = {1, 1};
  bool bias = true;
};

/// 2-D convolution over NCHW input (see functional::conv2d). Init as
/// PyTorch: kaiming_uniform(a=√5) for the weight, uniform ±1/√fan_in for the
/// bias, fan_in = in_channels·kh·kw.
class Conv2d : public Module {
 public:
  /// Square kernel.
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1, int64_t padding = 0,
         bool bias = true);
  /// Rectangular kernel and full options.
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size, const Conv2dConfig& config);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }

  Tensor weight;  ///< [out_channels, in_channels, kh, kw]
  Tensor bias;    ///< [out_channels]; undefined without bias

 private:
  functional::Conv2dOptions options_;
};

/// Max pooling over NCHW input (see functional::max_pool2d).
class MaxPool2d : public Module {
 public:
  /// Square window; stride 0 means stride = kernel_size.
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MaxPool2d"; }

 private:
  std::array<int64_t, 2> kernel_;
  functional::MaxPool2dOptions options_;
};

/// Layer normalisation over the trailing `normalized_shape` dims, with a
/// learnable elementwise weight (ones) and bias (zeros) when `affine`.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LayerNorm"; }

  Tensor weight;  ///< normalized_shape; undefined unless affine
  Tensor bias;    ///< normalized_shape; undefined unless affine

 private:
  Shape normalized_shape_;
  double eps_;
};

/// Dropout with probability p in training mode; identity in eval mode.
class Dropout : public Module {
 public:
  /// ValueError unless 0 <= p <= 1.
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Dropout"; }

 private:
  double p_;
};

/// A lookup table: i64 indices of any shape → their rows of `weight`
/// (shape indices.shape + [embedding_dim]). Init: standard normal.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  /// DTypeError for non-integer indices; ValueError for an index out of
  /// [0, num_embeddings).
  Tensor forward(const Tensor& indices) override;
  std::string name() const override { return "Embedding"; }

  Tensor weight;  ///< [num_embeddings, embedding_dim]
};

/// Flattens dims start_dim..end_dim into one (default: all but the batch).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Flatten"; }

 private:
  int64_t start_dim_;
  int64_t end_dim_;
};

/// max(x, 0).
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ReLU"; }
};

/// tanh(x).
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Tanh"; }
};

/// 1 / (1 + exp(-x)).
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sigmoid"; }
};

/// The exact (erf) GELU.
class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GELU"; }
};

/// x · sigmoid(x).
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "SiLU"; }
};

/// softmax along `dim`.
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim_(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Softmax"; }

 private:
  int64_t dim_;
};

/// log_softmax along `dim`.
class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim_(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LogSoftmax"; }

 private:
  int64_t dim_;
};

/// Runs its children in order; child i is named "i".
class Sequential : public Module {
 public:
  Sequential() = default;
  /// Sequential{std::make_shared<Linear>(2, 8), std::make_shared<ReLU>()}.
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  /// Appends a module (ValueError for a null pointer).
  void push_back(std::shared_ptr<Module> module);
  /// Constructs a module in place and appends it; returns it.
  template <typename M, typename... Args>
  std::shared_ptr<M> emplace_back(Args&&... args) {
    auto m = std::make_shared<M>(std::forward<Args>(args)...);
    push_back(m);
    return m;
  }
  /// Child i (IndexError when out of range).
  Module& operator[](size_t i) const;
  size_t size() const { return modules_.size(); }
  /// The children in order.
  const std::vector<std::shared_ptr<Module>>& modules() const { return modules_; }
  /// Runs the children in order; in training mode inside a
  /// CheckpointContext, checkpointed by its policy.
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

/// Runs `modules` in order on `input` in `segments` checkpointed segments
/// (all but the last; see strata::checkpoint_sequential). A Linear followed
/// by a ReLU runs as one fused op and is one stage (layer) of the split, as
/// in Sequential. ValueError for a null module or segments < 1.
Tensor checkpoint_sequential(const std::vector<std::shared_ptr<Module>>& modules, const Tensor& input,
                             int64_t segments);
/// The same, split and checkpointed by `policy`.
Tensor checkpoint_sequential(const std::vector<std::shared_ptr<Module>>& modules, const Tensor& input,
                             const CheckpointPolicy& policy);

}  // namespace strata::nn
