// nn.cpp — strata._strata.nn: the C++ training toolkit for Python's
// strata.nn (python/strata/nn.py builds Module, Linear and the layers on
// it): the functional losses, the optimizers (the C++ classes, fused
// updates included), gradient clipping, the C++ Linear's initialisation,
// and safetensors files as the C++ side writes and reads them.
#include "bindings.hpp"

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <strata/nn.hpp>
#include <strata/serialize.hpp>

#include <string>
#include <tuple>
#include <vector>

namespace strata::python {

namespace {

namespace F = nn::functional;

nn::Reduction reduction_of(const std::string& r) {
  if (r == "mean") return nn::Reduction::mean;
  if (r == "sum") return nn::Reduction::sum;
  if (r == "none") return nn::Reduction::none;
  throw nb::value_error(("reduction must be 'mean', 'sum' or 'none', got '" + r + "'").c_str());
}

nb::dict to_dict(const nn::NamedTensors& named) {
  nb::dict d;
  for (const auto& [name, t] : named) d[nb::str(name.c_str())] = nb::cast(t);
  return d;
}

nn::NamedTensors from_dict(const nb::dict& d) {
  nn::NamedTensors out;
  for (auto [k, v] : d) out.emplace_back(nb::cast<std::string>(k), nb::cast<Tensor>(v));
  return out;
}

constexpr auto kRelease = nb::call_guard<nb::gil_scoped_release>();

}  // namespace

void bind_nn(nb::module_& m) {
  nb::module_ nnm = m.def_submodule("nn", "The C++ training toolkit (strata.nn builds its modules on it).");
  nnm.def("cross_entropy", [](const Tensor& x, const Tensor& y, const std::string& r, double smoothing) {
    return F::cross_entropy(x, y, reduction_of(r), smoothing);
  }, nb::arg("input"), nb::arg("target"), nb::arg("reduction") = "mean", nb::arg("label_smoothing") = 0.0);
  nnm.def("nll_loss", [](const Tensor& x, const Tensor& y, const std::string& r) {
    return F::nll_loss(x, y, reduction_of(r));
  }, nb::arg("input"), nb::arg("target"), nb::arg("reduction") = "mean");
  nnm.def("mse_loss", [](const Tensor& x, const Tensor& y, const std::string& r) {
    return F::mse_loss(x, y, reduction_of(r));
  }, nb::arg("input"), nb::arg("target"), nb::arg("reduction") = "mean");
  nnm.def("dropout", &F::dropout, nb::arg("input"), nb::arg("p") = 0.5, nb::arg("training") = true);
  nnm.def("layer_norm", [](const Tensor& x, const Shape& shape, const Tensor* w, const Tensor* b, double eps) {
    return F::layer_norm(x, shape, w ? *w : Tensor(), b ? *b : Tensor(), eps);
  }, nb::arg("input"), nb::arg("normalized_shape"), nb::arg("weight").none() = nb::none(),
     nb::arg("bias").none() = nb::none(), nb::arg("eps") = 1e-5);
  nnm.def("_linear_init", [](int64_t in, int64_t out, bool bias) {
    nn::Linear l(in, out, bias);  // the C++ layer's initialisation, draw for draw
    return std::make_pair(l.weight, bias ? std::optional<Tensor>(l.bias) : std::nullopt);
  }, nb::arg("in_features"), nb::arg("out_features"), nb::arg("bias") = true);

  nb::class_<nn::Optimizer>(nnm, "Optimizer", "An optimizer over a list of parameters (the C++ class).")
      .def("step", &nn::Optimizer::step, kRelease, "One update of every parameter that has a gradient.")
      .def("zero_grad", &nn::Optimizer::zero_grad, "Clears every parameter's .grad.")
      .def_prop_rw("lr", &nn::Optimizer::lr, &nn::Optimizer::set_lr)
      .def_prop_ro("step_count", &nn::Optimizer::step_count)
      .def_prop_ro("params", [](const nn::Optimizer& o) { return o.params(); })
      .def("state_dict", [](const nn::Optimizer& o) { return to_dict(o.state_dict()); })
      .def("load_state_dict", [](nn::Optimizer& o, const nb::dict& d) { o.load_state_dict(from_dict(d)); },
           nb::arg("state"));
  nb::class_<nn::SGD, nn::Optimizer>(nnm, "SGD")
      .def("__init__", [](nn::SGD* self, std::vector<Tensor> params, double lr, double momentum, double dampening,
                          double weight_decay, bool nesterov) {
        new (self) nn::SGD(std::move(params), {.lr = lr, .momentum = momentum, .dampening = dampening,
                                               .weight_decay = weight_decay, .nesterov = nesterov});
      }, nb::arg("params"), nb::arg("lr") = 0.01, nb::arg("momentum") = 0.0, nb::arg("dampening") = 0.0,
         nb::arg("weight_decay") = 0.0, nb::arg("nesterov") = false);
  nb::class_<nn::Adam, nn::Optimizer>(nnm, "Adam")
      .def("__init__", [](nn::Adam* self, std::vector<Tensor> params, double lr, std::pair<double, double> betas,
                          double eps, double weight_decay) {
        new (self) nn::Adam(std::move(params), {.lr = lr, .beta1 = betas.first, .beta2 = betas.second, .eps = eps,
                                                .weight_decay = weight_decay});
      }, nb::arg("params"), nb::arg("lr") = 1e-3, nb::arg("betas") = std::make_pair(0.9, 0.999),
         nb::arg("eps") = 1e-8, nb::arg("weight_decay") = 0.0);
  nb::class_<nn::AdamW, nn::Adam>(nnm, "AdamW")
      .def("__init__", [](nn::AdamW* self, std::vector<Tensor> params, double lr, std::pair<double, double> betas,
                          double eps, double weight_decay) {
        new (self) nn::AdamW(std::move(params), {.lr = lr, .beta1 = betas.first, .beta2 = betas.second, .eps = eps,
                                                 .weight_decay = weight_decay});
      }, nb::arg("params"), nb::arg("lr") = 1e-3, nb::arg("betas") = std::make_pair(0.9, 0.999),
         nb::arg("eps") = 1e-8, nb::arg("weight_decay") = 0.01);

  nnm.def("clip_grad_norm_", [](const std::vector<Tensor>& params, double max_norm, double norm_type) {
    return nn::clip_grad_norm_(params, max_norm, {.norm_type = norm_type});
  }, nb::arg("parameters"), nb::arg("max_norm"), nb::arg("norm_type") = 2.0, kRelease,
  "Scales the gradients so their norm is at most max_norm; returns the norm before.");
  nnm.def("clip_grad_value_", &nn::clip_grad_value_, nb::arg("parameters"), nb::arg("clip_value"), kRelease);

  m.def("save_tensors", [](const std::filesystem::path& path, const nb::dict& tensors,
                           const std::map<std::string, std::string>& metadata) {
    save_tensors(path, from_dict(tensors), metadata);
  }, nb::arg("path"), nb::arg("tensors"), nb::arg("metadata") = std::map<std::string, std::string>{},
  "Writes a safetensors file (atomically), as the C++ side does.");
  m.def("load_tensors", [](const std::filesystem::path& path, std::optional<Device> device) {
    LoadedTensors l = load_tensors(path, device);
    return std::make_pair(to_dict(l.tensors), l.metadata);
  }, nb::arg("path"), nb::arg("device") = nb::none(),
  "Reads a safetensors file: (tensors by name, metadata).");
}

}  // namespace strata::python
