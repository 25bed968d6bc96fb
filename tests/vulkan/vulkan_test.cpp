// vulkan_test.cpp — the Vulkan plugin through the public API: the shipped
// configuration selects vulkan:0, host<->device copies are exact for every
// stored dtype and for strided views, the configured memory limit is a clean
// OutOfMemoryError, a tanh MLP's first- and second-order gradients on
// vulkan:0 equal those on cpu:0, and a DeviceTimer on vulkan:0 is measured by
// the device's timestamps. The whole suite runs with the fallback policy
// "error", so nothing here silently runs on the CPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <strata/transforms.hpp>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "../common/required_devices.hpp"

namespace {

namespace fs = std::filesystem;
using strata::Device;
using strata::DType;
using strata::Tensor;

constexpr uint64_t kLimit = 64ull << 20;  // devices.vulkan.memory_limit of the suite's configuration

/// Why vulkan:0 is missing, from the runtime's plugin list.
std::string unavailable_reason() {
  for (const strata::PluginInfo& p : strata::runtime().plugins()) {
    if (p.name == "vulkan") return p.loaded ? "loaded without devices" : p.reason;
  }
  return "libstrata_plugin_vulkan.so not found in " STRATA_PLUGIN_DIR;
}

/// Configures the process once: the shipped vulkan.json's preference, a
/// memory limit for vulkan:0, no pipeline cache on disk, fallback "error".
class VulkanEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const fs::path path = fs::temp_directory_path() / ("strata-vk-test-" + std::to_string(::getpid()) + ".json");
    std::ofstream(path) << R"({"version": 1, "plugins": {"paths": [")" << STRATA_PLUGIN_DIR << R"("]},
      "prefer": ["vulkan"],
      "devices": {"vulkan": {"memory_limit": "64MiB", "options": {"pipeline_cache": false}}},
      "fallback": {"policy": "error"},
      "logging": {"level": "warn"}})";
    strata::runtime().load_config(path.string());
    fs::remove(path);
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new VulkanEnvironment);

class Vulkan : public ::testing::Test {
 protected:
  void SetUp() override {
    STRATA_ACQUIRE_DEVICE("vulkan:0", vk_);  // a failure where STRATA_REQUIRED_DEVICES lists it
  }
  Device vk_;
  Device cpu_{"cpu:0"};
};

TEST_F(Vulkan, ShippedConfigSelectsVulkan) {
  strata::Config shipped = strata::Config::from_file(STRATA_VULKAN_CONFIG);
  ASSERT_FALSE(shipped.prefer.empty());
  EXPECT_EQ(shipped.prefer.front(), "vulkan");
  // This suite's configuration has the same preference: the default is vulkan:0
  // although lavapipe is a CPU-class device and the CPU plugin is loaded.
  EXPECT_EQ(strata::runtime().default_device(), vk_);
  const strata::DeviceInfo info = strata::runtime().device_info(vk_);
  EXPECT_EQ(info.compute_capability.rfind("vulkan 1.", 0), 0u) << info.compute_capability;
  EXPECT_TRUE(info.has_streams);
  EXPECT_GT(info.kernel_count, 150);
  // ABI 2.0 properties: the plugin caches memory itself (the core passes
  // allocations through), is not free threaded, and names the hardware.
  EXPECT_TRUE(info.plugin_caches_memory);
  EXPECT_FALSE(info.free_threaded);
  EXPECT_EQ(info.uuid.size(), 36u) << info.uuid;
  const strata::DeviceMemoryInfo memory = strata::runtime().device_memory_info(vk_);
  ASSERT_TRUE(memory.total_bytes.has_value());
  ASSERT_TRUE(memory.free_bytes.has_value());
  EXPECT_LE(*memory.free_bytes, *memory.total_bytes);
  EXPECT_TRUE(memory.plugin_bytes_in_use.has_value());
  EXPECT_TRUE(memory.plugin_bytes_reserved.has_value());
}

/// Runs `body` (an op and a read of its result) and returns the message of
/// the strata::Error it throws, or "" when it throws none.
template <class Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const strata::Error& e) {
    return e.what();
  }
  return {};
}

