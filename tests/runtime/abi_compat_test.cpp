// ABI 2.x compatibility, against real builds of the test plugins
// (tests/plugins): a plugin of another major is refused by name; plugins
// built against a future minor (larger structs) and against an older one
// (structs ending at their last required field) load and compute; two
// plugins claiming one GPU are recognised as one piece of hardware; a kernel
// table with malformed entries loses just those entries, each with a warning.
#include <strata/plugin/strata_plugin.h>
#include <strata/strata.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace strata;
namespace fs = std::filesystem;

/// abi-config.json with another "prefer" list.
Config abi_config(std::vector<std::string> prefer) {
  Config c = Config::from_file(STRATA_ABI_TEST_CONFIG);
  c.prefer = std::move(prefer);
  return c;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += "\n  " + l;
  return s;
}

class AbiCompat : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime().configure(abi_config({"cpu"}));
    runtime().reset_fallback_stats();
  }

  /// The outcome recorded for libstrata_plugin_<name>.so.
  static PluginInfo plugin(const std::string& name) {
    std::string file = "libstrata_plugin_" + name + ".so";
    for (const PluginInfo& p : runtime().plugins()) {
      if (fs::path(p.path).filename() == file) return p;
    }
    ADD_FAILURE() << "no outcome recorded for " << file;
    return {};
  }

  static std::string fallbacks() {
    std::string s;
    for (const FallbackRecord& r : runtime().fallback_stats()) {
      s += " " + r.op + "(" + r.signature + ") on " + r.device + " x" + std::to_string(r.count) + ";";
    }
    return s;
  }

  /// fill, host-to-device and device-to-host copies, add and the copy kernel
  /// on `d`, each with the right numbers and none falling back to the CPU.
  static void runs_its_kernels(Device d) {
    SCOPED_TRACE("device " + d.str());
    runtime().reset_fallback_stats();
    Tensor a = full({2, 3}, 2.5, {.device = d});  // strata::fill
    std::vector<float> values{1, 2, 3, 4, 5, 6};
    Tensor b = from_data(values, {2, 3}, {.device = d});  // copy host -> device
    EXPECT_EQ(a.device(), d);
    EXPECT_EQ(b.device(), d);
    Tensor c = a + b;  // strata::add
    EXPECT_EQ(c.device(), d);
    EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{3.5f, 4.5f, 5.5f, 6.5f, 7.5f, 8.5f}));  // device -> host
    Tensor t = c.transpose(0, 1).contiguous();  // strata::copy
    EXPECT_EQ(t.device(), d);
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{3.5f, 6.5f, 4.5f, 7.5f, 5.5f, 8.5f}));
    Tensor s = full({4}, -0.75, {.device = d}) + full({4}, 1.0, {.device = d});
    EXPECT_EQ(s.to_vector<float>(), (std::vector<float>(4, 0.25f)));
    EXPECT_EQ(runtime().fallback_count(), 0u) << "fell back:" << fallbacks();
  }

  /// What every variant of the mini plugin reports about its one device.
  static void is_a_mini_device(const PluginInfo& p, const std::string& name) {
    SCOPED_TRACE("plugin " + name);
    EXPECT_TRUE(p.loaded) << p.reason;
    EXPECT_TRUE(p.initialized);
    EXPECT_EQ(p.name, name);
    EXPECT_EQ(p.vendor, "Strata tests");
    EXPECT_EQ(p.version, "2.0.0");
    ASSERT_EQ(p.devices.size(), 1u);
    const DeviceInfo& d = p.devices[0];
    EXPECT_EQ(d.id, name + ":0");
    EXPECT_EQ(d.name, "Mini test accelerator (" + name + ")");
    EXPECT_EQ(d.type, DeviceType::accelerator);
    EXPECT_EQ(d.compute_capability, "mini 2");
    EXPECT_EQ(d.memory_bytes, uint64_t{64} << 20);
    EXPECT_EQ(d.dtypes, (std::vector<DType>{DType::f32, DType::i64, DType::boolean}));
    EXPECT_EQ(d.compute_dtypes, (std::vector<DType>{DType::f32}));
    EXPECT_FALSE(d.has_streams);
    EXPECT_FALSE(d.free_threaded);
    EXPECT_FALSE(d.plugin_caches_memory);
    EXPECT_EQ(d.uuid, "");
    EXPECT_EQ(d.pci_bus_id, "");
    EXPECT_TRUE(d.same_hardware_as.empty());
    EXPECT_EQ(d.kernel_count, 3);
  }
};

// ---- another major ----------------------------------------------------------------

