// work_pool.cpp — see work_pool.hpp.
//
// One job at a time: a caller that finds the pool busy runs its loop alone.
// The job lives in the pool, not on a caller's stack, because a worker may
// look at it long after the loop ended (it was descheduled while waking
// up). Its generation, chunk count and claim counter share one atomic word
// (JobWord), so a late worker's claim on a finished job fails instead of
// taking a chunk of the next one; the job's body and context are written
// before its word is published and stay unchanged until every chunk is
// done, which cannot happen while a chunk is still unclaimed.
// (work_pool_test caught the version that kept the chunk count apart: a late
// worker read the next job's count with the old generation and ran a chunk
// too many.)
#include "work_pool.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace strata::cpu {
namespace {

using Body = void (*)(void*, int64_t);

/// How long a thread busy-waits before it sleeps: a worker after a loop
/// (for the next one), the caller for chunks still running. Long enough
/// that a worker is still awake for the next loop of a training step (a
/// futex wake-up took longer than the small loops it was woken for: the
/// digits demo's two-thread epoch was 7% slower than one thread's with a
/// 20 µs spin, as fast with 1 ms), as OpenMP's runtime keeps its threads
/// spinning between regions. A spinning thread never delays anyone's loop:
/// work is claimed, not assigned.
constexpr std::chrono::microseconds kSpinTime{1000};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

/// Busy-waits while `busy()` holds, up to kSpinTime; true when it ended.
template <class Busy>
bool spin_while(Busy&& busy) {
  const auto until = std::chrono::steady_clock::now() + kSpinTime;
  for (;;) {
    for (int k = 0; k < 64; ++k) {
      if (!busy()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() > until) return !busy();
  }
}

/// The job word: generation (32 bits) | chunk count (16) | next chunk (16).
/// A claim is a compare-and-swap of the whole word, so a worker that read
/// the word of an old job can never claim a chunk of a new one, nor count
/// chunks against the wrong total.
struct JobWord {
  static constexpr uint64_t kMaxChunks = 0xffff;
  uint64_t bits;
  uint32_t generation() const { return static_cast<uint32_t>(bits >> 32); }
  int64_t total() const { return static_cast<int64_t>((bits >> 16) & 0xffff); }
  int64_t next() const { return static_cast<int64_t>(bits & 0xffff); }
  static uint64_t make(uint32_t generation, int64_t total) {
    return uint64_t{generation} << 32 | static_cast<uint64_t>(total) << 16;
  }
};

class WorkPool {
 public:
  /// Runs the loop; false when the pool is busy (the caller runs it alone).
  bool run(int64_t chunks, int threads, Body body, void* context) {
    std::unique_lock busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    const int wanted = threads - 1;
    start_workers(wanted);
    // Written while no chunk of the previous job is unclaimed or running
    // (it ended), published by the release store of the job word.
    body_.store(body, std::memory_order_relaxed);
    context_.store(context, std::memory_order_relaxed);
    wanted_.store(wanted, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    const uint32_t generation = JobWord{job_.load(std::memory_order_relaxed)}.generation() + 1;
    job_.store(JobWord::make(generation, chunks), std::memory_order_release);
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_all();

    work();  // the caller takes chunks too
    const auto running = [&] { return done_.load(std::memory_order_acquire) < chunks; };
    if (!spin_while(running)) {
      for (int64_t seen = done_.load(std::memory_order_acquire); seen < chunks;
           seen = done_.load(std::memory_order_acquire)) {
        done_.wait(seen, std::memory_order_acquire);
      }
    }
    return true;
  }

 private:
  /// Claims and runs chunks of the current job until none is left. The
  /// body and context are read after the job word that announced them and
  /// used only for a chunk claimed under that same word: while one of its
  /// chunks is unclaimed the job has not ended, so they were not replaced.
  void work() {
    uint64_t word = job_.load(std::memory_order_acquire);
    const uint32_t generation = JobWord{word}.generation();
    const Body body = body_.load(std::memory_order_relaxed);
    void* const context = context_.load(std::memory_order_relaxed);
    for (;;) {
      const JobWord w{word};
      if (w.generation() != generation || w.next() >= w.total()) return;
      if (!job_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        continue;
      }
      body(context, w.next());
      if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == w.total()) done_.notify_all();
      word = job_.load(std::memory_order_acquire);
    }
  }

  void start_workers(int wanted) {
    while (static_cast<int>(workers_.size()) < wanted) {
      const int index = static_cast<int>(workers_.size());
      // The wake count before this job is announced: a worker that starts
      // after the announcement still sees it as new.
      const uint32_t seen = wake_.load(std::memory_order_acquire);
      workers_.emplace_back([this, index, seen] { worker_loop(index, seen); });
      workers_.back().detach();  // never joined: the plugin is never unloaded
    }
  }

  void worker_loop(int index, uint32_t seen) {
    for (;;) {
      if (!spin_while([&] { return wake_.load(std::memory_order_acquire) == seen; })) {
        while (wake_.load(std::memory_order_acquire) == seen) wake_.wait(seen, std::memory_order_acquire);
      }
      seen = wake_.load(std::memory_order_acquire);
      // Only as many workers as the caller asked for take part.
      if (index < wanted_.load(std::memory_order_relaxed)) work();
    }
  }

  std::mutex busy_;
  std::vector<std::thread> workers_;  // guarded by busy_
  std::atomic<uint64_t> job_{0};      // a JobWord
  std::atomic<Body> body_{nullptr};
  std::atomic<void*> context_{nullptr};
  std::atomic<int> wanted_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<uint32_t> wake_{0};
};

WorkPool& pool() {
  static auto* p = new WorkPool;  // leaked: workers may still look at it during exit
  return *p;
}

}  // namespace

void run_chunks(int64_t chunks, int threads, Body body, void* context) {
  if (threads > 1 && chunks > 1 && chunks <= static_cast<int64_t>(JobWord::kMaxChunks) &&
      pool().run(chunks, threads, body, context)) {
    return;
  }
  for (int64_t c = 0; c < chunks; ++c) body(context, c);
}

}  // namespace strata::cpu
