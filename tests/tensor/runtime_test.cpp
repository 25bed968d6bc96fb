// runtime_test.cpp — printing, failed ops leave their inputs alone, the
// caching allocator's statistics, and concurrent use from several threads.
#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "reference.hpp"

#include "../common/test_device.hpp"


namespace strata_test {
namespace {

namespace s = strata;
using s::DType;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

#define EXPECT_CONTAINS(text, part) \
  EXPECT_TRUE(contains(text, part)) << "\"" << (text) << "\" lacks \"" << (part) << "\""

TEST(Printing, ValuesShapeDtypeDevice) {
  Tensor t = s::from_data(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  std::string text = t.to_string();
  std::string dev = "device=" + t.device().str();
  EXPECT_CONTAINS(text, "tensor(");
  EXPECT_CONTAINS(text, "[[1.0000, 2.0000, 3.0000]");
  EXPECT_CONTAINS(text, "[4.0000, 5.0000, 6.0000]]");
  EXPECT_CONTAINS(text, "shape=[2, 3]");
  EXPECT_CONTAINS(text, "dtype=f32");
  EXPECT_CONTAINS(text, dev);  // the default device: cpu:0, or STRATA_TEST_DEVICE
  EXPECT_LT(text.find("3.0000"), text.find("4.0000"));
  EXPECT_CONTAINS(text.substr(text.find("3.0000")), "\n") << "rows go on separate lines";
  std::ostringstream os;
  os << t;
  EXPECT_EQ(os.str(), text);
  std::ostringstream ds;
  ds << t.device();
  EXPECT_EQ(ds.str(), t.device().str());

  // A view prints its own values, not its storage order.
  EXPECT_CONTAINS(t.mT().to_string(), "[[1.0000, 4.0000]");
  EXPECT_CONTAINS(t.mT().to_string(), "shape=[3, 2]");
}

TEST(Printing, DtypesAndSpecialValues) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  std::string i = s::arange(3).to_string();
  EXPECT_CONTAINS(i, "[0, 1, 2]");
  EXPECT_CONTAINS(i, "dtype=i64");
  std::string b = s::cast(s::tensor({0, 2}), s::boolean).to_string();
  EXPECT_CONTAINS(b, "[false, true]");
  EXPECT_CONTAINS(b, "dtype=bool");
  std::string scalar = s::scalar_tensor(2.5, {.dtype = s::f64, .device = {}}).to_string();
  EXPECT_CONTAINS(scalar, "tensor(2.5000");
  EXPECT_CONTAINS(scalar, "shape=[]");
  EXPECT_CONTAINS(scalar, "dtype=f64");
  const float inf = std::numeric_limits<float>::infinity();
  std::string special = s::tensor({std::nanf(""), inf, -inf, 1e-5f, 0.0f}).to_string();
  EXPECT_CONTAINS(special, "nan");
  EXPECT_CONTAINS(special, "-inf");
  EXPECT_CONTAINS(special, "e-05");
  EXPECT_CONTAINS(s::zeros({0, 3}).to_string(), "shape=[0, 3]");
}

TEST(Printing, LargeTensorsAreSummarized) {
  std::string text = s::arange(0.0, 5000.0, 1.0, {.dtype = s::f32, .device = {}}).to_string();
  EXPECT_CONTAINS(text, "0.0000, 1.0000, 2.0000, ...");
  EXPECT_CONTAINS(text, "4999.0000");
  EXPECT_FALSE(contains(text, "2500.0000")) << text;
  EXPECT_LT(text.size(), 200u);
  std::string grid = s::zeros({100, 100}).to_string();
  EXPECT_CONTAINS(grid, "...");
  EXPECT_CONTAINS(grid, "shape=[100, 100]");
  EXPECT_LT(grid.size(), 1000u) << "a 100x100 tensor should print 3+3 rows of 3+3 values";
  // Small tensors are printed in full.
  EXPECT_FALSE(contains(s::zeros({10, 10}).to_string(), "..."));
}

TEST(FailedOps, LeaveTheirInputsUnchanged) {
  Tensor a = s::from_data(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = a.mT();  // [3, 2] view
  Tensor b = s::tensor({1, 2, 3, 4});
  const std::vector<float> a_values{1, 2, 3, 4, 5, 6};
  auto unchanged = [&] {
    EXPECT_EQ(a.to_vector<float>(), a_values);
    EXPECT_EQ(a.sizes(), (Shape{2, 3}));
    EXPECT_EQ(t.sizes(), (Shape{3, 2}));
    EXPECT_EQ(Shape(t.strides().begin(), t.strides().end()), (Shape{1, 3}));
    EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
    EXPECT_EQ(b.dtype(), s::f32);
  };
  EXPECT_THROW(s::add(t, b), s::ShapeError);
  unchanged();
  EXPECT_THROW(s::matmul(a, b), s::ShapeError);
  unchanged();
  EXPECT_THROW(t.copy_(b), s::ShapeError);
  unchanged();
  EXPECT_THROW(a.view({6, 2}), s::ShapeError);
  unchanged();
  // An index out of range is found by the kernel: at the call where kernels
  // run synchronously (cpu:0, a ValueError), at the next synchronisation on
  // a device that runs them asynchronously (vulkan:0, cuda:0: a DeviceError
  // naming the op). Either way the inputs stay as they were.
  try {
    Tensor r = s::index_select(a, 1, s::from_data(std::vector<int64_t>{0, 3}, {2}));
    s::runtime().synchronize(r.device());
    ADD_FAILURE() << "an index out of range was not reported on " << a.device().str();
  } catch (const s::ValueError&) {
  } catch (const s::DeviceError& e) {
    EXPECT_CONTAINS(std::string(e.what()), "index_select");
    EXPECT_CONTAINS(std::string(e.what()), "out of range");
  }
  unchanged();
  EXPECT_THROW(s::cat({a, b}), s::ShapeError);
  unchanged();
  EXPECT_THROW(s::sum(t, {2}), s::IndexError);
  unchanged();
}

TEST(Memory, AllocatedBytesReturnAfterTensorsDie) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  s::Device dev = s::runtime().default_device();
  s::runtime().synchronize(dev);
  const s::MemoryStats before = s::runtime().memory_stats(dev);
  {
    Tensor a = s::zeros({1000});                                      // 4000 bytes
    Tensor b = s::ones({256, 256}, {.dtype = s::f64, .device = {}});  // 512 KiB
    Tensor c = s::exp(b) + 1.0;
    Tensor view = c.mT().slice(0, 0, 128);  // views own no memory
    s::runtime().synchronize(dev);
    const s::MemoryStats during = s::runtime().memory_stats(dev);
    EXPECT_GE(during.allocated_bytes, before.allocated_bytes + 4000 + 2 * 256 * 256 * 8);
    EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
    EXPECT_EQ(view.sizes(), (Shape{128, 256}));
  }
  s::runtime().synchronize(dev);
  const s::MemoryStats after = s::runtime().memory_stats(dev);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_GE(after.peak_allocated_bytes, before.allocated_bytes + 4000 + 2 * 256 * 256 * 8);

  const bool caching = s::runtime().config().device(dev.backend(), dev.index()).allocator_cache;
  if (caching) {
    EXPECT_GE(after.cached_bytes, 4000u + 2 * 256 * 256 * 8) << "freed blocks are kept for reuse";
    // The same sizes again come from the cache, not from the plugin.
    {
      Tensor a = s::zeros({1000});
      Tensor b = s::ones({256, 256}, {.dtype = s::f64, .device = {}});
    }
    EXPECT_EQ(s::runtime().memory_stats(dev).device_allocations, after.device_allocations);
    s::runtime().empty_cache();
    EXPECT_EQ(s::runtime().memory_stats(dev).cached_bytes, 0u);
    EXPECT_EQ(s::runtime().memory_stats(dev).allocated_bytes, before.allocated_bytes);
  }
}

/// 200 small ops on per-thread inputs; returns every intermediate result's
/// values (the caller compares them across runs).
std::vector<std::vector<double>> workload(int seed) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> xs(48), ws(64);
  for (double& v : xs) v = u(rng);
  for (double& v : ws) v = u(rng);
  Tensor x = s::from_data(std::span<const double>(xs), {6, 8}, {.dtype = s::f32, .device = {}});
  Tensor w = s::from_data(std::span<const double>(ws), {8, 8}, {.dtype = s::f32, .device = {}});
  std::vector<std::vector<double>> out;
  for (int i = 0; i < 200; ++i) {
    switch (i % 8) {
      case 0:
        x = s::matmul(x, w) * 0.3;
        break;
      case 1:
        x = s::tanh(x) + 0.1;
        break;
      case 2:
        x = s::softmax(x, 1) * 4.0 - 0.5;
        break;
      case 3:
        x = s::where(s::gt(x, s::zeros_like(x)), x, x * -0.5);
        break;
      case 4:
        x = x - s::mean(x, {0}, true);
        break;
      case 5:
        x = s::cat({x.slice(1, 4, 8), x.slice(1, 0, 4)}, 1);
        break;
      case 6:
        x = s::gelu(x.mT().contiguous()).mT();
        break;
      case 7:
        x = x + s::sum(x, {1}, true) * 0.01;
        break;
    }
    out.push_back(x.to_vector<double>());
  }
  return out;
}

TEST(Threads, ConcurrentOpsMatchASingleThread) {
  constexpr int kThreads = 4;
  std::vector<std::vector<std::vector<double>>> serial;
  for (int t = 0; t < kThreads; ++t) serial.push_back(workload(100 + t));

  s::Device dev = s::runtime().default_device();
  const uint64_t allocated = s::runtime().memory_stats(dev).allocated_bytes;
  std::vector<std::vector<std::vector<double>>> parallel(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        parallel[static_cast<size_t>(t)] = workload(100 + t);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    });
  }
  for (std::thread& th : threads) th.join();

  for (int t = 0; t < kThreads; ++t) {
    auto k = static_cast<size_t>(t);
    ASSERT_EQ(errors[k], "") << "thread " << t << " threw";
    ASSERT_EQ(parallel[k].size(), serial[k].size()) << "thread " << t;
    for (size_t step = 0; step < serial[k].size(); ++step) {
      const std::vector<double>& want = serial[k][step];
      const std::vector<double>& got = parallel[k][step];
      ASSERT_EQ(got.size(), want.size()) << "thread " << t << " step " << step;
      for (size_t i = 0; i < want.size(); ++i) {
        // Same kernels on the same data: equal up to reduction order.
        ASSERT_NEAR(got[i], want[i], 1e-5 * (1.0 + std::fabs(want[i])))
            << "thread " << t << " step " << step << " (op " << step % 8 << ") element " << i;
      }
    }
  }
  s::runtime().synchronize(dev);
  EXPECT_EQ(s::runtime().memory_stats(dev).allocated_bytes, allocated) << "memory leaked across threads";
}

