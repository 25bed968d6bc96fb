// The SDK's backend layer (strata/plugin/backend.hpp): the C table that
// make_api<B>() builds from a class, called through its function pointers as
// the host calls them — the manifest and which optional entries exist, the
// size, state and device checks, exceptions turned into statuses, deferred
// errors asked at each synchronisation point and nowhere else, and a void
// entry's failure sent to the host's log.
#include <strata/plugin/backend.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using strata::plugin::make_api;

/// What the toy backends saw.
struct Journal {
  int deferred_asked = 0;
  int destroyed = 0;
  bool deferred_fails = false;
  std::vector<std::string> log;
};
Journal g_journal;

/// A backend with two devices, optional memory_info, streams and deferred
/// errors; its members fail on request (the byte count of an alloc picks how).
struct Toy {
  static constexpr const char* kName = "toy";
  static constexpr const char* kVendor = "tests";
  static constexpr const char* kVersion = "9.9";
  static constexpr uint32_t kMinHostMinor = 1;
  static constexpr const char* kProbeEnvironment[] = {"TOY_*", nullptr};
  struct Device {
    int index;
  };

  const strata_host_api* host = nullptr;
  Device devices[2] = {{0}, {1}};

  ~Toy() { ++g_journal.destroyed; }

  static strata_status probe(strata_probe_args& a) {
    a.score = 42;
    return STRATA_OK;
  }
  static std::unique_ptr<Toy> init(strata_init_args& a) {
    if (a.options_json != nullptr && std::string(a.options_json) == "refuse") {
      throw strata::plugin::Refusal(STRATA_ERROR_NO_DEVICE, "no toy card found");
    }
    auto toy = std::make_unique<Toy>();
    toy->host = a.host;
    return toy;
  }
  int32_t device_count() const { return 2; }
  Device& device(int32_t index) { return devices[index]; }
  strata_device_props props(Device& d) const {
    strata_device_props p{};
    p.struct_size = sizeof(p);
    std::snprintf(p.name, sizeof(p.name), "toy %d", d.index);
    return p;
  }
  const strata::plugin::KernelTable& kernels(Device&) const {
    static const strata::plugin::KernelTable table;
    return table;
  }
  strata_status alloc(Device&, strata_alloc_args& a) {
    if (a.bytes == 1) throw std::runtime_error("boom");
    if (a.bytes == 2) throw std::bad_alloc();
    if (a.bytes == 3) strata::plugin::check(strata::plugin::fail(a.error, STRATA_ERROR_DEVICE, "written by a helper"));
    if (a.bytes == 4) throw std::invalid_argument("bad size");
    a.buffer = reinterpret_cast<strata_buffer>(this);
    return STRATA_OK;
  }
  strata_status free(Device& d, strata_alloc_args& a) {
    return a.buffer == nullptr ? strata::plugin::fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "toy:%d: free of NULL", d.index)
                               : STRATA_OK;
  }
  strata_status copy(Device&, strata_copy_args&) { return STRATA_OK; }
  strata_status memory_info(Device&, strata_memory_args& a) {
    a.total_bytes = 7;
    return STRATA_OK;
  }
  strata_status stream_create(Device&, strata_stream_args&) { return STRATA_OK; }
  void stream_destroy(Device&, strata_stream_args&) {}
  strata_status stream_synchronize(Device&, strata_stream_args& a) {
    return a.flags == 1 ? strata::plugin::fail(a.error, STRATA_ERROR_DEVICE, "sync failed") : STRATA_OK;
  }
  strata_status event_create(Device&, strata_stream_args&) { return STRATA_OK; }
  void event_destroy(Device&, strata_stream_args&) {}
  strata_status event_record(Device&, strata_stream_args&) { return STRATA_OK; }
  strata_status stream_wait_event(Device&, strata_stream_args&) { return STRATA_OK; }
  strata_status event_synchronize(Device&, strata_stream_args&) { return STRATA_OK; }
  strata_status event_query(Device&, strata_stream_args&) { return STRATA_OK; }
  strata_status deferred(Device& d, strata_error* error) {
    ++g_journal.deferred_asked;
    if (!g_journal.deferred_fails) return STRATA_OK;
    return strata::plugin::fail(error, STRATA_ERROR_DEFERRED, "strata::div on toy:%d: division by zero", d.index);
  }
};

/// The least a backend declares: no memory queries, streams or extensions.
struct Bare {
  static constexpr const char* kName = "bare";
  static constexpr const char* kVendor = "tests";
  static constexpr const char* kVersion = "1";
  struct Device {};
  Device only;
  static strata_status probe(strata_probe_args&) { return STRATA_OK; }
  static std::unique_ptr<Bare> init(strata_init_args&) { return std::make_unique<Bare>(); }
  int32_t device_count() const { return 1; }
  Device& device(int32_t) { return only; }
  strata_device_props props(Device&) const { return {}; }
  const strata::plugin::KernelTable& kernels(Device&) const {
    static const strata::plugin::KernelTable table;
    return table;
  }
  strata_status alloc(Device&, strata_alloc_args&) { return STRATA_OK; }
  void free(Device&, strata_alloc_args&) {}
  strata_status copy(Device&, strata_copy_args&) { return STRATA_OK; }
};

