// printing.cpp — PyTorch-like text for tensors.
#include "host_data.hpp"
#include "tensor_impl.hpp"

#include <strata/tensor.hpp>

#include <cmath>
#include <cstdio>

namespace strata {

namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

std::string format_value(double v, DType dtype) {
  char buf[48];
  if (dtype == DType::boolean) return v != 0.0 ? "true" : "false";
  if (!is_floating(dtype)) {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
  } else if (std::isnan(v)) {
    return "nan";
  } else if (std::isinf(v)) {
    return v > 0 ? "inf" : "-inf";
  } else if (v != 0.0 && (std::fabs(v) >= 1e6 || std::fabs(v) < 1e-4)) {
    std::snprintf(buf, sizeof(buf), "%.4e", v);
  } else {
    std::snprintf(buf, sizeof(buf), "%.4f", v);
  }
  return buf;
}

void print_dim(std::string& out, const std::vector<double>& values, std::span<const int64_t> shape, size_t dim,
               int64_t base, int64_t stride_of_dim, DType dtype, bool summarize, size_t indent) {
  int64_t n = shape[dim];
  int64_t inner = stride_of_dim / std::max<int64_t>(n, 1);
  out += "[";
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      out += dim + 1 == shape.size() ? "..., " : "...,\n" + std::string(indent + 1, ' ');
      i = n - kEdgeItems;
    }
    if (dim + 1 == shape.size()) {
      out += format_value(values[static_cast<size_t>(base + i)], dtype);
    } else {
      print_dim(out, values, shape, dim + 1, base + i * inner, inner, dtype, summarize, indent + 1);
    }
    if (i + 1 < n) out += dim + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' ');
  }
  out += "]";
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> values = to_vector<double>();
  std::string out = "tensor(";
  auto shape = this->shape();
  if (shape.empty()) {
    out += format_value(values[0], dtype());
  } else {
    print_dim(out, values, shape, 0, 0, numel(), dtype(), numel() > kSummarizeAbove, 7);
  }
  out += ", shape=" + detail::shape_string(shape) + ", dtype=" + std::string(dtype_name(dtype())) +
         ", device=" + device().str() + ")";
  return out;
}

}  // namespace strata
