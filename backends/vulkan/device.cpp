// device.cpp — devices: lookup, submission and the timeline, the deferred-error record, opening and closing
// (see device.hpp).
#include "device.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <strata/plugin/strata_plugin.hpp>

#include "kernels.hpp"

namespace strata::vulkan {

using plugin::fail;

// ---- State -------------------------------------------------------------------

void State::log(strata_log_level level, const std::string& message) const {
  plugin::log(host, level, kPluginName, message.c_str());
}

Device* device_of(strata_plugin_state state, int32_t device, strata_error* error) {
  State* s = as_state(state);
  if (s == nullptr || device < 0 || device >= static_cast<int32_t>(s->devices.size())) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "vulkan: no device %d (there are %d)", device,
         s == nullptr ? 0 : static_cast<int>(s->devices.size()));
    return nullptr;
  }
  return s->devices[static_cast<size_t>(device)].get();
}

Stream& stream_of(Device& device, strata_stream stream) {
  return stream == nullptr ? *device.default_stream : *reinterpret_cast<Stream*>(stream);
}

// ---- Device: submission and the timeline ----------------------------------------

strata_status Device::check_lost(strata_error* error) {
  if (!is_lost.load(std::memory_order_acquire)) return STRATA_OK;
  std::lock_guard lock(lost_mutex);
  return fail(error, STRATA_ERROR_DEVICE_LOST, "%s: the device failed earlier and is unusable: %s", id().c_str(),
              lost.c_str());
}

void Device::mark_lost(const std::string& why) {
  {
    std::lock_guard lock(lost_mutex);
    if (lost.empty()) lost = why;
    is_lost.store(true, std::memory_order_release);
  }
  state->log(STRATA_LOG_ERROR, id() + ": " + why);
}

