// grad_scaler.cpp — GradScaler: dynamic loss scaling for training in reduced
// precision (docs/mixed-precision-and-checkpointing.md). It unscales
// gradients with the amp_unscale op (ops/amp.cpp), which reports a
// non-finite value, and skips the optimizer step when one is found.
#include <strata/amp.hpp>
#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/log.hpp>
#include <strata/ops.hpp>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace strata {

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
        std::ostringstream message;
        message << "GradScaler: the loss scale hit its floor of " << options_.min_scale
                << " after repeated non-finite gradients; the model may be diverging";
        log_message("amp", LogLevel::warn, message.str());
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