TEST(Threads, ConcurrentDeviceLookupAndSeededRandom) {
  // Device lookups and the global generator are safe to share; each thread
  // draws whole tensors, so the multiset of draws equals a serial run's.
  s::manual_seed(5);
  std::vector<std::vector<double>> serial;
  for (int i = 0; i < 40; ++i) serial.push_back(s::rand({16}).to_vector<double>());
  s::manual_seed(5);
  std::vector<std::vector<double>> drawn;
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10; ++i) {
        s::Device d("cpu:0");
        std::vector<double> v = s::rand({16}, {.dtype = s::f32, .device = d}).to_vector<double>();
        std::lock_guard lock(mutex);
        drawn.push_back(std::move(v));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  std::sort(serial.begin(), serial.end());
  std::sort(drawn.begin(), drawn.end());
  EXPECT_EQ(drawn, serial);
}

}  // namespace
}  // namespace strata_test

namespace {
TEST(MemoryStats, PeakCanBeReset) {
  strata::Device dev = strata::runtime().default_device();
  { strata::Tensor big = strata::zeros({1 << 20}); }
  strata::runtime().reset_peak_memory(dev);
  auto stats = strata::runtime().memory_stats(dev);
  EXPECT_EQ(stats.peak_allocated_bytes, stats.allocated_bytes);
  strata::Tensor t = strata::zeros({1 << 16});
  EXPECT_GE(strata::runtime().memory_stats(dev).peak_allocated_bytes, stats.allocated_bytes + (1u << 18));
}
}  // namespace
