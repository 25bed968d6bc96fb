// dispatch_group.cpp — many calls of one groupable op at once (an optimizer's
// update of every parameter): each call validated before any runs, calls
// that share memory run one by one, the rest as one kernel call per device
// and kernel (kernel_call.cpp, run_group_kernel).
#include "runtime/dispatch/dispatch_internal.hpp"
#include "runtime/dispatch/vmap_state.hpp"

#include "runtime/device/device_table.hpp"

#include <strata/error.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <vector>

namespace strata::detail {

namespace {

/// The elements [lo, hi) of a storage that an operand of call `call` may touch.
struct Extent {
  const Storage* storage;
  int64_t lo, hi;
  size_t call;
};

void add_extent(std::vector<Extent>& out, const Tensor& t, size_t call) {
  const TensorImpl& i = *t.impl();
  int64_t lo = i.offset, hi = i.offset + 1;
  for (int32_t d = 0; d < i.rank; ++d) {
    const int64_t reach = (i.shape[static_cast<size_t>(d)] - 1) * i.strides[static_cast<size_t>(d)];
    (reach < 0 ? lo : hi) += reach;
  }
  out.push_back({i.storage.get(), lo, hi, call});
}

/// Whether an operand of one call shares memory with an operand of another
/// (a call's outputs are usually its own inputs: that is not an overlap).
/// One sweep over the extents sorted by storage and start, keeping the
/// furthest end seen and the furthest end of any other call.
bool extents_overlap(std::span<const OpCall> calls) {
  std::vector<Extent> extents;
  extents.reserve(calls.size() * static_cast<size_t>(kMaxInputs + kMaxOutputs));
  for (size_t c = 0; c < calls.size(); ++c) {
    const OpCall& call = calls[c];
    for (int k = 0; k < call.n_inputs; ++k) add_extent(extents, call.in(k), c);
    for (int k = 0; k < call.n_outputs; ++k) add_extent(extents, call.preset[static_cast<size_t>(k)], c);
  }
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return a.storage != b.storage ? std::less<const Storage*>()(a.storage, b.storage) : a.lo < b.lo;
  });
  const Storage* storage = nullptr;
  int64_t furthest = 0, furthest_other = 0;  // ends: of any call, of calls other than `leader`
  size_t leader = 0;
  for (const Extent& e : extents) {
    if (e.storage != storage) {
      storage = e.storage;
      furthest = furthest_other = std::numeric_limits<int64_t>::min();
      leader = e.call;
    }
    if (e.lo < (e.call == leader ? furthest_other : furthest)) return true;
    if (e.call == leader) {
      furthest = std::max(furthest, e.hi);
    } else if (e.hi > furthest) {
      furthest_other = furthest;  // the old leader's end is the furthest of the rest
      furthest = e.hi;
      leader = e.call;
    } else {
      furthest_other = std::max(furthest_other, e.hi);
    }
  }
  return false;
}

/// extents_overlap, first ruling out the usual case cheaply: no storage is
/// shared by two calls (then nothing overlaps), found by sorting storage
/// pointers alone.
bool calls_overlap(std::span<const OpCall> calls) {
  std::vector<std::pair<const Storage*, size_t>> storages;  // (storage, call), once per call
  storages.reserve(calls.size() * static_cast<size_t>(kMaxInputs));
  for (size_t c = 0; c < calls.size(); ++c) {
    const OpCall& call = calls[c];
    const size_t first = storages.size();
    auto add = [&](const Tensor& t) {
      const Storage* s = t.impl()->storage.get();
      for (size_t k = first; k < storages.size(); ++k) {
        if (storages[k].first == s) return;
      }
      storages.emplace_back(s, c);
    };
    for (int k = 0; k < call.n_inputs; ++k) add(call.in(k));
    for (int k = 0; k < call.n_outputs; ++k) add(call.preset[static_cast<size_t>(k)]);
  }
  std::sort(storages.begin(), storages.end(),
            [](const auto& a, const auto& b) { return std::less<const Storage*>()(a.first, b.first); });
  for (size_t k = 1; k < storages.size(); ++k) {
    if (storages[k].first == storages[k - 1].first) return extents_overlap(calls);  // shared: look closer
  }
  return false;
}