TEST_F(Vulkan, OutOfRangeIndicesFailAtTheNextSynchronisationAndTheDeviceCarriesOn) {
  // The shaders check indices as they read them; the error surfaces at the
  // next synchronisation point (here: reading the result), naming the op.
  Tensor x = strata::full({5, 2}, 1.5, {.device = vk_});
  const std::vector<int64_t> bad{0, 7, 1};
  Tensor index = strata::from_data(std::span<const int64_t>(bad), {3}, {.dtype = DType::i64, .device = cpu_}).to(vk_);
  const std::string m = error_of([&] { (void)strata::index_select(x, 0, index).to(cpu_); });
  ASSERT_FALSE(m.empty()) << "an out-of-range index went unreported";
  for (const char* part : {"index_select", "vulkan:0", "7", "out of range"})
    EXPECT_NE(m.find(part), std::string::npos) << "\"" << part << "\" missing from: " << m;
  // Reported once; the device carries on.
  strata::runtime().synchronize(vk_);
  EXPECT_FLOAT_EQ(strata::sum(x).item<float>(), 15.0f);
  const std::vector<int64_t> good{4, 0};
  Tensor ok = strata::from_data(std::span<const int64_t>(good), {2}, {.dtype = DType::i64, .device = cpu_}).to(vk_);
  EXPECT_EQ(strata::index_select(x, 0, ok).to(cpu_).to_vector<float>(), std::vector<float>(4, 1.5f));
}

/// Bit patterns of a tensor's f32 values (NaN payloads included).
std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> out;
  for (float v : t.to_vector<float>()) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

TEST_F(Vulkan, CopiesRoundTripExactlyForEveryStoredDtype) {
  std::mt19937 rng(7);
  // f32: arbitrary bit patterns, NaN payloads, infinities, subnormals, -0.
  std::vector<float> f32;
  for (int i = 0; i < 1000; ++i) f32.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (uint32_t special : {0x7fc00001u, 0xffbfffffu, 0x7f800000u, 0x00000001u, 0x80000000u}) {
    f32.push_back(std::bit_cast<float>(special));
  }
  Tensor x = strata::from_data(std::span<const float>(f32), {static_cast<int64_t>(f32.size())}, {.device = cpu_});
  EXPECT_EQ(bits(x.to(vk_).to(cpu_)), bits(x));

  // i64 beyond 2^53, i32 extremes, f16 and bool values.
  std::vector<int64_t> i64{0, -1, (int64_t{1} << 62) + 12345, INT64_MIN, INT64_MAX, 9007199254740993};
  Tensor l = strata::from_data(std::span<const int64_t>(i64), {6}, {.dtype = DType::i64, .device = cpu_});
  EXPECT_EQ(l.to(vk_).to(cpu_).to_vector<int64_t>(), i64);
  std::vector<int32_t> i32{INT32_MIN, -7, 0, 3, INT32_MAX};
  Tensor n = strata::from_data(std::span<const int32_t>(i32), {5}, {.dtype = DType::i32, .device = cpu_});
  EXPECT_EQ(n.to(vk_).to(cpu_).to_vector<int32_t>(), i32);
  std::vector<float> halves{0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f, 1024.5f};
  Tensor h = strata::from_data(std::span<const float>(halves), {8}, {.dtype = DType::f16, .device = cpu_});
  EXPECT_EQ(bits(h.to(vk_).to(cpu_).to(DType::f32)), bits(h.to(DType::f32)));
  Tensor b = strata::gt(n, strata::full({5}, 0.0, {.dtype = DType::i32, .device = cpu_}));
  ASSERT_EQ(b.device(), cpu_);
  EXPECT_EQ(b.to(vk_).to(cpu_).to_vector<bool>(), b.to_vector<bool>());
}

