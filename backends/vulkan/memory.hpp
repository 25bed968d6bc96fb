// memory.hpp — sub-allocation of tensors from large VkDeviceMemory blocks.
//
// Each block is one vkAllocateMemory plus one VkBuffer spanning it (created
// with SHADER_DEVICE_ADDRESS usage); a tensor buffer is a 256-byte-aligned
// range of a block, addressed by the block's device address plus its offset.
// Requests above half a block get a dedicated block of their own. Ranges are
// kept first-fit in an offset-ordered free list and coalesced on release;
// one empty block is kept for reuse, further empty ones are freed.
#pragma once

#include <strata/plugin/strata_plugin.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "vk_api.hpp"

namespace strata::vulkan {

struct Device;
struct Block;

/// A range of a block: what a strata_buffer points to.
struct Buffer {
  static constexpr uint32_t kMagic = 0x5654424bu;  // "VTBK": catches foreign handles
  uint32_t magic = kMagic;
  Block* block = nullptr;
  VkDeviceSize offset = 0;    // within the block
  VkDeviceSize size = 0;      // as requested
  VkDeviceSize reserved = 0;  // as carved out of the block (aligned)

  VkBuffer vk_buffer() const;
  VkDeviceAddress address() const;
  /// Host pointer to the range, or nullptr when the memory is not mapped.
  char* host() const;
};

struct Block {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceAddress address = 0;
  char* mapped = nullptr;
  VkDeviceSize size = 0;
  VkDeviceSize used = 0;
  bool dedicated = false;
  std::map<VkDeviceSize, VkDeviceSize> free_ranges;  // offset -> size
};

/// Blocks of one memory type.
class BlockAllocator {
 public:
  /// `what` names the pool in messages ("device memory", "staging memory").
  BlockAllocator(Device& device, uint32_t memory_type, bool map, VkDeviceSize block_size, std::string what);
  ~BlockAllocator();
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  /// A range of at least `bytes` (0 allowed). OUT_OF_MEMORY names the size.
  strata_status allocate(size_t bytes, Buffer** out, strata_error* error);
  void release(Buffer* buffer);
  /// Bytes currently carved out of blocks, and held from the driver.
  uint64_t used_bytes();
  uint64_t held_bytes();

 private:
  strata_status new_block(VkDeviceSize size, bool dedicated, Block** out, strata_error* error);
  void destroy_block(Block* block);

  Device& device_;
  uint32_t memory_type_;
  bool map_;
  VkDeviceSize block_size_;
  std::string what_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Block>> blocks_;
};

}  // namespace strata::vulkan
