// amp.cpp — autocast (op policies applied in dispatch) and GradScaler. The
// amp_unscale op GradScaler runs is in ops/amp.cpp.
#include "amp_internal.hpp"
#include "autograd/nodes.hpp"
#include "autograd/trace.hpp"
#include "logging.hpp"
#include "op.hpp"
#include "runtime_internal.hpp"
#include "tensor_impl.hpp"

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

// --- GradScaler --------------------------------------------------------------------


GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  if (!(options.init_scale > 0) || !(options.growth_factor > 1) || !(options.backoff_factor > 0) ||
      !(options.backoff_factor < 1) || options.growth_interval < 1 || !(options.min_scale > 0)) {
    throw ValueError("GradScaler: need init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, "
                     "growth_interval >= 1 and min_scale > 0");
  }
}

Tensor GradScaler::scale(const Tensor& loss) const { return options_.enabled ? loss * scale_ : loss; }

void GradScaler::unscale_gradients(std::vector<Tensor>& grads) {
  if (!options_.enabled) return;
  NoGradGuard no_grad;
  // One inv_scale tensor and one found_inf sum per device, so the host
  // waits once per device, not once per gradient.
  std::map<std::string, std::pair<Tensor, Tensor>> per_device;  // id -> (inv_scale, found count)
  for (Tensor& g : grads) {
    if (!g.defined()) continue;
    auto& [inv, found_sum] = per_device[g.device().str()];
    if (!inv.defined()) inv = full({}, 1.0 / scale_, {.dtype = DType::f32, .device = g.device()});
    auto [unscaled, found] = amp_unscale(g, inv);
    g.copy_(unscaled);
    found_sum = found_sum.defined() ? found_sum + found : found;
  }
  bool inf = false;
  for (const auto& [device, state] : per_device) inf = inf || state.second.item<float>() != 0.0f;
  found_inf_ = found_inf_ || inf;
  unscaled_ = true;
}

void GradScaler::unscale(const std::vector<Tensor>& params) {
  if (unscaled_) throw Error("GradScaler::unscale: already called since the last update()");
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(p.grad());
  unscale_gradients(grads);
}

bool GradScaler::step(const std::vector<Tensor>& params, const std::function<void()>& optimizer_step) {
  if (!options_.enabled) {
    optimizer_step();
    return true;
  }
  if (!unscaled_) unscale(params);
  if (found_inf_) {
    ++skipped_;
    return false;
  }
  optimizer_step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    if (scale_ < options_.min_scale) {
      scale_ = options_.min_scale;
      if (!warned_floor_) {
        detail::logger("amp")->warn(
            "GradScaler: the loss scale hit its floor of {} after repeated non-finite gradients; the model may be "
            "diverging",
            options_.min_scale);
        warned_floor_ = true;
      }
    }
  } else if (++growth_tracker_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  found_inf_ = false;
  unscaled_ = false;
}

std::vector<std::pair<std::string, Tensor>> GradScaler::state_dict() const {
  // On the host, cpu:0, as the optimizers' scalars: the default device may
  // not store f64.
  const Device host("cpu:0");
  return {{"scale", full({}, scale_, {.dtype = DType::f64, .device = host})},
          {"growth_tracker", full({}, static_cast<double>(growth_tracker_), {.dtype = DType::i64, .device = host})},
          {"skipped_steps", full({}, static_cast<double>(skipped_), {.dtype = DType::i64, .device = host})}};
}

namespace {

/// The scaler's entries and their dtypes, as state_dict() writes them.
constexpr std::pair<const char*, DType> kScalerEntries[] = {
    {"scale", DType::f64}, {"growth_tracker", DType::i64}, {"skipped_steps", DType::i64}};

}  // namespace

void GradScaler::check_state_dict(const std::vector<std::pair<std::string, Tensor>>& state,
                                  const std::string& key_prefix) const {
  const std::string owner = "GradScaler::load_state_dict: ";
  std::map<std::string, const Tensor*> given;
  for (const auto& [name, t] : state) {
    // An init-capture: clang 14 (the fuzz preset) cannot capture a structured binding.
    auto known = std::find_if(std::begin(kScalerEntries), std::end(kScalerEntries),
                              [&name = name](const auto& e) { return name == e.first; });
    if (known == std::end(kScalerEntries)) {
      throw ValueError(owner + "unexpected entry '" + key_prefix + name +
                       "' (expected scale, growth_tracker, skipped_steps)");
    }
    if (!given.emplace(name, &t).second) {
      throw ValueError(owner + "duplicate entry '" + key_prefix + name + "'");
    }
  }
  for (const auto& [name, dtype] : kScalerEntries) {
    const std::string key = key_prefix + name;
    const std::string want = std::string(dtype_name(dtype)) + "[] (a 0-d " + std::string(dtype_name(dtype)) + " tensor)";
    auto it = given.find(name);
    if (it == given.end()) throw ValueError(owner + "missing entry '" + key + "' (expected " + want + ")");
    const Tensor& t = *it->second;
    if (!t.defined()) throw ValueError(owner + "entry '" + key + "': expected " + want + ", found an undefined tensor");
    if (t.dtype() != dtype) throw DTypeError(owner + "entry '" + key + "': expected " + want + ", found " + type_string(t));
    if (t.dim() != 0) throw ShapeError(owner + "entry '" + key + "': expected " + want + ", found " + type_string(t));
    if (dtype == DType::f64) {
      double v = t.item<double>();
      if (!(v > 0) || !std::isfinite(v)) {
        throw ValueError(owner + "entry '" + key + "': expected a finite scale > 0, found " + std::to_string(v));
      }
    } else if (t.item<int64_t>() < 0) {
      throw ValueError(owner + "entry '" + key + "': expected a count >= 0, found " +
                       std::to_string(t.item<int64_t>()));
    }
  }
}

void GradScaler::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state) {
  check_state_dict(state);
  for (const auto& [name, t] : state) {
    if (name == "scale") {
      scale_ = t.item<double>();
    } else if (name == "growth_tracker") {
      growth_tracker_ = t.item<int64_t>();
    } else {
      skipped_ = t.item<int64_t>();
    }
  }
}

}  // namespace strata
