// custom_function.cpp — user-defined derivative rules: the call (forward
// with recording off, then one recorded node), contexts, custom_vjp and
// custom_jvp, and the name registry. The node's rules are in
// custom_rules.cpp.
#include "autograd/vmap/lanes_twin.hpp"
#include "autograd/custom/custom_internal.hpp"
#include "autograd/engine/nodes.hpp"
#include "autograd/trace/trace.hpp"

#include "runtime/tensor/tensor_impl.hpp"

#include <strata/error.hpp>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

namespace strata {

namespace detail {

namespace {

const OpDef& kCustomFunction = define_op({.name = "custom_function",
                                          .kind = OpKind::join,
                                          .tags = detail::op_tag::autograd,
                                          .dtypes = detail::DTypeFamily::any,
                                          .n_inputs = -1,
                                          .n_outputs = -1,
                                          .derivative = {.vjp = custom_node_vjp,
                                          .jvp = custom_node_jvp}});

/// A handle of `t`'s storage and geometry without autograd metadata: the
/// outputs a call returns never share a handle with a tensor the forward
/// returned (an input, say), so attaching history to them changes nothing else.
Tensor fresh_handle(const Tensor& t) { return make_view(t, t.shape(), t.strides(), t.offset()); }

std::vector<Tensor> checked_outputs(const std::string& name, std::vector<Tensor> outputs) {
  if (outputs.empty()) throw Error(custom_what(name) + ": forward returned no outputs");
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!outputs[k].defined()) throw Error(custom_what(name) + ": forward returned an undefined output " + std::to_string(k));
  }
  return outputs;
}

/// The call when nothing differentiates it: no node, nothing saved.
std::vector<Tensor> call_plain(const CustomRule& rule, const std::vector<Tensor>& inputs, const FunctionAttrs& attrs) {
  std::vector<Tensor> outputs;
  {
    AutogradOff off;
    if (rule.rules.primal) {
      outputs = rule.rules.primal(inputs);
    } else {
      FunctionContext ctx = CustomAccess::forward_context(rule, attrs, inputs);
      outputs = rule.rules.forward(ctx, inputs);
    }
  }
  outputs = checked_outputs(rule.rules.name, std::move(outputs));
  for (Tensor& o : outputs) o = fresh_handle(o);
  return outputs;
}

/// The call under differentiation: forward with recording off, then one node
/// whose rules are the function's.
std::vector<Tensor> call_recorded(const std::shared_ptr<const CustomRule>& rule, const std::vector<Tensor>& inputs,
                                  const FunctionAttrs& attrs) {
  auto call = std::make_shared<CustomCall>();
  call->rule = rule;
  call->attrs = attrs;
  call->rng = get_rng_state();
  call->autocast = autocast_snapshot();
  FunctionContext ctx = CustomAccess::forward_context(*rule, attrs, inputs);
  std::vector<Tensor> outputs;
  {
    AutogradOff off;  // the forward's own ops are not recorded: the node stands for them
    outputs = rule->rules.forward(ctx, inputs);
  }
  CustomAccess::finish_forward(ctx, outputs, *call);
  for (Tensor& o : outputs) o = fresh_handle(o);
  const std::vector<size_t> non_differentiable = call->non_differentiable;
  record_node(kCustomFunction, inputs, outputs, nullptr, std::move(call));
  for (size_t k : non_differentiable) outputs[k] = fresh_handle(outputs[k]);
  return outputs;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, std::shared_ptr<const CustomRule>, std::less<>>& registry() {
  static auto* map = new std::map<std::string, std::shared_ptr<const CustomRule>, std::less<>>;  // outlives static teardown
  return *map;
}

}  // namespace

std::string custom_what(const std::string& name) { return "custom function '" + name + "'"; }

bool differentiated_now(std::span<const Tensor> tensors) {
  const AutogradState& st = autograd_state();
  for (const Tensor& batched : tensors) {
    // Under vmap, a tape opened outside records through the lanes (the
    // node's twin, autograd/vmap/lanes_twin.cpp): their history counts too.
    if (batch_level(batched) != 0 && history_through_lanes(batched)) {
      if (st.grad_enabled || !st.forward.empty()) return true;
    }
    const Tensor& t = batched;
    const AutogradMeta* m = meta_if(t);
    if (m == nullptr) continue;
    if (st.grad_enabled) {
      for (uint8_t k = 0; k < m->levels.count; ++k) {
        if (st.recording.contains(m->levels.ids[k])) return true;
      }
      if (m->requires_grad && m->grad_fn == nullptr && !st.recording.empty()) return true;
    }
    for (const auto& [level, tangent] : m->tangents) {
      if (st.forward.contains(level)) return true;
    }
  }
  return false;
}

FunctionContext CustomAccess::forward_context(const CustomRule& rule, const FunctionAttrs& attrs,
                                              const std::vector<Tensor>& inputs) {
  FunctionContext ctx;
  ctx.rule_ = &rule;
  ctx.attrs_ = attrs;
  ctx.inputs_ = inputs;
  return ctx;
}

void CustomAccess::finish_forward(FunctionContext& ctx, const std::vector<Tensor>& outputs, CustomCall& call) {
  const std::string& name = ctx.name();
  checked_outputs(name, outputs);
  for (size_t k : ctx.non_differentiable_) {
    if (k >= outputs.size()) {
      throw ValueError(custom_what(name) + ": mark_non_differentiable names output " + std::to_string(k) +
                       " of a forward that returned " + std::to_string(outputs.size()));
    }
  }
  call.non_differentiable = ctx.non_differentiable_;
  call.saved.clear();
  call.values.clear();
  auto same = [](const Tensor& a, const Tensor& b) { return a.impl() == b.impl(); };
  for (const Tensor& t : ctx.saved_) {
    SavedRef ref;
    auto in = t.defined() ? std::find_if(ctx.inputs_.begin(), ctx.inputs_.end(), [&](const Tensor& x) { return same(x, t); })
                          : ctx.inputs_.end();
    auto out = t.defined() ? std::find_if(outputs.begin(), outputs.end(), [&](const Tensor& y) { return same(y, t); })
                           : outputs.end();
    if (in != ctx.inputs_.end()) {
      ref = {SavedFrom::input, static_cast<size_t>(in - ctx.inputs_.begin())};
    } else if (out != outputs.end()) {
      ref = {SavedFrom::output, static_cast<size_t>(out - outputs.begin())};
    } else {
      ref = {SavedFrom::value, call.values.size()};
      call.values.push_back(t);
    }
    call.saved.push_back(ref);
  }
}

FunctionContext CustomAccess::rule_context(const CustomCall& call, std::vector<Tensor> inputs,
                                           std::vector<Tensor> outputs, std::vector<Tensor> saved,
                                           std::vector<uint8_t> needs) {
  FunctionContext ctx;
  ctx.rule_ = call.rule.get();
  ctx.attrs_ = call.attrs;
  ctx.inputs_ = std::move(inputs);
  ctx.outputs_ = std::move(outputs);
  ctx.saved_ = std::move(saved);
  ctx.in_forward_ = false;
  ctx.non_differentiable_ = call.non_differentiable;
  ctx.needs_ = std::move(needs);
  return ctx;
}

}  // namespace detail

