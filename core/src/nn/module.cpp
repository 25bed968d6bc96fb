// module.cpp — Module: registration, traversal, device moves, state dicts.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>
#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/nn/module.hpp>
#include <strata/ops.hpp>

#include "util.hpp"

namespace strata::nn {

namespace detail {
void attach_backward_hooks(Module& layer, Tensor& output);  // hooks.cpp
void forget_backward_hooks(const Module& layer);

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}
}  // namespace detail


Module::~Module() { detail::forget_backward_hooks(*this); }

Tensor Module::operator()(const Tensor& input) {
  Tensor out = forward(input);
  detail::attach_backward_hooks(*this, out);
  return out;
}

void Module::check_new_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos) {
    throw ValueError(this->name() + ": invalid member name '" + name + "' (must be non-empty, without '.')");
  }
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  if (taken(params_) || taken(buffers_) || taken(children_)) {
    throw ValueError(this->name() + ": the name '" + name + "' is already registered");
  }
}

Tensor& Module::register_parameter(const std::string& name, Tensor* param, bool requires_grad) {
  if (param == nullptr) throw ValueError(this->name() + ": register_parameter('" + name + "') with a null pointer");
  check_new_name(name);
  if (param->defined() && requires_grad && !param->requires_grad()) {
    if (!is_differentiable(param->dtype())) {
      throw DTypeError(this->name() + ": parameter '" + name + "' must be floating or complex to require grad, got " +
                       type_string(*param));
    }
    param->set_requires_grad(true);
  }
  params_.emplace_back(name, param);
  return *param;
}

Tensor& Module::register_buffer(const std::string& name, Tensor* buffer) {
  if (buffer == nullptr) throw ValueError(this->name() + ": register_buffer('" + name + "') with a null pointer");
  check_new_name(name);
  buffers_.emplace_back(name, buffer);
  return *buffer;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  if (!module) throw ValueError(this->name() + ": register_module('" + name + "') with a null module");
  if (module.get() == this) throw ValueError(this->name() + ": a module cannot be its own child");
  check_new_name(name);
  children_.emplace_back(name, std::move(module));
}

void Module::collect(const std::string& prefix, NamedTensors* params, NamedTensors* buffers) const {
  if (params != nullptr) {
    for (const auto& [n, t] : params_) {
      if (t->defined()) params->emplace_back(prefix + n, *t);
    }
  }
  if (buffers != nullptr) {
    for (const auto& [n, t] : buffers_) {
      if (t->defined()) buffers->emplace_back(prefix + n, *t);
    }
  }
  for (const auto& [n, child] : children_) child->collect(prefix + n + ".", params, buffers);
}

NamedTensors Module::named_parameters() const {
  NamedTensors all;
  collect("", &all, nullptr);
  // A module shared by two parents (weight tying) appears once, under its
  // first name.
  NamedTensors out;
  std::set<const TensorImpl*> seen;
  for (auto& e : all) {
    if (seen.insert(e.second.impl()).second) out.push_back(std::move(e));
  }
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

void Module::collect_slots(std::vector<Tensor*>* params, std::vector<Tensor*>* buffers) const {
  for (const auto& [n, t] : params_) params->push_back(t);
  for (const auto& [n, t] : buffers_) buffers->push_back(t);
  for (const auto& [n, child] : children_) child->collect_slots(params, buffers);
}

NamedTensors Module::named_buffers() const {
  NamedTensors all;
  collect("", nullptr, &all);
  return all;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const { return children_; }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, c] : children_) out.push_back(c);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::for_each_tensor(bool include_buffers, const std::function<void(Tensor&, bool)>& fn) {
  for (auto& [n, t] : params_) {
    if (t->defined()) fn(*t, true);
  }
  if (include_buffers) {
    for (auto& [n, t] : buffers_) {
      if (t->defined()) fn(*t, false);
    }
  }
  for (auto& [n, c] : children_) c->for_each_tensor(include_buffers, fn);
}

namespace {
/// A new leaf holding `value`'s data, requiring grad like `old` did.
Tensor relink(const Tensor& old, const Tensor& value, bool is_param) {
  if (value.impl() == old.impl()) return old;
  Tensor leaf = value.detach();
  if (is_param && old.requires_grad()) leaf.set_requires_grad(true);
  return leaf;
}
}  // namespace

Module& Module::to(Device device) {
  NoGradGuard no_grad;
  // Shared (tied) tensors must stay shared: move each storage once.
  std::map<const TensorImpl*, Tensor> moved;
  for_each_tensor(true, [&](Tensor& t, bool is_param) {
    auto it = moved.find(t.impl());
    if (it != moved.end()) {
      t = it->second;
      return;
    }
    Tensor next = relink(t, t.to(device), is_param);
    moved.emplace(t.impl(), next);
    t = next;
  });
  return *this;
}

