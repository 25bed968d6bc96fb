// The loader's checks of a plugin table, run on in-memory tables (core/src
// internals, as fuzz_plugin_table drives them): regressions of what the
// fuzzer found, each with the input it took written out.
#include "runtime/device/device_record.hpp"
#include "runtime/plugins/plugin_loader.hpp"

#include <strata/runtime.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

using strata::detail::DeviceRecord;
using strata::detail::LoadedPlugin;

/// Fills the whole message buffer and leaves no terminating NUL: the ABI
/// does not promise one.
void fill_message(strata_error* err) { std::memset(err->message, 'x', sizeof(err->message)); }
const std::string kFullMessage(STRATA_ERROR_MESSAGE_CAPACITY, 'x');

strata_status probe_fails(strata_probe_args* a) {
  fill_message(a->error);
  return STRATA_ERROR_INTERNAL;
}
strata_status probe_scores_zero(strata_probe_args* a) {
  a->score = 0;
  fill_message(a->error);
  return STRATA_OK;
}
strata_status probe_ok(strata_probe_args* a) {
  a->score = 50;
  return STRATA_OK;
}
strata_status init_ok(strata_init_args*) { return STRATA_OK; }
strata_status device_props_fails(strata_device_args* a) {
  fill_message(a->error);
  return STRATA_ERROR_NO_DEVICE;
}
strata_status no_kernels(strata_device_args* a) {
  a->n_entries = 0;
  return STRATA_OK;
}
strata_status props_ok(strata_device_args* a) {
  a->props->struct_size = STRATA_DEVICE_PROPS_MIN_SIZE;
  std::strcpy(a->props->name, "table test device");
  a->props->type = STRATA_DEVICE_ACCELERATOR;
  a->props->dtype_mask = STRATA_DTYPE_BIT(STRATA_F32);
  return STRATA_OK;
}
/// The probe's bug report: a count with no array.
strata_status kernels_count_without_array(strata_device_args* a) {
  a->n_entries = 5;
  a->entries = nullptr;
  return STRATA_OK;
}
/// An array whose middle pointer is NULL: that entry is refused, the others kept.
const strata_kernel_entry* const* entries_with_a_hole() {
  static const strata_kernel_entry* const array[] = {nullptr};
  return array;
}
strata_status kernels_with_a_hole(strata_device_args* a) {
  a->n_entries = 1;
  a->entries = entries_with_a_hole();
  return STRATA_OK;
}
strata_status alloc_fails(strata_alloc_args*) { return STRATA_ERROR_OUT_OF_MEMORY; }
void free_nothing(strata_alloc_args*) {}
strata_status copy_fails(strata_copy_args*) { return STRATA_ERROR_INTERNAL; }

strata_plugin_api table(strata_status (*probe)(strata_probe_args*)) {
  strata_plugin_api api{};
  api.struct_size = sizeof(api);
  api.abi_major = STRATA_ABI_MAJOR;
  api.abi_minor = STRATA_ABI_MINOR;
  api.name = "unterminated";
  api.probe = probe;
  api.init = init_ok;
  api.device_props = device_props_fails;
  api.get_kernels = no_kernels;
  api.alloc = alloc_fails;
  api.free = free_nothing;
  api.copy = copy_fails;
  return api;
}

/// open_device on device 0 of a one-device plugin with table `api` (the
/// device's slot is `slot`); `warnings` collects refused kernel entries.
std::string open_first_device(strata_plugin_api& api, int32_t slot, std::vector<std::string>& warnings) {
  LoadedPlugin plugin;
  plugin.name = "unterminated";
  plugin.api = &api;
  plugin.device_count = 1;
  DeviceRecord device(plugin, 0, slot);
  device.id = "unterminated:0";
  return strata::detail::open_device(device, warnings);
}

// fuzz/corpus/fuzz_plugin_table/crash-unterminated-probe-message.bin: a probe
// that fills all 512 bytes of its message made the loader read past them
// (ASan: stack-buffer-overflow in run_probe).
TEST(PluginTable, ProbeMessageWithoutTerminatorIsReadWithinItsBuffer) {
  strata_plugin_api api = table(probe_fails);
  strata::PluginInfo info;
  ASSERT_EQ(strata::detail::validate_table(&api, info), "");
  EXPECT_EQ(strata::detail::run_probe(&api, "{}", info), "probe failed: " + kFullMessage);

  api = table(probe_scores_zero);
  EXPECT_EQ(strata::detail::run_probe(&api, "{}", info),
            "probe: score 0: the plugin cannot run here (" + kFullMessage + ")");
}

TEST(PluginTable, DevicePropsMessageWithoutTerminatorIsReadWithinItsBuffer) {
  strata_plugin_api api = table(probe_ok);
  std::vector<std::string> warnings;
  EXPECT_EQ(open_first_device(api, 60, warnings), "device_props failed: " + kFullMessage);
}

TEST(PluginTable, ValidateTableNamesWhatIsWrong) {
  strata::PluginInfo info;
  EXPECT_EQ(strata::detail::validate_table(nullptr, info),
            "the entry point returned no table (the plugin declined this Strata version)");
  strata_plugin_api api = table(probe_ok);
  api.copy = nullptr;
  EXPECT_EQ(strata::detail::validate_table(&api, info), "plugin table lacks the required function \"copy\"");
  api = table(probe_ok);
  api.name = "";
  EXPECT_EQ(strata::detail::validate_table(&api, info), "plugin table has no name");
  api = table(probe_ok);
  api.vendor = "ACME";
  ASSERT_EQ(strata::detail::validate_table(&api, info), "");
  EXPECT_EQ(info.name, "unterminated");
  EXPECT_EQ(info.vendor, "ACME");
  EXPECT_EQ(info.abi, std::to_string(STRATA_ABI_MAJOR) + "." + std::to_string(STRATA_ABI_MINOR));
}

// A get_kernels that reports entries but no array (the probe's bug 6): the
// device is refused with the reason, nothing is read through the NULL.
TEST(PluginTable, KernelCountWithoutAnArrayRefusesTheDevice) {
  strata_plugin_api api = table(probe_ok);
  api.device_props = props_ok;
  api.get_kernels = kernels_count_without_array;
  std::vector<std::string> warnings;
  EXPECT_EQ(open_first_device(api, 61, warnings), "get_kernels returned 5 entries and no array");

  api.get_kernels = kernels_with_a_hole;
  EXPECT_EQ(open_first_device(api, 62, warnings), "");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0], "unterminated:0: kernel entry 0: null pointer");
}

}  // namespace
