// plugin_ops.cpp — ops a plugin defines (host service register_op).
//
// A plugin-defined op becomes an ordinary OpDef: its shape rule and its
// derivatives are the plugin's callbacks, reached through OpDef::plugin_op.
// Derivatives are written with call_op, which dispatches like any public op
// (and is therefore recorded), so a plugin's op is differentiable to any
// order by the same engine. Tensors cross the boundary as strata_value
// handles that live in a ValueArena for the duration of one rule.
#include "runtime/plugins/plugin_host_internal.hpp"

#include "base/logging.hpp"
#include "runtime/dispatch/abi_attrs.hpp"
#include "runtime/dispatch/op.hpp"

#include <strata/error.hpp>
#include <strata/plugin/strata_plugin.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <unordered_set>

namespace strata::detail {

namespace {

using plugin::fail;

// --- Plugin-defined ops ------------------------------------------------------------

struct PluginOp {
  std::string name;  // "acme::swiglu"
  std::string plugin;
  std::vector<AttrDecl> attrs;
  strata_infer_fn infer = nullptr;
  strata_derivative_fn vjp = nullptr;
  strata_derivative_fn jvp = nullptr;
  void* user_data = nullptr;
  std::string doc;
  strata_batch_fn batch = nullptr;  // its batching rule (2.6)
  bool domain_declared = false;  // its schema gave a test domain (2.3)
  /// Set when the core refused the plugin after its init: the op stays in
  /// the registry (ids are stable) but every call is refused.
  std::atomic<bool> retired{false};
};

std::vector<PluginOp*>& plugin_ops() {
  static auto* v = new std::vector<PluginOp*>();
  return *v;
}

const PluginOp& plugin_op_of(const OpDef& op) { return *static_cast<const PluginOp*>(op.plugin_op); }

/// The fields every call of a plugin op's rules carries (shape rule, VJP,
/// JVP): the op, its attributes, the plugin's user data and the error.
template <class Args>
Args rule_args(const PluginOp& po, const AttrViews& attrs, strata_error& err) {
  Args args{};
  args.struct_size = sizeof(args);
  args.op = po.name.c_str();
  args.attrs = attrs.data();
  args.n_attrs = attrs.count();
  args.user_data = po.user_data;
  args.error = &err;
  return args;
}

void plugin_prepare(OpCall& call) {
  const PluginOp& po = plugin_op_of(*call.op);
  if (po.retired.load(std::memory_order_acquire)) {
    throw DeviceError(call.describe() + ": the op's plugin \"" + po.plugin + "\" was refused after its init");
  }
  std::array<strata_tensor_meta, kMaxInputs> in_meta{};
  std::array<const strata_tensor_meta*, kMaxInputs> in_ptr{};
  for (int k = 0; k < call.n_inputs; ++k) {
    strata_tensor_meta& m = in_meta[static_cast<size_t>(k)];
    m.struct_size = sizeof(m);
    m.dtype = static_cast<strata_dtype>(call.in(k).dtype());
    m.rank = static_cast<int32_t>(call.in(k).dim());
    for (int32_t d = 0; d < m.rank; ++d) m.shape[d] = call.in(k).shape()[static_cast<size_t>(d)];
    in_ptr[static_cast<size_t>(k)] = &m;
  }
  std::array<strata_tensor_meta, kMaxOutputs> out_meta{};
  std::array<strata_tensor_meta*, kMaxOutputs> out_ptr{};
  for (int k = 0; k < call.n_outputs; ++k) {
    out_meta[static_cast<size_t>(k)].struct_size = sizeof(strata_tensor_meta);
    out_meta[static_cast<size_t>(k)].dtype = STRATA_DTYPE_COUNT;  // must be set by the rule
    out_ptr[static_cast<size_t>(k)] = &out_meta[static_cast<size_t>(k)];
  }
  AttrViews attrs(call.attrs);
  strata_error err = fresh_error();
  auto args = rule_args<strata_infer_args>(po, attrs, err);
  args.inputs = in_ptr.data();
  args.n_inputs = call.n_inputs;
  args.outputs = out_ptr.data();
  args.n_outputs = call.n_outputs;
  if (strata_status st = po.infer(&args); st != STRATA_OK) {
    throw ValueError(call.describe() + ": " + (err.message[0] != '\0' ? message_text(err) : "the shape rule failed"));
  }
  for (int k = 0; k < call.n_outputs; ++k) {
    const strata_tensor_meta& m = out_meta[static_cast<size_t>(k)];
    if (!is_dtype_value(m.dtype)) {
      throw ValueError(call.describe() + ": the shape rule of " + po.name + " gave output " + std::to_string(k) +
                       " dtype " + std::to_string(m.dtype) + ", which this core cannot store");
    }
    if (m.rank < 0 || m.rank > STRATA_MAX_RANK) {
      throw ValueError(call.describe() + ": the shape rule of " + po.name + " gave output " + std::to_string(k) +
                       " rank " + std::to_string(m.rank));
    }
    for (int32_t d = 0; d < m.rank; ++d) {
      if (m.shape[d] < 0) throw ValueError(call.describe() + ": the shape rule gave a negative dimension");
    }
    call.out(k).dtype = static_cast<DType>(m.dtype);
    call.out(k).set_shape({m.shape, static_cast<size_t>(m.rank)});
  }
}

// --- Values and call_op --------------------------------------------------------------

/// The tensors of one derivative rule: borrowed (the rule's inputs, outputs
/// and seeds) and owned (call_op results). Arenas nest per thread.
class ValueArena {
 public:
  ValueArena() { stack().push_back(this); }
  ~ValueArena() { stack().pop_back(); }
  ValueArena(const ValueArena&) = delete;
  ValueArena& operator=(const ValueArena&) = delete;

