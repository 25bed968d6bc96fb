// vulkan_abi_test.cpp — libstrata_plugin_vulkan.so through the C ABI alone,
// as the core (or any other host) sees it: options, device properties,
// allocation limits, copies with offsets (overlapping ones too), streams and
// events, frees while work is queued, and kernels on a non-default stream.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <strata/plugin/strata_plugin.hpp>
#include <string>
#include <vector>

namespace {

using strata::plugin::find_attr;

const strata_plugin_api* api() {
  static const strata_plugin_api* table = [] {
    void* lib = dlopen(STRATA_VULKAN_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return static_cast<const strata_plugin_api*>(nullptr);
    auto entry = reinterpret_cast<strata_plugin_entry_fn>(dlsym(lib, STRATA_PLUGIN_ENTRY_SYMBOL));
    return entry != nullptr ? entry(STRATA_ABI_MAJOR, STRATA_ABI_MINOR) : nullptr;
  }();
  return table;
}

strata_error no_error() { return strata_error{sizeof(strata_error), {}}; }

class VulkanAbi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_NE(api(), nullptr) << "cannot load " STRATA_VULKAN_PLUGIN_PATH ": " << dlerror();
    strata_error err = no_error();
    status_ = api()->init(nullptr, R"({"pipeline_cache": false, "batch_size": 8})", &state_, &err);
    reason_ = err.message;
  }
  void SetUp() override {
    if (status_ == STRATA_ERROR_NO_DEVICE) GTEST_SKIP() << "no Vulkan device: " << reason_;
    ASSERT_EQ(status_, STRATA_OK) << reason_;
  }

  strata_buffer alloc(size_t bytes) {
    strata_error err = no_error();
    strata_buffer b = nullptr;
    EXPECT_EQ(api()->alloc(state_, 0, bytes, &b, &err), STRATA_OK) << err.message;
    return b;
  }
  void h2d(strata_buffer b, size_t offset, const void* src, size_t bytes, strata_stream s = nullptr) {
    strata_error err = no_error();
    ASSERT_EQ(api()->copy_h2d(state_, 0, b, offset, src, bytes, s, &err), STRATA_OK) << err.message;
  }
  template <class T>
  std::vector<T> d2h(strata_buffer b, size_t offset, size_t count, strata_stream s = nullptr) {
    std::vector<T> out(count);
    strata_error err = no_error();
    EXPECT_EQ(api()->copy_d2h(state_, 0, out.data(), b, offset, count * sizeof(T), s, &err), STRATA_OK) << err.message;
    return out;
  }
  strata_kernel_fn kernel(const char* op, const char* signature) {
    const strata_kernel_entry* entries = nullptr;
    int32_t n = 0;
    strata_error err = no_error();
    EXPECT_EQ(api()->get_kernels(state_, 0, &entries, &n, &err), STRATA_OK) << err.message;
    for (int32_t i = 0; i < n; ++i) {
      if (std::strcmp(entries[i].op, op) == 0 && std::strcmp(entries[i].signature, signature) == 0)
        return entries[i].fn;
    }
    ADD_FAILURE() << "no kernel " << op << " " << signature;
    return nullptr;
  }
  static strata_tensor vec(strata_buffer b, int64_t n) {
    strata_tensor t{};
    t.struct_size = sizeof(t);
    t.buffer = b;
    t.dtype = STRATA_F32;
    t.rank = 1;
    t.shape[0] = n;
    t.strides[0] = 1;
    return t;
  }
  /// y = a + b on `stream`.
  void add(strata_buffer y, strata_buffer a, strata_buffer b, int64_t n, strata_stream stream) {
    strata_kernel_fn fn = kernel("add", "f32,f32->f32");
    ASSERT_NE(fn, nullptr);
    strata_tensor in[2] = {vec(a, n), vec(b, n)};
    strata_tensor out = vec(y, n);
    strata_kernel_context ctx{sizeof(ctx), state_, 0, stream};
    strata_attrs attrs{sizeof(attrs), nullptr, 0};
    strata_error err = no_error();
    ASSERT_EQ(fn(&ctx, in, 2, &out, 1, &attrs, &err), STRATA_OK) << err.message;
  }

  static inline strata_plugin_state state_ = nullptr;
  static inline strata_status status_ = STRATA_OK;
  static inline std::string reason_;
};

