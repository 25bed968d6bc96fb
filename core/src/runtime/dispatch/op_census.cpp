// op_census.cpp — which ops a program runs, on which devices, and how
// (Runtime::start_op_census / stop_op_census; `strata trace ops`): every
// call execute() sees while a census is open, by device, op and signature,
// with how the device serves it — its kernel, a decomposition into other
// ops, or the CPU fallback. Off, it costs execute() one load and branch:
// 8 instructions per call with the code around it (callgrind,
// bench_dispatch_count: a one-element add 2,254 -> 2,262).
#include "runtime/dispatch/op_census.hpp"

#include "runtime/device/device_record.hpp"

#include <map>
#include <mutex>
#include <tuple>

namespace strata::detail {

namespace {

struct Census {
  std::mutex mutex;
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<std::string, uint64_t>> uses;
  std::vector<std::tuple<std::string, std::string, std::string>> order;  // first use first
};
Census& census() {
  static Census* c = new Census;  // never destroyed: ops may run during exit
  return *c;
}

}  // namespace

[[gnu::visibility("hidden")]] std::atomic<bool> g_op_census_open{false};

void census_note(const OpCall& call, DeviceRecord& dev, uint64_t signature_key, const std::string& signature) {
  const OpDef& op = *call.op;
  const char* how = dev.find_kernel(op.id, signature_key) != nullptr       ? "kernel"
                    : op.kind == OpKind::composite && op.decompose != nullptr ? "decomposition"
                    : dev.kernel_excluded(op.name, signature_key)           ? "fallback (kernel set aside)"
                                                                            : "fallback";
  try {
    Census& c = census();
    std::lock_guard lock(c.mutex);
    auto key = std::make_tuple(dev.id, std::string(op.kernel_name), signature);
    auto [it, first] = c.uses.try_emplace(key, how, 0);
    ++it->second.second;
    if (first) c.order.push_back(std::move(key));
  } catch (...) {  // out of memory: the record is lost, the op runs on
  }
}

void census_declined(const OpCall& call, const DeviceRecord& dev, const std::string& signature) {
  try {
    Census& c = census();
    std::lock_guard lock(c.mutex);
    auto it = c.uses.find(std::make_tuple(dev.id, std::string(call.op->kernel_name), signature));
    if (it != c.uses.end()) it->second.first = "kernel (declined calls decomposed)";
  } catch (...) {  // out of memory: the record keeps "kernel"
  }
}

void open_op_census() {
  Census& c = census();
  std::lock_guard lock(c.mutex);
  c.uses.clear();
  c.order.clear();
  g_op_census_open.store(true, std::memory_order_relaxed);
}

std::vector<OpUse> close_op_census() {
  g_op_census_open.store(false, std::memory_order_relaxed);
  Census& c = census();
  std::lock_guard lock(c.mutex);
  std::vector<OpUse> out;
  for (const auto& key : c.order) {
    const auto& [how, count] = c.uses.at(key);
    out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), how, count});
  }
  c.uses.clear();
  c.order.clear();
  return out;
}

}  // namespace strata::detail
