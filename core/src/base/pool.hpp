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
// Under AddressSanitizer and ThreadSanitizer the pool is bypassed, so that
// a use after free of a pooled object is still reported and every block's
// life (malloc to free) is what the sanitizer tracks.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace strata::detail {

// gcc says __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang answers
// __has_feature (the fuzz preset).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kPoolEnabled = false;
#elif defined(__has_feature)
inline constexpr bool kPoolEnabled = !(__has_feature(address_sanitizer) || __has_feature(thread_sanitizer));
#else
inline constexpr bool kPoolEnabled = true;
#endif

/// The free list of blocks of `Block` bytes for the calling thread.
template <size_t Block>
class FreeList {
 public:
  static constexpr size_t kMaxFree = 4096;

  static void* take() {
    State& s = state();
    if (!kPoolEnabled || s.head == nullptr) return ::operator new(Block);
    Free* b = s.head;
    s.head = b->next;
    --s.count;
    return b;
  }

  static void give(void* p) {
    State& s = state();
    if (!kPoolEnabled || s.retired || s.count >= kMaxFree) {
      ::operator delete(p);
      return;
    }
    if (!s.armed) arm(s);
    auto* b = static_cast<Free*>(p);
    b->next = s.head;
    s.head = b;
    ++s.count;
  }

 private:
  struct Free {
    Free* next;
  };
  static_assert(Block >= sizeof(Free));

  /// Trivially destructible, so one thread-local lookup reaches it and it
  /// stays readable until the thread is gone.
  struct State {
    Free* head = nullptr;
    size_t count = 0;
    bool armed = false;    // the Reaper below exists
    bool retired = false;  // the thread is exiting: blocks go to the heap
  };
  /// Gives the thread's blocks back to the heap when the thread exits.
  struct Reaper {
    ~Reaper() {
      State& s = state();
      s.retired = true;
      while (s.head != nullptr) {
        Free* b = s.head;
        s.head = b->next;
        ::operator delete(b);
      }
      s.count = 0;
    }
  };

  static State& state() {
    thread_local State s;
    return s;
  }
  static void arm(State& s) {
    thread_local Reaper reaper;
    s.armed = true;
  }
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
