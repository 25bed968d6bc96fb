// optim.cpp — Optimizer base (state dicts), SGD, Adam and AdamW.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/nn/optim.hpp>
#include <strata/ops.hpp>
#include <string>
#include <vector>

#include "optim_common.hpp"
#include "util.hpp"

namespace strata::nn {

using detail::num;

namespace {

// The state dict's scalars (lr, hyperparameters, step counts) live on the
// host, cpu:0, as PyTorch's do: the default device may not store f64.
Tensor f64_scalar(double v) { return scalar_tensor(v, {.dtype = DType::f64, .device = Device("cpu:0")}); }
Tensor i64_scalar(int64_t v) {
  return scalar_tensor(static_cast<double>(v), {.dtype = DType::i64, .device = Device("cpu:0")});
}

/// Checks that `t` (entry `key` of a state dict) is a 0-d tensor of dtype
/// `expected`; DTypeError / ShapeError naming the entry, the expected and
/// the found type otherwise.
void check_scalar(const std::string& owner, const std::string& key, const Tensor& t, DType expected) {
  const std::string want = std::string(dtype_name(expected)) + "[] (a 0-d " + std::string(dtype_name(expected)) +
                           " tensor)";
  if (!t.defined()) {
    throw ValueError(owner + ".load_state_dict: entry '" + key + "': expected " + want + ", found an undefined tensor");
  }
  if (t.dtype() != expected) {
    throw DTypeError(owner + ".load_state_dict: entry '" + key + "': expected " + want + ", found " + type_string(t));
  }
  if (t.dim() != 0) {
    throw ShapeError(owner + ".load_state_dict: entry '" + key + "': expected " + want + ", found " + type_string(t));
  }
}

/// A gradient as the update ops take it: in the parameter's dtype, and
/// detached when it requires grad, as one taken with create_graph does
/// (given a tensor with autograd state, a group of updates runs one by one
/// through the recorder; a plain gradient is used as it is).
Tensor update_grad(const Tensor& g, DType dtype) { return (g.requires_grad() ? g.detach() : g).to(dtype); }

/// Parses "param.<i>.<buffer>"; false when `name` has another form.
bool parse_param_entry(const std::string& name, size_t* index, std::string* buffer) {
  const std::string prefix = "param.";
  if (name.rfind(prefix, 0) != 0) return false;
  size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size() || dot + 1 == name.size()) return false;
  const char* first = name.data() + prefix.size();
  const char* last = name.data() + dot;
  auto [ptr, ec] = std::from_chars(first, last, *index);
  if (ec != std::errc() || ptr != last) return false;
  *buffer = name.substr(dot + 1);
  return true;
}

}  // namespace