  strata_value borrow(const Tensor& t) {
    if (!t.defined()) return nullptr;
    auto* p = const_cast<Tensor*>(&t);
    known_.insert(p);
    return reinterpret_cast<strata_value>(p);
  }
  strata_value own(Tensor t) {
    Tensor& stored = owned_.emplace_back(std::move(t));
    known_.insert(&stored);
    return reinterpret_cast<strata_value>(&stored);
  }
  /// The tensor behind a handle this arena (or an enclosing one) knows.
  static const Tensor* resolve(strata_value v) {
    for (auto it = stack().rbegin(); it != stack().rend(); ++it) {
      if ((*it)->known_.contains(reinterpret_cast<Tensor*>(v))) return reinterpret_cast<const Tensor*>(v);
    }
    return nullptr;
  }
  static ValueArena* current() { return stack().empty() ? nullptr : stack().back(); }

  /// Keeps the first exception a call_op of this rule threw, and its
  /// message ("call_op(strata::mul): ..."), so that the rule's failure can
  /// keep its type.
  void inner_failed(std::exception_ptr e, std::string message) {
    if (inner_ != nullptr) return;
    inner_ = std::move(e);
    inner_message_ = std::move(message);
  }
  const std::exception_ptr& inner() const { return inner_; }
  const std::string& inner_message() const { return inner_message_; }

