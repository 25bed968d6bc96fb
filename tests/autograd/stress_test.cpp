// Stress: long eager loops with a backward pass every iteration must leave
// memory where it started (no reference cycles, no graph kept alive).
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <unistd.h>

namespace {

using namespace strata;

/// Resident set size in bytes, from /proc/self/statm.
uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages_total = 0, pages_resident = 0;
  statm >> pages_total >> pages_resident;
  return pages_resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// 10^6 ops: 2x10^5 iterations of five ops, backward every iteration.
TEST(Stress, MillionOpLoopWithBackwardKeepsMemoryFlat) {
  Tensor w = full({4}, 0.5, {.dtype = f32, .requires_grad = true});
  Tensor c = full({4}, 0.9);
  auto iteration = [&] {
    Tensor y = tanh(w * c + 0.1);
    sum(y * y).backward();
    w.zero_grad();
  };
  for (int i = 0; i < 20000; ++i) iteration();  // warm-up: caches, allocator buckets
  uint64_t before = resident_bytes();
  uint64_t live_before = runtime().memory_stats(w.device()).allocated_bytes;
  for (int i = 0; i < 200000; ++i) iteration();
  uint64_t after = resident_bytes();
  EXPECT_LE(static_cast<double>(after), 1.05 * static_cast<double>(before)) << before << " -> " << after;
  EXPECT_EQ(runtime().memory_stats(w.device()).allocated_bytes, live_before);
}

TEST(Stress, HigherOrderLoopKeepsMemoryFlat) {
  Tensor x = full({}, 0.3, {.dtype = f64});
  auto step = [&] { return nth_grad([](const Tensor& a) { return sin(a) * a; }, 3)(x).item<double>(); };
  for (int i = 0; i < 500; ++i) step();
  uint64_t before = resident_bytes();
  for (int i = 0; i < 5000; ++i) step();
  uint64_t after = resident_bytes();
  EXPECT_LE(static_cast<double>(after), 1.05 * static_cast<double>(before)) << before << " -> " << after;
}

}  // namespace
