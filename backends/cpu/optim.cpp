// optim.cpp — the fused optimizer updates sgd_step, sgd_momentum_step and
// adam_step (docs/ops.md, "Optimizer updates") for f32 and f64: one pass
// over the parameter, its gradient and its state, in place, instead of the
// eight to twelve elementwise kernels of the unfused update. Each kernel
// also takes a group of parameters in one call (STRATA_KERNEL_GROUPED): one
// pass over all of their elements end to end, so that a model of many small
// parameters pays one call and one thread hand-off per step, not one each.
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

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

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

/// The refusal of a call (of k applications) with an operand operand_ok
/// refuses: refuse_operands' message for the first such application, which
/// a group's message names.
[[gnu::cold]] strata_status refuse_application(const strata_kernel_call& call, const char* op, strata_dtype dtype,
                                               int n_in, int n_out, int32_t k) noexcept {
  const strata_dtype dtypes[7] = {dtype, dtype, dtype, dtype, dtype, dtype, dtype};
  for (int32_t j = 0; j < k; ++j) {
    strata_kernel_call one = call;
    one.inputs = call.inputs + static_cast<ptrdiff_t>(j) * n_in;
    one.n_inputs = n_in;
    one.outputs = call.outputs + static_cast<ptrdiff_t>(j) * n_out;
    one.n_outputs = n_out;
    bool ok = true;
    for (int a = 0; ok && a < n_in; ++a) ok = operand_ok(one.inputs[a], dtype);
    for (int a = 0; ok && a < n_out; ++a) ok = operand_ok(one.outputs[a], dtype);
    if (ok) continue;
    const strata_status status = refuse_operands(one, op, dtypes, n_in, dtypes, n_out);
    if (k > 1 && call.error != nullptr) {
      char message[sizeof(call.error->message)];
      std::memcpy(message, call.error->message, sizeof(message));
      message[sizeof(message) - 1] = '\0';
      fail(call.error, status, "%s (application %d of a group of %d)", message, static_cast<int>(j),
           static_cast<int>(k));
    }
    return status;
  }
  return fail(call.error, STRATA_ERROR_INTERNAL, "%s: no operand to refuse", op);
}