TEST_F(Vulkan, StridedViewsCopyExactlyInBothDirections) {
  strata::manual_seed(11);
  Tensor host = strata::randn({6, 8, 5}, {.device = cpu_});
  Tensor dev = host.to(vk_);
  // Strided reads: the device's copy kernel compacts permuted, sliced and
  // broadcast views.
  auto views = [](const Tensor& t) {
    return std::vector<Tensor>{t.permute({2, 0, 1}), t.slice(1, 1, 8, 3), t.transpose(0, 2).slice(0, 4, 5),
                               t.slice(0, 2, 3).expand({4, 8, 5})};
  };
  std::vector<Tensor> on_cpu = views(host);
  std::vector<Tensor> on_vk = views(dev);
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    Tensor compact = on_vk[i].contiguous();
    EXPECT_EQ(compact.device(), vk_);
    EXPECT_EQ(bits(compact.to(cpu_)), bits(on_cpu[i].contiguous())) << "view " << i;
    EXPECT_EQ(bits(on_vk[i].to(cpu_)), bits(on_cpu[i])) << "view " << i;
  }
  // Strided writes: copy_ into every other column of a device tensor.
  Tensor target_vk = strata::full({6, 10}, -1.0, {.device = vk_});
  Tensor target_cpu = strata::full({6, 10}, -1.0, {.device = cpu_});
  Tensor src = strata::randn({6, 5}, {.device = cpu_});
  target_vk.slice(1, 0, 10, 2).copy_(src.to(vk_));
  target_cpu.slice(1, 0, 10, 2).copy_(src);
  EXPECT_EQ(bits(target_vk.to(cpu_)), bits(target_cpu));
  // And from a transposed device view into a device tensor.
  Tensor t = strata::empty({5, 6}, {.device = vk_});
  t.copy_(src.to(vk_).transpose(0, 1));
  EXPECT_EQ(bits(t.to(cpu_)), bits(src.transpose(0, 1).contiguous()));
}

TEST_F(Vulkan, MemoryLimitIsAnOutOfMemoryErrorAndTheDeviceCarriesOn) {
  EXPECT_EQ(strata::runtime().memory_stats(vk_).limit_bytes, std::optional<uint64_t>(kLimit));
  Tensor keep = strata::full({1024}, 3.0, {.device = vk_});
  try {
    Tensor big = strata::empty({static_cast<int64_t>(kLimit / 4) + 1024}, {.device = vk_});
    FAIL() << "allocating past the memory limit did not throw";
  } catch (const strata::OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("vulkan:0"), std::string::npos) << m;
    EXPECT_NE(m.find("memory_limit"), std::string::npos) << m;
  }
  // Several tensors up to the limit and back, then the surviving tensor is intact.
  for (int round = 0; round < 3; ++round) {
    std::vector<Tensor> chunks;
    for (int i = 0; i < 6; ++i) chunks.push_back(strata::full({2 << 20}, static_cast<double>(i), {.device = vk_}));
    EXPECT_FLOAT_EQ(strata::sum(chunks[5]).item<float>(), 5.0f * static_cast<float>(2 << 20));
  }
  EXPECT_FLOAT_EQ(strata::sum(keep).item<float>(), 3072.0f);
}

/// A 2-layer tanh MLP's loss as a function of all its parameters packed in
/// one vector, so that grad and hessian see a single input.
struct Mlp {
  static constexpr int64_t kIn = 3, kHidden = 5, kOut = 2, kBatch = 7;
  static constexpr int64_t kParams = kIn * kHidden + kHidden + kHidden * kOut + kOut;
  Tensor x, y;

  Tensor loss(const Tensor& theta) const {
    int64_t at = 0;
    auto take = [&](int64_t n, const strata::Shape& shape) {
      Tensor part = theta.slice(0, at, at + n).reshape(shape);
      at += n;
      return part;
    };
    Tensor w1 = take(kIn * kHidden, {kIn, kHidden});
    Tensor b1 = take(kHidden, {kHidden});
    Tensor w2 = take(kHidden * kOut, {kHidden, kOut});
    Tensor b2 = take(kOut, {kOut});
    Tensor h = strata::tanh(strata::matmul(x, w1) + b1);
    Tensor out = strata::tanh(strata::matmul(h, w2) + b2);
    Tensor diff = out - y;
    return strata::sum(diff * diff) * (1.0 / kBatch);
  }
};

void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol, const char* what) {
  std::vector<float> g = got.to_vector<float>();
  std::vector<float> w = want.to_vector<float>();
  ASSERT_EQ(g.size(), w.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(std::isfinite(g[i])) << what << " [" << i << "]";
    worst = std::max(worst, std::fabs(g[i] - w[i]) / (atol + rtol * std::fabs(w[i])));
  }
  EXPECT_LE(worst, 1.0) << what << ": worst error relative to tolerance";
}

