// custom_rules.cpp — the derivative rules of a custom function's node.
//
// The engine calls them as it calls a built-in op's rules, in the recording
// state of the pass: grad mode on only when the result is to be
// differentiated again, the level being computed switched off. So a user
// rule written with Strata ops is recorded on exactly the enclosing levels,
// and perturbations of different levels never mix.
//
// What is derived here:
// - backward from jvp (reverse mode of a custom_jvp): the JVP is linear in
//   the tangents t, so the VJP with g is the gradient of <g, jvp(t)> in t;
// - jvp from backward (forward mode of a custom_vjp): the VJP is linear in
//   the output gradients u, so J·t is the gradient of <backward(u), t> in u
//   (the double-VJP trick).
// Both are computed with a tape of their own and are differentiable again.
// - Saved values the forward computed (neither inputs nor outputs) carry
//   no history; when a rule's result is differentiated again the forward
//   runs once more with recording on, so that they do.
// - A first-order-only rule runs with recording off; its results are then
//   tied to a node whose own rules throw, naming the function, so the error
//   comes only when a second derivative is really taken through them.
#include "autograd/custom/custom_internal.hpp"
#include "autograd/engine/differentiate.hpp"
#include "autograd/engine/nodes.hpp"
#include "autograd/engine/rule_scopes.hpp"

#include "runtime/tensor/tensor_impl.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <algorithm>

