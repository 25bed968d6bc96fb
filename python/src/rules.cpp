// rules.cpp — custom derivative rules from Python callables (custom_vjp,
// custom_jvp), activation checkpointing, autocast and GradScaler. The
// Python-facing decorators are in python/strata/__init__.py; these take and
// give lists of tensors, as the C++ API does. A Python exception raised in a
// rule propagates unchanged, with its traceback.
#include "bindings.hpp"

#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

namespace strata::python {

namespace {

/// `with strata.autocast(dtype, device):` — the C++ scope from __enter__ to
/// __exit__.
class PyAutocast {
 public:
  explicit PyAutocast(AutocastOptions options) : options_(options) {}
  void enter() {
    if (scope_) throw nb::value_error("this autocast scope is already entered");
    scope_.emplace(options_);
  }
  void exit(nb::args) { scope_.reset(); }

 private:
  AutocastOptions options_;
  std::optional<Autocast> scope_;
};

}  // namespace

void bind_rules(nb::module_& m) {
  nb::class_<CustomFunction>(m, "CustomFunction", "A function with its own derivative rules (the C++ class).")
      .def("__call__", [](const CustomFunction& f, const std::vector<Tensor>& inputs) { return f(inputs); },
           nb::arg("inputs"))
      .def_prop_ro("name", &CustomFunction::name);
  m.def("_custom_vjp", [](TensorsFn f, VjpForward fwd, VjpBackward bwd, const std::string& name, bool first_order) {
    return custom_vjp(std::move(f), std::move(fwd), std::move(bwd), {.name = name, .first_order_only = first_order});
  }, nb::arg("f"), nb::arg("fwd"), nb::arg("bwd"), nb::arg("name"), nb::arg("first_order_only") = false);
  m.def("_custom_jvp", [](TensorsFn f, JvpRule rule, const std::string& name) {
    return custom_jvp(std::move(f), std::move(rule), {.name = name});
  }, nb::arg("f"), nb::arg("rule"), nb::arg("name"));

  // vmap over lists of tensors (python/strata/__init__.py unpacks them).
  m.def("_vmap", [](TensorsFn fn, std::vector<std::optional<int64_t>> in_dims, std::vector<int64_t> out_dims,
                    const std::string& randomness) {
    VmapOptions options;
    if (randomness == "error") options.randomness = Randomness::error;
    else if (randomness == "different") options.randomness = Randomness::different;
    else if (randomness == "same") options.randomness = Randomness::same;
    else throw nb::value_error(("randomness must be 'error', 'different' or 'same', got '" + randomness + "'").c_str());
    return vmap(std::move(fn), std::move(in_dims), std::move(out_dims), options);
  }, nb::arg("fn"), nb::arg("in_dims"), nb::arg("out_dims"), nb::arg("randomness") = "error");
  m.def("per_sample_grad", [](const ExampleLoss& loss, const std::vector<Tensor>& params,
                              const std::vector<Tensor>& batch) { return per_sample_grad(loss, params, batch); },
        nb::arg("loss"), nb::arg("params"), nb::arg("batch"),
        "For every example (dim 0 of each batch tensor), the gradient of loss(params, example) with respect to "
        "each parameter, in one batched pass: one tensor per parameter, [examples] + its shape.");

  // Implicit differentiation through solvers.
  nb::class_<ImplicitSolution>(m, "ImplicitSolution", "A solver's solution and how it was reached.")
      .def_ro("x", &ImplicitSolution::x)
      .def_ro("iterations", &ImplicitSolution::iterations)
      .def_ro("residual", &ImplicitSolution::residual)
      .def_ro("converged", &ImplicitSolution::converged);
  auto implicit = [](auto solve) {
    return [solve](const ImplicitFn& f, const Tensor& x0, const std::vector<Tensor>& params,
                    std::optional<double> tolerance, int64_t max_iterations) {
      ImplicitOptions options;
      options.tolerance = tolerance;
      options.max_iterations = max_iterations;
      return solve(f, x0, params, options);
    };
  };
  m.def("fixed_point", implicit([](auto&&... a) { return fixed_point(a...); }), nb::arg("f"), nb::arg("x0"),
        nb::arg("params"), nb::arg("tolerance") = nb::none(), nb::arg("max_iterations") = 1000,
        "x* = f(x*, params) by iteration from x0; differentiable with respect to params by the implicit function "
        "theorem.");
  m.def("root", implicit([](auto&&... a) { return root(a...); }), nb::arg("g"), nb::arg("x0"), nb::arg("params"),
        nb::arg("tolerance") = nb::none(), nb::arg("max_iterations") = 1000,
        "g(x*, params) = 0 by Newton's method from x0; differentiable with respect to params.");

  m.def("_checkpoint", [](const CheckpointFn& fn, const std::vector<Tensor>& inputs) { return checkpoint(fn, inputs); },
        nb::arg("fn"), nb::arg("inputs"));

  nb::class_<PyAutocast>(m, "autocast",
                         "with strata.autocast(strata.bfloat16): matrix products and the ops the policy lists run "
                         "in the lower precision on the device (docs/mixed-precision-and-checkpointing.md).")
      .def("__init__", [](PyAutocast* self, DType dtype, std::optional<Device> device, bool enabled) {
        new (self) PyAutocast({.dtype = dtype, .device = device, .enabled = enabled});
      }, nb::arg("dtype") = DType::bf16, nb::arg("device") = nb::none(), nb::arg("enabled") = true)
      .def("__enter__", &PyAutocast::enter)
      .def("__exit__", &PyAutocast::exit);

  nb::class_<GradScaler>(m, "GradScaler", "Dynamic loss scaling for f16 training (the C++ class).")
      .def("__init__", [](GradScaler* self, double init_scale, double growth_factor, double backoff_factor,
                          int64_t growth_interval, bool enabled) {
        new (self) GradScaler({.init_scale = init_scale, .growth_factor = growth_factor,
                               .backoff_factor = backoff_factor, .growth_interval = growth_interval,
                               .enabled = enabled});
      }, nb::arg("init_scale") = 65536.0, nb::arg("growth_factor") = 2.0, nb::arg("backoff_factor") = 0.5,
         nb::arg("growth_interval") = 2000, nb::arg("enabled") = true)
      .def("scale", &GradScaler::scale, nb::arg("loss"))
      .def("unscale_", [](GradScaler& s, const nn::Optimizer& opt) { s.unscale(opt.params()); }, nb::arg("optimizer"))
      .def("step", [](GradScaler& s, nn::Optimizer& opt) { return s.step(opt.params(), [&opt] { opt.step(); }); },
           nb::arg("optimizer"), "Unscales (if not yet), then steps unless a gradient is not finite.")
      .def("update", &GradScaler::update)
      .def("get_scale", &GradScaler::get_scale)
      .def_prop_ro("found_inf", &GradScaler::found_inf)
      .def_prop_ro("skipped_steps", &GradScaler::skipped_steps)
      .def("state_dict", &GradScaler::state_dict,
           "The scale and its counters as (name, 0-d tensor) pairs: what a checkpoint stores.");
}

}  // namespace strata::python
