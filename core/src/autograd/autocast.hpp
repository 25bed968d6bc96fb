// autocast.hpp — the hooks autocast adds to dispatch, and its per-thread
// state for code that must replay it (activation checkpointing).
#pragma once

#include "runtime/dispatch/op.hpp"

#include <atomic>

namespace strata::detail {

/// Threads with an autocast scope active, anywhere in the process.
extern std::atomic<int> g_autocast_threads;
/// False while no thread autocasts: the hot path skips the per-thread check.
inline bool autocast_anywhere() { return g_autocast_threads.load(std::memory_order_relaxed) != 0; }
/// Whether an autocast scope is active on this thread.
bool autocast_active();
/// Casts the inputs of `call` per the autocast policy (before prepare).
void apply_autocast(OpCall& call);
/// Makes every thread re-read the policy (the configuration changed).
void invalidate_autocast_policy();

struct AutocastSnapshot {
  bool enabled = false;
  DType dtype = DType::bf16;
  int device_slot = -1;
};
AutocastSnapshot autocast_snapshot();
void restore_autocast(const AutocastSnapshot& snapshot);

}  // namespace strata::detail
