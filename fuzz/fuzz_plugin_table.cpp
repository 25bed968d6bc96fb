// fuzz_plugin_table.cpp — the loader's checks of a plugin's table, run on
// tables built from fuzz bytes instead of dlopen'ed ones: validate_table and
// run_probe (what read_manifest runs after the entry point), init_plugin,
// then open_device (device_props and the kernel table, DeviceRecord::
// add_kernel for each entry). The checks are the core's own
// (core/src/runtime/plugins/plugin_loader.cpp); nothing of them is copied here.
//
// Every function pointer of a fuzzed table points at a stub below, which
// answers with statuses, scores, counts, messages and structs read from the
// fuzz bytes; every string and kernel entry lives in this file. A refusal
// (a reason string) is the expected outcome; a crash, a sanitizer report or
// an exception out of the loader is a bug (the loader never throws for a bad
// plugin).
#include "base/logging.hpp"
#include "runtime/plugins/plugin_loader.hpp"

#include <fuzzer/FuzzedDataProvider.h>
#include <strata/config.hpp>
#include <strata/plugin/strata_plugin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

using strata::detail::DeviceRecord;
using strata::detail::LoadedPlugin;

FuzzedDataProvider* g_in = nullptr;  // the current input, for the stubs
int g_stream_token = 0;              // what a fake stream/event points at
int g_state_token = 0;               // the fake plugin state

strata_status status() {
  // Mostly OK, so that the checks after each call are reached.
  if (g_in->ConsumeBool()) return STRATA_OK;
  // Any status a plugin can return: every non-negative int32 (a negative one
  // is outside strata_status's range in C++, UB in the stub itself).
  if (g_in->ConsumeBool()) return static_cast<strata_status>(g_in->ConsumeIntegralInRange<int32_t>(1, 9));
  return static_cast<strata_status>(g_in->ConsumeIntegralInRange<int32_t>(0, INT32_MAX));
}

/// Fills a plugin's error message: empty, a short text, or the whole
/// capacity with no terminating NUL (nothing in the ABI promises one).
void message(strata_error* err) {
  if (err == nullptr) return;
  switch (g_in->ConsumeIntegralInRange(0, 2)) {
    case 0: break;
    case 1: {
      std::string text = g_in->ConsumeRandomLengthString(STRATA_ERROR_MESSAGE_CAPACITY - 1);
      std::memcpy(err->message, text.c_str(), text.size() + 1);
      break;
    }
    default: std::memset(err->message, 'x', sizeof(err->message)); break;
  }
}

strata_status probe_stub(strata_probe_args* a) {
  a->score = g_in->ConsumeBool() ? 50 : g_in->ConsumeIntegral<int32_t>();
  strata_status st = status();
  if (st != STRATA_OK || a->score <= 0) message(a->error);
  return st;
}

strata_status init_stub(strata_init_args* a) {
  a->state = reinterpret_cast<strata_plugin_state>(&g_state_token);
  a->device_count = g_in->ConsumeBool() ? 1 : g_in->ConsumeIntegralInRange<int32_t>(-2, 4);
  if (!g_in->ConsumeBool()) a->score = g_in->ConsumeIntegral<int32_t>();
  strata_status st = status();
  if (st != STRATA_OK) message(a->error);
  return st;
}

void shutdown_stub(strata_plugin_state) {}

strata_status device_props_stub(strata_device_args* a) {
  strata_status st = status();
  if (st != STRATA_OK) {
    message(a->error);
    return st;
  }
  // Up to the host's capacity (the struct_size it passed), bytes from the
  // input; then usually a struct_size and name the checks accept.
  strata_device_props* p = a->props;
  const size_t capacity = std::min(p->struct_size, sizeof(strata_device_props));
  std::vector<uint8_t> bytes = g_in->ConsumeBytes<uint8_t>(capacity);
  if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
  if (g_in->ConsumeBool()) {
    p->struct_size = g_in->ConsumeBool() ? sizeof(strata_device_props) : STRATA_DEVICE_PROPS_MIN_SIZE;
  }
  if (g_in->ConsumeBool()) std::strcpy(p->name, "fuzz device");
  return STRATA_OK;
}

// The kernel table of the current input (entries point into `entries`,
// strings into `strings`; a deque keeps addresses stable).
std::deque<std::string> g_strings;
std::deque<strata_kernel_entry> g_entries;
std::vector<const strata_kernel_entry*> g_entry_table;
int g_user_data = 0;

strata_status kernel_stub(const strata_kernel_call*) { return STRATA_OK; }

const char* pick_string(const std::vector<const char*>& known) {
  const size_t k = g_in->ConsumeIntegralInRange<size_t>(0, known.size() + 1);
  if (k < known.size()) return known[k];
  if (k == known.size()) return nullptr;
  g_strings.push_back(g_in->ConsumeRandomLengthString(64));
  return g_strings.back().c_str();
}

