// module.cpp — strata._strata: the exceptions (the C++ hierarchy, with the
// same messages), dtypes, devices and the runtime; the rest in tensor.cpp,
// ops.cpp and autograd.cpp. python/strata/__init__.py is the face users
// import.
#include "bindings.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <strata/serialize.hpp>

#include <string>

namespace strata::python {

namespace {

/// A Python exception class "strata.<name>" with `bases` (a new reference
/// to a tuple, released here). The module and g_exceptions keep the class.
PyObject* new_exception(nb::module_& m, const char* name, PyObject* bases, const char* doc) {
  const std::string qualified = std::string("strata.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  Py_DECREF(bases);  // the new type holds its bases
  if (type == nullptr) throw nb::python_error();
  m.attr(name) = nb::handle(type);
  return type;
}

PyObject* tuple_of(std::initializer_list<PyObject*> types) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(types.size()));
  Py_ssize_t k = 0;
  for (PyObject* type : types) {
    Py_INCREF(type);
    PyTuple_SET_ITEM(t, k++, type);
  }
  return t;
}

struct Exceptions {
  PyObject *error, *config, *plugin, *shape, *dtype, *device, *device_lost, *index, *value, *oom, *serialization;
};
Exceptions g_exceptions{};

}  // namespace

PyObject* strata_error_type() { return g_exceptions.error; }

void bind_errors(nb::module_& m) {
  Exceptions& e = g_exceptions;
  e.error = new_exception(m, "Error", tuple_of({PyExc_RuntimeError}), "Every error Strata raises (strata::Error).");
  e.config = new_exception(m, "ConfigError", tuple_of({e.error}), "A configuration file or value is wrong.");
  e.plugin = new_exception(m, "PluginError", tuple_of({e.error}), "A plugin failed to load or to run.");
  e.shape = new_exception(m, "ShapeError", tuple_of({e.error, PyExc_ValueError}), "Shapes that do not fit the op.");
  e.dtype = new_exception(m, "DTypeError", tuple_of({e.error, PyExc_TypeError}), "A dtype the op does not take.");
  e.device = new_exception(m, "DeviceError", tuple_of({e.error}), "A device that is missing or cannot run the op.");
  e.device_lost = new_exception(m, "DeviceLostError", tuple_of({e.device}), "A device that stopped working.");
  e.index = new_exception(m, "IndexError", tuple_of({e.error, PyExc_IndexError}), "An index out of range.");
  e.value = new_exception(m, "ValueError", tuple_of({e.error, PyExc_ValueError}), "An argument of a wrong value.");
  e.oom = new_exception(m, "OutOfMemoryError", tuple_of({e.error, PyExc_MemoryError}), "A device ran out of memory.");
  e.serialization = new_exception(m, "SerializationError", tuple_of({e.error, PyExc_OSError}),
                                  "A tensor file that cannot be written or read.");
  // Most derived first: the first matching handler raises.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    const Exceptions& x = g_exceptions;
    try {
      std::rethrow_exception(p);
    } catch (const DeviceLostError& err) {
      PyErr_SetString(x.device_lost, err.what());
    } catch (const DeviceError& err) {
      PyErr_SetString(x.device, err.what());
    } catch (const ShapeError& err) {
      PyErr_SetString(x.shape, err.what());
    } catch (const DTypeError& err) {
      PyErr_SetString(x.dtype, err.what());
    } catch (const IndexError& err) {
      PyErr_SetString(x.index, err.what());
    } catch (const ValueError& err) {
      PyErr_SetString(x.value, err.what());
    } catch (const OutOfMemoryError& err) {
      PyErr_SetString(x.oom, err.what());
    } catch (const SerializationError& err) {
      PyErr_SetString(x.serialization, err.what());
    } catch (const ConfigError& err) {
      PyErr_SetString(x.config, err.what());
    } catch (const PluginError& err) {
      PyErr_SetString(x.plugin, err.what());
    } catch (const Error& err) {
      PyErr_SetString(x.error, err.what());
    }
  });
}

void bind_types(nb::module_& m) {
  nb::enum_<DType>(m, "dtype", "A tensor's element type.")
      .value("float32", DType::f32)
      .value("float64", DType::f64)
      .value("float16", DType::f16)
      .value("bfloat16", DType::bf16)
      .value("int32", DType::i32)
      .value("int64", DType::i64)
      .value("bool", DType::boolean)
      .value("complex64", DType::c64)
      .value("complex128", DType::c128)
      .def_prop_ro("itemsize", [](DType d) { return dtype_size(d); }, "Bytes per element.")
      .def_prop_ro("is_floating_point", [](DType d) { return is_floating(d); })
      .def_prop_ro("is_complex", [](DType d) { return is_complex(d); })
      .def("__str__", [](DType d) { return std::string("strata.") + std::string(dtype_name(d)); });

  nb::class_<Device>(m, "device", "A device, e.g. strata.device('cpu:0').")
      .def(nb::init<const std::string&>(), nb::arg("id"))
      .def_prop_ro("type", [](const Device& d) { return d.backend(); }, "The plugin's device type, e.g. 'cpu'.")
      .def_prop_ro("index", [](const Device& d) { return d.index(); })
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) { return "strata.device('" + d.str() + "')"; })
      .def("__eq__", [](const Device& a, const Device& b) { return a == b; })
      .def("__eq__", [](const Device& a, const std::string& b) { return a.str() == b; })
      .def("__hash__", [](const Device& d) { return std::hash<std::string>{}(d.str()); });
  nb::implicitly_convertible<std::string, Device>();

  m.def("devices", [] {
    std::vector<Device> out;
    for (const DeviceInfo& info : runtime().devices()) out.push_back(info.device);
    return out;
  }, "The devices the loaded plugins offer, in the configuration's order.");
  m.def("default_device", [] { return runtime().default_device(); }, "The device new tensors go to.");
  m.def("set_default_device", [](const Device& d) { runtime().set_default_device(d); }, nb::arg("device"));
  m.def("device_name", [](const Device& d) { return runtime().device_info(d).name; }, nb::arg("device"),
        "The device's name as its plugin reports it.");
  m.def("load_config", [](const std::string& path) { runtime().load_config(path); }, nb::arg("path"),
        "Reloads the runtime from a JSON configuration file (docs/configuration.md).");
  m.def("synchronize", [](const std::optional<Device>& d) { runtime().synchronize(d ? *d : runtime().default_device()); },
        nb::arg("device") = nb::none(), nb::call_guard<nb::gil_scoped_release>(),
        "Waits until the device's queued work has run.");
  m.def("manual_seed", &manual_seed, nb::arg("seed"), "Seeds the random number generator of every device.");
  m.attr("__version__") = version();
  m.attr("abi_version") = abi_version();
}

}  // namespace strata::python

NB_MODULE(_strata, m) {
  namespace py = strata::python;
  m.doc() = "Strata's C++ API for Python (import strata, not this module).";
  py::bind_errors(m);
  py::bind_types(m);
  auto cls = nanobind::class_<strata::Tensor>(m, "Tensor", "An n-dimensional array on a device, with autograd.");
  py::bind_tensor(m, cls);
  py::bind_ops(m, cls);
  py::bind_autograd(m, cls);
  py::bind_nn(m);
  py::bind_rules(m);
  py::bind_distributed(m);
}
