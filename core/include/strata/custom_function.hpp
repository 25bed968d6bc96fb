// custom_function.hpp — user-defined derivative rules.
//
// A custom function is a forward computation plus the rules that
// differentiate it: a backward rule (reverse mode, a vector-Jacobian
// product), a forward-mode rule (jvp, a Jacobian-vector product), or both.
// It is recorded as ONE node of the autograd graph, exactly like a built-in
// op: tapes, backward(), the functional transforms, checkpointing, autocast
// and trace() all see it as one op whose derivatives are the given rules.
//
// Three ways to write one (docs/custom-derivatives.md):
//
//   // 1. A class, as PyTorch's torch.autograd.Function:
//   struct Softplus : strata::Function<Softplus> {
//     static constexpr const char* name = "softplus";
//     static std::vector<Tensor> forward(FunctionContext& ctx, const std::vector<Tensor>& in) {
//       ctx.save_for_backward({in[0]});
//       return {log1p(exp(-abs(in[0]))) + relu(in[0])};
//     }
//     static std::vector<Tensor> backward(FunctionContext& ctx, const std::vector<Tensor>& g) {
//       return {g[0] * sigmoid(ctx.saved()[0])};
//     }
//   };
//   Tensor y = Softplus::apply(x);
//
//   // 2. and 3. Functions, as JAX's custom_vjp and custom_jvp:
//   CustomFunction f = custom_vjp(primal, fwd, bwd, {.name = "softplus"});
//   CustomFunction g = custom_jvp(primal, jvp_rule, {.name = "softplus"});
//
// Rules written with Strata ops are differentiable themselves, so a custom
// function works to any order, under any nesting of tapes and forward mode,
// and perturbations of different levels never mix (each rule runs with the
// level it computes switched off, as built-in rules do). A rule that is not
// differentiable can say so (`first_order_only`): a second derivative taken
// through it is then an Error naming the function.
#pragma once

#include <strata/tensor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace strata {

namespace detail {
struct CustomRule;
struct CustomCall;
struct CustomAccess;
}  // namespace detail

/// A non-tensor argument of a custom function call (a scale, a dimension,
/// a mode name). Passed to the call, read by every rule, and stored in a
/// traced graph's file, so that a loaded graph replays the call exactly.
using FunctionAttr = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>>;
/// Named attributes, in order. Names are unique; "function" and
/// "output_dtypes" are reserved (trace() uses them).
using FunctionAttrs = std::vector<std::pair<std::string, FunctionAttr>>;

/// What a custom function's forward leaves for its rules, and what the
/// rules can read. One context per call.
class FunctionContext {
 public:
  // --- in forward ---------------------------------------------------------

  /// Keeps tensors for the rules (saved() gives them back). Saving an input
  /// or an output of the call keeps its gradient history: when a rule is
  /// differentiated again (higher order) the saved tensor is the input or
  /// output itself, linked to the graph. Other tensors (intermediates the
  /// forward computed) are kept by value; should a rule using them be
  /// differentiated again, the forward runs once more with recording on, so
  /// that they too carry their history (with the generator and autocast
  /// state of the first run). Call once per forward; a second call replaces
  /// the first.
  void save_for_backward(std::vector<Tensor> tensors);
  /// Output `k` is not differentiable (an index, a mask): it carries no
  /// gradient history, and the backward rule receives zeros for it.
  void mark_non_differentiable(std::vector<size_t> outputs);

  // --- everywhere ---------------------------------------------------------

  /// The function's name.
  const std::string& name() const;
  /// The attribute `name` as a T (int64_t, double, bool, std::string,
  /// std::vector<int64_t>, std::vector<double>); an int64_t attribute also
  /// reads as double. Error naming the function and the attribute when it
  /// is missing or of another kind.
  template <typename T>
  T attr(std::string_view name) const;
  bool has_attr(std::string_view name) const;
  const FunctionAttrs& attrs() const { return attrs_; }
  /// The call's inputs. In forward: as passed. In rules: the same tensors,
  /// with their gradient history (so a rule using them is differentiable).
  const std::vector<Tensor>& inputs() const { return inputs_; }

  // --- in rules (backward, jvp) --------------------------------------------

