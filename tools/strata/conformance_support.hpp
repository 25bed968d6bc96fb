// conformance_support.hpp — what the case files of `strata plugin check`
// share: operands built from host values (with views), tolerances per
// dtype, element-wise comparison and fallback counting.
#pragma once

#include "conformance_cases.hpp"

#include <strata/strata.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace strata::cli::conformance {

/// How an operand is laid out on the device.
enum class Layout {
  contiguous,
  transposed,  // the matrix transpose of a compact tensor (mT)
  stepped,     // every second element of the last dim of a compact tensor
};

/// An input of an op case: host values of the *compact base* tensor and the
/// view taken of it on the device.
struct Operand {
  Shape base;                  // the base tensor's shape
  std::vector<double> values;  // row-major values of the base
  DType dtype = DType::f32;
  Layout layout = Layout::contiguous;
  /// Keep the dtype on the reference device (an f32 scale, an i64 index)
  /// instead of widening a floating operand to f64.
  bool keep_dtype = false;
};

/// Values drawn for an operand: uniform in [lo, hi], or integers in
/// [lo, hi] when `integral` (ties for comparisons, exact arithmetic).
struct ValueRange {
  double lo = -2.0;
  double hi = 2.0;
  bool integral = false;
  /// When > 0, values are multiples of it (exact halves for round()).
  double quantum = 0.0;
  /// Each value's sign drawn at random too (a divisor: [0.5, 2] either side of 0).
  bool either_sign = false;
};

/// An operand whose view has shape `shape`, of random values.
Operand random_operand(std::mt19937_64& rng, const Shape& shape, DType dtype, Layout layout = Layout::contiguous,
                       ValueRange range = {});
/// A compact operand of the given values.
Operand operand_of(const Shape& shape, std::vector<double> values, DType dtype);

/// The operand on `device` (its view applied), in `dtype`.
Tensor materialise(const Operand& op, Device device, DType dtype);
/// On the device under test in the operand's dtype.
Tensor on_device(const Operand& op, Device device);
/// On the reference device, floating operands widened to f64 unless keep_dtype.
Tensor on_reference(const Operand& op, Device reference);

/// |got - expected| <= atol + rtol * |expected|, per element.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
};

/// The tolerance of results of dtype `t`: exact for integers and bool.
Tolerance tolerance_for(DType t);
/// The tolerance for a result accumulated over `terms` products of values of
/// magnitude up to `magnitude` (sums, matmul): atol grows with sqrt(terms).
Tolerance accumulated(Tolerance base, double terms, double magnitude);

/// Compares a device result with the reference (shapes, then elements).
/// `what` describes the case's inputs for the failure message.
Outcome compare(const Tensor& got, const Tensor& expected, Tolerance tol, const std::string& what);
/// Compares with host values.
Outcome compare_values(const std::vector<double>& got, const std::vector<double>& expected, Tolerance tol,
                       const std::string& what);

/// How often `op` fell back to the CPU from `device` so far in this process.
uint64_t fallbacks_of(Device device, const std::string& op);

/// A generator seeded from a case's name: the same values in every worker.
std::mt19937_64 rng_for(const std::string& name);

/// "[3, 4] f32 (transposed)".
std::string describe(const Operand& op);
std::string describe(const std::vector<Operand>& ops);

/// The element count of a shape.
int64_t numel_of(const Shape& shape);

/// The general checks: manifest and ABI, device properties, memory and
/// copies, random numbers against philox.h.
void add_general_cases(const Context& ctx, std::vector<Case>& cases);
/// The checks of asynchronous semantics (dependent work read once, after
/// synchronize, DeviceTimer), which queue f32 adds on the device: built
/// after the op cases, and skipped, naming the kernel, when strata::add f32
/// failed its own cases (Context::failed_cells).
void add_queue_cases(const Context& ctx, std::vector<Case>& cases);

}  // namespace strata::cli::conformance
