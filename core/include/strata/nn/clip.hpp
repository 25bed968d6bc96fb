// nn/clip.hpp — gradient clipping and gradient statistics for logging.
//
//   loss.backward();
//   double norm = nn::clip_grad_norm_(model.named_parameters(), 1.0);
//   for (const auto& s : nn::grad_stats(model)) log(s.name, s.norm, s.nonfinite);
//   optimizer.step();
//
// Both clip functions change the parameters' grad() tensors in place (with
// recording off), as PyTorch's do; parameters without a gradient are skipped.
#pragma once

#include <strata/nn/module.hpp>
#include <strata/tensor.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace strata::nn {

/// What clip_grad_norm_ does when the total norm is NaN or infinite.
enum class NonFinite {
  /// As PyTorch (error_if_nonfinite = false): the total norm is returned as
  /// it is, and the gradients are scaled by max_norm / (norm + eps) — NaN
  /// for a NaN norm, 0 for an infinite one (where 0·Inf gives NaN). Mixed
  /// precision training, whose GradScaler skips such steps, wants this.
  propagate,
  /// Throw an Error naming the first parameter whose gradient is not
  /// finite (and how many elements are NaN or infinite); no gradient changes.
  error,
};

struct ClipOptions {
  /// The p of the p-norm (p > 0), or infinity for the largest |g|.
  double norm_type = 2.0;
  NonFinite nonfinite = NonFinite::propagate;
  /// Added to the norm before dividing, as PyTorch does.
  double eps = 1e-6;
};

/// Scales the gradients of `params` so that their total norm — the p-norm
/// of the vector of every gradient element — is at most `max_norm`, when it
/// is larger. Returns the total norm before clipping. ValueError for
/// max_norm < 0 or norm_type <= 0; parameters without a gradient count as
/// zero. Norms of f16/bf16 gradients are computed in f32.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, const ClipOptions& options = {});
/// The same, naming parameters in the NonFinite::error message
/// ("fc.weight") — pass Module::named_parameters().
double clip_grad_norm_(const NamedTensors& params, double max_norm, const ClipOptions& options = {});

/// Clamps every gradient element into [-clip_value, clip_value] (NaN stays
/// NaN). ValueError for clip_value < 0.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

/// One parameter's gradient, summarised for logging.
struct GradStats {
  std::string name;
  int64_t numel = 0;
  bool has_grad = false;  // the rest is zero when false
  double norm = 0.0;      // L2 norm
  double max_abs = 0.0;   // largest |g|
  double mean = 0.0;
  int64_t nonfinite = 0;  // elements that are NaN or ±Inf
};

/// Statistics of every parameter's gradient, in order.
std::vector<GradStats> grad_stats(const NamedTensors& params);
/// Statistics of `module`'s parameters, named as named_parameters() names them.
std::vector<GradStats> grad_stats(const Module& module);
/// A fixed-width table of `stats`, one line per parameter, for logs.
std::string format_grad_stats(const std::vector<GradStats>& stats);

}  // namespace strata::nn
