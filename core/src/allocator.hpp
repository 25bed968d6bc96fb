// allocator.hpp — per-device caching allocator on top of a plugin's alloc/free.
//
// Freed blocks are kept in size buckets and reused, so steady-state eager
// code does not call into the plugin. Sizes are rounded (512 B granules up to
// 1 MiB, then 1 MiB granules) so that near sizes share buckets. Bytes held
// from the device (live + cached) never exceed the configured limit: on
// pressure the cache is returned to the plugin first, then OutOfMemoryError
// names the device, the request and the limit.
#pragma once

#include <strata/plugin/strata_plugin.h>
#include <strata/runtime.hpp>

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace strata::detail {

struct DeviceRecord;

class CachingAllocator {
 public:
  explicit CachingAllocator(DeviceRecord& device) : device_(device) {}

  /// Returns a buffer of at least `bytes`; *out_bytes is the block size.
  strata_buffer allocate(size_t bytes, size_t* out_bytes);
  void release(strata_buffer buffer, size_t bytes);
  /// Returns every cached block to the plugin.
  void empty_cache();

  void set_limit(std::optional<uint64_t> limit);
  void reset_peak();
  /// Raises the peak to at least `bytes` (restoring an enclosing measurement).
  void raise_peak(uint64_t bytes);
  void set_caching(bool enabled);
  MemoryStats stats();

  static size_t round_size(size_t bytes);

 private:
  strata_buffer device_alloc(size_t bytes);  // called with mutex_ held
  void release_cache_locked();

  DeviceRecord& device_;
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<strata_buffer>> free_blocks_;
  bool caching_ = true;
  std::optional<uint64_t> limit_;
  uint64_t live_bytes_ = 0;
  uint64_t cached_bytes_ = 0;
  uint64_t peak_bytes_ = 0;
  uint64_t device_allocations_ = 0;
};

}  // namespace strata::detail
