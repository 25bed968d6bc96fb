// call_op.cpp — calling an op by its namespaced name (strata::call_op), the
// public twin of the call_op host service: the same lookup, then an ordinary
// dispatch, so the call is recorded and differentiable like any public op.
#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <type_traits>

#include "runtime/dispatch/op.hpp"
#include "runtime/plugins/plugin_host.hpp"

namespace strata {

namespace detail {

const OpDef& callable_op(std::string_view qualified) {
  const OpDef* op = find_kernel_op(qualified);
  if (op == nullptr) throw ValueError("unknown op (names are namespaced: strata::mul, acme::swiglu)");
  if (op->kind != OpKind::primitive && op->kind != OpKind::composite) {
    throw ValueError("op cannot be called by name (a view or join of the core: call its function)");
  }
  return *op;
}

namespace {
/// The core's Attr for a public OpAttr (the name interned: recorded nodes keep it).
Attr to_attr(const OpAttr& a) {
  const char* name = intern_name(a.name);
  return std::visit(
      [&](const auto& v) -> Attr {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, int64_t>) return Attr::integer(name, v);
        if constexpr (std::is_same_v<V, bool>) return Attr::boolean(name, v);
        if constexpr (std::is_same_v<V, double>) return Attr::real(name, v);
        if constexpr (std::is_same_v<V, std::vector<int64_t>>) return Attr::list(name, v);
        if constexpr (std::is_same_v<V, std::vector<double>>) return Attr::reals(name, v);
        if constexpr (std::is_same_v<V, std::string>) return Attr::string(name, v);
        if constexpr (std::is_same_v<V, DType>) return Attr::dtype(name, v);
        if constexpr (std::is_same_v<V, OpAttr::Scalar>) {
          if (const auto* i = std::get_if<int64_t>(&v.value)) return Attr::scalar_int(name, *i);
          return Attr::scalar_real(name, std::get<double>(v.value));
        }
      },
      a.value);
}
}  // namespace

}  // namespace detail

std::vector<Tensor> call_op(std::string_view name, const std::vector<Tensor>& inputs,
                            const std::vector<OpAttr>& attrs) {
  const detail::OpDef* op = nullptr;
  try {
    op = &detail::callable_op(name);
  } catch (const ValueError& e) {
    throw ValueError("call_op(" + std::string(name) + "): " + e.what());
  }
  detail::Attrs converted;
  converted.reserve(attrs.size());
  for (const OpAttr& a : attrs) {
    for (const detail::Attr& seen : converted) {
      if (a.name == seen.name)
        throw ValueError("call_op(" + std::string(name) + "): attribute '" + a.name + "' given twice");
    }
    converted.push_back(detail::to_attr(a));
  }
  return detail::dispatch_span(*op, inputs, converted.empty() ? nullptr : &converted).to_vector();
}

}  // namespace strata