TEST_F(VulkanAbi, UnknownOptionsAreRefusedByName) {
  strata_plugin_state s = nullptr;
  strata_error err = no_error();
  EXPECT_EQ(api()->init(nullptr, R"({"batchsize": 3})", &s, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("batchsize"), std::string::npos) << err.message;
  err = no_error();
  EXPECT_EQ(api()->init(nullptr, R"({"block_size_mb": 0})", &s, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("block_size_mb"), std::string::npos) << err.message;
}

TEST_F(VulkanAbi, DevicePropertiesDescribeTheDevice) {
  ASSERT_GE(api()->device_count(state_), 1);
  strata_device_props p{};
  p.struct_size = sizeof(p);
  strata_error err = no_error();
  ASSERT_EQ(api()->device_props(state_, 0, &p, &err), STRATA_OK) << err.message;
  EXPECT_NE(p.dtype_mask & STRATA_DTYPE_BIT(STRATA_F32), 0u);
  EXPECT_EQ(p.dtype_mask & STRATA_DTYPE_BIT(STRATA_F64), 0u);
  EXPECT_EQ(std::string(p.compute_capability).rfind("vulkan 1.", 0), 0u) << p.compute_capability;
  EXPECT_GT(p.memory_bytes, 0u);
  EXPECT_NE(p.has_streams, 0);
  const std::string name = p.name;
  if (name.find("llvmpipe") != std::string::npos || name.find("lavapipe") != std::string::npos) {
    EXPECT_EQ(p.type, STRATA_DEVICE_CPU);  // a software device never beats a real one
    EXPECT_EQ(api()->score(state_), 10);
  }
  err = no_error();
  EXPECT_EQ(api()->device_props(state_, 99, &p, &err), STRATA_ERROR_INVALID_ARGUMENT);
}

TEST_F(VulkanAbi, AllocationBeyondTheHeapIsOutOfMemoryNamingTheSize) {
  strata_device_props p{};
  p.struct_size = sizeof(p);
  strata_error err = no_error();
  ASSERT_EQ(api()->device_props(state_, 0, &p, &err), STRATA_OK);
  const size_t too_big = static_cast<size_t>(p.memory_bytes) + (size_t{1} << 30);
  strata_buffer b = nullptr;
  EXPECT_EQ(api()->alloc(state_, 0, too_big, &b, &err), STRATA_ERROR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(err.message).find(std::to_string(too_big)), std::string::npos) << err.message;
  // The device still allocates and copies afterwards.
  strata_buffer ok = alloc(64);
  const float v[4] = {1, 2, 3, 4};
  h2d(ok, 16, v, sizeof(v));
  EXPECT_EQ(d2h<float>(ok, 16, 4), (std::vector<float>{1, 2, 3, 4}));
  api()->free(state_, 0, ok);
}

TEST_F(VulkanAbi, CopiesHonourOffsetsAndOverlap) {
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  strata_buffer a = alloc(1000);
  strata_buffer b = alloc(1000);
  h2d(a, 0, bytes.data(), 1000);
  strata_error err = no_error();
  ASSERT_EQ(api()->copy_d2d(state_, 0, b, 3, a, 5, 990, nullptr, &err), STRATA_OK) << err.message;
  std::vector<uint8_t> got = d2h<uint8_t>(b, 3, 990);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), bytes.begin() + 5));
  // Overlapping ranges of one buffer behave like memmove.
  std::vector<uint8_t> expected = bytes;
  std::memmove(expected.data() + 10, expected.data(), 900);
  ASSERT_EQ(api()->copy_d2d(state_, 0, a, 10, a, 0, 900, nullptr, &err), STRATA_OK) << err.message;
  EXPECT_EQ(d2h<uint8_t>(a, 0, 1000), expected);
  // Out-of-range copies are refused, not performed.
  EXPECT_EQ(api()->copy_d2h(state_, 0, got.data(), a, 900, 200, nullptr, &err), STRATA_ERROR_INVALID_ARGUMENT);
  api()->free(state_, 0, a);
  api()->free(state_, 0, b);
}

TEST_F(VulkanAbi, StreamsEventsAndFreesWhileWorkIsQueued) {
  strata_stream s1 = nullptr, s2 = nullptr;
  strata_error err = no_error();
  ASSERT_EQ(api()->stream_create(state_, 0, &s1, &err), STRATA_OK) << err.message;
  ASSERT_EQ(api()->stream_create(state_, 0, &s2, &err), STRATA_OK) << err.message;
  const int64_t n = 4096;
  std::vector<float> ones(n, 1.0f);
  strata_buffer x = alloc(n * 4), y = alloc(n * 4);
  h2d(x, 0, ones.data(), n * 4, s1);
  h2d(y, 0, ones.data(), n * 4, s1);
  // 50 dependent adds on s1 (several submissions at batch_size 8), with
  // temporaries freed while their readers are still queued.
  for (int i = 0; i < 50; ++i) {
    strata_buffer t = alloc(n * 4);
    add(t, x, y, n, s1);                // t = x + 1
    add(x, t, t, n, s1);                // x = 2x + 2 ... kept bounded below by resetting
    api()->free(state_, 0, t);          // reused only after the adds complete
    h2d(x, 0, ones.data(), n * 4, s1);  // queued behind the adds
    add(x, x, y, n, s1);                // x = 2
  }
  strata_event e = nullptr;
  ASSERT_EQ(api()->event_create(state_, 0, &e, &err), STRATA_OK);
  ASSERT_EQ(api()->event_record(state_, 0, e, s1, &err), STRATA_OK) << err.message;
  // s2 reads what s1 wrote, after waiting for the event (no host block).
  ASSERT_EQ(api()->stream_wait_event(state_, 0, s2, e, &err), STRATA_OK) << err.message;
  strata_buffer z = alloc(n * 4);
  add(z, x, x, n, s2);  // z = 4
  ASSERT_EQ(api()->event_synchronize(state_, 0, e, &err), STRATA_OK) << err.message;
  ASSERT_EQ(api()->stream_synchronize(state_, 0, s2, &err), STRATA_OK) << err.message;
  std::vector<float> zs = d2h<float>(z, 0, n, s2);
  for (float v : zs) ASSERT_EQ(v, 4.0f);
  api()->event_destroy(state_, 0, e);
  for (strata_buffer b : {x, y, z}) api()->free(state_, 0, b);
  api()->stream_destroy(state_, 0, s1);
  api()->stream_destroy(state_, 0, s2);
}