Module& Module::to(DType dtype) {
  if (!is_floating(dtype))
    throw DTypeError(name() + ".to(" + std::string(dtype_name(dtype)) + "): not a floating dtype");
  NoGradGuard no_grad;
  std::map<const TensorImpl*, Tensor> converted;
  for_each_tensor(true, [&](Tensor& t, bool is_param) {
    if (!is_floating(t.dtype())) return;
    auto it = converted.find(t.impl());
    if (it != converted.end()) {
      t = it->second;
      return;
    }
    Tensor next = relink(t, t.to(dtype), is_param);
    converted.emplace(t.impl(), next);
    t = next;
  });
  return *this;
}

void Module::zero_grad() {
  for_each_tensor(false, [](Tensor& t, bool) { t.zero_grad(); });
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  for (auto& [n, t] : named_parameters()) out.emplace_back(n, t.detach());
  for (auto& [n, t] : named_buffers()) out.emplace_back(n, t.detach());
  return out;
}

void Module::check_state_dict(const NamedTensors& state) const {
  NamedTensors own = state_dict();
  std::map<std::string, const Tensor*> given;
  for (const auto& [n, t] : state) {
    if (!given.emplace(n, &t).second) throw ValueError(name() + ".load_state_dict: duplicate entry '" + n + "'");
  }
  std::vector<std::string> missing;
  std::set<std::string> expected;
  for (const auto& [n, t] : own) {
    expected.insert(n);
    auto it = given.find(n);
    if (it == given.end()) {
      missing.push_back(n);
      continue;
    }
    const Tensor& src = *it->second;
    if (!src.defined()) throw ValueError(name() + ".load_state_dict: entry '" + n + "' is an undefined tensor");
    if (src.sizes() != t.sizes()) {
      throw ShapeError(name() + ".load_state_dict: shape mismatch for '" + n + "': the model has " +
                       shape_string(t.shape()) + ", the state has " + shape_string(src.shape()));
    }
    if (src.dtype() != t.dtype()) {
      throw DTypeError(name() + ".load_state_dict: dtype mismatch for '" + n + "': the model has " +
                       std::string(dtype_name(t.dtype())) + ", the state has " + std::string(dtype_name(src.dtype())));
    }
  }
  std::vector<std::string> unexpected;
  for (const auto& [n, t] : state) {
    if (!expected.contains(n)) unexpected.push_back(n);
  }
  if (!missing.empty() || !unexpected.empty()) {
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (const auto& x : v) s += (s.empty() ? "'" : ", '") + x + "'";
      return s.empty() ? std::string("none") : s;
    };
    throw ValueError(name() + ".load_state_dict: missing entries: " + join(missing) +
                     "; unexpected entries: " + join(unexpected));
  }
}

void Module::load_state_dict(const NamedTensors& state) {
  check_state_dict(state);
  std::map<std::string, const Tensor*> given;
  for (const auto& [n, t] : state) given.emplace(n, &t);
  NoGradGuard no_grad;
  // The state_dict entries share storage with the members, so copying into
  // them writes the members in place (tensor identity and requires_grad kept).
  for (auto& [n, t] : state_dict()) {
    t.copy_(given.at(n)->to(t.device()));
  }
}

// --- functional_call ---------------------------------------------------------

namespace {

/// Tensors written into module members, put back (in reverse order, so a
/// member written twice ends as it began) when this dies — also when the
/// call in between throws.
class Substitution {
 public:
  Substitution() = default;
  Substitution(const Substitution&) = delete;
  Substitution& operator=(const Substitution&) = delete;
  ~Substitution() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) *it->first = std::move(it->second);
  }
  void replace(Tensor* member, const Tensor& with) {
    saved_.emplace_back(member, *member);
    *member = with;
  }

 private:
  std::vector<std::pair<Tensor*, Tensor>> saved_;
};

/// "f32[40, 1] on cpu:0"
std::string described(const Tensor& t) { return type_string(t) + " on " + t.device().str(); }

/// Throws unless `replacement` can stand in for `own` (named by `label`:
/// "'0.weight'").
void check_replacement(const std::string& fn, const std::string& label, const Tensor& own,
                       const Tensor& replacement) {
  if (!replacement.defined()) throw ValueError(fn + ": the tensor for " + label + " is undefined");
  const bool shape_ok = std::ranges::equal(replacement.shape(), own.shape());
  const bool dtype_ok = replacement.dtype() == own.dtype();
  const bool device_ok = replacement.device() == own.device();
  if (shape_ok && dtype_ok && device_ok) return;
  const std::string mismatch =
      fn + ": " + label + " is " + described(own) + ", the replacement is " + described(replacement);
  if (!shape_ok) throw ShapeError(mismatch);
  if (!dtype_ok) throw DTypeError(mismatch);
  throw DeviceError(mismatch);
}

