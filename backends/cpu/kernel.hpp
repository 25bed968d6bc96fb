// kernel.hpp — how a kernel implementation becomes a strata_kernel_fn.
//
// A kernel is written as an "Impl" struct:
//
//   struct MyKernel {
//     static constexpr const char* name = "add";        // op name
//     using signature = float(float, float);             // "f32,f32->f32"
//     static constexpr uint32_t flags = kStrided;        // STRATA_KERNEL_*
//     static strata_status run(const KernelCall& call);  // the work
//   };
//
// `entry<Impl>` is the function handed to the core: it checks operand counts
// and dtypes against the signature, resolves the thread count and turns every
// exception into a status, so nothing ever throws across the ABI.
// `add<Impl>(table)` registers it.
#pragma once

#include "dtype.hpp"
#include "state.hpp"

#include <strata/plugin/strata_plugin.hpp>

#include <omp.h>

#include <cstddef>
#include <deque>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace strata::cpu {

using plugin::fail;

inline constexpr uint32_t kStrided = STRATA_KERNEL_STRIDED_INPUTS;

/// What a kernel body receives: the ABI arguments plus the resolved team size.
struct KernelCall {
  const strata_tensor* in;
  int32_t n_in;
  const strata_tensor* out;
  int32_t n_out;
  const strata_attrs* attrs;
  strata_error* error;
  int threads;
};

/// Dtype signature of a kernel, as a function type Out(Ins...).
template <class Sig>
struct SignatureOf;

template <class Out, class... Ins>
struct SignatureOf<Out(Ins...)> {
  static constexpr int arity = sizeof...(Ins);

  /// "f32,f32->bool"
  static std::string text() {
    std::string s;
    ((s += s.empty() ? "" : ",", s += Scalar<Ins>::name()), ...);
    return s + "->" + Scalar<Out>::name();
  }

  static bool matches(const strata_tensor* in, const strata_tensor* out) {
    [[maybe_unused]] int i = 0;
    return ((in[i++].dtype == Scalar<Ins>::dtype) && ... && true) && out[0].dtype == Scalar<Out>::dtype;
  }
};

inline int kernel_threads(const strata_kernel_context* ctx) {
  if (ctx != nullptr && ctx->struct_size >= offsetof(strata_kernel_context, state) + sizeof(ctx->state) &&
      ctx->state != nullptr) {
    return as_state(ctx->state)->threads;
  }
  return omp_get_max_threads();
}

template <class Impl>
strata_status entry(const strata_kernel_context* ctx, const strata_tensor* inputs, int32_t n_inputs,
                    const strata_tensor* outputs, int32_t n_outputs, const strata_attrs* attrs,
                    strata_error* error) noexcept {
  using Sig = SignatureOf<typename Impl::signature>;
  try {
    if (n_inputs != Sig::arity || n_outputs != 1) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: expected %d inputs and 1 output, got %d and %d",
                  Impl::name, Sig::arity, n_inputs, n_outputs);
    }
    if (!Sig::matches(inputs, outputs)) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: operand dtypes do not match the kernel signature %s",
                  Impl::name, Sig::text().c_str());
    }
    return Impl::run(KernelCall{inputs, n_inputs, outputs, n_outputs, attrs, error, kernel_threads(ctx)});
  } catch (const std::bad_alloc&) {
    return fail(error, STRATA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", Impl::name);
  } catch (const std::exception& e) {
    return fail(error, STRATA_ERROR_INTERNAL, "%s: %s", Impl::name, e.what());
  } catch (...) {
    return fail(error, STRATA_ERROR_INTERNAL, "%s: unknown exception", Impl::name);
  }
}

/// The kernel table of the device: entries plus storage for their signature
/// strings (a deque never moves its elements, so c_str() pointers stay valid).
class KernelTable {
 public:
  void add(const char* op, std::string signature, strata_kernel_fn fn, uint32_t flags) {
    signatures_.push_back(std::move(signature));
    entries_.push_back(plugin::kernel(op, signatures_.back().c_str(), fn, flags));
  }
  const std::vector<strata_kernel_entry>& entries() const { return entries_; }

 private:
  std::deque<std::string> signatures_;
  std::vector<strata_kernel_entry> entries_;
};

template <class Impl>
void add(KernelTable& table) {
  table.add(Impl::name, SignatureOf<typename Impl::signature>::text(), &entry<Impl>, Impl::flags);
}

/// The INT attribute "dim" resolved against `rank` (negative counts from the
/// end); -1 when absent or out of range.
inline int dim_attr(const KernelCall& call, int rank) {
  const strata_attr* a = plugin::find_attr(call.attrs, "dim");
  if (a == nullptr || a->kind != STRATA_ATTR_INT) return -1;
  const int64_t dim = a->i < 0 ? a->i + rank : a->i;
  return dim >= 0 && dim < rank ? static_cast<int>(dim) : -1;
}

// One registration function per source file; kernel_table.cpp calls them all.
void register_data_kernels(KernelTable& table);
void register_unary_kernels(KernelTable& table);
void register_binary_kernels(KernelTable& table);
void register_reduce_kernels(KernelTable& table);
void register_matmul_kernels(KernelTable& table);
void register_index_kernels(KernelTable& table);
void register_nn_kernels(KernelTable& table);
void register_amp_kernels(KernelTable& table);

/// The device's table, built once on first use.
const std::vector<strata_kernel_entry>& kernel_table();

}  // namespace strata::cpu
