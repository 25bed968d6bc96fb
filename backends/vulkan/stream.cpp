// stream.cpp — streams: recording commands into batches, submitting them, reclaiming them (see stream.hpp).
#include "stream.hpp"

#include <algorithm>
#include <cstring>
#include <strata/plugin/strata_plugin.hpp>
#include <string>

#include "device.hpp"

namespace strata::vulkan {

using plugin::fail;

namespace {

constexpr VkDeviceSize kArenaBytes = 64 << 10;
constexpr size_t kMaxInFlight = 16;  // submissions per stream before the host waits

constexpr VkPipelineStageFlags kWorkStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;

/// Orders everything recorded (or submitted) before it against everything after.
void full_barrier(const DeviceApi& vk, VkCommandBuffer cb) {
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                     VK_ACCESS_TRANSFER_WRITE_BIT;
  vk.vkCmdPipelineBarrier(cb, kWorkStages, kWorkStages, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

/// Makes the batch's writes visible to the host once the timeline says it is done.
void host_barrier(const DeviceApi& vk, VkCommandBuffer cb) {
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vk.vkCmdPipelineBarrier(cb, kWorkStages, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

}  // namespace

Stream::Stream(Device& device) : device_(device) {}

void Stream::abandon_recorded() {
  if (current_ == nullptr) return;
  release_frees(*current_);
  for (Buffer* b : current_->staging) device_.staging->release(b);
  current_->staging.clear();
  if (current_->arena != nullptr) device_.staging->release(current_->arena);
  current_->arena = nullptr;
  spare_.push_back(current_);  // its command buffer dies with the pool
  current_ = nullptr;
}

Stream::~Stream() {
  strata_error ignored{sizeof(strata_error), {}};
  {
    std::lock_guard lock(mutex_);
    (void)synchronize(&ignored);
    abandon_recorded();
    // Everything in flight is complete after synchronize() unless the device
    // was lost; then the ranges are simply leaked with the device.
    reclaim();
  }
  for (Batch* b : spare_) delete b;
  for (Batch* b : in_flight_) delete b;
  if (pool_ != VK_NULL_HANDLE) device_.fn.vkDestroyCommandPool(device_.device, pool_, nullptr);
}

void Stream::reclaim() {
  if (in_flight_.empty()) return;
  const uint64_t done = device_.poll();
  while (!in_flight_.empty() && in_flight_.front()->seq <= done) {
    Batch* b = in_flight_.front();
    in_flight_.pop_front();
    for (Buffer* s : b->staging) device_.staging->release(s);
    b->staging.clear();
    if (b->arena != nullptr) device_.staging->release(b->arena);
    b->arena = nullptr;
    b->arena_used = 0;
    b->seq = 0;
    b->recorded = 0;
    spare_.push_back(b);
  }
}

strata_status Stream::open(strata_error* error) {
  if (current_ != nullptr) return STRATA_OK;
  if (strata_status s = device_.check_lost(error); s != STRATA_OK) return s;
  const DeviceApi& vk = device_.fn;
  if (pool_ == VK_NULL_HANDLE) {
    VkCommandPoolCreateInfo pci{};
    pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pci.queueFamilyIndex = device_.queue_family;
    const VkResult r = vk.vkCreateCommandPool(device_.device, &pci, nullptr, &pool_);
    if (r != VK_SUCCESS) {
      return fail(error, STRATA_ERROR_DEVICE, "%s: vkCreateCommandPool failed: %s", device_.id().c_str(),
                  result_name(r));
    }
  }
  reclaim();
  if (in_flight_.size() >= kMaxInFlight) {
    if (strata_status s = device_.wait(in_flight_.front()->seq, error); s != STRATA_OK) return s;
    reclaim();
  }
  Batch* b = nullptr;
  if (!spare_.empty()) {
    b = spare_.back();
    spare_.pop_back();
  } else {
    b = new Batch;
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    const VkResult r = vk.vkAllocateCommandBuffers(device_.device, &ai, &b->commands);
    if (r != VK_SUCCESS) {
      delete b;
      return fail(error, STRATA_ERROR_DEVICE, "%s: vkAllocateCommandBuffers failed: %s", device_.id().c_str(),
                  result_name(r));
    }
  }
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  const VkResult r = vk.vkBeginCommandBuffer(b->commands, &bi);  // implicitly resets it
  if (r != VK_SUCCESS) {
    spare_.push_back(b);
    return fail(error, STRATA_ERROR_DEVICE, "%s: vkBeginCommandBuffer failed: %s", device_.id().c_str(),
                result_name(r));
  }
  full_barrier(vk, b->commands);  // after everything submitted earlier, from any stream
  current_ = b;
  return STRATA_OK;
}

strata_status Stream::upload_params(const void* data, size_t bytes, VkDeviceAddress* address, strata_error* error) {
  if (strata_status s = open(error); s != STRATA_OK) return s;
  Batch& b = *current_;
  VkDeviceSize at = (b.arena_used + 15) & ~VkDeviceSize{15};
  if (b.arena == nullptr || at + bytes > b.arena->size) {
    if (b.arena != nullptr) b.staging.push_back(b.arena);  // released with the batch
    b.arena = nullptr;
    b.arena_used = 0;
    at = 0;
    if (strata_status s = device_.staging->allocate(std::max<size_t>(kArenaBytes, bytes), &b.arena, error);
        s != STRATA_OK)
      return s;
  }
  std::memcpy(b.arena->host() + at, data, bytes);
  b.arena_used = at + bytes;
  *address = b.arena->address() + at;
  return STRATA_OK;
}

strata_status Stream::dispatch(VkPipeline pipeline, const void* push, uint32_t push_bytes, uint32_t gx, uint32_t gy,
                               uint32_t gz, strata_error* error) {
  if (strata_status s = open(error); s != STRATA_OK) return s;
  const DeviceApi& vk = device_.fn;
  VkCommandBuffer cb = current_->commands;
  vk.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
  vk.vkCmdPushConstants(cb, device_.pipelines->layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  vk.vkCmdDispatch(cb, gx, gy, gz);
  full_barrier(vk, cb);
  if (++current_->recorded >= device_.state->options.batch_dispatches) return flush(error);
  return STRATA_OK;
}

strata_status Stream::copy(VkBuffer src, VkDeviceSize src_offset, VkBuffer dst, VkDeviceSize dst_offset,
                           VkDeviceSize bytes, strata_error* error) {
  if (bytes == 0) return STRATA_OK;
  if (strata_status s = open(error); s != STRATA_OK) return s;
  VkBufferCopy region{src_offset, dst_offset, bytes};
  device_.fn.vkCmdCopyBuffer(current_->commands, src, dst, 1, &region);
  full_barrier(device_.fn, current_->commands);
  if (++current_->recorded >= device_.state->options.batch_dispatches) return flush(error);
  return STRATA_OK;
}

strata_status Stream::upload(const void* src, size_t bytes, const Buffer& dst, VkDeviceSize dst_offset,
                             strata_error* error) {
  if (strata_status s = open(error); s != STRATA_OK) return s;
  Buffer* staging = nullptr;
  if (strata_status s = device_.staging->allocate(bytes, &staging, error); s != STRATA_OK) return s;
  std::memcpy(staging->host(), src, bytes);
  current_->staging.push_back(staging);
  return copy(staging->vk_buffer(), staging->offset, dst.vk_buffer(), dst.offset + dst_offset, bytes, error);
}

strata_status Stream::write_timestamp(VkQueryPool pool, uint32_t query, strata_error* error) {
  if (strata_status s = open(error); s != STRATA_OK) return s;
  VkCommandBuffer cb = current_->commands;
  device_.fn.vkCmdResetQueryPool(cb, pool, query, 1);
  device_.fn.vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool, query);
  ++current_->recorded;
  return STRATA_OK;
}

void Stream::release_frees(Batch& batch) {
  for (Buffer* f : batch.frees) f->pool->release(f);
  batch.frees.clear();
}

void Stream::free_buffer(Buffer* buffer) {
  if (has_recorded()) {
    current_->frees.push_back(buffer);  // the batch may still use it
  } else {
    buffer->pool->release(buffer);  // every earlier use is submitted
  }
}

Buffer* Stream::take_freed(size_t bytes) {
  if (current_ == nullptr || current_->frees.empty()) return nullptr;
  const VkDeviceSize want =
      std::max<VkDeviceSize>(kBufferAlignment, (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment);
  auto& frees = current_->frees;
  for (size_t k = frees.size(); k-- > 0;) {
    Buffer* b = frees[k];
    if (b->pool != device_.memory.get() || b->reserved < want || b->reserved - want > want / 4) continue;
    frees[k] = frees.back();
    frees.pop_back();
    b->size = bytes;
    return b;
  }
  return nullptr;
}

void Stream::retire_with_batch(Buffer* buffer) {
  // The command that used `buffer` may have filled the batch and been flushed
  // with it: then the last submitted batch is the one to wait for.
  if (current_ != nullptr) {
    current_->staging.push_back(buffer);
  } else if (!in_flight_.empty()) {
    in_flight_.back()->staging.push_back(buffer);
  } else {
    device_.staging->release(buffer);
  }
}

strata_status Stream::flush(strata_error* error, uint64_t* seq) {
  if (current_ == nullptr || current_->recorded == 0) {
    if (seq != nullptr) *seq = last_seq_;
    return STRATA_OK;
  }
  const DeviceApi& vk = device_.fn;
  Batch* b = current_;
  current_ = nullptr;
  host_barrier(vk, b->commands);
  VkResult r = vk.vkEndCommandBuffer(b->commands);
  uint64_t value = 0;
  strata_status s = STRATA_OK;
  if (r != VK_SUCCESS) {
    // The batch's recorded work is lost: later results would silently miss
    // it, so the device is unusable from here on.
    const std::string why = std::string("vkEndCommandBuffer failed: ") + result_name(r);
    device_.mark_lost(why);
    s = fail(error, STRATA_ERROR_DEVICE_LOST, "%s: %s", device_.id().c_str(), why.c_str());
  } else {
    s = device_.submit(b->commands, &value, error);
  }
  // Submitted (or never to run): what was freed during the batch may go to
  // anyone now, since later submissions are ordered after this one.
  release_frees(*b);
  if (s != STRATA_OK) {
    // Nothing of the batch will run: its staging ranges can go back now.
    for (Buffer* st : b->staging) device_.staging->release(st);
    b->staging.clear();
    if (b->arena != nullptr) device_.staging->release(b->arena);
    b->arena = nullptr;
    b->recorded = 0;
    spare_.push_back(b);
    return s;
  }
  b->seq = value;
  last_seq_ = value;
  in_flight_.push_back(b);
  if (seq != nullptr) *seq = value;
  return STRATA_OK;
}

strata_status Stream::synchronize(strata_error* error) {
  if (strata_status s = flush(error); s != STRATA_OK) return s;
  if (strata_status s = device_.wait(last_seq_, error); s != STRATA_OK) return s;
  reclaim();
  return STRATA_OK;
}

bool Stream::idle() { return !has_recorded() && device_.poll() >= last_seq_; }

}  // namespace strata::vulkan