void record_log(strata_log_level level, const char* plugin, const char* message) {
  g_journal.log.push_back(std::to_string(static_cast<int>(level)) + " " + plugin + ": " + message);
}

/// A Toy made through the table's init, as the host makes it.
struct SdkBackendTable : ::testing::Test {
  const strata_plugin_api* api = make_api<Toy>();
  strata_host_api host{};
  strata_error error{sizeof(strata_error), {}};
  strata_plugin_state state = nullptr;

  void SetUp() override {
    g_journal = Journal{};
    host.struct_size = sizeof(host);
    host.log = record_log;
    strata_init_args init{};
    init.struct_size = sizeof(init);
    init.host = &host;
    init.options_json = "{}";
    init.error = &error;
    ASSERT_EQ(api->init(&init), STRATA_OK) << error.message;
    EXPECT_EQ(init.device_count, 2);
    state = init.state;
  }
  void TearDown() override { api->shutdown(state); }

  template <class Args>
  Args args(int32_t device = 0) {
    Args a{};
    a.struct_size = sizeof(a);
    a.state = state;
    a.device = device;
    a.error = &error;
    return a;
  }
};

TEST(SdkBackend, TheManifestAndTheOptionalEntriesComeFromTheClass) {
  const strata_plugin_api* toy = make_api<Toy>();
  EXPECT_EQ(toy, make_api<Toy>());  // one table per backend
  EXPECT_EQ(toy->struct_size, sizeof(strata_plugin_api));
  EXPECT_EQ(toy->abi_major, static_cast<uint32_t>(STRATA_ABI_MAJOR));
  EXPECT_EQ(toy->abi_minor, static_cast<uint32_t>(STRATA_ABI_MINOR));
  EXPECT_EQ(toy->min_host_minor, 1u);
  EXPECT_STREQ(toy->name, "toy");
  EXPECT_STREQ(toy->vendor, "tests");
  EXPECT_STREQ(toy->version, "9.9");
  ASSERT_NE(toy->probe_environment, nullptr);
  EXPECT_STREQ(toy->probe_environment[0], "TOY_*");
  EXPECT_NE(toy->memory_info, nullptr);
  EXPECT_EQ(toy->memory_trim, nullptr);
  EXPECT_NE(toy->stream_create, nullptr);
  EXPECT_NE(toy->event_destroy, nullptr);
  EXPECT_EQ(toy->event_elapsed, nullptr);  // not declared
  EXPECT_EQ(toy->extensions, nullptr);

  const strata_plugin_api* bare = make_api<Bare>();
  EXPECT_EQ(bare->min_host_minor, 0u);
  EXPECT_EQ(bare->probe_environment, nullptr);  // the whole environment counts
  for (auto fn : {bare->memory_info, bare->memory_trim, bare->memory_stats}) EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(bare->stream_create, nullptr);
  EXPECT_EQ(bare->stream_synchronize, nullptr);
  EXPECT_NE(bare->alloc, nullptr);
  EXPECT_NE(bare->shutdown, nullptr);
}

TEST_F(SdkBackendTable, MembersRunOnTheDeviceTheCallNames) {
  auto props_args = args<strata_device_args>(1);
  strata_device_props props{};
  props.struct_size = sizeof(props);
  props_args.props = &props;
  ASSERT_EQ(api->device_props(&props_args), STRATA_OK) << error.message;
  EXPECT_STREQ(props.name, "toy 1");
  auto memory = args<strata_memory_args>();
  ASSERT_EQ(api->memory_info(&memory), STRATA_OK);
  EXPECT_EQ(memory.total_bytes, 7u);
  auto probe = strata_probe_args{sizeof(strata_probe_args), "{}", 0, &error};
  ASSERT_EQ(api->probe(&probe), STRATA_OK);
  EXPECT_EQ(probe.score, 42);
}

