// threads_test.cpp — many threads at once on what DESIGN.md ("Thread safety")
// promises to share: the device manager (default device, device info, memory
// statistics), the caching allocator (tensors of many sizes on cpu:0 and on
// the "mini" test accelerator) and the autograd engine with one tape per
// thread. Each case stops at its round count or at a deadline, whichever
// comes first, so that it stays within a few seconds under ThreadSanitizer
// (the tsan preset runs it, label "threads").
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace strata;
using Clock = std::chrono::steady_clock;

constexpr int kThreads = 8;

// Runs body(thread, deadline) on kThreads threads and returns what each
// threw ("" if nothing).
template <typename Body>
std::vector<std::string> on_threads(int threads, std::chrono::milliseconds budget, Body body) {
  const Clock::time_point deadline = Clock::now() + budget;
  std::vector<std::string> errors(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        body(t, deadline);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    });
  }
  for (std::thread& th : pool) th.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t t = 0; t < errors.size(); ++t) EXPECT_EQ(errors[t], "") << "thread " << t << " threw";
}

class Threads : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime().load_config(STRATA_THREADS_TEST_CONFIG);
    bool has_mini = false;
    for (const DeviceInfo& d : runtime().devices()) has_mini = has_mini || d.id == "mini:0";
    ASSERT_TRUE(has_mini) << "the test plugin mini:0 is required (" << STRATA_THREADS_TEST_CONFIG << ")";
    cpu = Device("cpu:0");
    mini = Device("mini:0");
  }
  Device cpu;   // set once the configuration naming mini is loaded
  Device mini;
};

// Lookups return the same answers on every thread while others allocate.
TEST_F(Threads, DeviceManagerAnswersTheSameOnEveryThread) {
  const Device want = runtime().default_device();
  const DeviceInfo cpu_info = runtime().device_info(cpu);
  const size_t device_count = runtime().devices().size();
  std::atomic<int> rounds{0};
  auto errors = on_threads(kThreads, std::chrono::milliseconds(1500), [&](int t, Clock::time_point deadline) {
    for (int i = 0; i < 200 && Clock::now() < deadline; ++i) {
      if (runtime().default_device() != want) throw std::runtime_error("default device changed");
      const Device dev = (i + t) % 2 == 0 ? cpu : mini;
      const DeviceInfo info = runtime().device_info(dev);
      if (info.id != dev.str()) throw std::runtime_error("device_info(" + dev.str() + ") is " + info.id);
      if (dev == cpu && info.name != cpu_info.name) throw std::runtime_error("cpu:0 changed its name");
      if (runtime().devices().size() != device_count) throw std::runtime_error("device count changed");
      Tensor keep = full({64 + i}, 1.0, {.device = dev});  // something for the statistics to count
      const MemoryStats stats = runtime().memory_stats(dev);
      if (stats.allocated_bytes < static_cast<uint64_t>(keep.numel()) * 4) {
        throw std::runtime_error("memory_stats(" + dev.str() + ") misses a live tensor");
      }
      if (stats.peak_allocated_bytes < stats.allocated_bytes) throw std::runtime_error("peak below allocated");
      (void)runtime().device_memory_info(dev);
      if (i % 50 == 0) (void)runtime().plugins();
      rounds.fetch_add(1);
    }
  });
  expect_no_errors(errors);
  EXPECT_GT(rounds.load(), kThreads);
}

