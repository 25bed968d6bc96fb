// work_pool_test: the CPU plugin's work-sharing loops (backends/cpu/
// work_pool.cpp, compiled into this test): every chunk runs exactly once,
// whoever runs it, also when several threads start loops at once and when a
// loop body starts a loop itself.
#include "../../backends/cpu/work_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace strata::cpu {
namespace {

/// Runs a loop of `chunks` chunks on `threads` threads; returns how many
/// times each chunk ran.
std::vector<int> run_counts(int64_t chunks, int threads) {
  std::vector<std::atomic<int>> counts(static_cast<size_t>(chunks));
  for_each_chunk(chunks, threads, [&](int64_t c) { counts[static_cast<size_t>(c)].fetch_add(1); });
  std::vector<int> out;
  for (const auto& c : counts) out.push_back(c.load());
  return out;
}

TEST(WorkPool, EveryChunkRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t chunks : {1, 2, 7, 64, 1000}) {
      const std::vector<int> counts = run_counts(chunks, threads);
      for (size_t c = 0; c < counts.size(); ++c) {
        ASSERT_EQ(counts[c], 1) << "chunk " << c << " of " << chunks << " on " << threads << " threads";
      }
    }
  }
}

TEST(WorkPool, ManyLoopsInARowReuseTheWorkers) {
  // A late worker must never run a chunk with the body of a loop that has
  // ended: each loop's body counts into its own slot, which must end up
  // holding exactly that loop's chunk count.
  constexpr int kLoops = 2000;
  std::vector<std::atomic<int>> ran(kLoops);
  for (int loop = 0; loop < kLoops; ++loop) {
    const int64_t chunks = 2 + loop % 9;
    for_each_chunk(chunks, 4, [&ran, loop](int64_t) { ran[static_cast<size_t>(loop)].fetch_add(1); });
  }
  for (int loop = 0; loop < kLoops; ++loop) ASSERT_EQ(ran[static_cast<size_t>(loop)].load(), 2 + loop % 9) << loop;
}

TEST(WorkPool, LoopsFromSeveralThreadsAtOnce) {
  // One loop holds the pool at a time; the others run on their callers.
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int k = 0; k < 200; ++k) {
        for (int count : run_counts(33, 3)) failures += count != 1;
      }
    });
  }
  for (std::thread& c : callers) c.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(WorkPool, ALoopInsideALoopRunsOnItsCaller) {
  std::atomic<int> inner_runs{0};
  for_each_chunk(8, 2, [&](int64_t) {
    for_each_chunk(5, 2, [&](int64_t) { inner_runs.fetch_add(1); });
  });
  EXPECT_EQ(inner_runs.load(), 8 * 5);
}

TEST(WorkPool, TheCallerFinishesChunksAWorkerHasNotStarted) {
  // The calling thread claims chunks too: while the first chunk is held
  // (whoever runs it), the remaining chunks complete on the other threads.
  std::atomic<bool> release{false};
  std::atomic<int> finished{0};
  std::thread releaser([&] {
    while (finished.load() < 15) std::this_thread::yield();
    release.store(true);
  });
  for_each_chunk(16, 2, [&](int64_t c) {
    if (c == 0) {
      while (!release.load()) std::this_thread::yield();
    }
    finished.fetch_add(1);
  });
  releaser.join();
  EXPECT_EQ(finished.load(), 16);
}

}  // namespace
}  // namespace strata::cpu
