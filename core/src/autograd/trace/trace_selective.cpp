// trace_selective.cpp — selective checkpointing: keeping the outputs of the
// chosen ops during a checkpointed function's first run, and answering its
// recomputation from them (checking that it runs the same ops, in order, with
// the same shapes, and that nothing wrote to the kept outputs in place).
#include "autograd/trace/trace_internal.hpp"

#include "runtime/tensor/tensor_impl.hpp"

#include <strata/error.hpp>

#include <algorithm>
#include <string>
#include <utility>

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
  for (int k = 0; k < out.size(); ++k) {
    if (!std::ranges::equal(out[k].sizes(), call.out(k).sizes())) {
      throw Error(where + ": shape " + shape_string(call.out(k).sizes()) + " now, " + shape_string(out[k].sizes()) +
                  " the first time (the function must be deterministic)");
    }
  }
  return out;
}

void keep_cached(TraceState& s, const OpCall& call, OpResult& result) {
  SelectiveCache::Entry e{call.op, {}, {}};
  for (int k = 0; k < result.size(); ++k) {
    e.outputs.push_back(result[k]);
    e.versions.push_back(result[k].impl()->storage->version.load(std::memory_order_relaxed));
  }
  s.keep->entries.push_back(std::move(e));
}

namespace {

uint32_t version_of(const Tensor& t) { return t.impl()->storage->version.load(std::memory_order_relaxed); }

bool same_attr(const Attr& a, const Attr& b) {
  return std::string_view(a.name) == b.name && a.kind == b.kind && a.i == b.i && a.f == b.f && a.ints == b.ints &&
         a.floats == b.floats && a.text == b.text && a.scalar_dtype == b.scalar_dtype;
}

bool same_attrs(const Attrs& kept, const Attrs* now) {
  if (now == nullptr) return kept.empty();
  return std::ranges::equal(kept, *now, same_attr);
}

}  // namespace

void note_top_level(TraceState& s, const OpCall& call, OpResult& result) {
  SelectiveCache& c = *s.keep;
  c.ops.push_back(call.op);
  SelectiveCache::Last& last = c.last;
  last.single = !call.decomposed && result.size() == 1 && !call.preset[0].defined() && result[0].defined() &&
                result[0].impl()->storage != nullptr;
  last.output.reset();
  if (!last.single) return;
  last.attrs = call.attrs != nullptr ? *call.attrs : Attrs{};
  last.output = result[0].impl_ptr();
  last.version = version_of(result[0]);
}

void SelectiveCache::settle_reuse(const std::vector<Tensor>& outputs) {
  if (!reuse_output || outputs.size() != 1 || !last.single || last.output.lock() != outputs[0].impl_ptr() ||
      version_of(outputs[0]) != last.version) {
    reuse_output = false;  // the function returned something else, or wrote its last output in place
    ops = {};
    last = {};
    return;
  }
  output = outputs[0].detach();
  output_version = last.version;
  last.output.reset();
}

bool reuse_last(TraceState& s, OpCall& call, OpResult& out) {
  SelectiveCache& c = *s.replay;
  const size_t at = s.position++;
  s.same_ops = s.same_ops && at < c.ops.size() && c.ops[at] == call.op;
  if (!s.same_ops || at + 1 != c.ops.size() || !c.output.defined() || selective_op(s.replay, s, call) ||
      !same_attrs(c.last.attrs, call.attrs) || version_of(c.output) != c.output_version) {
    return false;  // run it: another op or place, the output taken by an earlier pass, or written since
  }
  OpResult kept;
  kept.push_back(std::exchange(c.output, Tensor()));  // handed over: freed once the op's node has run backward
  TraceNested nested;
  out = dispatch_precomputed(call, std::move(kept));
  if (out.size() != 1 || out[0].dtype() != call.out(0).dtype ||
      !std::ranges::equal(out[0].sizes(), call.out(0).sizes())) {
    throw Error("checkpoint: recomputing op '" + std::string(call.op->name) + "' (the function's last op): " +
                type_string(out[0]) + " the first time, " + std::string(dtype_name(call.out(0).dtype)) +
                shape_string(call.out(0).sizes()) + " now (the function must be deterministic)");
  }
  s.reused = out[0].impl();
  return true;
}

std::vector<Tensor> replay_selective(SelectiveCache& cache, const std::function<std::vector<Tensor>()>& f) {
  TraceState state;
  state.replay = &cache;
  ActiveTrace active(state);
  std::vector<Tensor> outs = f();
  if (state.cursor != cache.entries.size()) {
    throw Error("checkpoint: the recomputation ran " + std::to_string(state.cursor) + " of the " +
                std::to_string(cache.entries.size()) +
                " kept ops of the first run (the function must be deterministic)");
  }
  if (state.reused != nullptr &&
      (state.position != cache.ops.size() || outs.size() != 1 || outs[0].impl() != state.reused)) {
    throw Error("checkpoint: the recomputation ran other ops after the first run's last op, or returned another "
                "tensor (the function must be deterministic)");
  }
  return outs;
}

SelectiveSuspend::SelectiveSuspend() : state_(active_trace()) {
  if (state_ != nullptr) ++state_->suspended;
}
SelectiveSuspend::~SelectiveSuspend() {
  if (state_ != nullptr) --state_->suspended;
}

}  // namespace strata::detail
