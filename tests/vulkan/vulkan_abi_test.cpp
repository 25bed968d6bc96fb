// vulkan_abi_test.cpp — libstrata_plugin_vulkan.so through the C ABI 2.0
// alone, as the core (or any other host) sees it: the manifest and probe,
// options, device properties and identity, allocation limits, memory
// info/stats/trim, copies with offsets (overlapping ones too), streams and
// events (event_query included), timestamps (event_elapsed between TIMING
// events, its errors, a device without timestamps), stream-ordered frees
// while work is queued, kernels on a non-default stream, typed attributes,
// deferred errors (out-of-range indices, integer division by zero) reported
// at the next synchronisation point, the strata.native_handles extension, a
// pipeline that fails to build, launches larger than one dispatch's work
// groups, and views beyond the shaders' 32-bit indexing.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strata/plugin/strata_plugin.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

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

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// init with `options`; *state receives the plugin state, *score the score
/// init left (the probe's 100 going in).
strata_status init_plugin(const char* options, strata_plugin_state* state, strata_error* err, int32_t* score = nullptr,
                          int32_t* devices = nullptr) {
  strata_init_args a{};
  a.struct_size = sizeof(a);
  a.options_json = options;
  a.score = 100;
  a.error = err;
  const strata_status s = api()->init(&a);
  *state = a.state;
  if (score != nullptr) *score = a.score;
  if (devices != nullptr) *devices = a.device_count;
  return s;
}

strata_attr int_attr(const char* name, int64_t v) {
  strata_attr a{};
  a.struct_size = sizeof(a);
  a.name = name;
  a.kind = STRATA_ATTR_INT;
  a.i = v;
  return a;
}

strata_attr ints_attr(const char* name, const int64_t* v, int64_t n) {
  strata_attr a{};
  a.struct_size = sizeof(a);
  a.name = name;
  a.kind = STRATA_ATTR_INTS;
  a.ints = v;
  a.count = n;
  return a;
}

/// The table's calls on one plugin state (device 0).
class Plugin {
 public:
  explicit Plugin(strata_plugin_state state = nullptr) : state_(state) {}
  strata_plugin_state state() const { return state_; }

  strata_status device_props(strata_device_props* p, strata_error* err, int32_t device = 0) const {
    strata_device_args a{};
    a.struct_size = sizeof(a);
    a.state = state_;
    a.device = device;
    a.props = p;
    a.error = err;
    return api()->device_props(&a);
  }
  strata_device_props props() const {
    strata_device_props p{};
    p.struct_size = sizeof(p);
    strata_error err = no_error();
    EXPECT_EQ(device_props(&p, &err), STRATA_OK) << err.message;
    return p;
  }
  strata_status alloc(size_t bytes, strata_buffer* out, strata_error* err, strata_stream s = nullptr,
                      strata_memory_kind kind = STRATA_MEMORY_DEVICE, void** host = nullptr) const {
    strata_alloc_args a{};
    a.struct_size = sizeof(a);
    a.state = state_;
    a.kind = kind;
    a.bytes = bytes;
    a.stream = s;
    a.error = err;
    const strata_status st = api()->alloc(&a);
    *out = a.buffer;
    if (host != nullptr) *host = a.host_pointer;
    return st;
  }
  strata_buffer alloc(size_t bytes, strata_stream s = nullptr) const {
    strata_error err = no_error();
    strata_buffer b = nullptr;
    EXPECT_EQ(alloc(bytes, &b, &err, s), STRATA_OK) << err.message;
    return b;
  }
  void free(strata_buffer b, strata_stream s = nullptr) const {
    strata_alloc_args a{};
    a.struct_size = sizeof(a);
    a.state = state_;
    a.buffer = b;
    a.stream = s;
    api()->free(&a);
  }
  strata_status copy(strata_copy_kind kind, strata_buffer dst, size_t dst_offset, void* dst_host, strata_buffer src,
                     size_t src_offset, const void* src_host, size_t bytes, strata_stream s, strata_error* err,
                     strata_event done = nullptr) const {
    strata_copy_args a{};
    a.struct_size = sizeof(a);
    a.state = state_;
    a.kind = kind;
    a.dst = dst;
    a.dst_offset = dst_offset;
    a.dst_host = dst_host;
    a.src = src;
    a.src_offset = src_offset;
    a.src_host = src_host;
    a.bytes = bytes;
    a.stream = s;
    a.done = done;
    a.error = err;
    return api()->copy(&a);
  }
  strata_status h2d(strata_buffer b, size_t offset, const void* src, size_t bytes, strata_error* err,
                    strata_stream s = nullptr) const {
    return copy(STRATA_COPY_HOST_TO_DEVICE, b, offset, nullptr, nullptr, 0, src, bytes, s, err);
  }
  void h2d(strata_buffer b, size_t offset, const void* src, size_t bytes, strata_stream s = nullptr) const {
    strata_error err = no_error();
    ASSERT_EQ(h2d(b, offset, src, bytes, &err, s), STRATA_OK) << err.message;
  }
  strata_status d2h(void* dst, strata_buffer b, size_t offset, size_t bytes, strata_error* err,
                    strata_stream s = nullptr) const {
    return copy(STRATA_COPY_DEVICE_TO_HOST, nullptr, 0, dst, b, offset, nullptr, bytes, s, err);
  }
  template <class T>
  std::vector<T> d2h(strata_buffer b, size_t offset, size_t count, strata_stream s = nullptr) const {
    std::vector<T> out(count);
    strata_error err = no_error();
    EXPECT_EQ(d2h(out.data(), b, offset, count * sizeof(T), &err, s), STRATA_OK) << err.message;
    return out;
  }
  strata_status d2d(strata_buffer dst, size_t dst_offset, strata_buffer src, size_t src_offset, size_t bytes,
                    strata_error* err, strata_stream s = nullptr) const {
    return copy(STRATA_COPY_DEVICE_TO_DEVICE, dst, dst_offset, nullptr, src, src_offset, nullptr, bytes, s, err);
  }

  strata_stream_args stream_args(strata_error* err, strata_stream s = nullptr, strata_event e = nullptr) const {
    strata_stream_args a{};
    a.struct_size = sizeof(a);
    a.state = state_;
    a.stream = s;
    a.event = e;
    a.error = err;
    return a;
  }
  strata_stream stream_create() const {
    strata_error err = no_error();
    strata_stream_args a = stream_args(&err);
    EXPECT_EQ(api()->stream_create(&a), STRATA_OK) << err.message;
    return a.stream;
  }
  void stream_destroy(strata_stream s) const {
    strata_error err = no_error();
    strata_stream_args a = stream_args(&err, s);
    api()->stream_destroy(&a);
  }
  strata_status synchronize(strata_stream s, strata_error* err) const {
    strata_stream_args a = stream_args(err, s);
    return api()->stream_synchronize(&a);
  }
  strata_event event_create(uint32_t flags = 0) const {
    strata_error err = no_error();
    strata_stream_args a = stream_args(&err);
    a.flags = flags;
    EXPECT_EQ(api()->event_create(&a), STRATA_OK) << err.message;
    return a.event;
  }
  void event_destroy(strata_event e) const {
    strata_error err = no_error();
    strata_stream_args a = stream_args(&err, nullptr, e);
    api()->event_destroy(&a);
  }
  strata_status event_record(strata_event e, strata_stream s, strata_error* err) const {
    strata_stream_args a = stream_args(err, s, e);
    return api()->event_record(&a);
  }
  strata_status stream_wait_event(strata_stream s, strata_event e, strata_error* err) const {
    strata_stream_args a = stream_args(err, s, e);
    return api()->stream_wait_event(&a);
  }
  strata_status event_synchronize(strata_event e, strata_error* err) const {
    strata_stream_args a = stream_args(err, nullptr, e);
    return api()->event_synchronize(&a);
  }
  strata_status event_query(strata_event e, int32_t* complete, strata_error* err) const {
    strata_stream_args a = stream_args(err, nullptr, e);
    const strata_status st = api()->event_query(&a);
    *complete = a.complete;
    return st;
  }
  strata_status event_elapsed(strata_event start, strata_event end, double* ms, strata_error* err) const {
    strata_stream_args a = stream_args(err, nullptr, start);
    a.end = end;
    a.elapsed_ms = -1.0;
    const strata_status st = api()->event_elapsed(&a);
    *ms = a.elapsed_ms;
    return st;
  }
  strata_status memory(strata_status (*fn)(strata_memory_args*), strata_memory_args* a, strata_error* err) const {
    *a = strata_memory_args{};
    a->struct_size = sizeof(*a);
    a->state = state_;
    a->error = err;
    return fn(a);
  }

