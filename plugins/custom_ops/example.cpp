// example.cpp — custom_ops_demo: loads the custom_ops plugin, calls its op
// by name and checks it, and its derivatives to third order, against the
// same expression built from Strata's own ops.
//
//   custom_ops_demo [--plugin /path/to/libstrata_plugin_custom_ops.so]
//
// Where the plugin comes from, first match wins:
//   1. --plugin FILE: added to the configuration's plugin paths at run time
//      (runtime().configure), the way a program would point at a plugin it
//      ships;
//   2. STRATA_PLUGIN_PATH (colon-separated files or folders), which the
//      runtime reads by itself — nothing to do here;
//   3. the plugin this build made (its path is compiled in), when it exists.
// A configuration file listing the plugin's folder under "plugins.paths"
// (STRATA_CONFIG=...) works as well.
//
// Every check runs in f64 on cpu:0, where the plugin's kernels were added to
// the CPU plugin's device through host->register_kernels; each compares the
// plugin op F(a, b) = custom_ops::swiglu(a, b) with the composite
// C(a, b) = silu(a) * b under the same transform (Strata's autograd
// differentiates C through the core's rules and F through the plugin's
// rules). The largest absolute difference of each must be <= 1e-10.
// The last line says PASSED or FAILED; the exit status is 0 only on PASSED.
#include <strata/strata.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace strata;

constexpr const char* kSwiglu = "custom_ops::swiglu";
constexpr double kTolerance = 1e-10;

/// The plugin op, reached by name.
Tensor swiglu(const Tensor& a, const Tensor& b) { return call_op(kSwiglu, {a, b})[0]; }
/// The reference: the same function from core ops.
Tensor composite(const Tensor& a, const Tensor& b) { return silu(a) * b; }

using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;

/// Uniform values in [lo, hi], drawn on the host from a fixed seed.
Tensor values(const Shape& shape, double lo, double hi, unsigned seed, DType dtype, Device device) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return from_data(v, shape, {.dtype = dtype, .device = device});
}

/// max |x - y| over all elements (x, y of one shape; copied to the host).
double max_abs_diff(const Tensor& x, const Tensor& y) {
  std::vector<double> xs = x.to_vector<double>(), ys = y.to_vector<double>();
  if (xs.size() != ys.size()) return INFINITY;
  double worst = 0.0;  // over the f64 checks
  for (size_t i = 0; i < xs.size(); ++i) {
    double d = std::fabs(xs[i] - ys[i]);
    if (std::isnan(d)) return INFINITY;
    worst = std::max(worst, d);
  }
  return worst;
}