TEST_F(VulkanAbi, StagingCopiesWhenDeviceMemoryIsNotMapped) {
  // "unified_copies": false takes the discrete-GPU path on any device: tensor
  // memory is never mapped, every copy goes through staging ranges.
  strata_plugin_state staged = nullptr;
  strata_error err = no_error();
  ASSERT_EQ(api()->init(nullptr, R"({"pipeline_cache": false, "unified_copies": false})", &staged, &err), STRATA_OK)
      << err.message;
  strata_device_props p{};
  p.struct_size = sizeof(p);
  ASSERT_EQ(api()->device_props(staged, 0, &p, &err), STRATA_OK);
  EXPECT_EQ(p.unified_memory, 0);
  const int64_t n = 300;
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    a[static_cast<size_t>(i)] = static_cast<float>(i);
    b[static_cast<size_t>(i)] = 0.5f * static_cast<float>(i);
  }
  strata_buffer x = nullptr, y = nullptr, z = nullptr;
  for (strata_buffer* buf : {&x, &y, &z})
    ASSERT_EQ(api()->alloc(staged, 0, n * 4, buf, &err), STRATA_OK) << err.message;
  ASSERT_EQ(api()->copy_h2d(staged, 0, x, 0, a.data(), n * 4, nullptr, &err), STRATA_OK) << err.message;
  ASSERT_EQ(api()->copy_h2d(staged, 0, y, 0, b.data(), n * 4, nullptr, &err), STRATA_OK) << err.message;
  const strata_kernel_entry* entries = nullptr;
  int32_t count = 0;
  ASSERT_EQ(api()->get_kernels(staged, 0, &entries, &count, &err), STRATA_OK);
  strata_kernel_fn fn = nullptr;
  for (int32_t i = 0; i < count; ++i) {
    if (std::strcmp(entries[i].op, "add") == 0 && std::strcmp(entries[i].signature, "f32,f32->f32") == 0)
      fn = entries[i].fn;
  }
  ASSERT_NE(fn, nullptr);
  strata_tensor in[2] = {vec(x, n), vec(y, n)};
  strata_tensor out = vec(z, n);
  strata_kernel_context ctx{sizeof(ctx), staged, 0, nullptr};
  strata_attrs attrs{sizeof(attrs), nullptr, 0};
  ASSERT_EQ(fn(&ctx, in, 2, &out, 1, &attrs, &err), STRATA_OK) << err.message;
  ASSERT_EQ(api()->copy_d2d(staged, 0, z, 8, z, 0, (n - 2) * 4, nullptr, &err), STRATA_OK) << err.message;
  std::vector<float> got(n);
  ASSERT_EQ(api()->copy_d2h(staged, 0, got.data(), z, 0, n * 4, nullptr, &err), STRATA_OK) << err.message;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = i < 2 ? i : i - 2;
    ASSERT_EQ(got[static_cast<size_t>(i)], 1.5f * static_cast<float>(src)) << i;
  }
  for (strata_buffer buf : {x, y, z}) api()->free(staged, 0, buf);
  api()->shutdown(staged);
}

TEST_F(VulkanAbi, KernelsRejectForeignBuffersAndViewsPastTheirBuffer) {
  strata_kernel_fn fn = kernel("add", "f32,f32->f32");
  ASSERT_NE(fn, nullptr);
  strata_buffer a = alloc(16);
  strata_tensor in[2] = {vec(a, 4), vec(a, 8)};  // 8 floats do not fit in 16 bytes
  in[1].shape[0] = 4;
  in[1].offset = 2;
  strata_tensor out = vec(a, 4);
  strata_kernel_context ctx{sizeof(ctx), state_, 0, nullptr};
  strata_attrs attrs{sizeof(attrs), nullptr, 0};
  strata_error err = no_error();
  EXPECT_EQ(fn(&ctx, in, 2, &out, 1, &attrs, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("exceeds its buffer"), std::string::npos) << err.message;
  int not_a_buffer = 0;
  in[1] = vec(reinterpret_cast<strata_buffer>(&not_a_buffer), 4);
  err = no_error();
  EXPECT_EQ(fn(&ctx, in, 2, &out, 1, &attrs, &err), STRATA_ERROR_INVALID_ARGUMENT);
  api()->free(state_, 0, a);
}

}  // namespace
