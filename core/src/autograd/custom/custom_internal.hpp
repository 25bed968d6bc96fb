// custom_internal.hpp — what the parts of custom functions share:
//   custom_function.cpp  the public API: contexts, definitions, the call
//                        (forward, recording), the name registry
//   custom_rules.cpp     the recorded node's derivative rules: the user's
//                        rules run in the right state, derived rules,
//                        first-order-only results, checks of what rules return
#pragma once

#include "autograd/autocast.hpp"
#include "runtime/dispatch/op.hpp"

#include <strata/custom_function.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata::detail {

/// A custom function's definition, shared by its handles and by the nodes
/// and traced graphs that call it.
struct CustomRule {
  CustomFunctionRules rules;
  uint64_t id = 0;  // tells two definitions of one name apart in a traced graph
};

/// Where a saved tensor comes from: an input or output of the call (kept
/// by the node, with history) or a value the forward computed.
enum class SavedFrom : uint8_t { input, output, value };
struct SavedRef {
  SavedFrom from = SavedFrom::value;
  size_t index = 0;  // into the inputs, the outputs, or CustomCall::values
};

/// What one recorded call keeps for its rules (the node's closure).
struct CustomCall {
  std::shared_ptr<const CustomRule> rule;
  FunctionAttrs attrs;
  std::vector<SavedRef> saved;
  std::vector<Tensor> values;  // saved tensors that are neither inputs nor outputs
  std::vector<size_t> non_differentiable;
  RngState rng;               // to run the forward again (saved values under higher order)
  AutocastSnapshot autocast;  // rules run under the forward's autocast state
};

/// Builds contexts (FunctionContext's constructor is private).
struct CustomAccess {
  static FunctionContext forward_context(const CustomRule& rule, const FunctionAttrs& attrs,
                                         const std::vector<Tensor>& inputs);
  /// Moves what a forward left in `ctx` into `call`, given the outputs it
  /// returned; checks the outputs (count, defined) naming the function.
  static void finish_forward(FunctionContext& ctx, const std::vector<Tensor>& outputs, CustomCall& call);
  /// A context for a rule: the call's inputs and outputs as the rule sees
  /// them, and `saved` resolved.
  static FunctionContext rule_context(const CustomCall& call, std::vector<Tensor> inputs, std::vector<Tensor> outputs,
                                      std::vector<Tensor> saved, std::vector<uint8_t> needs);
  static const std::shared_ptr<const CustomRule>& rule_of(const CustomFunction& f) { return f.rule_; }
  static CustomFunction function_of(std::shared_ptr<const CustomRule> rule) {
    CustomFunction f;
    f.rule_ = std::move(rule);
    return f;
  }
};

/// The node's reverse and forward rules (custom_rules.cpp).
std::vector<Tensor> custom_node_vjp(const GradContext& c);
std::vector<Tensor> custom_node_jvp(const GradContext& c);

/// Whether an op on `tensors` would be recorded on a level recording now or
/// carry a tangent of an active forward level: whether what is computed
/// from them now is differentiated.
bool differentiated_now(std::span<const Tensor> tensors);

/// The error prefix for function `name`: "custom function 'name'".
std::string custom_what(const std::string& name);

}  // namespace strata::detail