namespace detail {

void check_sgd_hyperparameters(std::string_view owner, double momentum, double dampening, double weight_decay,
                               double nesterov) {
  auto refuse = [&](const std::string& what) { throw ValueError(std::string(owner) + ": " + what); };
  const std::pair<const char*, double> reals[] = {
      {"momentum", momentum}, {"dampening", dampening}, {"weight_decay", weight_decay}};
  for (const auto& [key, value] : reals) {
    if (!(value >= 0.0 && std::isfinite(value))) {
      refuse(std::string(key) + " must be finite and >= 0, got " + num(value));
    }
  }
  if (nesterov != 0.0 && nesterov != 1.0) refuse("nesterov must be 0 or 1, got " + num(nesterov));
  if (nesterov == 1.0 && (momentum <= 0.0 || dampening != 0.0)) {
    refuse("Nesterov momentum needs momentum > 0 and dampening = 0, got momentum=" + num(momentum) +
           ", dampening=" + num(dampening));
  }
}

void check_adam_hyperparameters(std::string_view owner, double beta1, double beta2, double eps,
                                double weight_decay) {
  auto refuse = [&](const std::string& what) { throw ValueError(std::string(owner) + ": " + what); };
  const std::pair<const char*, double> betas[] = {{"beta1", beta1}, {"beta2", beta2}};
  for (const auto& [key, value] : betas) {
    if (!(value >= 0.0 && value < 1.0)) refuse(std::string(key) + " must be in [0, 1), got " + num(value));
  }
  const std::pair<const char*, double> rest[] = {{"eps", eps}, {"weight_decay", weight_decay}};
  // eps = inf divides every update by inf: the optimizer would silently
  // stop; NaN would poison every parameter.
  for (const auto& [key, value] : rest) {
    if (!(value >= 0.0 && std::isfinite(value))) {
      refuse(std::string(key) + " must be finite and >= 0, got " + num(value));
    }
  }
}

SgdMomentumUpdate sgd_momentum_update(const SGDOptions& options, double lr, bool first) {
  return {.lr = lr,
          .weight_decay = options.weight_decay,
          .momentum = options.momentum,
          .dampening = options.dampening,
          .nesterov = options.nesterov,
          .first = first};
}

AdamUpdate adam_update(const AdamOptions& options, double lr, int64_t step, bool decoupled) {
  const double bc1 = 1.0 - std::pow(options.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(options.beta2, static_cast<double>(step));
  AdamUpdate update{.beta1 = options.beta1,
                    .beta2 = options.beta2,
                    .step_size = lr / bc1,
                    .inv_sqrt_bias2 = 1.0 / std::sqrt(bc2),
                    .eps = options.eps};
  if (options.weight_decay != 0.0) {
    update.decay_mode = decoupled ? WeightDecay::decoupled : WeightDecay::l2;
    update.weight_decay = options.weight_decay;
    update.decay = 1.0 - lr * options.weight_decay;
  }
  return update;
}

}  // namespace detail

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
  if (params_.empty()) throw ValueError("optimizer: empty parameter list");
  std::set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.defined()) throw ValueError("optimizer: parameter " + std::to_string(i) + " is undefined");
    if (!is_differentiable(p.dtype())) {
      throw DTypeError("optimizer: parameter " + std::to_string(i) + " must be floating or complex, got " +
                       type_string(p));
    }
    if (!seen.insert(p.impl()).second) {
      throw ValueError("optimizer: parameter " + std::to_string(i) + " appears more than once");
    }
  }
  if (!(lr >= 0.0 && std::isfinite(lr))) throw ValueError("optimizer: lr must be finite and >= 0, got " + num(lr));
  values_.reserve(params_.size());
  for (const Tensor& p : params_) values_.push_back(p.detach());
  state_.resize(params_.size());
  param_steps_.assign(params_.size(), 0);
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

void Optimizer::set_lr(double lr) {
  if (!(lr >= 0.0 && std::isfinite(lr))) throw ValueError(name() + ": lr must be finite and >= 0, got " + num(lr));
  lr_ = lr;
}

Tensor& Optimizer::buffer(size_t param, std::string_view name) {
  // std::map: references stay valid while other buffers are added.
  auto& buffers = state_.at(param);
  auto it = buffers.find(name);
  if (it == buffers.end()) it = buffers.emplace(std::string(name), Tensor()).first;
  return it->second;
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  out.emplace_back("lr", f64_scalar(lr_));
  for (const auto& [n, v] : hyperparameters()) out.emplace_back(n, f64_scalar(v));
  out.emplace_back("step", i64_scalar(steps_));
  for (size_t i = 0; i < state_.size(); ++i) {
    for (const auto& [n, t] : state_[i]) {
      // A snapshot: steps update the state in place (ops/optim.cpp).
      if (t.defined()) out.emplace_back("param." + std::to_string(i) + "." + n, t.detach().clone());
    }
    if (param_steps_[i] > 0) out.emplace_back("param." + std::to_string(i) + ".step", i64_scalar(param_steps_[i]));
  }
  return out;
}

