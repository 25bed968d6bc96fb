// allocator.cpp — the per-device caching allocator.
#include "allocator.hpp"

#include "device_record.hpp"

#include <strata/error.hpp>

namespace strata::detail {

namespace {
constexpr size_t kSmallGranule = 512;
constexpr size_t kLargeThreshold = size_t{1} << 20;
constexpr size_t kLargeGranule = size_t{1} << 20;

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}
}  // namespace

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes == 0) return kSmallGranule;
  size_t granule = bytes < kLargeThreshold ? kSmallGranule : kLargeGranule;
  return (bytes + granule - 1) / granule * granule;
}

strata_buffer CachingAllocator::allocate(size_t bytes, size_t* out_bytes) {
  size_t size = round_size(bytes);
  *out_bytes = size;
  std::lock_guard lock(mutex_);
  auto it = free_blocks_.find(size);
  if (it != free_blocks_.end() && !it->second.empty()) {
    strata_buffer b = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= size;
    live_bytes_ += size;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
    return b;
  }
  if (limit_ && live_bytes_ + cached_bytes_ + size > *limit_) release_cache_locked();
  if (limit_ && live_bytes_ + size > *limit_) {
    throw OutOfMemoryError(device_.id + ": allocating " + format_bytes(size) + " would exceed the configured memory_limit of " +
                           format_bytes(*limit_) + " (" + format_bytes(live_bytes_) + " in use)");
  }
  strata_buffer b = device_alloc(size);
  live_bytes_ += size;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  return b;
}

strata_buffer CachingAllocator::device_alloc(size_t bytes) {
  strata_error err{sizeof(strata_error), {}};
  strata_buffer b = nullptr;
  strata_status st = device_.plugin.api->alloc(device_.plugin.state, device_.index, bytes, &b, &err);
  if (st != STRATA_OK && !free_blocks_.empty()) {  // retry once without the cache
    release_cache_locked();
    err.message[0] = '\0';
    st = device_.plugin.api->alloc(device_.plugin.state, device_.index, bytes, &b, &err);
  }
  if (st != STRATA_OK) {
    throw OutOfMemoryError(device_.id + ": allocating " + format_bytes(bytes) + " failed: " + err.message + " (" +
                           format_bytes(live_bytes_) + " in use)");
  }
  ++device_allocations_;
  return b;
}

void CachingAllocator::release(strata_buffer buffer, size_t bytes) {
  std::lock_guard lock(mutex_);
  live_bytes_ -= bytes;
  if (caching_) {
    free_blocks_[bytes].push_back(buffer);
    cached_bytes_ += bytes;
  } else {
    device_.plugin.api->free(device_.plugin.state, device_.index, buffer);
  }
}

void CachingAllocator::release_cache_locked() {
  for (auto& [size, blocks] : free_blocks_) {
    for (strata_buffer b : blocks) device_.plugin.api->free(device_.plugin.state, device_.index, b);
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
