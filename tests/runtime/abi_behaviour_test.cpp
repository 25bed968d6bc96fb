// How the core handles what plugin ABI 2.0 allows a backend to do that a
// healthy one never shows (strata_plugin.h sections 2-4), through the public
// API, on the behaviour plugins of tests/plugins/behaviour:
//   asyncfail  a kernel failure reported at the next synchronisation
//   lostdev    a device lost for good after three kernels
//   serial     a device that is not free-threaded, used by eight threads
//   wsp        a kernel asking for workspace within the memory limit, and
//              (STRATA_BEHAVIOUR_WSP_OVER_LIMIT, a process of its own because
//              plugin options are read once, at init) over it
//   asynccopy  host-to-device copies that complete later: the core stages
//              them through pinned blocks it must not reuse too early
// (faulty, whose calls fail on demand, has abi_fault_test.cpp.)
// These plugins are built with the tests, so a missing one fails the test.
#include <strata/strata.hpp>
#include <strata/plugin/strata_plugin.h>

#include "asynccopy_probe.h"
#include "behaviour_test_support.hpp"
#include "serial_probe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace strata;
using namespace behaviour_test;

#if !defined(STRATA_BEHAVIOUR_WSP_OVER_LIMIT) && !defined(STRATA_BEHAVIOUR_WSP_HUGE)

// ---- asyncfail: STRATA_ERROR_DEFERRED ------------------------------------------------------

class AsyncFail : public Behaviour {
 protected:
  void SetUp() override {
    Behaviour::SetUp();
    loaded_plugin("asyncfail");
    dev = Device("asyncfail:0");
    ASSERT_TRUE(runtime().device_info(dev).has_streams) << "asyncfail:0 must run with streams";
    // x[2, 5]: row r holds 10 r + column.
    x = from_data(std::vector<float>{0, 1, 2, 3, 4, 10, 11, 12, 13, 14}, {2, 5}, {.device = dev});
  }

  Tensor index(std::vector<int64_t> values) {
    Shape shape{static_cast<int64_t>(values.size())};
    return from_data(std::span<const int64_t>(values), shape, {.dtype = DType::i64, .device = dev});
  }

  /// `sync` (a synchronisation point) reports the deferred failure of
  /// index_select(x, 1, [1, 7, 0]), naming the op, the device and the index.
  template <class F>
  static void expect_reported(const std::string& what, F&& sync) {
    try {
      sync();
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_TRUE(dynamic_cast<const DeviceError*>(&e) != nullptr || dynamic_cast<const ValueError*>(&e) != nullptr)
          << "expected DeviceError or ValueError: " << m;
      EXPECT_TRUE(has(m, "strata::index_select")) << m;
      EXPECT_TRUE(has(m, "asyncfail:0")) << m;
      EXPECT_TRUE(has(m, "index 7")) << m;
      EXPECT_TRUE(has(m, "[0, 5)")) << m;
      return;
    }
    ADD_FAILURE() << what << " did not report the deferred failure";
  }

  /// After a reported failure the device works as before.
  void expect_device_carries_on() {
    EXPECT_NO_THROW(runtime().synchronize(dev)) << "the failure must be reported once";
    Tensor y = index_select(x, 1, index({4, 0}));
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{4, 0, 14, 10}));
    EXPECT_EQ((y + y).to_vector<float>(), (std::vector<float>{8, 0, 28, 20}));
    EXPECT_NO_THROW(runtime().synchronize(dev));
    EXPECT_FALSE(runtime().device_info(dev).lost);
  }

  Device dev;
  Tensor x;
};

TEST_F(AsyncFail, FailureSurfacesAtTheNextSynchronize) {
  Tensor y;
  ASSERT_NO_THROW(y = index_select(x, 1, index({1, 7, 0}))) << "an asynchronous failure is not reported at the call";
  expect_reported("synchronize", [&] { runtime().synchronize(dev); });
  expect_device_carries_on();
}

TEST_F(AsyncFail, FailureSurfacesWhenTheResultIsRead) {
  Tensor y = index_select(x, 1, index({1, 7, 0}));
  // A synchronous copy to the host is a synchronisation point.
  expect_reported("reading the result", [&] { (void)y.to_vector<float>(); });
  expect_device_carries_on();
}

// ---- lostdev: STRATA_ERROR_DEVICE_LOST -------------------------------------------------------

