// vulkan_abi_test.cpp — libstrata_plugin_vulkan.so through the C ABI alone,
// as the core (or any other host) sees it: options, device properties,
// allocation limits, copies with offsets (overlapping ones too), streams and
// events, frees while work is queued, kernels on a non-default stream, a
// pipeline that fails to build, launches larger than one dispatch's work
// groups, and views beyond the shaders' 32-bit indexing.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
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
  strata_kernel_fn kernel(const char* op, const char* signature) { return kernel_of(state_, op, signature); }
  static strata_kernel_fn kernel_of(strata_plugin_state state, const char* op, const char* signature) {
    const strata_kernel_entry* entries = nullptr;
    int32_t n = 0;
    strata_error err = no_error();
    EXPECT_EQ(api()->get_kernels(state, 0, &entries, &n, &err), STRATA_OK) << err.message;
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
  /// A compact row-major tensor of `shape`.
  static strata_tensor tensor(strata_buffer b, strata_dtype dtype, std::initializer_list<int64_t> shape) {
    strata_tensor t{};
    t.struct_size = sizeof(t);
    t.buffer = b;
    t.dtype = dtype;
    t.rank = static_cast<int32_t>(shape.size());
    int64_t stride = 1;
    for (int32_t d = t.rank - 1; d >= 0; --d) {
      t.shape[d] = shape.begin()[d];
      t.strides[d] = stride;
      stride *= t.shape[d];
    }
    return t;
  }
  /// Runs `op` on the default stream of this suite's plugin state.
  strata_status run(const char* op, const char* signature, std::vector<strata_tensor> in, strata_tensor out,
                    std::vector<strata_attr> attrs, strata_error* err) {
    strata_kernel_fn fn = kernel(op, signature);
    if (fn == nullptr) return STRATA_ERROR_INTERNAL;
    strata_kernel_context ctx{sizeof(ctx), state_, 0, nullptr};
    strata_attrs a{sizeof(a), attrs.data(), static_cast<int32_t>(attrs.size())};
    return fn(&ctx, in.data(), static_cast<int32_t>(in.size()), &out, 1, &a, err);
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

TEST_F(VulkanAbi, OverlappingDeviceCopyKeepsItsTemporaryUntilTheCopyHasRun) {
  // An overlapping copy_d2d goes through a temporary staging range. When its
  // second command fills the batch (batch_size 8 here) the batch is submitted
  // at once; the range must stay reserved until that batch has run, or the
  // next upload (queued through staging) is handed the same range and the
  // two copies trample each other. Each phase puts the copy at another
  // position in the batch, behind adds that keep the device busy.
  strata_stream s = nullptr;
  strata_error err = no_error();
  ASSERT_EQ(api()->stream_create(state_, 0, &s, &err), STRATA_OK) << err.message;
  const size_t bytes = 1 << 20;
  const size_t shift = 4096;
  std::vector<uint8_t> pattern(bytes), other(bytes - shift, 0xee);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<uint8_t>(i * 13 + i / 251);
  std::vector<uint8_t> expected = pattern;
  std::memmove(expected.data() + shift, expected.data(), bytes - shift);
  const int64_t n = 1 << 18;
  strata_buffer a = alloc(bytes), b = alloc(bytes), x = alloc(n * 4), y = alloc(n * 4);
  std::vector<float> ones(n, 1.0f);
  h2d(x, 0, ones.data(), n * 4, s);
  h2d(y, 0, ones.data(), n * 4, s);
  for (int phase = 0; phase < 8; ++phase) {
    h2d(a, 0, pattern.data(), bytes, s);
    for (int i = 0; i < phase; ++i) add(y, x, x, n, s);
    ASSERT_EQ(api()->copy_d2d(state_, 0, a, shift, a, 0, bytes - shift, s, &err), STRATA_OK) << err.message;
    h2d(b, 0, other.data(), other.size(), s);  // queued: its staging range is allocated now
    ASSERT_EQ(d2h<uint8_t>(a, 0, bytes, s), expected) << "phase " << phase;
    ASSERT_EQ(d2h<uint8_t>(b, 0, other.size(), s), other) << "phase " << phase;
  }
  for (strata_buffer buf : {a, b, x, y}) api()->free(state_, 0, buf);
  api()->stream_destroy(state_, 0, s);
}

TEST_F(VulkanAbi, PipelineCreationFailureIsAClearErrorAndTheDeviceCarriesOn) {
  strata_plugin_state st = nullptr;
  strata_error err = no_error();
  // The test hook refuses option values that do not name "<shader>/<kernel>".
  EXPECT_EQ(api()->init(nullptr, R"({"test_fail_pipeline": "exp"})", &st, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("test_fail_pipeline"), std::string::npos) << err.message;
  err = no_error();
  ASSERT_EQ(api()->init(nullptr, R"({"pipeline_cache": false, "test_fail_pipeline": "unary_f32_f32/exp"})", &st, &err),
            STRATA_OK)
      << err.message;
  const int64_t n = 100;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i) - 0.3f;
  strata_buffer x = nullptr, y = nullptr;
  ASSERT_EQ(api()->alloc(st, 0, n * 4, &x, &err), STRATA_OK) << err.message;
  ASSERT_EQ(api()->alloc(st, 0, n * 4, &y, &err), STRATA_OK) << err.message;
  ASSERT_EQ(api()->copy_h2d(st, 0, x, 0, values.data(), n * 4, nullptr, &err), STRATA_OK) << err.message;
  strata_kernel_context ctx{sizeof(ctx), st, 0, nullptr};
  strata_attrs attrs{sizeof(attrs), nullptr, 0};
  strata_tensor in = vec(x, n);
  strata_tensor out = vec(y, n);
  strata_kernel_fn exp_fn = kernel_of(st, "exp", "f32->f32");
  ASSERT_NE(exp_fn, nullptr);
  for (int attempt = 0; attempt < 2; ++attempt) {  // a failed pipeline is not cached as a success
    err = no_error();
    EXPECT_EQ(exp_fn(&ctx, &in, 1, &out, 1, &attrs, &err), STRATA_ERROR_DEVICE);
    const std::string m = err.message;
    for (const char* part : {"vulkan:0", "exp", "unary_f32_f32", "VK_ERROR_INITIALIZATION_FAILED", "f32[100]"})
      EXPECT_NE(m.find(part), std::string::npos) << "\"" << part << "\" missing from: " << m;
  }
  // The device carries on: another kernel of the same shader variant, and
  // another shader, run; the input is untouched.
  strata_kernel_fn neg_fn = kernel_of(st, "neg", "f32->f32");
  strata_kernel_fn add_fn = kernel_of(st, "add", "f32,f32->f32");
  ASSERT_NE(neg_fn, nullptr);
  ASSERT_NE(add_fn, nullptr);
  err = no_error();
  ASSERT_EQ(neg_fn(&ctx, &in, 1, &out, 1, &attrs, &err), STRATA_OK) << err.message;
  strata_tensor pair[2] = {vec(y, n), vec(x, n)};
  ASSERT_EQ(add_fn(&ctx, pair, 2, &out, 1, &attrs, &err), STRATA_OK) << err.message;  // y = -x + x
  std::vector<float> got_x(n), got_y(n);
  ASSERT_EQ(api()->copy_d2h(st, 0, got_x.data(), x, 0, n * 4, nullptr, &err), STRATA_OK) << err.message;
  ASSERT_EQ(api()->copy_d2h(st, 0, got_y.data(), y, 0, n * 4, nullptr, &err), STRATA_OK) << err.message;
  EXPECT_EQ(got_x, values);
  EXPECT_EQ(got_y, std::vector<float>(n, 0.0f));
  api()->free(st, 0, x);
  api()->free(st, 0, y);
  api()->shutdown(st);
}

// At most 65535 work groups per dimension go into one dispatch; kernels with
// more work loop over the rest. Each case below exceeds that in one shader.

TEST_F(VulkanAbi, ElementwiseBeyondOneDispatchCoversEveryElement) {
  // 1-D, more than 65535 * 256 elements (bool: 1 byte each).
  strata_error err = no_error();
  const int64_t n = 65535 * 256 + 4099;
  std::vector<uint8_t> flags(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) flags[static_cast<size_t>(i)] = i % 3 == 0 ? 1 : 0;
  strata_buffer f = alloc(static_cast<size_t>(n)), g = alloc(static_cast<size_t>(n));
  h2d(f, 0, flags.data(), flags.size());
  ASSERT_EQ(run("logical_not", "bool->bool", {tensor(f, STRATA_BOOL, {n})}, tensor(g, STRATA_BOOL, {n}), {}, &err),
            STRATA_OK)
      << err.message;
  std::vector<uint8_t> negated = d2h<uint8_t>(g, 0, flags.size());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(negated[static_cast<size_t>(i)], i % 3 == 0 ? 0 : 1) << "element " << i;
  api()->free(state_, 0, f);
  api()->free(state_, 0, g);
}

TEST_F(VulkanAbi, ReductionBeyondOneDispatchCoversEveryOutput) {
  // One work group per output (rows of 65 > 64 elements), 66001 outputs.
  strata_error err = no_error();
  const int64_t rows = 66001, cols = 65;
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(r * cols + c)] = static_cast<float>(r % 5 + c % 2);
  strata_buffer xb = alloc(x.size() * 4), sb = alloc(static_cast<size_t>(rows) * 4);
  h2d(xb, 0, x.data(), x.size() * 4);
  const int64_t dims[1] = {1};
  strata_attr dims_attr{"dims", STRATA_ATTR_INTS, 0, 0.0, dims, 1};
  ASSERT_EQ(run("sum", "f32->f32", {tensor(xb, STRATA_F32, {rows, cols})}, tensor(sb, STRATA_F32, {rows, 1}),
                {dims_attr}, &err),
            STRATA_OK)
      << err.message;
  std::vector<float> sums = d2h<float>(sb, 0, static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    ASSERT_EQ(sums[static_cast<size_t>(r)], static_cast<float>(cols * (r % 5) + cols / 2)) << "row " << r;
  api()->free(state_, 0, xb);
  api()->free(state_, 0, sb);
}

TEST_F(VulkanAbi, SoftmaxBeyondOneDispatchCoversEveryRow) {
  // One work group per row, 66001 rows.
  strata_error err = no_error();
  const int64_t rows = 66001;
  std::vector<float> logits(static_cast<size_t>(rows * 2));
  for (int64_t r = 0; r < rows; ++r) logits[static_cast<size_t>(2 * r + 1)] = static_cast<float>(r % 4);
  strata_buffer lb = alloc(logits.size() * 4), pb = alloc(logits.size() * 4);
  h2d(lb, 0, logits.data(), logits.size() * 4);
  strata_attr dim_attr{"dim", STRATA_ATTR_INT, 1, 0.0, nullptr, 0};
  ASSERT_EQ(run("softmax", "f32->f32", {tensor(lb, STRATA_F32, {rows, 2})}, tensor(pb, STRATA_F32, {rows, 2}),
                {dim_attr}, &err),
            STRATA_OK)
      << err.message;
  std::vector<float> probs = d2h<float>(pb, 0, logits.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double p1 = 1.0 / (1.0 + std::exp(-static_cast<double>(r % 4)));
    ASSERT_NEAR(probs[static_cast<size_t>(2 * r + 1)], p1, 1e-6) << "row " << r;
  }
  api()->free(state_, 0, lb);
  api()->free(state_, 0, pb);
}

TEST_F(VulkanAbi, MatmulBeyondOneDispatchCoversEveryTileAndBatch) {
  // More than 65535 64-row tiles, and more than 65535 batches (the right
  // operand broadcast over them with stride 0). Each is 65536 full 64 x 64
  // tiles: instant on a GPU, a minute or two on lavapipe.
  strata_error err = no_error();
  strata_device_props props{};
  props.struct_size = sizeof(props);
  ASSERT_EQ(api()->device_props(state_, 0, &props, &err), STRATA_OK) << err.message;
  if (props.type == STRATA_DEVICE_CPU && std::getenv("STRATA_VULKAN_SLOW_TESTS") == nullptr) {
    GTEST_SKIP() << props.name << " is a software device: 2 x 65536 matmul tiles take minutes there; "
                 << "set STRATA_VULKAN_SLOW_TESTS=1 to run them anyway";
  }
  const int64_t m = 65535 * 64 + 70;
  std::vector<float> column(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) column[static_cast<size_t>(i)] = static_cast<float>(i % 1000);
  const float two = 2.0f;
  strata_buffer ab = alloc(column.size() * 4), bb = alloc(4), yb = alloc(column.size() * 4);
  h2d(ab, 0, column.data(), column.size() * 4);
  h2d(bb, 0, &two, 4);
  ASSERT_EQ(run("matmul", "f32,f32->f32", {tensor(ab, STRATA_F32, {m, 1}), tensor(bb, STRATA_F32, {1, 1})},
                tensor(yb, STRATA_F32, {m, 1}), {}, &err),
            STRATA_OK)
      << err.message;
  std::vector<float> doubled = d2h<float>(yb, 0, column.size());
  for (int64_t i = 0; i < m; ++i) ASSERT_EQ(doubled[static_cast<size_t>(i)], 2.0f * static_cast<float>(i % 1000)) << i;
  const int64_t batches = 70001;
  strata_tensor b_batched = tensor(bb, STRATA_F32, {batches, 1, 1});
  b_batched.strides[0] = 0;
  ASSERT_EQ(run("matmul", "f32,f32->f32", {tensor(ab, STRATA_F32, {batches, 1, 1}), b_batched},
                tensor(yb, STRATA_F32, {batches, 1, 1}), {}, &err),
            STRATA_OK)
      << err.message;
  doubled = d2h<float>(yb, 0, static_cast<size_t>(batches));
  for (int64_t i = 0; i < batches; ++i)
    ASSERT_EQ(doubled[static_cast<size_t>(i)], 2.0f * static_cast<float>(i % 1000)) << "batch " << i;
  for (strata_buffer buf : {ab, bb, yb}) api()->free(state_, 0, buf);
}

TEST_F(VulkanAbi, ViewsBeyondThirtyTwoBitIndexingAreDeclinedNotWrapped) {
  // Broadcast (stride-0) views need no memory, so huge element counts are
  // cheap to describe. 2^31 elements or more are declined (UNSUPPORTED: the
  // core's fallback policy applies); products that overflow 64 bits never
  // pass as small ones.
  strata_buffer b = alloc(64);
  strata_error err = no_error();
  auto broadcast = [&](std::initializer_list<int64_t> shape) {
    strata_tensor t = tensor(b, STRATA_F32, shape);
    for (int32_t d = 0; d < t.rank; ++d) t.strides[d] = 0;
    return t;
  };
  const int64_t big = int64_t{1} << 31;
  for (strata_tensor t : {broadcast({big}), broadcast({int64_t{1} << 33, big})}) {
    err = no_error();
    EXPECT_EQ(run("copy", "f32->f32", {broadcast({1})}, t, {}, &err), STRATA_ERROR_UNSUPPORTED) << err.message;
    EXPECT_NE(std::string(err.message).find("2^31"), std::string::npos) << err.message;
  }
  // (2^62 + 1 - 1) * 4 wraps to 0 in 64 bits: still far past the buffer.
  strata_tensor wrapping = tensor(b, STRATA_F32, {(int64_t{1} << 62) + 1});
  wrapping.strides[0] = 4;
  err = no_error();
  EXPECT_EQ(run("neg", "f32->f32", {wrapping}, vec(b, 4), {}, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("exceeds its buffer"), std::string::npos) << err.message;
  api()->free(state_, 0, b);
}

}  // namespace
