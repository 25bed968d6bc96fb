// optim.cpp — the fused optimizer updates sgd_step, sgd_momentum_step and
// adam_step (docs/ops.md, "Optimizer updates") for f32 and f64: one pass
// over the parameter, its gradient and its state, in place, instead of the
// eight to twelve elementwise kernels of the unfused update.
//
// The contract is bitwise agreement with the op's decomposition: each
// element goes through the decomposition's operations in its order, in the
// parameter's precision, every scalar rounded to that precision first, and
// nothing is fused into an FMA (the plugin builds with -ffp-contract=off).
// The loops run in the widest instruction set loop_isa() allows, which
// changes nothing in the result (IEEE +, −, ×, ÷ and √ are correctly
// rounded at every vector width).
#include "kernel.hpp"
#include "loop_isa.hpp"
#include "strided.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace strata::cpu {
namespace {

/// Element count per thread below which a second thread does not pay.
constexpr int64_t kCostPerElement = 4;

/// The attribute `name`, which the call must have (one scan of its list).
const strata_attr& required(const strata_kernel_call& call, const char* name) {
  const strata_attr* a = plugin::find_attr(call, name);
  if (a == nullptr) throw std::invalid_argument(std::string(call.op) + ": missing attribute '" + name + "'");
  return *a;
}

double required_float(const strata_kernel_call& call, const char* name) {
  return plugin::attr_float_value(call, required(call, name));
}

int64_t required_int(const strata_kernel_call& call, const char* name) {
  return plugin::attr_int_value(call, required(call, name));
}

/// Checks `call` against (T × n_in) -> (T × n_out), every operand compact
/// and of one element count. Returns STRATA_OK or the refusal.
template <class T>
strata_status check_update(const strata_kernel_call* call, const char* op, int n_in, int n_out) {
  if (call == nullptr || call->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) [[unlikely]] {
    return refuse_small_call(call, op);
  }
  strata_dtype dtypes[7];
  for (strata_dtype& d : dtypes) d = Scalar<T>::dtype;
  bool ok = call->n_inputs == n_in && call->n_outputs == n_out && call->inputs != nullptr && call->outputs != nullptr;
  for (int k = 0; ok && k < n_in; ++k) ok = operand_ok(call->inputs[k], Scalar<T>::dtype);
  for (int k = 0; ok && k < n_out; ++k) ok = operand_ok(call->outputs[k], Scalar<T>::dtype);
  if (!ok) [[unlikely]] return refuse_operands(*call, op, dtypes, n_in, dtypes, n_out);
  const int64_t n = plugin::numel(*call->inputs[0]);
  for (int k = 0; k < n_in + n_out; ++k) {
    const strata_tensor& t = k < n_in ? *call->inputs[k] : *call->outputs[k - n_in];
    if (plugin::numel(t) != n || !plugin::is_contiguous(t)) {
      return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: every operand must be compact with the parameter's %lld elements, %s %d is %s", op,
                  static_cast<long long>(n), k < n_in ? "input" : "output", k < n_in ? k : k - n_in,
                  plugin::describe(t).c_str());
    }
  }
  return STRATA_OK;
}

template <class T>
T* at(const strata_tensor& t) {
  return reinterpret_cast<T*>(t.buffer) + t.offset;
}


/// The state output `out` (the parameter, a buffer, a moment) with the
/// input it updates copied into it, unless it is that input itself (the
/// host's usual call: in place). The loops then read and write the outputs
/// only, which keeps them to few enough pointers to vectorise.
template <class T>
T* state(const strata_tensor& in, const strata_tensor& out) {
  T* o = at<T>(out);
  const T* i = at<T>(in);
  if (o != i) std::memcpy(o, i, static_cast<size_t>(plugin::numel(in)) * sizeof(T));
  return o;
}

/// Runs body(i) over [0, n) split across the call's threads, each share in
/// the widest instruction set allowed.
template <class Body>
void update_loop(const strata_kernel_call& call, int64_t n, const Body& body) {
  parallel_for(
      n, kernel_threads(call), [&](int64_t b, int64_t e) { vector_range(b, e, body); }, kCostPerElement);
}

// sgd_step (p, g) -> p: p ← p − (g [+ p·wd])·lr.
template <class T>
strata_status sgd_step(const strata_kernel_call* call) noexcept {
  constexpr const char* op = STRATA_OP_SGD_STEP;
  if (const strata_status s = check_update<T>(call, op, 2, 1); s != STRATA_OK) return s;
  return run_guarded(call->error, op, [&] {
    const T lr = static_cast<T>(required_float(*call, "lr"));
    const double wd_attr = required_float(*call, "weight_decay");
    const T wd = static_cast<T>(wd_attr);
    T* p = state<T>(*call->inputs[0], *call->outputs[0]);
    const T* g = at<T>(*call->inputs[1]);
    const int64_t n = plugin::numel(*call->inputs[0]);
    if (wd_attr != 0.0) {
      update_loop(*call, n, [=](int64_t i) { p[i] = p[i] - (g[i] + p[i] * wd) * lr; });
    } else {
      update_loop(*call, n, [=](int64_t i) { p[i] = p[i] - g[i] * lr; });
    }
    return STRATA_OK;
  });
}