// One test: the device is lost once per process. The configuration sets
// {"lose_after": 3}: three kernels run, the fourth loses the device.
TEST_F(Behaviour, LostDeviceStaysLostAndOtherDevicesCarryOn) {
  loaded_plugin("lostdev");
  Device dev("lostdev:0");
  const std::string reason = "lostdev:0: device lost (simulated after 3 kernels)";
  Tensor a = from_data(std::vector<float>{1, 2, 3}, {3}, {.device = dev});  // copies, no kernel
  Tensor b = from_data(std::vector<float>{4, 5, 6}, {3}, {.device = dev});
  Tensor c = a + b;  // kernel 1
  Tensor d = a * b;  // kernel 2
  Tensor e = c * d;  // kernel 3
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{20, 70, 162}));
  EXPECT_FALSE(runtime().device_info(dev).lost);

  std::string first = message_of<DeviceLostError>("the fourth kernel", [&] { Tensor f = a + b; });
  EXPECT_TRUE(has(first, "lostdev:0")) << first;
  EXPECT_TRUE(has(first, reason)) << first;
  DeviceInfo info = runtime().device_info(dev);
  EXPECT_TRUE(info.lost);
  EXPECT_TRUE(has(info.lost_reason, reason)) << info.lost_reason;

  // Every later use fails at once, naming the device and the first message.
  auto expect_lost = [&](const std::string& what, auto&& f) {
    std::string m = message_of<DeviceLostError>(what, f);
    if (m.empty()) return;  // already reported
    EXPECT_TRUE(has(m, "lostdev:0")) << what << ": " << m;
    EXPECT_TRUE(has(m, reason)) << what << ": " << m;
  };
  expect_lost("an op", [&] { Tensor f = a * b; });
  expect_lost("a fill", [&] { Tensor f = full({3}, 1.0, {.device = dev}); });
  expect_lost("an allocation of a new size", [&] { Tensor f = empty({4096}, {.device = dev}); });
  expect_lost("an allocation of a size freed before", [&] { Tensor f = empty({3}, {.device = dev}); });
  expect_lost("a copy to the host", [&] { (void)a.to_vector<float>(); });
  expect_lost("a copy from the host", [&] { Tensor f = from_data(std::vector<float>{1}, {1}, {.device = dev}); });
  expect_lost("a copy from another device", [&] { Tensor f = full({3}, 1.0).to(dev); });
  expect_lost("synchronize", [&] { runtime().synchronize(dev); });
  EXPECT_TRUE(runtime().device_info(dev).lost);

  // The CPU carries on.
  Device cpu("cpu:0");
  Tensor p = from_data(std::vector<float>{1, 2, 3}, {3}, {.device = cpu});
  EXPECT_EQ((p * p + p).to_vector<float>(), (std::vector<float>{2, 6, 12}));
  EXPECT_FALSE(runtime().device_info(cpu).lost);
}

// ---- serial: the per-stream lock for a device that is not free-threaded ----------------------

std::vector<float> scaled(std::vector<float> v, float factor) {
  for (float& x : v) x *= factor;
  return v;
}

// Eight threads run backward(retain_graph) over one graph on serial:0. The
// plugin's kernels notice (and poison their output) when another call of
// the device is in flight: the core's per-stream lock must prevent that.
TEST_F(Behaviour, SerialDeviceIsNeverEnteredByTwoThreadsAtOnce) {
  PluginInfo plugin = loaded_plugin("serial");
  Device dev("serial:0");
  DeviceInfo info = runtime().device_info(dev);
  ASSERT_FALSE(info.free_threaded);
  const auto* probe =
      probe_extension<serial_probe_extension>(plugin.path, SERIAL_PROBE_EXTENSION, SERIAL_PROBE_VERSION);
  ASSERT_NE(probe, nullptr) << "no " << SERIAL_PROBE_EXTENSION << " on the table of the loaded " << plugin.path;
  const uint64_t violations_before = probe->violations();
  const uint64_t calls_before = probe->kernel_calls();

  // y = sum(x * w + x): dy/dx = w + 1, dy/dw = x, all small integers, so
  // every sum below is exact in f32.
  Tensor x = from_data(std::vector<float>{1, -1, 2, 3}, {4}, {.device = dev, .requires_grad = true});
  Tensor w = from_data(std::vector<float>{2, 3, 4, 5}, {4}, {.device = dev, .requires_grad = true});
  Tensor y = sum(x * w + x);
  ASSERT_EQ(y.device(), dev);
  EXPECT_EQ(y.item<float>(), 27.0f);
  y.backward({}, {.retain_graph = true});
  const std::vector<float> gx = x.grad().to_vector<float>();
  const std::vector<float> gw = w.grad().to_vector<float>();
  ASSERT_EQ(gx, (std::vector<float>{3, 4, 5, 6}));
  ASSERT_EQ(gw, (std::vector<float>{1, -1, 2, 3}));

  constexpr int kThreads = 8, kPasses = 150;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < kPasses; ++i) y.backward({}, {.retain_graph = true});
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(t)] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[static_cast<size_t>(t)], "") << "thread " << t;

  const float passes = 1.0f + kThreads * kPasses;  // the single-threaded one too
  EXPECT_EQ(x.grad().to_vector<float>(), scaled(gx, passes));
  EXPECT_EQ(w.grad().to_vector<float>(), scaled(gw, passes));
  EXPECT_EQ(probe->violations() - violations_before, 0u)
      << "kernels of serial:0 ran concurrently although it is not free-threaded";
  EXPECT_GE(probe->kernel_calls() - calls_before, static_cast<uint64_t>(kThreads * kPasses))
      << "the backward passes did not run on serial:0";
}