void Optimizer::check_state_dict(const NamedTensors& state, const std::string& key_prefix) const {
  const std::string owner = name();
  auto key = [&](const std::string& n) { return key_prefix + n; };
  std::map<std::string, const Tensor*> given;
  for (const auto& [n, t] : state) {
    if (!given.emplace(n, &t).second) throw ValueError(owner + ".load_state_dict: duplicate entry '" + key(n) + "'");
  }
  // Every scalar first: present, of its dtype and 0-d, then its value.
  auto scalar = [&](const std::string& n, DType dtype) -> const Tensor& {
    auto it = given.find(n);
    if (it == given.end()) {
      throw ValueError(owner + ".load_state_dict: missing entry '" + key(n) + "' (expected " +
                       std::string(dtype_name(dtype)) + "[])");
    }
    check_scalar(owner, key(n), *it->second, dtype);
    return *it->second;
  };
  double lr = scalar("lr", DType::f64).item<double>();
  if (!(lr >= 0.0 && std::isfinite(lr))) {
    throw ValueError(owner + ".load_state_dict: '" + key("lr") + "' must be finite and >= 0, got " + num(lr));
  }
  Hyperparameters values = hyperparameters();
  for (auto& [n, v] : values) v = scalar(n, DType::f64).item<double>();
  validate(values);
  int64_t steps = scalar("step", DType::i64).item<int64_t>();
  if (steps < 0) {
    throw ValueError(owner + ".load_state_dict: '" + key("step") + "' must be a count >= 0, got " +
                     std::to_string(steps));
  }
  std::set<std::string> known{"lr", "step"};
  for (const auto& [n, v] : values) known.insert(n);
  const std::vector<std::string> buffers = buffer_names();
  // Per parameter, the buffers the state holds: all of buffer_names() or
  // none (a parameter that has not been updated yet).
  std::vector<std::set<std::string>> held(params_.size());
  for (const auto& [n, t] : state) {
    if (known.contains(n)) continue;
    size_t index = 0;
    std::string buffer;
    if (!parse_param_entry(n, &index, &buffer)) {
      throw ValueError(owner + ".load_state_dict: unexpected entry '" + key(n) + "'");
    }
    if (index >= params_.size()) {
      throw ValueError(owner + ".load_state_dict: entry '" + key(n) + "' names parameter " + std::to_string(index) +
                       " but the optimizer has " + std::to_string(params_.size()));
    }
    if (std::find(buffers.begin(), buffers.end(), buffer) == buffers.end()) {
      throw ValueError(owner + ".load_state_dict: unexpected entry '" + key(n) + "' (" + owner + " keeps no '" +
                       buffer + "' state)");
    }
    held[index].insert(buffer);
    if (buffer == "step") {
      check_scalar(owner, key(n), t, DType::i64);
      if (t.item<int64_t>() < 0 || t.item<int64_t>() > steps) {
        throw ValueError(owner + ".load_state_dict: '" + key(n) + "' must be a count in [0, " + key("step") +
                         " = " + std::to_string(steps) + "], got " + std::to_string(t.item<int64_t>()));
      }
      continue;
    }
    if (!t.defined()) {
      throw ValueError(owner + ".load_state_dict: entry '" + key(n) + "' is an undefined tensor");
    }
    const Tensor& p = params_[index];
    const std::string want = std::string(dtype_name(p.dtype())) + shape_string(p.shape()) + " (like parameter " +
                             std::to_string(index) + ")";
    if (t.sizes() != p.sizes()) {
      throw ShapeError(owner + ".load_state_dict: shape mismatch for '" + key(n) + "': expected " + want +
                       ", found " + type_string(t));
    }
    if (t.dtype() != p.dtype()) {
      throw DTypeError(owner + ".load_state_dict: dtype mismatch for '" + key(n) + "': expected " + want +
                       ", found " + type_string(t));
    }
  }
  for (size_t i = 0; i < held.size(); ++i) {
    if (held[i].empty() || held[i].size() == buffers.size()) continue;
    std::string kept;
    for (const auto& b : held[i]) kept += (kept.empty() ? "'" : ", '") + key("param." + std::to_string(i) + "." + b) + "'";
    for (const auto& b : buffers) {
      if (held[i].contains(b)) continue;
      throw ValueError(owner + ".load_state_dict: missing entry '" + key("param." + std::to_string(i) + "." + b) +
                       "': parameter " + std::to_string(i) + " has " + kept + " but " + owner +
                       " keeps all of its per-parameter state together");
    }
  }
}

