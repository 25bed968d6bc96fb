// conformance_support.cpp — see conformance_support.hpp.
#include "conformance_support.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace strata::cli::conformance {

std::string_view status_name(Status s) {
  switch (s) {
    case Status::skip: return "skip";
    case Status::pass: return "pass";
    case Status::fallback: return "fallback";
    case Status::unsupported: return "unsupported";
    case Status::fail: return "fail";
  }
  return "?";
}

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::mt19937_64 rng_for(const std::string& name) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a: stable across processes, unlike std::hash
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return std::mt19937_64(h);
}

Operand random_operand(std::mt19937_64& rng, const Shape& shape, DType dtype, Layout layout, ValueRange range) {
  Operand op;
  op.dtype = dtype;
  op.layout = layout;
  op.base = shape;
  if (layout == Layout::transposed) {
    if (shape.size() < 2) throw Error("conformance: a transposed operand needs rank >= 2");
    std::swap(op.base[shape.size() - 1], op.base[shape.size() - 2]);
  } else if (layout == Layout::stepped) {
    if (shape.empty()) throw Error("conformance: a stepped operand needs rank >= 1");
    op.base.back() = 2 * shape.back() + 1;
  }
  const int64_t n = numel_of(op.base);
  op.values.resize(static_cast<size_t>(n));
  if (dtype == DType::boolean) {
    std::bernoulli_distribution coin(0.5);
    for (double& v : op.values) v = coin(rng) ? 1.0 : 0.0;
  } else if (range.integral || is_integral(dtype)) {
    std::uniform_int_distribution<int64_t> dist(static_cast<int64_t>(range.lo), static_cast<int64_t>(range.hi));
    for (double& v : op.values) v = static_cast<double>(dist(rng));
  } else {
    std::uniform_real_distribution<double> dist(range.lo, range.hi);
    for (double& v : op.values) {
      v = dist(rng);
      if (range.quantum > 0.0) v = std::round(v / range.quantum) * range.quantum;
    }
    if (range.either_sign) {
      std::bernoulli_distribution coin(0.5);
      for (double& v : op.values) v = coin(rng) ? -v : v;
    }
  }
  return op;
}

Operand operand_of(const Shape& shape, std::vector<double> values, DType dtype) {
  Operand op;
  op.base = shape;
  op.values = std::move(values);
  op.dtype = dtype;
  return op;
}

Tensor materialise(const Operand& op, Device device, DType dtype) {
  Tensor base = from_data(std::span<const double>(op.values), op.base, {.dtype = dtype, .device = device});
  switch (op.layout) {
    case Layout::contiguous: return base;
    case Layout::transposed: return base.mT();
    case Layout::stepped: return base.slice(-1, 1, base.size(-1), 2);
  }
  return base;
}

Tensor on_device(const Operand& op, Device device) { return materialise(op, device, op.dtype); }

Tensor on_reference(const Operand& op, Device reference) {
  if (!is_floating(op.dtype) || op.keep_dtype) return materialise(op, reference, op.dtype);
  // Round the values to the operand's dtype first, so that the reference
  // sees exactly what the device sees, then widen.
  return materialise(op, reference, op.dtype).to(DType::f64);
}

Tolerance tolerance_for(DType t) {
  switch (t) {
    case DType::f64: return {1e-12, 1e-10};
    case DType::f32: return {1e-6, 1e-5};
    case DType::f16: return {1e-3, 1e-2};
    case DType::bf16: return {1e-2, 3e-2};
    default: return {0.0, 0.0};
  }
}

Tolerance accumulated(Tolerance base, double terms, double magnitude) {
  base.atol += base.rtol * 4.0 * std::sqrt(std::max(terms, 1.0)) * std::max(magnitude, 1.0);
  return base;
}

std::string describe(const Operand& op) {
  Shape view = op.base;
  if (op.layout == Layout::transposed) std::swap(view[view.size() - 1], view[view.size() - 2]);
  if (op.layout == Layout::stepped) view.back() = (view.back() - 1) / 2;
  std::string s = std::string(dtype_name(op.dtype)) + shape_string(view);
  if (op.layout == Layout::transposed) s += " (transposed view)";
  if (op.layout == Layout::stepped) s += " (step-2 slice)";
  return s;
}

std::string describe(const std::vector<Operand>& ops) {
  std::string s;
  for (const Operand& op : ops) s += (s.empty() ? "" : ", ") + describe(op);
  return s.empty() ? "no inputs" : s;
}

namespace {

std::string number(double v) {
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

}  // namespace

Outcome compare_values(const std::vector<double>& got, const std::vector<double>& expected, Tolerance tol,
                       const std::string& what) {
  Outcome out;
  if (got.size() != expected.size()) {
    out.status = Status::fail;
    out.message = "got " + std::to_string(got.size()) + " elements, expected " + std::to_string(expected.size()) +
                  "; inputs: " + what;
    return out;
  }
  size_t worst = 0;
  double worst_excess = -1.0;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], e = expected[i];
    double err = 0.0;
    bool ok = true;
    if (std::isnan(e) || std::isnan(g)) {
      ok = std::isnan(e) && std::isnan(g);
      err = ok ? 0.0 : std::numeric_limits<double>::infinity();
    } else if (std::isinf(e) || std::isinf(g)) {
      ok = g == e;
      err = ok ? 0.0 : std::numeric_limits<double>::infinity();
    } else {
      err = std::fabs(g - e);
      ok = err <= tol.atol + tol.rtol * std::fabs(e);
    }
    out.max_error = std::max(out.max_error, err);
    if (!ok) {
      ++bad;
      const double excess = err - (tol.atol + tol.rtol * std::fabs(e));
      if (excess > worst_excess || std::isnan(excess)) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (bad == 0) return out;
  out.status = Status::fail;
  out.message = std::to_string(bad) + " of " + std::to_string(got.size()) + " elements wrong, max |error| " +
                number(out.max_error) + "; element " + std::to_string(worst) + ": got " + number(got[worst]) +
                ", expected " + number(expected[worst]) + " (tolerance " + number(tol.atol) + " + " +
                number(tol.rtol) + "·|expected|); inputs: " + what;
  return out;
}

Outcome compare(const Tensor& got, const Tensor& expected, Tolerance tol, const std::string& what) {
  if (got.sizes() != expected.sizes()) {
    Outcome out;
    out.status = Status::fail;
    out.message = "result shape " + shape_string(got.shape()) + ", expected " + shape_string(expected.shape()) +
                  "; inputs: " + what;
    return out;
  }
  return compare_values(got.to_vector<double>(), expected.to_vector<double>(), tol, what);
}

uint64_t fallbacks_of(Device device, const std::string& op) {
  const std::string id = device.str();
  const std::string bare = op.substr(op.find("::") == std::string::npos ? 0 : op.find("::") + 2);
  uint64_t n = 0;
  for (const FallbackRecord& r : runtime().fallback_stats()) {
    if (r.device != id) continue;
    const std::string rbare = r.op.substr(r.op.find("::") == std::string::npos ? 0 : r.op.find("::") + 2);
    if (rbare == bare) n += r.count;
  }
  return n;
}

}  // namespace strata::cli::conformance
