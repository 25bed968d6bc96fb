// memory.hpp — sub-allocation of tensors from large VkDeviceMemory blocks.
//
// Each block is one vkAllocateMemory plus one VkBuffer spanning it (created
// with SHADER_DEVICE_ADDRESS usage); a tensor buffer is a 256-byte-aligned
// range of a block, addressed by the block's device address plus its offset.
// Requests above half a block get a dedicated block of their own. Free ranges
// of regular blocks are coalesced per block and indexed by size (best fit).
//
// Ordering (README.md, "Memory"): every submission on a device's one queue
// begins with a barrier on everything submitted before it, so a range whose
// last use has been *submitted* may be handed out again at once — the new
// owner's work is submitted later and therefore runs later. Only giving the
// memory back to the driver must wait for *completion*: an empty block is
// retired with the device's last submitted timeline value and destroyed once
// the timeline has passed it. One empty regular block and up to two empty
// dedicated blocks are kept for reuse; memory_trim retires them all.
#pragma once

#include <strata/plugin/strata_plugin.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "vk_api.hpp"

namespace strata::vulkan {

struct Device;
struct Block;
class BlockAllocator;

/// A range of a block: what a strata_buffer points to.
struct Buffer {
  static constexpr uint32_t kMagic = 0x5654424bu;  // "VTBK": catches foreign handles
  uint32_t magic = kMagic;
  BlockAllocator* pool = nullptr;  // the allocator it goes back to
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
  std::map<VkDeviceSize, VkDeviceSize> free_ranges;  // offset -> size (regular blocks)
};

/// Blocks of one memory type. Thread-safe (one mutex): buffers of one pool
/// are allocated and released by every stream of the device.
class BlockAllocator {
 public:
  /// `what` names the pool in messages ("device memory", "staging memory").
  BlockAllocator(Device& device, uint32_t memory_type, bool map, VkDeviceSize block_size, std::string what);
  ~BlockAllocator();
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  /// A range of at least `bytes` (0 allowed). OUT_OF_MEMORY names the size.
  strata_status allocate(size_t bytes, Buffer** out, strata_error* error);
  /// Returns a range whose last use has been submitted (or never was): it
  /// may be handed out again at once (see the file comment).
  void release(Buffer* buffer);
  /// Retires every empty block and destroys the retired blocks whose last
  /// use has completed (memory_trim).
  void trim();

  struct Stats {
    uint64_t used = 0;         // bytes carved out of blocks
    uint64_t held = 0;         // bytes of live blocks (retired ones included)
    uint64_t allocations = 0;  // vkAllocateMemory calls so far
  };
  Stats stats();

 private:
  strata_status new_block(VkDeviceSize size, bool dedicated, Block** out, strata_error* error);
  void destroy_block(Block* block);
  void carve(Block* block, VkDeviceSize offset, VkDeviceSize range, VkDeviceSize want);
  void forget_range(Block* block, VkDeviceSize offset, VkDeviceSize size);
  /// Moves `block` out of service; destroyed once the device has completed
  /// everything submitted so far. Requires mutex_.
  void retire(Block* block);
  /// Destroys retired blocks whose tag has completed (all when `everything`).
  void reap(bool everything);

  Device& device_;
  uint32_t memory_type_;
  bool map_;
  VkDeviceSize block_size_;
  std::string what_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::multimap<VkDeviceSize, std::pair<Block*, VkDeviceSize>> by_size_;  // free ranges of regular blocks
  std::vector<std::pair<uint64_t, std::unique_ptr<Block>>> retired_;      // (timeline value, block)
  uint64_t allocations_ = 0;
};

}  // namespace strata::vulkan
