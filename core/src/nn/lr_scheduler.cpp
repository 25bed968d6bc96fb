// lr_scheduler.cpp — StepLR, CosineAnnealingLR, LinearWarmup.
#include <cmath>
#include <numbers>
#include <strata/error.hpp>
#include <strata/nn/lr_scheduler.hpp>
#include <string>

#include "util.hpp"

namespace strata::nn {

using detail::num;

LRScheduler::LRScheduler(Optimizer& optimizer)
    : optimizer_(optimizer), base_lr_(optimizer.lr()), last_lr_(optimizer.lr()) {}

void LRScheduler::apply() {
  last_lr_ = lr_at(step_);
  optimizer_.set_lr(last_lr_);
}

void LRScheduler::step() {
  ++step_;
  apply();
}

void LRScheduler::set_step(int64_t step) {
  if (step < 0) throw ValueError("LRScheduler::set_step: step must be >= 0, got " + std::to_string(step));
  step_ = step;
  apply();
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  if (step_size <= 0) throw ValueError("StepLR: step_size must be positive, got " + std::to_string(step_size));
  if (!(gamma >= 0.0)) throw ValueError("StepLR: gamma must be >= 0, got " + num(gamma));
  apply();
}

double StepLR::lr_at(int64_t step) const {
  return base_lr() * std::pow(gamma_, static_cast<double>(step / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  if (t_max <= 0) throw ValueError("CosineAnnealingLR: t_max must be positive, got " + std::to_string(t_max));
  if (!(eta_min >= 0.0)) throw ValueError("CosineAnnealingLR: eta_min must be >= 0, got " + num(eta_min));
  apply();
}

double CosineAnnealingLR::lr_at(int64_t step) const {
  if (step >= t_max_) return eta_min_;
  double phase = std::numbers::pi * static_cast<double>(step) / static_cast<double>(t_max_);
  return eta_min_ + (base_lr() - eta_min_) * (1.0 + std::cos(phase)) / 2.0;
}

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor,
                           std::unique_ptr<LRScheduler> after)
    : LRScheduler(optimizer), warmup_steps_(warmup_steps), start_factor_(start_factor), after_(std::move(after)) {
  if (warmup_steps <= 0) {
    throw ValueError("LinearWarmup: warmup_steps must be positive, got " + std::to_string(warmup_steps));
  }
  if (!(start_factor >= 0.0 && start_factor <= 1.0)) {
    throw ValueError("LinearWarmup: start_factor must be in [0, 1], got " + num(start_factor));
  }
  apply();
}

double LinearWarmup::lr_at(int64_t step) const {
  if (step < warmup_steps_) {
    double frac = static_cast<double>(step) / static_cast<double>(warmup_steps_);
    return base_lr() * (start_factor_ + (1.0 - start_factor_) * frac);
  }
  return after_ ? after_->lr_at(step - warmup_steps_) : base_lr();
}

}  // namespace strata::nn