TEST_F(AbiCompat, PluginOfAbi1IsRefusedNamingBothVersions) {
  PluginInfo p = plugin("badabi");
  EXPECT_FALSE(p.loaded);
  EXPECT_FALSE(p.initialized);  // refused from its manifest, before any of its code ran
  EXPECT_TRUE(p.devices.empty());
  EXPECT_TRUE(contains(p.reason, "ABI major mismatch")) << p.reason;
  EXPECT_TRUE(contains(p.reason, "1.0")) << p.reason;
  const std::string host = std::to_string(STRATA_ABI_MAJOR) + "." + std::to_string(STRATA_ABI_MINOR);
  EXPECT_TRUE(contains(p.reason, "ABI major mismatch: plugin built for ABI 1.0, this Strata speaks ABI " + host))
      << p.reason;
}

// mini claiming ABI 3.0: a plugin of a newer major is refused as an older
// one is, before its init runs.
TEST_F(AbiCompat, PluginOfAbi3IsRefusedNamingBothVersions) {
  PluginInfo p = plugin("miniabi3");
  EXPECT_FALSE(p.loaded);
  EXPECT_FALSE(p.initialized);
  EXPECT_TRUE(p.devices.empty());
  const std::string host = std::to_string(STRATA_ABI_MAJOR) + "." + std::to_string(STRATA_ABI_MINOR);
  EXPECT_TRUE(contains(p.reason, "ABI major mismatch: plugin built for ABI 3." + std::to_string(STRATA_ABI_MINOR) +
                                     ", this Strata speaks ABI " + host))
      << p.reason;
}

// mini whose table says it needs a host one minor newer than this one
// (min_host_minor): refused before its init runs, naming both minors.
TEST_F(AbiCompat, PluginNeedingANewerHostMinorIsRefused) {
  PluginInfo p = plugin("mininewhost");
  EXPECT_FALSE(p.loaded);
  EXPECT_FALSE(p.initialized);
  EXPECT_TRUE(p.devices.empty());
  const std::string needed = std::to_string(STRATA_ABI_MAJOR) + "." + std::to_string(STRATA_ABI_MINOR + 1);
  const std::string host = std::to_string(STRATA_ABI_MAJOR) + "." + std::to_string(STRATA_ABI_MINOR);
  EXPECT_TRUE(contains(p.reason, "the plugin needs a Strata core of ABI " + needed + " or later; this one speaks " +
                                     host))
      << p.reason;
}

// An extension is read only as far as its struct_size reaches: minishortext's
// strata.native_handles ends with its base, and its functions (which crash)
// lie past it. native_view refuses, naming why; nothing past the size runs.
TEST_F(AbiCompat, AnExtensionIsReadOnlyAsFarAsItsStructSize) {
  PluginInfo p = plugin("minishortext");
  ASSERT_TRUE(p.loaded) << p.reason;
  Tensor t = zeros({3}, {.device = Device("minishortext:0")});
  try {
    native_view(t);
    FAIL() << "native_view called through an extension past its struct_size";
  } catch (const DeviceError& e) {
    EXPECT_TRUE(contains(e.what(), "whose struct_size ends before buffer_pointer")) << e.what();
  }
}

// ---- other minors ---------------------------------------------------------------------

// mini built against ABI 2.8: every struct it writes is larger than the host's
// (props are cut to the host's capacity by the plugin; kernel entries and the
// table carry fields the host does not know), its props carry a flag and a
// dtype bit the host does not know, and it reads no field past the host's
// struct_size.
TEST_F(AbiCompat, PluginOfANewerMinorLoadsAndRuns) {
  PluginInfo p = plugin("minifuture");
  EXPECT_EQ(p.abi, "2.8");
  EXPECT_TRUE(p.warnings.empty()) << joined(p.warnings);
  is_a_mini_device(p, "minifuture");
  if (!p.loaded) return;
  runs_its_kernels(Device("minifuture:0"));
}

// mini built against a header whose plugin-written structs end at their last
// required field: props at compute_capability, kernel entries at fn, the table
// at copy. Whatever lies past those sizes is garbage (0xa5 bytes) the host
// must not read: the table's optional functions, the entries' user_data (the
// kernels fail when the host hands them anything but NULL), the props' uuid
// and pci_bus_id (which must come out empty).
TEST_F(AbiCompat, PluginOfAnOlderMinorLoadsAndRuns) {
  PluginInfo p = plugin("miniolder");
  EXPECT_EQ(p.abi, "2.0");
  EXPECT_TRUE(p.warnings.empty()) << joined(p.warnings);
  is_a_mini_device(p, "miniolder");
  if (!p.loaded) return;
  runs_its_kernels(Device("miniolder:0"));
  DeviceMemoryInfo m = runtime().device_memory_info(Device("miniolder:0"));  // no memory_info in its table
  EXPECT_FALSE(m.free_bytes.has_value());
  EXPECT_FALSE(m.plugin_bytes_in_use.has_value());
}

