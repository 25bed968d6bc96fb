// sampler.cpp — DistributedSampler (sampler.hpp).
#include <strata/sampler.hpp>

#include <strata/distributed.hpp>
#include <strata/error.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

namespace strata::distributed {

DistributedSampler::DistributedSampler(int64_t dataset_size, SamplerOptions options)
    : size_(dataset_size), options_(options) {
  const bool grouped = is_initialized();
  world_ = options.world_size >= 0 ? options.world_size : grouped ? world_size() : 1;
  rank_ = options.rank >= 0 ? options.rank : grouped ? rank() : 0;
  const std::string who = "DistributedSampler(" + std::to_string(dataset_size) + " examples)";
  if (dataset_size < 0) throw ValueError(who + ": the dataset size is negative");
  if (world_ < 1) throw ValueError(who + ": world size " + std::to_string(world_) + " (must be >= 1)");
  if (rank_ < 0 || rank_ >= world_)
    throw ValueError(who + ": rank " + std::to_string(rank_) + " is not in 0.." + std::to_string(world_ - 1));
  if (options.drop_last && dataset_size < world_)
    throw ValueError(who + ": drop_last with fewer examples than the " + std::to_string(world_) +
                     " ranks leaves every rank none");
}

int64_t DistributedSampler::num_samples() const {
  return options_.drop_last ? size_ / world_ : (size_ + world_ - 1) / world_;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options_.shuffle) {
    // One generator per (seed, epoch), the same on every rank of a build.
    std::seed_seq seq{static_cast<uint32_t>(options_.seed), static_cast<uint32_t>(options_.seed >> 32),
                      static_cast<uint32_t>(epoch_), static_cast<uint32_t>(static_cast<uint64_t>(epoch_) >> 32)};
    std::mt19937_64 rng(seq);
    std::shuffle(order.begin(), order.end(), rng);
  }
  const int64_t total = num_samples() * world_;
  // Pad by repeating the order's start (cyclically, for tiny datasets).
  for (int64_t k = size_; k < total && size_ > 0; ++k) order.push_back(order[static_cast<size_t>((k - size_) % size_)]);
  order.resize(static_cast<size_t>(total));
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples()));
  for (int64_t k = rank_; k < total; k += world_) mine.push_back(order[static_cast<size_t>(k)]);
  return mine;
}

}  // namespace strata::distributed
