// Stress and soak: long eager loops with a backward pass every iteration,
// third-order gradients, checkpointed training and reloading the runtime's
// configuration must leave memory where it started after a warm-up (no
// reference cycles, no graph kept alive, nothing leaked). Each loop prints
// its resident size at the start, after the warm-up and at the end.
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <unistd.h>

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using strata_test::real_dtype;

// Under AddressSanitizer freed memory sits in a quarantine, so resident size
// grows by design; there LeakSanitizer (at exit) is the leak check, the loops
// are shorter, and the allocator's live bytes must still return to baseline.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)  // clang (the fuzz preset)
constexpr bool kSanitized = __has_feature(address_sanitizer);
#else
constexpr bool kSanitized = false;
#endif
constexpr int kScale = kSanitized ? 10 : 1;

/// How many times shorter the loops run: kScale, and 20 times more on a
/// default device other than cpu:0 (STRATA_TEST_DEVICE), where each op is a
/// launch (tens of µs on lavapipe) and the point is that memory stays flat,
/// not the count.
int scale() {
  static const int s = kScale * (runtime().default_device() == Device("cpu:0") ? 1 : 20);
  return s;
}

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

/// Runs `warm_up` iterations, then `measured` more, of `iteration`; checks
/// that the resident size after them is within 5% of the size after the
/// warm-up and that the device allocator's live bytes are back where they
/// were; prints the figures.
template <class F>
void soak(const char* name, int warm_up, int measured, Device device, F&& iteration) {
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t start = resident_bytes();
  for (int i = 0; i < warm_up; ++i) iteration(i);
  const uint64_t before = resident_bytes();
  const uint64_t live_before = runtime().memory_stats(device).allocated_bytes;
  for (int i = 0; i < measured; ++i) iteration(warm_up + i);
  const uint64_t after = resident_bytes();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ soak     ] " << name << ": " << warm_up << " + " << measured << " iterations in " << seconds
            << " s; resident " << (start >> 10) << " KiB at start, " << (before >> 10) << " KiB after warm-up, "
            << (after >> 10) << " KiB at the end\n";
  expect_flat(before, after);
  EXPECT_EQ(runtime().memory_stats(device).allocated_bytes, live_before);
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
  for (int i = 0; i < 20000 / scale(); ++i) iteration();  // warm-up: caches, allocator buckets
  uint64_t before = resident_bytes();
  uint64_t live_before = runtime().memory_stats(w.device()).allocated_bytes;
  for (int i = 0; i < 200000 / scale(); ++i) iteration();
  expect_flat(before, resident_bytes());
  EXPECT_EQ(runtime().memory_stats(w.device()).allocated_bytes, live_before);
}

// 10^4 third-order gradients (after 500 to warm up), each checked.
TEST(Stress, HigherOrderLoopKeepsMemoryFlat) {
  Tensor x = full({}, 0.3, {.dtype = real_dtype()});
  // d³/dx³ (x sin x) = -3 sin x - x cos x
  const double expected = -3.0 * std::sin(0.3) - 0.3 * std::cos(0.3);
  double worst = 0.0;
  soak("third-order gradients", 500 / (scale() / kScale), 10000 / scale(), x.device(), [&](int) {
    double d3 = nth_grad([](const Tensor& a) { return sin(a) * a; }, 3)(x).item<double>();
    worst = std::max(worst, std::abs(d3 - expected));
  });
  EXPECT_LT(worst, real_dtype() == DType::f64 ? 1e-12 : strata_test::tolerance(real_dtype()).bound(expected));
}

// 10^4 training steps (after 500 to warm up) of a small MLP whose two
// hidden blocks are checkpointed: SGD with momentum, so the optimizer keeps
// state too. The loss must go down.
TEST(Stress, CheckpointedTrainingKeepsMemoryFlat) {
  manual_seed(3);
  nn::Linear l1(8, 16), l2(16, 16), l3(16, 1);
  std::vector<Tensor> params;
  for (nn::Module* m : std::initializer_list<nn::Module*>{&l1, &l2, &l3}) {
    for (const Tensor& p : m->parameters()) params.push_back(p);
  }
  nn::SGD sgd(params, {.lr = 0.01, .momentum = 0.9});
  Tensor x = randn({32, 8});
  Tensor target = sum(sin(x), {1}, true);
  auto block = [](nn::Linear& layer) {
    return [&layer](const Tensor& in) { return tanh(layer.forward(in)); };
  };
  double first = 0.0, last = 0.0;
  soak("checkpointed training", 500 / (scale() / kScale), 10000 / scale(), x.device(), [&](int i) {
    sgd.zero_grad();
    Tensor h = checkpoint(block(l1), x);
    h = checkpoint(block(l2), h);
    Tensor loss = nn::functional::mse_loss(l3.forward(h), target);
    loss.backward();
    sgd.step();
    if (i == 0) first = loss.item<double>();
    last = loss.item<double>();
  });
  EXPECT_TRUE(std::isfinite(last));
  EXPECT_LT(last, 0.5 * first) << "the MLP did not train: loss " << first << " -> " << last;
}

// The runtime's plugin set reloaded again and again: the runtime tests'
// configuration (the in-tree and test plugins, a device memory limit, a
// search path that does not exist) by load_config, and the configuration
// this process started with by Runtime::configure, in turn. Plugins are
// never unloaded by design, so a reload finds them loaded and must neither
// load them again nor grow memory.
TEST(Stress, ConfigurationReloadLoopKeepsMemoryFlat) {
  const Config original = runtime().config();
  ASSERT_TRUE(std::filesystem::is_regular_file(STRATA_TEST_CONFIG)) << STRATA_TEST_CONFIG;
  const Device device = runtime().default_device();
  Tensor a = full({4}, 1.5);
  auto reload = [&](int i) {
    if (i % 2 == 0) {
      runtime().load_config(STRATA_TEST_CONFIG);
    } else {
      runtime().configure(original);
    }
  };
  reload(0);
  const size_t plugins = runtime().plugins().size();
  const size_t devices = runtime().devices().size();
  soak("configuration reloads", 50, 400, device, reload);
  std::cout << "[ soak     ] " << plugins << " plugins, " << devices << " devices\n";
  EXPECT_GE(plugins, 2u) << "the test configuration adds the test plugins";
  EXPECT_EQ(runtime().plugins().size(), plugins);
  EXPECT_EQ(runtime().devices().size(), devices);
  EXPECT_EQ(runtime().default_device(), device);
  EXPECT_EQ((a * a).to_vector<float>(), (std::vector<float>(4, 2.25f)));
}

}  // namespace