// ---- one GPU seen through two plugins -------------------------------------------------------

TEST_F(AbiCompat, TwoPluginsOnOneGpuAreRecognisedAsOneDevice) {
  PluginInfo a = plugin("twina");
  PluginInfo b = plugin("twinb");
  ASSERT_TRUE(a.loaded) << a.reason;
  ASSERT_TRUE(b.loaded) << b.reason;
  ASSERT_EQ(a.devices.size(), 1u);
  ASSERT_EQ(b.devices.size(), 1u);
  for (const char* id : {"twina:0", "twinb:0"}) {
    SCOPED_TRACE(id);
    DeviceInfo d = runtime().device_info(Device(id));
    EXPECT_EQ(d.id, id);
    EXPECT_EQ(d.type, DeviceType::gpu);
    EXPECT_EQ(d.uuid, "5a1e0042-dead-beef-0123-456789abcdef");
    EXPECT_EQ(d.pci_bus_id, "0000:42:00.0");
  }
  EXPECT_EQ(runtime().device_info(Device("twina:0")).same_hardware_as, (std::vector<std::string>{"twinb:0"}));
  EXPECT_EQ(runtime().device_info(Device("twinb:0")).same_hardware_as, (std::vector<std::string>{"twina:0"}));
  EXPECT_TRUE(runtime().device_info(Device("cpu:0")).same_hardware_as.empty());
  // Both remain usable by name.
  runs_its_kernels(Device("twina:0"));
  runs_its_kernels(Device("twinb:0"));
}

TEST_F(AbiCompat, PreferListPicksWhichTwinIsTheDefault) {
  runtime().configure(abi_config({"twinb", "twina", "cpu"}));
  EXPECT_EQ(runtime().default_device().str(), "twinb:0");
  runtime().configure(abi_config({"twina", "twinb", "cpu"}));
  EXPECT_EQ(runtime().default_device().str(), "twina:0");
  runtime().configure(abi_config({"cpu"}));
  EXPECT_EQ(runtime().default_device().str(), "cpu:0");
}

TEST_F(AbiCompat, PreferListInAFilePicksWhichTwinIsTheDefault) {
  fs::path file = fs::temp_directory_path() / ("strata-abi-twins-" + std::to_string(::getpid()) + ".json");
  {
    Config base = abi_config({"cpu"});
    std::string paths;
    for (const std::string& p : base.plugin_paths) paths += (paths.empty() ? "\"" : ", \"") + p + "\"";
    std::ofstream(file) << "{\"plugins\": {\"paths\": [" << paths << "], \"disabled\": [\"vulkan\"]},"
                        << " \"prefer\": [\"twinb\", \"twina\", \"cpu\"], \"logging\": {\"level\": \"error\"}}";
  }
  runtime().load_config(file.string());
  EXPECT_EQ(runtime().default_device().str(), "twinb:0");
  fs::remove(file);
}

// ---- the local rank: each rank of a host its own accelerator ---------------------------------

// minipair has two accelerator devices; the CPU plugin's device is not
// moved by a local rank.
TEST_F(AbiCompat, TheDefaultAcceleratorFollowsTheLocalRank) {
  Config c = abi_config({"minipair", "cpu"});
  c.plugin_paths = {c.plugin_paths.at(0), STRATA_TEST_PAIR_PLUGIN_DIR};
  runtime().configure(c);
  EXPECT_EQ(runtime().default_device().str(), "minipair:0");
  runtime().set_local_rank(1);
  EXPECT_EQ(runtime().default_device().str(), "minipair:1");
  Tensor t = ones({3});  // made on the new default, and usable there
  EXPECT_EQ(t.device().str(), "minipair:1");
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 1, 1}));
  runtime().set_local_rank(3);  // more ranks than devices: shared, with a warning
  EXPECT_EQ(runtime().default_device().str(), "minipair:1");
  runtime().set_local_rank(-1);
  EXPECT_EQ(runtime().default_device().str(), "minipair:0");
  runtime().set_local_rank(1);
  runtime().configure(abi_config({"cpu"}));  // a CPU-class default stays
  EXPECT_EQ(runtime().default_device().str(), "cpu:0");
  runtime().set_local_rank(-1);
}