 private:
  static std::vector<ValueArena*>& stack() {
    thread_local std::vector<ValueArena*> arenas;
    return arenas;
  }
  std::deque<Tensor> owned_;  // stable addresses
  std::unordered_set<Tensor*> known_;
  std::exception_ptr inner_;
  std::string inner_message_;
};

/// Throws the first of E... that `e` is (a derived type listed before its
/// base), with `message`; strata::Error when it is none of them.
template <class E, class... Rest>
[[noreturn]] void throw_like(const std::exception& e, const std::string& message) {
  if (dynamic_cast<const E*>(&e) != nullptr) throw E(message);
  if constexpr (sizeof...(Rest) > 0) {
    throw_like<Rest...>(e, message);
  } else {
    throw Error(message);
  }
}

/// Throws an exception of `inner`'s type (DeviceError, OutOfMemoryError,
/// ShapeError, ...; strata::Error for anything else) with `message`.
[[noreturn]] void rethrow_as(const std::exception_ptr& inner, const std::string& message) {
  try {
    std::rethrow_exception(inner);
  } catch (const std::exception& e) {
    throw_like<DeviceLostError, DeviceError, OutOfMemoryError, ShapeError, DTypeError, IndexError, ValueError>(
        e, message);
  }
}

}  // namespace

strata_status host_call_op(strata_call_op_args* args) noexcept {
  if (args == nullptr || args->struct_size < STRATA_CALL_OP_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  std::string op_name = args->op != nullptr ? args->op : "(null)";
  ValueArena* arena = ValueArena::current();
  if (arena == nullptr) {
    return fail(args->error, STRATA_ERROR_INVALID_ARGUMENT,
                "call_op(%s): only available inside a plugin op's derivative rule", op_name.c_str());
  }
  try {
    const OpDef* op = &callable_op(op_name);
    if (args->n_inputs < 0 || args->n_inputs > kMaxInputs || (args->n_inputs > 0 && args->inputs == nullptr)) {
      throw ValueError(std::to_string(args->n_inputs) + " inputs");
    }
    std::array<Tensor, kMaxInputs> inputs;
    for (int32_t k = 0; k < args->n_inputs; ++k) {
      const Tensor* t = ValueArena::resolve(args->inputs[k]);
      if (t == nullptr) throw ValueError("input " + std::to_string(k) + " is not a value the host handed out");
      inputs[static_cast<size_t>(k)] = *t;
    }
    Attrs attrs;
    if (args->n_attrs < 0 || (args->n_attrs > 0 && args->attrs == nullptr)) throw ValueError("bad attribute array");
    for (int32_t k = 0; k < args->n_attrs; ++k) attrs.push_back(attr_from_abi(args->attrs[k], "call_op(" + op_name + ")"));
    OpResult result = dispatch_span(*op, {inputs.data(), static_cast<size_t>(args->n_inputs)},
                                    attrs.empty() ? nullptr : &attrs);
    if (args->outputs == nullptr || args->n_outputs < result.size()) {
      throw ValueError("room for " + std::to_string(args->n_outputs) + " outputs, the op has " +
                       std::to_string(result.size()));
    }
    for (int k = 0; k < result.size(); ++k) args->outputs[k] = arena->own(std::move(result[k]));
    return STRATA_OK;
  } catch (const std::exception& e) {
    arena->inner_failed(std::current_exception(), "call_op(" + op_name + "): " + e.what());
    const strata_status status = dynamic_cast<const OutOfMemoryError*>(&e) != nullptr ? STRATA_ERROR_OUT_OF_MEMORY
                                 : dynamic_cast<const DeviceError*>(&e) != nullptr ? STRATA_ERROR_DEVICE
                                                                                     : STRATA_ERROR_INVALID_ARGUMENT;
    return fail(args->error, status, "call_op(%s): %s", op_name.c_str(), e.what());
  }
}

namespace {

/// Runs a plugin's VJP (reverse) or JVP (forward) callback.
std::vector<Tensor> plugin_derivative(const GradContext& ctx, bool reverse) {
  if (ctx.op == nullptr || ctx.op->plugin_op == nullptr) {
    throw Error("a plugin op's derivative rule ran without its op (GradContext::op is not set)");
  }
  const PluginOp& po = plugin_op_of(*ctx.op);
  strata_derivative_fn fn = reverse ? po.vjp : po.jvp;
  ValueArena arena;
  std::vector<strata_value> inputs, outputs, seeds;
  for (const Tensor& t : ctx.inputs) inputs.push_back(arena.borrow(t));
  for (const Tensor& t : ctx.outputs) outputs.push_back(arena.borrow(t));
  for (const Tensor& t : ctx.grads) seeds.push_back(arena.borrow(t));
  size_t n_results = reverse ? ctx.inputs.size() : ctx.outputs.size();
  std::vector<strata_value> results(n_results, nullptr);
  std::vector<uint8_t> needed(ctx.inputs.size(), 1);
  for (size_t k = 0; k < needed.size(); ++k) needed[k] = ctx.needs(static_cast<int>(k)) ? 1 : 0;
  AttrViews attrs(ctx.attrs);
  strata_error err = fresh_error();
  auto args = rule_args<strata_derivative_args>(po, attrs, err);
  args.inputs = inputs.data();
  args.n_inputs = static_cast<int32_t>(inputs.size());
  args.outputs = outputs.data();
  args.n_outputs = static_cast<int32_t>(outputs.size());
  args.seeds = seeds.data();
  args.n_seeds = static_cast<int32_t>(seeds.size());
  args.results = results.data();
  args.n_results = static_cast<int32_t>(n_results);
  args.needed = reverse ? needed.data() : nullptr;
  args.host = &host_api();
  if (strata_status st = fn(&args); st != STRATA_OK) {
    // A refusal of an op the rule called keeps its type (a missing kernel
    // under the "error" policy stays a DeviceError) and is named even when
    // the plugin's message does not pass it on.
    std::string message = po.name + (reverse ? " VJP" : " JVP") + " (plugin " + po.plugin + "): " + message_of(st, err);
    if (arena.inner() == nullptr) throw Error(message);
    const std::string& inner = arena.inner_message();
    if (message.find(inner.substr(0, inner.find(')') + 1)) == std::string::npos) message += "; " + inner;
    rethrow_as(arena.inner(), message);
  }
  // Each result must fit what it is the derivative of: a VJP's gradient
  // its input, a JVP's tangent its output (shape, dtype and device, as the
  // engine would otherwise carry a misfit into grad() or the next rule).
  const std::span<const Tensor> like = reverse ? ctx.inputs : ctx.outputs;
  const std::string who = po.name + (reverse ? " VJP" : " JVP") + " (plugin " + po.plugin + "): ";
  const char* what = reverse ? "gradient" : "tangent";
  const char* of = reverse ? "input" : "output";
  std::vector<Tensor> out(n_results);
  for (size_t k = 0; k < n_results; ++k) {
    if (results[k] == nullptr) continue;
    const Tensor* t = ValueArena::resolve(results[k]);
    if (t == nullptr) throw Error(who + "result " + std::to_string(k) + " is not a value the host handed out");
    if (!is_differentiable(like[k].dtype())) continue;  // no gradient flows to an integer or bool input
    const std::string which = std::string(" for ") + of + " " + std::to_string(k) + " ";
    if (t->sizes() != like[k].sizes()) {
      throw ShapeError(who + "returned a " + what + " of shape " + shape_string(t->shape()) + which + "of shape " +
                       shape_string(like[k].shape()));
    }
    if (t->dtype() != like[k].dtype()) {
      throw DTypeError(who + "returned a " + what + " of dtype " + std::string(dtype_name(t->dtype())) + which +
                       "of dtype " + std::string(dtype_name(like[k].dtype())));
    }
    if (t->device() != like[k].device()) {
      throw DeviceError(who + "returned a " + what + " on " + t->device().str() + which + "on " +
                        like[k].device().str());
    }
    out[k] = *t;
  }
  return out;
}

std::vector<Tensor> plugin_vjp(const GradContext& ctx) { return plugin_derivative(ctx, true); }

/// Runs a plugin op's batching rule (strata_op_schema::batch, 2.6): the
/// outputs with the lanes in dim 0, or nothing when the plugin declined.
std::vector<Tensor> plugin_batch(const OpDef& op, std::span<const Tensor> inputs, std::span<const uint8_t> batched,
                                 int64_t lanes, const Attrs* call_attrs) {
  const PluginOp& po = plugin_op_of(op);
  const std::string who = po.name + " batching rule (plugin " + po.plugin + "): ";
  ValueArena arena;
  std::vector<strata_value> in;
  for (const Tensor& t : inputs) in.push_back(arena.borrow(t));
  std::vector<strata_value> results(static_cast<size_t>(op.n_outputs), nullptr);
  AttrViews attrs(call_attrs);
  strata_error err = fresh_error();
  auto args = rule_args<strata_batch_args>(po, attrs, err);
  args.inputs = in.data();
  args.batched = batched.data();
  args.n_inputs = static_cast<int32_t>(in.size());
  args.lanes = lanes;
  args.results = results.data();
  args.n_results = static_cast<int32_t>(results.size());
  args.host = &host_api();
  if (strata_status st = po.batch(&args); st != STRATA_OK) {
    std::string message = who + message_of(st, err);
    if (arena.inner() == nullptr) throw Error(message);
    rethrow_as(arena.inner(), message + "; " + arena.inner_message());
  }
  if (std::all_of(results.begin(), results.end(), [](strata_value v) { return v == nullptr; })) return {};
  // Their shapes and dtypes are checked against the op's shape rule by the
  // vmap driver (ops/batching.cpp, batched_outputs), naming this rule.
  std::vector<Tensor> out;
  for (size_t k = 0; k < results.size(); ++k) {
    const Tensor* t = results[k] != nullptr ? ValueArena::resolve(results[k]) : nullptr;
    if (t == nullptr) {
      throw Error(who + "result " + std::to_string(k) +
                  (results[k] == nullptr ? " is NULL" : " is not a value the host handed out") +
                  " (leave every result NULL to decline)");
    }
    out.push_back(*t);
  }
  return out;
}
std::vector<Tensor> plugin_jvp(const GradContext& ctx) { return plugin_derivative(ctx, false); }

bool valid_op_part(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_')) {
      return false;
    }
  }
  return true;
}

/// Who holds the op table: "312 of the core's, 470 of plugin a, ...".
std::string op_table_census() {
  size_t core = 0;
  std::map<std::string, size_t> by_plugin;
  for (const OpDef* op : all_ops()) {
    if (op->plugin_op == nullptr) {
      ++core;
    } else {
      ++by_plugin[plugin_op_of(*op).plugin];
    }
  }
  std::string out = std::to_string(core) + " of the core's";
  for (const auto& [plugin, n] : by_plugin) out += ", " + std::to_string(n) + " of plugin " + plugin;
  return out;
}

}  // namespace