  /// The tensors given to save_for_backward(), in order.
  const std::vector<Tensor>& saved() const;
  /// The call's outputs (linked to the call's node when the rule's result
  /// is differentiated again).
  const std::vector<Tensor>& outputs() const { return outputs_; }
  /// Whether the gradient of input `k` is used by this backward pass; a
  /// backward rule may return an undefined tensor for the others.
  bool needs_input_grad(size_t k) const;

 private:
  friend struct detail::CustomAccess;
  FunctionContext() = default;

  const detail::CustomRule* rule_ = nullptr;
  FunctionAttrs attrs_;
  std::vector<Tensor> inputs_;
  std::vector<Tensor> outputs_;
  std::vector<Tensor> saved_;
  bool in_forward_ = true;
  std::vector<size_t> non_differentiable_;
  std::vector<uint8_t> needs_;
};

/// A rule of a custom function: (context, tensors) -> tensors. forward maps
/// inputs to outputs; backward maps the gradients of the outputs (zeros for
/// outputs that got none) to one gradient per input (undefined = zero);
/// jvp maps one tangent per input (zeros where none) to one tangent per
/// output.
using FunctionRule = std::function<std::vector<Tensor>(FunctionContext& ctx, const std::vector<Tensor>& tensors)>;

/// Everything that defines a custom function.
struct CustomFunctionRules {
  /// Named in every error and in traced graphs; required.
  std::string name{};
  FunctionRule forward{};
  /// Reverse mode. When absent, reverse mode transposes `jvp` (which is
  /// linear in the tangents): the gradient of <grad_out, jvp(t)> in t.
  FunctionRule backward{};
  /// Forward mode. When absent, forward mode differentiates `backward`
  /// with respect to its output gradients (the VJP is linear in them, so
  /// J·t is the gradient of <backward(u), t> in u).
  FunctionRule jvp{};
  /// The rules are not differentiable themselves (they leave Strata ops,
  /// or are simply not meant to be): they run without recording, and a
  /// second derivative taken through their results is an Error naming the
  /// function. First derivatives, in every mode, work as usual.
  bool first_order_only = false;
  /// How many inputs a call takes (-1: any number, at least one); a call
  /// with another count is a ValueError naming the function.
  int n_inputs = -1;
  /// Only for custom_vjp/custom_jvp: what runs when nothing differentiates
  /// the call (no rule will run, so nothing needs saving).
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> primal{};
};

/// A callable custom function (cheap to copy: it shares its rules).
class CustomFunction {
 public:
  CustomFunction() = default;
  /// ValueError when the name is empty, forward is missing, or neither
  /// backward nor jvp is given.
  explicit CustomFunction(CustomFunctionRules rules);

  /// Runs the function on `inputs` (at least one; every one defined) and
  /// records it as one node when an input carries gradient history or a
  /// tangent. The forward runs with recording off. Errors name the
  /// function: an undefined input, an undefined output, an attribute with
  /// a reserved or repeated name.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs, const FunctionAttrs& attrs = {}) const;
  /// One input, one output (for grad(), nth_grad() and friends). Error
  /// naming the function when it returns another number of outputs.
  Tensor operator()(const Tensor& input) const;

  bool defined() const { return rule_ != nullptr; }
  /// "" when undefined.
  const std::string& name() const;
  bool first_order_only() const;
  /// Whether two handles share one definition.
  bool same_as(const CustomFunction& other) const { return rule_ == other.rule_; }

 private:
  friend struct detail::CustomAccess;
  std::shared_ptr<const detail::CustomRule> rule_;
};

/// Options of custom_vjp and custom_jvp.
struct CustomOptions {
  std::string name{};  // required: named in errors and traced graphs
  bool first_order_only = false;
  int n_inputs = -1;  // see CustomFunctionRules::n_inputs
};

using TensorsFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
/// custom_vjp's forward: the outputs and the residuals bwd needs.
using VjpForward = std::function<std::pair<std::vector<Tensor>, std::vector<Tensor>>(const std::vector<Tensor>&)>;
/// custom_vjp's backward: (residuals, gradients of the outputs) -> one
/// gradient per input.
using VjpBackward =
    std::function<std::vector<Tensor>(const std::vector<Tensor>& residuals, const std::vector<Tensor>& grad_outputs)>;
