// The plugin table, init options, device properties, memory and the kernel
// table, checked through the C ABI.
#include "plugin_fixture.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <utility>

namespace strata::cpu_abi {
namespace {

TEST(CpuPluginTable, IdentityAndOptionalEntries) {
  const strata_plugin_api& api = plugin_api();
  EXPECT_EQ(api.struct_size, sizeof(strata_plugin_api));
  EXPECT_EQ(api.abi_major, static_cast<uint32_t>(STRATA_ABI_MAJOR));
  EXPECT_STREQ(api.name, "cpu");
  EXPECT_STREQ(api.vendor, "Strata project");
  EXPECT_STREQ(api.version, "0.1.0");
  EXPECT_NE(api.init, nullptr);
  EXPECT_NE(api.get_kernels, nullptr);
  // No streams: every stream/event entry is NULL.
  EXPECT_EQ(api.stream_create, nullptr);
  EXPECT_EQ(api.stream_destroy, nullptr);
  EXPECT_EQ(api.stream_synchronize, nullptr);
  EXPECT_EQ(api.event_create, nullptr);
  EXPECT_EQ(api.event_destroy, nullptr);
  EXPECT_EQ(api.event_record, nullptr);
  EXPECT_EQ(api.stream_wait_event, nullptr);
  EXPECT_EQ(api.event_synchronize, nullptr);
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
    strata_plugin_state state = nullptr;
    strata_error err = make_error();
    EXPECT_EQ(api.init(nullptr, options, &state, &err), STRATA_ERROR_INVALID_ARGUMENT) << options;
    EXPECT_NE(std::string(err.message).find(expected), std::string::npos) << err.message;
  }
}

TEST(CpuPluginInit, LogsOneInfoLine) {
  static std::vector<std::string> lines;
  strata_host_api host{sizeof(strata_host_api), STRATA_ABI_MAJOR, STRATA_ABI_MINOR,
                       [](strata_log_level level, const char* plugin, const char* message) {
                         if (level == STRATA_LOG_INFO && std::string(plugin) == "cpu") lines.emplace_back(message);
                       }};
  strata_plugin_state state = nullptr;
  strata_error err = make_error();
  ASSERT_EQ(plugin_api().init(&host, "{}", &state, &err), STRATA_OK) << err.message;
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("threads"), std::string::npos) << lines[0];
  plugin_api().shutdown(state);
}

TEST_F(CpuAbiTest, DeviceProps) {
  const strata_plugin_api& api = plugin_api();
  EXPECT_EQ(api.score(state()), 50);
  ASSERT_EQ(api.device_count(state()), 1);
  strata_device_props props{};
  props.struct_size = sizeof(props);
  strata_error err = make_error();
  ASSERT_EQ(api.device_props(state(), 0, &props, &err), STRATA_OK) << err.message;
  EXPECT_EQ(props.struct_size, sizeof(props));
  EXPECT_EQ(props.type, STRATA_DEVICE_CPU);
  EXPECT_GT(std::strlen(props.name), 0u);
  EXPECT_GT(std::strlen(props.compute_capability), 0u);
  EXPECT_GT(props.memory_bytes, uint64_t{1} << 26);
  EXPECT_EQ(props.dtype_mask, 0x7fu);
  EXPECT_EQ(props.compute_dtype_mask, STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_F64) |
                                          STRATA_DTYPE_BIT(STRATA_I32) | STRATA_DTYPE_BIT(STRATA_I64) |
                                          STRATA_DTYPE_BIT(STRATA_BOOL));
  EXPECT_EQ(props.has_streams, 0);
  EXPECT_EQ(props.unified_memory, 1);
  EXPECT_EQ(api.device_props(state(), 1, &props, &err), STRATA_ERROR_INVALID_ARGUMENT);
}

TEST_F(CpuAbiTest, AllocIsAlignedAndUniqueEvenForZeroBytes) {
  const strata_plugin_api& api = plugin_api();
  strata_error err = make_error();
  strata_buffer a = nullptr, b = nullptr, c = nullptr;
  ASSERT_EQ(api.alloc(state(), 0, 0, &a, &err), STRATA_OK);
  ASSERT_EQ(api.alloc(state(), 0, 0, &b, &err), STRATA_OK);
  ASSERT_EQ(api.alloc(state(), 0, 100, &c, &err), STRATA_OK);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);
  for (strata_buffer p : {a, b, c}) EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  for (strata_buffer p : {a, b, c}) api.free(state(), 0, p);
}

TEST_F(CpuAbiTest, CopyRoundTripWithOffsets) {
  const strata_plugin_api& api = plugin_api();
  strata_error err = make_error();
  std::vector<uint8_t> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7);
  strata_buffer a = nullptr, b = nullptr;
  ASSERT_EQ(api.alloc(state(), 0, 1000, &a, &err), STRATA_OK);
  ASSERT_EQ(api.alloc(state(), 0, 1000, &b, &err), STRATA_OK);
  ASSERT_EQ(api.copy_h2d(state(), 0, a, 0, host.data(), 1000, nullptr, &err), STRATA_OK);
  ASSERT_EQ(api.copy_d2d(state(), 0, b, 10, a, 20, 500, nullptr, &err), STRATA_OK);
  std::vector<uint8_t> back(500);
  ASSERT_EQ(api.copy_d2h(state(), 0, back.data(), b, 10, 500, nullptr, &err), STRATA_OK);
  for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], host[i + 20]) << i;
  api.free(state(), 0, a);
  api.free(state(), 0, b);
}

