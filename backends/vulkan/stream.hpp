// stream.hpp — a stream: batches of recorded commands submitted to the device's one queue.
#pragma once

#include <strata/plugin/strata_plugin.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "memory.hpp"
#include "vk_api.hpp"

namespace strata::vulkan {

struct Device;

/// One submission: a command buffer, the timeline value that marks its end,
/// and what may be reused once it is submitted or has completed.
struct Batch {
  VkCommandBuffer commands = VK_NULL_HANDLE;
  uint64_t seq = 0;  // 0 while recording
  uint32_t recorded = 0;
  std::vector<Buffer*> staging;  // host-visible ranges (parameters, uploads) released on completion
  std::vector<Buffer*> frees;    // buffers freed on the stream, released once the batch is submitted
  Buffer* arena = nullptr;       // current parameter block
  VkDeviceSize arena_used = 0;
};

/// A queue of work on one device. Every stream submits to the device's one
/// queue; ordering between streams is submission order (each batch begins
/// with a barrier on all earlier work), so events only need to flush.
///
/// Locking (README.md, "Threading"): the host serialises every call naming
/// a stream, but stream_synchronize (and stream_destroy, the OOM path of
/// another stream's alloc, close_device) reach a stream from other threads:
/// mutex() guards the recording batch against them. It is uncontended in
/// the common case, one lock per kernel.
class Stream {
 public:
  explicit Stream(Device& device);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  std::mutex& mutex() { return mutex_; }

  // The calls below require mutex() held.

  /// Copies `bytes` of kernel parameters into this batch's parameter arena;
  /// *address receives their device address.
  strata_status upload_params(const void* data, size_t bytes, VkDeviceAddress* address, strata_error* error);
  /// Records a dispatch followed by a barrier.
  strata_status dispatch(VkPipeline pipeline, const void* push, uint32_t push_bytes, uint32_t gx, uint32_t gy,
                         uint32_t gz, strata_error* error);
  /// Records a buffer copy followed by a barrier.
  strata_status copy(VkBuffer src, VkDeviceSize src_offset, VkBuffer dst, VkDeviceSize dst_offset, VkDeviceSize bytes,
                     strata_error* error);
  /// Records an upload of host bytes through a staging range (asynchronous).
  strata_status upload(const void* src, size_t bytes, const Buffer& dst, VkDeviceSize dst_offset, strata_error* error);
  /// Records a reset and a write of timestamp `query` of `pool`, taken once
  /// everything recorded or submitted before it has completed (bottom of
  /// pipe). Counts as a command but never submits: the caller flushes.
  strata_status write_timestamp(VkQueryPool pool, uint32_t query, strata_error* error);
  /// Submits the recorded batch, if any. Returns its timeline value in *seq.
  strata_status flush(strata_error* error, uint64_t* seq = nullptr);
  /// flush() and wait until everything submitted from this stream is done.
  strata_status synchronize(strata_error* error);
  /// Drops the batch being recorded without submitting it, releasing what
  /// it held (close_device: the device is going away, and nobody can read
  /// what the batch would have computed).
  void abandon_recorded();
  /// Nothing recorded and nothing of this stream still running.
  bool idle();
  /// Timeline value of the last submission from this stream.
  uint64_t last_seq() const { return last_seq_; }
  bool has_recorded() const { return current_ != nullptr && current_->recorded > 0; }
  /// Keeps `buffer` (a staging range) alive until everything recorded or
  /// submitted on this stream so far has completed, then releases it.
  void retire_with_batch(Buffer* buffer);
  /// A buffer freed on this stream (stream-ordered free): released to its
  /// pool at once when nothing is recorded, else when the batch that may
  /// still use it is submitted. Until then only this stream may reuse it.
  void free_buffer(Buffer* buffer);
  /// A buffer freed on this stream whose reserved size suits `bytes`, still
  /// waiting for its batch to be submitted: later work on this stream is
  /// ordered after its earlier uses, so it may be reused at once. nullptr
  /// when there is none.
  Buffer* take_freed(size_t bytes);

 private:
  strata_status open(strata_error* error);
  void reclaim();  // recycles completed batches
  void release_frees(Batch& batch);

  Device& device_;
  std::mutex mutex_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  Batch* current_ = nullptr;
  std::deque<Batch*> in_flight_;
  std::vector<Batch*> spare_;
  uint64_t last_seq_ = 0;
};

}  // namespace strata::vulkan