/// Checks `call` against (T × n_in) -> (T × n_out), or a group of k such
/// applications end to end (STRATA_KERNEL_GROUPED), every operand compact
/// and of its application's element count. Sets *k and returns STRATA_OK,
/// or returns the refusal.
template <class T>
strata_status check_update(const strata_kernel_call* call, const char* op, int n_in, int n_out, int32_t* k) {
  if (call == nullptr || call->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) [[unlikely]] {
    return refuse_small_call(call, op);
  }
  *k = plugin::group_count(*call, n_in, n_out);
  if (*k == 0) [[unlikely]] {
    return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT,
                "%s: expected %d inputs and %d outputs, or k times as many for a group of k parameters, got %d and %d",
                op, n_in, n_out, static_cast<int>(call->n_inputs), static_cast<int>(call->n_outputs));
  }
  bool ok = true;
  for (int a = 0; ok && a < call->n_inputs; ++a) ok = operand_ok(call->inputs[a], Scalar<T>::dtype);
  for (int a = 0; ok && a < call->n_outputs; ++a) ok = operand_ok(call->outputs[a], Scalar<T>::dtype);
  if (!ok) [[unlikely]] return refuse_application(*call, op, Scalar<T>::dtype, n_in, n_out, *k);
  for (int32_t j = 0; j < *k; ++j) {
    const strata_tensor* const* in = call->inputs + static_cast<ptrdiff_t>(j) * n_in;
    const strata_tensor* const* out = call->outputs + static_cast<ptrdiff_t>(j) * n_out;
    const int64_t n = plugin::numel(*in[0]);
    for (int a = 0; a < n_in + n_out; ++a) {
      const strata_tensor& t = a < n_in ? *in[a] : *out[a - n_in];
      if (plugin::numel(t) == n && plugin::is_contiguous(t)) continue;
      const std::string where = *k > 1 ? " of application " + std::to_string(j) : std::string();
      return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: every operand must be compact with the parameter's %lld elements, %s %d%s is %s", op,
                  static_cast<long long>(n), a < n_in ? "input" : "output", a < n_in ? a : a - n_in, where.c_str(),
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

/// One application's memory: the parameter, its gradient, up to two state
/// tensors (momentum buffer; first and second moments), n elements each.
template <class T>
struct Update {
  T* p;
  const T* g;
  T* s0;
  T* s1;
  int64_t n;
};

/// Application j of the call: (p, g, states...) -> (p, states...), the
/// states copied into their outputs when not in place.
template <class T>
Update<T> application(const strata_kernel_call& call, int32_t j, int n_in, int n_out) {
  const strata_tensor* const* in = call.inputs + static_cast<ptrdiff_t>(j) * n_in;
  const strata_tensor* const* out = call.outputs + static_cast<ptrdiff_t>(j) * n_out;
  return {state<T>(*in[0], *out[0]), at<T>(*in[1]), n_out > 1 ? state<T>(*in[2], *out[1]) : nullptr,
          n_out > 2 ? state<T>(*in[3], *out[2]) : nullptr, plugin::numel(*in[0])};
}

/// Runs body(u, i) for every element i of every application u of the call,
/// split across the call's threads, each share in the widest instruction
/// set allowed. A group is one pass over its applications' elements end to
/// end (PyTorch's multi-tensor apply): a thread's share may span several
/// small parameters, and a large one is shared by several threads.
template <class T, class Body>
void update_loop(const strata_kernel_call& call, int32_t k, int n_in, int n_out, const Body& body) {
  if (k == 1) {
    const Update<T> u = application<T>(call, 0, n_in, n_out);
    parallel_for(
        u.n, kernel_threads(call),
        [&](int64_t b, int64_t e) { vector_range(b, e, [=](int64_t i) { body(u, i); }); }, kCostPerElement);
    return;
  }
  std::vector<Update<T>> group(static_cast<size_t>(k));
  std::vector<int64_t> start(static_cast<size_t>(k) + 1, 0);  // of each application, end to end
  for (int32_t j = 0; j < k; ++j) {
    group[static_cast<size_t>(j)] = application<T>(call, j, n_in, n_out);
    start[static_cast<size_t>(j) + 1] = start[static_cast<size_t>(j)] + group[static_cast<size_t>(j)].n;
  }
  parallel_for(
      start.back(), kernel_threads(call),
      [&](int64_t b, int64_t e) {
        // The last application starting at or before b, then onwards.
        auto j = static_cast<size_t>(std::upper_bound(start.begin(), start.end(), b) - start.begin() - 1);
        for (; b < e; ++j) {
          const int64_t end = std::min(e, start[j + 1]);
          const Update<T> u = group[j];
          vector_range(b - start[j], end - start[j], [=](int64_t i) { body(u, i); });
          b = end;
        }
      },
      kCostPerElement);
}

// sgd_step (p, g) -> p: p ← p − (g [+ p·wd])·lr.
template <class T>
strata_status sgd_step(const strata_kernel_call* call) noexcept {
  constexpr const char* op = STRATA_OP_SGD_STEP;
  int32_t k = 0;
  if (const strata_status s = check_update<T>(call, op, 2, 1, &k); s != STRATA_OK) return s;
  return run_guarded(call->error, op, [&] {
    const T lr = static_cast<T>(required_float(*call, "lr"));
    const double wd_attr = required_float(*call, "weight_decay");
    const T wd = static_cast<T>(wd_attr);
    if (wd_attr != 0.0) {
      update_loop<T>(*call, k, 2, 1, [=](const Update<T>& u, int64_t i) {
        u.p[i] = u.p[i] - (u.g[i] + u.p[i] * wd) * lr;
      });
    } else {
      update_loop<T>(*call, k, 2, 1, [=](const Update<T>& u, int64_t i) { u.p[i] = u.p[i] - u.g[i] * lr; });
    }
    return STRATA_OK;
  });
}

// sgd_momentum_step (p, g, b) -> p, b.
template <class T>
strata_status sgd_momentum_step(const strata_kernel_call* call) noexcept {
  constexpr const char* op = STRATA_OP_SGD_MOMENTUM_STEP;
  int32_t k = 0;
  if (const strata_status s = check_update<T>(call, op, 3, 2, &k); s != STRATA_OK) return s;
  return run_guarded(call->error, op, [&] {
    const T lr = static_cast<T>(required_float(*call, "lr"));
    const double wd_attr = required_float(*call, "weight_decay");
    const T wd = static_cast<T>(wd_attr);
    const T momentum = static_cast<T>(required_float(*call, "momentum"));
    const T keep = static_cast<T>(1.0 - required_float(*call, "dampening"));
    const bool nesterov = required_int(*call, "nesterov") != 0;
    const bool first = required_int(*call, "first") != 0;
    const bool decay = wd_attr != 0.0;
    update_loop<T>(*call, k, 3, 2, [=](const Update<T>& u, int64_t i) {
      const T value = u.p[i];
      const T gi = decay ? u.g[i] + value * wd : u.g[i];
      const T bi = first ? gi : u.s0[i] * momentum + gi * keep;
      u.s0[i] = bi;
      u.p[i] = value - (nesterov ? gi + bi * momentum : bi) * lr;
    });
    return STRATA_OK;
  });
}

// adam_step (p, g, m, v) -> p, m, v.
template <class T>
strata_status adam_step(const strata_kernel_call* call) noexcept {
  constexpr const char* op = STRATA_OP_ADAM_STEP;
  int32_t k = 0;
  if (const strata_status s = check_update<T>(call, op, 4, 3, &k); s != STRATA_OK) return s;
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
    update_loop<T>(*call, k, 4, 3, [=](const Update<T>& u, int64_t i) {
      T value = u.p[i];
      T gi = u.g[i];
      if (mode == 1) gi = gi + value * wd;
      if (mode == 2) value = value * decay;
      const T mi = first ? gi * one_minus_b1 : u.s0[i] * b1 + gi * one_minus_b1;
      const T vi = first ? (gi * gi) * one_minus_b2 : u.s1[i] * b2 + (gi * gi) * one_minus_b2;
      u.s0[i] = mi;
      u.s1[i] = vi;
      u.p[i] = value - mi / (std::sqrt(vi) * inv_sqrt_bias2 + eps) * step_size;
    });
    return STRATA_OK;
  });
}

template <class T>
void add_updates(plugin::KernelTable& table) {
  const std::string t = Scalar<T>::name();
  constexpr uint32_t grouped = STRATA_KERNEL_GROUPED;
  table.add(STRATA_OP_SGD_STEP, t + "," + t + "->" + t, &sgd_step<T>, grouped);
  table.add(STRATA_OP_SGD_MOMENTUM_STEP, t + "," + t + "," + t + "->" + t + "," + t, &sgd_momentum_step<T>, grouped);
  table.add(STRATA_OP_ADAM_STEP, t + "," + t + "," + t + "," + t + "->" + t + "," + t + "," + t, &adam_step<T>,
            grouped);
}

}  // namespace

// f16 and bf16 parameters keep the decomposition: it rounds every
// intermediate to 16 bits, which a one-pass f32 kernel would not reproduce.
void register_optim_kernels(plugin::KernelTable& table) {
  add_updates<float>(table);
  add_updates<double>(table);
}

}  // namespace strata::cpu
