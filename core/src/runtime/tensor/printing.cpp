// printing.cpp — PyTorch-like text for tensors.
#include "runtime/tensor/host_data.hpp"
#include "runtime/tensor/tensor_impl.hpp"

#include <strata/tensor.hpp>

#include <cmath>
#include <complex>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

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

/// "1.0000+2.0000j", "0.5000-1.0000j", "nan+infj": PyTorch's and NumPy's form.
std::string format_complex(std::complex<double> v, DType dtype) {
  const DType part = to_real(dtype);
  std::string im = format_value(v.imag(), part);
  const bool signed_im = !im.empty() && im[0] == '-';
  return format_value(v.real(), part) + (signed_im ? "" : "+") + im + "j";
}

/// The text of element i of a row-major buffer of values.
template <typename V>
std::string element_text(const std::vector<V>& values, int64_t i, DType dtype) {
  if constexpr (std::is_same_v<V, double>) {
    return format_value(values[static_cast<size_t>(i)], dtype);
  } else {
    return format_complex(values[static_cast<size_t>(i)], dtype);
  }
}

template <typename V>
void print_dim(std::string& out, const std::vector<V>& values, std::span<const int64_t> shape, size_t dim,
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
      out += element_text(values, base + i, dtype);
    } else {
      print_dim(out, values, shape, dim + 1, base + i * inner, inner, dtype, summarize, indent + 1);
    }
    if (i + 1 < n) out += dim + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' ');
  }
  out += "]";
}

template <typename V>
void print_values(std::string& out, const Tensor& t) {
  std::vector<V> values = t.to_vector<V>();
  auto shape = t.shape();
  if (shape.empty()) {
    out += element_text(values, 0, t.dtype());
  } else {
    print_dim(out, values, shape, 0, 0, t.numel(), t.dtype(), t.numel() > kSummarizeAbove, 7);
  }
}
}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  std::string out = "tensor(";
  auto shape = this->shape();
  if (is_complex(dtype())) {
    print_values<std::complex<double>>(out, *this);
  } else {
    print_values<double>(out, *this);
  }
  out += ", shape=" + detail::shape_string(shape) + ", dtype=" + std::string(dtype_name(dtype())) +
         ", device=" + device().str() + ")";
  return out;
}

}  // namespace strata