TEST_F(SdkBackendTable, ArgumentStructsBelowTheirMinimumAreRefusedWithBothSizes) {
  auto a = args<strata_alloc_args>();
  a.struct_size = 16;
  EXPECT_EQ(api->alloc(&a), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(error.message),
            "toy: alloc: argument struct_size 16 is below the ABI " + std::to_string(STRATA_ABI_MAJOR) + "." +
                std::to_string(STRATA_ABI_MINOR) + " minimum of " + std::to_string(STRATA_ALLOC_ARGS_MIN_SIZE) +
                " bytes");
  EXPECT_EQ(api->alloc(nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(api->copy(nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  api->free(nullptr);  // a void entry: nothing to report, nothing to crash on
  auto props = args<strata_device_args>();
  props.props = nullptr;
  EXPECT_EQ(api->device_props(&props), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(error.message, "toy: device_props: no props struct");
  strata_device_props small{};
  small.struct_size = STRATA_DEVICE_PROPS_MIN_SIZE - 1;
  props.props = &small;
  EXPECT_EQ(api->device_props(&props), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(error.message).find("toy: device_props: the host's props capacity"), std::string::npos)
      << error.message;
}

TEST_F(SdkBackendTable, AMissingStateOrADeviceOutOfRangeIsNamed) {
  auto a = args<strata_alloc_args>(2);
  EXPECT_EQ(api->alloc(&a), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(error.message, "toy: alloc: no device 2 (the plugin has 2)");
  a.device = -1;
  EXPECT_EQ(api->alloc(&a), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(error.message, "toy: alloc: no device -1 (the plugin has 2)");
  auto s = args<strata_stream_args>();
  s.state = nullptr;
  EXPECT_EQ(api->stream_synchronize(&s), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(error.message, "toy: stream_synchronize: no plugin state (init has not succeeded)");
}

TEST_F(SdkBackendTable, ExceptionsBecomeStatusesNamingThePluginAndTheEntry) {
  auto a = args<strata_alloc_args>();
  a.bytes = 1;
  EXPECT_EQ(api->alloc(&a), STRATA_ERROR_INTERNAL);
  EXPECT_STREQ(error.message, "toy: alloc: boom");
  a.bytes = 2;
  EXPECT_EQ(api->alloc(&a), STRATA_ERROR_OUT_OF_MEMORY);
  EXPECT_STREQ(error.message, "toy: alloc: out of host memory");
  a.bytes = 3;  // check(): the helper's status and message stand
  EXPECT_EQ(api->alloc(&a), STRATA_ERROR_DEVICE);
  EXPECT_STREQ(error.message, "written by a helper");
  a.bytes = 4;
  EXPECT_EQ(api->alloc(&a), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_STREQ(error.message, "toy: alloc: bad size");

  strata_init_args init{};
  init.struct_size = sizeof(init);
  init.options_json = "refuse";
  init.error = &error;
  const int destroyed = g_journal.destroyed;
  EXPECT_EQ(api->init(&init), STRATA_ERROR_NO_DEVICE);
  EXPECT_STREQ(error.message, "toy: init: no toy card found");
  EXPECT_EQ(init.state, nullptr);
  EXPECT_EQ(g_journal.destroyed, destroyed);  // nothing was made
}

TEST_F(SdkBackendTable, DeferredErrorsAreAskedAtEachSynchronisationPointOnly) {
  auto s = args<strata_stream_args>(1);
  ASSERT_EQ(api->stream_synchronize(&s), STRATA_OK);
  ASSERT_EQ(api->event_synchronize(&s), STRATA_OK);
  EXPECT_EQ(g_journal.deferred_asked, 2);
  ASSERT_EQ(api->event_record(&s), STRATA_OK);
  ASSERT_EQ(api->event_query(&s), STRATA_OK);
  EXPECT_EQ(g_journal.deferred_asked, 2);  // no synchronisation point

  auto c = args<strata_copy_args>(1);
  for (auto kind : {STRATA_COPY_HOST_TO_DEVICE, STRATA_COPY_DEVICE_TO_DEVICE}) {
    c.kind = kind;
    ASSERT_EQ(api->copy(&c), STRATA_OK);
  }
  c.kind = STRATA_COPY_DEVICE_TO_HOST;
  c.flags = STRATA_COPY_ASYNC;
  ASSERT_EQ(api->copy(&c), STRATA_OK);
  EXPECT_EQ(g_journal.deferred_asked, 2);
  c.flags = 0;  // a synchronous read is one
  ASSERT_EQ(api->copy(&c), STRATA_OK);
  EXPECT_EQ(g_journal.deferred_asked, 3);

  g_journal.deferred_fails = true;
  EXPECT_EQ(api->stream_synchronize(&s), STRATA_ERROR_DEFERRED);
  EXPECT_STREQ(error.message, "strata::div on toy:1: division by zero");
  s.flags = 1;  // the synchronisation itself fails: its error, no question asked
  const int asked = g_journal.deferred_asked;
  EXPECT_EQ(api->stream_synchronize(&s), STRATA_ERROR_DEVICE);
  EXPECT_STREQ(error.message, "sync failed");
  EXPECT_EQ(g_journal.deferred_asked, asked);
}

TEST_F(SdkBackendTable, AVoidEntrysFailureGoesToTheHostsLog) {
  auto a = args<strata_alloc_args>(1);
  a.buffer = nullptr;
  api->free(&a);
  ASSERT_EQ(g_journal.log.size(), 1u);
  EXPECT_EQ(g_journal.log[0], std::to_string(STRATA_LOG_WARN) + " toy: toy:1: free of NULL");
  a.device = 5;
  api->free(&a);
  ASSERT_EQ(g_journal.log.size(), 2u);
  EXPECT_EQ(g_journal.log[1], std::to_string(STRATA_LOG_WARN) + " toy: toy: free: no device 5 (the plugin has 2)");
}

TEST_F(SdkBackendTable, ShutdownDeletesTheState) {
  api->shutdown(state);
  EXPECT_EQ(g_journal.destroyed, 1);
  state = nullptr;  // TearDown's shutdown(nullptr) does nothing
}

}  // namespace
