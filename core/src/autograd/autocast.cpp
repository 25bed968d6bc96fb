// autocast.cpp — autocast: the op policies applied in dispatch, through the
// before hook (engine/hooks.cpp). GradScaler is in nn/grad_scaler.cpp.
#include "autograd/autocast.hpp"
#include "autograd/engine/nodes.hpp"
#include "autograd/trace/trace.hpp"
#include "base/logging.hpp"
#include "runtime/device/device_table.hpp"
#include "runtime/dispatch/op.hpp"
#include "runtime/tensor/tensor_impl.hpp"

#include <strata/amp.hpp>
#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <strata/runtime.hpp>

#include <atomic>
#include <cmath>
#include <map>
#include <unordered_map>
#include <algorithm>
#include <mutex>
#include <spdlog/spdlog.h>

namespace strata {

namespace detail {
std::atomic<int> g_autocast_threads{0};

namespace {

// --- policy ------------------------------------------------------------------

enum class Category : uint8_t { none, lower, fp32, promote };

struct PolicyTable {
  std::mutex mutex;
  std::optional<AutocastPolicy> explicit_policy;
  std::atomic<uint64_t> version{1};
};
PolicyTable& policy_table() {
  static auto* t = new PolicyTable;
  return *t;
}

/// A cast of a parameter made inside an autocast region, kept for the
/// region's other uses of the parameter (the weight-cast cache below).
struct CachedCast {
  std::weak_ptr<TensorImpl> source;  // tells the parameter from a new tensor at a reused address
  uint32_t version = 0;              // the parameter's storage version when cast
  DType dtype = DType::bf16;
  bool grad_enabled = false;
  LevelSet recording;                // the levels the cast was recorded on
  Tensor cast;
};

/// The calling thread's autocast state and its cached op categories.
struct AmpThread {
  bool enabled = false;
  DType dtype = DType::bf16;
  int device_slot = -1;
  uint64_t cached_version = 0;
  std::vector<Category> categories;  // by op id
  std::unordered_map<const TensorImpl*, CachedCast> casts;
};
AmpThread& amp_thread() {
  thread_local AmpThread t;
  return t;
}

/// Every change of a thread's `enabled` goes through here, keeping the
/// count autocast_anywhere() reads. Leaving autocast drops the weight
/// casts: the next region (the next step) casts the updated weights afresh.
void set_enabled(AmpThread& t, bool on) {
  if (t.enabled == on) return;
  g_autocast_threads.fetch_add(on ? 1 : -1, std::memory_order_relaxed);
  t.enabled = on;
  if (!on) t.casts.clear();
}

/// The weight-cast cache (PyTorch's autocast keeps the same): inside one
/// autocast region, a parameter — a leaf that requires grad — is cast to the
/// lower precision once, and every later op of the region that reads it gets
/// that cast, as long as the parameter was not written (storage version), the
/// recording state is the same (the cast's node must be on the same levels)
/// and the cast's node was not freed by a backward pass. Not while tracing
/// (a trace must see every cast it replays) or under forward mode (the cast
/// would carry the tangents of another transform).
Tensor cast_for_autocast(AmpThread& t, const Tensor& in) {
  const AutogradMeta* meta = meta_if(in);
  const AutogradState& st = autograd_state();
  const bool cacheable = meta != nullptr && meta->requires_grad && meta->grad_fn == nullptr &&
                         st.forward.empty() && !tracing_anywhere();
  if (!cacheable) return cast(in, t.dtype);
  const uint32_t version = in.impl()->storage->version.load(std::memory_order_relaxed);
  auto same_levels = [&](const LevelSet& a) {
    if (a.count != st.recording.count) return false;
    for (uint8_t k = 0; k < a.count; ++k) {
      if (!st.recording.contains(a.ids[k])) return false;
    }
    return true;
  };
  auto it = t.casts.find(in.impl());
  if (it != t.casts.end()) {
    const CachedCast& c = it->second;
    const AutogradMeta* cm = meta_if(c.cast);
    const bool node_alive = cm == nullptr || cm->grad_fn == nullptr || !cm->grad_fn->released;
    if (c.source.lock() == in.impl_ptr() && c.version == version && c.dtype == t.dtype &&
        c.grad_enabled == st.grad_enabled && same_levels(c.recording) && node_alive) {
      return c.cast;
    }
  }
  Tensor result = cast(in, t.dtype);
  t.casts[in.impl()] = CachedCast{in.impl_ptr(), version, t.dtype, st.grad_enabled, st.recording, result};
  return result;
}

void refresh_categories(AmpThread& t) {
  uint64_t v = policy_table().version.load();
  if (t.cached_version == v && t.categories.size() == all_ops().size()) return;
  AutocastPolicy p = autocast_policy();
  t.categories.assign(all_ops().size(), Category::none);
  for (const OpDef* op : all_ops()) {
    std::string name(op->name);
    Category& c = t.categories[static_cast<size_t>(op->id)];
    if (p.lower_precision.count(name) != 0) {
      c = Category::lower;
    } else if (p.fp32.count(name) != 0) {
      c = Category::fp32;
    } else if (p.promote.count(name) != 0) {
      c = Category::promote;
    }
  }
  t.cached_version = v;
}

}  // namespace

bool autocast_active() { return amp_thread().enabled; }

void apply_autocast(OpCall& call) {
  AmpThread& t = amp_thread();
  if (call.device.slot() != t.device_slot) return;
  refresh_categories(t);
  Category c = t.categories[static_cast<size_t>(call.op->id)];
  if (c == Category::none || c == Category::promote) return;  // promote: prepare's type promotion
  for (int k = 0; k < call.n_inputs; ++k) {
    Tensor& in = call.inputs[static_cast<size_t>(k)];
    DType d = in.dtype();
    if (c == Category::lower && d == DType::f32) in = cast_for_autocast(t, in);
    if (c == Category::fp32 && (d == DType::f16 || d == DType::bf16)) in = cast(in, DType::f32);
  }
}

}  // namespace detail

// --- policy API ------------------------------------------------------------------

AutocastPolicy AutocastPolicy::defaults() {
  // Read off the op table: each op's OpDef names its category.
  AutocastPolicy p;
  for (const detail::OpDef* op : detail::all_ops()) {
    std::string name(op->name);
    switch (op->autocast) {
      case detail::AutocastCategory::lower_precision: p.lower_precision.insert(name); break;
      case detail::AutocastCategory::fp32: p.fp32.insert(name); break;
      case detail::AutocastCategory::promote: p.promote.insert(name); break;
      case detail::AutocastCategory::none: break;
    }
  }
  return p;
}

AutocastPolicy autocast_policy() {
  auto& table = detail::policy_table();
  {
    std::lock_guard lock(table.mutex);
    if (table.explicit_policy) return *table.explicit_policy;
  }
  AutocastPolicy p = AutocastPolicy::defaults();
  Config cfg = runtime().config();
  auto to_set = [](const std::vector<std::string>& v) { return std::set<std::string>(v.begin(), v.end()); };
  if (cfg.amp_lower_precision) p.lower_precision = to_set(*cfg.amp_lower_precision);
  if (cfg.amp_fp32) p.fp32 = to_set(*cfg.amp_fp32);
  if (cfg.amp_promote) p.promote = to_set(*cfg.amp_promote);
  return p;
}

void set_autocast_policy(const AutocastPolicy& policy) {
  auto& table = detail::policy_table();
  std::lock_guard lock(table.mutex);
  table.explicit_policy = policy;
  table.version.fetch_add(1);
}

Autocast::Autocast(AutocastOptions options) {
  detail::AmpThread& t = detail::amp_thread();
  previous_ = {t.enabled, t.dtype, t.device_slot};
  if (!options.enabled) {
    detail::set_enabled(t, false);
    return;
  }
  if (options.dtype != DType::f16 && options.dtype != DType::bf16) {
    throw ValueError("Autocast: the dtype must be f16 or bf16, got " + std::string(dtype_name(options.dtype)));
  }
  Device device = options.device ? *options.device : runtime().default_device();
  DeviceInfo info = runtime().device_info(device);
  auto has = [](const std::vector<DType>& list, DType d) { return std::find(list.begin(), list.end(), d) != list.end(); };
  if (!has(info.dtypes, options.dtype)) {
    throw DTypeError("Autocast: device " + info.id + " (" + info.name + ") cannot store " +
                     std::string(dtype_name(options.dtype)));
  }
  if (!has(info.compute_dtypes, options.dtype) &&
      std::find(info.missing_primitives.begin(), info.missing_primitives.end(), "matmul") !=
          info.missing_primitives.end()) {
    throw DTypeError("Autocast: device " + info.id + " has no matmul kernel to compute " +
                     std::string(dtype_name(options.dtype)));
  }
  detail::set_enabled(t, true);
  t.dtype = options.dtype;
  t.device_slot = device.slot();
}

Autocast::~Autocast() {
  detail::AmpThread& t = detail::amp_thread();
  detail::set_enabled(t, previous_.enabled);
  t.dtype = previous_.dtype;
  t.device_slot = previous_.device_slot;
}

bool autocast_enabled() { return detail::amp_thread().enabled; }
DType autocast_dtype() { return detail::amp_thread().dtype; }

namespace detail {
void invalidate_autocast_policy() { policy_table().version.fetch_add(1); }

AutocastSnapshot autocast_snapshot() {
  AmpThread& t = amp_thread();
  return {t.enabled, t.dtype, t.device_slot};
}
void restore_autocast(const AutocastSnapshot& s) {
  AmpThread& t = amp_thread();
  set_enabled(t, s.enabled);
  t.dtype = s.dtype;
  t.device_slot = s.device_slot;
}
}  // namespace detail

}  // namespace strata