// ---- asynccopy: staged host-to-device copies -----------------------------------------------

// Forty 256 KiB tensors go to asynccopy:0 faster than its worker copies them
// (200 µs each, one at a time): the core stages each through a pinned block
// and must not write a block again before the copy reading it completed.
// The plugin checksums each source at issue and again when it copies.
TEST_F(Behaviour, StagedCopiesLeaveTheirPinnedSourcesAloneUntilDone) {
  PluginInfo plugin = loaded_plugin("asynccopy");
  Device dev("asynccopy:0");
  ASSERT_TRUE(runtime().device_info(dev).has_streams);
  const auto* probe =
      probe_extension<asynccopy_probe_extension>(plugin.path, ASYNCCOPY_PROBE_EXTENSION, ASYNCCOPY_PROBE_VERSION);
  ASSERT_NE(probe, nullptr) << "no " << ASYNCCOPY_PROBE_EXTENSION << " on the table of the loaded " << plugin.path;
  const uint64_t copies_before = probe->async_copies();
  const uint64_t violations_before = probe->violations();
  const uint64_t staged_before = runtime().device_memory_info(dev).staged_copies;

  constexpr int kTensors = 40;
  constexpr int64_t kElements = 64 * 1024;  // 256 KiB of f32: staged
  auto values = [](int k) {
    std::vector<float> v(static_cast<size_t>(kElements));
    for (int64_t i = 0; i < kElements; ++i) v[static_cast<size_t>(i)] = static_cast<float>(k * 1000 + i % 997);
    return v;
  };
  std::vector<Tensor> tensors;
  for (int k = 0; k < kTensors; ++k) {
    std::vector<float> v = values(k);
    tensors.push_back(from_data(v, {kElements}, {.device = dev}));
    std::fill(v.begin(), v.end(), -1.0f);  // the caller's memory is free to change at once
  }
  Tensor small = from_data(std::vector<float>{1, 2, 3}, {3}, {.device = dev});  // below the staging size
  EXPECT_GE(probe->async_copies() - copies_before, static_cast<uint64_t>(kTensors));
  EXPECT_EQ(runtime().device_memory_info(dev).staged_copies - staged_before, static_cast<uint64_t>(kTensors));
  EXPECT_GT(runtime().device_memory_info(dev).staging_bytes, 0u);

  // Kernels and reads come after the copies in stream order.
  EXPECT_EQ(small.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  for (int k = 0; k < kTensors; ++k) EXPECT_EQ(tensors[static_cast<size_t>(k)].to_vector<float>(), values(k)) << k;
  Tensor both = tensors[0] + tensors[1];
  EXPECT_EQ(both.device(), dev);
  std::vector<float> expected = values(1);
  const std::vector<float> first = values(0);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] += first[i];
  EXPECT_EQ(both.to_vector<float>(), expected);

  EXPECT_EQ(probe->violations() - violations_before, 0u)
      << "the core wrote a pinned staging block while a copy still read it";
  // Everything completed: trimming returns every staging block to the plugin.
  runtime().synchronize(dev);
  runtime().trim_memory(dev);
  EXPECT_EQ(runtime().device_memory_info(dev).staging_bytes, 0u);
  EXPECT_EQ(probe->pinned_blocks(), 0u);
}