  const strata_kernel_entry* kernel(const char* op, const char* signature) const {
    strata_error err = no_error();
    strata_device_args a{};
    a.struct_size = sizeof(a);
    a.state = state_;
    a.error = &err;
    EXPECT_EQ(api()->get_kernels(&a), STRATA_OK) << err.message;
    for (int32_t i = 0; i < a.n_entries; ++i) {
      const strata_kernel_entry* e = a.entries[i];
      if (std::strcmp(e->op, op) == 0 && std::strcmp(e->signature, signature) == 0) return e;
    }
    ADD_FAILURE() << "no kernel " << op << " " << signature;
    return nullptr;
  }
  /// Runs `op` as the host would: pointer arrays, the entry's user_data.
  strata_status run(const char* op, const char* signature, std::vector<strata_tensor> in, strata_tensor out,
                    std::vector<strata_attr> attrs, strata_error* err, strata_stream stream = nullptr) const {
    const strata_kernel_entry* e = kernel(op, signature);
    if (e == nullptr) return STRATA_ERROR_INTERNAL;
    std::vector<const strata_tensor*> inputs;
    for (const strata_tensor& t : in) inputs.push_back(&t);
    const strata_tensor* outputs[1] = {&out};
    std::vector<const strata_attr*> attr_ptrs;
    for (const strata_attr& a : attrs) attr_ptrs.push_back(&a);
    strata_kernel_call call{};
    call.struct_size = sizeof(call);
    call.op = e->op;
    call.op_version = e->op_version;
    call.state = state_;
    call.stream = stream;
    call.user_data = e->user_data;
    call.inputs = inputs.data();
    call.n_inputs = static_cast<int32_t>(inputs.size());
    call.outputs = outputs;
    call.n_outputs = 1;
    call.attrs = attr_ptrs.data();
    call.n_attrs = static_cast<int32_t>(attr_ptrs.size());
    call.error = err;
    return e->fn(&call);
  }

 protected:
  strata_plugin_state state_ = nullptr;
};

strata_tensor tensor(strata_buffer b, strata_dtype dtype, std::initializer_list<int64_t> shape) {
  strata_tensor t{};
  t.struct_size = sizeof(t);
  t.buffer = b;
  t.dtype = dtype;
  t.rank = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int32_t d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = shape.begin()[d];
    t.strides[d] = stride;
    // Not after the outermost dim: huge broadcast shapes (whose strides the
    // caller zeroes) would overflow int64 there for nothing.
    if (d > 0) stride *= t.shape[d];
  }
  return t;
}

strata_tensor vec(strata_buffer b, int64_t n) { return tensor(b, STRATA_F32, {n}); }

class VulkanAbi : public ::testing::Test, public Plugin {
 protected:
  static void SetUpTestSuite() {
    ASSERT_NE(api(), nullptr) << "cannot load " STRATA_VULKAN_PLUGIN_PATH ": " << dlerror();
    strata_error err = no_error();
    status_ = init_plugin(R"({"pipeline_cache": false, "batch_size": 8})", &shared_state_, &err, &score_);
    reason_ = err.message;
  }
  void SetUp() override {
    if (status_ == STRATA_ERROR_NO_DEVICE) GTEST_SKIP() << "no Vulkan device: " << reason_;
    ASSERT_EQ(status_, STRATA_OK) << reason_;
    state_ = shared_state_;
  }

  /// y = a + b on `stream`.
  void add(strata_buffer y, strata_buffer a, strata_buffer b, int64_t n, strata_stream stream) const {
    strata_error err = no_error();
    ASSERT_EQ(run(STRATA_OP_ADD, "f32,f32->f32", {vec(a, n), vec(b, n)}, vec(y, n), {}, &err, stream), STRATA_OK)
        << err.message;
  }

  static inline strata_plugin_state shared_state_ = nullptr;
  static inline strata_status status_ = STRATA_OK;
  static inline int32_t score_ = 0;
  static inline std::string reason_;
};

TEST(VulkanAbiManifest, TheTableIsAnAbi2Manifest) {
  ASSERT_NE(api(), nullptr) << "cannot load " STRATA_VULKAN_PLUGIN_PATH ": " << dlerror();
  EXPECT_EQ(api()->abi_major, 2u);
  EXPECT_EQ(api()->abi_minor, static_cast<uint32_t>(STRATA_ABI_MINOR));
  EXPECT_EQ(api()->min_host_minor, 0u);
  EXPECT_STREQ(api()->name, "vulkan");
  EXPECT_NE(api()->vendor, nullptr);
  EXPECT_NE(api()->version, nullptr);
  EXPECT_GE(api()->struct_size, STRATA_PLUGIN_API_MIN_SIZE);
  for (const void* fn :
       {reinterpret_cast<const void*>(api()->memory_info), reinterpret_cast<const void*>(api()->memory_trim),
        reinterpret_cast<const void*>(api()->memory_stats), reinterpret_cast<const void*>(api()->event_query),
        reinterpret_cast<const void*>(api()->event_elapsed)}) {
    EXPECT_NE(fn, nullptr);
  }
}

TEST(VulkanAbiManifest, ProbeChecksTheLoaderOnly) {
  ASSERT_NE(api(), nullptr);
  strata_error err = no_error();
  strata_probe_args p{};
  p.struct_size = sizeof(p);
  p.error = &err;
  ASSERT_EQ(api()->probe(&p), STRATA_OK) << err.message;
  // The loader library is installed wherever this suite runs (lavapipe in CI).
  EXPECT_EQ(p.score, 100) << err.message;
  // A loader that cannot be opened: score 0 and the reason.
  const char* saved = std::getenv("STRATA_VULKAN_LOADER");
  const std::string restore = saved != nullptr ? saved : "";
  ::setenv("STRATA_VULKAN_LOADER", "/nonexistent/strata-test/libvulkan.so.1", 1);
  err = no_error();
  p.score = -1;
  EXPECT_EQ(api()->probe(&p), STRATA_OK);
  EXPECT_EQ(p.score, 0);
  EXPECT_TRUE(contains(err.message, "/nonexistent/strata-test/libvulkan.so.1")) << err.message;
  if (saved != nullptr) {
    ::setenv("STRATA_VULKAN_LOADER", restore.c_str(), 1);
  } else {
    ::unsetenv("STRATA_VULKAN_LOADER");
  }
  // A struct below the 2.0 size is refused.
  p.struct_size = sizeof(size_t);
  EXPECT_EQ(api()->probe(&p), STRATA_ERROR_INVALID_ARGUMENT);
}

TEST_F(VulkanAbi, UnknownOptionsAreRefusedByName) {
  strata_plugin_state s = nullptr;
  strata_error err = no_error();
  EXPECT_EQ(init_plugin(R"({"batchsize": 3})", &s, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "batchsize")) << err.message;
  err = no_error();
  EXPECT_EQ(init_plugin(R"({"block_size_mb": 0})", &s, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "block_size_mb")) << err.message;
}

TEST_F(VulkanAbi, DevicePropertiesDescribeTheDevice) {
  const strata_device_props p = props();
  EXPECT_NE(p.dtype_mask & STRATA_DTYPE_BIT(STRATA_F32), 0u);
  EXPECT_EQ(p.dtype_mask & STRATA_DTYPE_BIT(STRATA_F64), 0u);
  EXPECT_EQ(std::string(p.compute_capability).rfind("vulkan 1.", 0), 0u) << p.compute_capability;
  EXPECT_GT(p.memory_bytes, 0u);
  EXPECT_NE(p.flags & STRATA_DEVICE_HAS_STREAMS, 0u);
  EXPECT_NE(p.flags & STRATA_DEVICE_CACHES_MEMORY, 0u);
  EXPECT_EQ(p.flags & STRATA_DEVICE_FREE_THREADED, 0u);
  const std::string name = p.name;
  if (name.find("llvmpipe") != std::string::npos || name.find("lavapipe") != std::string::npos) {
    EXPECT_EQ(p.type, STRATA_DEVICE_CPU);  // a software device never beats a real one
    EXPECT_EQ(score_, 10);                 // init lowered the probe's 100
    EXPECT_NE(p.flags & STRATA_DEVICE_UNIFIED_MEMORY, 0u);
  }
  strata_error err = no_error();
  strata_device_props other{};
  other.struct_size = sizeof(other);
  EXPECT_EQ(device_props(&other, &err, 99), STRATA_ERROR_INVALID_ARGUMENT);
}

