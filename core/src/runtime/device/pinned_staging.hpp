// pinned_staging.hpp — copies between host and device staged through pinned
// memory, for devices that ask for it (STRATA_DEVICE_STAGE_PINNED,
// strata_plugin.h section 4).
//
// Host to device: the bytes go into a pinned host block allocated on the
// device (PINNED_HOST), an asynchronous copy from the block is issued with a
// `done` event, and the call returns — the caller may reuse its memory at
// once, the device reads the block later. A block is reused only after its
// event has completed, so the copy's source stays intact until the device
// has read it.
//
// Device to host: asynchronous copies into pinned blocks, in chunks of at
// most kChunkBytes with two in flight, so the device fills one chunk while
// the host copies the previous one out; the host reads a block only after
// the chunk's `done` event has completed.
#pragma once

#include <strata/plugin/strata_plugin.h>

#include <cstddef>
#include <list>
#include <mutex>

namespace strata::detail {

struct DeviceRecord;

class PinnedStaging {
 public:
  /// Copies below this size go synchronously (an event costs more than they do).
  static constexpr size_t kMinBytes = size_t{64} << 10;
  /// The most pinned memory held per device; beyond it a copy waits for the
  /// device to finish the earlier ones.
  static constexpr size_t kMaxHeldBytes = size_t{256} << 20;
  /// A copy to the host moves in chunks of at most this size.
  static constexpr size_t kChunkBytes = size_t{8} << 20;

  explicit PinnedStaging(DeviceRecord& device) : device_(device) {}
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  /// Set by the loader for a device with STAGE_PINNED, streams and event_query.
  bool enabled = false;

  /// Stages `bytes` from `src` into `dst` at `dst_offset` (see above).
  /// Returns false, having done nothing, when no pinned block could be had;
  /// the caller then copies synchronously. Throws what the copy throws.
  bool copy_from_host(strata_buffer dst, size_t dst_offset, const void* src, size_t bytes);
  /// Copies `bytes` at `src_offset` of `src` into `dst` through pinned
  /// blocks (see above); returns when `dst` holds them. Returns false, having
  /// done nothing, when no pinned block could be had. Throws what the copy
  /// throws; a chunk still in flight then keeps its block until it completes.
  bool copy_to_host(void* dst, strata_buffer src, size_t src_offset, size_t bytes);
  /// Returns the blocks no copy uses to the plugin; the bytes returned.
  size_t trim();

  struct Stats {
    size_t held_bytes = 0;
    size_t blocks = 0;
    size_t staged_copies = 0;  // in either direction
  };
  Stats stats() const;

 private:
  struct Block {
    strata_buffer buffer = nullptr;
    void* host = nullptr;
    size_t bytes = 0;
    strata_event pending = nullptr;  // the copy using it; nullptr when free
  };
  /// Issues the asynchronous copy of one chunk to the host into `block`,
  /// which then is pending on the chunk's event. Requires mutex_.
  void issue_read_locked(Block& block, strata_buffer src, size_t src_offset, size_t bytes);
  /// Frees the blocks whose copies completed. Requires mutex_.
  void reclaim_locked();
  /// A free block of at least `bytes`, or nullptr. Requires mutex_.
  Block* take_locked(size_t bytes);
  /// A block for `bytes`: a free one, else a new one within kMaxHeldBytes
  /// (waiting for the device first when over it); nullptr when none can be
  /// had. Requires mutex_.
  Block* acquire_locked(size_t bytes);
  /// Returns idle blocks to the plugin until at most `keep` bytes are held;
  /// the bytes returned. Requires mutex_.
  size_t free_idle_locked(size_t keep);

  DeviceRecord& device_;
  mutable std::mutex mutex_;
  std::list<Block> blocks_;  // stable addresses: a copy holds two blocks at once
  size_t held_ = 0;
  size_t staged_ = 0;
};

}  // namespace strata::detail
