// allocator.cpp — the per-device caching allocator.
#include "runtime/device/allocator.hpp"

#include "runtime/device/device_record.hpp"

#include <strata/error.hpp>
#include <strata/memory.hpp>

#include <limits>
#include <string>

namespace strata::detail {

namespace {
constexpr size_t kSmallGranule = 512;
constexpr size_t kLargeThreshold = size_t{1} << 20;
constexpr size_t kLargeGranule = size_t{1} << 20;

}  // namespace

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes == 0) return kSmallGranule;
  size_t granule = bytes < kLargeThreshold ? kSmallGranule : kLargeGranule;
  // A request within a granule of SIZE_MAX would wrap to a small block (a
  // plugin's workspace request of SIZE_MAX - 1 became 0 bytes, granted).
  if (bytes > std::numeric_limits<size_t>::max() - (granule - 1)) {
    throw OutOfMemoryError("a request of " + std::to_string(bytes) + " bytes exceeds what any device can hold");
  }
  return (bytes + granule - 1) / granule * granule;
}

strata_buffer CachingAllocator::take_cached_locked(std::vector<CachedBlock>& blocks, strata_stream stream) {
  // Latest first: the block most recently used on this stream is warm.
  for (size_t k = blocks.size(); k-- > 0;) {
    CachedBlock& b = blocks[k];
    if (b.stream != stream) {
      // Another stream's block: usable once that stream has finished with
      // it. The event, recorded now on its stream, completes after all work
      // queued there so far, which includes every use of the block.
      if (b.ready == nullptr) b.ready = device_.record_event(b.stream);
      if (!device_.event_done(b.ready)) continue;
    }
    strata_buffer buffer = b.buffer;
    device_.destroy_event(b.ready);
    blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(k));
    return buffer;
  }
  return nullptr;
}

strata_buffer CachingAllocator::allocate(size_t bytes, size_t* out_bytes, strata_stream stream) {
  size_t size = round_size(bytes);
  *out_bytes = size;
  device_.ensure_alive();  // a lost device hands out nothing, cached or not
  std::lock_guard lock(mutex_);
  if (auto it = free_blocks_.find(size); it != free_blocks_.end() && !it->second.empty()) {
    std::vector<CachedBlock>& blocks = it->second;
    strata_buffer b = nullptr;
    if (blocks.back().stream == stream && blocks.back().ready == nullptr) {  // the common case: one stream
      b = blocks.back().buffer;
      blocks.pop_back();
    } else {
      b = take_cached_locked(blocks, stream);
    }
    if (b != nullptr) {
      cached_bytes_ -= size;
      live_bytes_ += size;
      peak_bytes_ = std::max(peak_bytes_, live_bytes_);
      return b;
    }
  }
  // Compared by subtraction: live + size could wrap for a size near SIZE_MAX.
  auto exceeds = [&](size_t held) { return held > *limit_ || size > *limit_ - held; };
  if (limit_ && exceeds(live_bytes_ + cached_bytes_)) release_cache_locked();
  if (limit_ && exceeds(live_bytes_)) {
    throw OutOfMemoryError(device_.id + ": allocating " + format_bytes(size) + " would exceed the configured memory_limit of " +
                           format_bytes(*limit_) + " (" + format_bytes(live_bytes_) + " in use)");
  }
  strata_buffer b = device_alloc(size, stream);
  live_bytes_ += size;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  return b;
}

strata_buffer CachingAllocator::device_alloc(size_t bytes, strata_stream stream) {
  auto attempt = [&] {
    strata_buffer b = device_.alloc(bytes, stream);
    ++device_allocations_;
    return b;
  };
  auto in_context = [&](const OutOfMemoryError& e) {
    return OutOfMemoryError(device_.id + ": allocating " + format_bytes(bytes) + " failed: " + e.what() + " (" +
                            format_bytes(live_bytes_) + " in use)");
  };
  try {
    return attempt();
  } catch (const OutOfMemoryError& e) {
    if (cached_bytes_ == 0) throw in_context(e);
  }
  release_cache_locked();  // retry once without the cache
  try {
    return attempt();
  } catch (const OutOfMemoryError& e) {
    throw in_context(e);
  }
}

void CachingAllocator::release(strata_buffer buffer, size_t bytes, strata_stream stream) {
  std::lock_guard lock(mutex_);
  live_bytes_ -= bytes;
  if (caching_ && (device_.props.flags & STRATA_DEVICE_CACHES_MEMORY) == 0 && !device_.lost()) {
    free_blocks_[bytes].push_back({buffer, stream});
    cached_bytes_ += bytes;
  } else {
    device_.free(buffer, stream);
  }
}

void CachingAllocator::release_cache_locked() {
  for (auto& [size, blocks] : free_blocks_) {
    for (const CachedBlock& b : blocks) {
      device_.destroy_event(b.ready);
      device_.free(b.buffer, b.stream);
    }
  }
  free_blocks_.clear();
  cached_bytes_ = 0;
}

void CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  release_cache_locked();
}

void CachingAllocator::set_limit(std::optional<uint64_t> limit) {
  std::lock_guard lock(mutex_);
  limit_ = limit;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_bytes_ = live_bytes_;
}

void CachingAllocator::raise_peak(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  peak_bytes_ = std::max(peak_bytes_, bytes);
}

void CachingAllocator::set_caching(bool enabled) {
  std::lock_guard lock(mutex_);
  caching_ = enabled;
  if (!enabled) release_cache_locked();
}

MemoryStats CachingAllocator::stats() {
  std::lock_guard lock(mutex_);
  return MemoryStats{live_bytes_, cached_bytes_, peak_bytes_, device_allocations_, limit_};
}

}  // namespace strata::detail
