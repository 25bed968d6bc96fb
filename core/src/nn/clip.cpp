// clip.cpp — gradient clipping and gradient statistics.
#include <strata/autograd.hpp>
#include <strata/error.hpp>
#include <strata/nn/clip.hpp>
#include <strata/ops.hpp>

#include <cmath>
#include <cstdio>

namespace strata::nn {

namespace {

/// The gradient in a dtype to compute norms in: f16 and bf16 widen to f32.
Tensor widened(const Tensor& g) {
  return g.dtype() == DType::f16 || g.dtype() == DType::bf16 ? cast(g, DType::f32) : g;
}

/// The p-norm of all elements of `g`, on the host.
double p_norm(const Tensor& g, double p) {
  Tensor w = abs(widened(g));
  if (std::isinf(p)) return amax(w).item<double>();
  if (p == 1.0) return sum(w).item<double>();
  if (p == 2.0) return std::sqrt(sum(w * w).item<double>());
  return std::pow(sum(pow(w, p)).item<double>(), 1.0 / p);
}

/// Elements that are NaN or ±Inf (x − x is NaN exactly for those).
int64_t count_nonfinite(const Tensor& g) {
  Tensor w = widened(g);
  Tensor d = w - w;
  return static_cast<int64_t>(sum(cast(ne(d, zeros_like(d)), DType::f32)).item<double>());
}

std::string label(const std::string& name, size_t index, const Tensor& t) {
  return (name.empty() ? "parameter " + std::to_string(index) : "parameter '" + name + "'") + " (" + type_string(t) + ")";
}

double clip_norm(const NamedTensors& params, double max_norm, const ClipOptions& o) {
  if (!(max_norm >= 0)) throw ValueError("clip_grad_norm_: max_norm must be >= 0, got " + std::to_string(max_norm));
  if (!(o.norm_type > 0)) throw ValueError("clip_grad_norm_: norm_type must be > 0 (or infinity), got " + std::to_string(o.norm_type));
  const double p = o.norm_type;
  std::vector<Tensor> grads;
  std::vector<double> norms;
  for (const auto& [name, param] : params) {
    Tensor g = param.defined() ? param.grad() : Tensor();
    grads.push_back(g);
    norms.push_back(g.defined() ? p_norm(g, p) : 0.0);
  }
  double total = 0.0;
  if (std::isinf(p)) {
    for (double n : norms) total = std::isnan(n) || std::isnan(total) ? NAN : std::max(total, n);
  } else {
    for (double n : norms) total += std::pow(n, p);
    total = std::pow(total, 1.0 / p);
  }
  if (!std::isfinite(total) && o.nonfinite == NonFinite::error) {
    for (size_t k = 0; k < grads.size(); ++k) {
      if (std::isfinite(norms[k])) continue;
      const int64_t bad = count_nonfinite(grads[k]);
      throw Error("clip_grad_norm_: the gradient of " + label(params[k].first, k, params[k].second) +
                  (bad > 0 ? " has " + std::to_string(bad) + " NaN or infinite elements"
                           : "'s norm overflows to infinity") +
                  " (total norm " + std::to_string(total) + "); pass NonFinite::propagate to clip anyway");
    }
    throw Error("clip_grad_norm_: the total norm overflows to infinity");
  }
  const double coefficient = max_norm / (total + o.eps);
  if (coefficient >= 1.0) return total;  // also false for NaN: then, as PyTorch, every gradient becomes NaN
  NoGradGuard no_grad;
  for (Tensor& g : grads) {
    if (g.defined()) g.copy_(g * coefficient);
  }
  return total;
}

NamedTensors unnamed(const std::vector<Tensor>& params) {
  NamedTensors named;
  for (const Tensor& p : params) named.emplace_back(std::string(), p);
  return named;
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, const ClipOptions& options) {
  return clip_norm(unnamed(params), max_norm, options);
}

double clip_grad_norm_(const NamedTensors& params, double max_norm, const ClipOptions& options) {
  return clip_norm(params, max_norm, options);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  if (!(clip_value >= 0)) throw ValueError("clip_grad_value_: clip_value must be >= 0, got " + std::to_string(clip_value));
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.defined() ? p.grad() : Tensor();
    if (g.defined()) g.copy_(clamp(g, -clip_value, clip_value));
  }
}

std::vector<GradStats> grad_stats(const NamedTensors& params) {
  NoGradGuard no_grad;
  std::vector<GradStats> out;
  for (const auto& [name, param] : params) {
    GradStats s;
    s.name = name;
    s.numel = param.defined() ? param.numel() : 0;
    Tensor g = param.defined() ? param.grad() : Tensor();
    s.has_grad = g.defined();
    if (s.has_grad && g.numel() > 0) {
      Tensor w = widened(g);
      s.norm = std::sqrt(sum(w * w).item<double>());
      s.max_abs = amax(abs(w)).item<double>();
      s.mean = mean(w).item<double>();
      s.nonfinite = count_nonfinite(g);
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<GradStats> grad_stats(const Module& module) { return grad_stats(module.named_parameters()); }

std::string format_grad_stats(const std::vector<GradStats>& stats) {
  size_t width = 9;  // "parameter"
  for (const GradStats& s : stats) width = std::max(width, s.name.size());
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "%-*s %10s %12s %12s %12s %9s\n", static_cast<int>(width), "parameter", "numel",
                "norm", "max|g|", "mean", "nonfinite");
  out += line;
  for (const GradStats& s : stats) {
    if (!s.has_grad) {
      std::snprintf(line, sizeof(line), "%-*s %10lld %12s\n", static_cast<int>(width), s.name.c_str(),
                    static_cast<long long>(s.numel), "no grad");
    } else {
      std::snprintf(line, sizeof(line), "%-*s %10lld %12.4e %12.4e %12.4e %9lld\n", static_cast<int>(width),
                    s.name.c_str(), static_cast<long long>(s.numel), s.norm, s.max_abs, s.mean,
                    static_cast<long long>(s.nonfinite));
    }
    out += line;
  }
  return out;
}

}  // namespace strata::nn
