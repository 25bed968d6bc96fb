// kernel_launch.hpp — how a kernel call becomes work on a stream's worker.
//
// Demonstrates (strata_plugin.h section 5, docs/ops.md "General rules"):
// everything a kernel receives from the host (descriptors, attributes, the
// call itself) is valid only during the call, so the issuing side checks the
// call (struct sizes, operand counts, dtypes against the signature, buffer
// handles, and that every strided view lies inside its buffer), copies what
// the work needs into a `View` per operand and into the closure, and queues
// the closure on the call's stream. The closure runs later on the worker,
// reading and writing the arena through those views only. Failures found
// there (an index out of range, an integer division by zero) are thrown as
// DeferredFailure and reported at the next synchronisation point.
//
// Every kernel is registered with STRATA_KERNEL_STRIDED_INPUTS: the loops
// walk arbitrary (non-negative, possibly zero) strides.
#pragma once

#include "runtime.hpp"

#include <strata/plugin/kernel.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace example {

// ---- Dtypes ----------------------------------------------------------------------

/// The storage types this device holds: f32 f64 i32 i64 bool (one byte, 0/1),
/// as C++ types whose dtypes the SDK knows (strata/plugin/kernel.hpp).
using strata::plugin::dtype_v;
using strata::plugin::for_each_type;
template <class... Ts>
using Types = strata::plugin::TypeList<Ts...>;
using AllTypes = Types<float, double, int32_t, int64_t, bool>;
using NumericTypes = Types<float, double, int32_t, int64_t>;
using FloatTypes = Types<float, double>;
using IntTypes = Types<int32_t, int64_t>;

/// "f32,i64->f32"
template <class Out, class... Ins>
std::string signature() {
  return strata::plugin::SignatureOf<Out(Ins...)>::text();
}

template <class T>
constexpr bool is_int_v = std::is_integral_v<T> && !std::is_same_v<T, bool>;

/// Integer arithmetic wraps (two's complement), as on every real device;
/// floats follow IEEE.
template <class C>
C wrap_add(C a, C b) {
  if constexpr (is_int_v<C>) {
    return static_cast<C>(static_cast<std::make_unsigned_t<C>>(a) + static_cast<std::make_unsigned_t<C>>(b));
  } else {
    return a + b;
  }
}
template <class C>
C wrap_sub(C a, C b) {
  if constexpr (is_int_v<C>) {
    return static_cast<C>(static_cast<std::make_unsigned_t<C>>(a) - static_cast<std::make_unsigned_t<C>>(b));
  } else {
    return a - b;
  }
}
template <class C>
C wrap_mul(C a, C b) {
  if constexpr (is_int_v<C>) {
    return static_cast<C>(static_cast<std::make_unsigned_t<C>>(a) * static_cast<std::make_unsigned_t<C>>(b));
  } else {
    return a * b;
  }
}
template <class C>
bool is_nan(C x) {
  if constexpr (std::is_floating_point_v<C>) {
    return x != x;
  } else {
    return false;
  }
}

// ---- Operands ----------------------------------------------------------------------

/// One operand as the worker sees it: the address of element (0, ..., 0) in
/// the arena and a copy of the host's shape and strides (in elements).
struct View {
  std::byte* base = nullptr;
  strata_dtype dtype = STRATA_F32;
  int rank = 0;
  int64_t shape[STRATA_MAX_RANK] = {};
  int64_t strides[STRATA_MAX_RANK] = {};

  template <class T>
  T* data() const {
    return reinterpret_cast<T*>(base);
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    return n;
  }
  bool same_shape(const View& o) const {
    if (rank != o.rank) return false;
    for (int d = 0; d < rank; ++d) {
      if (shape[d] != o.shape[d]) return false;
    }
    return true;
  }
};

/// A checked kernel call, ready to queue.
struct Launch {
  const strata_kernel_call* call = nullptr;
  const char* op = "";
  PluginState* state = nullptr;
  Device* device = nullptr;
  Stream* stream = nullptr;
  std::vector<View> in, out;

  /// "strata::add on example:0", for messages.
  std::string where() const { return std::string(op) + " on " + device->name; }
  /// Queues the work on the call's stream.
  void submit(std::function<void()> work) const { stream->enqueue(op, std::move(work)); }
  /// Throws std::invalid_argument (INVALID_ARGUMENT, via guarded) naming the op.
  [[noreturn]] void reject(const std::string& why) const;
  /// The operand shapes, "f32[2, 3], i64[4] -> f32[2, 4]", for messages.
  std::string operands() const;
};

/// Checks `call` against the kernel's signature and resolves its stream and
/// buffers; throws std::invalid_argument with the reason.
Launch prepare(const strata_kernel_call* call, std::initializer_list<strata_dtype> in,
               std::initializer_list<strata_dtype> out);

/// The body of every kernel entry: checks the call struct's size, then runs
/// `body` with exceptions turned into statuses named after `op`.
template <class Body>
strata_status run_kernel(const strata_kernel_call* call, const char* op, Body&& body) noexcept {
  if (call == nullptr || call->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) {
    return strata::plugin::refuse_small_call(call, op);
  }
  return strata::plugin::guarded(call->error, op, std::forward<Body>(body));
}

/// The "dims" of a reduction (INTS), checked against the operand ranks; the
/// reduced dims when absent are those where the output has size 1 and the
/// input does not.
std::vector<int> reduced_dims(const Launch& l);
/// The "dim" attribute (INT; negative counts from the end), checked against `rank`.
int dim_attr(const Launch& l, int rank);

// ---- Strided walks -------------------------------------------------------------

/// Visits every position of `shape` (row-major), calling f(offsets) with the
/// element offset of each of the N operands, given their strides over that
/// shape. Rank 0 visits once.
template <size_t N, class F>
void walk(int rank, const int64_t* shape, const std::array<const int64_t*, N>& strides, F&& f) {
  std::array<int64_t, N> off{};
  int64_t index[STRATA_MAX_RANK] = {};
  int64_t total = 1;
  for (int d = 0; d < rank; ++d) total *= shape[d];
  for (int64_t i = 0; i < total; ++i) {
    f(off);
    for (int d = rank - 1; d >= 0; --d) {
      ++index[d];
      for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
      if (index[d] < shape[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * shape[d];
      index[d] = 0;
    }
  }
}

// ---- Registration ----------------------------------------------------------------

inline void add_kernel(strata::plugin::KernelTable& table, const char* op, std::string sig, strata_kernel_fn fn) {
  table.add(op, std::move(sig), fn, STRATA_KERNEL_STRIDED_INPUTS);
}

void register_elementwise_kernels(strata::plugin::KernelTable& table);  // kernels_elementwise.cpp
void register_reduce_kernels(strata::plugin::KernelTable& table);       // kernels_reduce.cpp
void register_index_kernels(strata::plugin::KernelTable& table);        // kernels_index_random.cpp
void register_random_kernels(strata::plugin::KernelTable& table);       // kernels_index_random.cpp

/// The kernel table every device shares (kernel_launch.cpp).
const strata::plugin::KernelTable& kernel_table();

}  // namespace example