TEST_F(VulkanAbi, DevicePropertiesReportTheHardwareIdentity) {
  const strata_device_props p = props();
  ASSERT_EQ(p.struct_size, sizeof(strata_device_props));
  ASSERT_NE(p.flags & STRATA_DEVICE_HAS_UUID, 0u);
  bool nonzero = false;
  for (uint8_t byte : p.uuid) nonzero |= byte != 0;
  EXPECT_TRUE(nonzero) << "an all-zero deviceUUID";
  // A PCI bus id where the driver has VK_EXT_pci_bus_info ("dddd:bb:dd.f"), else empty.
  const std::string pci = p.pci_bus_id;
  if (!pci.empty()) {
    ASSERT_EQ(pci.size(), 12u) << pci;
    EXPECT_EQ(pci[4], ':');
    EXPECT_EQ(pci[7], ':');
    EXPECT_EQ(pci[10], '.');
  }
  // An older host's shorter struct gets no more than it has room for.
  strata_device_props small{};
  small.struct_size = STRATA_DEVICE_PROPS_MIN_SIZE;
  std::memset(small.uuid, 0xab, sizeof(small.uuid));
  strata_error err = no_error();
  ASSERT_EQ(device_props(&small, &err), STRATA_OK) << err.message;
  EXPECT_EQ(small.struct_size, STRATA_DEVICE_PROPS_MIN_SIZE);
  EXPECT_EQ(small.uuid[0], 0xab);
}

TEST_F(VulkanAbi, AllocationBeyondTheHeapIsOutOfMemoryNamingTheSize) {
  const strata_device_props p = props();
  const size_t too_big = static_cast<size_t>(p.memory_bytes) + (size_t{1} << 30);
  strata_buffer b = nullptr;
  strata_error err = no_error();
  EXPECT_EQ(alloc(too_big, &b, &err), STRATA_ERROR_OUT_OF_MEMORY);
  EXPECT_TRUE(contains(err.message, std::to_string(too_big))) << err.message;
  // The device still allocates and copies afterwards.
  strata_buffer ok = alloc(64);
  const float v[4] = {1, 2, 3, 4};
  h2d(ok, 16, v, sizeof(v));
  EXPECT_EQ(d2h<float>(ok, 16, 4), (std::vector<float>{1, 2, 3, 4}));
  free(ok);
}

TEST_F(VulkanAbi, MemoryInfoStatsAndTrim) {
  strata_error err = no_error();
  strata_memory_args m{};
  ASSERT_EQ(memory(api()->memory_info, &m, &err), STRATA_OK) << err.message;
  EXPECT_EQ(m.total_bytes, props().memory_bytes);
  EXPECT_LE(m.free_bytes, m.total_bytes);
  ASSERT_EQ(memory(api()->memory_stats, &m, &err), STRATA_OK) << err.message;
  const uint64_t in_use = m.bytes_in_use;
  const uint64_t allocations = m.allocations;
  const size_t bytes = 48u << 20;  // a dedicated block (above half of the 64 MiB default)
  strata_buffer b = alloc(bytes);
  ASSERT_EQ(memory(api()->memory_stats, &m, &err), STRATA_OK) << err.message;
  EXPECT_GE(m.bytes_in_use, in_use + bytes);
  EXPECT_GE(m.peak_bytes_in_use, m.bytes_in_use);
  EXPECT_GE(m.bytes_reserved, m.bytes_in_use);
  EXPECT_GT(m.allocations, allocations);
  free(b);
  ASSERT_EQ(memory(api()->memory_stats, &m, &err), STRATA_OK) << err.message;
  EXPECT_EQ(m.bytes_in_use, in_use);
  EXPECT_GE(m.peak_bytes_in_use, in_use + bytes);
  // The freed block is kept for reuse until trimmed; trimming (once the
  // device is idle) returns it to the driver.
  const uint64_t reserved = m.bytes_reserved;
  ASSERT_EQ(synchronize(nullptr, &err), STRATA_OK) << err.message;
  ASSERT_EQ(memory(api()->memory_trim, &m, &err), STRATA_OK) << err.message;
  ASSERT_EQ(memory(api()->memory_stats, &m, &err), STRATA_OK) << err.message;
  EXPECT_LE(m.bytes_reserved + bytes, reserved);
}

TEST_F(VulkanAbi, PinnedHostMemoryIsMappedAndCopiesToTheDevice) {
  strata_error err = no_error();
  strata_buffer pinned = nullptr;
  void* host = nullptr;
  ASSERT_EQ(alloc(256, &pinned, &err, nullptr, STRATA_MEMORY_PINNED_HOST, &host), STRATA_OK) << err.message;
  ASSERT_NE(host, nullptr);
  float* values = static_cast<float*>(host);
  for (int i = 0; i < 64; ++i) values[i] = static_cast<float>(i) * 0.5f;
  strata_buffer dev = alloc(256);
  ASSERT_EQ(d2d(dev, 0, pinned, 0, 256, &err), STRATA_OK) << err.message;
  std::vector<float> got = d2h<float>(dev, 0, 64);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], static_cast<float>(i) * 0.5f) << i;
  free(dev);
  free(pinned);
}

TEST_F(VulkanAbi, CopiesHonourOffsetsAndOverlap) {
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  strata_buffer a = alloc(1000);
  strata_buffer b = alloc(1000);
  h2d(a, 0, bytes.data(), 1000);
  strata_error err = no_error();
  ASSERT_EQ(d2d(b, 3, a, 5, 990, &err), STRATA_OK) << err.message;
  std::vector<uint8_t> got = d2h<uint8_t>(b, 3, 990);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), bytes.begin() + 5));
  // Overlapping ranges of one buffer behave like memmove.
  std::vector<uint8_t> expected = bytes;
  std::memmove(expected.data() + 10, expected.data(), 900);
  ASSERT_EQ(d2d(a, 10, a, 0, 900, &err), STRATA_OK) << err.message;
  EXPECT_EQ(d2h<uint8_t>(a, 0, 1000), expected);
  // Out-of-range copies are refused, not performed.
  EXPECT_EQ(d2h(got.data(), a, 900, 200, &err), STRATA_ERROR_INVALID_ARGUMENT);
  // An unknown copy kind too (as a newer host might send; written as bytes,
  // since C++ must not form an enum value outside its range).
  strata_copy_args unknown{};
  unknown.struct_size = sizeof(unknown);
  unknown.state = state_;
  const int32_t seven = 7;
  static_assert(sizeof(unknown.kind) == sizeof(seven));
  std::memcpy(&unknown.kind, &seven, sizeof(seven));
  unknown.dst = a;
  unknown.src = a;
  unknown.bytes = 4;
  unknown.error = &err;
  EXPECT_EQ(api()->copy(&unknown), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "unknown copy kind 7")) << err.message;
  free(a);
  free(b);
}