TEST_F(Vulkan, MlpGradientsAndHessianMatchTheCpu) {
  strata::manual_seed(3);
  Tensor x = strata::randn({Mlp::kBatch, Mlp::kIn}, {.device = cpu_});
  Tensor y = strata::randn({Mlp::kBatch, Mlp::kOut}, {.device = cpu_});
  Tensor theta = strata::randn({Mlp::kParams}, {.device = cpu_}) * 0.5;
  Tensor v = strata::randn({Mlp::kParams}, {.device = cpu_});
  ASSERT_EQ(theta.device(), cpu_);
  Mlp on_cpu{x, y};
  Mlp on_vk{x.to(vk_), y.to(vk_)};
  auto f_cpu = [&](const Tensor& t) { return on_cpu.loss(t); };
  auto f_vk = [&](const Tensor& t) { return on_vk.loss(t); };

  strata::runtime().reset_fallback_stats();
  Tensor g_vk = strata::grad(f_vk)(theta.to(vk_));
  EXPECT_EQ(g_vk.device(), vk_);
  expect_close(g_vk.to(cpu_), strata::grad(f_cpu)(theta), 1e-4, 1e-6, "gradient");

  // Second order three ways: the full Hessian (reverse over reverse), a
  // Hessian-vector product (forward over reverse), and a tape of tapes.
  Tensor h_vk = strata::hessian(f_vk, theta.to(vk_));
  Tensor h_cpu = strata::hessian(f_cpu, theta);
  EXPECT_EQ(h_vk.sizes(), (strata::Shape{Mlp::kParams, Mlp::kParams}));
  expect_close(h_vk.to(cpu_), h_cpu, 1e-3, 1e-5, "hessian");
  expect_close(strata::hvp(f_vk, theta.to(vk_), v.to(vk_)).to(cpu_), strata::hvp(f_cpu, theta, v), 1e-3, 1e-5, "hvp");

  auto second_order = [&](const Mlp& mlp, const Tensor& t) {
    strata::GradientTape outer;
    outer.watch(t);
    strata::GradientTape inner(strata::TapeOptions{.higher_order = true});
    inner.watch(t);
    Tensor loss = mlp.loss(t);
    Tensor g = inner.gradient(loss, {t})[0];
    Tensor gg = strata::sum(g * g);
    return outer.gradient(gg, {t})[0];
  };
  Tensor theta_vk = theta.to(vk_);
  expect_close(second_order(on_vk, theta_vk).to(cpu_), second_order(on_cpu, theta), 1e-3, 1e-5, "d|g|^2/dtheta");
  // Every op above ran on vulkan:0 (the policy is "error", but check the count too).
  EXPECT_EQ(strata::runtime().fallback_count(), 0u);
}

TEST_F(Vulkan, AsynchronousWorkIsOrderedAndSynchronizeWaits) {
  // Many small kernels, no host reads in between: they are batched into few
  // submissions and must still run in order.
  Tensor acc = strata::full({257}, 0.0, {.device = vk_});
  for (int i = 0; i < 600; ++i) acc = acc + 1.0;
  strata::runtime().synchronize(vk_);
  std::vector<float> values = acc.to_vector<float>();
  for (float v : values) ASSERT_EQ(v, 600.0f);
  // A device tensor overwritten (by a device copy) while kernels reading it
  // are still queued: those kernels see the old contents, later ones the new.
  Tensor src = strata::full({1000}, 1.0, {.device = vk_});
  Tensor before = src * 2.0;
  std::vector<float> fives(1000, 5.0f);
  src.copy_(strata::from_data(std::span<const float>(fives), {1000}, {.device = cpu_}).to(vk_));
  Tensor after = src * 2.0;
  EXPECT_FLOAT_EQ(strata::sum(before).item<float>(), 2000.0f);
  EXPECT_FLOAT_EQ(strata::sum(after).item<float>(), 10000.0f);
}

/// vulkan:0, required: a test using it fails (never skips) without it.
Device required_vulkan() {
  try {
    return Device("vulkan:0");
  } catch (const strata::DeviceError& e) {
    ADD_FAILURE() << "vulkan:0 is required (lavapipe in CI): " << e.what() << "; " << unavailable_reason();
    throw;
  }
}