/// custom_jvp's rule: (primals, outputs, tangents of the primals) -> one
/// tangent per output. It must be linear in the tangents.
using JvpRule = std::function<std::vector<Tensor>(const std::vector<Tensor>& primals,
                                                  const std::vector<Tensor>& outputs,
                                                  const std::vector<Tensor>& tangents)>;

/// JAX's custom_vjp: `f` runs when nothing differentiates the call; under
/// differentiation `fwd` runs instead, and `bwd` is the reverse rule
/// (forward mode differentiates `bwd`, see CustomFunctionRules::jvp).
/// Residuals that are inputs or outputs keep their history (see
/// FunctionContext::save_for_backward).
CustomFunction custom_vjp(TensorsFn f, VjpForward fwd, VjpBackward bwd, CustomOptions options);
/// JAX's custom_jvp: `f` computes the outputs, `rule` their tangents;
/// reverse mode transposes the rule (see CustomFunctionRules::backward).
CustomFunction custom_jvp(TensorsFn f, JvpRule rule, CustomOptions options);

/// Registers `f` under its name, so that traced graphs calling it can be
/// saved and loaded (a file cannot hold code: the loading process must
/// register the same name). Registering the same function again is a
/// no-op; another function under a taken name is a ValueError.
void register_custom_function(const CustomFunction& f);
/// The function registered under `name`, if any.
std::optional<CustomFunction> find_custom_function(std::string_view name);

/// PyTorch-style custom function by CRTP. `Derived` declares
///   static constexpr const char* name = "...";
///   static std::vector<Tensor> forward(FunctionContext&, const std::vector<Tensor>&);
/// and at least one of
///   static std::vector<Tensor> backward(FunctionContext&, const std::vector<Tensor>& grad_outputs);
///   static std::vector<Tensor> jvp(FunctionContext&, const std::vector<Tensor>& tangents);
/// and optionally `static constexpr bool first_order_only = true;` and
/// `static constexpr int n_inputs = N;` (calls with another count are refused).
template <typename Derived>
struct Function {
  /// The function's definition (built once), e.g. for register_custom_function.
  static const CustomFunction& function() {
    static const CustomFunction f = make();
    return f;
  }
  static std::vector<Tensor> apply(const std::vector<Tensor>& inputs, const FunctionAttrs& attrs = {}) {
    return function()(inputs, attrs);
  }
  /// One input, one output. Note that `apply({x})` calls this form.
  static Tensor apply(const Tensor& input) { return function()(input); }

 private:
  static CustomFunction make() {
    static_assert(requires { std::string(Derived::name); },
                  "a strata::Function needs `static constexpr const char* name = \"...\";`");
    CustomFunctionRules rules;
    rules.name = Derived::name;
    rules.forward = [](FunctionContext& ctx, const std::vector<Tensor>& in) { return Derived::forward(ctx, in); };
    if constexpr (requires(FunctionContext& c, const std::vector<Tensor>& t) { Derived::backward(c, t); }) {
      rules.backward = [](FunctionContext& ctx, const std::vector<Tensor>& g) { return Derived::backward(ctx, g); };
    }
    if constexpr (requires(FunctionContext& c, const std::vector<Tensor>& t) { Derived::jvp(c, t); }) {
      rules.jvp = [](FunctionContext& ctx, const std::vector<Tensor>& t) { return Derived::jvp(ctx, t); };
    }
    if constexpr (requires { bool(Derived::first_order_only); }) rules.first_order_only = Derived::first_order_only;
    if constexpr (requires { int(Derived::n_inputs); }) rules.n_inputs = Derived::n_inputs;
    return CustomFunction(std::move(rules));
  }
};

extern template int64_t FunctionContext::attr<int64_t>(std::string_view) const;
extern template double FunctionContext::attr<double>(std::string_view) const;
extern template bool FunctionContext::attr<bool>(std::string_view) const;
extern template std::string FunctionContext::attr<std::string>(std::string_view) const;
extern template std::vector<int64_t> FunctionContext::attr<std::vector<int64_t>>(std::string_view) const;
extern template std::vector<double> FunctionContext::attr<std::vector<double>>(std::string_view) const;

}  // namespace strata