/// Calls of one device and one grouped kernel.
struct Group {
  DeviceRecord* dev;
  const KernelSlot* kernel;
  std::vector<OpCall*> calls;
};

}  // namespace

void dispatch_group(std::span<OpCall> calls) {
  if (calls.empty()) return;
  const DispatchHooks& hooks = dispatch_hooks();
  // Inside a trace, with recorded inputs, or with batched ones (vmap), each
  // call goes through dispatch as it is (traced, recorded, batched) in turn.
  bool one_by_one = calls.size() == 1;
  for (size_t c = 0; !one_by_one && c < calls.size(); ++c) {
    const OpCall& call = calls[c];
    one_by_one = top_batch_level(call) != 0 ||
                 (hooks.wants_external != nullptr &&
                  hooks.wants_external({call.inputs.data(), static_cast<size_t>(call.n_inputs)}));
  }
  if (one_by_one) {
    for (OpCall& call : calls) dispatch_call(call);
    return;
  }
  for (OpCall& call : calls) {
    if (!call.op->groupable) throw Error(call.describe() + ": the op does not take groups");
    prepare_dispatch(call, hooks);
  }
  // Every call is valid and counts as run from here on: should a kernel fail
  // part way (or a hook throw), the calls not yet finished still move their
  // presets' versions, since any of them may have been written.
  size_t finished = 0;
  struct BumpUnfinished {
    std::span<OpCall> calls;
    const size_t& finished;
    ~BumpUnfinished() {
      for (size_t c = finished; c < calls.size(); ++c) bump_presets(calls[c]);
    }
  } unfinished{calls, finished};
  std::vector<Group> groups;
  std::vector<OpCall*> singles;
  for (OpCall& call : calls) {
    DeviceRecord& dev = device_record(call.device);
    const KernelSlot* kernel = group_kernel(call, dev);
    if (kernel == nullptr) {
      singles.push_back(&call);
      continue;
    }
    auto it = std::ranges::find_if(groups, [&](const Group& g) { return g.dev == &dev && g.kernel == kernel; });
    if (it == groups.end()) it = groups.insert(groups.end(), Group{&dev, kernel, {}});
    it->calls.push_back(&call);
  }
  std::vector<OpResult> results(calls.size());
  std::vector<uint8_t> decomposed(calls.size(), 0);
  auto run_single = [&](OpCall& call) {
    const auto c = static_cast<size_t>(&call - calls.data());
    bool d = false;
    results[c] = execute(call, d);
    decomposed[c] = d ? 1 : 0;
  };
  const bool grouping = std::ranges::any_of(groups, [](const Group& g) { return g.calls.size() > 1; });
  if (grouping && calls_overlap(calls)) {
    // Calls that share memory see one another's writes: in order, one by one.
    for (OpCall& call : calls) run_single(call);
  } else {
    for (const Group& g : groups) {
      if (g.calls.size() == 1) {
        run_single(*g.calls.front());
        continue;
      }
      strata_error err;
      err.struct_size = sizeof(err);
      err.message[0] = '\0';
      const strata_status status = run_group_kernel(*g.dev, *g.kernel, g.calls, err);
      if (status == STRATA_ERROR_UNSUPPORTED) {
        for (OpCall* call : g.calls) run_single(*call);  // each as if alone: kernel, decomposition, fallback
        continue;
      }
      if (status != STRATA_OK) {
        throw_kernel_failure(*g.dev, status, err,
                             g.calls.front()->describe() + " and " + std::to_string(g.calls.size() - 1) +
                                 " more calls of a group");
      }
      for (OpCall* call : g.calls) {
        OpResult& r = results[static_cast<size_t>(call - calls.data())];
        for (int k = 0; k < call->n_outputs; ++k) r.push_back(call->preset[static_cast<size_t>(k)]);
      }
    }
    for (OpCall* call : singles) run_single(*call);
  }
  while (finished < calls.size()) {
    const size_t c = finished++;
    finish_dispatch(calls[c], results[c], decomposed[c] != 0, hooks);
  }
}

}  // namespace strata::detail