double host_ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// lavapipe stores no f64: creating one on vulkan:0, moving one there or
// casting to f64 there is a DTypeError naming the op, the device, the dtype
// and what the device stores, and vulkan:0 carries on. (Required device.)
TEST(VulkanDtypes, UnstoredDtypeIsADTypeErrorNamingOpDeviceAndDtype) {
  const Device vk = required_vulkan();
  const strata::DeviceInfo info = strata::runtime().device_info(vk);
  ASSERT_EQ(std::find(info.dtypes.begin(), info.dtypes.end(), DType::f64), info.dtypes.end())
      << "this lavapipe stores f64: the case needs a dtype vulkan:0 does not store";
  std::string stored;
  for (DType t : info.dtypes) stored += (stored.empty() ? "" : ", ") + std::string(strata::dtype_name(t));
  auto message = [](auto&& body) -> std::string {
    try {
      body();
    } catch (const strata::DTypeError& e) {
      return e.what();
    }
    return "(no DTypeError)";
  };
  EXPECT_EQ(message([&] { (void)strata::zeros({2, 3}, {.dtype = DType::f64, .device = vk}); }),
            "zeros: vulkan:0 cannot store f64 (it stores " + stored + ")");
  const Tensor host = strata::full({3}, 0.25, {.dtype = DType::f64, .device = Device("cpu:0")});
  EXPECT_EQ(message([&] { (void)host.to(vk); }), "to_device: vulkan:0 cannot store f64 (it stores " + stored + ")");
  const Tensor x = strata::full({3}, 1.5, {.device = vk});
  const std::string cast = message([&] { (void)strata::cast(x, DType::f64); });
  EXPECT_NE(cast.find("cast(f32[3]) on vulkan:0: vulkan:0 cannot store f64"), std::string::npos) << cast;
  // The inputs and the device are unharmed.
  EXPECT_EQ(host.to_vector<double>(), (std::vector<double>{0.25, 0.25, 0.25}));
  EXPECT_EQ((x + x).to_vector<float>(), (std::vector<float>{3, 3, 3}));
}

// DeviceTimer on vulkan:0 reads the device's timestamps (the plugin's
// event_elapsed): start() and stop() only queue them, and the time measured
// lies within the host's time around it.
TEST(VulkanDeviceTimer, MeasuresQueuedWorkWithTheDevicesTimestamps) {
  const Device vk = required_vulkan();
  strata::DeviceTimer timer(vk);
  EXPECT_TRUE(timer.device_measured());
  Tensor a = strata::full({1024, 1024}, 0.5, {.device = vk});  // 4 MiB
  Tensor w = strata::full({256, 256}, 0.25, {.device = vk});
  strata::runtime().synchronize(vk);

  // An empty interval: small and not negative.
  timer.start();
  timer.stop();
  const double empty = timer.elapsed_ms();
  EXPECT_GE(empty, 0.0);
  EXPECT_LT(empty, 50.0);

  // 20 adds of 4 MiB and 4 matmuls of 256 x 256, queued between the marks.
  const auto t0 = std::chrono::steady_clock::now();
  timer.start();
  Tensor y = a;
  for (int i = 0; i < 20; ++i) y = y + a;
  Tensor m = w;
  for (int i = 0; i < 4; ++i) m = strata::matmul(m, w);
  timer.stop();
  const double ms = timer.elapsed_ms();
  const double wall = host_ms_since(t0);
  EXPECT_GT(ms, 0.0);
  EXPECT_GT(ms, empty);
  EXPECT_LE(ms, wall + 1.0) << "the device time lies within the host time around it";
  std::printf(
      "[ timing   ] vulkan:0 DeviceTimer: empty %.4f ms, 20 adds of 4 MiB + 4 matmuls 256^2 %.3f ms "
      "(host %.3f ms)\n",
      empty, ms, wall);
  // The work itself ran: y = 21 * 0.5; each matmul multiplies by 256 * 0.25 = 64.
  EXPECT_FLOAT_EQ(y.to(Device("cpu:0")).to_vector<float>()[12345], 10.5f);
  EXPECT_FLOAT_EQ(m.to(Device("cpu:0")).to_vector<float>()[7], 0.25f * 64.0f * 64.0f * 64.0f * 64.0f);
  // The timer is reusable, and elapsed_ms() may be read again.
  EXPECT_DOUBLE_EQ(timer.elapsed_ms(), ms);
}

}  // namespace
