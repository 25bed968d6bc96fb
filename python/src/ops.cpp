// ops.cpp — every public op of <strata/ops.hpp> as a function of the module,
// the usual ones as Tensor methods, and Python's operators. Python numbers
// are accepted where a tensor operand is, as 0-d tensors of the other
// operand's dtype and device (the C++ API's scalar operands). The GIL is
// released while an op runs.
#include "bindings.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

namespace strata::python {

namespace {

using Unary = Tensor (*)(const Tensor&);
using Binary = Tensor (*)(const Tensor&, const Tensor&);
using Reduction = Tensor (*)(const Tensor&, const Shape&, bool);
constexpr auto kRelease = nb::call_guard<nb::gil_scoped_release>();

/// Elementwise ops release the GIL only for operands of more elements than
/// this: releasing and taking it back costs about as much as a one-element
/// op (bench/python_overhead.py), and a small op returns sooner than another
/// thread could use the GIL.
constexpr int64_t kReleaseAbove = 1 << 14;

template <Binary F>
Tensor binary_call(const Tensor& a, const Tensor& b) {
  if (a.numel() <= kReleaseAbove && b.numel() <= kReleaseAbove) return F(a, b);
  nb::gil_scoped_release release;
  return F(a, b);
}

/// A Python number as a 0-d tensor of `like`'s dtype and device.
Tensor scalar_like(double value, const Tensor& like) {
  return full({}, value, {.dtype = like.dtype(), .device = like.device()});
}

/// A reduction's dims: None (every dim), an int, or a sequence of ints.
Shape dims_of(nb::handle dim) {
  if (dim.is_none()) return {};
  if (PyLong_Check(dim.ptr())) return {nb::cast<int64_t>(dim)};
  return nb::cast<Shape>(dim);
}

template <Binary F>
void def_binary(nb::module_& m, const char* name, const char* doc) {
  m.def(name, &binary_call<F>, nb::arg("input"), nb::arg("other"), doc);
  m.def(name, [](const Tensor& a, double b) { return binary_call<F>(a, scalar_like(b, a)); }, nb::arg("input"),
        nb::arg("other"));
  m.def(name, [](double a, const Tensor& b) { return binary_call<F>(scalar_like(a, b), b); }, nb::arg("input"),
        nb::arg("other"));
}

/// a <op> b and b <op> a (reflected, for a number on the left).
template <Binary F>
void def_operator(nb::class_<Tensor>& cls, const char* name, const char* rname) {
  cls.def(name, &binary_call<F>, nb::is_operator());
  cls.def(name, [](const Tensor& a, double b) { return binary_call<F>(a, scalar_like(b, a)); }, nb::is_operator());
  if (rname != nullptr) {
    cls.def(rname, [](const Tensor& a, double b) { return binary_call<F>(scalar_like(b, a), a); },
            nb::is_operator());
  }
}

}  // namespace

void bind_ops(nb::module_& m, nb::class_<Tensor>& cls) {
  // Elementwise, one operand.
  const std::pair<const char*, Unary> unary[] = {
      {"neg", &neg},       {"abs", &abs},        {"sign", &sign},     {"exp", &exp},     {"log", &log},
      {"log1p", &log1p},   {"expm1", &expm1},    {"sqrt", &sqrt},     {"rsqrt", &rsqrt}, {"sin", &sin},
      {"cos", &cos},       {"atan", &atan},      {"tanh", &tanh},     {"sigmoid", &sigmoid},
      {"relu", &relu},     {"erf", &erf},        {"floor", &floor},   {"ceil", &ceil},   {"round", &round},
      {"reciprocal", &reciprocal}, {"logical_not", &logical_not}, {"square", &square}, {"gelu", &gelu},
      {"silu", &silu},     {"real", &real},      {"imag", &imag},     {"conj", &conj},   {"angle", &angle}};
  for (const auto& [name, f] : unary) {
    auto call = [f](const Tensor& x) {
      if (x.numel() <= kReleaseAbove) return f(x);
      nb::gil_scoped_release release;
      return f(x);
    };
    m.def(name, call, nb::arg("input"));
    cls.def(name, call);
  }

  // Elementwise, two operands.
  def_binary<&add>(m, "add", "input + other, broadcast.");
  def_binary<&sub>(m, "sub", "input - other, broadcast.");
  def_binary<&mul>(m, "mul", "input * other, broadcast.");
  def_binary<&div>(m, "div", "input / other, broadcast (true division).");
  def_binary<static_cast<Binary>(&pow)>(m, "pow", "input ** other, broadcast.");
  def_binary<&maximum>(m, "maximum", "The larger of input and other, elementwise.");
  def_binary<&minimum>(m, "minimum", "The smaller of input and other, elementwise.");
  def_binary<&logical_and>(m, "logical_and", "");
  def_binary<&logical_or>(m, "logical_or", "");
  def_binary<&eq>(m, "eq", "input == other, as bool.");
  def_binary<&ne>(m, "ne", "input != other, as bool.");
  def_binary<&lt>(m, "lt", "input < other, as bool.");
  def_binary<&le>(m, "le", "input <= other, as bool.");
  def_binary<&gt>(m, "gt", "input > other, as bool.");
  def_binary<&ge>(m, "ge", "input >= other, as bool.");
  m.def("where", &where, nb::arg("condition"), nb::arg("input"), nb::arg("other"), kRelease);
  m.def("clamp", &clamp, nb::arg("input"), nb::arg("min"), nb::arg("max"), kRelease);
  cls.def("clamp", &clamp, nb::arg("min"), nb::arg("max"), kRelease);
  m.def("complex", &complex, nb::arg("real"), nb::arg("imag"), kRelease);
  m.def("polar", &polar, nb::arg("abs"), nb::arg("angle"), kRelease);

  // Operators.
  def_operator<&add>(cls, "__add__", "__radd__");
  def_operator<&sub>(cls, "__sub__", "__rsub__");
  def_operator<&mul>(cls, "__mul__", "__rmul__");
  def_operator<&div>(cls, "__truediv__", "__rtruediv__");
  def_operator<static_cast<Binary>(&pow)>(cls, "__pow__", "__rpow__");
  def_operator<&eq>(cls, "__eq__", nullptr);
  def_operator<&ne>(cls, "__ne__", nullptr);
  def_operator<&lt>(cls, "__lt__", nullptr);
  def_operator<&le>(cls, "__le__", nullptr);
  def_operator<&gt>(cls, "__gt__", nullptr);
  def_operator<&ge>(cls, "__ge__", nullptr);
  def_operator<&logical_and>(cls, "__and__", nullptr);
  def_operator<&logical_or>(cls, "__or__", nullptr);
  cls.def("__neg__", [](const Tensor& x) { return neg(x); });
  cls.def("__abs__", [](const Tensor& x) { return abs(x); });
  cls.def("__invert__", [](const Tensor& x) { return logical_not(x); });
  cls.def("__matmul__", &matmul, nb::is_operator(), kRelease);
  cls.def("__hash__", [](const Tensor& t) { return reinterpret_cast<intptr_t>(t.impl()); });
  cls.def("__bool__", [](const Tensor& t) {
    if (t.numel() != 1) {
      throw nb::value_error(("the truth value of a tensor of " + std::to_string(t.numel()) +
                             " elements is ambiguous; use any() or all() (or reduce it first)")
                                .c_str());
    }
    return t.item<double>() != 0.0;
  });

  // Reductions.
  const std::pair<const char*, Reduction> reductions[] = {
      {"sum", &sum}, {"mean", &mean}, {"prod", &prod}, {"amax", &amax}, {"amin", &amin}};
  for (const auto& [name, f] : reductions) {
    m.def(name, [f](const Tensor& x, nb::handle dim, bool keepdim) {
      Shape dims = dims_of(dim);
      nb::gil_scoped_release release;
      return f(x, dims, keepdim);
    }, nb::arg("input"), nb::arg("dim") = nb::none(), nb::arg("keepdim") = false);
    cls.def(name, [f](const Tensor& x, nb::handle dim, bool keepdim) {
      Shape dims = dims_of(dim);
      nb::gil_scoped_release release;
      return f(x, dims, keepdim);
    }, nb::arg("dim") = nb::none(), nb::arg("keepdim") = false);
  }
  m.def("argmax", &argmax, nb::arg("input"), nb::arg("dim"), nb::arg("keepdim") = false, kRelease);
  m.def("argmin", &argmin, nb::arg("input"), nb::arg("dim"), nb::arg("keepdim") = false, kRelease);
  cls.def("argmax", &argmax, nb::arg("dim"), nb::arg("keepdim") = false, kRelease);
  cls.def("argmin", &argmin, nb::arg("dim"), nb::arg("keepdim") = false, kRelease);

  // Linear algebra, indexing, joins, neural-network ops.
  m.def("matmul", &matmul, nb::arg("input"), nb::arg("other"), kRelease);
  cls.def("matmul", &matmul, nb::arg("other"), kRelease);
  m.def("index_select", &index_select, nb::arg("input"), nb::arg("dim"), nb::arg("index"), kRelease);
  m.def("gather", &gather, nb::arg("input"), nb::arg("dim"), nb::arg("index"), kRelease);
  m.def("scatter_add", &scatter_add, nb::arg("input"), nb::arg("dim"), nb::arg("index"), nb::arg("src"), kRelease);
  m.def("cat", &cat, nb::arg("tensors"), nb::arg("dim") = 0, kRelease);
  m.def("stack", &stack, nb::arg("tensors"), nb::arg("dim") = 0, kRelease);
  m.def("pad", &pad, nb::arg("input"), nb::arg("pad"), nb::arg("value") = 0.0, kRelease);
  m.def("softmax", &softmax, nb::arg("input"), nb::arg("dim"), kRelease);
  m.def("log_softmax", &log_softmax, nb::arg("input"), nb::arg("dim"), kRelease);
  cls.def("softmax", &softmax, nb::arg("dim"), kRelease);
  cls.def("log_softmax", &log_softmax, nb::arg("dim"), kRelease);
  m.def("linear", [](const Tensor& x, const Tensor& w, const Tensor* b) { return b ? linear(x, w, *b) : matmul(x, w.mT()); },
        nb::arg("input"), nb::arg("weight"), nb::arg("bias").none() = nb::none(), kRelease);
  m.def("cast", &cast, nb::arg("input"), nb::arg("dtype"), kRelease);
}

}  // namespace strata::python
