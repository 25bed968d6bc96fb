// allocator.hpp — per-device caching allocator on top of a plugin's alloc/free.
//
// Freed blocks are kept in size buckets and reused, so steady-state eager
// code does not call into the plugin. Sizes are rounded (512 B granules up to
// 1 MiB, then 1 MiB granules) so that near sizes share buckets. Bytes held
// from the device (live + cached) never exceed the configured limit: on
// pressure the cache is returned to the plugin first, then OutOfMemoryError
// names the device, the request and the limit.
//
// Memory is stream-ordered (ABI 2.0): each cached block is tagged with the
// stream that last used it. A request on the same stream reuses it at once
// (work on one stream runs in order); a request on another stream takes it
// only after an event recorded on the block's stream has completed. A plugin
// that caches memory itself (STRATA_DEVICE_CACHES_MEMORY) gets every alloc
// and free passed straight through, still counted against the limit.
#pragma once

#include <strata/plugin/strata_plugin.h>
#include <strata/memory.hpp>

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

  /// Returns a buffer of at least `bytes` for work on `stream`; *out_bytes
  /// is the block size.
  strata_buffer allocate(size_t bytes, size_t* out_bytes, strata_stream stream);
  /// Gives a block back; `stream` is the stream that last used it.
  void release(strata_buffer buffer, size_t bytes, strata_stream stream);
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
  struct CachedBlock {
    strata_buffer buffer;
    strata_stream stream;       // last used on
    strata_event ready = nullptr;  // recorded on `stream` when another stream asked
  };
  strata_buffer device_alloc(size_t bytes, strata_stream stream);  // called with mutex_ held
  /// A block of `blocks` (one size) usable on `stream`, or nullptr: one of
  /// that stream, or another stream's whose event completed.
  strata_buffer take_cached_locked(std::vector<CachedBlock>& blocks, strata_stream stream);
  void release_cache_locked();

  DeviceRecord& device_;
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<CachedBlock>> free_blocks_;
  bool caching_ = true;
  std::optional<uint64_t> limit_;
  uint64_t live_bytes_ = 0;
  uint64_t cached_bytes_ = 0;
  uint64_t peak_bytes_ = 0;
  uint64_t device_allocations_ = 0;
};

}  // namespace strata::detail