TEST_F(VulkanAbi, StreamsEventsAndFreesWhileWorkIsQueued) {
  strata_stream s1 = stream_create(), s2 = stream_create();
  strata_error err = no_error();
  const int64_t n = 4096;
  std::vector<float> ones(n, 1.0f);
  strata_buffer x = alloc(n * 4, s1), y = alloc(n * 4, s1);
  h2d(x, 0, ones.data(), n * 4, s1);
  h2d(y, 0, ones.data(), n * 4, s1);
  // 50 dependent adds on s1 (several submissions at batch_size 8), with
  // temporaries freed (stream-ordered) while their readers are still queued.
  for (int i = 0; i < 50; ++i) {
    strata_buffer t = alloc(n * 4, s1);
    add(t, x, y, n, s1);                 // t = x + 1
    add(x, t, t, n, s1);                 // x = 2x + 2 ... kept bounded below by resetting
    free(t, s1);                         // reusable by s1 at once, by others once submitted
    strata_buffer u = alloc(n * 4, s1);  // may be t again: ordered after t's readers
    add(u, y, y, n, s1);
    free(u, s1);
    h2d(x, 0, ones.data(), n * 4, s1);  // queued behind the adds
    add(x, x, y, n, s1);                // x = 2
  }
  strata_event e = event_create();
  ASSERT_EQ(event_record(e, s1, &err), STRATA_OK) << err.message;
  // s2 reads what s1 wrote, after waiting for the event (no host block).
  ASSERT_EQ(stream_wait_event(s2, e, &err), STRATA_OK) << err.message;
  strata_buffer z = alloc(n * 4, s2);
  add(z, x, x, n, s2);  // z = 4
  ASSERT_EQ(event_synchronize(e, &err), STRATA_OK) << err.message;
  ASSERT_EQ(synchronize(s2, &err), STRATA_OK) << err.message;
  std::vector<float> zs = d2h<float>(z, 0, n, s2);
  for (float v : zs) ASSERT_EQ(v, 4.0f);
  event_destroy(e);
  free(x, s1);
  free(y, s1);
  free(z, s2);
  stream_destroy(s1);
  stream_destroy(s2);
}

TEST_F(VulkanAbi, EventQueryNeverBlocksAndReportsCompletion) {
  strata_error err = no_error();
  int32_t complete = -1;
  strata_event fresh = event_create();
  ASSERT_EQ(event_query(fresh, &complete, &err), STRATA_OK) << err.message;
  EXPECT_EQ(complete, 1) << "an event never recorded counts as complete";
  // Enough queued work that the event is most likely still pending when
  // queried; either answer is allowed then, as long as the query returns.
  const int64_t n = 1 << 20;
  std::vector<float> ones(n, 1.0f);
  strata_buffer x = alloc(n * 4), y = alloc(n * 4);
  h2d(x, 0, ones.data(), n * 4);
  for (int i = 0; i < 40; ++i) add(y, x, x, n, nullptr);
  strata_event e = event_create();
  ASSERT_EQ(event_record(e, nullptr, &err), STRATA_OK) << err.message;
  complete = -1;
  ASSERT_EQ(event_query(e, &complete, &err), STRATA_OK) << err.message;
  EXPECT_TRUE(complete == 0 || complete == 1);
  ASSERT_EQ(event_synchronize(e, &err), STRATA_OK) << err.message;
  ASSERT_EQ(event_query(e, &complete, &err), STRATA_OK) << err.message;
  EXPECT_EQ(complete, 1);
  // A copy's `done` event completes with the copy.
  strata_event done = event_create();
  ASSERT_EQ(copy(STRATA_COPY_DEVICE_TO_DEVICE, y, 0, nullptr, x, 0, nullptr, n * 4, nullptr, &err, done), STRATA_OK)
      << err.message;
  ASSERT_EQ(event_synchronize(done, &err), STRATA_OK) << err.message;
  ASSERT_EQ(event_query(done, &complete, &err), STRATA_OK) << err.message;
  EXPECT_EQ(complete, 1);
  for (strata_event ev : {fresh, e, done}) event_destroy(ev);
  free(x);
  free(y);
}

/// Timestamps: these need vulkan:0 (lavapipe writes timestamps) and fail,
/// never skip, where it is missing.
class VulkanAbiTiming : public VulkanAbi {
 protected:
  void SetUp() override {
    ASSERT_EQ(status_, STRATA_OK) << "vulkan:0 is required for the timestamp tests: " << reason_;
    state_ = shared_state_;
  }
};

TEST_F(VulkanAbiTiming, EventElapsedMeasuresQueuedWorkBetweenTimingEvents) {
  strata_error err = no_error();
  const int64_t n = 1 << 20;  // 4 MiB per tensor
  std::vector<float> ones(n, 1.0f);
  strata_buffer x = alloc(n * 4), y = alloc(n * 4);
  h2d(x, 0, ones.data(), n * 4);
  ASSERT_EQ(synchronize(nullptr, &err), STRATA_OK) << err.message;
  strata_event start = event_create(STRATA_EVENT_TIMING), end = event_create(STRATA_EVENT_TIMING);
  // An empty interval: two timestamps in a row.
  ASSERT_EQ(event_record(start, nullptr, &err), STRATA_OK) << err.message;
  ASSERT_EQ(event_record(end, nullptr, &err), STRATA_OK) << err.message;
  double empty = -1.0;
  ASSERT_EQ(event_elapsed(start, end, &empty, &err), STRATA_OK) << err.message;
  EXPECT_GE(empty, 0.0);
  EXPECT_LT(empty, 50.0);
  // 16 adds of 4 MiB between the marks; event_elapsed waits for them.
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(event_record(start, nullptr, &err), STRATA_OK) << err.message;
  for (int i = 0; i < 16; ++i) add(y, x, x, n, nullptr);
  ASSERT_EQ(event_record(end, nullptr, &err), STRATA_OK) << err.message;
  double ms = -1.0;
  ASSERT_EQ(event_elapsed(start, end, &ms, &err), STRATA_OK) << err.message;
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  int32_t complete = 0;
  ASSERT_EQ(event_query(end, &complete, &err), STRATA_OK) << err.message;
  EXPECT_EQ(complete, 1) << "event_elapsed waits for both events";
  EXPECT_GT(ms, 0.0);
  EXPECT_GT(ms, empty) << "16 adds of 4 MiB take longer than nothing";
  EXPECT_LE(ms, wall + 1.0) << "the device time lies within the host's";
  std::printf("[ timing   ] vulkan:0 event_elapsed: empty %.4f ms, 16 adds of 4 MiB %.3f ms (host %.3f ms)\n", empty,
              ms, wall);
  // Swapped: the same interval, negative.
  double back = 0.0;
  ASSERT_EQ(event_elapsed(end, start, &back, &err), STRATA_OK) << err.message;
  EXPECT_DOUBLE_EQ(back, -ms);
  // A copy's `done` may be a TIMING event, on another stream too.
  strata_stream s = stream_create();
  strata_event done = event_create(STRATA_EVENT_TIMING);
  ASSERT_EQ(copy(STRATA_COPY_DEVICE_TO_DEVICE, y, 0, nullptr, x, 0, nullptr, n * 4, s, &err, done), STRATA_OK)
      << err.message;
  double copy_ms = -1.0;
  ASSERT_EQ(event_elapsed(end, done, &copy_ms, &err), STRATA_OK) << err.message;
  EXPECT_GE(copy_ms, 0.0);
  EXPECT_EQ(d2h<float>(y, 0, 4), std::vector<float>(4, 1.0f));
  // Copies that complete when they return (an upload to an idle unified device is
  // a memcpy; a copy to the host is synchronous) still stamp a TIMING `done`.
  ASSERT_EQ(synchronize(s, &err), STRATA_OK) << err.message;
  strata_event up = event_create(STRATA_EVENT_TIMING), down = event_create(STRATA_EVENT_TIMING);
  ASSERT_EQ(copy(STRATA_COPY_HOST_TO_DEVICE, x, 0, nullptr, nullptr, 0, ones.data(), 1024, nullptr, &err, up),
            STRATA_OK)
      << err.message;
  std::vector<float> read_back(256, 0.0f);
  ASSERT_EQ(copy(STRATA_COPY_DEVICE_TO_HOST, nullptr, 0, read_back.data(), x, 0, nullptr, 1024, nullptr, &err, down),
            STRATA_OK)
      << err.message;
  EXPECT_EQ(read_back, std::vector<float>(256, 1.0f));
  double host_copies_ms = -1.0;
  ASSERT_EQ(event_elapsed(up, down, &host_copies_ms, &err), STRATA_OK) << err.message;
  EXPECT_GE(host_copies_ms, 0.0);
  for (strata_event e : {start, end, done, up, down}) event_destroy(e);
  stream_destroy(s);
  free(x);
  free(y);
}