strata_status get_kernels_stub(strata_device_args* a) {
  strata_status st = status();
  if (st != STRATA_OK) {
    message(a->error);
    return st;
  }
  static const std::vector<const char*> ops = {"strata::add", "strata::matmul", "strata::sum", "strata::relu",
                                               "add", "acme::swiglu", ""};
  static const std::vector<const char*> signatures = {
      "f32,f32->f32", "f64,f64->f64", "f32->f32", "->f32", "f32,f32->", "f32,f32,f32,f32,f32,f32,f32,f32,f32->f32",
      "bogus->f32", ""};
  g_entry_table.clear();
  const int32_t n = g_in->ConsumeIntegralInRange<int32_t>(-1, 24);
  for (int32_t k = 0; k < std::max(n, 0); ++k) {
    if (g_in->ConsumeIntegralInRange(0, 15) == 0) {
      g_entry_table.push_back(nullptr);
      continue;
    }
    strata_kernel_entry e{};
    switch (g_in->ConsumeIntegralInRange(0, 3)) {
      case 0: e.struct_size = STRATA_KERNEL_ENTRY_MIN_SIZE; break;
      case 1: e.struct_size = g_in->ConsumeIntegralInRange<size_t>(0, sizeof(strata_kernel_entry)); break;
      default: e.struct_size = sizeof(strata_kernel_entry); break;
    }
    e.op = pick_string(ops);
    e.op_version = g_in->ConsumeBool() ? 1 : g_in->ConsumeIntegralInRange<uint32_t>(0, 3);
    e.signature = pick_string(signatures);
    e.flags = g_in->ConsumeIntegral<uint32_t>();
    e.fn = g_in->ConsumeIntegralInRange(0, 7) == 0 ? nullptr : kernel_stub;
    e.user_data = g_in->ConsumeBool() ? &g_user_data : nullptr;
    g_entries.push_back(e);
    g_entry_table.push_back(&g_entries.back());
  }
  a->n_entries = n;
  a->entries = g_in->ConsumeIntegralInRange(0, 15) == 0 ? nullptr : g_entry_table.data();
  return STRATA_OK;
}

strata_status alloc_stub(strata_alloc_args*) { return STRATA_ERROR_OUT_OF_MEMORY; }
void free_stub(strata_alloc_args*) {}
strata_status copy_stub(strata_copy_args*) { return STRATA_ERROR_INTERNAL; }

strata_status stream_stub(strata_stream_args* a) {
  strata_status st = status();
  if (st != STRATA_OK) {
    message(a->error);
    return st;
  }
  a->stream = reinterpret_cast<strata_stream>(&g_stream_token);
  a->event = reinterpret_cast<strata_event>(&g_stream_token);
  a->complete = 1;
  return STRATA_OK;
}
void stream_void_stub(strata_stream_args*) {}

/// A text for the table's name/vendor/version: none, empty, or from the input.
const char* table_string(std::deque<std::string>& keep, const char* usual) {
  switch (g_in->ConsumeIntegralInRange(0, 5)) {
    case 0: return nullptr;
    case 1: return "";
    case 2:
      keep.push_back(g_in->ConsumeRandomLengthString(32));
      return keep.back().c_str();
    default: return usual;
  }
}

template <class F>
F maybe(F fn) {
  // Required functions are usually there, so the checks after them run.
  return g_in->ConsumeIntegralInRange(0, 7) == 0 ? nullptr : fn;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  strata::detail::configure_logging(
      strata::Config::from_string(R"({"version": 1, "logging": {"level": "off", "sinks": []}})", "fuzz.json", "/tmp"));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  g_in = &in;
  g_strings.clear();
  g_entries.clear();
  g_entry_table.clear();
  std::deque<std::string> keep;

  strata_plugin_api api{};
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0: api.struct_size = in.ConsumeIntegralInRange<size_t>(0, sizeof(strata_plugin_api)); break;
    case 1: api.struct_size = STRATA_PLUGIN_API_MIN_SIZE; break;
    default: api.struct_size = sizeof(strata_plugin_api); break;
  }
  api.abi_major = in.ConsumeIntegralInRange(0, 7) == 0 ? in.ConsumeIntegral<uint32_t>() : STRATA_ABI_MAJOR;
  api.abi_minor = in.ConsumeIntegralInRange<uint32_t>(0, 3);
  api.min_host_minor = in.ConsumeBool() ? 0 : in.ConsumeIntegral<uint32_t>();
  api.name = table_string(keep, "fuzz");
  api.vendor = table_string(keep, "Strata fuzzing");
  api.version = table_string(keep, "0.0.1");
  api.probe = maybe(probe_stub);
  api.init = maybe(init_stub);
  api.shutdown = maybe(shutdown_stub);
  api.device_props = maybe(device_props_stub);
  api.get_kernels = maybe(get_kernels_stub);
  api.alloc = maybe(alloc_stub);
  api.free = maybe(free_stub);
  api.copy = maybe(copy_stub);
  if (in.ConsumeBool()) {  // streams and events, some missing
    api.stream_create = maybe(stream_stub);
    api.stream_destroy = maybe(stream_void_stub);
    api.stream_synchronize = maybe(stream_stub);
    api.event_create = maybe(stream_stub);
    api.event_destroy = maybe(stream_void_stub);
    api.event_record = maybe(stream_stub);
    api.stream_wait_event = maybe(stream_stub);
    api.event_synchronize = maybe(stream_stub);
    api.event_query = maybe(stream_stub);
    api.event_elapsed = maybe(stream_stub);
  }
  api.extensions = nullptr;  // extension chains are not fuzzed here

  const strata::Config config = strata::Config::builtin_default();
  strata::PluginInfo info;
  if (!strata::detail::validate_table(in.ConsumeBool() ? &api : nullptr, info).empty()) return 0;
  if (!strata::detail::run_probe(&api, "{}", info).empty()) return 0;

  strata::detail::Manifest manifest;
  manifest.candidate = {"fuzz_table", "fuzz", {}};
  manifest.api = &api;
  manifest.probe_score = info.score;
  auto plugin = strata::detail::init_plugin(manifest, config, info);
  if (plugin == nullptr) return 0;

  for (int32_t d = 0; d < std::min(plugin->device_count, 2); ++d) {
    DeviceRecord device(*plugin, d, 60 + d);
    device.id = "fuzz:" + std::to_string(d);
    std::vector<std::string> warnings;
    if (strata::detail::open_device(device, warnings).empty()) {
      (void)strata::detail::uuid_string(device.props);
    }
  }
  strata::detail::shutdown_plugin(*plugin);
  return 0;
}
