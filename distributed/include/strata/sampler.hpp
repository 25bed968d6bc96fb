// sampler.hpp — DistributedSampler: which examples of a dataset each rank
// visits in an epoch (PyTorch's torch.utils.data.DistributedSampler), so
// that the ranks of a data-parallel job see disjoint shares of one
// shuffled order.
//
//   distributed::DistributedSampler sampler(dataset_size);   // the default group's rank and size
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);                                // a new order each epoch
//     std::vector<int64_t> mine = sampler.indices();          // this rank's examples
//     ...
//   }
#pragma once

#include <cstdint>
#include <vector>

namespace strata::distributed {

struct SamplerOptions {
  bool shuffle = true;   // a permutation seeded by (seed, epoch); false: 0, 1, 2, ...
  uint64_t seed = 0;     // the same on every rank
  /// Uneven sizes: false pads the order by repeating its first examples up
  /// to a multiple of the world size (every rank the same count; a few
  /// examples seen twice per epoch); true drops the last examples instead.
  bool drop_last = false;
  int rank = -1;        // -1: the default group's rank (0 without a group)
  int world_size = -1;  // -1: the default group's size (1 without a group)
};

class DistributedSampler {
 public:
  /// ValueError for a negative size, a world size below 1, a rank outside
  /// 0..world_size-1, or drop_last with fewer examples than ranks.
  explicit DistributedSampler(int64_t dataset_size, SamplerOptions options = {});
  /// The epoch whose order indices() gives (the shuffle's seed).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  /// This rank's examples in the epoch: positions rank, rank + world, ... of
  /// the epoch's (padded or truncated) order; num_samples() of them.
  std::vector<int64_t> indices() const;
  /// How many indices() gives: the same on every rank.
  int64_t num_samples() const;
  int rank() const { return rank_; }
  int world_size() const { return world_; }

 private:
  int64_t size_;
  SamplerOptions options_;
  int rank_ = 0;
  int world_ = 1;
  int64_t epoch_ = 0;
};

}  // namespace strata::distributed
