// op_census.hpp — the record of which ops run where and how, while a census
// is open (op_census.cpp; Runtime::start_op_census).
#pragma once

#include "runtime/dispatch/op.hpp"

#include <strata/plugin_info.hpp>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::detail {

struct DeviceRecord;

/// True while a census is open: execute() then calls census_note. Hidden,
/// so that execute() reads it without a GOT load.
[[gnu::visibility("hidden")]] extern std::atomic<bool> g_op_census_open;
inline bool op_census_open() { return g_op_census_open.load(std::memory_order_relaxed); }

/// Counts `call` on `dev` with its signature, and how `dev` serves it.
[[gnu::cold, gnu::noinline]] void census_note(const OpCall& call, DeviceRecord& dev, uint64_t signature_key,
                                              const std::string& signature);
/// A call of `dev`'s kernel declined and decomposed: its census entry
/// (noted as "kernel" before the kernel ran) says so.
[[gnu::cold, gnu::noinline]] void census_declined(const OpCall& call, const DeviceRecord& dev,
                                                  const std::string& signature);
void open_op_census();
std::vector<OpUse> close_op_census();

}  // namespace strata::detail
