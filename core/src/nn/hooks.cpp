// hooks.cpp — BackwardHookManager (a process-wide registry of layer hooks
// that Module::operator() consults) and GradientAccumulator.
#include <strata/error.hpp>
#include <strata/nn/hooks.hpp>
#include <strata/autograd.hpp>
#include <strata/ops.hpp>

#include "util.hpp"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

namespace strata::nn {

namespace {

struct Entry {
  uint64_t id;
  uint64_t owner;
  BackwardHook hook;
};

/// Hooks by layer, each list in registration (id) order.
class Registry {
 public:
  uint64_t new_owner() { return next_owner_.fetch_add(1); }

  HookHandle add(const Module* layer, uint64_t owner, BackwardHook hook) {
    std::lock_guard lock(mutex_);
    uint64_t id = next_id_++;
    hooks_[layer].push_back({id, owner, std::move(hook)});
    count_.fetch_add(1);
    return HookHandle{id};
  }

  /// Removes the entries `match` selects (on `layer`, or on every layer
  /// when null); returns how many.
  template <typename Match>
  size_t remove_if(const Module* layer, Match match) {
    std::lock_guard lock(mutex_);
    size_t removed = 0;
    for (auto it = hooks_.begin(); it != hooks_.end();) {
      if (layer != nullptr && it->first != layer) {
        ++it;
        continue;
      }
      removed += std::erase_if(it->second, match);
      it = it->second.empty() ? hooks_.erase(it) : std::next(it);
    }
    count_.fetch_sub(removed);
    return removed;
  }

  template <typename Match>
  size_t count_if(const Module* layer, Match match) const {
    std::lock_guard lock(mutex_);
    size_t n = 0;
    for (const auto& [l, list] : hooks_) {
      if (layer == nullptr || l == layer) n += static_cast<size_t>(std::count_if(list.begin(), list.end(), match));
    }
    return n;
  }

  bool any() const { return count_.load(std::memory_order_relaxed) != 0; }

  bool has(const Module* layer) const {
    std::lock_guard lock(mutex_);
    return hooks_.count(layer) != 0;
  }

  /// The hooks on `layer` now, copied so they run outside the lock.
  std::vector<BackwardHook> snapshot(const Module* layer) const {
    std::lock_guard lock(mutex_);
    std::vector<BackwardHook> out;
    auto it = hooks_.find(layer);
    if (it != hooks_.end()) {
      for (const Entry& e : it->second) out.push_back(e.hook);
    }
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::map<const Module*, std::vector<Entry>> hooks_;
  uint64_t next_id_ = 1;
  std::atomic<uint64_t> next_owner_{1};
  std::atomic<size_t> count_{0};
};

Registry& registry() {
  static Registry* r = new Registry();  // outlives modules destroyed during static destruction
  return *r;
}

}  // namespace

namespace detail {

void attach_backward_hooks(Module& layer, Tensor& output) {
  Registry& r = registry();
  if (!r.any() || !output.defined() || output.is_leaf() || !r.has(&layer)) return;  // leaf: not recorded
  Module* target = &layer;
  output.register_hook([target](const Tensor& grad) {
    // Looked up now: hooks removed since the forward do not run, and a
    // destroyed layer has none left.
    for (const BackwardHook& hook : registry().snapshot(target)) hook(*target, grad);
    return Tensor();
  });
}

bool has_backward_hooks(const Module& layer) {
  Registry& r = registry();
  return r.any() && r.has(&layer);
}

void forget_backward_hooks(const Module& layer) {
  Registry& r = registry();
  if (r.any()) r.remove_if(&layer, [](const Entry&) { return true; });
}

}  // namespace detail

BackwardHookManager::BackwardHookManager() : owner_(registry().new_owner()) {}

BackwardHookManager::~BackwardHookManager() { clear(); }

HookHandle BackwardHookManager::add(Module& layer, BackwardHook hook) {
  if (!hook) throw ValueError("BackwardHookManager::add: empty hook for layer " + layer.name());
  return registry().add(&layer, owner_, std::move(hook));
}

bool BackwardHookManager::remove(HookHandle handle) {
  if (!handle) return false;
  uint64_t owner = owner_;
  return registry().remove_if(nullptr, [&](const Entry& e) { return e.id == handle.id && e.owner == owner; }) != 0;
}

size_t BackwardHookManager::remove(const Module& layer) {
  uint64_t owner = owner_;
  return registry().remove_if(&layer, [&](const Entry& e) { return e.owner == owner; });
}

void BackwardHookManager::clear() {
  uint64_t owner = owner_;
  registry().remove_if(nullptr, [&](const Entry& e) { return e.owner == owner; });
}

size_t BackwardHookManager::size() const {
  uint64_t owner = owner_;
  return registry().count_if(nullptr, [&](const Entry& e) { return e.owner == owner; });
}

size_t BackwardHookManager::size(const Module& layer) const {
  uint64_t owner = owner_;
  return registry().count_if(&layer, [&](const Entry& e) { return e.owner == owner; });
}

// --- GradientAccumulator ----------------------------------------------------

GradientAccumulator::GradientAccumulator(Optimizer& optimizer, int64_t steps) : optimizer_(optimizer), steps_(steps) {
  if (steps < 1) {
    throw ValueError("GradientAccumulator: expected at least 1 micro-batch per step, got " + std::to_string(steps));
  }
}

bool GradientAccumulator::backward(const Tensor& loss) { return accumulate(loss, nullptr); }

bool GradientAccumulator::backward(const Tensor& loss, GradScaler& scaler) { return accumulate(loss, &scaler); }

bool GradientAccumulator::accumulate(const Tensor& loss, GradScaler* scaler) {
  if (!loss.defined() || loss.numel() != 1) {
    throw ShapeError("GradientAccumulator::backward: expected a scalar loss, got " + type_string(loss));
  }
  if (pending_ == 0) optimizer_.zero_grad();  // gradients left from outside a group do not leak in
  Tensor part = loss / static_cast<double>(steps_);
  (scaler != nullptr ? scaler->scale(part) : part).backward();
  if (++pending_ < steps_) return false;
  return finish(scaler);
}

bool GradientAccumulator::finish(GradScaler* scaler) {
  if (scaler != nullptr) {
    scaler->step(optimizer_.params(), [&] { optimizer_.step(); });
    scaler->update();
  } else {
    optimizer_.step();
  }
  optimizer_.zero_grad();
  pending_ = 0;
  ++completed_;
  return true;
}

bool GradientAccumulator::flush() { return flush_pending(nullptr); }

bool GradientAccumulator::flush(GradScaler& scaler) { return flush_pending(&scaler); }

bool GradientAccumulator::flush_pending(GradScaler* scaler) {
  if (pending_ == 0) return false;
  if (pending_ != steps_) {  // each part was divided by steps: make the sum a mean over the parts there are
    NoGradGuard no_grad;
    double rescale = static_cast<double>(steps_) / static_cast<double>(pending_);
    for (const Tensor& p : optimizer_.params()) {
      Tensor g = p.grad();
      if (g.defined()) g.copy_(g * rescale);
    }
  }
  return finish(scaler);
}

void GradientAccumulator::reset() {
  optimizer_.zero_grad();
  pending_ = 0;
}

}  // namespace strata::nn