double max_abs(const Tensor& x) {
  double m = 0.0;
  for (double v : x.to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}

struct Report {
  int checks = 0;
  int failures = 0;
  double worst = 0.0;  // over the f64 checks

  /// Compares what `compute` gives for the plugin op and for the composite.
  void compare(const std::string& what, const std::function<Tensor(const Binary&)>& compute,
               double tolerance = kTolerance) {
    compare(what, compute, compute, tolerance);
  }
  /// Compares `compute` of the plugin op with `reference` of the composite.
  void compare(const std::string& what, const std::function<Tensor(const Binary&)>& compute,
               const std::function<Tensor(const Binary&)>& reference, double tolerance = kTolerance) {
    ++checks;
    try {
      Tensor got = compute(swiglu);
      Tensor want = reference(composite);
      double err = max_abs_diff(got, want);
      if (tolerance == kTolerance) worst = std::max(worst, err);  // the f64 checks
      bool ok = err <= tolerance;
      if (!ok) ++failures;
      std::printf("  %-48s max |plugin - composite| = %.3e  (max |value| %.3g)  %s\n", what.c_str(), err,
                  max_abs(want), ok ? "ok" : "FAILED");
    } catch (const std::exception& e) {
      ++failures;
      std::printf("  %-48s FAILED: %s\n", what.c_str(), e.what());
    }
  }

  /// `f` must throw strata::Error whose message contains `expected`.
  void expect_error(const std::string& what, const std::function<void()>& f, const std::string& expected) {
    ++checks;
    try {
      f();
      ++failures;
      std::printf("  %-48s FAILED: no error\n", what.c_str());
    } catch (const Error& e) {
      bool ok = std::string(e.what()).find(expected) != std::string::npos;
      if (!ok) ++failures;
      std::printf("  %-48s %s: %s\n", what.c_str(), ok ? "ok, error" : "FAILED, wrong error", e.what());
    }
  }
};

/// Adds `file` to the configuration's plugin paths (the runtime loads the
/// plugins it has not seen yet and keeps the rest).
void load_plugin_file(const std::string& file) {
  Config config = runtime().config();
  config.plugin_paths.push_back(file);
  runtime().configure(config);
}

/// The outcome recorded for the custom_ops plugin, or nullptr.
const PluginInfo* find_plugin(const std::vector<PluginInfo>& plugins) {
  const PluginInfo* found = nullptr;
  for (const PluginInfo& p : plugins) {
    if (p.name == "custom_ops" && (found == nullptr || p.loaded)) found = &p;
  }
  return found;
}

int run(int argc, char** argv) {
  std::string plugin_file;
  for (int k = 1; k < argc; ++k) {
    if (std::strcmp(argv[k], "--plugin") == 0 && k + 1 < argc) {
      plugin_file = argv[++k];
    } else {
      std::fprintf(stderr, "usage: %s [--plugin /path/to/libstrata_plugin_custom_ops.so]\n", argv[0]);
      return 2;
    }
  }
  const char* env = std::getenv("STRATA_PLUGIN_PATH");
  std::string source;
  if (!plugin_file.empty()) {
    source = "--plugin " + plugin_file;
  } else if (env != nullptr && *env != '\0') {
    source = std::string("STRATA_PLUGIN_PATH=") + env;
  } else {
#ifdef CUSTOM_OPS_BUILT_PLUGIN
    if (std::filesystem::exists(CUSTOM_OPS_BUILT_PLUGIN)) plugin_file = CUSTOM_OPS_BUILT_PLUGIN;
    source = "the plugin of this build, " + plugin_file;
#endif
  }
  if (!plugin_file.empty()) load_plugin_file(plugin_file);

  std::vector<PluginInfo> plugins = runtime().plugins();
  const PluginInfo* info = find_plugin(plugins);
  if (info == nullptr || !info->loaded) {
    std::printf("custom_ops_demo: FAILED: the custom_ops plugin is not loaded (looked at %s): %s\n",
                source.empty() ? "nothing: pass --plugin FILE or set STRATA_PLUGIN_PATH" : source.c_str(),
                info == nullptr ? "the runtime saw no such plugin" : info->reason.c_str());
    return 1;
  }
  std::printf("custom_ops_demo: plugin custom_ops %s loaded (from %s), ops:", info->version.c_str(), source.c_str());
  for (const std::string& op : info->ops) std::printf(" %s", op.c_str());
  std::printf("\n");

  const Device cpu("cpu:0");
  const Shape shape{4, 6};
  const Tensor a = values(shape, -4.0, 4.0, 1, DType::f64, cpu);
  const Tensor b = values(shape, -2.0, 2.0, 2, DType::f64, cpu);
  const Tensor v = values(shape, -1.0, 1.0, 3, DType::f64, cpu);  // a direction for forward mode
  Report r;
  runtime().reset_fallback_stats();

  std::printf("forward (cpu:0, f64 [4, 6]; f32 checked to 1e-5):\n");
  r.compare("F(a, b)", [&](const Binary& F) { return F(a, b); });
  r.compare("F(a, b) in f32", [&](const Binary& F) { return F(a.to(DType::f32), b.to(DType::f32)).to(DType::f64); },
            1e-5);

  // f(x) = sum F(x, b) and its relatives: reverse mode, nested.
  auto sum_over_a = [&](const Binary& F, const Tensor& bb) { return Fn([F, bb](const Tensor& x) { return sum(F(x, bb)); }); };
  auto sum_over_b = [&](const Binary& F, const Tensor& aa) { return Fn([F, aa](const Tensor& y) { return sum(F(aa, y)); }); };

  std::printf("first derivatives of sum F(a, b):\n");
  r.compare("d/da   = b * silu'(a)", [&](const Binary& F) { return grad(sum_over_a(F, b))(a); });
  r.compare("d/db   = silu(a)", [&](const Binary& F) { return grad(sum_over_b(F, a))(b); });

  std::printf("second derivatives:\n");
  r.compare("d2/da2 = b * silu''(a)", [&](const Binary& F) { return nth_grad(sum_over_a(F, b), 2)(a); });
  r.compare("d/db d/da = silu'(a)", [&](const Binary& F) {
    return grad(Fn([&](const Tensor& y) { return sum(grad(sum_over_a(F, y))(a)); }))(b);
  });
  r.compare("d/da d/db = silu'(a)", [&](const Binary& F) {
    return grad(Fn([&](const Tensor& x) { return sum(grad(sum_over_b(F, x))(b)); }))(a);
  });

  std::printf("third derivatives:\n");
  r.compare("d3/da3 = b * silu'''(a)", [&](const Binary& F) { return nth_grad(sum_over_a(F, b), 3)(a); });
  r.compare("d/db d2/da2 = silu''(a)", [&](const Binary& F) {
    return grad(Fn([&](const Tensor& y) { return sum(nth_grad(sum_over_a(F, y), 2)(a)); }))(b);
  });
  r.compare("d/da d/db d/da = silu''(a)", [&](const Binary& F) {
    return grad(Fn([&](const Tensor& x) {
      return sum(grad(Fn([&](const Tensor& y) { return sum(grad(sum_over_a(F, y))(x)); }))(b));
    }))(a);
  });

  // L(x) = sum F(x, b)^2: the backward op's seed g = 2F depends on x, so the
  // rules' terms in g (ḡ, ġ) are exercised too.
  std::printf("derivatives of sum F(a, b)^2 (seeds that depend on a):\n");
  auto squared = [&](const Binary& F) {
    return Fn([F, &b](const Tensor& x) {
      Tensor y = F(x, b);
      return sum(y * y);
    });
  };
  r.compare("d/da", [&](const Binary& F) { return grad(squared(F))(a); });
  r.compare("d2/da2", [&](const Binary& F) { return nth_grad(squared(F), 2)(a); });
  r.compare("d3/da3", [&](const Binary& F) { return nth_grad(squared(F), 3)(a); });

  // Forward mode: the plugin's JVP rules.
  std::printf("forward mode (direction v):\n");
  r.compare("jvp of F(., b)", [&](const Binary& F) {
    return jvp(Fn([&](const Tensor& x) { return F(x, b); }), a, v).second;
  });
  r.compare("hvp of sum F^2 (forward over reverse)",
            [&](const Binary& F) { return hvp(squared(F), a, v, HvpMode::forward_over_reverse); });
  // Third order: forward over forward over reverse, against the composite
  // in the same mode, and against the composite's jvp of a
  // reverse-over-reverse hvp.
  auto third_order = [&](HvpMode mode) {
    return [&, mode](const Binary& F) {
      return jvp(Fn([&](const Tensor& x) { return hvp(squared(F), x, v, mode); }), a, v).second;
    };
  };
  r.compare("jvp of hvp of sum F^2 (third order)", third_order(HvpMode::forward_over_reverse));
  r.compare("jvp of hvp of sum F^2 (third order, against reverse over reverse)",
            third_order(HvpMode::forward_over_reverse), third_order(HvpMode::reverse_over_reverse));
  r.compare("jvp of hvp (reverse over reverse)", third_order(HvpMode::reverse_over_reverse));

  // Every call above ran the plugin's kernels on cpu:0: no fallback.
  uint64_t plugin_fallbacks = 0;
  for (const FallbackRecord& f : runtime().fallback_stats()) {
    if (f.op.starts_with("custom_ops::")) plugin_fallbacks += f.count;
  }
  ++r.checks;
  if (plugin_fallbacks != 0) ++r.failures;
  std::printf("  %-48s %llu  %s\n", "fallbacks of custom_ops ops on cpu:0", static_cast<unsigned long long>(plugin_fallbacks),
              plugin_fallbacks == 0 ? "ok" : "FAILED");

  // The plugin's own device runs the same kernels (other ops fall back to the CPU).
  std::printf("on the plugin's own device custom_ops:0 (core ops there fall back to cpu:0, logged once each):\n");
  const Device own("custom_ops:0");
  r.compare("F(a, b)", [&](const Binary& F) {
    return F(a.to(own), b.to(own)).to(cpu);
  });
  r.compare("d/da", [&](const Binary& F) {
    Tensor bo = b.to(own);
    return grad(Fn([F, bo](const Tensor& x) { return sum(F(x, bo)); }))(a.to(own)).to(cpu);
  });

  std::printf("the shape rule refuses bad calls:\n");
  r.expect_error("shapes [4, 6] and [6]", [&] { swiglu(a, values({6}, 0, 1, 4, DType::f64, cpu)); },
                 "custom_ops::swiglu needs inputs of one shape and one dtype");
  r.expect_error("dtypes f64 and f32", [&] { swiglu(a, b.to(DType::f32)); }, "b f32[4, 6]");
  r.expect_error("dtype i64", [&] { swiglu(a.to(DType::i64), b.to(DType::i64)); }, "f32 and f64 tensors only");

  if (r.failures == 0) {
    std::printf("custom_ops_demo: PASSED (%d checks, largest f64 difference %.3e <= %.0e)\n", r.checks, r.worst,
                kTolerance);
    return 0;
  }
  std::printf("custom_ops_demo: FAILED (%d of %d checks)\n", r.failures, r.checks);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::printf("custom_ops_demo: FAILED: %s\n", e.what());
    return 1;
  }
}