void Device::count_alloc(uint64_t bytes) {
  const uint64_t now = live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

strata_status Device::report_deferred(strata_error* error) {
  if (deferred == nullptr) return STRATA_OK;
  auto* record = reinterpret_cast<DeferredRecord*>(deferred->host());
  std::atomic_ref<uint32_t> state_word(record->state);
  if (state_word.load(std::memory_order_acquire) != 2u) return STRATA_OK;  // none, or still being written
  DeferredRecord r{};
  {
    std::lock_guard lock(deferred_mutex);
    if (state_word.load(std::memory_order_acquire) != 2u) return STRATA_OK;  // another thread reported it
    r = *record;
    state_word.store(0u, std::memory_order_release);  // later submissions see the record cleared
  }
  const OpSpec* spec = op_spec_by_id(r.site);
  const char* op = spec != nullptr ? spec->op : "a kernel";
  if (r.what == ERR_DIV_ZERO) {
    return fail(error, STRATA_ERROR_DEFERRED, "%s on %s: integer division by zero (reported at synchronisation)", op,
                id().c_str());
  }
  const auto value = static_cast<int64_t>((uint64_t{r.value_hi} << 32) | r.value_lo);
  return fail(error, STRATA_ERROR_DEFERRED,
              "%s on %s: index %lld out of range [0, %u) along dim %u (reported at synchronisation)", op, id().c_str(),
              static_cast<long long>(value), r.bound, r.dim);
}

strata_status Device::submit(VkCommandBuffer commands, uint64_t* seq, strata_error* error) {
  if (strata_status s = check_lost(error); s != STRATA_OK) return s;
  std::lock_guard lock(queue_mutex);
  const uint64_t value = last_submitted.load(std::memory_order_relaxed) + 1;
  VkTimelineSemaphoreSubmitInfo tsi{};
  tsi.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO;
  tsi.signalSemaphoreValueCount = 1;
  tsi.pSignalSemaphoreValues = &value;
  VkSubmitInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  si.pNext = &tsi;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &commands;
  si.signalSemaphoreCount = 1;
  si.pSignalSemaphores = &timeline;
  const VkResult r = fn.vkQueueSubmit(queue, 1, &si, VK_NULL_HANDLE);
  if (r != VK_SUCCESS) {
    const std::string why = std::string("vkQueueSubmit failed: ") + result_name(r);
    mark_lost(why);
    return fail(error, STRATA_ERROR_DEVICE_LOST, "%s: %s", id().c_str(), why.c_str());
  }
  last_submitted.store(value, std::memory_order_release);
  *seq = value;
  return STRATA_OK;
}

uint64_t Device::poll() {
  uint64_t value = 0;
  if (fn.vkGetSemaphoreCounterValue(device, timeline, &value) != VK_SUCCESS) return completed.load();
  uint64_t seen = completed.load();
  while (value > seen && !completed.compare_exchange_weak(seen, value)) {
  }
  return std::max(value, seen);
}

strata_status Device::wait(uint64_t seq, strata_error* error) {
  if (seq == 0 || completed.load() >= seq || poll() >= seq) return STRATA_OK;
  VkSemaphoreWaitInfo wi{};
  wi.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
  wi.semaphoreCount = 1;
  wi.pSemaphores = &timeline;
  wi.pValues = &seq;
  for (;;) {
    const VkResult r = fn.vkWaitSemaphores(device, &wi, 10'000'000'000ull);
    if (r == VK_SUCCESS) break;
    if (r == VK_TIMEOUT) {
      if (strata_status s = check_lost(error); s != STRATA_OK) return s;
      continue;
    }
    const std::string why = std::string("waiting for submitted work failed: ") + result_name(r);
    mark_lost(why);
    return fail(error, STRATA_ERROR_DEVICE_LOST, "%s: %s", id().c_str(), why.c_str());
  }
  poll();
  return STRATA_OK;
}

// ---- Opening and closing --------------------------------------------------------

strata_status open_device(Device& d, strata_error* error) {
  const InstanceApi& api = d.state->api;
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{};
  qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  qci.queueFamilyIndex = d.queue_family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;

  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  f12.bufferDeviceAddress = VK_TRUE;
  f12.timelineSemaphore = VK_TRUE;
  f12.storageBuffer8BitAccess = d.has_storage8 ? VK_TRUE : VK_FALSE;
  VkPhysicalDeviceVulkan11Features f11{};
  f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  f11.pNext = &f12;
  f11.storageBuffer16BitAccess = d.has_storage16 ? VK_TRUE : VK_FALSE;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &f11;
  features.features.shaderInt64 = d.has_int64 ? VK_TRUE : VK_FALSE;

  VkDeviceCreateInfo dci{};
  dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  dci.pNext = &features;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  VkResult r = api.vkCreateDevice(d.physical, &dci, nullptr, &d.device);
  if (r != VK_SUCCESS) {
    d.device = VK_NULL_HANDLE;
    return fail(error, STRATA_ERROR_NO_DEVICE, "%s (%s): vkCreateDevice failed: %s", d.id().c_str(),
                d.properties.deviceName, result_name(r));
  }
  std::string why;
  if (!load_device_functions(api, d.device, d.fn, &why)) {
    return fail(error, STRATA_ERROR_NO_DEVICE, "%s: %s", d.id().c_str(), why.c_str());
  }
  d.fn.vkGetDeviceQueue(d.device, d.queue_family, 0, &d.queue);

  VkSemaphoreTypeCreateInfo sti{};
  sti.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO;
  sti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  sti.initialValue = 0;
  VkSemaphoreCreateInfo sci{};
  sci.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO;
  sci.pNext = &sti;
  r = d.fn.vkCreateSemaphore(d.device, &sci, nullptr, &d.timeline);
  if (r != VK_SUCCESS) {
    return fail(error, STRATA_ERROR_NO_DEVICE, "%s: creating a timeline semaphore failed: %s", d.id().c_str(),
                result_name(r));
  }
  const Options& o = d.state->options;
  d.memory = std::make_unique<BlockAllocator>(d, d.memory_type, d.direct, o.block_bytes, "device memory");
  d.staging = std::make_unique<BlockAllocator>(d, d.staging_type, true, std::min<uint64_t>(o.block_bytes, 16ull << 20),
                                               "host-visible staging memory");
  d.pipelines = std::make_unique<Pipelines>(d);
  std::string cache_file;
  if (!o.pipeline_cache_dir.empty()) {
    char name[96];
    std::snprintf(name, sizeof(name), "vulkan-%04x-%04x-%08x.pipeline-cache", d.properties.vendorID,
                  d.properties.deviceID, d.properties.driverVersion);
    cache_file = (std::filesystem::path(o.pipeline_cache_dir) / name).string();
  }
  if (strata_status s = d.pipelines->init(cache_file, error); s != STRATA_OK) return s;
  Buffer* record = nullptr;
  if (strata_status s = d.staging->allocate(sizeof(DeferredRecord), &record, error); s != STRATA_OK) return s;
  std::memset(record->host(), 0, sizeof(DeferredRecord));
  d.deferred = record;
  if (d.timestamp_bits > 0) d.timestamps = std::make_unique<Timestamps>(d);  // pools come with the first TIMING event
  d.default_stream = std::make_unique<Stream>(d);
  std::lock_guard lock(d.streams_mutex);
  d.streams.push_back(d.default_stream.get());
  return STRATA_OK;
}

void close_device(Device& d) {
  if (d.device == VK_NULL_HANDLE) return;
  // Work recorded but never submitted is dropped, not submitted now: nobody
  // can read its results any more, and at a program's exit the driver may
  // already be torn down (the host shuts plugins down from an exit handler
  // registered before the driver's own ran: lavapipe would JIT-compile the
  // dispatch with an LLVM whose statics are gone, and crash or hang).
  {
    std::lock_guard lock(d.streams_mutex);
    for (Stream* s : d.streams) {
      std::lock_guard stream_lock(s->mutex());
      s->abandon_recorded();
    }
  }
  {
    // The function table may be partial when open_device failed early.
    std::lock_guard lock(d.lost_mutex);
    if (d.lost.empty() && d.fn.vkDeviceWaitIdle != nullptr) d.fn.vkDeviceWaitIdle(d.device);
  }
  d.completed = d.last_submitted.load();
  if (d.pipelines) d.pipelines->save();
  std::vector<Stream*> others;
  {
    std::lock_guard lock(d.streams_mutex);
    for (Stream* s : d.streams) {
      if (s != d.default_stream.get()) others.push_back(s);
    }
    d.streams.clear();
  }
  // Streams the core created and never destroyed: their pools die with the device.
  for (Stream* s : others) delete s;
  d.default_stream.reset();
  d.timestamps.reset();  // the device is idle: no query is in use
  if (d.deferred != nullptr) d.staging->release(d.deferred);
  d.deferred = nullptr;
  d.pipelines.reset();
  d.staging.reset();
  d.memory.reset();
  if (d.timeline != VK_NULL_HANDLE) d.fn.vkDestroySemaphore(d.device, d.timeline, nullptr);
  if (d.fn.vkDestroyDevice != nullptr) d.fn.vkDestroyDevice(d.device, nullptr);
  d.device = VK_NULL_HANDLE;
}

}  // namespace strata::vulkan
