// creation.cpp — zeros, ones, full, arange, from_data, from_bytes.
//
// Ranges and host data are produced on the host and uploaded; rand and randn
// run the random primitives on the target device (ops/random.cpp holds them
// and the generator).
#include "runtime/device/device_record.hpp"
#include "runtime/device/device_table.hpp"
#include "runtime/dispatch/op.hpp"
#include "runtime/tensor/host_data.hpp"

#include <strata/error.hpp>
#include <strata/ops.hpp>
#include <strata/runtime.hpp>

#include <cmath>

namespace strata {

namespace detail {
Tensor fill_tensor(DeviceRecord& device, DType dtype, std::span<const int64_t> shape, double value);
}  // namespace detail

namespace {

using detail::DeviceRecord;

DeviceRecord& target(const TensorOptions& options) {
  return options.device && options.device->valid() ? detail::device_record(*options.device)
                                                   : detail::default_device_record();
}

/// Runs `make`; an OutOfMemoryError gets `name` in front (the op it
/// dispatched names itself, the allocator the bytes and the device).
template <typename F>
Tensor naming(const char* name, F&& make) {
  try {
    return make();
  } catch (const OutOfMemoryError& e) {
    throw OutOfMemoryError(std::string(name) + ": " + e.what());
  }
}

/// Applies the options that are not about storage.
Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.set_requires_grad(true);
  return t;
}

Tensor random(detail::RandomDraw kind, const char* name, const Shape& shape, const TensorOptions& options) {
  if (!is_floating(options.dtype)) {
    throw DTypeError(std::string(name) + ": expected a floating-point dtype, got " +
                     std::string(dtype_name(options.dtype)));
  }
  detail::checked_numel(name, shape, options.dtype);
  DeviceRecord& record = target(options);
  detail::check_stores(record, options.dtype, name);
  Device device = record.device();
  return finish(naming(name, [&] { return detail::random_tensor(kind, shape, options.dtype, device); }), options);
}

/// Host values -> tensor of options.dtype and `shape` (checked by the caller)
/// on options.device.
template <typename T>
Tensor upload(const std::vector<T>& values, const Shape& shape, const TensorOptions& options, const char* name) {
  DType dtype = options.dtype;
  auto bytes = detail::host_vector<uint8_t>(values.size() * dtype_size(dtype), [&] {
    return std::string(name) + ": " + std::string(dtype_name(dtype)) + detail::shape_string(shape);
  });
  for (size_t i = 0; i < values.size(); ++i) detail::store_as<T>(bytes.data(), dtype, i, values[i]);
  return finish(detail::upload_bytes(bytes.data(), dtype, shape, target(options), name), options);
}

template <typename T>
Tensor from_span(std::span<const T> data, const Shape& shape, const TensorOptions& options) {
  if (detail::is_complex_value<T> && !is_complex(options.dtype)) {
    throw DTypeError("from_data: complex values into dtype " + std::string(dtype_name(options.dtype)) +
                     " would drop their imaginary parts; use c64 or c128 (or pass the real parts)");
  }
  int64_t n = detail::checked_numel("from_data", shape, options.dtype);
  if (static_cast<size_t>(n) != data.size()) {
    throw ShapeError("from_data: " + std::to_string(data.size()) + " values do not fill shape " +
                     detail::shape_string(shape) + " (" + std::to_string(n) + " elements)");
  }
  return upload(std::vector<T>(data.begin(), data.end()), shape, options, "from_data");
}

/// full, zeros and ones, each under its own name.
Tensor filled(const char* name, const Shape& shape, double value, const TensorOptions& options) {
  detail::checked_numel(name, shape, options.dtype);
  DeviceRecord& device = target(options);
  detail::check_stores(device, options.dtype, name);
  return finish(naming(name, [&] { return detail::fill_tensor(device, options.dtype, shape, value); }), options);
}

}  // namespace

Tensor empty(const Shape& shape, const TensorOptions& options) {
  return finish(detail::make_tensor(target(options), options.dtype, shape, "empty"), options);
}

Tensor full(const Shape& shape, double value, const TensorOptions& options) {
  return filled("full", shape, value, options);
}