// Reads from asynccopy:0 of 64 KiB and more go through pinned blocks too:
// asynchronous copies to the host, in chunks of at most 8 MiB with two in
// flight. The plugin fills a block with 0xa5 bytes when a copy into it is
// issued and writes the data 200 µs later, so a core that read a block
// before the chunk's event completed would return garbage.
TEST_F(Behaviour, StagedReadsWaitForTheirChunks) {
  PluginInfo plugin = loaded_plugin("asynccopy");
  Device dev("asynccopy:0");
  const auto* probe =
      probe_extension<asynccopy_probe_extension>(plugin.path, ASYNCCOPY_PROBE_EXTENSION, ASYNCCOPY_PROBE_VERSION);
  ASSERT_NE(probe, nullptr);
  auto values = [](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i % 100003) - 5.0f;
    return v;
  };
  auto staged = [&] { return runtime().device_memory_info(dev).staged_copies; };
  const int64_t one_chunk = 64 * 1024;                   // 256 KiB
  const int64_t three_chunks = (20 << 20) / 4 + 3;       // 20 MiB and 12 bytes: 8 + 8 + 4 MiB
  const std::vector<float> small_values = values(one_chunk), big_values = values(three_chunks);
  Tensor small = from_data(small_values, {one_chunk}, {.device = dev});
  Tensor big = from_data(big_values, {three_chunks}, {.device = dev});
  runtime().synchronize(dev);

  uint64_t before = staged(), copies_before = probe->async_copies();
  EXPECT_EQ(small.to_vector<float>(), small_values);
  EXPECT_EQ(staged() - before, 1u);
  EXPECT_EQ(probe->async_copies() - copies_before, 1u);

  before = staged();
  copies_before = probe->async_copies();
  EXPECT_EQ(big.to_vector<float>(), big_values);
  EXPECT_EQ(staged() - before, 1u) << "one staged read";
  EXPECT_EQ(probe->async_copies() - copies_before, 3u) << "in three chunks";

  // Across devices, and from an offset into the buffer.
  EXPECT_EQ(big.to(Device("cpu:0")).to_vector<float>(), big_values);
  Tensor tail = big.slice(0, three_chunks - one_chunk, three_chunks).contiguous();
  EXPECT_EQ(tail.to_vector<float>(), std::vector<float>(big_values.end() - one_chunk, big_values.end()));

  // Below 64 KiB a read is one synchronous copy.
  before = staged();
  Tensor tiny = from_data(std::vector<float>{4, 5, 6}, {3}, {.device = dev});
  EXPECT_EQ(tiny.to_vector<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(staged(), before);
  runtime().trim_memory(dev);
  EXPECT_EQ(runtime().device_memory_info(dev).staging_bytes, 0u);
}

// A DeviceTimer around a staged copy on asynccopy:0 is measured by the
// device (the plugin's event_elapsed): at least the worker's 200 µs delay,
// and start()/stop() do not wait for the copy. On cpu:0 (no streams) the
// host clock measures.
TEST_F(Behaviour, DeviceTimerMeasuresQueuedWork) {
  loaded_plugin("asynccopy");
  Device dev("asynccopy:0");
  runtime().synchronize(dev);
  DeviceTimer timer(dev);
  EXPECT_TRUE(timer.device_measured());
  std::vector<float> v(64 * 1024, 1.0f);  // 256 KiB: staged, copied 200 µs later
  timer.start();
  Tensor t = from_data(v, {static_cast<int64_t>(v.size())}, {.device = dev});
  timer.stop();
  const double ms = timer.elapsed_ms();
  EXPECT_GE(ms, 0.15) << "the copy's 200 µs delay lies between the marks";
  EXPECT_LT(ms, 5000.0);
  EXPECT_EQ(sum(t).item<float>(), 65536.0f);

  DeviceTimer host(Device("cpu:0"));
  EXPECT_FALSE(host.device_measured());
  std::string e = message_of<Error>("elapsed before start", [&] { host.elapsed_ms(); });
  EXPECT_TRUE(has(e, "cpu:0")) << e;
  EXPECT_TRUE(has(e, "start() and then stop()")) << e;
  e = message_of<Error>("stop before start", [&] { host.stop(); });
  EXPECT_TRUE(has(e, "stop() before start()")) << e;
  host.start();
  Tensor y = ones({256, 256}) + 1.0;
  host.stop();
  EXPECT_GE(host.elapsed_ms(), 0.0);
}

// ---- wsp: workspace within the memory limit ---------------------------------------------------

