// pinned_staging.cpp — see pinned_staging.hpp.
#include "runtime/device/pinned_staging.hpp"

#include "runtime/device/device_record.hpp"

#include <strata/error.hpp>

#include <bit>
#include <cstring>

namespace strata::detail {

void PinnedStaging::reclaim_locked() {
  for (Block& b : blocks_) {
    if (b.pending != nullptr && device_.event_done(b.pending)) {
      device_.destroy_event(b.pending);
      b.pending = nullptr;
    }
  }
}

PinnedStaging::Block* PinnedStaging::take_locked(size_t bytes) {
  Block* best = nullptr;
  for (Block& b : blocks_) {
    if (b.pending == nullptr && b.bytes >= bytes && (best == nullptr || b.bytes < best->bytes)) best = &b;
  }
  return best;
}

size_t PinnedStaging::free_idle_locked(size_t keep) {
  size_t freed = 0;
  for (auto it = blocks_.begin(); it != blocks_.end() && held_ > keep;) {
    if (it->pending != nullptr) {
      ++it;
      continue;
    }
    device_.free(it->buffer, device_.stream, STRATA_MEMORY_PINNED_HOST);
    freed += it->bytes;
    held_ -= it->bytes;
    it = blocks_.erase(it);
  }
  return freed;
}

PinnedStaging::Block* PinnedStaging::acquire_locked(size_t bytes) {
  reclaim_locked();
  if (Block* free_block = take_locked(bytes)) return free_block;
  const size_t size = std::bit_ceil(std::max(bytes, kMinBytes));
  if (held_ + size > kMaxHeldBytes) {
    // Too much in flight: wait for the device, then reuse or give back what is idle.
    device_.synchronize();
    reclaim_locked();
    if (Block* free_block = take_locked(bytes)) return free_block;
    free_idle_locked(kMaxHeldBytes - std::min(size, kMaxHeldBytes));
    if (held_ + size > kMaxHeldBytes) return nullptr;
  }
  Block fresh;
  try {
    fresh.buffer = device_.alloc(size, device_.stream, STRATA_MEMORY_PINNED_HOST, &fresh.host);
  } catch (const OutOfMemoryError&) {
    return nullptr;  // no pinned memory to be had: the caller copies synchronously
  }
  if (fresh.host == nullptr) {
    device_.free(fresh.buffer, device_.stream, STRATA_MEMORY_PINNED_HOST);
    throw Error(device_.id + ": alloc of pinned host memory returned no host_pointer");
  }
  fresh.bytes = size;
  held_ += size;
  blocks_.push_back(fresh);
  return &blocks_.back();
}

bool PinnedStaging::copy_from_host(strata_buffer dst, size_t dst_offset, const void* src, size_t bytes) {
  std::lock_guard lock(mutex_);
  Block* block = acquire_locked(bytes);
  if (block == nullptr) return false;
  std::memcpy(block->host, src, bytes);
  strata_event done = device_.create_event();
  try {
    device_.copy_async_from_host(dst, dst_offset, block->host, bytes, done);
  } catch (...) {
    device_.destroy_event(done);
    throw;
  }
  block->pending = done;
  ++staged_;
  return true;
}

void PinnedStaging::issue_read_locked(Block& block, strata_buffer src, size_t src_offset, size_t bytes) {
  strata_event done = device_.create_event();
  try {
    device_.copy_async_to_host(block.host, src, src_offset, bytes, done);
  } catch (...) {
    device_.destroy_event(done);
    throw;
  }
  block.pending = done;
}

bool PinnedStaging::copy_to_host(void* dst, strata_buffer src, size_t src_offset, size_t bytes) {
  std::lock_guard lock(mutex_);
  const size_t chunk = std::min(bytes, kChunkBytes);
  const size_t chunks = (bytes + chunk - 1) / chunk;
  // Two blocks in flight: the device fills one while the host empties the other.
  Block* ring[2] = {acquire_locked(chunk), nullptr};
  if (ring[0] == nullptr) return false;
  issue_read_locked(*ring[0], src, src_offset, chunk);
  if (chunks > 1) {
    ring[1] = acquire_locked(chunk);  // ring[0] is pending, so this is another block
    if (ring[1] == nullptr) ring[1] = ring[0];  // no second block: one chunk at a time
  }
  auto* out = static_cast<unsigned char*>(dst);
  for (size_t k = 0; k < chunks; ++k) {
    Block& block = *ring[k % 2];
    const size_t at = k * chunk;
    const size_t n = std::min(chunk, bytes - at);
    if (k + 1 < chunks && ring[(k + 1) % 2] != &block) {
      issue_read_locked(*ring[(k + 1) % 2], src, src_offset + at + chunk, std::min(chunk, bytes - at - chunk));
    }
    device_.wait_event(block.pending);
    std::memcpy(out + at, block.host, n);
    device_.destroy_event(block.pending);
    block.pending = nullptr;
    if (k + 1 < chunks && ring[(k + 1) % 2] == &block) {
      issue_read_locked(block, src, src_offset + at + chunk, std::min(chunk, bytes - at - chunk));
    }
  }
  ++staged_;
  return true;
}

size_t PinnedStaging::trim() {
  std::lock_guard lock(mutex_);
  if (blocks_.empty() || device_.lost()) return 0;
  reclaim_locked();
  return free_idle_locked(0);
}

PinnedStaging::Stats PinnedStaging::stats() const {
  std::lock_guard lock(mutex_);
  return {held_, blocks_.size(), staged_};
}

}  // namespace strata::detail
