// engine.cpp — what the reverse passes share beyond one pass: which levels
// (tapes) are alive, and gradients added into grad() all or nothing. The
// pass itself is backward_pass.cpp.
#include "autograd/engine/engine.hpp"

#include "runtime/tensor/tensor_impl.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace strata::detail {

namespace {

std::mutex& alive_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_set<uint64_t>& alive_levels() {
  static auto* s = new std::unordered_set<uint64_t>();
  return *s;
}

/// A gradient as grad() keeps it: one that broadcasts a value over the
/// leaf's shape (sum's and mean's gradients are expanded views, stride 0)
/// is made compact, so that writing into grad() in place (clipping, a
/// user's copy_) writes each element, as PyTorch's gradient layout does. A
/// gradient with history (create_graph) stays as it is: the copy would not
/// be differentiable.
Tensor own_memory(const Tensor& g) {
  if (meta_if(g) != nullptr) return g;
  for (int64_t d = 0; d < g.dim(); ++d) {
    if (g.strides()[static_cast<size_t>(d)] == 0 && g.sizes()[static_cast<size_t>(d)] > 1) return g.contiguous();
  }
  return g;
}

}  // namespace

const Tensor& checked_hook_gradient(const Tensor& replaced, const Tensor& grad) {
  if (replaced.sizes() != grad.sizes()) {
    throw ShapeError("a tensor hook (register_hook) returned a gradient of shape " + shape_string(replaced.shape()) +
                     " for a gradient of shape " + shape_string(grad.shape()));
  }
  if (replaced.dtype() != grad.dtype()) {
    throw DTypeError("a tensor hook (register_hook) returned a gradient of dtype " +
                     std::string(dtype_name(replaced.dtype())) + " for a gradient of dtype " +
                     std::string(dtype_name(grad.dtype())));
  }
  if (replaced.device() != grad.device()) {
    throw DeviceError("a tensor hook (register_hook) returned a gradient on " + replaced.device().str() +
                      " for a gradient on " + grad.device().str());
  }
  return replaced;
}

void accumulate_grads(std::span<const std::pair<AutogradMeta*, Tensor>> grads) {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  // All or nothing: every sum is computed (any of which may fail: a kernel,
  // an allocation) before the first grad() changes.
  std::vector<std::pair<AutogradMeta*, Tensor>> totals;
  std::unordered_map<AutogradMeta*, size_t> at;  // a tensor met twice adds up (linear, not quadratic)
  totals.reserve(grads.size());
  for (const auto& [meta, g] : grads) {
    auto [it, fresh] = at.try_emplace(meta, totals.size());
    if (fresh) {
      totals.emplace_back(meta, meta->grad.defined() ? add(meta->grad, g) : own_memory(g));
    } else {
      totals[it->second].second = add(totals[it->second].second, g);
    }
  }
  for (auto& [meta, total] : totals) meta->grad = std::move(total);
}

bool level_alive(uint64_t id) {
  if (id == 0) return true;
  std::lock_guard lock(alive_mutex());
  return alive_levels().count(id) != 0;
}

void set_level_alive(uint64_t id, bool alive) {
  std::lock_guard lock(alive_mutex());
  if (alive) {
    alive_levels().insert(id);
  } else {
    alive_levels().erase(id);
  }
}

}  // namespace strata::detail
