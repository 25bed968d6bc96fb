// bindings.hpp — what the parts of strata._strata share (python/src/).
//   module.cpp    the module: exceptions, dtypes, devices, the runtime
//   tensor.cpp    strata.Tensor: properties, conversion to and from NumPy
//                 and DLPack, indexing as views, creation functions
//   ops.cpp       every public op as a function, the usual ones as methods
//                 and operators
//   autograd.cpp  requires_grad and backward, no_grad, GradientTape, the
//                 function transforms
//   nn.cpp        losses, optimizers, clipping, safetensors files
//   rules.cpp     custom_vjp / custom_jvp from Python callables,
//                 checkpoint, autocast, GradScaler
//   distributed.cpp  process groups on Gloo, when the build has them
#pragma once

#include <nanobind/nanobind.h>
#include <strata/strata.hpp>

namespace strata::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);
/// strata.Error, the Python base of every error Strata raises (module.cpp).
PyObject* strata_error_type();
void bind_types(nb::module_& m);
void bind_tensor(nb::module_& m, nb::class_<Tensor>& cls);
void bind_ops(nb::module_& m, nb::class_<Tensor>& cls);
void bind_autograd(nb::module_& m, nb::class_<Tensor>& cls);
void bind_nn(nb::module_& m);
void bind_rules(nb::module_& m);
void bind_distributed(nb::module_& m);

}  // namespace strata::python