void Optimizer::load_state_dict(const NamedTensors& state) {
  check_state_dict(state);
  std::map<std::string, Tensor> given(state.begin(), state.end());
  Hyperparameters values = hyperparameters();
  for (auto& [n, v] : values) v = given.at(n).item<double>();
  std::vector<std::map<std::string, Tensor, std::less<>>> fresh(params_.size());
  std::vector<int64_t> steps(params_.size(), 0);
  for (const auto& [n, t] : state) {
    size_t index = 0;
    std::string buffer;
    if (!parse_param_entry(n, &index, &buffer)) continue;
    if (buffer == "step") {
      steps[index] = t.item<int64_t>();
      continue;
    }
    // Steps update state tensors in place: never share the caller's storage
    // (a compact copy, as the fused updates want it).
    Tensor copy = t.detach().to(params_[index].device());
    fresh[index][buffer] = copy.device() == t.device() ? copy.clone() : copy.contiguous();
  }
  // Everything that can fail (copies to the device included) is done:
  // replace the state as a whole.
  lr_ = given.at("lr").item<double>();
  steps_ = given.at("step").item<int64_t>();
  set_hyperparameters(values);
  state_ = std::move(fresh);
  param_steps_ = std::move(steps);
}

// --- SGD ---------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : Optimizer(std::move(params), options.lr), options_(options) {
  validate(hyperparameters());
}

Optimizer::Hyperparameters SGD::hyperparameters() const {
  return {{"momentum", options_.momentum},
          {"dampening", options_.dampening},
          {"weight_decay", options_.weight_decay},
          {"nesterov", options_.nesterov ? 1.0 : 0.0}};
}

void SGD::validate(const Hyperparameters& values) const {
  std::map<std::string, double> v(values.begin(), values.end());
  detail::check_sgd_hyperparameters("SGD", v.at("momentum"), v.at("dampening"), v.at("weight_decay"),
                                    v.at("nesterov"));
}

void SGD::set_hyperparameters(const Hyperparameters& values) {
  std::map<std::string, double> v(values.begin(), values.end());
  options_.momentum = v.at("momentum");
  options_.dampening = v.at("dampening");
  options_.weight_decay = v.at("weight_decay");
  options_.nesterov = v.at("nesterov") != 0.0;
}

void SGD::step() {
  NoGradGuard no_grad;
  const double lr = this->lr();
  const SGDOptions& o = options_;
  // The parameters with a gradient, updated as groups (ops.hpp: one kernel
  // call per group on devices whose kernels take groups): with momentum,
  // those whose buffer is still to be created (`fresh`) apart from the rest.
  struct Group {
    std::vector<size_t> index;
    std::vector<Tensor> p, g, b;
  };
  Group kept, fresh;
  for (size_t i = 0; i < params().size(); ++i) {
    const Tensor& p = params()[i];
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    const Tensor* buf = o.momentum != 0.0 ? &buffer(i, "momentum_buffer") : nullptr;
    const bool is_new = buf != nullptr && !buf->defined();
    Group& group = is_new ? fresh : kept;
    group.index.push_back(i);
    group.p.push_back(values(i));
    group.g.push_back(update_grad(g, p.dtype()));
    if (buf != nullptr) group.b.push_back(is_new ? zeros_like(values(i)) : *buf);
  }
  if (o.momentum == 0.0) {
    sgd_step_(kept.p, kept.g, lr, o.weight_decay);
  } else {
    for (Group* group : {&kept, &fresh}) {
      if (group->p.empty()) continue;
      sgd_momentum_step_(group->p, group->g, group->b, detail::sgd_momentum_update(o, lr, group == &fresh));
    }
    // The new buffers join the state once their update has run.
    for (size_t k = 0; k < fresh.index.size(); ++k) buffer(fresh.index[k], "momentum_buffer") = fresh.b[k];
  }
  count_step();
}