TEST_F(CpuAbiTest, KernelTableIsWellFormedAndComplete) {
  const strata_kernel_entry* entries = nullptr;
  int32_t count = 0;
  strata_error err = make_error();
  ASSERT_EQ(plugin_api().get_kernels(state(), 0, &entries, &count, &err), STRATA_OK);
  std::set<std::pair<std::string, std::string>> seen;
  for (int32_t i = 0; i < count; ++i) {
    EXPECT_EQ(entries[i].struct_size, sizeof(strata_kernel_entry));
    EXPECT_NE(entries[i].fn, nullptr);
    EXPECT_TRUE(seen.emplace(entries[i].op, entries[i].signature).second)
        << "duplicate " << entries[i].op << " " << entries[i].signature;
  }
  // Every op of docs/ops.md, for f32 (cast: to bool).
  const std::pair<const char*, const char*> required[] = {
      {"copy", "f32->f32"}, {"cast", "f32->bool"}, {"fill", "->f32"}, {"neg", "f32->f32"}, {"abs", "i64->i64"},
      {"sign", "i32->i32"}, {"exp", "f32->f32"}, {"log", "f32->f32"}, {"log1p", "f32->f32"},
      {"expm1", "f32->f32"}, {"sqrt", "f32->f32"}, {"rsqrt", "f32->f32"}, {"sin", "f32->f32"},
      {"cos", "f32->f32"}, {"tanh", "f32->f32"}, {"sigmoid", "f32->f32"}, {"relu", "i32->i32"},
      {"erf", "f32->f32"}, {"floor", "f32->f32"}, {"ceil", "f32->f32"}, {"round", "f32->f32"},
      {"reciprocal", "f32->f32"}, {"logical_not", "bool->bool"}, {"add", "f32,f32->f32"},
      {"sub", "i64,i64->i64"}, {"mul", "bf16,bf16->bf16"}, {"div", "i32,i32->i32"}, {"pow", "f32,f32->f32"},
      {"maximum", "f16,f16->f16"}, {"minimum", "f64,f64->f64"}, {"logical_and", "bool,bool->bool"},
      {"logical_or", "bool,bool->bool"}, {"eq", "bool,bool->bool"}, {"ne", "f32,f32->bool"},
      {"lt", "i64,i64->bool"}, {"le", "f32,f32->bool"}, {"gt", "f32,f32->bool"}, {"ge", "f32,f32->bool"},
      {"where", "bool,f32,f32->f32"}, {"sum", "f32->f32"}, {"sum", "bool->i64"}, {"prod", "f32->f32"},
      {"max", "f32->f32"}, {"min", "i32->i32"}, {"argmax", "f32->i64"}, {"argmin", "f32->i64"},
      {"matmul", "f32,f32->f32"}, {"matmul", "f64,f64->f64"}, {"matmul", "f16,f16->f16"},
      {"matmul", "bf16,bf16->bf16"}, {"index_select", "f32,i64->f32"}, {"gather", "f32,i64->f32"},
      {"scatter_add", "f32,i64,f32->f32"}, {"mean", "f32->f32"}, {"softmax", "f32->f32"},
      {"log_softmax", "f32->f32"}, {"gelu", "f32->f32"}, {"silu", "f32->f32"},
      {"relu_backward", "f32,f32->f32"}, {"sigmoid_backward", "f32,f32->f32"},
      {"tanh_backward", "f32,f32->f32"}, {"gelu_backward", "f32,f32->f32"},
      {"softmax_backward", "f32,f32->f32"}, {"log_softmax_backward", "f32,f32->f32"},
  };
  for (const auto& [op, sig] : required) EXPECT_TRUE(seen.count({op, sig})) << op << " " << sig;
  for (int from = 0; from < STRATA_DTYPE_COUNT; ++from) {
    for (int to = 0; to < STRATA_DTYPE_COUNT; ++to) {
      const std::string sig = std::string(plugin::dtype_name(static_cast<strata_dtype>(from))) + "->" +
                              plugin::dtype_name(static_cast<strata_dtype>(to));
      EXPECT_TRUE(seen.count({"cast", sig})) << sig;
    }
  }
}

TEST_F(CpuAbiTest, KernelRejectsWrongOperandCountsAndDtypes) {
  DeviceTensor& a = tensor<float>(STRATA_F32, {2}, {1, 2});
  DeviceTensor& i = tensor<int32_t>(STRATA_I32, {2}, {1, 2});
  DeviceTensor& y = output(STRATA_F32, {2});
  EXPECT_EQ(run("add", "f32,f32->f32", {&a}, y), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(run("add", "f32,f32->f32", {&a, &i}, y), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(last_error.message).find("add"), std::string::npos) << last_error.message;
}

}  // namespace
}  // namespace strata::cpu_abi