namespace strata::detail {

namespace {

const CustomCall& call_of(const GradContext& c) {
  if (c.closure == nullptr) throw Error("custom function: the node's rules were already released");
  return *static_cast<const CustomCall*>(c.closure);
}

const std::string& name_of(const CustomCall& call) { return call.rule->rules.name; }

bool non_differentiable(const CustomCall& call, size_t output) {
  return std::find(call.non_differentiable.begin(), call.non_differentiable.end(), output) !=
         call.non_differentiable.end();
}

/// One tensor per `like` entry, each of its shape and device: what a rule
/// returns is checked before anything uses it. A dtype that differs is
/// converted; entries for non-floating tensors are dropped.
std::vector<Tensor> check_results(const std::string& name, const char* rule, const char* what, const char* of,
                                  std::vector<Tensor> results, const std::vector<Tensor>& like) {
  const std::string who = custom_what(name) + ": " + rule;
  if (results.size() != like.size()) {
    throw Error(who + " returned " + std::to_string(results.size()) + " " + what + "s for " +
                std::to_string(like.size()) + " " + of + "s (one per " + of + "; an undefined tensor for none)");
  }
  for (size_t k = 0; k < results.size(); ++k) {
    Tensor& r = results[k];
    if (!r.defined()) continue;
    if (!is_differentiable(like[k].dtype())) {
      r = Tensor();
      continue;
    }
    if (r.sizes() != like[k].sizes()) {
      throw ShapeError(who + " returned a " + what + " of shape " + shape_string(r.shape()) + " for " + of + " " +
                       std::to_string(k) + " of shape " + shape_string(like[k].shape()));
    }
    if (r.device() != like[k].device()) {
      throw DeviceError(who + " returned a " + what + " on " + r.device().str() + " for " + of + " " +
                        std::to_string(k) + " on " + like[k].device().str());
    }
    if (r.dtype() != like[k].dtype()) r = r.to(like[k].dtype());
  }
  return results;
}

std::vector<Tensor> checked_gradients(const std::string& name, std::vector<Tensor> grads,
                                      const std::vector<Tensor>& inputs) {
  return check_results(name, "backward", "gradient", "input", std::move(grads), inputs);
}

std::vector<Tensor> checked_tangents(const std::string& name, std::vector<Tensor> tangents,
                                     const std::vector<Tensor>& outputs) {
  return check_results(name, "jvp", "tangent", "output", std::move(tangents), outputs);
}

/// The saved values, computed again by running the forward with recording
/// on (and the first run's generator and autocast state), so that they carry
/// their history on the levels recording now.
std::vector<Tensor> recomputed_values(const CustomCall& call, const std::vector<Tensor>& inputs) {
  ReplayState replay(&call.rng, call.autocast);
  FunctionContext ctx = CustomAccess::forward_context(*call.rule, call.attrs, inputs);
  std::vector<Tensor> outputs = call.rule->rules.forward(ctx, inputs);
  CustomCall again;
  CustomAccess::finish_forward(ctx, outputs, again);
  bool same = again.saved.size() == call.saved.size();
  for (size_t k = 0; same && k < call.saved.size(); ++k) same = again.saved[k].from == call.saved[k].from;
  if (!same) {
    throw Error(custom_what(name_of(call)) +
                ": its forward saved other tensors when run again for a higher-order derivative (it must be "
                "deterministic)");
  }
  return again.values;
}

/// FunctionContext::saved() as a rule sees it.
std::vector<Tensor> resolve_saved(const CustomCall& call, const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& outputs) {
  bool any_value = std::any_of(call.values.begin(), call.values.end(), [](const Tensor& t) { return t.defined(); });
  std::vector<Tensor> values = any_value && differentiated_now(inputs) ? recomputed_values(call, inputs) : call.values;
  std::vector<Tensor> saved;
  saved.reserve(call.saved.size());
  for (const SavedRef& ref : call.saved) {
    switch (ref.from) {
      case SavedFrom::input: saved.push_back(inputs[ref.index]); break;
      case SavedFrom::output: saved.push_back(outputs[ref.index]); break;
      case SavedFrom::value: saved.push_back(values[ref.index]); break;
    }
  }
  return saved;
}

FunctionContext context(const CustomCall& call, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                        std::vector<uint8_t> needs) {
  return CustomAccess::rule_context(call, inputs, outputs, resolve_saved(call, inputs, outputs), std::move(needs));
}

/// Zeros shaped like each floating tensor of `like` (undefined for the rest).
std::vector<Tensor> zeros_for(const std::vector<Tensor>& like) {
  std::vector<Tensor> z(like.size());
  for (size_t k = 0; k < like.size(); ++k) {
    if (is_differentiable(like[k].dtype())) z[k] = zeros_like(like[k]);
  }
  return z;
}

/// The input gradients, by the backward rule or by transposing jvp.
std::vector<Tensor> input_gradients(const CustomCall& call, const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads,
                                    const std::vector<uint8_t>& needs) {
  const CustomFunctionRules& rules = call.rule->rules;
  FunctionContext ctx = context(call, inputs, outputs, needs);
  if (rules.backward) return checked_gradients(rules.name, rules.backward(ctx, grads), inputs);
  std::vector<bool> wrt(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) wrt[k] = needs.empty() || needs[k] != 0;
  auto tangents_out = [&](const std::vector<Tensor>& t) { return checked_tangents(rules.name, rules.jvp(ctx, t), outputs); };
  return pullback(tangents_out, zeros_for(inputs), wrt, grads);
}

/// The output tangents, by the jvp rule or by differentiating backward.
std::vector<Tensor> output_tangents(const CustomCall& call, const std::vector<Tensor>& inputs,
                                    const std::vector<Tensor>& outputs, const std::vector<Tensor>& tangents) {
  const CustomFunctionRules& rules = call.rule->rules;
  FunctionContext ctx = context(call, inputs, outputs, {});
  if (rules.jvp) return checked_tangents(rules.name, rules.jvp(ctx, tangents), outputs);
  std::vector<bool> wrt(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) wrt[k] = !non_differentiable(call, k);
  auto input_grads = [&](const std::vector<Tensor>& u) { return checked_gradients(rules.name, rules.backward(ctx, u), inputs); };
  return pullback(input_grads, zeros_for(outputs), wrt, tangents);
}

std::vector<Tensor> first_order_error(const GradContext& c) {
  const auto* name = static_cast<const std::string*>(c.closure);
  throw Error(custom_what(name != nullptr ? *name : std::string("?")) +
              " is first-order only (first_order_only): a higher-order derivative was taken through its derivative "
              "rule, which cannot be differentiated");
}

const OpDef& kFirstOrderResult = define_op({.name = "custom_function_first_order",
                                            .kind = OpKind::join,
                                            .tags = detail::op_tag::autograd,
                                            .dtypes = detail::DTypeFamily::any,
                                            .n_inputs = -1,
                                            .n_outputs = -1,
                                            .derivative = {.vjp = first_order_error,
                                            .jvp = first_order_error}});

/// `results` (computed with recording off) tied to `sources`, the tensors
/// they depend on, through a node whose derivatives are an error.
std::vector<Tensor> first_order_results(const std::string& name, const std::vector<Tensor>& sources,
                                        std::vector<Tensor> results) {
  std::vector<Tensor> inputs;
  for (const Tensor& s : sources) {
    if (s.defined()) inputs.push_back(s);
  }
  std::vector<Tensor> outputs;
  std::vector<size_t> position;
  for (size_t k = 0; k < results.size(); ++k) {
    if (!results[k].defined()) continue;
    outputs.push_back(make_view(results[k], results[k].shape(), results[k].strides(), results[k].offset()));
    position.push_back(k);
  }
  if (outputs.empty()) return results;
  record_node(kFirstOrderResult, inputs, outputs, nullptr, std::make_shared<const std::string>(name));
  for (size_t j = 0; j < outputs.size(); ++j) results[position[j]] = std::move(outputs[j]);
  return results;
}

std::vector<Tensor> concat(std::vector<Tensor> a, const std::vector<Tensor>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

std::vector<Tensor> custom_node_vjp(const GradContext& c) {
  const CustomCall& call = call_of(c);
  const std::vector<Tensor> inputs(c.inputs.begin(), c.inputs.end());
  const std::vector<Tensor> outputs(c.outputs.begin(), c.outputs.end());
  // Zeros for outputs that got no gradient (PyTorch's materialised grads).
  std::vector<Tensor> grads(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!is_differentiable(outputs[k].dtype())) continue;
    bool given = k < c.grads.size() && c.grads[k].defined() && !non_differentiable(call, k);
    grads[k] = given ? c.grads[k] : zeros_like(outputs[k]);
  }
  std::vector<uint8_t> needs(c.needed.begin(), c.needed.end());
  ReplayState autocast(nullptr, call.autocast);
  if (call.rule->rules.first_order_only && autograd_state().grad_enabled) {
    std::vector<Tensor> result;
    {
      AutogradOff off;
      result = input_gradients(call, inputs, outputs, grads, needs);
    }
    return first_order_results(name_of(call), concat(inputs, grads), std::move(result));
  }
  return input_gradients(call, inputs, outputs, grads, needs);
}

std::vector<Tensor> custom_node_jvp(const GradContext& c) {
  const CustomCall& call = call_of(c);
  const CustomFunctionRules& rules = call.rule->rules;
  if (!rules.jvp && rules.first_order_only) {
    throw Error(custom_what(rules.name) +
                " has no jvp rule, and forward mode cannot be derived from a first-order-only backward rule; give it "
                "a jvp rule");
  }
  const std::vector<Tensor> inputs(c.inputs.begin(), c.inputs.end());
  const std::vector<Tensor> outputs(c.outputs.begin(), c.outputs.end());
  std::vector<Tensor> tangents(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!is_differentiable(inputs[k].dtype())) continue;
    tangents[k] = k < c.grads.size() && c.grads[k].defined() ? c.grads[k] : zeros_like(inputs[k]);
  }
  ReplayState autocast(nullptr, call.autocast);
  std::vector<Tensor> result;
  if (rules.first_order_only) {
    {
      AutogradOff off;
      result = output_tangents(call, inputs, outputs, tangents);
    }
    result = first_order_results(rules.name, concat(inputs, tangents), std::move(result));
  } else {
    result = output_tangents(call, inputs, outputs, tangents);
  }
  for (size_t k : call.non_differentiable) result[k] = Tensor();
  return result;
}

}  // namespace strata::detail
