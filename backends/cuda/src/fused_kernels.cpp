// fused_kernels.cpp — strata::fused_elementwise (docs/ops.md, "Fused
// elementwise programs") on CUDA and HIP: one kernel per float dtype interprets the
// op's program per element (fused_eval.hpp: statements in the kernel's
// parameters, values in registers, the ops' own functors), one pass over
// memory, no compiler at run time. A kernel entry per signature of the op
// (1 to 8 inputs, 1 to 6 outputs) and float dtype. Declined
// (UNSUPPORTED: the core runs the program's ops one by one) are inputs
// neither compact like the outputs nor one broadcast value, outputs that
// are not compact or of another shape, and programs of more than
// kFusedMaxStatements statements. Generating source per program for
// NVRTC/hiprtc (values in registers by name, no interpreter switch) is the
// next step (docs/compile.md, "Not yet").
#include <memory>
#include <strata/plugin/fused_program.hpp>
#include <string>
#include <utility>

#include "fused_launch.hpp"
#include "fused_program_args.hpp"
#include "kernel_common.cuh"
#include "kernels.hpp"

namespace strata::gpu {
namespace {

namespace fp = strata::plugin::fused;

using plugin::is_one_value;
using plugin::same_shape;
bool compact(const strata_tensor& t) { return plugin::is_contiguous(t); }

template <class T, int N, int M>
struct FusedKernel {
  static constexpr const char* op = STRATA_OP_FUSED_ELEMENTWISE;
  using inputs = plugin::RepeatedTypes<T, N>;
  using outputs = plugin::RepeatedTypes<T, M>;

  static strata_status run(Launch& l) {
    const strata_attr* text = plugin::find_attr(l.call, "program");
    if (text == nullptr || text->kind != STRATA_ATTR_STRING || text->string == nullptr) {
      return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: no STRING attribute 'program'", op);
    }
    std::string error;
    const std::shared_ptr<const fp::Program> program =
        fp::cached_program(std::string_view(text->string, static_cast<size_t>(text->count)), error);
    if (program == nullptr) return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s", op, error.c_str());
    const fp::Program& p = *program;
    if (p.n_inputs != N || p.outputs.size() != static_cast<size_t>(M)) {
      return fail(l.error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: the program reads %d inputs into %zu outputs, the call has %d and %d", op,
                  static_cast<int>(p.n_inputs), p.outputs.size(), N, M);
    }
    if (p.body.size() > static_cast<size_t>(kFusedMaxStatements)) {
      return fail(l.error, STRATA_ERROR_UNSUPPORTED, "%s: %zu statements; the kernel runs at most %d", op,
                  p.body.size(), kFusedMaxStatements);
    }
    FusedArgs args;
    const strata_tensor& y = l.out(0);
    for (int m = 0; m < M; ++m) {
      if (!compact(l.out(m)) || !same_shape(l.out(m), y)) {
        return fail(l.error, STRATA_ERROR_UNSUPPORTED, "%s: output %d is not compact like output 0", op, m);
      }
      args.out[m] = data<T>(l.out(m));
    }
    args.n = element_count(y);
    for (int k = 0; k < N; ++k) {
      const strata_tensor& x = l.in(k);
      const bool one = is_one_value(x);
      if (!one && !(compact(x) && same_shape(x, y))) {
        return fail(l.error, STRATA_ERROR_UNSUPPORTED,
                    "%s: input %d is neither compact like the output nor one broadcast value", op, k);
      }
      args.broadcast |= (one && args.n != 1 ? 1u : 0u) << k;
      args.in[k] = data<const T>(x);
    }
    encode_program<T>(p, args);
    if (args.n == 0) return STRATA_OK;
    if (const cudaError_t e = launch_fused<T>(args, grid_for(args.n, l.device, kFusedThreads), l.stream);
        e != cudaSuccess) {
      return runtime_failure(e, &l.device, "strata::fused_elementwise: kernel fused_kernel launch", l.error);
    }
    return STRATA_OK;
  }
};

template <class T, int N>
void add_fused_outputs(plugin::KernelTable& t) {
  [&]<int... M>(std::integer_sequence<int, M...>) {
    (add<FusedKernel<T, N, M + 1>>(t), ...);
  }
  (std::make_integer_sequence<int, fp::kMaxOutputs>{});
}

}  // namespace

void register_fused_kernels(plugin::KernelTable& t) {
  for_each_type(FloatTypes{}, [&]<class T>() {
    [&]<int... N>(std::integer_sequence<int, N...>) { (add_fused_outputs<T, N + 1>(t), ...); }
    (std::make_integer_sequence<int, fp::kMaxInputs>{});
  });
}

}  // namespace strata::gpu
