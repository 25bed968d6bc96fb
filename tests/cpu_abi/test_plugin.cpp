// The plugin table, probe, init options, device properties, memory, copies,
// the native handles extension and the kernel table, checked through the C
// ABI.
#include "plugin_fixture.hpp"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <utility>

namespace strata::cpu_abi {
namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(CpuPluginTable, ManifestAndEntries) {
  const strata_plugin_api& api = plugin_api();
  EXPECT_EQ(api.struct_size, sizeof(strata_plugin_api));
  EXPECT_EQ(api.abi_major, static_cast<uint32_t>(STRATA_ABI_MAJOR));
  EXPECT_EQ(api.abi_minor, static_cast<uint32_t>(STRATA_ABI_MINOR));
  EXPECT_EQ(api.min_host_minor, 0u);
  EXPECT_STREQ(api.name, "cpu");
  EXPECT_STREQ(api.vendor, "Strata project");
  EXPECT_STREQ(api.version, "0.1.0");
  for (const void* fn : {reinterpret_cast<const void*>(api.probe), reinterpret_cast<const void*>(api.init),
                         reinterpret_cast<const void*>(api.shutdown), reinterpret_cast<const void*>(api.device_props),
                         reinterpret_cast<const void*>(api.get_kernels), reinterpret_cast<const void*>(api.alloc),
                         reinterpret_cast<const void*>(api.free), reinterpret_cast<const void*>(api.copy),
                         reinterpret_cast<const void*>(api.memory_info), reinterpret_cast<const void*>(api.memory_trim),
                         reinterpret_cast<const void*>(api.memory_stats)}) {
    EXPECT_NE(fn, nullptr);
  }
  // No streams: every stream/event entry is NULL.
  EXPECT_EQ(api.stream_create, nullptr);
  EXPECT_EQ(api.stream_destroy, nullptr);
  EXPECT_EQ(api.stream_synchronize, nullptr);
  EXPECT_EQ(api.event_create, nullptr);
  EXPECT_EQ(api.event_destroy, nullptr);
  EXPECT_EQ(api.event_record, nullptr);
  EXPECT_EQ(api.stream_wait_event, nullptr);
  EXPECT_EQ(api.event_synchronize, nullptr);
  EXPECT_EQ(api.event_query, nullptr);
  EXPECT_EQ(api.event_elapsed, nullptr);
  EXPECT_NE(api.extensions, nullptr);
}

// In a process of its own (the "threadsafe" death-test style re-runs the
// binary for this test alone), so that nothing has called init yet.
TEST(CpuPluginProbe, WorksBeforeInit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const strata_plugin_api& api = plugin_api();
        strata_error err = make_error();
        strata_probe_args probe{};
        probe.struct_size = sizeof(probe);
        probe.error = &err;
        if (api.probe(&probe) != STRATA_OK || probe.score != 50 || err.message[0] != '\0') std::_Exit(1);
        // init after probe, with the probe's score handed in and left alone.
        strata_init_args init = make_args<strata_init_args>(err);
        init.host = quiet_host();
        init.options_json = "{}";
        init.score = probe.score;
        if (api.init(&init) != STRATA_OK || init.score != 50 || init.device_count != 1) std::_Exit(2);
        api.shutdown(init.state);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CpuPluginProbe, RefusesATooSmallStruct) {
  strata_error err = make_error();
  strata_probe_args probe{};
  probe.struct_size = STRATA_PROBE_ARGS_MIN_SIZE - 1;
  probe.error = &err;
  EXPECT_EQ(plugin_api().probe(&probe), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "probe")) << err.message;
  EXPECT_TRUE(contains(err.message, "struct_size")) << err.message;
  EXPECT_EQ(probe.score, 0);
}

