// timestamps.cpp — timestamp query pools and their free list (see timestamps.hpp).
#include "timestamps.hpp"

#include <strata/plugin/strata_plugin.hpp>
#include <string>

#include "device.hpp"

namespace strata::vulkan {

using plugin::fail;

namespace {
constexpr uint32_t kQueriesPerPool = 256;
}  // namespace

Timestamps::~Timestamps() {
  for (VkQueryPool pool : pools_) device_.fn.vkDestroyQueryPool(device_.device, pool, nullptr);
}

strata_status Timestamps::acquire(TimestampSlot* slot, strata_error* error) {
  std::lock_guard lock(mutex_);
  if (free_.empty()) {
    VkQueryPoolCreateInfo qci{};
    qci.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
    qci.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qci.queryCount = kQueriesPerPool;
    VkQueryPool pool = VK_NULL_HANDLE;
    const VkResult r = device_.fn.vkCreateQueryPool(device_.device, &qci, nullptr, &pool);
    if (r != VK_SUCCESS) {
      return fail(error,
                  r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? STRATA_ERROR_OUT_OF_MEMORY
                                                                                         : STRATA_ERROR_DEVICE,
                  "%s: event_create: vkCreateQueryPool (%u timestamp queries) failed: %s", device_.id().c_str(),
                  kQueriesPerPool, result_name(r));
    }
    pools_.push_back(pool);
    // Handed out from the back: lowest query first.
    for (uint32_t q = kQueriesPerPool; q-- > 0;) free_.push_back({pool, q});
  }
  *slot = free_.back();
  free_.pop_back();
  return STRATA_OK;
}

void Timestamps::release(TimestampSlot slot) {
  std::lock_guard lock(mutex_);
  free_.push_back(slot);
}

strata_status Timestamps::read(TimestampSlot slot, uint64_t* ticks, strata_error* error) {
  const VkResult r =
      device_.fn.vkGetQueryPoolResults(device_.device, slot.pool, slot.query, 1, sizeof(uint64_t), ticks,
                                       sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
  if (r == VK_SUCCESS) return STRATA_OK;
  if (r == VK_ERROR_DEVICE_LOST) {
    const std::string why = std::string("reading a timestamp failed: ") + result_name(r);
    device_.mark_lost(why);
    return fail(error, STRATA_ERROR_DEVICE_LOST, "%s: %s", device_.id().c_str(), why.c_str());
  }
  return fail(error, STRATA_ERROR_DEVICE, "%s: event_elapsed: vkGetQueryPoolResults failed: %s", device_.id().c_str(),
              result_name(r));
}

}  // namespace strata::vulkan
