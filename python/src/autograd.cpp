// autograd.cpp — requires_grad, backward and .grad on strata.Tensor;
// no_grad / enable_grad and GradientTape as context managers; the function
// transforms (grad, value_and_grad, vjp, jvp, jacrev, jacfwd, hvp, hessian),
// which take Python callables and return callables, so they compose to any
// order. The GIL is released around backward passes and transforms; a
// Python function they call takes it back (nanobind's std::function
// wrapper), and a Python exception it raises propagates with its traceback.
#include "bindings.hpp"

#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace strata::python {

namespace {

constexpr auto kRelease = nb::call_guard<nb::gil_scoped_release>();

/// `with strata.no_grad():` / `with strata.enable_grad():` — the C++
/// guard lives from __enter__ to __exit__ (on the thread that entered).
template <class Guard>
struct GuardScope {
  std::optional<Guard> guard;
  void enter() {
    if (guard) throw nb::value_error("this grad-mode scope is already entered");
    guard.emplace();
  }
  void exit(nb::args) { guard.reset(); }
};

/// `with strata.GradientTape() as tape:` — the tape records from
/// __enter__ until __exit__; gradient() is called inside the block, as the
/// C++ tape is used inside its scope.
class PyTape {
 public:
  explicit PyTape(TapeOptions options) : options_(options) {}
  PyTape& enter() {
    if (tape_ != nullptr) throw nb::value_error("GradientTape: already entered");
    if (closed_) throw nb::value_error("GradientTape: a tape is entered once; make a new one");
    tape_ = std::make_unique<GradientTape>(options_);
    return *this;
  }
  void exit(nb::args) {
    tape_.reset();
    closed_ = true;
  }
  GradientTape& tape() {
    if (tape_ == nullptr) {
      throw nb::value_error(closed_ ? "GradientTape: the tape was closed when its with-block ended; call gradient() "
                                      "inside the block (or keep the block open)"
                                    : "GradientTape: use the tape in a with-block: with strata.GradientTape() as tape:");
    }
    return *tape_;
  }

 private:
  TapeOptions options_;
  std::unique_ptr<GradientTape> tape_;
  bool closed_ = false;
};

}  // namespace