/// Puts `replacements[k]` into every member in `slots` that holds
/// `originals[k]` — matched before anything is written, so that a member
/// listed twice, or a replacement that is another member's tensor, is
/// handled right — runs the module and puts the members back.
Tensor run_substituted(Module& module, const std::vector<Tensor*>& slots, const std::vector<const TensorImpl*>& originals,
                       const std::vector<Tensor>& replacements, const Tensor& input) {
  std::vector<std::pair<Tensor*, size_t>> plan;
  for (Tensor* slot : slots) {
    if (!slot->defined()) continue;
    auto it = std::find(originals.begin(), originals.end(), slot->impl());
    if (it != originals.end()) plan.emplace_back(slot, static_cast<size_t>(it - originals.begin()));
  }
  Substitution substitution;
  for (const auto& [slot, k] : plan) substitution.replace(slot, replacements[k]);
  return module(input);
}

}  // namespace

Tensor functional_call(Module& module, const NamedTensors& tensors, const Tensor& input) {
  const std::string fn = "functional_call(" + module.name() + ")";
  std::map<std::string, Tensor> own;
  for (auto& [n, t] : module.named_parameters()) own.emplace(n, t);
  for (auto& [n, t] : module.named_buffers()) own.emplace(n, t);
  // Everything is checked before anything is replaced.
  std::vector<const TensorImpl*> originals;
  std::vector<Tensor> replacements;
  std::set<std::string> seen;
  for (const auto& [n, t] : tensors) {
    auto it = own.find(n);
    if (it == own.end()) {
      std::string names;
      for (const auto& [known, unused] : own) names += (names.empty() ? "'" : ", '") + known + "'";
      throw ValueError(fn + ": no parameter or buffer named '" + n + "' (the module has " +
                       (names.empty() ? std::string("none") : names) + ")");
    }
    if (!seen.insert(n).second) throw ValueError(fn + ": '" + n + "' is given twice");
    check_replacement(fn, "'" + n + "'", it->second, t);
    originals.push_back(it->second.impl());
    replacements.push_back(t);
  }
  std::vector<Tensor*> slots;
  module.collect_slots(&slots, &slots);
  return run_substituted(module, slots, originals, replacements, input);
}

Tensor functional_call(Module& module, const std::vector<Tensor>& params, const Tensor& input) {
  // The fast path of MAML's inner loops: no names unless something is wrong.
  std::vector<Tensor*> slots, buffer_slots;
  module.collect_slots(&slots, &buffer_slots);
  // The distinct parameter tensors in parameters()'s order (a tied one once).
  std::vector<const TensorImpl*> originals;
  std::vector<const Tensor*> own;
  for (const Tensor* slot : slots) {
    if (!slot->defined() || std::find(originals.begin(), originals.end(), slot->impl()) != originals.end()) continue;
    originals.push_back(slot->impl());
    own.push_back(slot);
  }
  if (params.size() != originals.size()) {
    throw ValueError("functional_call(" + module.name() + "): " + std::to_string(params.size()) + " tensors for " +
                     std::to_string(originals.size()) + " parameters (one per parameters() entry, in its order)");
  }
  for (size_t i = 0; i < own.size(); ++i) {
    const Tensor& p = params[i];
    if (p.defined() && std::ranges::equal(p.shape(), own[i]->shape()) && p.dtype() == own[i]->dtype() &&
        p.device() == own[i]->device()) {
      continue;
    }
    check_replacement("functional_call(" + module.name() + ")",
                      "'" + module.named_parameters()[i].first + "' (params[" + std::to_string(i) + "])", *own[i], p);
  }
  return run_substituted(module, slots, originals, params, input);
}

std::vector<Tensor> stack_modules(const std::vector<const Module*>& modules) {
  if (modules.empty()) throw ValueError("stack_modules: no module given");
  for (size_t m = 0; m < modules.size(); ++m) {
    if (modules[m] == nullptr) throw ValueError("stack_modules: modules[" + std::to_string(m) + "] is null");
  }
  const std::vector<Tensor> first = modules[0]->parameters();
  std::vector<std::vector<Tensor>> columns(first.size());
  for (size_t m = 0; m < modules.size(); ++m) {
    std::vector<Tensor> params = modules[m]->parameters();
    if (params.size() != first.size()) {
      throw ValueError("stack_modules: modules[" + std::to_string(m) + "] (" + modules[m]->name() + ") has " +
                       std::to_string(params.size()) + " parameters, modules[0] (" + modules[0]->name() + ") " +
                       std::to_string(first.size()));
    }
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& p = params[i];
      if (p.sizes() != first[i].sizes() || p.dtype() != first[i].dtype() || p.device() != first[i].device()) {
        throw ValueError("stack_modules: parameter '" + modules[m]->named_parameters()[i].first + "' of modules[" +
                         std::to_string(m) + "] is " + type_string(p) + " on " + p.device().str() +
                         ", modules[0]'s is " + type_string(first[i]) + " on " + first[i].device().str());
      }
      columns[i].push_back(p);
    }
  }
  std::vector<Tensor> out;
  for (auto& c : columns) out.push_back(strata::stack(c, 0));
  return out;
}

}  // namespace strata::nn
