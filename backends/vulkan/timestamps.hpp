// timestamps.hpp — the timestamp queries behind STRATA_EVENT_TIMING events and event_elapsed.
#pragma once

#include <strata/plugin/strata_plugin.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "vk_api.hpp"

namespace strata::vulkan {

struct Device;

/// One timestamp query: a query of one of the device's pools.
struct TimestampSlot {
  VkQueryPool pool = VK_NULL_HANDLE;
  uint32_t query = 0;
};

/// A device's timestamp queries: pools of 256 queries, created as TIMING
/// events ask for them, and a free list of their queries. Only a device
/// whose queue family has timestamps (timestampValidBits > 0) has one.
///
/// Thread-safe (event_create and event_destroy come from any thread). A
/// released query may be handed out again while its last write is still in
/// flight: the next owner resets and writes it in a later submission, and
/// Vulkan runs query commands on one query of one queue in submission order.
class Timestamps {
 public:
  explicit Timestamps(Device& device) : device_(device) {}
  /// Destroys the pools; the device must be idle (close_device).
  ~Timestamps();
  Timestamps(const Timestamps&) = delete;
  Timestamps& operator=(const Timestamps&) = delete;

  /// A free query, creating a pool when none is left.
  strata_status acquire(TimestampSlot* slot, strata_error* error);
  void release(TimestampSlot slot);
  /// The ticks a submitted, written query holds (waits for it), not masked.
  strata_status read(TimestampSlot slot, uint64_t* ticks, strata_error* error);

 private:
  Device& device_;
  std::mutex mutex_;
  std::vector<VkQueryPool> pools_;
  std::vector<TimestampSlot> free_;
};

}  // namespace strata::vulkan
