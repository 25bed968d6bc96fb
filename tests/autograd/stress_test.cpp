// Stress: long eager loops with a backward pass every iteration must leave
// memory where it started (no reference cycles, no graph kept alive).
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <unistd.h>

namespace {

using namespace strata;

// Under AddressSanitizer freed memory sits in a quarantine, so resident size
// grows by design; there LeakSanitizer (at exit) is the leak check, the loops
// are shorter, and the allocator's live bytes must still return to baseline.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
constexpr int kScale = kSanitized ? 10 : 1;

void expect_flat(uint64_t before, uint64_t after) {
  if (kSanitized) return;
  EXPECT_LE(static_cast<double>(after), 1.05 * static_cast<double>(before)) << before << " -> " << after;
}

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
  for (int i = 0; i < 20000 / kScale; ++i) iteration();  // warm-up: caches, allocator buckets
  uint64_t before = resident_bytes();
  uint64_t live_before = runtime().memory_stats(w.device()).allocated_bytes;
  for (int i = 0; i < 200000 / kScale; ++i) iteration();
  expect_flat(before, resident_bytes());
  EXPECT_EQ(runtime().memory_stats(w.device()).allocated_bytes, live_before);
}

TEST(Stress, HigherOrderLoopKeepsMemoryFlat) {
  Tensor x = full({}, 0.3, {.dtype = f64});
  auto step = [&] { return nth_grad([](const Tensor& a) { return sin(a) * a; }, 3)(x).item<double>(); };
  for (int i = 0; i < 500; ++i) step();
  uint64_t before = resident_bytes();
  uint64_t live_before = runtime().memory_stats(x.device()).allocated_bytes;
  for (int i = 0; i < 5000 / kScale; ++i) step();
  expect_flat(before, resident_bytes());
  EXPECT_EQ(runtime().memory_stats(x.device()).allocated_bytes, live_before);
}

}  // namespace