// ---- malformed kernel entries ---------------------------------------------------------------

// Entries of badentries, in order: fill, copy, a 16-byte entry naming
// strata::mul (index 2), strata::add at op version 99, add, an entry for
// strata::no_such_op. The kernels of the refused entries fail when run.
TEST_F(AbiCompat, MalformedKernelEntriesAreRefusedOneByOne) {
  PluginInfo p = plugin("badentries");
  ASSERT_TRUE(p.loaded) << p.reason;
  EXPECT_EQ(p.abi, std::to_string(STRATA_ABI_MAJOR) + "." + std::to_string(STRATA_ABI_MINOR));
  ASSERT_EQ(p.devices.size(), 1u);
  EXPECT_EQ(p.devices[0].kernel_count, 3);
  ASSERT_EQ(p.warnings.size(), 3u) << joined(p.warnings);

  const std::string short_size = "struct_size " + std::to_string(STRATA_SIZE_UP_TO(strata_kernel_entry, op)) +
                                 " below the minimum " + std::to_string(STRATA_KERNEL_ENTRY_MIN_SIZE);
  int too_short = 0, unknown = 0, version = 0;
  for (const std::string& w : p.warnings) {
    if (contains(w, short_size)) {
      ++too_short;
      // Named by its op (which lies inside its 16 bytes) or by its index.
      EXPECT_TRUE(contains(w, "strata::mul") || contains(w, "entry 2")) << w;
    } else if (contains(w, "unknown op")) {
      ++unknown;
      EXPECT_TRUE(contains(w, "strata::no_such_op")) << w;
    } else if (contains(w, "op version 99")) {
      ++version;
      EXPECT_TRUE(contains(w, "strata::add")) << w;
      EXPECT_TRUE(contains(w, "core speaks version 1")) << w;
    } else {
      ADD_FAILURE() << "unexpected warning: " << w;
    }
  }
  EXPECT_EQ(too_short, 1) << joined(p.warnings);
  EXPECT_EQ(unknown, 1) << joined(p.warnings);
  EXPECT_EQ(version, 1) << joined(p.warnings);

  // The good kernels run (the version-99 add, listed first, shadows nothing).
  Device d("badentries:0");
  runs_its_kernels(d);
  // mul has no kernel there (the short entry was refused): it falls back.
  runtime().reset_fallback_stats();
  Tensor m = full({3}, 2.0, {.device = d}) * full({3}, 3.5, {.device = d});
  EXPECT_EQ(m.device(), d);
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>(3, 7.0f)));
  std::vector<FallbackRecord> f = runtime().fallback_stats();
  ASSERT_EQ(f.size(), 1u) << fallbacks();
  EXPECT_EQ(f[0].device, "badentries:0");
  EXPECT_TRUE(contains(f[0].op, "mul")) << f[0].op;
}

// Two builds of one plugin: only the better probe score is initialised; the
// other is refused before its init runs, naming the winner and both scores.
TEST_F(AbiCompat, BuildsOfOnePluginOnlyTheBestIsInitialised) {
  Config c = abi_config({"cpu"});
  c.plugin_paths.push_back(STRATA_TEST_BUILDS_PLUGIN_DIR);
  runtime().configure(c);
  const PluginInfo* fast = nullptr;
  const PluginInfo* generic = nullptr;
  std::vector<PluginInfo> all = runtime().plugins();
  for (const PluginInfo& p : all) {
    if (fs::path(p.path).filename() == "libstrata_plugin_minibuild_fast.so") fast = &p;
    if (fs::path(p.path).filename() == "libstrata_plugin_minibuild_generic.so") generic = &p;
  }
  ASSERT_NE(fast, nullptr);
  ASSERT_NE(generic, nullptr);
  EXPECT_TRUE(fast->loaded) << fast->reason;
  EXPECT_TRUE(fast->initialized);
  EXPECT_EQ(fast->score, 7);
  EXPECT_FALSE(generic->loaded);
  EXPECT_FALSE(generic->initialized) << "a superseded build's init must not run";
  EXPECT_TRUE(contains(generic->reason, "superseded by")) << generic->reason;
  EXPECT_TRUE(contains(generic->reason, "minibuild_fast")) << generic->reason;
  EXPECT_TRUE(contains(generic->reason, "7 >= 5")) << generic->reason;
  Device d("minibuild:0");
  Tensor x = full({2}, 1.5, {.device = d}) + full({2}, 2.0, {.device = d});
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{3.5f, 3.5f}));
}

}  // namespace
