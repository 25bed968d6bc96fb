// nn/module.hpp — the Module base class of the training toolkit.
//
// A Module owns named parameters (leaf tensors with requires_grad), named
// buffers (state that is saved but not trained) and named child modules, and
// maps one input tensor to one output tensor with forward(). Names nest with
// dots: a Sequential holding a Linear at index 0 names its weight
// "0.weight", as PyTorch does, so state dicts read the same.
//
// Modules register their tensor members by address (register_parameter
// takes a Tensor*), so that to(Device) and load_state_dict update the very
// members forward() reads. Modules are therefore neither copyable nor
// movable; hold them by value in place or through std::shared_ptr.
#pragma once

#include <functional>
#include <memory>
#include <strata/device.hpp>
#include <strata/dtype.hpp>
#include <strata/tensor.hpp>
#include <string>
#include <utility>
#include <vector>

namespace strata::nn {

/// Named tensors in a fixed order: what state_dict() returns and
/// load_state_dict() reads (and what checkpoint files hold).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// Base class of every layer and model.
class Module {
 public:
  Module() = default;
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = delete;
  Module& operator=(Module&&) = delete;

  /// The computation of this module.
  virtual Tensor forward(const Tensor& input) = 0;
  /// Calls forward(), then attaches the layer's backward hooks (see
  /// nn/hooks.hpp) to the output. Call layers this way rather than through
  /// forward() so hooks see them.
  Tensor operator()(const Tensor& input);

  /// The type's name, for messages ("Linear").
  virtual std::string name() const { return "Module"; }

  /// Every parameter of this module and its descendants, in registration
  /// order (depth first), each once.
  std::vector<Tensor> parameters() const;
  /// The same with dotted names ("layers.0.weight").
  NamedTensors named_parameters() const;
  /// Every buffer of this module and its descendants, with dotted names.
  NamedTensors named_buffers() const;
  /// Direct children with their names.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  /// Direct children.
  std::vector<std::shared_ptr<Module>> children() const;

  /// Sets training mode on this module and its descendants (affects Dropout).
  void train(bool on = true);
  /// Same as train(false).
  void eval() { train(false); }
  /// Whether this module is in training mode (the default).
  bool is_training() const { return training_; }

  /// Moves every parameter and buffer to `device`. Parameters stay leaves
  /// with requires_grad; their gradients are dropped (they belonged to the
  /// old tensors). Returns *this.
  Module& to(Device device);
  /// Converts every floating parameter and buffer to `dtype` (same rules).
  Module& to(DType dtype);

  /// Clears the gradient of every parameter (grad() becomes undefined).
  void zero_grad();

  /// Parameters then buffers, with dotted names, as detached tensors that
  /// share storage with the module's own.
  NamedTensors state_dict() const;
  /// Checks `state` against this module without changing anything: every
  /// name present exactly once, none unexpected, shapes and dtypes equal.
  /// Throws ValueError (missing, unexpected or duplicate names), ShapeError or
  /// DTypeError naming the parameter and both shapes or dtypes.
  void check_state_dict(const NamedTensors& state) const;
  /// check_state_dict(), then copies the values into the parameters and
  /// buffers in place (moved to each one's device). Nothing is changed when
  /// the check fails.
  void load_state_dict(const NamedTensors& state);

 protected:
  /// Registers `*param` under `name` and marks it requires_grad (when
  /// defined and `requires_grad`). The pointer must stay valid as long as
  /// this module lives: pass the address of a member. Returns *param.
  Tensor& register_parameter(const std::string& name, Tensor* param, bool requires_grad = true);
  /// Registers a buffer: saved in state_dict() and moved by to(), but not a
  /// parameter.
  Tensor& register_buffer(const std::string& name, Tensor* buffer);
  /// Registers a child module; its parameters appear as "<name>.<param>".
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  friend Tensor functional_call(Module& module, const NamedTensors& tensors, const Tensor& input);
  friend Tensor functional_call(Module& module, const std::vector<Tensor>& params, const Tensor& input);
  /// The addresses of the registered parameter and buffer members of this
  /// module and its descendants, in named_parameters()'s order (an address
  /// appears again where a child is registered twice).
  void collect_slots(std::vector<Tensor*>* params, std::vector<Tensor*>* buffers) const;
  void check_new_name(const std::string& name) const;
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, NamedTensors* params, NamedTensors* buffers) const;
  void for_each_tensor(bool include_buffers, const std::function<void(Tensor&, bool is_param)>& fn);

  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

/// Runs `module(input)` — forward() and the module's backward hooks — with
/// some of its parameters and buffers replaced by `tensors`, named as
/// named_parameters() and named_buffers() name them ("0.weight"), and puts
/// the module's own tensors back before returning, also when the call
/// throws: torch.func.functional_call. The replacements are used as they
/// are (not copied, not detached), so the output is differentiable with
/// respect to them — and through them with respect to whatever they were
/// computed from, which is how MAML's adapted parameters (θ − α∇L) reach
/// the meta-parameters θ (nn/functional_optim.hpp). Parameters not named
/// keep their own tensors; a tied parameter (one tensor registered in
/// several places) is replaced everywhere it appears.
///
/// Each replacement must have the shape, dtype and device of the tensor it
/// replaces; an unknown or repeated name, an undefined tensor or a mismatch
/// is an error naming the module, the entry and both types, raised before
/// anything is replaced. While the call runs the module holds the
/// replacements (its parameters() returns them); do not use the module from
/// another thread meanwhile, nor move it (to()) inside the call.
Tensor functional_call(Module& module, const NamedTensors& tensors, const Tensor& input);

/// The same with one tensor per parameter, in the order of parameters().
/// ValueError when the count differs.
Tensor functional_call(Module& module, const std::vector<Tensor>& params, const Tensor& input);

/// The parameters of modules of one architecture, stacked: entry i holds
/// every module's parameters()[i] along a new dim 0 — an ensemble's
/// weights, for vmap over functional_call (docs/vmap.md, "Ensembles"):
///
///   auto weights = stack_modules({&a, &b, &c});
///   auto run = vmap([&](const std::vector<Tensor>& in) {
///     std::vector<Tensor> params(in.begin(), in.end() - 1);
///     return std::vector<Tensor>{functional_call(a, params, in.back())};
///   }, in_dims /* 0 for each weight, nullopt for x */);
///
/// The modules must have the same parameters (count, shapes, dtypes,
/// devices); an error names the first module and parameter that differ.
std::vector<Tensor> stack_modules(const std::vector<const Module*>& modules);

}  // namespace strata::nn
