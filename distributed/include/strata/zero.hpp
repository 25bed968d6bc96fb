// zero.hpp — ShardedOptimizer: ZeRO stages 1 and 2 (Rajbhandari et al.,
// "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models";
// PyTorch's ZeroRedundancyOptimizer is stage 1). Each rank keeps the
// optimizer state of its share of the parameters only, updates only those,
// and the ranks exchange the updated parameters after every step.
//
//   distributed::init_process_group();
//   Net model;
//   // Stage 1: gradients averaged by DDP as usual.
//   nn::DistributedDataParallel ddp(model);
//   nn::ShardedOptimizer opt(model.parameters(), [](std::vector<Tensor> shard) {
//     return std::make_unique<nn::Adam>(std::move(shard), nn::AdamOptions{.lr = 1e-3});
//   });
//   ... cross_entropy(ddp(x), y).backward(); opt.step(); opt.zero_grad();
//
//   // Stage 2: no DDP; backward reduce-scatters the local gradients in
//   // buckets as they become ready, so each rank keeps only its shard's
//   // averaged gradients.
//   nn::ShardedOptimizer opt2(model.parameters(), make_adam, {.stage = 2});
//   ... cross_entropy(model(x), y).backward(); opt2.step(); opt2.zero_grad();
//
// The results are those of the unsharded optimizer on the averaged
// gradients: bit for bit for Adam, AdamW and SGD (each parameter's update is
// the same arithmetic on the same values, done on one rank and sent to the
// others), given that stage 2's reduce-scatter adds the ranks' gradients in
// the order DDP's all-reduce does (two ranks: always). docs/distributed.md,
// "ZeRO: ShardedOptimizer", gives the figures.
#pragma once

#include <strata/distributed.hpp>
#include <strata/nn/optim.hpp>
#include <strata/tensor.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace strata::nn {

struct ShardedOptions {
  /// 1: optimizer state sharded; gradients averaged beforehand (DDP).
  /// 2: optimizer state and averaged gradients sharded: step() averages the
  /// ranks' local gradients with a reduce-scatter, so a rank holds only its
  /// shard's averaged gradients (the local gradients backward produced are
  /// released at step()).
  int stage = 1;
  /// Stage 2: target size of one gradient bucket. Each backward() pass
  /// reduce-scatters a bucket as soon as its gradients are complete
  /// (parameters in reverse order, as backward produces them), overlapping
  /// the rest of the pass, as DistributedDataParallel's all-reduces do.
  size_t bucket_bytes = 25u << 20;
};

/// What a stage-2 ShardedOptimizer reduced, for tests and tuning.
struct ShardedStats {
  /// backward() passes whose gradients were reduced in buckets.
  uint64_t reduced_passes = 0;
  /// Bucket reduce-scatters started during backward, and those started
  /// only at the pass's end or at step() (a bucket with a parameter that
  /// got no gradient in the pass).
  uint64_t buckets_overlapped = 0;
  uint64_t buckets_at_end = 0;
  /// step() calls that found no bucketed pass (gradients set by hand, or
  /// taken with a tape) and reduce-scattered the gradients at step().
  uint64_t steps_reduced_at_step = 0;
};

class ShardedOptimizer {
 public:
  /// Makes the optimizer of one rank's shard (a non-empty list of the
  /// parameters it owns, in their given order).
  using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor> shard)>;

  /// Splits `params` over the group's ranks (greedily by size, in order:
  /// every rank computes the same split), makes this rank's optimizer with
  /// `make`, and broadcasts every parameter from rank 0 so that the ranks
  /// start equal. The parameters must share one dtype and device
  /// (ValueError naming the first that differs); stage must be 1 or 2. A
  /// rank that owns no parameter (more ranks than parameters) makes no
  /// optimizer and only exchanges.
  ShardedOptimizer(std::vector<Tensor> params, Factory make, ShardedOptions options = {},
                   distributed::ProcessGroup* group = nullptr);
  ~ShardedOptimizer();
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  /// Stage 2 first waits for the averaged gradients of the backward()
  /// passes since the last step (their buckets were reduce-scattered during
  /// each pass; several passes — gradient accumulation — add up) or, when
  /// there was no such pass, reduce-scatters the gradients grad() holds (a
  /// parameter without one counts as zeros); it keeps this rank's shard of
  /// them. Then this rank's optimizer steps its shard, and every parameter
  /// is sent from its owner to the others (one collective per step). Every
  /// rank must call it, after the same number of backward() passes.
  /// Stage 2 averages what backward produced: change the gradients after
  /// step() has averaged them (a rank's shard), not before.
  void step();
  /// Clears every parameter's gradient.
  void zero_grad();
  /// The rank that updates parameter `index` (in the given order).
  int owner(size_t index) const;
  /// The indices this rank updates.
  const std::vector<size_t>& shard() const;
  /// This rank's optimizer; nullptr when it owns no parameter. Its lr is
  /// the one step() uses: give it to a learning-rate scheduler.
  Optimizer* local_optimizer();
  /// Bytes of optimizer state this rank holds (its optimizer's buffers).
  size_t state_bytes() const;
  int stage() const;
  ShardedStats stats() const;
  /// The group the parameters are split over.
  distributed::ProcessGroup& process_group() const;
  /// The parameters, in the given order.
  const std::vector<Tensor>& params() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::nn
