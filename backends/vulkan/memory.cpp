// memory.cpp — the block sub-allocator (see memory.hpp).
#include "memory.hpp"

#include <algorithm>
#include <new>
#include <strata/plugin/strata_plugin.hpp>

#include "device.hpp"

namespace strata::vulkan {

using plugin::fail;

VkBuffer Buffer::vk_buffer() const { return block->buffer; }
VkDeviceAddress Buffer::address() const { return block->address + offset; }
char* Buffer::host() const { return block->mapped != nullptr ? block->mapped + offset : nullptr; }

BlockAllocator::BlockAllocator(Device& device, uint32_t memory_type, bool map, VkDeviceSize block_size,
                               std::string what)
    : device_(device), memory_type_(memory_type), map_(map), block_size_(block_size), what_(std::move(what)) {}

BlockAllocator::~BlockAllocator() {
  // close_device waited for the device: nothing can still use a block.
  for (auto& b : blocks_) destroy_block(b.get());
  for (auto& [tag, b] : retired_) destroy_block(b.get());
}

strata_status BlockAllocator::new_block(VkDeviceSize size, bool dedicated, Block** out, strata_error* error) {
  const DeviceApi& vk = device_.fn;
  const uint32_t heap = device_.memory_properties.memoryTypes[memory_type_].heapIndex;
  const VkDeviceSize heap_size = device_.memory_properties.memoryHeaps[heap].size;
  if (size > heap_size) {
    return fail(error, STRATA_ERROR_OUT_OF_MEMORY,
                "%s: cannot allocate %llu bytes of %s: larger than the whole memory heap (%llu bytes)",
                device_.id().c_str(), static_cast<unsigned long long>(size), what_.c_str(),
                static_cast<unsigned long long>(heap_size));
  }
  auto block = std::make_unique<Block>();
  block->size = size;
  block->dedicated = dedicated;

  VkBufferCreateInfo bci{};
  bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  bci.size = size;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
              VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VkResult r = vk.vkCreateBuffer(device_.device, &bci, nullptr, &block->buffer);
  if (r != VK_SUCCESS) {
    return fail(error,
                r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ? STRATA_ERROR_OUT_OF_MEMORY
                                                                                       : STRATA_ERROR_DEVICE,
                "%s: vkCreateBuffer of %llu bytes (%s) failed: %s", device_.id().c_str(),
                static_cast<unsigned long long>(size), what_.c_str(), result_name(r));
  }
  VkMemoryRequirements req;
  vk.vkGetBufferMemoryRequirements(device_.device, block->buffer, &req);
  if ((req.memoryTypeBits & (1u << memory_type_)) == 0) {
    vk.vkDestroyBuffer(device_.device, block->buffer, nullptr);
    return fail(error, STRATA_ERROR_DEVICE, "%s: storage buffers cannot live in memory type %u (%s)",
                device_.id().c_str(), memory_type_, what_.c_str());
  }
  VkMemoryAllocateFlagsInfo flags{};
  flags.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO;
  flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
  VkMemoryAllocateInfo mai{};
  mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  mai.pNext = &flags;
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = memory_type_;
  r = vk.vkAllocateMemory(device_.device, &mai, nullptr, &block->memory);
  if (r != VK_SUCCESS) {
    vk.vkDestroyBuffer(device_.device, block->buffer, nullptr);
    return fail(error, STRATA_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %llu bytes of %s: vkAllocateMemory: %s",
                device_.id().c_str(), static_cast<unsigned long long>(req.size), what_.c_str(), result_name(r));
  }
  r = vk.vkBindBufferMemory(device_.device, block->buffer, block->memory, 0);
  if (r == VK_SUCCESS && map_) {
    void* p = nullptr;
    r = vk.vkMapMemory(device_.device, block->memory, 0, VK_WHOLE_SIZE, 0, &p);
    block->mapped = static_cast<char*>(p);
  }
  if (r != VK_SUCCESS) {
    vk.vkDestroyBuffer(device_.device, block->buffer, nullptr);
    vk.vkFreeMemory(device_.device, block->memory, nullptr);
    return fail(error, STRATA_ERROR_DEVICE, "%s: binding/mapping %llu bytes of %s failed: %s", device_.id().c_str(),
                static_cast<unsigned long long>(size), what_.c_str(), result_name(r));
  }
  VkBufferDeviceAddressInfo bai{};
  bai.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO;
  bai.buffer = block->buffer;
  block->address = vk.vkGetBufferDeviceAddress(device_.device, &bai);
  ++allocations_;
  if (!dedicated) {
    block->free_ranges.emplace(0, size);
    by_size_.emplace(size, std::make_pair(block.get(), VkDeviceSize{0}));
  }
  blocks_.push_back(std::move(block));
  *out = blocks_.back().get();
  return STRATA_OK;
}

void BlockAllocator::destroy_block(Block* block) {
  const DeviceApi& vk = device_.fn;
  // Unmapping is implicit in vkFreeMemory.
  if (block->buffer != VK_NULL_HANDLE) vk.vkDestroyBuffer(device_.device, block->buffer, nullptr);
  if (block->memory != VK_NULL_HANDLE) vk.vkFreeMemory(device_.device, block->memory, nullptr);
  block->buffer = VK_NULL_HANDLE;
  block->memory = VK_NULL_HANDLE;
}

void BlockAllocator::forget_range(Block* block, VkDeviceSize offset, VkDeviceSize size) {
  auto [lo, hi] = by_size_.equal_range(size);
  for (auto it = lo; it != hi; ++it) {
    if (it->second.first == block && it->second.second == offset) {
      by_size_.erase(it);
      return;
    }
  }
}

void BlockAllocator::carve(Block* block, VkDeviceSize offset, VkDeviceSize range, VkDeviceSize want) {
  block->free_ranges.erase(offset);
  forget_range(block, offset, range);
  if (range > want) {
    block->free_ranges.emplace(offset + want, range - want);
    by_size_.emplace(range - want, std::make_pair(block, offset + want));
  }
}

void BlockAllocator::retire(Block* block) {
  auto it = std::find_if(blocks_.begin(), blocks_.end(), [&](const auto& b) { return b.get() == block; });
  if (it == blocks_.end()) return;
  if (!block->dedicated) {
    for (const auto& [offset, size] : block->free_ranges) forget_range(block, offset, size);
    block->free_ranges.clear();
  }
  // Work submitted up to now may still read or write the block.
  retired_.emplace_back(device_.last_submitted.load(std::memory_order_acquire), std::move(*it));
  blocks_.erase(it);
}

void BlockAllocator::reap(bool everything) {
  if (retired_.empty()) return;
  const uint64_t done = everything ? UINT64_MAX : device_.poll();
  auto keep = std::partition(retired_.begin(), retired_.end(), [&](const auto& r) { return r.first > done; });
  for (auto it = keep; it != retired_.end(); ++it) destroy_block(it->second.get());
  retired_.erase(keep, retired_.end());
}

strata_status BlockAllocator::allocate(size_t bytes, Buffer** out, strata_error* error) {
  if (bytes > (SIZE_MAX >> 2)) {  // before rounding up, which would wrap
    return fail(error, STRATA_ERROR_OUT_OF_MEMORY, "%s: cannot allocate %zu bytes of %s", device_.id().c_str(), bytes,
                what_.c_str());
  }
  const VkDeviceSize want =
      std::max<VkDeviceSize>(kBufferAlignment, (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment);
  auto buffer = std::unique_ptr<Buffer>(new (std::nothrow) Buffer);
  if (!buffer) return fail(error, STRATA_ERROR_OUT_OF_MEMORY, "%s: out of host memory", device_.id().c_str());
  std::lock_guard lock(mutex_);
  reap(false);
  Block* chosen = nullptr;
  VkDeviceSize offset = 0;
  if (want > block_size_ / 2) {
    // An empty dedicated block of about the right size, else a new one.
    for (auto& b : blocks_) {
      if (b->dedicated && b->used == 0 && b->size >= want && b->size - want <= want / 4) {
        chosen = b.get();
        break;
      }
    }
    if (chosen == nullptr) {
      strata_status s = new_block(want, true, &chosen, error);
      if (s == STRATA_ERROR_OUT_OF_MEMORY && !retired_.empty()) {
        // Retired blocks still wait for the device: let it finish, retry.
        strata_error ignored{sizeof(strata_error), {}};
        if (device_.wait(device_.last_submitted.load(), &ignored) == STRATA_OK) {
          reap(false);
          s = new_block(want, true, &chosen, error);
        }
      }
      if (s != STRATA_OK) return s;
    }
    chosen->used = want;
  } else {
    auto it = by_size_.lower_bound(want);  // best fit
    if (it == by_size_.end()) {
      strata_status s = new_block(block_size_, false, &chosen, error);
      if (s == STRATA_ERROR_OUT_OF_MEMORY && !retired_.empty()) {
        strata_error ignored{sizeof(strata_error), {}};
        if (device_.wait(device_.last_submitted.load(), &ignored) == STRATA_OK) {
          reap(false);
          s = new_block(block_size_, false, &chosen, error);
        }
      }
      if (s != STRATA_OK) return s;
      it = by_size_.lower_bound(want);
    }
    chosen = it->second.first;
    offset = it->second.second;
    carve(chosen, offset, it->first, want);
    chosen->used += want;
  }
  buffer->pool = this;
  buffer->block = chosen;
  buffer->offset = offset;
  buffer->size = bytes;
  buffer->reserved = want;
  *out = buffer.release();
  return STRATA_OK;
}

void BlockAllocator::release(Buffer* buffer) {
  if (buffer == nullptr) return;
  std::lock_guard lock(mutex_);
  Block* block = buffer->block;
  VkDeviceSize offset = buffer->offset;
  VkDeviceSize size = buffer->reserved;
  buffer->magic = 0;
  delete buffer;
  block->used -= size;
  if (block->dedicated) {
    if (block->used != 0) return;
    // Keep at most two empty dedicated blocks for reuse; retire the oldest.
    int empty = 0;
    for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
      Block* b = it->get();
      if (!b->dedicated || b->used != 0) continue;
      if (++empty > 2) {
        retire(b);
        break;
      }
    }
    return;
  }
  // Insert and coalesce with the neighbours.
  auto next = block->free_ranges.lower_bound(offset);
  if (next != block->free_ranges.end() && offset + size == next->first) {
    forget_range(block, next->first, next->second);
    size += next->second;
    next = block->free_ranges.erase(next);
  }
  if (next != block->free_ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      forget_range(block, prev->first, prev->second);
      offset = prev->first;
      size += prev->second;
      block->free_ranges.erase(prev);
    }
  }
  block->free_ranges.emplace(offset, size);
  by_size_.emplace(size, std::make_pair(block, offset));
  if (block->used != 0) return;
  // An empty regular block: keep one spare.
  for (auto& b : blocks_) {
    if (b.get() != block && !b->dedicated && b->used == 0) {
      retire(block);
      break;
    }
  }
  reap(false);
}

void BlockAllocator::trim() {
  std::lock_guard lock(mutex_);
  std::vector<Block*> empty;
  for (auto& b : blocks_) {
    if (b->used == 0) empty.push_back(b.get());
  }
  for (Block* b : empty) retire(b);
  reap(false);
}

BlockAllocator::Stats BlockAllocator::stats() {
  std::lock_guard lock(mutex_);
  Stats s;
  for (auto& b : blocks_) {
    s.used += b->used;
    s.held += b->size;
  }
  for (auto& [tag, b] : retired_) s.held += b->size;
  s.allocations = allocations_;
  return s;
}

}  // namespace strata::vulkan