// Every thread allocates, fills, reads back and frees tensors of many sizes
// and dtypes on both devices, keeping a few alive across rounds; one more
// thread empties the caches meanwhile. Afterwards nothing is left allocated.
TEST_F(Threads, CachingAllocatorOfManySizesOnCpuAndMini) {
  for (const Device& dev : {cpu, mini}) runtime().synchronize(dev);
  const uint64_t cpu_before = runtime().memory_stats(cpu).allocated_bytes;
  const uint64_t mini_before = runtime().memory_stats(mini).allocated_bytes;
  std::atomic<bool> done{false};
  std::thread trimmer([&] {
    while (!done.load()) {
      runtime().empty_cache();
      runtime().reset_peak_memory(cpu);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  auto errors = on_threads(kThreads, std::chrono::milliseconds(2500), [&](int t, Clock::time_point deadline) {
    std::vector<Tensor> alive;
    for (int i = 0; i < 120 && Clock::now() < deadline; ++i) {
      const Device dev = (i + t) % 3 == 0 ? mini : cpu;
      // 1 element to 64 Ki: small-block and large-block pools, odd sizes.
      const int64_t n = 1 + ((static_cast<int64_t>(i) * 7919 + t * 104729) % (64 * 1024)) / (1 + i % 5 * 97);
      // mini stores f32, i64 and bool only.
      const DType dtype = dev == mini ? (i % 2 == 0 ? i64 : f32) : (i % 4 == 0 ? f64 : (i % 4 == 1 ? i32 : f32));
      const double value = static_cast<double>((t * 31 + i) % 100);
      Tensor x = full({n}, value, {.dtype = dtype, .device = dev});
      if (x.numel() != n || x.device() != dev) throw std::runtime_error("wrong tensor");
      // Read back through cpu:0: mini cannot hold the f64 copy.
      const std::vector<double> v = x.to(Device("cpu:0")).to(f64).to_vector<double>();
      for (int64_t k : {int64_t{0}, n / 2, n - 1}) {
        if (v[static_cast<size_t>(k)] != value) {
          throw std::runtime_error("element " + std::to_string(k) + " of " + std::to_string(n) + " on " + dev.str() +
                                   " is " + std::to_string(v[static_cast<size_t>(k)]));
        }
      }
      alive.push_back(std::move(x));
      if (alive.size() > 6) alive.erase(alive.begin() + (i % 6));
    }
  });
  done = true;
  trimmer.join();
  expect_no_errors(errors);
  for (const Device& dev : {cpu, mini}) runtime().synchronize(dev);
  EXPECT_EQ(runtime().memory_stats(cpu).allocated_bytes, cpu_before) << "memory leaked across threads on cpu:0";
  EXPECT_EQ(runtime().memory_stats(mini).allocated_bytes, mini_before) << "memory leaked across threads on mini:0";
}

// Each thread records on its own tape and differentiates; the gradients are
// the analytic ones. On mini:0 only add is native (the rest falls back to the
// CPU, counted in the shared fallback statistics).
TEST_F(Threads, IndependentTapesOnEveryThread) {
  std::atomic<int> gradients{0};
  auto errors = on_threads(kThreads, std::chrono::milliseconds(2500), [&](int t, Clock::time_point deadline) {
    for (int i = 0; i < 40 && Clock::now() < deadline; ++i) {
      const double a = 0.25 * (t + 1) + 0.01 * i;
      if (t % 2 == 0) {
        // d/dx sum(x * x * w + sin(x)) = 2 x w + cos(x); d/dw = x * x.
        Tensor x = full({5}, a, {.dtype = f64, .device = cpu});
        Tensor w = full({5}, 3.0, {.dtype = f64, .device = cpu});
        GradientTape tape;
        tape.watch(x);
        tape.watch(w);
        Tensor y = sum(x * x * w + sin(x));
        std::vector<Tensor> g = tape.gradient(y, {x, w});
        for (double gx : g[0].to_vector<double>()) {
          if (std::fabs(gx - (6 * a + std::cos(a))) > 1e-12) throw std::runtime_error("wrong d/dx");
        }
        for (double gw : g[1].to_vector<double>()) {
          if (std::fabs(gw - a * a) > 1e-12) throw std::runtime_error("wrong d/dw");
        }
      } else {
        // On mini:0: y = sum(x * w + x), d/dx = w + 1, d/dw = x (small integers, exact in f32).
        const float xv = static_cast<float>(t), wv = static_cast<float>(i % 7);
        Tensor x = full({4}, xv, {.device = mini});
        Tensor w = full({4}, wv, {.device = mini});
        GradientTape tape;
        tape.watch(x);
        tape.watch(w);
        Tensor y = sum(x * w + x);
        if (y.item<float>() != 4 * (xv * wv + xv)) throw std::runtime_error("wrong forward on mini:0");
        std::vector<Tensor> g = tape.gradient(y, {x, w});
        if (g[0].device() != mini) throw std::runtime_error("gradient left mini:0");
        if (g[0].to_vector<float>() != std::vector<float>(4, wv + 1)) throw std::runtime_error("wrong d/dx on mini");
        if (g[1].to_vector<float>() != std::vector<float>(4, xv)) throw std::runtime_error("wrong d/dw on mini");
      }
      gradients.fetch_add(1);
    }
  });
  expect_no_errors(errors);
  EXPECT_GE(gradients.load(), kThreads) << "every thread finishes at least one gradient";
}

}  // namespace
