// vmap_state.hpp — what dispatch knows of vmap (docs/vmap.md): which tensors
// are batched, the vmaps running on this thread, and the entry through
// which an op call with a batched operand leaves the ordinary path for its
// batching rule (ops/batching.cpp registers it).
#pragma once

#include <cstdint>
#include <strata/vmap.hpp>
#include <string>
#include <vector>

#include "runtime/dispatch/op.hpp"

namespace strata::detail {

/// One running vmap: its level, its lanes and its options.
struct VmapFrame {
  uint64_t level = 0;
  int64_t lanes = 0;
  VmapOptions options{};
  /// Storages with this serial or later were made while the vmap ran
  /// (set by VmapFrameScope).
  uint64_t first_serial = 0;
};
/// The vmaps running on this thread, outermost first.
std::vector<VmapFrame>& vmap_frames();
/// The frame of a running vmap by level; nullptr when that vmap returned.
const VmapFrame* find_vmap_frame(uint64_t level);

/// A vmap's frame on this thread's stack for a scope (vmap itself, and the
/// fresh vmap a batched function's twin runs its rules in).
class VmapFrameScope {
 public:
  explicit VmapFrameScope(const VmapFrame& frame) : level_(frame.level) {
    vmap_frames().push_back(frame);
    vmap_frames().back().first_serial = storage_serial();
  }
  ~VmapFrameScope() {
    auto& frames = vmap_frames();
    for (auto it = frames.end(); it != frames.begin();) {
      if ((--it)->level == level_) {
        frames.erase(it);
        break;
      }
    }
  }
  VmapFrameScope(const VmapFrameScope&) = delete;
  VmapFrameScope& operator=(const VmapFrameScope&) = delete;

 private:
  uint64_t level_;
};

/// The vmap level of a batched tensor (0 for any other, and for undefined).
inline uint64_t batch_level(const Tensor& t) {
  return t.defined() && t.impl()->batch != nullptr ? t.impl()->batch->level : 0;
}
/// The highest vmap level among a call's inputs and preset outputs (0: none).
inline uint64_t top_batch_level(const OpCall& call) {
  uint64_t level = 0;
  for (int k = 0; k < call.n_inputs; ++k) level = std::max(level, batch_level(call.in(k)));
  for (int k = 0; k < call.n_outputs; ++k) level = std::max(level, batch_level(call.preset[static_cast<size_t>(k)]));
  return level;
}
/// The highest vmap level among `tensors` (0: none).
inline uint64_t top_batch_level(std::span<const Tensor> tensors) {
  uint64_t level = 0;
  for (const Tensor& t : tensors) level = std::max(level, batch_level(t));
  return level;
}

/// How an op runs under vmap, as docs/vmap.md and `strata ops` name it:
/// "own rule" (OpDef::batch); "leading dims" (a plugin op that declared
/// them independent: run once on the lanes); derived from its tags: "pointwise",
/// "reduction", "along dim" (ops/batching.cpp); "view function" (views
/// batch in their functions), "join function" (cat, pad, to_device),
/// "creation" (no tensor operand: random draws follow
/// VmapOptions::randomness), "function" (the autograd layer's nodes run
/// their functions on batched tensors), "decomposition" (a composite's
/// primitives, each batched), or "loop" (once per lane, counted).
std::string batching_kind(const OpDef& op);

/// Runs a call with a batched operand of vmap `level` (the highest among
/// its operands) through the op's batching rule.
using BatchedDispatch = OpResult (*)(OpCall& call, uint64_t level);
void set_batched_dispatch(BatchedDispatch run);
BatchedDispatch batched_dispatch();

}  // namespace strata::detail
