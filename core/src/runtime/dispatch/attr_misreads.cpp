// attr_misreads.cpp — the attr_missing service kernels report attribute
// lookups that found nothing through (ABI 2.2), and the record of the names
// their ops do not declare (attr_misreads(), Runtime::attr_misreads(), and
// the failures of `strata plugin check`). Kept out of kernel_call.cpp, whose
// one-call path is every eager op's.
#include "runtime/dispatch/dispatch_internal.hpp"

#include "base/logging.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace strata::detail {

namespace {

/// The names kernels looked for that their op does not declare, by
/// (device, op, name), with counts.
struct Misreads {
  std::mutex mutex;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> counts;
};
Misreads& misreads() {
  static Misreads* m = new Misreads;  // never destroyed: kernels may run during exit
  return *m;
}

}  // namespace

void attr_missing_service(const strata_kernel_call* kc, const char* name) noexcept {
  if (kc == nullptr || name == nullptr || kc->struct_size < STRATA_KERNEL_CALL_MIN_SIZE ||
      kc->host_context == nullptr) {
    return;
  }
  const auto* ctx = static_cast<const KernelHostContext*>(kc->host_context);
  const OpDef& op = *ctx->call->op;
  for (const AttrDecl& d : op.attrs) {
    if (std::strcmp(d.name, name) == 0) return;
  }
  try {
    Misreads& m = misreads();
    std::lock_guard lock(m.mutex);
    auto [it, first] = m.counts.try_emplace({ctx->device->id, std::string(op.kernel_name), name}, 0);
    ++it->second;
    if (first) {
      logger("dispatch")->warn("the kernel of {} on {} read attribute '{}', which {} does not declare (it takes: {})",
                               op.kernel_name, ctx->device->id, name, op.kernel_name, declared_list(op.attrs));
    }
  } catch (...) {  // out of memory: the record is lost, the kernel runs on
  }
}

std::vector<AttrMisread> attr_misreads() {
  Misreads& m = misreads();
  std::lock_guard lock(m.mutex);
  std::vector<AttrMisread> out;
  for (const auto& [key, count] : m.counts) {
    const auto& [device, op, attribute] = key;
    const OpDef* def = find_kernel_op(op);
    out.push_back({device, op, attribute, def != nullptr ? declared_list(def->attrs) : "?", count});
  }
  return out;
}

}  // namespace strata::detail