Tensor zeros(const Shape& shape, const TensorOptions& options) { return filled("zeros", shape, 0.0, options); }
Tensor ones(const Shape& shape, const TensorOptions& options) { return filled("ones", shape, 1.0, options); }
Tensor zeros_like(const Tensor& t) { return full_like(t, 0.0); }
Tensor ones_like(const Tensor& t) { return full_like(t, 1.0); }
Tensor full_like(const Tensor& t, double value) {
  return full(t.sizes(), value, {.dtype = t.dtype(), .device = t.device()});
}
Tensor scalar_tensor(double value, const TensorOptions& options) { return full({}, value, options); }

Tensor arange(double start, double end, double step, const TensorOptions& options) {
  if (step == 0.0 || !std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step)) {
    throw Error("arange: expected finite start, end and a nonzero step, got (" + std::to_string(start) + ", " +
                std::to_string(end) + ", " + std::to_string(step) + ")");
  }
  double count = std::ceil((end - start) / step);
  if (count > 1e10) throw Error("arange: " + std::to_string(count) + " elements is too many");
  auto n = static_cast<int64_t>(std::max(0.0, count));
  auto values =
      detail::host_vector<double>(static_cast<size_t>(n), [&] { return "arange: " + std::to_string(n) + " values"; });
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = start + static_cast<double>(i) * step;
  return upload(values, {n}, options, "arange");
}

Tensor from_bytes(std::span<const uint8_t> bytes, const Shape& shape, const TensorOptions& options) {
  const int64_t n = detail::checked_numel("from_bytes", shape, options.dtype);
  const size_t expected = static_cast<size_t>(n) * dtype_size(options.dtype);
  if (bytes.size() != expected) {
    throw ShapeError("from_bytes: " + std::to_string(bytes.size()) + " bytes do not fill " +
                     std::string(dtype_name(options.dtype)) + detail::shape_string(shape) + " (" +
                     std::to_string(expected) + " bytes)");
  }
  if (options.dtype == DType::boolean) {
    for (size_t i = 0; i < bytes.size(); ++i) {
      if (bytes[i] > 1) {
        throw ValueError("from_bytes: byte " + std::to_string(i) + " of a bool tensor is " +
                         std::to_string(bytes[i]) + " (bool elements are 0 or 1)");
      }
    }
  }
  return finish(detail::upload_bytes(bytes.data(), options.dtype, shape, target(options), "from_bytes"), options);
}

Tensor arange(int64_t end, const TensorOptions& options) { return arange(0.0, static_cast<double>(end), 1.0, options); }

Tensor rand(const Shape& shape, const TensorOptions& options) {
  return random(detail::RandomDraw::uniform, "rand", shape, options);
}

Tensor randn(const Shape& shape, const TensorOptions& options) {
  return random(detail::RandomDraw::normal, "randn", shape, options);
}

Tensor bernoulli(const Shape& shape, double p, const TensorOptions& options) {
  detail::checked_numel("bernoulli", shape, options.dtype);
  DeviceRecord& record = target(options);
  detail::check_stores(record, options.dtype, "bernoulli");
  Device device = record.device();
  return finish(naming("bernoulli", [&] { return detail::bernoulli_tensor(shape, p, options.dtype, device); }),
                options);
}

Tensor from_data(std::span<const float> data, const Shape& shape, const TensorOptions& options) {
  return from_span(data, shape, options);
}
Tensor from_data(std::span<const double> data, const Shape& shape, const TensorOptions& options) {
  return from_span(data, shape, options);
}
Tensor from_data(std::span<const int64_t> data, const Shape& shape, const TensorOptions& options) {
  return from_span(data, shape, options);
}
Tensor from_data(std::span<const int32_t> data, const Shape& shape, const TensorOptions& options) {
  return from_span(data, shape, options);
}
Tensor from_data(std::span<const std::complex<float>> data, const Shape& shape, const TensorOptions& options) {
  return from_span(data, shape, options);
}
Tensor from_data(std::span<const std::complex<double>> data, const Shape& shape, const TensorOptions& options) {
  return from_span(data, shape, options);
}
Tensor tensor(std::initializer_list<float> values, const TensorOptions& options) {
  return from_span(std::span<const float>(values.begin(), values.size()), {static_cast<int64_t>(values.size())},
                   options);
}

}  // namespace strata