TEST(CpuPluginInit, RejectsBadOptions) {
  const strata_plugin_api& api = plugin_api();
  const std::pair<const char*, const char*> cases[] = {
      {R"({"threadz": 2})", "threadz"},    // unknown key, named
      {R"({"threads": -1})", "threads"},   // negative
      {R"({"threads": "2"})", "threads"},  // not an integer
      {R"([1, 2])", "object"},             // not an object
      {R"({"threads": )", "options"},      // not JSON
      {R"({"isa": "avx9"})", "avx9"},      // unknown instruction set
      {R"({"isa": 2})", "isa"},            // not a string
  };
  for (const auto& [options, expected] : cases) {
    strata_error err = make_error();
    strata_init_args args = make_args<strata_init_args>(err);
    args.options_json = options;
    EXPECT_EQ(api.init(&args), STRATA_ERROR_INVALID_ARGUMENT) << options;
    EXPECT_TRUE(contains(err.message, expected)) << err.message;
    EXPECT_EQ(args.state, nullptr);
  }
}

// STRATA_NUM_THREADS chooses the thread count when the options leave it at
// 0; the options win when they set it; a bad value fails init, named.
TEST(CpuPluginInit, StrataNumThreadsSetsTheDefaultThreadCount) {
  static std::vector<std::string> lines;
  strata_host_api host = *quiet_host();
  host.log = [](strata_log_level level, const char* plugin, const char* message) {
    if (level == STRATA_LOG_INFO && std::string(plugin) == "cpu") lines.emplace_back(message);
  };
  ::setenv("STRATA_NUM_THREADS", "3", 1);
  plugin_api().shutdown(init_plugin(&host, "{}"));
  plugin_api().shutdown(init_plugin(&host, R"({"threads": 2})"));
  for (const char* bad : {"abc", "0", "2000", "3x"}) {
    ::setenv("STRATA_NUM_THREADS", bad, 1);
    strata_error err = make_error();
    strata_init_args args = make_args<strata_init_args>(err);
    args.options_json = "{}";
    EXPECT_EQ(plugin_api().init(&args), STRATA_ERROR_INVALID_ARGUMENT) << bad;
    EXPECT_TRUE(contains(err.message, std::string("STRATA_NUM_THREADS=\"") + bad + "\"")) << err.message;
  }
  ::unsetenv("STRATA_NUM_THREADS");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(lines[0].rfind("3 threads", 0) == 0) << lines[0];
  EXPECT_TRUE(lines[1].rfind("2 threads", 0) == 0) << lines[1];
}

TEST(CpuPluginInit, RefusesATooSmallStruct) {
  strata_error err = make_error();
  strata_init_args args = make_args<strata_init_args>(err);
  args.struct_size = STRATA_INIT_ARGS_MIN_SIZE - 1;
  args.options_json = "{}";
  EXPECT_EQ(plugin_api().init(&args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "init")) << err.message;
  EXPECT_EQ(args.state, nullptr);
}

TEST(CpuPluginInit, LogsOneInfoLine) {
  static std::vector<std::string> lines;
  strata_host_api host = *quiet_host();
  host.log = [](strata_log_level level, const char* plugin, const char* message) {
    if (level == STRATA_LOG_INFO && std::string(plugin) == "cpu") lines.emplace_back(message);
  };
  strata_plugin_state state = init_plugin(&host, "{}");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(contains(lines[0], "threads")) << lines[0];
  plugin_api().shutdown(state);
}

TEST_F(CpuAbiTest, DeviceProps) {
  const strata_plugin_api& api = plugin_api();
  strata_device_props props{};
  props.struct_size = sizeof(props);
  strata_error err = make_error();
  strata_device_args args = make_args<strata_device_args>(err, state());
  args.props = &props;
  ASSERT_EQ(api.device_props(&args), STRATA_OK) << err.message;
  EXPECT_EQ(props.struct_size, sizeof(props));
  EXPECT_EQ(props.type, STRATA_DEVICE_CPU);
  EXPECT_GT(std::strlen(props.name), 0u);
  EXPECT_GT(std::strlen(props.compute_capability), 0u);
  EXPECT_GT(props.memory_bytes, uint64_t{1} << 26);
  EXPECT_EQ(props.flags, STRATA_DEVICE_UNIFIED_MEMORY | STRATA_DEVICE_FREE_THREADED);
  uint64_t stored = 0;
  for (strata_dtype d : {STRATA_F32, STRATA_F64, STRATA_F16, STRATA_BF16, STRATA_I32, STRATA_I64, STRATA_BOOL,
                         STRATA_C64, STRATA_C128}) {
    stored |= STRATA_DTYPE_BIT(d);
  }
  EXPECT_EQ(props.dtype_mask, stored);  // none of the reserved dtypes
  EXPECT_EQ(props.compute_dtype_mask, STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_F64) |
                                          STRATA_DTYPE_BIT(STRATA_I32) | STRATA_DTYPE_BIT(STRATA_I64) |
                                          STRATA_DTYPE_BIT(STRATA_BOOL) | STRATA_DTYPE_BIT(STRATA_C64) |
                                          STRATA_DTYPE_BIT(STRATA_C128));
  for (uint8_t b : props.uuid) EXPECT_EQ(b, 0u);
  EXPECT_STREQ(props.pci_bus_id, "");

  args.device = 1;
  EXPECT_EQ(api.device_props(&args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "device 1")) << err.message;
}