// --- FunctionContext ---------------------------------------------------------

void FunctionContext::save_for_backward(std::vector<Tensor> tensors) {
  if (!in_forward_) throw Error(detail::custom_what(name()) + ": save_for_backward is only allowed in forward");
  saved_ = std::move(tensors);
}

void FunctionContext::mark_non_differentiable(std::vector<size_t> outputs) {
  if (!in_forward_) throw Error(detail::custom_what(name()) + ": mark_non_differentiable is only allowed in forward");
  non_differentiable_.insert(non_differentiable_.end(), outputs.begin(), outputs.end());
}

const std::string& FunctionContext::name() const { return rule_->rules.name; }

bool FunctionContext::has_attr(std::string_view name) const {
  return std::any_of(attrs_.begin(), attrs_.end(), [&](const auto& a) { return a.first == name; });
}

template <typename T>
T FunctionContext::attr(std::string_view attr_name) const {
  for (const auto& [key, value] : attrs_) {
    if (key != attr_name) continue;
    if (const T* v = std::get_if<T>(&value)) return *v;
    if constexpr (std::is_same_v<T, double>) {
      if (const int64_t* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
    }
    throw Error(detail::custom_what(name()) + ": attribute '" + std::string(attr_name) + "' has another kind");
  }
  throw Error(detail::custom_what(name()) + ": no attribute '" + std::string(attr_name) + "'");
}

template int64_t FunctionContext::attr<int64_t>(std::string_view) const;
template double FunctionContext::attr<double>(std::string_view) const;
template bool FunctionContext::attr<bool>(std::string_view) const;
template std::string FunctionContext::attr<std::string>(std::string_view) const;
template std::vector<int64_t> FunctionContext::attr<std::vector<int64_t>>(std::string_view) const;
template std::vector<double> FunctionContext::attr<std::vector<double>>(std::string_view) const;

const std::vector<Tensor>& FunctionContext::saved() const { return saved_; }

bool FunctionContext::needs_input_grad(size_t k) const {
  if (k >= inputs_.size()) {
    throw IndexError(detail::custom_what(name()) + ": needs_input_grad(" + std::to_string(k) + ") of a call with " +
                     std::to_string(inputs_.size()) + " inputs");
  }
  return needs_.empty() || needs_[k] != 0;
}

// --- CustomFunction ----------------------------------------------------------

CustomFunction::CustomFunction(CustomFunctionRules rules) {
  if (rules.name.empty()) throw ValueError("CustomFunction: a custom function needs a name (used in its errors)");
  const std::string what = detail::custom_what(rules.name);
  if (!rules.forward) throw ValueError(what + ": no forward");
  if (!rules.backward && !rules.jvp) throw ValueError(what + ": needs a backward rule, a jvp rule, or both");
  static std::atomic<uint64_t> next_id{1};
  auto rule = std::make_shared<detail::CustomRule>();
  rule->rules = std::move(rules);
  rule->id = next_id.fetch_add(1, std::memory_order_relaxed);
  rule_ = std::move(rule);
}

const std::string& CustomFunction::name() const {
  static const std::string none;
  return rule_ != nullptr ? rule_->rules.name : none;
}

bool CustomFunction::first_order_only() const { return rule_ != nullptr && rule_->rules.first_order_only; }

std::vector<Tensor> CustomFunction::operator()(const std::vector<Tensor>& inputs, const FunctionAttrs& attrs) const {
  if (rule_ == nullptr) throw Error("CustomFunction: called an empty (default-constructed) custom function");
  const std::string what = detail::custom_what(name());
  if (inputs.empty()) throw ValueError(what + ": needs at least one input");
  if (int n = rule_->rules.n_inputs; n >= 0 && inputs.size() != static_cast<size_t>(n)) {
    throw ValueError(what + ": takes " + std::to_string(n) + " input(s), got " + std::to_string(inputs.size()));
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!inputs[k].defined()) throw Error(what + ": input " + std::to_string(k) + " is undefined");
  }
  for (size_t k = 0; k < attrs.size(); ++k) {
    const std::string& key = attrs[k].first;
    if (key.empty() || key == "function" || key == "output_dtypes") {
      throw ValueError(what + ": attribute name '" + key + "' is reserved or empty");
    }
    for (size_t j = 0; j < k; ++j) {
      if (attrs[j].first == key) throw ValueError(what + ": attribute '" + key + "' given twice");
    }
  }
  return detail::trace_custom_call(*this, inputs, attrs, [&] {
    return detail::differentiated_now(inputs) ? detail::call_recorded(rule_, inputs, attrs)
                                              : detail::call_plain(*rule_, inputs, attrs);
  });
}