// --- Adam / AdamW ---------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, false) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled_weight_decay)
    : Optimizer(std::move(params), options.lr), options_(options), decoupled_(decoupled_weight_decay) {
  validate(hyperparameters());
  // Adam's second moment of a complex gradient is |g|^2 per real component
  // (PyTorch views complex parameters as real pairs); the update op squares
  // g instead, so complex parameters are refused rather than mistrained.
  for (size_t i = 0; i < this->params().size(); ++i) {
    if (is_complex(this->params()[i].dtype())) {
      throw DTypeError(std::string(decoupled_ ? "AdamW" : "Adam") + ": parameter " + std::to_string(i) + " is " +
                       type_string(this->params()[i]) + "; complex parameters are not supported yet (SGD takes them)");
    }
  }
}

Optimizer::Hyperparameters Adam::hyperparameters() const {
  return {{"beta1", options_.beta1},
          {"beta2", options_.beta2},
          {"eps", options_.eps},
          {"weight_decay", options_.weight_decay}};
}

void Adam::validate(const Hyperparameters& values) const {
  std::map<std::string, double> v(values.begin(), values.end());
  detail::check_adam_hyperparameters(name(), v.at("beta1"), v.at("beta2"), v.at("eps"), v.at("weight_decay"));
}

void Adam::set_hyperparameters(const Hyperparameters& values) {
  std::map<std::string, double> v(values.begin(), values.end());
  options_.beta1 = v.at("beta1");
  options_.beta2 = v.at("beta2");
  options_.eps = v.at("eps");
  options_.weight_decay = v.at("weight_decay");
}

void Adam::step() {
  NoGradGuard no_grad;
  const double lr = this->lr();
  const AdamOptions& o = options_;
  // The parameters with a gradient, updated as groups (ops.hpp: one kernel
  // call per group on devices whose kernels take groups) of those that
  // share their step count, which sets the bias corrections, and whether
  // their moments are new. Usually that is one group.
  struct Group {
    int64_t step;
    bool first;
    std::vector<size_t> index;
    std::vector<Tensor> p, g, m, v;
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < params().size(); ++i) {
    const Tensor& p = params()[i];
    const Tensor& g = p.grad();
    if (!g.defined()) continue;
    const Tensor& m = buffer(i, "exp_avg");
    const Tensor& v = buffer(i, "exp_avg_sq");
    const bool first = !m.defined() || !v.defined();
    const int64_t step = param_step(i) + 1;
    auto it = std::ranges::find_if(groups, [&](const Group& x) { return x.step == step && x.first == first; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{step, first, {}, {}, {}, {}, {}});
    it->index.push_back(i);
    it->p.push_back(values(i));
    it->g.push_back(update_grad(g, p.dtype()));
    it->m.push_back(first ? zeros_like(values(i)) : m);
    it->v.push_back(first ? zeros_like(values(i)) : v);
  }
  for (const Group& group : groups) {
    // The step count lives on the host, so the bias corrections are computed
    // in double without reading the device.
    AdamUpdate update = detail::adam_update(o, lr, group.step, decoupled_);
    update.first = group.first;
    adam_step_(group.p, group.g, group.m, group.v, update);
    // The counts and new moments join the state once their update has run.
    for (size_t k = 0; k < group.index.size(); ++k) {
      const size_t i = group.index[k];
      param_step(i) = group.step;
      if (!group.first) continue;
      buffer(i, "exp_avg") = group.m[k];
      buffer(i, "exp_avg_sq") = group.v[k];
    }
  }
  count_step();
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, true) {}

}  // namespace strata::nn