// An older host knows the struct only up to compute_capability: the plugin
// writes no byte past that and reports the size it wrote.
TEST_F(CpuAbiTest, DevicePropsRespectsAnOlderHostsCapacity) {
  constexpr size_t kOld = STRATA_DEVICE_PROPS_MIN_SIZE;
  static_assert(kOld == STRATA_SIZE_UP_TO(strata_device_props, compute_capability));
  static_assert(kOld < sizeof(strata_device_props));
  strata_device_props props;
  std::memset(&props, 0xAB, sizeof(props));
  props.struct_size = kOld;
  strata_error err = make_error();
  strata_device_args args = make_args<strata_device_args>(err, state());
  args.props = &props;
  ASSERT_EQ(plugin_api().device_props(&args), STRATA_OK) << err.message;
  EXPECT_EQ(props.struct_size, kOld);
  EXPECT_EQ(props.type, STRATA_DEVICE_CPU);
  EXPECT_GT(std::strlen(props.compute_capability), 0u);
  const auto* bytes = reinterpret_cast<const unsigned char*>(&props);
  for (size_t k = kOld; k < sizeof(props); ++k) ASSERT_EQ(bytes[k], 0xABu) << "byte " << k << " was written";

  // Below the required fields, the host's struct is refused.
  props.struct_size = kOld - 1;
  EXPECT_EQ(plugin_api().device_props(&args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "capacity")) << err.message;
}

TEST_F(CpuAbiTest, DeviceArgsBelowTheMinimumAreRefused) {
  strata_device_props props{};
  props.struct_size = sizeof(props);
  strata_error err = make_error();
  strata_device_args args = make_args<strata_device_args>(err, state());
  args.props = &props;
  args.struct_size = STRATA_DEVICE_ARGS_MIN_SIZE - 1;
  EXPECT_EQ(plugin_api().device_props(&args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "device_props")) << err.message;
  EXPECT_EQ(plugin_api().get_kernels(&args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "get_kernels")) << err.message;
  EXPECT_EQ(args.entries, nullptr);
}

TEST_F(CpuAbiTest, AllocIsAlignedAndUniqueEvenForZeroBytes) {
  strata_buffer a = alloc_buffer(state(), 0);
  strata_buffer b = alloc_buffer(state(), 0);
  strata_buffer c = alloc_buffer(state(), 100);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);
  for (strata_buffer p : {a, b, c}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  for (strata_buffer p : {a, b, c}) free_buffer(state(), p);
}

