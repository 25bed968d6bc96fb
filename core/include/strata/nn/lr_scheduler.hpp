// nn/lr_scheduler.hpp — learning-rate schedules.
//
// A scheduler computes the learning rate as a closed-form function of its
// step count from the optimizer's learning rate at construction (the base
// rate) and sets it on the optimizer: at construction (step 0) and at each
// step(). Call step() once per optimizer step (or epoch), after
// optimizer.step(). Schedules compose: LinearWarmup runs another schedule
// after its warm-up, shifted by the warm-up length.
#pragma once

#include <cstdint>
#include <memory>
#include <strata/nn/optim.hpp>

namespace strata::nn {

/// Base class of the schedules.
class LRScheduler {
 public:
  /// Captures optimizer.lr() as the base rate. Subclasses apply lr_at(0).
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advances one step and sets the optimizer's learning rate.
  void step();
  /// Jumps to step `step` (e.g. when resuming from a checkpoint) and sets the
  /// optimizer's learning rate. ValueError for step < 0.
  void set_step(int64_t step);
  /// The learning rate set last.
  double last_lr() const { return last_lr_; }
  /// Steps taken (0 after construction).
  int64_t step_count() const { return step_; }
  /// The base rate.
  double base_lr() const { return base_lr_; }
  /// The schedule: the learning rate at `step` (>= 0).
  virtual double lr_at(int64_t step) const = 0;

 protected:
  /// Sets the optimizer's rate to lr_at(step_count()).
  void apply();

 private:
  Optimizer& optimizer_;
  double base_lr_;
  double last_lr_;
  int64_t step_ = 0;
};

/// base · gamma^⌊step / step_size⌋.
class StepLR : public LRScheduler {
 public:
  /// ValueError for step_size <= 0 or gamma < 0.
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// eta_min + (base − eta_min)·(1 + cos(π·step/t_max))/2 for step <= t_max,
/// then eta_min (it stays at the floor, unlike PyTorch's, which climbs back).
class CosineAnnealingLR : public LRScheduler {
 public:
  /// ValueError for t_max <= 0.
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);
  double lr_at(int64_t step) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// Linear warm-up from base·start_factor (step 0) to base (step
/// warmup_steps), then `after` (if any) evaluated at step − warmup_steps,
/// else base. `after` must have been made for the same optimizer; its base
/// rate is the one it captured.
class LinearWarmup : public LRScheduler {
 public:
  /// ValueError for warmup_steps <= 0 or start_factor outside [0, 1].
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor = 0.0,
               std::unique_ptr<LRScheduler> after = nullptr);
  double lr_at(int64_t step) const override;

 private:
  int64_t warmup_steps_;
  double start_factor_;
  std::unique_ptr<LRScheduler> after_;
};

}  // namespace strata::nn