// The configuration: memory_limit 1 MiB, workspace_bytes 512 KiB.
TEST_F(Behaviour, WorkspaceWithinTheLimitIsCountedAndReleased) {
  loaded_plugin("wsp");
  Device dev("wsp:0");
  ASSERT_EQ(runtime().device_info(dev).memory_limit, std::optional<uint64_t>(uint64_t{1} << 20));
  Tensor a = from_data(std::vector<float>{1, 2, 3}, {3}, {.device = dev});
  Tensor b = from_data(std::vector<float>{10, 20, 30}, {3}, {.device = dev});
  const uint64_t live = runtime().memory_stats(dev).allocated_bytes;
  runtime().reset_peak_memory(dev);
  {
    Tensor c = a + b;
    EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{11, 22, 33}));
  }
  MemoryStats stats = runtime().memory_stats(dev);
  EXPECT_GE(stats.peak_allocated_bytes, live + (uint64_t{512} << 10)) << "the workspace must count against the device";
  EXPECT_EQ(stats.allocated_bytes, live) << "the workspace and the result must be released";
  EXPECT_EQ(runtime().fallback_count(), 0u);
}

#elif defined(STRATA_BEHAVIOUR_WSP_HUGE)

// ---- wsp: a workspace request near SIZE_MAX --------------------------------------------------

// The configuration: memory_limit 1 MiB, workspace_bytes SIZE_MAX - 1. The
// request must be refused as too large; an earlier core rounded it up past
// SIZE_MAX to 0 bytes and granted that.
TEST_F(Behaviour, AWorkspaceRequestNearSizeMaxIsRefused) {
  loaded_plugin("wsp");
  Device dev("wsp:0");
  Tensor a = from_data(std::vector<float>{1, 2, 3}, {3}, {.device = dev});
  Tensor b = from_data(std::vector<float>{10, 20, 30}, {3}, {.device = dev});
  const uint64_t live = runtime().memory_stats(dev).allocated_bytes;
  std::string m = message_of<OutOfMemoryError>("add with a workspace of SIZE_MAX - 1 bytes", [&] { Tensor c = a + b; });
  EXPECT_TRUE(has(m, "18446744073709551614")) << m;
  EXPECT_TRUE(has(m, "exceeds what any device can hold")) << m;
  EXPECT_EQ(runtime().memory_stats(dev).allocated_bytes, live) << "the failed op's output must be released";
  EXPECT_EQ(full({2}, 1.5, {.device = dev}).to_vector<float>(), (std::vector<float>{1.5f, 1.5f}));
}

#else  // STRATA_BEHAVIOUR_WSP_OVER_LIMIT

// ---- wsp: workspace over the memory limit ------------------------------------------------------

// The configuration: memory_limit 1 MiB, workspace_bytes 2 MiB.
TEST_F(Behaviour, WorkspaceOverTheLimitIsOutOfMemoryAndTheDeviceCarriesOn) {
  loaded_plugin("wsp");
  Device dev("wsp:0");
  Tensor a = from_data(std::vector<float>{1, 2, 3}, {3}, {.device = dev});
  Tensor b = from_data(std::vector<float>{10, 20, 30}, {3}, {.device = dev});
  const uint64_t live = runtime().memory_stats(dev).allocated_bytes;

  std::string m = message_of<OutOfMemoryError>("add with a 2 MiB workspace", [&] { Tensor c = a + b; });
  EXPECT_TRUE(has(m, "add")) << m;
  EXPECT_TRUE(has(m, "wsp:0")) << m;
  EXPECT_TRUE(has(m, "memory_limit")) << m;
  EXPECT_TRUE(has(m, "1.0 MiB") || has(m, "1 MiB") || has(m, "1048576")) << "the limit: " << m;
  EXPECT_EQ(runtime().memory_stats(dev).allocated_bytes, live) << "the failed op's output must be released";

  // Ops that need no workspace still work: fill, and copy (a transpose made
  // contiguous).
  {
    Tensor f = full({2, 3}, 2.5, {.device = dev});
    Tensor g = from_data(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, {.device = dev}).transpose(0, 1).contiguous();
    EXPECT_EQ(f.to_vector<float>(), (std::vector<float>(6, 2.5f)));
    EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
    EXPECT_EQ(g.device(), dev);
  }
  EXPECT_EQ(runtime().fallback_count(), 0u) << "fill and copy must run on wsp:0";

  // Nothing leaked: the core's count is back where it was, and once the
  // cache is emptied the plugin holds exactly the live tensors a and b.
  EXPECT_EQ(runtime().memory_stats(dev).allocated_bytes, live);
  runtime().empty_cache();
  DeviceMemoryInfo mem = runtime().device_memory_info(dev);
  ASSERT_TRUE(mem.plugin_bytes_in_use.has_value());
  EXPECT_EQ(*mem.plugin_bytes_in_use, live);
}

#endif  // STRATA_BEHAVIOUR_WSP_OVER_LIMIT

}  // namespace