TEST_F(CpuAbiTest, AllocKindsAndHostPointers) {
  void* device_host = nullptr;
  void* pinned_host = nullptr;
  strata_buffer device = alloc_buffer(state(), 256, STRATA_MEMORY_DEVICE, &device_host);
  strata_buffer pinned = alloc_buffer(state(), 256, STRATA_MEMORY_PINNED_HOST, &pinned_host);
  // Both are host memory: the host pointer is the buffer's address.
  EXPECT_EQ(device_host, static_cast<void*>(device));
  EXPECT_EQ(pinned_host, static_cast<void*>(pinned));
  std::memset(pinned_host, 0x5A, 256);
  strata_error err = make_error();
  std::vector<uint8_t> back(256);
  ASSERT_EQ(copy_d2h(state(), back.data(), pinned, 0, 256, &err), STRATA_OK) << err.message;
  EXPECT_EQ(back, std::vector<uint8_t>(256, 0x5A));
  free_buffer(state(), device);
  free_buffer(state(), pinned);

  strata_alloc_args args = make_args<strata_alloc_args>(err, state());
  args.kind = static_cast<strata_memory_kind>(7);
  args.bytes = 16;
  EXPECT_EQ(plugin_api().alloc(&args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "kind")) << err.message;
  args.kind = STRATA_MEMORY_DEVICE;
  args.struct_size = STRATA_ALLOC_ARGS_MIN_SIZE - 1;
  EXPECT_EQ(plugin_api().alloc(&args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "alloc")) << err.message;
  EXPECT_EQ(args.buffer, nullptr);
}

TEST_F(CpuAbiTest, CopyRoundTripWithOffsets) {
  strata_error err = make_error();
  std::vector<uint8_t> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7);
  strata_buffer a = alloc_buffer(state(), 1000);
  strata_buffer b = alloc_buffer(state(), 1000);
  ASSERT_EQ(copy_h2d(state(), a, 0, host.data(), 1000, &err), STRATA_OK) << err.message;
  ASSERT_EQ(copy_d2d(state(), b, 10, a, 20, 500, &err), STRATA_OK) << err.message;
  std::vector<uint8_t> back(500);
  ASSERT_EQ(copy_d2h(state(), back.data(), b, 10, 500, &err), STRATA_OK) << err.message;
  for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], host[i + 20]) << i;

  // Overlapping ranges of one buffer (memmove semantics).
  ASSERT_EQ(copy_d2d(state(), a, 1, a, 0, 999, &err), STRATA_OK) << err.message;
  std::vector<uint8_t> shifted(1000);
  ASSERT_EQ(copy_d2h(state(), shifted.data(), a, 0, 1000, &err), STRATA_OK) << err.message;
  EXPECT_EQ(shifted[0], host[0]);
  for (size_t i = 1; i < shifted.size(); ++i) ASSERT_EQ(shifted[i], host[i - 1]) << i;
  free_buffer(state(), a);
  free_buffer(state(), b);
}