TEST_F(VulkanAbiTiming, EventElapsedRefusesEventsWithoutTimestampsByName) {
  strata_error err = no_error();
  strata_event timing = event_create(STRATA_EVENT_TIMING), plain = event_create(0),
               fresh = event_create(STRATA_EVENT_TIMING);
  ASSERT_EQ(event_record(timing, nullptr, &err), STRATA_OK) << err.message;
  ASSERT_EQ(event_record(plain, nullptr, &err), STRATA_OK) << err.message;
  double ms = 0.0;
  // Created without STRATA_EVENT_TIMING, as start or as end.
  for (const auto& [a, b, which] : {std::tuple{plain, timing, "start event"}, std::tuple{timing, plain, "end event"}}) {
    err = no_error();
    EXPECT_EQ(event_elapsed(a, b, &ms, &err), STRATA_ERROR_INVALID_ARGUMENT);
    for (const char* part : {"vulkan:0", "event_elapsed", which, "not created with STRATA_EVENT_TIMING"})
      EXPECT_TRUE(contains(err.message, part)) << "\"" << part << "\" missing from: " << err.message;
  }
  // Never recorded.
  err = no_error();
  EXPECT_EQ(event_elapsed(timing, fresh, &ms, &err), STRATA_ERROR_INVALID_ARGUMENT);
  for (const char* part : {"vulkan:0", "end event", "never recorded"})
    EXPECT_TRUE(contains(err.message, part)) << "\"" << part << "\" missing from: " << err.message;
  err = no_error();
  EXPECT_EQ(event_elapsed(timing, nullptr, &ms, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "null end event")) << err.message;
  // The plain event stays an ordinary event.
  ASSERT_EQ(event_synchronize(plain, &err), STRATA_OK) << err.message;
  for (strata_event e : {timing, plain, fresh}) event_destroy(e);
}

TEST_F(VulkanAbiTiming, ManyTimingEventsGetTheirOwnQueries) {
  // More events than one query pool holds (256), created and destroyed.
  strata_error err = no_error();
  std::vector<strata_event> events;
  for (int i = 0; i < 300; ++i) events.push_back(event_create(STRATA_EVENT_TIMING));
  for (strata_event e : events) ASSERT_EQ(event_record(e, nullptr, &err), STRATA_OK) << err.message;
  double ms = -1.0;
  ASSERT_EQ(event_elapsed(events.front(), events.back(), &ms, &err), STRATA_OK) << err.message;
  EXPECT_GE(ms, 0.0);
  for (size_t i = 0; i + 1 < events.size(); i += 37) {
    ASSERT_EQ(event_elapsed(events[i], events[i + 1], &ms, &err), STRATA_OK) << err.message;
    EXPECT_GE(ms, 0.0);
  }
  for (strata_event e : events) event_destroy(e);
}

TEST(VulkanAbiNoTimestamps, EventElapsedIsUnsupportedWithTheReason) {
  // The test hook "test_no_timestamps" makes vulkan:0 look like a device whose
  // queue writes no timestamps (timestampValidBits 0).
  ASSERT_NE(api(), nullptr) << "cannot load " STRATA_VULKAN_PLUGIN_PATH ": " << dlerror();
  strata_plugin_state st = nullptr;
  strata_error err = no_error();
  ASSERT_EQ(init_plugin(R"({"pipeline_cache": false, "test_no_timestamps": true})", &st, &err), STRATA_OK)
      << "vulkan:0 is required: " << err.message;
  Plugin p(st);
  // TIMING events are still created and recorded, as plain events.
  strata_event a = p.event_create(STRATA_EVENT_TIMING), b = p.event_create(STRATA_EVENT_TIMING);
  ASSERT_EQ(p.event_record(a, nullptr, &err), STRATA_OK) << err.message;
  ASSERT_EQ(p.event_record(b, nullptr, &err), STRATA_OK) << err.message;
  ASSERT_EQ(p.event_synchronize(b, &err), STRATA_OK) << err.message;
  double ms = 0.0;
  EXPECT_EQ(p.event_elapsed(a, b, &ms, &err), STRATA_ERROR_UNSUPPORTED);
  for (const char* part : {"vulkan:0", "event_elapsed", "timestampValidBits 0", "test_no_timestamps"})
    EXPECT_TRUE(contains(err.message, part)) << "\"" << part << "\" missing from: " << err.message;
  p.event_destroy(a);
  p.event_destroy(b);
  api()->shutdown(st);
}

TEST_F(VulkanAbi, SynchronizeFromAnotherThreadWhileAStreamRecords) {
  // The host serialises calls naming a stream, but stream_synchronize,
  // event_query and memory_* may come from any thread at any time.
  strata_stream s = stream_create();
  const int64_t n = 256;
  std::vector<float> ones(n, 1.0f);
  strata_buffer x = alloc(n * 4, s), y = alloc(n * 4, s);
  h2d(x, 0, ones.data(), n * 4, s);
  h2d(y, 0, ones.data(), n * 4, s);
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    strata_error err = no_error();
    strata_memory_args m{};
    while (!done.load()) {
      EXPECT_EQ(synchronize(s, &err), STRATA_OK) << err.message;
      EXPECT_EQ(memory(api()->memory_stats, &m, &err), STRATA_OK) << err.message;
    }
  });
  for (int i = 0; i < 300; ++i) {
    strata_buffer t = alloc(n * 4, s);
    add(t, x, y, n, s);  // t = 2
    add(x, t, y, n, s);  // x = 3, then back to 1 below
    free(t, s);
    h2d(x, 0, ones.data(), n * 4, s);
  }
  done = true;
  watcher.join();
  add(y, x, y, n, s);
  EXPECT_EQ(d2h<float>(y, 0, n, s), std::vector<float>(n, 2.0f));
  free(x, s);
  free(y, s);
  stream_destroy(s);
}

TEST_F(VulkanAbi, StagingCopiesWhenDeviceMemoryIsNotMapped) {
  // "unified_copies": false takes the discrete-GPU path on any device: tensor
  // memory is never mapped, every copy goes through staging ranges.
  strata_plugin_state staged_state = nullptr;
  strata_error err = no_error();
  ASSERT_EQ(init_plugin(R"({"pipeline_cache": false, "unified_copies": false})", &staged_state, &err), STRATA_OK)
      << err.message;
  Plugin staged(staged_state);
  EXPECT_EQ(staged.props().flags & STRATA_DEVICE_UNIFIED_MEMORY, 0u);
  const int64_t n = 300;
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    a[static_cast<size_t>(i)] = static_cast<float>(i);
    b[static_cast<size_t>(i)] = 0.5f * static_cast<float>(i);
  }
  strata_buffer x = staged.alloc(n * 4), y = staged.alloc(n * 4), z = staged.alloc(n * 4);
  staged.h2d(x, 0, a.data(), n * 4);
  staged.h2d(y, 0, b.data(), n * 4);
  ASSERT_EQ(staged.run(STRATA_OP_ADD, "f32,f32->f32", {vec(x, n), vec(y, n)}, vec(z, n), {}, &err), STRATA_OK)
      << err.message;
  ASSERT_EQ(staged.d2d(z, 8, z, 0, (n - 2) * 4, &err), STRATA_OK) << err.message;
  std::vector<float> got = staged.d2h<float>(z, 0, n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = i < 2 ? i : i - 2;
    ASSERT_EQ(got[static_cast<size_t>(i)], 1.5f * static_cast<float>(src)) << i;
  }
  for (strata_buffer buf : {x, y, z}) staged.free(buf);
  api()->shutdown(staged_state);
}