Tensor CustomFunction::operator()(const Tensor& input) const {
  std::vector<Tensor> outputs = (*this)(std::vector<Tensor>{input});
  if (outputs.size() != 1) {
    throw Error(detail::custom_what(name()) + ": called with one tensor, it returned " +
                std::to_string(outputs.size()) + " outputs (call it with a vector)");
  }
  return outputs.front();
}

CustomFunction custom_vjp(TensorsFn f, VjpForward fwd, VjpBackward bwd, CustomOptions options) {
  if (!fwd || !bwd) throw ValueError(detail::custom_what(options.name) + ": custom_vjp needs fwd and bwd");
  CustomFunctionRules rules;
  rules.name = std::move(options.name);
  rules.first_order_only = options.first_order_only;
  rules.n_inputs = options.n_inputs;
  rules.primal = std::move(f);
  rules.forward = [fwd = std::move(fwd)](FunctionContext& ctx, const std::vector<Tensor>& in) {
    auto [outputs, residuals] = fwd(in);
    ctx.save_for_backward(std::move(residuals));
    return outputs;
  };
  rules.backward = [bwd = std::move(bwd)](FunctionContext& ctx, const std::vector<Tensor>& g) {
    return bwd(ctx.saved(), g);
  };
  return CustomFunction(std::move(rules));
}

CustomFunction custom_jvp(TensorsFn f, JvpRule rule, CustomOptions options) {
  if (!f || !rule) throw ValueError(detail::custom_what(options.name) + ": custom_jvp needs f and a rule");
  CustomFunctionRules rules;
  rules.name = std::move(options.name);
  rules.first_order_only = options.first_order_only;
  rules.n_inputs = options.n_inputs;
  rules.primal = f;
  rules.forward = [f = std::move(f)](FunctionContext&, const std::vector<Tensor>& in) { return f(in); };
  rules.jvp = [rule = std::move(rule)](FunctionContext& ctx, const std::vector<Tensor>& t) {
    return rule(ctx.inputs(), ctx.outputs(), t);
  };
  return CustomFunction(std::move(rules));
}

void register_custom_function(const CustomFunction& f) {
  if (!f.defined()) throw ValueError("register_custom_function: an empty custom function");
  std::lock_guard lock(detail::registry_mutex());
  auto [it, fresh] = detail::registry().try_emplace(f.name(), detail::CustomAccess::rule_of(f));
  if (!fresh && it->second != detail::CustomAccess::rule_of(f)) {
    throw ValueError("register_custom_function: another custom function is already registered as '" + f.name() + "'");
  }
}

std::optional<CustomFunction> find_custom_function(std::string_view name) {
  std::lock_guard lock(detail::registry_mutex());
  auto it = detail::registry().find(name);
  if (it == detail::registry().end()) return std::nullopt;
  return detail::CustomAccess::function_of(it->second);
}

}  // namespace strata
