// pool.hpp — per-thread free lists for the small objects every op creates
// (tensor handles, storages, autograd metadata, graph nodes).
//
// A 1-element op allocates and frees several such objects; through malloc
// their churn (a chain of 500 ops frees 2000 blocks at once) costs more than
// the op. Here a freed block goes on its thread's list for its size class
// and the next allocation of that size takes it back. A block freed on
// another thread joins that thread's list: blocks of one size class are
// interchangeable. At most kMaxFree blocks are kept per class and thread, so
// a burst of graph building does not pin memory for good.
//
// Under AddressSanitizer the pool is bypassed, so that a use after free of
// a pooled object is still reported.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace strata::detail {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kPoolEnabled = false;
#else
inline constexpr bool kPoolEnabled = true;
#endif

/// The free list of blocks of `Block` bytes for the calling thread.
template <size_t Block>
class FreeList {
 public:
  static constexpr size_t kMaxFree = 4096;

  static void* take() {
    if (!kPoolEnabled || retired()) return ::operator new(Block);
    FreeList& l = local();
    if (l.head_ == nullptr) return ::operator new(Block);
    Free* b = l.head_;
    l.head_ = b->next;
    --l.count_;
    return b;
  }

  static void give(void* p) {
    if (!kPoolEnabled || retired()) {
      ::operator delete(p);
      return;
    }
    FreeList& l = local();
    if (l.count_ >= kMaxFree) {
      ::operator delete(p);
      return;
    }
    auto* b = static_cast<Free*>(p);
    b->next = l.head_;
    l.head_ = b;
    ++l.count_;
  }

  FreeList(const FreeList&) = delete;
  FreeList& operator=(const FreeList&) = delete;

 private:
  struct Free {
    Free* next;
  };
  static_assert(Block >= sizeof(Free));

  FreeList() = default;
  ~FreeList() {
    retired() = true;  // objects freed later in this thread's exit go to the heap
    while (head_ != nullptr) {
      Free* b = head_;
      head_ = b->next;
      ::operator delete(b);
    }
  }

  static FreeList& local() {
    thread_local FreeList list;
    return list;
  }
  /// Set once the thread's list is destroyed; trivially destructible, so it
  /// stays readable until the thread is gone.
  static bool& retired() {
    thread_local bool r = false;
    return r;
  }

  Free* head_ = nullptr;
  size_t count_ = 0;
};

/// Blocks are rounded up to 32 bytes, so that types of similar size share a
/// list.
constexpr size_t pool_block_size(size_t bytes) { return (bytes + 31) / 32 * 32; }

/// A std allocator over FreeList, for std::allocate_shared (which rebinds it
/// to its control block type: object and reference counts in one block).
template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(size_t n) {
    if (n != 1) return static_cast<T*>(::operator new(n * sizeof(T)));
    return static_cast<T*>(FreeList<pool_block_size(sizeof(T))>::take());
  }
  void deallocate(T* p, size_t n) {
    if (n != 1) {
      ::operator delete(p);
      return;
    }
    FreeList<pool_block_size(sizeof(T))>::give(p);
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

/// std::make_shared through the pool.
template <typename T, typename... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PoolAllocator<T>{}, std::forward<Args>(args)...);
}

}  // namespace strata::detail