TEST_F(VulkanAbi, KernelsRejectForeignBuffersViewsPastTheirBufferAndShortCalls) {
  strata_buffer a = alloc(16);
  strata_tensor past = vec(a, 4);  // 4 floats from element 2 do not fit in 16 bytes
  past.offset = 2;
  strata_error err = no_error();
  EXPECT_EQ(run(STRATA_OP_ADD, "f32,f32->f32", {vec(a, 4), past}, vec(a, 4), {}, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "exceeds its buffer")) << err.message;
  int not_a_buffer = 0;
  err = no_error();
  EXPECT_EQ(run(STRATA_OP_ADD, "f32,f32->f32", {vec(a, 4), vec(reinterpret_cast<strata_buffer>(&not_a_buffer), 4)},
                vec(a, 4), {}, &err),
            STRATA_ERROR_INVALID_ARGUMENT);
  // A call struct below the 2.0 size is refused without being read further.
  const strata_kernel_entry* e = kernel(STRATA_OP_ADD, "f32,f32->f32");
  ASSERT_NE(e, nullptr);
  strata_kernel_call tiny{};
  tiny.struct_size = STRATA_KERNEL_CALL_MIN_SIZE - 1;
  EXPECT_EQ(e->fn(&tiny), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(e->fn(nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  free(a);
}

TEST_F(VulkanAbi, KernelEntriesUseTheOpNamesOfStrataOpsH) {
  strata_error err = no_error();
  strata_device_args a{};
  a.struct_size = sizeof(a);
  a.state = state_;
  a.error = &err;
  ASSERT_EQ(api()->get_kernels(&a), STRATA_OK) << err.message;
  ASSERT_GT(a.n_entries, 150);
  for (int32_t i = 0; i < a.n_entries; ++i) {
    const strata_kernel_entry* e = a.entries[i];
    ASSERT_GE(e->struct_size, STRATA_KERNEL_ENTRY_MIN_SIZE);
    EXPECT_EQ(std::string(e->op).rfind("strata::", 0), 0u) << e->op;
    EXPECT_EQ(e->op_version, static_cast<uint32_t>(STRATA_OP_VERSION)) << e->op;
    EXPECT_NE(e->user_data, nullptr) << e->op << " " << e->signature;
  }
}

TEST_F(VulkanAbi, AttributesAreTypedAndTheWrongKindIsRefusedByName) {
  strata_error err = no_error();
  strata_buffer b = alloc(64);
  // fill: "value" is an exact SCALAR; i64 beyond 2^53 stays exact.
  const int64_t big = (int64_t{1} << 62) + 12345;
  strata_attr value{};
  value.struct_size = sizeof(value);
  value.name = "value";
  value.kind = STRATA_ATTR_SCALAR;
  value.scalar_dtype = STRATA_I64;
  value.i = big;
  ASSERT_EQ(run(STRATA_OP_FILL, "->i64", {}, tensor(b, STRATA_I64, {4}), {value}, &err), STRATA_OK) << err.message;
  EXPECT_EQ(d2h<int64_t>(b, 0, 4), std::vector<int64_t>(4, big));
  value.scalar_dtype = STRATA_F64;
  value.f = -2.75;
  ASSERT_EQ(run(STRATA_OP_FILL, "->f32", {}, vec(b, 4), {value}, &err), STRATA_OK) << err.message;
  EXPECT_EQ(d2h<float>(b, 0, 4), std::vector<float>(4, -2.75f));
  strata_buffer c = alloc(64);
  ASSERT_EQ(run(STRATA_OP_FILL, "->i32", {}, tensor(c, STRATA_I32, {4}), {value}, &err), STRATA_OK) << err.message;
  EXPECT_EQ(d2h<int32_t>(c, 0, 4), std::vector<int32_t>(4, -2));  // truncated toward zero
  // A FLOAT "value" is the wrong kind: INVALID_ARGUMENT naming op and attribute.
  strata_attr as_float{};
  as_float.struct_size = sizeof(as_float);
  as_float.name = "value";
  as_float.kind = STRATA_ATTR_FLOAT;
  as_float.f = 1.0;
  err = no_error();
  EXPECT_EQ(run(STRATA_OP_FILL, "->f32", {}, vec(b, 4), {as_float}, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "strata::fill")) << err.message;
  EXPECT_TRUE(contains(err.message, "value")) << err.message;
  // cast: "dtype" is a DTYPE naming the output's dtype.
  strata_attr dtype{};
  dtype.struct_size = sizeof(dtype);
  dtype.name = "dtype";
  dtype.kind = STRATA_ATTR_DTYPE;
  dtype.i = STRATA_I32;
  value.f = 7.9;
  ASSERT_EQ(run(STRATA_OP_FILL, "->f32", {}, vec(b, 4), {value}, &err), STRATA_OK) << err.message;
  ASSERT_EQ(run(STRATA_OP_CAST, "f32->i32", {vec(b, 4)}, tensor(c, STRATA_I32, {4}), {dtype}, &err), STRATA_OK)
      << err.message;
  EXPECT_EQ(d2h<int32_t>(c, 0, 4), std::vector<int32_t>(4, 7));
  dtype.kind = STRATA_ATTR_INT;
  err = no_error();
  EXPECT_EQ(run(STRATA_OP_CAST, "f32->i32", {vec(b, 4)}, tensor(c, STRATA_I32, {4}), {dtype}, &err),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "strata::cast") && contains(err.message, "dtype")) << err.message;
  // sum: "dims" must be INTS.
  strata_attr dims = int_attr("dims", 0);
  err = no_error();
  EXPECT_EQ(run(STRATA_OP_SUM, "f32->f32", {vec(b, 4)}, vec(c, 1), {dims}, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "strata::sum") && contains(err.message, "dims")) << err.message;
  free(b);
  free(c);
}

// ---- Deferred errors ---------------------------------------------------------

TEST_F(VulkanAbi, OutOfRangeIndexIsReportedAtStreamSynchronizeAndTheDeviceCarriesOn) {
  strata_error err = no_error();
  const std::vector<float> x{10, 11, 20, 21, 30, 31, 40, 41, 50, 51};  // [5, 2]
  const std::vector<int64_t> index{1, 7, 4};
  strata_buffer xb = alloc(x.size() * 4), ib = alloc(index.size() * 8), yb = alloc(6 * 4);
  h2d(xb, 0, x.data(), x.size() * 4);
  h2d(ib, 0, index.data(), index.size() * 8);
  const strata_attr dim = int_attr("dim", 0);
  // The kernel itself does not wait for the device: it returns OK.
  ASSERT_EQ(run(STRATA_OP_INDEX_SELECT, "f32,i64->f32", {tensor(xb, STRATA_F32, {5, 2}), tensor(ib, STRATA_I64, {3})},
                tensor(yb, STRATA_F32, {3, 2}), {dim}, &err),
            STRATA_OK)
      << err.message;
  err = no_error();
  ASSERT_EQ(synchronize(nullptr, &err), STRATA_ERROR_DEFERRED);
  const std::string m = err.message;
  for (const char* part : {"strata::index_select", "vulkan:0", "index 7", "out of range", "[0, 5)"})
    EXPECT_TRUE(contains(m, part)) << "\"" << part << "\" missing from: " << m;
  // Reported once; the in-range rows were gathered, the bad one never read.
  err = no_error();
  EXPECT_EQ(synchronize(nullptr, &err), STRATA_OK) << err.message;
  EXPECT_EQ(d2h<float>(yb, 0, 6), (std::vector<float>{20, 21, 0, 0, 50, 51}));
  // The next kernel on the device works.
  strata_buffer sum = alloc(10 * 4);
  add(sum, xb, xb, 10, nullptr);
  std::vector<float> doubled = d2h<float>(sum, 0, 10);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(doubled[i], 2 * x[i]) << i;
  for (strata_buffer b : {xb, ib, yb, sum}) free(b);
}

TEST_F(VulkanAbi, DeferredErrorsAreReportedAtEverySynchronisationPoint) {
  strata_error err = no_error();
  const std::vector<float> x{1, 2, 3, 4, 5, 6};  // [3, 2]
  strata_buffer xb = alloc(x.size() * 4), ib = alloc(64), yb = alloc(64);
  h2d(xb, 0, x.data(), x.size() * 4);
  const strata_attr dim1 = int_attr("dim", 1);
  const strata_attr dim0 = int_attr("dim", 0);

  // gather with a negative index, reported by a synchronous copy to the host.
  const std::vector<int64_t> gather_index{0, 1, -1};  // [3, 1]
  h2d(ib, 0, gather_index.data(), gather_index.size() * 8);
  ASSERT_EQ(run(STRATA_OP_GATHER, "f32,i64->f32", {tensor(xb, STRATA_F32, {3, 2}), tensor(ib, STRATA_I64, {3, 1})},
                tensor(yb, STRATA_F32, {3, 1}), {dim1}, &err),
            STRATA_OK)
      << err.message;
  std::vector<float> y(3);
  err = no_error();
  ASSERT_EQ(d2h(y.data(), yb, 0, 12, &err), STRATA_ERROR_DEFERRED);
  EXPECT_TRUE(contains(err.message, "strata::gather") && contains(err.message, "index -1")) << err.message;
  EXPECT_EQ(y, (std::vector<float>{1, 4, 0}));  // the copy itself was done

  // scatter_add skips the bad entry; reported by event_synchronize.
  const std::vector<int64_t> scatter_index{3, 0};  // [1, 2] into base [3, 2] along dim 0
  const std::vector<float> src{100, 200};
  strata_buffer sb = alloc(8);
  h2d(ib, 0, scatter_index.data(), 16);
  h2d(sb, 0, src.data(), 8);
  ASSERT_EQ(run(STRATA_OP_SCATTER_ADD, "f32,i64,f32->f32",
                {tensor(xb, STRATA_F32, {3, 2}), tensor(ib, STRATA_I64, {1, 2}), tensor(sb, STRATA_F32, {1, 2})},
                tensor(yb, STRATA_F32, {3, 2}), {dim0}, &err),
            STRATA_OK)
      << err.message;
  strata_event e = event_create();
  ASSERT_EQ(event_record(e, nullptr, &err), STRATA_OK) << err.message;
  err = no_error();
  ASSERT_EQ(event_synchronize(e, &err), STRATA_ERROR_DEFERRED);
  EXPECT_TRUE(contains(err.message, "strata::scatter_add") && contains(err.message, "index 3")) << err.message;
  EXPECT_EQ(d2h<float>(yb, 0, 6), (std::vector<float>{1, 202, 3, 4, 5, 6}));
  event_destroy(e);

  // Integer division by zero on another stream: 0 there, reported at its synchronize.
  strata_stream s = stream_create();
  const std::vector<int32_t> num{7, -9, 5}, den{2, 0, -5};
  strata_buffer nb = alloc(12, s), db = alloc(12, s), qb = alloc(12, s);
  h2d(nb, 0, num.data(), 12, s);
  h2d(db, 0, den.data(), 12, s);
  ASSERT_EQ(run(STRATA_OP_DIV, "i32,i32->i32", {tensor(nb, STRATA_I32, {3}), tensor(db, STRATA_I32, {3})},
                tensor(qb, STRATA_I32, {3}), {}, &err, s),
            STRATA_OK)
      << err.message;
  err = no_error();
  ASSERT_EQ(synchronize(s, &err), STRATA_ERROR_DEFERRED);
  EXPECT_TRUE(contains(err.message, "strata::div") && contains(err.message, "division by zero") &&
              contains(err.message, "vulkan:0"))
      << err.message;
  EXPECT_EQ(d2h<int32_t>(qb, 0, 3, s), (std::vector<int32_t>{3, 0, -1}));
  // Nothing is left to report.
  EXPECT_EQ(synchronize(s, &err), STRATA_OK) << err.message;
  EXPECT_EQ(synchronize(nullptr, &err), STRATA_OK) << err.message;
  for (strata_buffer b : {nb, db, qb}) free(b, s);
  stream_destroy(s);
  for (strata_buffer b : {xb, ib, yb, sb}) free(b);
}

TEST_F(VulkanAbi, ScatterAddAccumulatesDuplicatesAndSkipsABadEntry) {
  // Several entries per target, in order, plus one out of range: skipped,
  // and reported at the next synchronisation point.
  strata_error err = no_error();
  const std::vector<float> base{1, 1, 1, 1, 1}, src{1, 2, 3, 4, 5, 6, 100};
  const std::vector<int64_t> index{0, 4, 0, 2, 0, 4, 9};
  strata_buffer bb = alloc(20), ib = alloc(56), sb = alloc(28), yb = alloc(20);
  h2d(bb, 0, base.data(), 20);
  h2d(ib, 0, index.data(), 56);
  h2d(sb, 0, src.data(), 28);
  ASSERT_EQ(run(STRATA_OP_SCATTER_ADD, "f32,i64,f32->f32",
                {tensor(bb, STRATA_F32, {5}), tensor(ib, STRATA_I64, {7}), tensor(sb, STRATA_F32, {7})},
                tensor(yb, STRATA_F32, {5}), {int_attr("dim", 0)}, &err),
            STRATA_OK)
      << err.message;
  err = no_error();
  ASSERT_EQ(synchronize(nullptr, &err), STRATA_ERROR_DEFERRED);
  EXPECT_TRUE(contains(err.message, "strata::scatter_add") && contains(err.message, "index 9")) << err.message;
  EXPECT_EQ(d2h<float>(yb, 0, 5), (std::vector<float>{10, 1, 5, 1, 9}));
  for (strata_buffer b : {bb, ib, sb, yb}) free(b);
}

// ---- strata.native_handles ---------------------------------------------------

TEST_F(VulkanAbi, NativeHandlesAreFoundByName) {
  const strata_ext_native_handles* native = nullptr;
  for (const strata_extension* x = api()->extensions; x != nullptr; x = x->next) {
    if (std::strcmp(x->name, STRATA_EXT_NATIVE_HANDLES) == 0 && x->version >= 1 &&
        x->struct_size >= sizeof(strata_ext_native_handles)) {
      native = reinterpret_cast<const strata_ext_native_handles*>(x);
    }
  }
  ASSERT_NE(native, nullptr) << "no " STRATA_EXT_NATIVE_HANDLES " v1";
  strata_buffer a = alloc(1024), b = alloc(1024);
  strata_error err = no_error();
  strata_native_args n{};
  n.struct_size = sizeof(n);
  n.state = state_;
  n.buffer = a;
  n.error = &err;
  ASSERT_EQ(native->buffer_pointer(&n), STRATA_OK) << err.message;
  EXPECT_STREQ(n.api, "vulkan");
  const auto address_a = reinterpret_cast<uintptr_t>(n.handle);
  EXPECT_NE(address_a, 0u);
  n.buffer = b;
  ASSERT_EQ(native->buffer_pointer(&n), STRATA_OK) << err.message;
  EXPECT_NE(reinterpret_cast<uintptr_t>(n.handle), address_a);  // device addresses of two live buffers
  int not_a_buffer = 0;
  n.buffer = reinterpret_cast<strata_buffer>(&not_a_buffer);
  EXPECT_EQ(native->buffer_pointer(&n), STRATA_ERROR_INVALID_ARGUMENT);
  n.buffer = nullptr;
  n.stream = nullptr;
  n.handle = nullptr;
  n.api = nullptr;
  ASSERT_EQ(native->stream_handle(&n), STRATA_OK) << err.message;
  EXPECT_NE(n.handle, nullptr);  // the VkQueue
  EXPECT_STREQ(n.api, "vulkan");
  free(a);
  free(b);
}

TEST_F(VulkanAbi, OverlappingDeviceCopyKeepsItsTemporaryUntilTheCopyHasRun) {
  // An overlapping device copy goes through a temporary staging range. When
  // its second command fills the batch (batch_size 8 here) the batch is
  // submitted at once; the range must stay reserved until that batch has
  // run, or the next upload (queued through staging) is handed the same
  // range and the two copies trample each other. Each phase puts the copy
  // at another position in the batch, behind adds that keep the device busy.
  strata_stream s = stream_create();
  strata_error err = no_error();
  const size_t bytes = 1 << 20;
  const size_t shift = 4096;
  std::vector<uint8_t> pattern(bytes), other(bytes - shift, 0xee);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<uint8_t>(i * 13 + i / 251);
  std::vector<uint8_t> expected = pattern;
  std::memmove(expected.data() + shift, expected.data(), bytes - shift);
  const int64_t n = 1 << 18;
  strata_buffer a = alloc(bytes, s), b = alloc(bytes, s), x = alloc(n * 4, s), y = alloc(n * 4, s);
  std::vector<float> ones(n, 1.0f);
  h2d(x, 0, ones.data(), n * 4, s);
  h2d(y, 0, ones.data(), n * 4, s);
  for (int phase = 0; phase < 8; ++phase) {
    h2d(a, 0, pattern.data(), bytes, s);
    for (int i = 0; i < phase; ++i) add(y, x, x, n, s);
    ASSERT_EQ(d2d(a, shift, a, 0, bytes - shift, &err, s), STRATA_OK) << err.message;
    h2d(b, 0, other.data(), other.size(), s);  // queued: its staging range is allocated now
    ASSERT_EQ(d2h<uint8_t>(a, 0, bytes, s), expected) << "phase " << phase;
    ASSERT_EQ(d2h<uint8_t>(b, 0, other.size(), s), other) << "phase " << phase;
  }
  for (strata_buffer buf : {a, b, x, y}) free(buf, s);
  stream_destroy(s);
}

TEST_F(VulkanAbi, PipelineCreationFailureIsAClearErrorAndTheDeviceCarriesOn) {
  strata_plugin_state st = nullptr;
  strata_error err = no_error();
  // The test hook refuses option values that do not name "<shader>/<kernel>".
  EXPECT_EQ(init_plugin(R"({"test_fail_pipeline": "exp"})", &st, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "test_fail_pipeline")) << err.message;
  err = no_error();
  ASSERT_EQ(init_plugin(R"({"pipeline_cache": false, "test_fail_pipeline": "unary_f32_f32/exp"})", &st, &err),
            STRATA_OK)
      << err.message;
  Plugin p(st);
  const int64_t n = 100;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = 0.01f * static_cast<float>(i) - 0.3f;
  strata_buffer x = p.alloc(n * 4), y = p.alloc(n * 4);
  p.h2d(x, 0, values.data(), n * 4);
  for (int attempt = 0; attempt < 2; ++attempt) {  // a failed pipeline is not cached as a success
    err = no_error();
    EXPECT_EQ(p.run(STRATA_OP_EXP, "f32->f32", {vec(x, n)}, vec(y, n), {}, &err), STRATA_ERROR_DEVICE);
    const std::string m = err.message;
    for (const char* part : {"vulkan:0", "exp", "unary_f32_f32", "VK_ERROR_INITIALIZATION_FAILED", "f32[100]"})
      EXPECT_TRUE(contains(m, part)) << "\"" << part << "\" missing from: " << m;
  }
  // The device carries on: another kernel of the same shader variant, and
  // another shader, run; the input is untouched.
  err = no_error();
  ASSERT_EQ(p.run(STRATA_OP_NEG, "f32->f32", {vec(x, n)}, vec(y, n), {}, &err), STRATA_OK) << err.message;
  ASSERT_EQ(p.run(STRATA_OP_ADD, "f32,f32->f32", {vec(y, n), vec(x, n)}, vec(y, n), {}, &err), STRATA_OK)
      << err.message;  // y = -x + x
  EXPECT_EQ(p.d2h<float>(x, 0, n), values);
  EXPECT_EQ(p.d2h<float>(y, 0, n), std::vector<float>(n, 0.0f));
  p.free(x);
  p.free(y);
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
  ASSERT_EQ(
      run(STRATA_OP_LOGICAL_NOT, "bool->bool", {tensor(f, STRATA_BOOL, {n})}, tensor(g, STRATA_BOOL, {n}), {}, &err),
      STRATA_OK)
      << err.message;
  std::vector<uint8_t> negated = d2h<uint8_t>(g, 0, flags.size());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(negated[static_cast<size_t>(i)], i % 3 == 0 ? 0 : 1) << "element " << i;
  free(f);
  free(g);
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
  ASSERT_EQ(run(STRATA_OP_SUM, "f32->f32", {tensor(xb, STRATA_F32, {rows, cols})}, tensor(sb, STRATA_F32, {rows, 1}),
                {ints_attr("dims", dims, 1)}, &err),
            STRATA_OK)
      << err.message;
  std::vector<float> sums = d2h<float>(sb, 0, static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r)
    ASSERT_EQ(sums[static_cast<size_t>(r)], static_cast<float>(cols * (r % 5) + cols / 2)) << "row " << r;
  free(xb);
  free(sb);
}

TEST_F(VulkanAbi, SoftmaxBeyondOneDispatchCoversEveryRow) {
  // One work group per row, 66001 rows.
  strata_error err = no_error();
  const int64_t rows = 66001;
  std::vector<float> logits(static_cast<size_t>(rows * 2));
  for (int64_t r = 0; r < rows; ++r) logits[static_cast<size_t>(2 * r + 1)] = static_cast<float>(r % 4);
  strata_buffer lb = alloc(logits.size() * 4), pb = alloc(logits.size() * 4);
  h2d(lb, 0, logits.data(), logits.size() * 4);
  ASSERT_EQ(run(STRATA_OP_SOFTMAX, "f32->f32", {tensor(lb, STRATA_F32, {rows, 2})}, tensor(pb, STRATA_F32, {rows, 2}),
                {int_attr("dim", 1)}, &err),
            STRATA_OK)
      << err.message;
  std::vector<float> probs = d2h<float>(pb, 0, logits.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double p1 = 1.0 / (1.0 + std::exp(-static_cast<double>(r % 4)));
    ASSERT_NEAR(probs[static_cast<size_t>(2 * r + 1)], p1, 1e-6) << "row " << r;
  }
  free(lb);
  free(pb);
}

TEST_F(VulkanAbi, MatmulBeyondOneDispatchCoversEveryTileAndBatch) {
  // More than 65535 64-row tiles, and more than 65535 batches (the right
  // operand broadcast over them with stride 0). Each is 65536 full 64 x 64
  // tiles: instant on a GPU, a minute or two on lavapipe.
  strata_error err = no_error();
  const strata_device_props p = props();
  if (p.type == STRATA_DEVICE_CPU && std::getenv("STRATA_VULKAN_SLOW_TESTS") == nullptr) {
    GTEST_SKIP() << p.name << " is a software device: 2 x 65536 matmul tiles take minutes there; "
                 << "set STRATA_VULKAN_SLOW_TESTS=1 to run them anyway";
  }
  const int64_t m = 65535 * 64 + 70;
  std::vector<float> column(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) column[static_cast<size_t>(i)] = static_cast<float>(i % 1000);
  const float two = 2.0f;
  strata_buffer ab = alloc(column.size() * 4), bb = alloc(4), yb = alloc(column.size() * 4);
  h2d(ab, 0, column.data(), column.size() * 4);
  h2d(bb, 0, &two, 4);
  ASSERT_EQ(run(STRATA_OP_MATMUL, "f32,f32->f32", {tensor(ab, STRATA_F32, {m, 1}), tensor(bb, STRATA_F32, {1, 1})},
                tensor(yb, STRATA_F32, {m, 1}), {}, &err),
            STRATA_OK)
      << err.message;
  std::vector<float> doubled = d2h<float>(yb, 0, column.size());
  for (int64_t i = 0; i < m; ++i) ASSERT_EQ(doubled[static_cast<size_t>(i)], 2.0f * static_cast<float>(i % 1000)) << i;
  const int64_t batches = 70001;
  strata_tensor b_batched = tensor(bb, STRATA_F32, {batches, 1, 1});
  b_batched.strides[0] = 0;
  ASSERT_EQ(run(STRATA_OP_MATMUL, "f32,f32->f32", {tensor(ab, STRATA_F32, {batches, 1, 1}), b_batched},
                tensor(yb, STRATA_F32, {batches, 1, 1}), {}, &err),
            STRATA_OK)
      << err.message;
  doubled = d2h<float>(yb, 0, static_cast<size_t>(batches));
  for (int64_t i = 0; i < batches; ++i)
    ASSERT_EQ(doubled[static_cast<size_t>(i)], 2.0f * static_cast<float>(i % 1000)) << "batch " << i;
  for (strata_buffer buf : {ab, bb, yb}) free(buf);
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
    EXPECT_EQ(run(STRATA_OP_COPY, "f32->f32", {broadcast({1})}, t, {}, &err), STRATA_ERROR_UNSUPPORTED) << err.message;
    EXPECT_TRUE(contains(err.message, "2^31")) << err.message;
  }
  // (2^62 + 1 - 1) * 4 wraps to 0 in 64 bits: still far past the buffer.
  strata_tensor wrapping = tensor(b, STRATA_F32, {(int64_t{1} << 62) + 1});
  wrapping.strides[0] = 4;
  err = no_error();
  EXPECT_EQ(run(STRATA_OP_NEG, "f32->f32", {wrapping}, vec(b, 4), {}, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "exceeds its buffer")) << err.message;
  free(b);
}

}  // namespace