strata_status host_register_op(const strata_op_schema* schema, strata_error* error) noexcept {
  if (init_context().plugin_name == nullptr) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "register_op: only a plugin's init may register ops");
  }
  const std::string& plugin = *init_context().plugin_name;
  auto refuse = [&](const std::string& why) {
    init_context().info->warnings.push_back("register_op: " + why);
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "register_op: %s", why.c_str());
  };
  try {
    if (schema == nullptr || schema->struct_size < STRATA_OP_SCHEMA_MIN_SIZE) {
      return refuse("schema struct_size " + std::to_string(schema != nullptr ? schema->struct_size : 0) +
                    " below the minimum " + std::to_string(STRATA_OP_SCHEMA_MIN_SIZE));
    }
    std::string name = schema->name != nullptr ? schema->name : "";
    size_t sep = name.find("::");
    if (sep == std::string::npos || !valid_op_part(name.substr(sep + 2))) {
      return refuse("op name \"" + name + "\" must be \"" + plugin + "::<op>\" (lower case, digits, _)");
    }
    if (plugin == "strata") {
      return refuse("op \"" + name + "\": a plugin named \"strata\" would define ops in the core's own namespace "
                    "(strata::), which only the core defines; rename the plugin");
    }
    if (name.substr(0, sep) != plugin) {
      return refuse("op \"" + name + "\" lies in namespace \"" + name.substr(0, sep) + "\", but plugin \"" + plugin +
                    "\" may only define ops in \"" + plugin + "::\"");
    }
    if (find_op(name) != nullptr) return refuse("op \"" + name + "\" is already registered");
    if (all_ops().size() >= kMaxOps) {
      // The table is fixed (dispatch reads it without a lock). The plugin is
      // refused as a whole: loaded without some of its ops, it would fail
      // later and further from the cause.
      *init_context().refusal = "its op \"" + name + "\" does not fit the op table, which holds " +
                                std::to_string(kMaxOps) + " ops (" + op_table_census() +
                                "); remove a plugin that defines ops, or disable one (plugins.disabled)";
      return refuse(*init_context().refusal);
    }
    if (schema->version < 1) return refuse(name + ": version must be >= 1");
    // strata_op_schema promises 1..4 inputs and 1..2 outputs; the core's own
    // ops may have more (adam_step: 3 outputs; fused_elementwise: 8 and 6).
    constexpr int kMaxPluginOpInputs = 4, kMaxPluginOpOutputs = 2;
    if (schema->n_inputs < 1 || schema->n_inputs > kMaxPluginOpInputs || schema->n_outputs < 1 ||
        schema->n_outputs > kMaxPluginOpOutputs) {
      return refuse(name + ": " + std::to_string(schema->n_inputs) + " inputs and " +
                    std::to_string(schema->n_outputs) + " outputs (1.." + std::to_string(kMaxPluginOpInputs) +
                    " and 1.." + std::to_string(kMaxPluginOpOutputs) + " supported)");
    }
    if (schema->infer == nullptr) return refuse(name + ": no shape rule (infer)");
    // 2.3: the test domain, when the schema is long enough to carry it.
    TestDomain domain;
    bool domain_declared = false;
    if (schema->struct_size >= STRATA_SIZE_UP_TO(strata_op_schema, domain_high)) {
      const double lo = schema->domain_low, hi = schema->domain_high;
      if (lo != 0.0 || hi != 0.0) {
        if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo < hi)) {
          char text[96];
          std::snprintf(text, sizeof text, "[%g, %g]", lo, hi);
          return refuse(name + ": test domain " + text +
                        " is not an interval (finite, domain_low < domain_high; both 0 for none)");
        }
        domain.lo = lo;
        domain.hi = hi;
        domain_declared = true;
      }
    }
    // 2.5: the batching property.
    bool leading_dims = false;
    if (schema->struct_size >= STRATA_SIZE_UP_TO(strata_op_schema, batching)) {
      const int32_t batching = schema->batching;
      if (batching != STRATA_OP_BATCH_LOOP && batching != STRATA_OP_BATCH_LEADING_DIMS) {
        return refuse(name + ": batching " + std::to_string(batching) +
                      " is not a strata_op_batching (STRATA_OP_BATCH_LOOP 0, STRATA_OP_BATCH_LEADING_DIMS 1)");
      }
      leading_dims = batching == STRATA_OP_BATCH_LEADING_DIMS;
    }
    // 2.6: the batching rule.
    strata_batch_fn batch = nullptr;
    if (schema->struct_size >= STRATA_SIZE_UP_TO(strata_op_schema, batch)) batch = schema->batch;
    // Braces, not make_unique's parentheses: clang 14 (the fuzz preset) lacks
    // C++20's parenthesised aggregate initialisation.
    auto po = std::unique_ptr<PluginOp>(new PluginOp{name, plugin, std::vector<AttrDecl>{}, schema->infer, schema->vjp,
                                                     schema->jvp, schema->user_data,
                                                     schema->doc != nullptr ? schema->doc : ""});
    if (schema->n_attrs < 0 || (schema->n_attrs > 0 && schema->attrs == nullptr)) {
      return refuse(name + ": bad attribute schema array");
    }
    for (int32_t k = 0; k < schema->n_attrs; ++k) {
      const strata_attr_schema* a = schema->attrs[k];
      if (a == nullptr || a->struct_size < STRATA_ATTR_SCHEMA_MIN_SIZE || a->name == nullptr) {
        return refuse(name + ": attribute schema " + std::to_string(k) + " is malformed (struct_size below " +
                      std::to_string(STRATA_ATTR_SCHEMA_MIN_SIZE) + " or no name)");
      }
      const std::string attr = a->name;
      if (attr.empty()) return refuse(name + ": attribute schema " + std::to_string(k) + " has an empty name");
      if (const int32_t kind = abi_enum(a->kind); kind < STRATA_ATTR_INT || kind > STRATA_ATTR_SCALAR) {
        return refuse(name + ": attribute '" + attr + "' has an unknown kind " + std::to_string(kind) +
                      " (strata_attr_kind: 0.." + std::to_string(static_cast<int>(STRATA_ATTR_SCALAR)) + ")");
      }
      for (const AttrDecl& seen : po->attrs) {
        if (seen.name == attr) return refuse(name + ": attribute '" + attr + "' is declared twice");
      }
      po->attrs.push_back({intern_name(a->name), a->kind, a->required != 0});
    }
    OpDef def{.name = intern_name(name),
              .kind = OpKind::primitive,
              .attrs = po->attrs,  // dispatch holds every call to it (check_declared_attrs)
              .n_inputs = schema->n_inputs,
              .n_outputs = schema->n_outputs,
              .takes_complex = true,  // the plugin's shape rule sees the dtypes and decides
              .prepare = plugin_prepare,
              .batch_leading_dims = leading_dims,
              .plugin_batch = batch != nullptr ? plugin_batch : nullptr,
              .derivative = {.vjp = schema->vjp != nullptr ? plugin_vjp : nullptr,
              .jvp = schema->jvp != nullptr ? plugin_jvp : nullptr},
              .domain = domain,
              .version = schema->version,
              .plugin_op = po.get()};
    po->domain_declared = domain_declared;
    po->batch = batch;
    define_op(def);
    {
      std::lock_guard lock(host_mutex());
      plugin_ops().push_back(po.release());  // lives as long as its OpDef: the process
    }
    init_context().info->ops.push_back(name);
    logger("plugin")->info("{} defined op {} (version {})", plugin, name, schema->version);
    return STRATA_OK;
  } catch (const std::exception& e) {
    return fail(error, STRATA_ERROR_INTERNAL, "register_op: %s", e.what());
  }
}

std::string op_doc(const OpDef& op) { return op.plugin_op != nullptr ? plugin_op_of(op).doc : std::string(); }

bool op_domain_declared(const OpDef& op) { return op.plugin_op == nullptr || plugin_op_of(op).domain_declared; }

void retire_plugin_ops(const std::string& plugin_name) {
  for (PluginOp* po : plugin_ops()) {
    if (po->plugin == plugin_name) po->retired.store(true, std::memory_order_release);
  }
}

}  // namespace strata::detail