TEST_F(CpuAbiTest, CopyRefusesBadRangesKindsAndSmallStructs) {
  strata_error err = make_error();
  std::vector<uint8_t> host(64);
  strata_buffer a = alloc_buffer(state(), 32);
  EXPECT_EQ(copy_h2d(state(), a, 0, host.data(), 33, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "32 bytes")) << err.message;
  EXPECT_EQ(copy_d2h(state(), host.data(), a, 30, 4, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(copy_d2d(state(), a, 0, a, 40, 0, &err), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(copy_h2d(state(), a, 32, host.data(), 0, &err), STRATA_OK);  // empty, at the end

  strata_copy_args args = make_args<strata_copy_args>(err, state());
  args.kind = static_cast<strata_copy_kind>(9);
  EXPECT_EQ(plugin_api().copy(&args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "kind")) << err.message;
  args.kind = STRATA_COPY_HOST_TO_DEVICE;
  args.dst = a;
  args.src_host = host.data();
  args.bytes = 8;
  args.struct_size = STRATA_COPY_ARGS_MIN_SIZE - 1;
  EXPECT_EQ(plugin_api().copy(&args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "struct_size")) << err.message;
  free_buffer(state(), a);
}

TEST_F(CpuAbiTest, MemoryInfoReportsPhysicalMemory) {
  strata_error err = make_error();
  strata_memory_args args = make_args<strata_memory_args>(err, state());
  ASSERT_EQ(plugin_api().memory_info(&args), STRATA_OK) << err.message;
  EXPECT_GT(args.total_bytes, uint64_t{1} << 26);
  EXPECT_GT(args.free_bytes, 0u);
  EXPECT_LE(args.free_bytes, args.total_bytes);
  ASSERT_EQ(plugin_api().memory_trim(&args), STRATA_OK) << err.message;
  args.device = 3;
  EXPECT_EQ(plugin_api().memory_info(&args), STRATA_ERROR_INVALID_ARGUMENT);
}

TEST_F(CpuAbiTest, MemoryStatsFollowAllocations) {
  const auto stats = [&] {
    strata_error err = make_error();
    strata_memory_args args = make_args<strata_memory_args>(err, state());
    EXPECT_EQ(plugin_api().memory_stats(&args), STRATA_OK) << err.message;
    return args;
  };
  const strata_memory_args before = stats();
  EXPECT_EQ(before.bytes_reserved, before.bytes_in_use);
  EXPECT_GE(before.peak_bytes_in_use, before.bytes_in_use);

  constexpr size_t kBytes = size_t{3} << 20;
  strata_buffer big = alloc_buffer(state(), kBytes);
  const strata_memory_args during = stats();
  EXPECT_EQ(during.bytes_in_use, before.bytes_in_use + kBytes);
  EXPECT_EQ(during.bytes_reserved, during.bytes_in_use);
  EXPECT_GE(during.peak_bytes_in_use, during.bytes_in_use);
  EXPECT_EQ(during.allocations, before.allocations + 1);

  free_buffer(state(), big);
  const strata_memory_args after = stats();
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_GE(after.peak_bytes_in_use, before.bytes_in_use + kBytes);  // the peak stays
  EXPECT_EQ(after.allocations, during.allocations);
}

TEST_F(CpuAbiTest, NativeHandlesExtension) {
  const strata_ext_native_handles* native = nullptr;
  for (const strata_extension* e = plugin_api().extensions; e != nullptr; e = e->next) {
    ASSERT_GE(e->struct_size, STRATA_EXTENSION_MIN_SIZE);
    if (e->name != nullptr && std::string(e->name) == STRATA_EXT_NATIVE_HANDLES) {
      ASSERT_GE(e->version, 1u);
      ASSERT_GE(e->struct_size, sizeof(strata_ext_native_handles));
      native = reinterpret_cast<const strata_ext_native_handles*>(e);
    }
  }
  ASSERT_NE(native, nullptr) << "no " << STRATA_EXT_NATIVE_HANDLES << " extension";
  ASSERT_NE(native->buffer_pointer, nullptr);
  ASSERT_NE(native->stream_handle, nullptr);

  DeviceTensor& t = tensor<int32_t>(STRATA_I32, {4}, {1, 2, 3, 4});
  strata_error err = make_error();
  strata_native_args args = make_args<strata_native_args>(err, state());
  args.buffer = t.desc().buffer;
  ASSERT_EQ(native->buffer_pointer(&args), STRATA_OK) << err.message;
  ASSERT_NE(args.handle, nullptr);
  EXPECT_STREQ(args.api, "host");
  // The handle is the buffer's memory: what is written there is what the
  // plugin's copies read.
  auto* p = static_cast<int32_t*>(args.handle);
  EXPECT_EQ(p[2], 3);
  p[1] = 20;
  EXPECT_EQ(t.download<int32_t>(), (std::vector<int32_t>{1, 20, 3, 4}));

  strata_native_args stream = make_args<strata_native_args>(err, state());
  ASSERT_EQ(native->stream_handle(&stream), STRATA_OK) << err.message;
  EXPECT_EQ(stream.handle, nullptr);
  EXPECT_STREQ(stream.api, "host");

  args.buffer = nullptr;
  EXPECT_EQ(native->buffer_pointer(&args), STRATA_ERROR_INVALID_ARGUMENT);
  args.buffer = t.desc().buffer;
  args.struct_size = STRATA_NATIVE_ARGS_MIN_SIZE - 1;
  EXPECT_EQ(native->buffer_pointer(&args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(err.message, "struct_size")) << err.message;
}

TEST_F(CpuAbiTest, KernelTableIsWellFormedAndComplete) {
  const std::vector<const strata_kernel_entry*> entries = kernel_entries();
  std::set<std::pair<std::string, std::string>> seen;
  for (const strata_kernel_entry* e : entries) {
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->struct_size, sizeof(strata_kernel_entry));
    EXPECT_NE(e->fn, nullptr);
    EXPECT_EQ(e->op_version, static_cast<uint32_t>(STRATA_OP_VERSION)) << e->op;
    EXPECT_EQ(std::string(e->op).rfind("strata::", 0), 0u) << e->op;
    EXPECT_EQ(e->user_data, nullptr);
    EXPECT_TRUE(seen.emplace(e->op, e->signature).second) << "duplicate " << e->op << " " << e->signature;
  }
  // Every op of docs/ops.md, for f32 (cast: to bool).
  const std::pair<const char*, const char*> required[] = {
      {STRATA_OP_COPY, "f32->f32"},
      {STRATA_OP_CAST, "f32->bool"},
      {STRATA_OP_FILL, "->f32"},
      {STRATA_OP_NEG, "f32->f32"},
      {STRATA_OP_ABS, "i64->i64"},
      {STRATA_OP_SIGN, "i32->i32"},
      {STRATA_OP_EXP, "f32->f32"},
      {STRATA_OP_LOG, "f32->f32"},
      {STRATA_OP_LOG1P, "f32->f32"},
      {STRATA_OP_EXPM1, "f32->f32"},
      {STRATA_OP_SQRT, "f32->f32"},
      {STRATA_OP_RSQRT, "f32->f32"},
      {STRATA_OP_SIN, "f32->f32"},
      {STRATA_OP_COS, "f32->f32"},
      {STRATA_OP_TANH, "f32->f32"},
      {STRATA_OP_SIGMOID, "f32->f32"},
      {STRATA_OP_RELU, "i32->i32"},
      {STRATA_OP_ERF, "f32->f32"},
      {STRATA_OP_FLOOR, "f32->f32"},
      {STRATA_OP_CEIL, "f32->f32"},
      {STRATA_OP_ROUND, "f32->f32"},
      {STRATA_OP_RECIPROCAL, "f32->f32"},
      {STRATA_OP_LOGICAL_NOT, "bool->bool"},
      {STRATA_OP_ADD, "f32,f32->f32"},
      {STRATA_OP_SUB, "i64,i64->i64"},
      {STRATA_OP_MUL, "bf16,bf16->bf16"},
      {STRATA_OP_DIV, "i32,i32->i32"},
      {STRATA_OP_POW, "f32,f32->f32"},
      {STRATA_OP_MAXIMUM, "f16,f16->f16"},
      {STRATA_OP_MINIMUM, "f64,f64->f64"},
      {STRATA_OP_LOGICAL_AND, "bool,bool->bool"},
      {STRATA_OP_LOGICAL_OR, "bool,bool->bool"},
      {STRATA_OP_EQ, "bool,bool->bool"},
      {STRATA_OP_NE, "f32,f32->bool"},
      {STRATA_OP_LT, "i64,i64->bool"},
      {STRATA_OP_LE, "f32,f32->bool"},
      {STRATA_OP_GT, "f32,f32->bool"},
      {STRATA_OP_GE, "f32,f32->bool"},
      {STRATA_OP_WHERE, "bool,f32,f32->f32"},
      {STRATA_OP_SUM, "f32->f32"},
      {STRATA_OP_SUM, "bool->i64"},
      {STRATA_OP_PROD, "f32->f32"},
      {STRATA_OP_MAX, "f32->f32"},
      {STRATA_OP_MIN, "i32->i32"},
      {STRATA_OP_ARGMAX, "f32->i64"},
      {STRATA_OP_ARGMIN, "f32->i64"},
      {STRATA_OP_MATMUL, "f32,f32->f32"},
      {STRATA_OP_MATMUL, "f64,f64->f64"},
      {STRATA_OP_MATMUL, "f16,f16->f16"},
      {STRATA_OP_MATMUL, "bf16,bf16->bf16"},
      {STRATA_OP_INDEX_SELECT, "f32,i64->f32"},
      {STRATA_OP_GATHER, "f32,i64->f32"},
      {STRATA_OP_SCATTER_ADD, "f32,i64,f32->f32"},
      {STRATA_OP_MEAN, "f32->f32"},
      {STRATA_OP_SOFTMAX, "f32->f32"},
      {STRATA_OP_LOG_SOFTMAX, "f32->f32"},
      {STRATA_OP_GELU, "f32->f32"},
      {STRATA_OP_SILU, "f32->f32"},
      {STRATA_OP_RELU_BACKWARD, "f32,f32->f32"},
      {STRATA_OP_SIGMOID_BACKWARD, "f32,f32->f32"},
      {STRATA_OP_TANH_BACKWARD, "f32,f32->f32"},
      {STRATA_OP_GELU_BACKWARD, "f32,f32->f32"},
      {STRATA_OP_SOFTMAX_BACKWARD, "f32,f32->f32"},
      {STRATA_OP_LOG_SOFTMAX_BACKWARD, "f32,f32->f32"},
      {STRATA_OP_AMP_UNSCALE, "f32,f32->f32,f32"},
  };
  for (const auto& [op, sig] : required) EXPECT_TRUE(seen.count({op, sig})) << op << " " << sig;
  const strata_dtype stored[] = {STRATA_F32, STRATA_F64, STRATA_F16, STRATA_BF16, STRATA_I32, STRATA_I64, STRATA_BOOL};
  for (strata_dtype from : stored) {
    for (strata_dtype to : stored) {
      const std::string sig = std::string(plugin::dtype_name(from)) + "->" + plugin::dtype_name(to);
      EXPECT_TRUE(seen.count({STRATA_OP_CAST, sig})) << sig;
    }
  }
}

TEST_F(CpuAbiTest, KernelRejectsWrongOperandCountsAndDtypes) {
  DeviceTensor& a = tensor<float>(STRATA_F32, {2}, {1, 2});
  DeviceTensor& i = tensor<int32_t>(STRATA_I32, {2}, {1, 2});
  DeviceTensor& y = output(STRATA_F32, {2});
  EXPECT_EQ(run(STRATA_OP_ADD, "f32,f32->f32", {&a}, y), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(message(), STRATA_OP_ADD)) << message();
  EXPECT_TRUE(contains(message(), "expected 2 inputs")) << message();
  EXPECT_EQ(run(STRATA_OP_ADD, "f32,f32->f32", {&a, &i}, y), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(message(), STRATA_OP_ADD)) << message();
  EXPECT_TRUE(contains(message(), "input 1 is i32")) << message();

  // Malformed descriptors: below the minimum size, rank past the limit, and
  // a NULL operand array.
  EXPECT_EQ(run(STRATA_OP_ADD, "f32,f32->f32", {&a, &a}, y, {}, [](strata_kernel_call& c) { c.inputs = nullptr; }),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(message(), "inputs array is NULL")) << message();
  strata_tensor small = a.desc();
  small.struct_size = STRATA_TENSOR_MIN_SIZE - 1;
  strata_tensor deep = a.desc();
  deep.rank = STRATA_MAX_RANK + 1;
  Attrs none;
  EXPECT_EQ(run_raw(STRATA_OP_NEG, "f32->f32", {&small}, std::vector<const strata_tensor*>{&y.desc()}.data(), 1, none),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(message(), "struct_size")) << message();
  EXPECT_EQ(run_raw(STRATA_OP_NEG, "f32->f32", {&a.desc()}, std::vector<const strata_tensor*>{&deep}.data(), 1, none),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(message(), "output 0 has rank 9")) << message();
}

TEST_F(CpuAbiTest, KernelRefusesACallStructBelowTheMinimum) {
  DeviceTensor& a = tensor<float>(STRATA_F32, {2}, {1, 2});
  DeviceTensor& y = output(STRATA_F32, {2});
  for (const char* op : {STRATA_OP_ADD, STRATA_OP_AMP_UNSCALE}) {
    const bool amp = std::string(op) == STRATA_OP_AMP_UNSCALE;
    Attrs none;
    const strata_tensor* outs[] = {&y.desc(), &y.desc()};
    const strata_status st =
        run_raw(op, amp ? "f32,f32->f32,f32" : "f32,f32->f32", {&a.desc(), &a.desc()}, outs, amp ? 2 : 1, none,
                [](strata_kernel_call& c) { c.struct_size = STRATA_KERNEL_CALL_MIN_SIZE - 1; });
    EXPECT_EQ(st, STRATA_ERROR_INVALID_ARGUMENT) << op;
    EXPECT_TRUE(contains(message(), op)) << message();
    EXPECT_TRUE(contains(message(), "struct_size")) << message();
  }
  // A larger struct (a newer host's) is fine.
  Attrs none;
  const strata_tensor* outs[] = {&y.desc()};
  EXPECT_EQ(run_raw(STRATA_OP_ADD, "f32,f32->f32", {&a.desc(), &a.desc()}, outs, 1, none,
                    [](strata_kernel_call& c) { c.struct_size = sizeof(c) + 64; }),
            STRATA_OK)
      << message();
}

TEST_F(CpuAbiTest, AttributeOfTheWrongKindIsAnInvalidArgument) {
  DeviceTensor& x = tensor<float>(STRATA_F32, {2, 3}, {0, 1, 2, 10, 11, 12});
  DeviceTensor& index = tensor<int64_t>(STRATA_I64, {2}, {1, 0});
  DeviceTensor& y = output(STRATA_F32, {2, 2});
  EXPECT_EQ(run(STRATA_OP_INDEX_SELECT, "f32,i64->f32", {&x, &index}, y, Attrs().real("dim", 1.0)),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(message(), STRATA_OP_INDEX_SELECT)) << message();
  EXPECT_TRUE(contains(message(), "'dim'")) << message();
  EXPECT_TRUE(contains(message(), "FLOAT")) << message();

  DeviceTensor& s = output(STRATA_F32, {2, 3});
  EXPECT_EQ(run(STRATA_OP_SOFTMAX, "f32->f32", {&x}, s, Attrs().ints("dim", {1})), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(message(), STRATA_OP_SOFTMAX)) << message();
  EXPECT_TRUE(contains(message(), "'dim'")) << message();

  // Compatible kinds are accepted: a BOOL or an exact integer SCALAR as "dim".
  ASSERT_EQ(run(STRATA_OP_INDEX_SELECT, "f32,i64->f32", {&x, &index}, y, Attrs().scalar_i64("dim", 1)), STRATA_OK)
      << message();
  EXPECT_EQ(y.download<float>(), (std::vector<float>{1, 0, 11, 10}));
}

// Free threaded: several threads call kernels, allocate and copy at once.
TEST_F(CpuAbiTest, ConcurrentCallsFromSeveralThreads) {
  constexpr int kThreads = 4;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        const std::vector<float> xs = random_values(5000, 100 + t);
        DeviceTensor x(state(), STRATA_F32, xs.size());
        x.view({static_cast<int64_t>(xs.size())});
        x.upload(xs);
        DeviceTensor y(state(), STRATA_F32, xs.size());
        y.view({static_cast<int64_t>(xs.size())});
        const strata_kernel_fn add = kernel(STRATA_OP_ADD, "f32,f32->f32");
        const strata_kernel_fn exp = kernel(STRATA_OP_EXP, "f32->f32");  // oneDNN above 4096 elements
        for (int it = 0; it < 50; ++it) {
          strata_error err = make_error();
          const strata_tensor* ins[] = {&x.desc(), &x.desc()};
          const strata_tensor* outs[] = {&y.desc()};
          strata_kernel_call call{};
          call.struct_size = sizeof(call);
          call.op = it % 2 == 0 ? STRATA_OP_ADD : STRATA_OP_EXP;
          call.op_version = STRATA_OP_VERSION;
          call.state = state();
          call.inputs = ins;
          call.n_inputs = it % 2 == 0 ? 2 : 1;
          call.outputs = outs;
          call.n_outputs = 1;
          call.error = &err;
          if ((it % 2 == 0 ? add : exp)(&call) != STRATA_OK) ++failures;
          const std::vector<float> out = y.download<float>();
          for (size_t k = 0; k < xs.size(); k += 97) {
            const float expected = it % 2 == 0 ? xs[k] + xs[k] : std::exp(xs[k]);
            if (std::fabs(out[k] - expected) > 1e-5f * std::fabs(expected) + 1e-6f) ++failures;
          }
        }
      } catch (...) {
        ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace strata::cpu_abi
