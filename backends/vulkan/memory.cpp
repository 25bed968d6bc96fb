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
  for (auto& b : blocks_) destroy_block(b.get());
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
  block->free_ranges.emplace(0, size);
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
  Block* chosen = nullptr;
  VkDeviceSize offset = 0;
  if (want > block_size_ / 2) {
    if (strata_status s = new_block(want, true, &chosen, error); s != STRATA_OK) return s;
  } else {
    for (auto& b : blocks_) {
      if (b->dedicated) continue;
      for (auto it = b->free_ranges.begin(); it != b->free_ranges.end(); ++it) {
        if (it->second < want) continue;
        chosen = b.get();
        break;
      }
      if (chosen != nullptr) break;
    }
    if (chosen == nullptr) {
      if (strata_status s = new_block(block_size_, false, &chosen, error); s != STRATA_OK) return s;
    }
  }
  auto it = std::find_if(chosen->free_ranges.begin(), chosen->free_ranges.end(),
                         [&](const auto& range) { return range.second >= want; });
  offset = it->first;
  const VkDeviceSize left = it->second - want;
  chosen->free_ranges.erase(it);
  if (left > 0) chosen->free_ranges.emplace(offset + want, left);
  chosen->used += want;
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
  // Insert and coalesce with the neighbours.
  auto next = block->free_ranges.lower_bound(offset);
  if (next != block->free_ranges.end() && offset + size == next->first) {
    size += next->second;
    next = block->free_ranges.erase(next);
  }
  if (next != block->free_ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += size;
      offset = prev->first;
      size = prev->second;
      block->free_ranges.erase(prev);
    }
  }
  block->free_ranges.emplace(offset, size);
  if (block->used != 0) return;
  // An empty block: dedicated ones go back at once; keep one regular spare.
  bool spare_exists = false;
  for (auto& b : blocks_) {
    if (b.get() != block && !b->dedicated && b->used == 0) spare_exists = true;
  }
  if (block->dedicated || spare_exists) {
    destroy_block(block);
    blocks_.erase(std::find_if(blocks_.begin(), blocks_.end(), [&](const auto& b) { return b.get() == block; }));
  }
}

uint64_t BlockAllocator::used_bytes() {
  std::lock_guard lock(mutex_);
  uint64_t n = 0;
  for (auto& b : blocks_) n += b->used;
  return n;
}

uint64_t BlockAllocator::held_bytes() {
  std::lock_guard lock(mutex_);
  uint64_t n = 0;
  for (auto& b : blocks_) n += b->size;
  return n;
}

}  // namespace strata::vulkan
