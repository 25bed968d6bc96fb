// nn/optim.hpp — optimizers: SGD (momentum, Nesterov), Adam and AdamW.
//
// An optimizer holds handles to the parameters it updates. step() reads each
// parameter's grad() (parameters without one are skipped) and writes the new
// value into the parameter's own storage (Tensor::copy_), with recording off,
// using tensor ops on the parameter's device. The optimizer's state tensors
// live on that device too. To skip a step (a GradScaler found an overflow),
// simply do not call step().
//
// state_dict() names per-parameter state "param.<i>.<buffer>" (i = position
// in the parameter list) and stores hyperparameters and counters as 0-d
// tensors ("lr", "momentum", "step", ...: f64 for reals, i64 for counts), so
// the whole state fits a checkpoint file.
#pragma once

#include <cstdint>
#include <map>
#include <strata/nn/module.hpp>
#include <strata/tensor.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::nn {

/// Base class: a parameter list, a learning rate and per-parameter state.
class Optimizer {
 public:
  /// ValueError for an empty list, an undefined or non-floating tensor, a
  /// tensor listed twice, or lr < 0.
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Updates every parameter that has a gradient.
  virtual void step() = 0;
  /// Clears the parameters' gradients (grad() becomes undefined).
  void zero_grad();

  /// The learning rate.
  double lr() const { return lr_; }
  /// Sets the learning rate (ValueError for lr < 0); schedulers call this.
  void set_lr(double lr);
  /// The parameters, in the order given.
  const std::vector<Tensor>& params() const { return params_; }
  /// How many times step() ran.
  int64_t step_count() const { return steps_; }
  /// The type's name, for messages ("Adam").
  virtual std::string name() const = 0;

  /// Hyperparameters, counters and per-parameter state (see above), as a
  /// snapshot: the state tensors are copies, which later steps (they update
  /// the state in place) do not change.
  NamedTensors state_dict() const;
  /// Checks `state` without changing anything: "lr" and the other
  /// hyperparameters present, f64 0-d tensors, valid; "step" an i64 0-d
  /// tensor >= 0; every other name of the form "param.<i>.<buffer>" with i
  /// in range and a buffer this optimizer keeps ("param.<i>.step" an i64 0-d
  /// tensor >= 0, the others shaped like parameter i and of its dtype); for
  /// each parameter, either all of its buffers or none; nothing else.
  /// Throws ValueError / ShapeError / DTypeError naming the entry (with
  /// `key_prefix` before it, e.g. "optimizer." for a file's entries), what
  /// was expected and what was found.
  void check_state_dict(const NamedTensors& state, const std::string& key_prefix = "") const;
  /// check_state_dict(), then replaces the hyperparameters and state (state
  /// tensors are copied to each parameter's device, and never shared with
  /// `state`). Parameters with no
  /// state in `state` (all of their buffers absent) start fresh.
  void load_state_dict(const NamedTensors& state);

 protected:
  /// Real hyperparameters besides "lr", by name (saved as f64 0-d tensors;
  /// flags as 0/1).
  using Hyperparameters = std::vector<std::pair<std::string, double>>;
  /// The current hyperparameters besides "lr".
  virtual Hyperparameters hyperparameters() const = 0;
  /// Validates hyperparameters (the same names, in the same order, as
  /// hyperparameters() returns); ValueError naming the bad one.
  virtual void validate(const Hyperparameters& values) const = 0;
  /// Replaces the hyperparameters with validated values.
  virtual void set_hyperparameters(const Hyperparameters& values) = 0;
  /// The names of the per-parameter state buffers this optimizer keeps.
  virtual std::vector<std::string> buffer_names() const = 0;
  /// Per-parameter state, by parameter index then buffer name (an undefined
  /// tensor: not created yet).
  Tensor& buffer(size_t param, std::string_view name);
  /// Parameter `param`'s values without its autograd state: a detached
  /// alias of its storage, made once, which the in-place update ops take
  /// (given a tensor with autograd state, a group of updates would run one
  /// by one through the recorder).
  const Tensor& values(size_t param) const { return values_[param]; }
  /// Marks one completed step().
  void count_step() { ++steps_; }
  /// How many updates parameter `param` has had (saved as
  /// "param.<i>.step", an i64 scalar, when "step" is among buffer_names()).
  int64_t& param_step(size_t param) { return param_steps_.at(param); }

 private:
  std::vector<Tensor> params_;
  std::vector<Tensor> values_;  // params_[i].detach()
  double lr_;
  int64_t steps_ = 0;
  // std::less<>: buffer() looks names up without building a std::string.
  std::vector<std::map<std::string, Tensor, std::less<>>> state_;
  std::vector<int64_t> param_steps_;
};

/// Options of SGD (PyTorch's meaning).
struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

/// Stochastic gradient descent: g ← grad + wd·p; with momentum μ,
/// b ← g (first step) or μ·b + (1−dampening)·g, then g ← b, or g + μ·b with
/// Nesterov; p ← p − lr·g. State: "param.<i>.momentum_buffer".
class SGD : public Optimizer {
 public:
  /// ValueError for negative values, or Nesterov without momentum or with
  /// dampening.
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  std::string name() const override { return "SGD"; }
  /// The options; their lr is the initial rate (lr() is the current one).
  const SGDOptions& options() const { return options_; }

 protected:
  Hyperparameters hyperparameters() const override;
  void validate(const Hyperparameters& values) const override;
  void set_hyperparameters(const Hyperparameters& values) override;
  std::vector<std::string> buffer_names() const override { return {"momentum_buffer"}; }

 private:
  SGDOptions options_;
};

/// Options of Adam and AdamW (PyTorch's defaults; AdamW's weight decay
/// default is 0.01).
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
};

/// Adam: m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g², t ← t+1,
/// p ← p − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + eps), with g = grad + wd·p (L2
/// penalty). State: "param.<i>.exp_avg", ".exp_avg_sq", ".step" (i64).
class Adam : public Optimizer {
 public:
  /// ValueError for lr < 0, betas outside [0, 1), eps < 0 or wd < 0.
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  void step() override;
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }
  /// The options; their lr is the initial rate (lr() is the current one).
  const AdamOptions& options() const { return options_; }

 protected:
  /// For AdamW.
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled_weight_decay);
  Hyperparameters hyperparameters() const override;
  void validate(const Hyperparameters& values) const override;
  void set_hyperparameters(const Hyperparameters& values) override;
  std::vector<std::string> buffer_names() const override { return {"exp_avg", "exp_avg_sq", "step"}; }

 private:
  AdamOptions options_;
  bool decoupled_;
};

/// AdamW: Adam with decoupled weight decay, p ← p·(1 − lr·wd) before the
/// Adam update (the gradient is not modified). Default weight_decay 0.01.
class AdamW : public Adam {
 public:
  /// Same checks as Adam.
  AdamW(std::vector<Tensor> params, AdamOptions options = {.weight_decay = 0.01});
};

}  // namespace strata::nn