void bind_autograd(nb::module_& m, nb::class_<Tensor>& cls) {
  cls.def_prop_rw("requires_grad", &Tensor::requires_grad,
                  [](Tensor& t, bool flag) { t.set_requires_grad(flag); },
                  "Whether backward() computes a gradient for this tensor (set on leaves).")
      .def("requires_grad_", [](Tensor& t, bool flag) -> Tensor& { return t.set_requires_grad(flag); },
           nb::arg("requires_grad") = true, nb::rv_policy::reference)
      .def_prop_ro("is_leaf", &Tensor::is_leaf)
      .def_prop_rw("grad", [](const Tensor& t) -> std::optional<Tensor> {
         Tensor g = t.grad();
         if (!g.defined()) return std::nullopt;
         return g;
       }, [](Tensor& t, std::optional<Tensor> g) { t.set_grad(g ? *g : Tensor()); }, nb::arg("grad").none(),
       "The gradient backward() accumulated (None before); assign None to clear it.")
      .def("backward", [](const Tensor& t, const Tensor* gradient, std::optional<bool> retain_graph,
                          bool create_graph) {
        t.backward(gradient ? *gradient : Tensor(),
                   {.retain_graph = retain_graph.value_or(create_graph), .create_graph = create_graph});
      }, nb::arg("gradient").none() = nb::none(), nb::arg("retain_graph").none() = nb::none(),
      nb::arg("create_graph") = false, kRelease,
      "Accumulates d(self)/d(leaf) into every leaf's .grad. retain_graph defaults to create_graph (PyTorch's rule).")
      .def("detach", &Tensor::detach)
      .def("retain_grad", &Tensor::retain_grad)
      .def("register_hook", &Tensor::register_hook, nb::arg("hook"),
           "Calls hook(grad) during backward; it may return a replacement gradient or None.");

  nb::class_<GuardScope<NoGradGuard>>(m, "no_grad", "with strata.no_grad(): ops record no gradient history.")
      .def(nb::init<>())
      .def("__enter__", &GuardScope<NoGradGuard>::enter)
      .def("__exit__", &GuardScope<NoGradGuard>::exit);
  nb::class_<GuardScope<EnableGradGuard>>(m, "enable_grad", "with strata.enable_grad(): recording inside no_grad.")
      .def(nb::init<>())
      .def("__enter__", &GuardScope<EnableGradGuard>::enter)
      .def("__exit__", &GuardScope<EnableGradGuard>::exit);
  m.def("is_grad_enabled", &is_grad_enabled);

  nb::class_<PyTape>(m, "GradientTape",
                     "Records the ops on watched tensors (and on every tensor that requires grad) while its "
                     "with-block runs; tapes nest, and a tape inside another differentiates to any order.")
      .def("__init__", [](PyTape* self, bool persistent, bool higher_order) {
        new (self) PyTape({.persistent = persistent, .higher_order = higher_order});
      }, nb::arg("persistent") = false, nb::arg("higher_order") = false)
      .def("__enter__", &PyTape::enter, nb::rv_policy::reference)
      .def("__exit__", &PyTape::exit)
      .def("watch", [](PyTape& t, const Tensor& x) { t.tape().watch(x); }, nb::arg("tensor"))
      .def("gradient", [](PyTape& t, const Tensor& target, const Tensor& source, const Tensor* output_grad) {
        GradientTape& tape = t.tape();
        nb::gil_scoped_release release;
        return tape.gradient(target, {source}, output_grad ? *output_grad : Tensor()).front();
      }, nb::arg("target"), nb::arg("sources"), nb::arg("output_grad").none() = nb::none())
      .def("gradient", [](PyTape& t, const Tensor& target, const std::vector<Tensor>& sources,
                          const Tensor* output_grad) {
        GradientTape& tape = t.tape();
        nb::gil_scoped_release release;
        return tape.gradient(target, sources, output_grad ? *output_grad : Tensor());
      }, nb::arg("target"), nb::arg("sources"), nb::arg("output_grad").none() = nb::none(),
      "d target / d sources: one tensor for one source, a list for a list.")
      .def("jacobian", [](PyTape& t, const Tensor& target, const Tensor& source) {
        GradientTape& tape = t.tape();
        nb::gil_scoped_release release;
        return tape.jacobian(target, source);
      }, nb::arg("target"), nb::arg("source"));

  // Function transforms of one tensor: each takes and returns callables.
  m.def("grad", [](Fn f) { return grad(std::move(f)); }, nb::arg("f"),
        "The gradient of a scalar function, as a function: strata.grad(strata.grad(f)) is the second derivative.");
  m.def("value_and_grad", [](Fn f) { return value_and_grad(std::move(f)); }, nb::arg("f"));
  m.def("vjp", [](const Fn& f, const Tensor& x, const Tensor& v) { return vjp(f, x, v); }, nb::arg("f"),
        nb::arg("x"), nb::arg("v"), kRelease, "(f(x), vᵀ·J_f(x)).");
  m.def("jvp", [](const Fn& f, const Tensor& x, const Tensor& v) { return jvp(f, x, v); }, nb::arg("f"),
        nb::arg("x"), nb::arg("v"), kRelease, "(f(x), J_f(x)·v), in forward mode.");
  m.def("jacrev", [](const Fn& f, const Tensor& x) { return jacrev(f, x); }, nb::arg("f"), nb::arg("x"), kRelease);
  m.def("jacfwd", [](const Fn& f, const Tensor& x) { return jacfwd(f, x); }, nb::arg("f"), nb::arg("x"), kRelease);
  m.def("hvp", [](const Fn& f, const Tensor& x, const Tensor& v) { return hvp(f, x, v); }, nb::arg("f"),
        nb::arg("x"), nb::arg("v"), kRelease, "H_f(x)·v without forming H.");
  m.def("hessian", [](const Fn& f, const Tensor& x) { return hessian(f, x); }, nb::arg("f"), nb::arg("x"), kRelease);

  // The same over lists of tensors (python/strata/__init__.py's argnums and
  // tuple forms call them).
  m.def("_grad_list", [](const ScalarFn& f, const std::vector<Tensor>& xs) { return grad(f, xs); }, nb::arg("f"),
        nb::arg("xs"), kRelease);
  m.def("_jvp_list", [](const ListFn& f, const std::vector<Tensor>& xs, const std::vector<Tensor>& vs) {
    return jvp(f, xs, vs);
  }, nb::arg("f"), nb::arg("xs"), nb::arg("vs"), kRelease);
  m.def("_vjp_list", [](const ListFn& f, const std::vector<Tensor>& xs, const std::vector<Tensor>& vs) {
    return vjp(f, xs, vs);
  }, nb::arg("f"), nb::arg("xs"), nb::arg("vs"), kRelease);
  m.def("_hvp_list", [](const ScalarFn& f, const std::vector<Tensor>& xs, const std::vector<Tensor>& vs) {
    return hvp(f, xs, vs);
  }, nb::arg("f"), nb::arg("xs"), nb::arg("vs"), kRelease);

  // strata.compile (python/strata/__init__.py wraps it): the C++ compiled
  // function over a Python callable of a list of tensors. The GIL is
  // released for the call: a replay runs no Python; a trace calls the
  // function, whose wrapper takes the GIL again.
  nb::class_<CompiledFunction>(m, "_CompiledFunction")
      .def("__call__", [](const CompiledFunction& f, const std::vector<Tensor>& inputs) { return f(inputs); },
           nb::arg("inputs"), kRelease)
      .def("stats", [](const CompiledFunction& f) {
        const CompileStats s = f.stats();
        nb::dict out;
        out["calls"] = s.calls;
        out["traces"] = s.traces;
        out["replays"] = s.replays;
        out["eager_calls"] = s.eager_calls;
        out["guard_failures"] = s.guard_failures;
        out["shape_free_traces"] = s.shape_free_traces;
        out["fused_regions"] = s.fused_regions;
        out["fused_ops"] = s.fused_ops;
        out["signatures"] = s.signatures;
        nb::list fallbacks;
        for (const CompileStats::Fallback& fb : s.fallbacks) fallbacks.append(nb::make_tuple(fb.signature, fb.reason));
        out["fallbacks"] = fallbacks;
        return out;
      })
      .def("report", [](const CompiledFunction& f, const std::vector<Tensor>& inputs) {
        return f.report_for(inputs).text();
      }, nb::arg("inputs"));
  m.def("_compile", [](TraceFn fn, bool fuse, size_t max_signatures) {
    // A strata.Error raised inside the Python function (an op the trace
    // refused: an in-place write, a random draw) comes back as a Python
    // error; compile falls back on the C++ Error, so it is one again here.
    // Other Python exceptions propagate unchanged.
    TraceFn checked = [inner = std::move(fn)](const std::vector<Tensor>& inputs) {
      std::string message;
      try {
        return inner(inputs);
      } catch (nb::python_error& e) {
        nb::gil_scoped_acquire gil;
        if (!e.matches(nb::handle(strata_error_type()))) throw;
        message = nb::str(e.value()).c_str();
      }
      throw Error(message);
    };
    return compile(std::move(checked), {.fuse = fuse, .max_signatures = max_signatures});
  }, nb::arg("fn"), nb::arg("fuse"), nb::arg("max_signatures"));
}

}  // namespace strata::python