// sgd_momentum_step (p, g, b) -> p, b.
template <class T>
strata_status sgd_momentum_step(const strata_kernel_call* call) noexcept {
  constexpr const char* op = STRATA_OP_SGD_MOMENTUM_STEP;
  if (const strata_status s = check_update<T>(call, op, 3, 2); s != STRATA_OK) return s;
  return run_guarded(call->error, op, [&] {
    const T lr = static_cast<T>(required_float(*call, "lr"));
    const double wd_attr = required_float(*call, "weight_decay");
    const T wd = static_cast<T>(wd_attr);
    const T momentum = static_cast<T>(required_float(*call, "momentum"));
    const T keep = static_cast<T>(1.0 - required_float(*call, "dampening"));
    const bool nesterov = required_int(*call, "nesterov") != 0;
    const bool first = required_int(*call, "first") != 0;
    T* p = state<T>(*call->inputs[0], *call->outputs[0]);
    T* b = state<T>(*call->inputs[2], *call->outputs[1]);
    const T* g = at<T>(*call->inputs[1]);
    const int64_t n = plugin::numel(*call->inputs[0]);
    const bool decay = wd_attr != 0.0;
    update_loop(*call, n, [=](int64_t i) {
      const T value = p[i];
      const T gi = decay ? g[i] + value * wd : g[i];
      const T bi = first ? gi : b[i] * momentum + gi * keep;
      b[i] = bi;
      p[i] = value - (nesterov ? gi + bi * momentum : bi) * lr;
    });
    return STRATA_OK;
  });
}

// adam_step (p, g, m, v) -> p, m, v.
template <class T>
strata_status adam_step(const strata_kernel_call* call) noexcept {
  constexpr const char* op = STRATA_OP_ADAM_STEP;
  if (const strata_status s = check_update<T>(call, op, 4, 3); s != STRATA_OK) return s;
  return run_guarded(call->error, op, [&] {
    const int64_t mode = required_int(*call, "decay_mode");
    if (mode < 0 || mode > 2) {
      throw std::invalid_argument(std::string(op) + ": decay_mode " + std::to_string(mode) + " is not 0, 1 or 2");
    }
    const T wd = static_cast<T>(required_float(*call, "weight_decay"));
    const T decay = static_cast<T>(required_float(*call, "decay"));
    const double beta1 = required_float(*call, "beta1"), beta2 = required_float(*call, "beta2");
    const T b1 = static_cast<T>(beta1), one_minus_b1 = static_cast<T>(1.0 - beta1);
    const T b2 = static_cast<T>(beta2), one_minus_b2 = static_cast<T>(1.0 - beta2);
    const T step_size = static_cast<T>(required_float(*call, "step_size"));
    const T inv_sqrt_bias2 = static_cast<T>(required_float(*call, "inv_sqrt_bias2"));
    const T eps = static_cast<T>(required_float(*call, "eps"));
    const bool first = required_int(*call, "first") != 0;
    T* p = state<T>(*call->inputs[0], *call->outputs[0]);
    T* m = state<T>(*call->inputs[2], *call->outputs[1]);
    T* v = state<T>(*call->inputs[3], *call->outputs[2]);
    const T* g = at<T>(*call->inputs[1]);
    const int64_t n = plugin::numel(*call->inputs[0]);
    update_loop(*call, n, [=](int64_t i) {
      T value = p[i];
      T gi = g[i];
      if (mode == 1) gi = gi + value * wd;
      if (mode == 2) value = value * decay;
      const T mi = first ? gi * one_minus_b1 : m[i] * b1 + gi * one_minus_b1;
      const T vi = first ? (gi * gi) * one_minus_b2 : v[i] * b2 + (gi * gi) * one_minus_b2;
      m[i] = mi;
      v[i] = vi;
      p[i] = value - mi / (std::sqrt(vi) * inv_sqrt_bias2 + eps) * step_size;
    });
    return STRATA_OK;
  });
}

template <class T>
void add_updates(plugin::KernelTable& table) {
  const std::string t = Scalar<T>::name();
  table.add(STRATA_OP_SGD_STEP, t + "," + t + "->" + t, &sgd_step<T>);
  table.add(STRATA_OP_SGD_MOMENTUM_STEP, t + "," + t + "," + t + "->" + t + "," + t, &sgd_momentum_step<T>);
  table.add(STRATA_OP_ADAM_STEP, t + "," + t + "," + t + "," + t + "->" + t + "," + t + "," + t, &adam_step<T>);
}

}  // namespace

// f16 and bf16 parameters keep the decomposition: it rounds every
// intermediate to 16 bits, which a one-pass f32 kernel would not reproduce.
void register_optim_kernels(plugin::KernelTable& table) {
  add_updates<float>(table);
  add_updates<double>(table);
}

}  // namespace strata::cpu
