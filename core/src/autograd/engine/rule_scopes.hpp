// rule_scopes.hpp — scopes that derivative rules running user code share
// (activation checkpointing's recomputation, custom functions' rules): the
// generator and autocast state of a forward pass put back for a while, and
// the set of recording levels narrowed for a while.
#pragma once

#include "autograd/engine/nodes.hpp"

#include "autograd/autocast.hpp"

#include <strata/tensor.hpp>

namespace strata::detail {

/// Puts the autocast state of a forward pass in place for a scope, and the
/// generator state too when given, restoring the caller's afterwards.
class ReplayState {
 public:
  ReplayState(const RngState* rng, const AutocastSnapshot& autocast)
      : restore_rng_(rng != nullptr), autocast_(autocast_snapshot()) {
    if (restore_rng_) {
      rng_ = get_rng_state();
      set_rng_state(*rng);
    }
    restore_autocast(autocast);
  }
  ~ReplayState() {
    if (restore_rng_) set_rng_state(rng_);
    restore_autocast(autocast_);
  }
  ReplayState(const ReplayState&) = delete;
  ReplayState& operator=(const ReplayState&) = delete;

 private:
  bool restore_rng_;
  RngState rng_;
  AutocastSnapshot autocast_;
};

/// Keeps the enclosing levels recording (`keep_outer`) or stops them for a
/// scope; the set is restored on exit. A tape opened inside records either
/// way, so a rule can differentiate with a tape of its own whose result is
/// recorded on the enclosing levels only when they asked for it.
class RecordingScope {
 public:
  explicit RecordingScope(bool keep_outer) : st_(autograd_state()), saved_(st_.recording) {
    if (!keep_outer) st_.recording = {};
  }
  ~RecordingScope() { st_.recording = saved_; }
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;

 private:
  AutogradState& st_;
  LevelSet saved_;
};

}  // namespace strata::detail
