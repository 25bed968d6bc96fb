// checkpoint.hpp — activation checkpointing: trade compute for memory by
// not keeping a function's intermediate tensors for backward and running the
// function again when its gradient is needed.
#pragma once

#include <strata/tensor.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace strata {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Runs `fn(inputs)` keeping only `inputs` (not its intermediates) for
/// backward; the backward pass runs `fn` again with the random-number state
/// and autocast state of the first run, so dropout and mixed precision
/// inside give the gradients an uncheckpointed run would (bitwise on CPU).
///
/// Tensors `fn` reads without receiving them as inputs (captured weights)
/// are found during the first run and get their gradients too, so
/// `tape.gradient(loss, {weights})` works. Composes with tapes and
/// `backward()`, higher-order gradients (the recomputation is recorded when
/// the gradient is), nested checkpoints, and forward mode (where `fn` simply
/// runs, since tangents need no saved activations). If `fn` throws, nothing
/// is recorded and no state is left behind. `fn` must be deterministic given
/// its inputs, the generator state and the autocast state.
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);
/// Single-tensor form.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

/// Selective checkpointing: as checkpoint(fn, inputs), but the outputs of
/// the ops named in `save_ops` (e.g. {"matmul"}; conv2d lowers to matmul) that `fn` calls
/// directly are kept from the first run, and the recomputation reuses them
/// instead of running those ops again; everything else is recomputed. The
/// gradients are the same as checkpoint()'s (bitwise on the CPU).
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const std::set<std::string>& save_ops);

/// How a sequence of stages (layers) is split into checkpointed segments.
enum class CheckpointStrategy {
  none,           // keep everything: no recomputation
  every_n,        // segments of `every` stages
  sqrt_n,         // ceil(sqrt(L)) segments of equal length for L stages
  memory_budget,  // keep stages while their activations fit `budget_bytes`, checkpoint the rest
  selective,      // sqrt(L) segments that keep the outputs of `save_ops` (no GEMM is run twice)
  min_peak,       // segments shrinking by one stage: the least activation peak if no stage runs thrice
};

/// A checkpointing policy, from code (the factory functions) or from the
/// configuration file's "checkpoint" object (docs/configuration.md).
///
/// sqrt_n and min_peak both run every stage at most twice (once forward,
/// once recomputed). Counting one unit per stage's activations, with the
/// sequence's output held by the caller through the backward pass: sqrt_n's
/// equal segments hold up to about 2·sqrt(L) units at once; min_peak's
/// segments (lengths c − 1, c − 2, ... and a kept last one) hold at most c,
/// the least any such split can, about sqrt(2·L): 6 against 7 units for 16
/// stages, 12 against 15 for 64. It recomputes more stages for it. A
/// segment's last op is not run again (its output is the next segment's
/// input, kept anyway), so where each stage is one op (a Linear, a fused
/// Linear+ReLU) min_peak recomputes L − c stages (10 of 16, 52 of 64) and
/// sqrt_n those outside its last segment less one per segment (9 of 16, 49
/// of 64).
///
/// In every strategy but memory_budget the last segment is not checkpointed:
/// backward needs its activations first, so recomputing them would cost
/// time and save no peak memory. memory_budget measures the bytes each
/// stage leaves allocated on its device (its output and what it saved for
/// backward); stages run normally while the total stays within the budget
/// and, once the next stage would exceed it (estimated at the largest stage
/// so far), the remaining stages are checkpointed in sqrt(remaining)
/// segments. So the kept stages hold at most the budget — unless a stage
/// costs more than every one before it, or the first stage alone exceeds
/// it — and the forward pass keeps that plus one activation per
/// checkpointed segment (its output, the next one's input), which
/// checkpointing must keep and the budget does not count.
struct CheckpointPolicy {
  CheckpointStrategy strategy = CheckpointStrategy::none;
  int64_t every = 1;          // every_n: stages per segment (>= 1)
  uint64_t budget_bytes = 0;  // memory_budget
  /// selective: ops whose outputs are kept: the GEMMs (Linear runs the
  /// linear op; convolutions lower to matmul, so the default keeps them too).
  std::set<std::string> save_ops{"linear", "matmul"};

  static CheckpointPolicy none() { return {}; }
  static CheckpointPolicy every_n(int64_t n);
  static CheckpointPolicy sqrt_n();
  static CheckpointPolicy min_peak();
  static CheckpointPolicy memory_budget(uint64_t bytes);
  /// ValueError for a name that is not an op (docs/ops.md).
  static CheckpointPolicy selective(std::set<std::string> save_ops = {"linear", "matmul"});
  /// The policy of the active configuration's "checkpoint" object (none
  /// when it has none); ConfigError naming the file and key for an unknown
  /// op in "save_ops".
  static CheckpointPolicy from_config();

  /// The segments for `stages` stages as [begin, end) pairs, and whether
  /// each is checkpointed (memory_budget decides while running; here it
  /// gives the all-kept plan). ValueError for every_n with every < 1.
  struct Segment {
    size_t begin = 0;
    size_t end = 0;
    bool checkpointed = false;
  };
  std::vector<Segment> plan(size_t stages) const;
};

/// "none", "every_n", "sqrt_n", "memory_budget", "selective" or "min_peak".
const char* strategy_name(CheckpointStrategy strategy);

/// A scope in which sequences of stages — nn::Sequential in training mode,
/// nn::checkpoint_sequential and checkpoint_sequential without an explicit
/// segment count — are checkpointed by `policy`. Scopes nest (the inner one
/// wins until it ends) and are per thread.
class CheckpointContext {
 public:
  /// The configuration's policy (CheckpointPolicy::from_config()).
  CheckpointContext();
  explicit CheckpointContext(CheckpointPolicy policy);
  ~CheckpointContext();
  CheckpointContext(const CheckpointContext&) = delete;
  CheckpointContext& operator=(const CheckpointContext&) = delete;

  /// The innermost active scope's policy on this thread, if any.
  static const CheckpointPolicy* current();

 private:
  CheckpointPolicy policy_;
  const CheckpointPolicy* previous_;
};

/// One stage of a sequence: a layer as a function of one tensor.
using Stage = std::function<Tensor(const Tensor&)>;

/// Runs `stages` in order on `input`, split into `segments` segments of
/// (nearly) equal length; all but the last are checkpointed. ValueError
/// when segments < 1. With segments >= stages every stage but the last is
/// its own checkpoint.
Tensor checkpoint_sequential(const std::vector<Stage>& stages, const Tensor& input, int64_t segments);
/// Runs `stages` under `policy`.
Tensor checkpoint_sequential(const std::vector<Stage>& stages, const Tensor& input, const CheckpointPolicy& policy);
/// Runs `stages` under the active CheckpointContext's policy (plainly when
/// there is none, or when nothing is being recorded).
Tensor checkpoint_sequential(const std::vector<Stage>& stages, const Tensor& input);

}  // namespace strata
