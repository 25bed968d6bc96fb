// host_data.hpp — moving tensor contents between host vectors and devices.
#pragma once

#include "runtime/tensor/tensor_impl.hpp"

#include <strata/plugin/half.hpp>

#include <complex>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata::detail {

/// Whether T is a std::complex (the host type of c64 and c128 values).
template <typename T>
inline constexpr bool is_complex_value = false;
template <typename R>
inline constexpr bool is_complex_value<std::complex<R>> = true;

/// Reads element `i` of a host buffer holding `dtype` values as T. Complex
/// elements read as a real T give their real part: callers that must not
/// drop an imaginary part (Tensor::to_vector) refuse such a read first.
template <typename T>
T load_as(const void* data, DType dtype, size_t i) {
  if constexpr (is_complex_value<T>) {
    using R = typename T::value_type;
    if (dtype == DType::c64) {
      const std::complex<float> v = static_cast<const std::complex<float>*>(data)[i];
      return T(static_cast<R>(v.real()), static_cast<R>(v.imag()));
    }
    if (dtype == DType::c128) {
      const std::complex<double> v = static_cast<const std::complex<double>*>(data)[i];
      return T(static_cast<R>(v.real()), static_cast<R>(v.imag()));
    }
    return T(load_as<R>(data, dtype, i));
  } else {
    switch (dtype) {
      case DType::f32: return static_cast<T>(static_cast<const float*>(data)[i]);
      case DType::f64: return static_cast<T>(static_cast<const double*>(data)[i]);
      case DType::f16: return static_cast<T>(f16_to_float(static_cast<const uint16_t*>(data)[i]));
      case DType::bf16: return static_cast<T>(bf16_to_float(static_cast<const uint16_t*>(data)[i]));
      case DType::i32: return static_cast<T>(static_cast<const int32_t*>(data)[i]);
      case DType::i64: return static_cast<T>(static_cast<const int64_t*>(data)[i]);
      case DType::boolean: return static_cast<T>(static_cast<const uint8_t*>(data)[i] != 0);
      case DType::c64: return static_cast<T>(static_cast<const std::complex<float>*>(data)[i].real());
      case DType::c128: return static_cast<T>(static_cast<const std::complex<double>*>(data)[i].real());
    }
    return T{};
  }
}

/// Writes `value` as element `i` of a host buffer holding `dtype` values. A
/// real value stored as complex gets imaginary part 0; a complex value
/// stored as a real dtype keeps its real part (callers refuse that first:
/// from_data).
template <typename T>
void store_as(void* data, DType dtype, size_t i, T value) {
  if constexpr (is_complex_value<T>) {
    if (dtype == DType::c64) {
      static_cast<std::complex<float>*>(data)[i] = std::complex<float>(static_cast<float>(value.real()),
                                                                        static_cast<float>(value.imag()));
    } else if (dtype == DType::c128) {
      static_cast<std::complex<double>*>(data)[i] = std::complex<double>(static_cast<double>(value.real()),
                                                                          static_cast<double>(value.imag()));
    } else {
      store_as(data, dtype, i, value.real());
    }
  } else {
    switch (dtype) {
      case DType::f32: static_cast<float*>(data)[i] = static_cast<float>(value); break;
      case DType::f64: static_cast<double*>(data)[i] = static_cast<double>(value); break;
      case DType::f16: static_cast<uint16_t*>(data)[i] = float_to_f16(static_cast<float>(value)); break;
      case DType::bf16: static_cast<uint16_t*>(data)[i] = float_to_bf16(static_cast<float>(value)); break;
      case DType::i32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(value); break;
      case DType::i64: static_cast<int64_t*>(data)[i] = static_cast<int64_t>(value); break;
      case DType::boolean: static_cast<uint8_t*>(data)[i] = value != T{} ? 1 : 0; break;
      case DType::c64: static_cast<std::complex<float>*>(data)[i] = static_cast<float>(value); break;
      case DType::c128: static_cast<std::complex<double>*>(data)[i] = static_cast<double>(value); break;
    }
  }
}

[[noreturn]] void host_out_of_memory(const std::string& what, size_t count, size_t element);

/// A host vector of `count` values for a tensor's contents on their way to
/// or from a device. An OutOfMemoryError "<what()>: cannot allocate N bytes
/// of host memory" when it cannot be had, never std::bad_alloc or
/// std::length_error; `what` (a callable returning the string) runs only then.
template <typename T, typename What>
std::vector<T> host_vector(size_t count, What&& what) {
  try {
    return std::vector<T>(count);
  } catch (const std::bad_alloc&) {
    host_out_of_memory(what(), count, sizeof(T));
  } catch (const std::length_error&) {
    host_out_of_memory(what(), count, sizeof(T));
  }
}

/// The raw bytes of a tensor's elements, row-major (copies to the host).
/// Calls the host-read hook first, when one is set.
std::vector<uint8_t> read_bytes(const Tensor& t);
/// Sets the function read_bytes calls with every tensor it reads (to_vector,
/// item, printing): the autograd layer's compile trace refuses host reads of
/// traced values, whose branches a replay could not follow. May throw.
void set_host_read_hook(void (*hook)(const Tensor& t));
/// Writes row-major bytes into the elements of an existing (possibly strided)
/// tensor: a read-modify-write of the storage span it covers when strided.
void write_bytes(const Tensor& dst, const std::vector<uint8_t>& bytes);
/// A new tensor on `device` holding the raw bytes (row-major, `dtype`); `op`
/// names the caller in errors (make_tensor).
Tensor upload_bytes(const void* bytes, DType dtype, std::span<const int64_t> shape, DeviceRecord& device,
                    std::string_view op);

}  // namespace strata::detail
