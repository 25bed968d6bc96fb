// dispatch_internal.hpp — what the files of dispatch/ share: running a
// prepared call (kernel_call.cpp) and the steps around every call
// (dispatch.cpp), which dispatch_group.cpp takes too.
#pragma once

#include "runtime/device/device_record.hpp"
#include "runtime/dispatch/dispatch_hooks.hpp"
#include "runtime/dispatch/op.hpp"
#include "runtime/tensor/tensor_impl.hpp"

#include <strata/plugin/strata_plugin.h>

#include <span>
#include <string>
#include <utility>
#include <vector>

namespace strata::detail {

// --- Running a call (kernel_call.cpp) ------------------------------------------

/// The host side of one kernel call (strata_kernel_call::host_context): what
/// the workspace service needs, and the blocks it handed out (released when
/// the kernel returns); the attr_missing service reads the op and device.
struct KernelHostContext {
  DeviceRecord* device;
  const OpCall* call;
  std::vector<std::pair<strata_buffer, size_t>> workspace;
};
/// strata_kernel_call::attr_missing (ABI 2.2; attr_misreads.cpp): a name the
/// call's op declares is an optional attribute the call left out; any other
/// is recorded for attr_misreads() and logged once per device, op and name.
void attr_missing_service(const strata_kernel_call* call, const char* name) noexcept;

/// Runs a prepared call on its device: results of dtypes the device does not
/// store are refused, empty tensors never reach a kernel, then the kernel for
/// its signature, else the op's decomposition (`decomposed` set: its
/// primitives recorded themselves), else the CPU fallback the policy allows.
OpResult execute(OpCall& call, bool& decomposed);
/// The error of a kernel's failure `status` (neither OK nor UNSUPPORTED),
/// naming `what` (the call).
[[noreturn, gnu::cold, gnu::noinline]] void throw_kernel_failure(DeviceRecord& dev, strata_status status,
                                                                 const strata_error& err, const std::string& what);
/// The kernel that may run `call` in a group on `dev`: its operands are
/// non-empty, its outputs preset, compact and on `dev`, and the kernel for
/// its signature declares STRATA_KERNEL_GROUPED. nullptr otherwise.
const KernelSlot* group_kernel(const OpCall& call, DeviceRecord& dev);
/// Runs `calls` (at least two, one op, one kernel of `dev`, every output
/// preset) as one grouped kernel call: all inputs end to end, then all
/// outputs. Returns the plugin's status.
strata_status run_group_kernel(DeviceRecord& dev, const KernelSlot& kernel, std::span<OpCall* const> calls,
                               strata_error& err);

// --- The steps around a call (dispatch.cpp) -------------------------------------

/// The DTypeError for a complex input `k` of an op without a complex definition.
[[noreturn, gnu::cold, gnu::noinline]] void refuse_complex(const OpCall& call, int k);
/// A storage-less input: the placeholder a recorded node keeps for an operand
/// whose values its VJP declared it does not read (OpDef::vjp_reads_inputs),
/// reaching an op — a derivative rule that breaks its declaration.
[[noreturn, gnu::cold, gnu::noinline]] void refuse_placeholder(const OpCall& call, int k);

/// Every input has values, and complex inputs reach only the ops defined for
/// them (OpDef::takes_complex).
inline void check_inputs(const OpCall& call) {
  for (int k = 0; k < call.n_inputs; ++k) {
    if (!call.in(k).defined()) continue;
    const TensorImpl& t = *call.in(k).impl();
    if (t.storage == nullptr) [[unlikely]] refuse_placeholder(call, k);
    if (!call.op->takes_complex && is_complex(t.dtype)) [[unlikely]] refuse_complex(call, k);
  }
}

/// Before a call runs: complex inputs refused, autocast, the op's shape rule.
inline void prepare_dispatch(OpCall& call, const DispatchHooks& hooks) {
  check_inputs(call);
  // Attributes against the op's declaration (a plugin op's: the schema it
  // registered). Out of the way of the elementwise ops, which take none.
  if (call.attrs != nullptr || !call.op->attrs.empty()) [[unlikely]] {
    check_declared_attrs(call);
  }
  if (hooks.before_prepare != nullptr) hooks.before_prepare(call);
  if (call.op->prepare != nullptr) call.op->prepare(call);
}

/// A preset output (copy_'s destination, an optimizer update's state) was
/// written in place: its version moves once the op ran.
inline void bump_presets(const OpCall& call) {
  for (int k = 0; k < call.n_outputs; ++k) {
    if (call.preset[static_cast<size_t>(k)].defined()) bump_version(call.preset[static_cast<size_t>(k)]);
  }
}

/// After a call ran: its presets' versions move, then (before recording,
/// which saves the new versions) the after hook sees it, unless it was
/// decomposed: a decomposition's primitives were checked and recorded
/// themselves. An op that failed wrote nothing and gets neither.
inline void finish_dispatch(const OpCall& call, OpResult& result, bool decomposed, const DispatchHooks& hooks) {
  bump_presets(call);
  if (!decomposed && hooks.after != nullptr) hooks.after(call, result, true);
}

}  // namespace strata::detail
