// error.hpp — the exception hierarchy of the public API.
//
// Every error the library throws derives from strata::Error. Messages name
// what went wrong and where: the op, shapes, dtypes and devices involved, or
// the file and JSON path of a configuration value. A failed call leaves its
// inputs, the runtime and any tape unchanged.
#pragma once

#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Invalid configuration: JSON syntax, unknown key, wrong type, bad value.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A plugin could not be found, loaded or initialised, or misbehaved.
class PluginError : public Error {
 public:
  using Error::Error;
};

/// Shapes that do not fit an op (mismatch, bad reshape, bad dim).
class ShapeError : public Error {
 public:
  using Error::Error;
};

/// Dtypes an op does not accept.
class DTypeError : public Error {
 public:
  using Error::Error;
};

/// Device problems: tensors on two devices, unknown device, missing kernel
/// under the "error" fallback policy, a kernel failure.
class DeviceError : public Error {
 public:
  using Error::Error;
};

/// The device reported DEVICE_LOST: it stays unusable for the rest of the
/// process; other devices carry on.
class DeviceLostError : public DeviceError {
 public:
  using DeviceError::DeviceError;
};

/// Out-of-range index, slice or dimension.
class IndexError : public Error {
 public:
  using Error::Error;
};

/// A value an op rejects at run time: an index tensor holding an
/// out-of-range index, integer division by zero.
class ValueError : public Error {
 public:
  using Error::Error;
};

/// An allocation exceeded the device's configured memory limit or the
/// device's memory.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

}  // namespace strata
