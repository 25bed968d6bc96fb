// shape_rules.cpp — broadcasting, dim normalisation and input adaptation
// shared by the op definitions.
#include "runtime/dispatch/op.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>

#include <algorithm>
#include <string>

namespace strata::detail {

std::string shape_problem(std::span<const int64_t> shape, DType dtype, int64_t& numel) {
  if (const int64_t n = fitting_numel(shape, dtype); n >= 0) {
    numel = n;
    return {};
  }
  // It does not fit: say why.
  if (shape.size() > STRATA_MAX_RANK) {
    return "rank " + std::to_string(shape.size()) + " exceeds the maximum rank " + std::to_string(STRATA_MAX_RANK) +
           " (shape " + shape_string(shape) + ")";
  }
  for (int64_t d : shape) {
    if (d < 0) return "negative dimension " + std::to_string(d) + " in shape " + shape_string(shape);
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && __builtin_mul_overflow(n, d, &n)) {
      return "the element count of shape " + shape_string(shape) + " overflows int64";
    }
  }
  return "the size in bytes of " + std::string(dtype_name(dtype)) + shape_string(shape) + " overflows int64 (" +
         std::to_string(n) + " elements of " + std::to_string(dtype_size(dtype)) + " bytes)";
}

void throw_shape_problem(std::string_view what, std::span<const int64_t> shape, DType dtype) {
  int64_t numel = 0;
  throw ShapeError(std::string(what) + ": " + shape_problem(shape, dtype, numel));
}

Shape broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b, const OpCall& call) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t k = 0; k < rank; ++k) {
    int64_t da = k < rank - a.size() ? 1 : a[k - (rank - a.size())];
    int64_t db = k < rank - b.size() ? 1 : b[k - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw ShapeError(call.describe() + ": shapes " + shape_string(a) + " and " + shape_string(b) +
                       " cannot be broadcast (dimension " + std::to_string(k) + ": " + std::to_string(da) + " vs " +
                       std::to_string(db) + ")");
    }
    out[k] = da == 1 ? db : da;
  }
  if (fitting_numel(out, DType::boolean) < 0) [[unlikely]] {
    int64_t numel = 0;
    throw ShapeError(call.describe() + ": shapes " + shape_string(a) + " and " + shape_string(b) +
                     " broadcast to a shape too large: " + shape_problem(out, DType::boolean, numel));
  }
  return out;
}

namespace {
bool& shape_only() {
  thread_local bool on = false;
  return on;
}
}  // namespace

ShapeOnlyScope::ShapeOnlyScope() : outer_(shape_only()) { shape_only() = true; }
ShapeOnlyScope::~ShapeOnlyScope() { shape_only() = outer_; }

void cast_input(OpCall& call, int k, DType dtype) {
  Tensor& t = call.inputs[static_cast<size_t>(k)];
  if (t.impl()->dtype == dtype) return;
  t = shape_only() ? meta_tensor(dtype, t.impl()->sizes()) : cast(t, dtype);
}

void expand_input(OpCall& call, int k, std::span<const int64_t> shape) {
  Tensor& t = call.inputs[static_cast<size_t>(k)];
  auto have = t.impl()->sizes();
  if (std::equal(have.begin(), have.end(), shape.begin(), shape.end())) return;
  if (fitting_numel(shape, t.impl()->dtype) < 0) [[unlikely]] {
    int64_t numel = 0;
    throw ShapeError(call.describe() + ": input " + std::to_string(k) + " cannot be broadcast: " +
                     shape_problem(shape, t.impl()->dtype, numel));
  }
  Tensor expanded = t.expand(Shape(shape.begin(), shape.end()));  // checks the shapes; only a view
  t = shape_only() ? meta_tensor(t.impl()->dtype, shape) : std::move(expanded);
}

}  // namespace strata::detail
