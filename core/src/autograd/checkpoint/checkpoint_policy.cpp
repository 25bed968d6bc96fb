// checkpoint_policy.cpp — checkpointing policies and sequences of stages
// split into checkpointed segments (checkpoint_sequential, CheckpointContext).
#include "autograd/engine/nodes.hpp"
#include "autograd/trace/trace.hpp"

#include "runtime/dispatch/op.hpp"

#include <strata/checkpoint.hpp>
#include <strata/config.hpp>
#include <strata/error.hpp>
#include <strata/runtime.hpp>

#include <algorithm>
#include <cmath>
#include <memory>

namespace strata {

CheckpointPolicy CheckpointPolicy::every_n(int64_t n) {
  if (n < 1) throw ValueError("CheckpointPolicy::every_n: expected at least 1 stage per segment, got " + std::to_string(n));
  CheckpointPolicy p;
  p.strategy = CheckpointStrategy::every_n;
  p.every = n;
  return p;
}

CheckpointPolicy CheckpointPolicy::sqrt_n() {
  CheckpointPolicy p;
  p.strategy = CheckpointStrategy::sqrt_n;
  return p;
}

CheckpointPolicy CheckpointPolicy::min_peak() {
  CheckpointPolicy p;
  p.strategy = CheckpointStrategy::min_peak;
  return p;
}

CheckpointPolicy CheckpointPolicy::memory_budget(uint64_t bytes) {
  CheckpointPolicy p;
  p.strategy = CheckpointStrategy::memory_budget;
  p.budget_bytes = bytes;
  return p;
}

CheckpointPolicy CheckpointPolicy::selective(std::set<std::string> save_ops) {
  for (const std::string& op : save_ops) {
    if (detail::find_op(op) == nullptr) {
      throw ValueError("CheckpointPolicy::selective: '" + op + "' is not an op (see docs/ops.md)");
    }
  }
  CheckpointPolicy p;
  p.strategy = CheckpointStrategy::selective;
  p.save_ops = std::move(save_ops);
  return p;
}

CheckpointPolicy CheckpointPolicy::from_config() {
  Config cfg = runtime().config();
  if (!cfg.checkpoint) return none();
  const CheckpointConfig& c = *cfg.checkpoint;
  if (c.policy == "every_n") return every_n(c.every);
  if (c.policy == "sqrt_n") return sqrt_n();
  if (c.policy == "min_peak") return min_peak();
  if (c.policy == "memory_budget") return memory_budget(c.budget);
  if (c.policy == "selective") {
    if (!c.save_ops) return selective();
    try {
      return selective(std::set<std::string>(c.save_ops->begin(), c.save_ops->end()));
    } catch (const ValueError& e) {
      std::string what = e.what();
      throw ConfigError(cfg.source + ": /checkpoint/save_ops: " + what.substr(what.find('\'')));
    }
  }
  return none();
}

const char* strategy_name(CheckpointStrategy strategy) {
  switch (strategy) {
    case CheckpointStrategy::none: return "none";
    case CheckpointStrategy::every_n: return "every_n";
    case CheckpointStrategy::sqrt_n: return "sqrt_n";
    case CheckpointStrategy::memory_budget: return "memory_budget";
    case CheckpointStrategy::selective: return "selective";
    case CheckpointStrategy::min_peak: return "min_peak";
  }
  return "none";
}

namespace {

using Segment = CheckpointPolicy::Segment;

/// `count` segments of nearly equal length over [begin, end), the longer
/// ones first; all checkpointed except the last when `keep_last`.
std::vector<Segment> equal_segments(size_t begin, size_t end, size_t count, bool keep_last) {
  std::vector<Segment> out;
  size_t n = end - begin;
  count = std::max<size_t>(1, std::min(count, n));
  size_t at = begin;
  for (size_t k = 0; k < count; ++k) {
    size_t len = n / count + (k < n % count ? 1 : 0);
    out.push_back({at, at + len, true});
    at += len;
  }
  if (keep_last && !out.empty()) out.back().checkpointed = false;
  return out;
}

size_t sqrt_segments(size_t n) { return static_cast<size_t>(std::ceil(std::sqrt(static_cast<double>(n)))); }

/// min_peak's segments for n >= 1 stages (checkpoint.hpp). In units of one
/// stage's activations, with the sequence's output held by the caller:
/// recomputing segment j of k (j < k) holds the kept inputs of segments
/// 2..j, its L_j stages and the output, j + L_j; the last segment, kept
/// from the forward pass, holds k − 1 inputs and its L_k stages. Peak c is
/// reachable when lengths L_j <= c − j (j < k) and L_k <= c − k + 1 can sum
/// to n. For the least such c: the k whose last segment can be longest
/// (fewest stages recomputed), then the others longest first.
std::vector<Segment> shrinking_segments(size_t n) {
  for (size_t c = 1;; ++c) {
    size_t best_k = 0, best_last = 0;
    size_t head = 0;  // capacity of segments 1..k-1
    for (size_t k = 1; k <= c; head += c - k, ++k) {
      const size_t last = std::min(c - k + 1, n - (k - 1));  // every head segment gets one stage or more
      if (head + last >= n && last > best_last) {
        best_k = k;
        best_last = last;
      }
    }
    if (best_k == 0) continue;
    std::vector<Segment> out;
    size_t at = 0, left = n - best_last;
    for (size_t j = 1; j < best_k; ++j) {
      const size_t len = std::min(c - j, left - (best_k - 1 - j));  // leave one for each later head segment
      out.push_back({at, at + len, true});
      at += len;
      left -= len;
    }
    out.push_back({at, n, false});
    return out;
  }
}

/// The stages [begin, end) as one function; the stage functions are copied
/// so the checkpoint node can run them again after the caller's vector is
/// gone.
CheckpointFn segment_fn(const std::vector<Stage>& stages, const Segment& s) {
  auto mine = std::make_shared<std::vector<Stage>>(stages.begin() + static_cast<std::ptrdiff_t>(s.begin),
                                                   stages.begin() + static_cast<std::ptrdiff_t>(s.end));
  return [mine](const std::vector<Tensor>& in) {
    Tensor y = in[0];
    for (const Stage& f : *mine) y = f(y);
    return std::vector<Tensor>{y};
  };
}

Tensor run_segments(const std::vector<Stage>& stages, Tensor x, const std::vector<Segment>& segments,
                    const std::set<std::string>* save_ops) {
  for (const Segment& s : segments) {
    if (!s.checkpointed) {
      for (size_t i = s.begin; i < s.end; ++i) x = stages[i](x);
    } else {
      // The segment's output is the next one's input, kept anyway: the
      // recomputation answers the segment's last op with it.
      x = detail::checkpoint_impl(segment_fn(stages, s), {x}, save_ops, true)[0];
    }
  }
  return x;
}

void check_stages(const std::vector<Stage>& stages, const Tensor& input) {
  if (!input.defined()) throw ValueError("checkpoint_sequential: the input is an undefined tensor");
  for (size_t i = 0; i < stages.size(); ++i) {
    if (!stages[i]) throw ValueError("checkpoint_sequential: stage " + std::to_string(i) + " is empty");
  }
}

/// memory_budget: stages run normally while the bytes they leave allocated
/// fit the budget; the rest are checkpointed in sqrt(rest) segments. A
/// stage's cost is known only after it ran, so the next one is estimated at
/// the largest cost seen so far: the kept stages stay within the budget
/// unless a stage costs more than every stage before it (and the first stage
/// always runs).
Tensor run_within_budget(const std::vector<Stage>& stages, Tensor x, uint64_t budget) {
  Device device = x.device();
  auto allocated = [&] { return runtime().memory_stats(device).allocated_bytes; };
  uint64_t used = 0;
  uint64_t largest = 0;
  size_t i = 0;
  for (; i < stages.size() && used + largest <= budget; ++i) {
    uint64_t before = allocated();
    Tensor y = stages[i](x);
    uint64_t after = allocated();
    const uint64_t cost = after > before ? after - before : 0;
    largest = std::max(largest, cost);
    used += cost;
    x = y;
  }
  if (i == stages.size()) return x;
  return run_segments(stages, x, equal_segments(i, stages.size(), sqrt_segments(stages.size() - i), false), nullptr);
}

thread_local const CheckpointPolicy* t_current = nullptr;

}  // namespace

std::vector<CheckpointPolicy::Segment> CheckpointPolicy::plan(size_t stages) const {
  if (stages == 0) return {};
  switch (strategy) {
    case CheckpointStrategy::none:
    case CheckpointStrategy::memory_budget: return {{0, stages, false}};
    case CheckpointStrategy::every_n: {
      if (every < 1) throw ValueError("CheckpointPolicy: every_n needs at least 1 stage per segment, got " + std::to_string(every));
      size_t n = static_cast<size_t>(every);
      std::vector<Segment> out;
      for (size_t b = 0; b < stages; b += n) out.push_back({b, std::min(stages, b + n), true});
      out.back().checkpointed = false;
      return out;
    }
    case CheckpointStrategy::sqrt_n:
    case CheckpointStrategy::selective: return equal_segments(0, stages, sqrt_segments(stages), true);
    case CheckpointStrategy::min_peak: return shrinking_segments(stages);
  }
  return {{0, stages, false}};
}

CheckpointContext::CheckpointContext() : CheckpointContext(CheckpointPolicy::from_config()) {}

CheckpointContext::CheckpointContext(CheckpointPolicy policy) : policy_(std::move(policy)), previous_(t_current) {
  policy_.plan(1);  // validates
  t_current = &policy_;
}

CheckpointContext::~CheckpointContext() { t_current = previous_; }

const CheckpointPolicy* CheckpointContext::current() { return t_current; }

Tensor checkpoint_sequential(const std::vector<Stage>& stages, const Tensor& input, int64_t segments) {
  check_stages(stages, input);
  if (segments < 1) {
    throw ValueError("checkpoint_sequential: expected at least 1 segment, got " + std::to_string(segments));
  }
  if (stages.empty()) return input;
  return run_segments(stages, input, equal_segments(0, stages.size(), static_cast<size_t>(segments), true), nullptr);
}

Tensor checkpoint_sequential(const std::vector<Stage>& stages, const Tensor& input, const CheckpointPolicy& policy) {
  check_stages(stages, input);
  const detail::AutogradState& st = detail::autograd_state();
  bool recording = st.grad_enabled && !st.recording.empty();
  if (policy.strategy == CheckpointStrategy::memory_budget && recording) {
    return run_within_budget(stages, input, policy.budget_bytes);
  }
  bool selective = policy.strategy == CheckpointStrategy::selective;
  return run_segments(stages, input, policy.plan(stages.size()), selective ? &policy.save_ops : nullptr);
}

Tensor checkpoint_sequential(const std::vector<Stage>& stages, const Tensor& input) {
  const CheckpointPolicy* p = CheckpointContext::current();
  return checkpoint_sequential(stages, input, p != nullptr ? *p : CheckpointPolicy::none());
}

}  // namespace strata
