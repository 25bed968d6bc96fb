// amp_internal.hpp — the hooks autocast adds to dispatch, and its per-thread
// state for code that must replay it (activation checkpointing).
#pragma once

#include "op.hpp"

namespace strata::detail {

/// Whether an autocast scope is active on this thread (cheap).
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
