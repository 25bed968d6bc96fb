// amp.hpp — automatic mixed precision: autocast scopes and dynamic loss
// scaling.
//
// Inside an Autocast scope, ops on floating tensors run in a dtype chosen by
// the op's policy: ops on the low-precision list (matmul by default) cast
// their f32 inputs to the scope's dtype (f16 or bf16); ops on the f32 list
// (exp, log, softmax, reductions, ...) cast low-precision inputs up to f32;
// ops on the promote list run in the widest input dtype (the ordinary type
// promotion). The casts are ordinary recorded ops, so gradients flow back
// in each parameter's own dtype. The lists are data: `AutocastPolicy`, and
// the configuration file's "amp" object overrides them.
#pragma once

#include <strata/device.hpp>
#include <strata/dtype.hpp>
#include <strata/tensor.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace strata {

/// Which ops autocast moves to low precision, keeps in f32, or promotes.
struct AutocastPolicy {
  std::set<std::string> lower_precision;
  std::set<std::string> fp32;
  std::set<std::string> promote;
  /// The built-in lists (see docs/mixed-precision-and-checkpointing.md, "Autocast").
  static AutocastPolicy defaults();
};

/// The policy in effect: the configuration's "amp" lists where given, else
/// the defaults.
AutocastPolicy autocast_policy();
/// Replaces the policy for this process (e.g. from code instead of JSON).
void set_autocast_policy(const AutocastPolicy& policy);

struct AutocastOptions {
  DType dtype = DType::bf16;  // f16 or bf16
  /// The device whose ops are autocast; default: the runtime's default
  /// device. Ops on other devices run unchanged.
  std::optional<Device> device = std::nullopt;
  bool enabled = true;
};

/// An autocast scope on the calling thread. Nested scopes replace the outer
/// one and restore it on exit. Throws DTypeError when the device cannot
/// store or compute the dtype, ValueError for a dtype that is not f16/bf16.
class Autocast {
 public:
  explicit Autocast(AutocastOptions options = {});
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  struct Saved {
    bool enabled;
    DType dtype;
    int device_slot;
  } previous_;
};

/// Whether autocast is on for this thread, and its dtype.
bool autocast_enabled();
DType autocast_dtype();

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps between growths
  double min_scale = 1.0;          // floor; reaching it logs a warning
  bool enabled = true;
};

/// Dynamic loss scaling: scale the loss, unscale and check the gradients in
/// one kernel per tensor (op `amp_unscale`), skip the optimizer step when
/// any gradient is not finite, and adapt the scale.
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  /// loss * scale (unchanged when disabled).
  Tensor scale(const Tensor& loss) const;
  /// Divides the gradients of `params` (their grad()) by the scale in place
  /// and records whether any was NaN/Inf. At most once per step.
  void unscale(const std::vector<Tensor>& params);
  /// Divides `grads` by the scale in place (for gradients from a tape).
  void unscale_gradients(std::vector<Tensor>& grads);
  /// Unscales if not done yet; runs `optimizer_step` unless a gradient was
  /// not finite. Returns whether the step ran. Call update() afterwards.
  bool step(const std::vector<Tensor>& params, const std::function<void()>& optimizer_step);
  /// Adapts the scale: backoff after an overflow, growth after
  /// growth_interval clean steps; clears the per-step state.
  void update();

  double get_scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  /// Whether the last unscale found a non-finite gradient.
  bool found_inf() const { return found_inf_; }
  int64_t skipped_steps() const { return skipped_; }

  /// For checkpoint files: "scale", "growth_tracker", "skipped_steps" as
  /// f64/i64 scalar tensors.
  std::vector<std::pair<std::string, Tensor>> state_dict() const;
  /// Checks `state` without changing anything: exactly the three entries of
  /// state_dict(), each a 0-d tensor of its dtype (scale f64, finite, > 0;
  /// the counts i64, >= 0). ValueError / DTypeError / ShapeError naming the
  /// entry (with `key_prefix` before it, e.g. "extra."), what was expected
  /// and what was found.
  void check_state_dict(const std::vector<std::pair<std::string, Tensor>>& state,
                        const std::string& key_prefix = "") const;
  /// check_state_dict(), then replaces the state (nothing changes on error).
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
  bool warned_floor_ = false;
};

/// The fused check-and-unscale kernel as a function: (grad * inv_scale,
/// found_inf) where found_inf is an f32 scalar, 1 when `grad` holds a NaN or
/// Inf. Backends may register a one-pass kernel for op `amp_unscale`.
std::pair<Tensor, Tensor> amp_unscale(const Tensor& grad, const Tensor& inv_scale);

}  // namespace strata
