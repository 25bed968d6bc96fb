// entry_memory.cpp — the memory entry points: alloc, free, memory_info, memory_trim, memory_stats.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <strata/plugin/strata_plugin.hpp>

#include "entry_points.hpp"

namespace strata::vulkan {

using plugin::fail;

namespace {

/// Submits what other streams of `d` have recorded (their freed buffers then
/// become available); streams busy in another thread are skipped.
bool flush_other_streams(Device& d, const Stream& mine) {
  bool flushed = false;
  std::lock_guard lock(d.streams_mutex);
  for (Stream* s : d.streams) {
    if (s == &mine) continue;
    std::unique_lock stream_lock(s->mutex(), std::try_to_lock);
    if (!stream_lock.owns_lock() || !s->has_recorded()) continue;
    strata_error ignored{sizeof(strata_error), {}};
    flushed |= s->flush(&ignored) == STRATA_OK;
  }
  return flushed;
}

}  // namespace

strata_status State::alloc(Device& d, strata_alloc_args& a) {
  if (strata_status s = d.check_lost(a.error); s != STRATA_OK) return s;
  a.buffer = nullptr;
  a.host_pointer = nullptr;
  Buffer* b = nullptr;
  const auto kind = raw(a.kind);
  if (kind == STRATA_MEMORY_PINNED_HOST) {
    // Host-visible, coherent, persistently mapped staging memory.
    if (strata_status s = d.staging->allocate(a.bytes, &b, a.error); s != STRATA_OK) return s;
    a.buffer = reinterpret_cast<strata_buffer>(b);
    a.host_pointer = b->host();
    return STRATA_OK;
  }
  if (kind != STRATA_MEMORY_DEVICE) {
    return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: alloc: unknown memory kind %d", d.id().c_str(),
                static_cast<int>(kind));
  }
  Stream& s = stream_of(d, a.stream);
  std::lock_guard lock(s.mutex());
  b = s.take_freed(a.bytes);
  if (b == nullptr) {
    strata_status st = d.memory->allocate(a.bytes, &b, a.error);
    if (st == STRATA_ERROR_OUT_OF_MEMORY) {
      // Buffers freed while a batch was recording wait for its submission:
      // submit this stream's batch, then the other streams', and retry.
      strata_error ignored{sizeof(strata_error), {}};
      if (s.has_recorded() && s.flush(&ignored) == STRATA_OK) st = d.memory->allocate(a.bytes, &b, a.error);
      if (st == STRATA_ERROR_OUT_OF_MEMORY && flush_other_streams(d, s))
        st = d.memory->allocate(a.bytes, &b, a.error);
    }
    if (st != STRATA_OK) return st;
  }
  d.count_alloc(b->reserved);
  a.buffer = reinterpret_cast<strata_buffer>(b);
  return STRATA_OK;
}

strata_status State::free(Device& d, strata_alloc_args& a) {
  auto* b = reinterpret_cast<Buffer*>(a.buffer);
  if (b == nullptr || b->magic != Buffer::kMagic) return STRATA_OK;
  if (b->pool == d.memory.get()) d.live_bytes.fetch_sub(b->reserved, std::memory_order_relaxed);
  if (d.is_lost.load()) {
    b->pool->release(b);  // nothing will run any more
    return STRATA_OK;
  }
  Stream& s = stream_of(d, a.stream);
  std::lock_guard lock(s.mutex());
  s.free_buffer(b);  // out of host memory while queueing it: the range is leaked
  return STRATA_OK;
}

Buffer* checked(strata_buffer handle, size_t offset, size_t bytes, const Device& d, const char* what,
                strata_error* error) {
  Buffer* b = reinterpret_cast<Buffer*>(handle);
  if (b == nullptr || b->magic != Buffer::kMagic) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: not a buffer of this plugin", d.id().c_str(), what);
    return nullptr;
  }
  if (offset > b->size || bytes > b->size - offset) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s of %zu bytes at offset %zu exceeds the buffer (%llu bytes)",
         d.id().c_str(), what, bytes, offset, static_cast<unsigned long long>(b->size));
    return nullptr;
  }
  return b;
}

strata_status State::memory_info(Device& d, strata_memory_args& a) {
  const uint32_t heap = d.memory_properties.memoryTypes[d.memory_type].heapIndex;
  const uint64_t total = d.memory_properties.memoryHeaps[heap].size;
  a.total_bytes = total;
  if (d.has_memory_budget) {
    // VK_EXT_memory_budget: the driver's estimate for this process,
    // everything else on the device included.
    VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{};
    budget.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT;
    VkPhysicalDeviceMemoryProperties2 mp{};
    mp.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2;
    mp.pNext = &budget;
    d.state->api.vkGetPhysicalDeviceMemoryProperties2(d.physical, &mp);
    const uint64_t limit = std::min<uint64_t>(budget.heapBudget[heap], total);
    a.free_bytes = limit > budget.heapUsage[heap] ? limit - budget.heapUsage[heap] : 0;
    return STRATA_OK;
  }
  // The heap less what this plugin holds from it.
  uint64_t held = d.memory->stats().held;
  if (d.memory_properties.memoryTypes[d.staging_type].heapIndex == heap) held += d.staging->stats().held;
  a.free_bytes = total > held ? total - held : 0;
  return STRATA_OK;
}

strata_status State::memory_trim(Device& d, strata_memory_args& a) {
  // Empty blocks go back to the driver once the work submitted before
  // now has completed (at once when it has, else at a later call).
  d.memory->trim();
  d.staging->trim();
  return STRATA_OK;
}

strata_status State::memory_stats(Device& d, strata_memory_args& a) {
  const BlockAllocator::Stats st = d.memory->stats();
  a.bytes_in_use = d.live_bytes.load(std::memory_order_relaxed);
  a.peak_bytes_in_use = d.peak_bytes.load(std::memory_order_relaxed);
  a.bytes_reserved = st.held;
  a.allocations = st.allocations;
  return STRATA_OK;
}

}  // namespace strata::vulkan
