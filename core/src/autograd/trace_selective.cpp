// trace_selective.cpp — selective checkpointing: keeping the outputs of the
// chosen ops during a checkpointed function's first run, and answering its
// recomputation from them (checking that it runs the same ops, in order, with
// the same shapes, and that nothing wrote to the kept outputs in place).
#include "trace_internal.hpp"

#include "../tensor_impl.hpp"

#include <strata/error.hpp>

#include <algorithm>
#include <string>

namespace strata::detail {

bool selective_op(const SelectiveCache* cache, const TraceState& s, const OpCall& call) {
  return cache != nullptr && s.suspended == 0 && !call.preset[0].defined() &&
         cache->save_ops.contains(call.op->name);
}

OpResult replay_cached(TraceState& s, OpCall& call) {
  const SelectiveCache& cache = *s.replay;
  std::string where = "checkpoint: recomputing op '" + std::string(call.op->name) + "' (kept output " +
                      std::to_string(s.cursor) + ")";
  if (s.cursor >= cache.entries.size() || cache.entries[s.cursor].op != call.op) {
    throw Error(where + ": the function ran other ops than the first time (it must be deterministic)");
  }
  const SelectiveCache::Entry& e = cache.entries[s.cursor++];
  OpResult result;
  for (size_t k = 0; k < e.outputs.size(); ++k) {
    if (e.outputs[k].impl()->storage->version.load(std::memory_order_relaxed) != e.versions[k]) {
      throw Error(where + ": the kept output was modified in place after the first run; leave '" +
                  std::string(call.op->name) + "' out of save_ops or avoid the in-place write");
    }
    result.push_back(e.outputs[k].detach());  // a fresh handle: each recomputation records its own history
  }
  TraceNested nested;
  OpResult out = dispatch_precomputed(call, std::move(result));
  for (int k = 0; k < out.count; ++k) {
    if (!std::ranges::equal(out[k].sizes(), call.out(k).sizes())) {
      throw Error(where + ": shape " + shape_string(call.out(k).sizes()) + " now, " + shape_string(out[k].sizes()) +
                  " the first time (the function must be deterministic)");
    }
  }
  return out;
}

void keep_cached(TraceState& s, const OpCall& call, OpResult& result) {
  SelectiveCache::Entry e{call.op, {}, {}};
  for (int k = 0; k < result.count; ++k) {
    e.outputs.push_back(result[k]);
    e.versions.push_back(result[k].impl()->storage->version.load(std::memory_order_relaxed));
  }
  s.keep->entries.push_back(std::move(e));
}

void replay_selective(const SelectiveCache& cache, const std::function<void()>& f) {
  TraceState state;
  state.replay = &cache;
  ActiveTrace active(state);
  f();
  if (state.cursor != cache.entries.size()) {
    throw Error("checkpoint: the recomputation ran " + std::to_string(state.cursor) + " of the " +
                std::to_string(cache.entries.size()) +
                " kept ops of the first run (the function must be deterministic)");
  }
}

SelectiveSuspend::SelectiveSuspend() : state_(active_trace()) {
  if (state_ != nullptr) ++state_->suspended;
}
SelectiveSuspend::~SelectiveSuspend() {
  if (state_ != nullptr) --state_->suspended;
}

}  // namespace strata::detail
