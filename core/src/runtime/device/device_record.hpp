// device_record.hpp — the runtime's view of one loaded plugin and its devices.
//
// Every call into a plugin's table goes through LoadedPlugin or DeviceRecord:
// they fill the ABI's argument structs, keep the threading rule of the
// header (calls naming a stream are serialised per stream unless the device
// is free-threaded), and turn statuses into exceptions, marking a device lost
// on DEVICE_LOST.
#pragma once

#include "runtime/device/allocator.hpp"
#include "runtime/device/pinned_staging.hpp"

#include <strata/device.hpp>
#include <strata/dtype.hpp>
#include <strata/plugin/strata_plugin.h>
#include <strata/device_info.hpp>

#include <atomic>
#include <cstring>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace strata::detail {

/// A plugin whose init succeeded. Never unloaded.
struct LoadedPlugin {
  std::string name;
  std::string path;
  std::string vendor;
  std::string version;
  std::string abi;
  int score = 0;
  const strata_plugin_api* api = nullptr;
  strata_plugin_state state = nullptr;
  void* library = nullptr;  // boost::dll::shared_library*, kept open for good (plugin_loader.cpp, keep_loaded)
  const strata_host_api* host = nullptr;  // the host table its init got; its kernels get the same
  bool active = false;      // serves devices (false: refused after init)
  int32_t device_count = 0;
  std::vector<std::string> extensions_seen;  // "strata.native_handles v1"

  /// Whether the table has `field` (optional functions of the table).
  template <class F>
  bool has(F strata_plugin_api::*field) const {
    static const strata_plugin_api layout{};
    auto offset = static_cast<size_t>(reinterpret_cast<const char*>(&(layout.*field)) -
                                      reinterpret_cast<const char*>(&layout));
    return api->struct_size >= offset + sizeof(F) && api->*field != nullptr;
  }
  /// The extension `name` with at least `min_version`, or nullptr.
  const strata_extension* extension(std::string_view name, uint32_t min_version) const;
  /// The extension `wanted` as its struct `Ext`, or nullptr when it is absent
  /// or its struct_size ends before `min_size` (the bytes up to the last
  /// field the caller reads unconditionally). An extension is a struct like
  /// any other that crosses the ABI: a field past its struct_size is read
  /// only after a check of its own.
  template <class Ext>
  const Ext* extension_as(std::string_view wanted, uint32_t min_version, size_t min_size) const {
    const strata_extension* e = extension(wanted, min_version);
    return e != nullptr && e->struct_size >= min_size ? reinterpret_cast<const Ext*>(e) : nullptr;
  }
};

/// What a kernel entry's op name ("strata::add", "acme::swiglu") names in the
/// op registry. The registry is in dispatch/, a layer above this one, so it
/// hands its lookup down (op.hpp, kernel_op_ref) to whoever adds kernels.
struct KernelOpRef {
  int id = -1;  // -1: no such op
  uint32_t version = 0;
  std::string_view kernel_name;
  std::string hint;  // for an unknown name: what the refusal should add ("" for none)
};
using KernelOpLookup = KernelOpRef (*)(const char* qualified_name);

/// A kernel for one dtype signature of one op.
struct KernelSlot {
  uint64_t signature = 0;  // see signature_key()
  strata_kernel_fn fn = nullptr;
  uint32_t flags = 0;
  void* user_data = nullptr;
};

struct DeviceRecord {
  DeviceRecord(LoadedPlugin& p, int32_t i, int32_t s)
      : plugin(p), index(i), slot(s), allocator(*this), staging(*this) {}

  LoadedPlugin& plugin;
  int32_t index;  // within the plugin
  int32_t slot;   // in the runtime's table
  std::string id; // "cpu:0"
  strata_device_props props{};
  /// kernels[op id] -> kernels of that op, by signature (kMaxOps entries).
  std::vector<std::vector<KernelSlot>> kernels;
  /// (op, signature, flags) of every kernel accepted, in table order: what
  /// DeviceInfo::kernels reports (kept apart from the slots the dispatch scans).
  std::vector<KernelInfo> kernel_list;
  int kernel_count = 0;
  CachingAllocator allocator;
  PinnedStaging staging;  // enabled for STRATA_DEVICE_STAGE_PINNED
  strata_stream stream = nullptr;  // the device's default stream (may be NULL)
  bool free_threaded = false;      // STRATA_DEVICE_FREE_THREADED
  bool has_streams = false;        // STRATA_DEVICE_HAS_STREAMS and the functions exist

  Device device() const { return Device::from_slot(slot); }
  /// Whether the device stores `dtype` (its props' dtype_mask).
  bool stores(DType dtype) const {
    return (props.dtype_mask & STRATA_DTYPE_BIT(static_cast<unsigned>(dtype))) != 0;
  }
  const KernelSlot* find_kernel(int op_id, uint64_t signature) const {
    if (op_id < 0 || static_cast<size_t>(op_id) >= kernels.size()) return nullptr;
    for (const KernelSlot& k : kernels[static_cast<size_t>(op_id)]) {
      if (k.signature == signature) return &k;
    }
    return nullptr;
  }
  /// Adds a kernel whose op `lookup` resolves; returns an empty string, or
  /// why the entry is refused.
  std::string add_kernel(const strata_kernel_entry* entry, int index_in_table, KernelOpLookup lookup);
  /// Removes the kernels each entry names, "op" (every signature) or "op
  /// signature" ("strata::mul f32,f32->f32"), so that their calls fall back
  /// as if the plugin had none (DeviceConfig::exclude_kernels); kernel_list
  /// keeps them, marked excluded. Returns the entries that named no kernel
  /// of the device.
  std::vector<std::string> exclude_kernels(const std::vector<std::string>& entries, KernelOpLookup lookup);
  /// Whether the plugin has a kernel for `op` ("maximum", "acme::swiglu")
  /// and `signature` that exclude_kernels set aside (for error messages).
  bool kernel_excluded(std::string_view op, uint64_t signature) const;

  /// An ABI argument struct for a call on this device: its struct_size, the
  /// plugin's state, the device's index, the error out-parameter and, where
  /// the struct has a stream, the device's default stream. Callers set the
  /// rest.
  template <class Args>
  Args call_args(strata_error& err) const {
    Args a{};
    a.struct_size = sizeof(a);
    a.state = plugin.state;
    a.device = index;
    a.error = &err;
    if constexpr (requires { a.stream; }) a.stream = stream;
    return a;
  }

  // --- Calls into the plugin (each throws on failure) ------------------------
  /// `host` receives a PINNED_HOST block's host address.
  strata_buffer alloc(size_t bytes, strata_stream on_stream, strata_memory_kind kind = STRATA_MEMORY_DEVICE,
                      void** host = nullptr);
  void free(strata_buffer buffer, strata_stream on_stream, strata_memory_kind kind = STRATA_MEMORY_DEVICE);
  void copy_to_host(void* dst, strata_buffer src, size_t src_offset, size_t bytes);
  /// `src` may be reused when this returns (large copies to a STAGE_PINNED
  /// device are staged and complete later, in stream order).
  void copy_from_host(strata_buffer dst, size_t dst_offset, const void* src, size_t bytes);
  /// An asynchronous copy from pinned memory of this device, recording `done`.
  void copy_async_from_host(strata_buffer dst, size_t dst_offset, const void* pinned_src, size_t bytes,
                            strata_event done);
  /// An asynchronous copy into pinned memory of this device, recording `done`;
  /// `pinned_dst` holds the bytes once `done` has completed.
  void copy_async_to_host(void* pinned_dst, strata_buffer src, size_t src_offset, size_t bytes, strata_event done);
  /// Waits for queued work (no-op for plugins without streams).
  void synchronize();
  /// Events on `on_stream`; nullptr when the device has no streams.
  strata_event record_event(strata_stream on_stream);
  /// An event not yet recorded (a copy's `done`); the device must have
  /// streams. `flags`: STRATA_EVENT_* (TIMING for event_elapsed).
  strata_event create_event(uint32_t flags = 0);
  /// Records `event` on the device's stream.
  void record(strata_event event);
  /// Whether the plugin measures time between events (event_elapsed).
  bool can_time() const { return has_streams && plugin.has(&strata_plugin_api::event_elapsed); }
  /// Device milliseconds between two recorded TIMING events; waits for both.
  double elapsed_ms(strata_event start, strata_event end);
  /// Whether the event completed (true for nullptr); does not block.
  bool event_done(strata_event event);
  /// Blocks until the event completed (event_synchronize).
  void wait_event(strata_event event);
  void destroy_event(strata_event event);

  /// Raises DeviceLostError once the device reported DEVICE_LOST.
  void ensure_alive() const {
    if (lost_.load(std::memory_order_acquire)) throw_lost();
  }
  bool lost() const { return lost_.load(std::memory_order_acquire); }
  std::string lost_reason() const;
  /// Raises the error for `status` (OK returns): DEVICE_LOST marks the device
  /// lost, DEFERRED names the failure an asynchronous device reported late,
  /// OUT_OF_MEMORY is an OutOfMemoryError. `what` names the call.
  void check(strata_status status, const strata_error& error, const std::string& what);

  /// The issue lock of the header's threading rule: held around every call
  /// naming a stream, unless the device is free-threaded. Re-entrant per
  /// thread (a kernel's workspace request runs under its kernel's lock). One
  /// lock per device: the core issues on one stream per device today, so
  /// this is the header's per-stream rule; a core using several streams
  /// would take one lock per stream.
  class IssueLock {
   public:
    explicit IssueLock(DeviceRecord& d);
    ~IssueLock();
    IssueLock(const IssueLock&) = delete;
    IssueLock& operator=(const IssueLock&) = delete;

   private:
    DeviceRecord* locked_ = nullptr;
    DeviceRecord* previous_ = nullptr;  // the lock this thread held before
  };

 private:
  [[noreturn]] void throw_lost() const;
  void mark_lost(const std::string& reason);

  std::mutex issue_mutex_;
  std::atomic<bool> lost_{false};
  mutable std::mutex lost_mutex_;
  std::string lost_reason_;
};

/// An empty strata_error for one call into a plugin.
inline strata_error fresh_error() {
  strata_error err;
  err.struct_size = sizeof(err);
  err.message[0] = '\0';
  return err;
}

/// The message a plugin wrote into `error`, read within the buffer: the ABI
/// does not promise a terminating NUL, and a plugin that fills all
/// STRATA_ERROR_MESSAGE_CAPACITY bytes must not make the host read past them
/// (found by fuzz_plugin_table). Every read of a plugin's message goes
/// through here.
inline std::string message_text(const strata_error& error) {
  return std::string(error.message, ::strnlen(error.message, sizeof(error.message)));
}

/// The plugin's message, or "status N" when it wrote none.
inline std::string message_of(strata_status status, const strata_error& error) {
  std::string text = message_text(error);
  return !text.empty() ? text : "status " + std::to_string(status);
}

/// The DTypeError for a tensor of `dtype` on `device`, which does not store
/// it: "<what>: vulkan:0 cannot store f64 (it stores f32, f16, i32, i64, bool)".
[[noreturn]] void throw_cannot_store(const DeviceRecord& device, DType dtype, std::string_view what);
/// The one rule for dtypes per device: no tensor of a dtype a device does not
/// store (its dtype_mask) is ever made on it. make_tensor runs this for every
/// block of storage; creation functions and dispatch (every op's results,
/// right after its shape and dtype rule) run it first, so that the error
/// names them and no kernel, decomposition or fallback starts. A bit test.
inline void check_stores(const DeviceRecord& device, DType dtype, std::string_view what) {
  if (!device.stores(dtype)) [[unlikely]] throw_cannot_store(device, dtype, what);
}

/// Packs dtypes of inputs and outputs into one integer (6 bits each, 63
/// between inputs and outputs, a leading 1 so that arity is part of the key)
/// for up to 9 dtypes; more (fused_elementwise's up to 8 inputs and 6
/// outputs) are keyed by their counts and the one dtype they share, and have
/// no key (0) when their dtypes differ.
uint64_t signature_key(const DType* inputs, int n_inputs, const DType* outputs, int n_outputs);
/// Parses "f32,f32->f32"; returns 0 when malformed.
uint64_t parse_signature(const char* text);
/// "f32,f32->f32".
std::string signature_string(const DType* inputs, int n_inputs, const DType* outputs, int n_outputs);

/// The runtime's device table, indexed by slot; stable for the process.
DeviceRecord& device_record(Device device);

}  // namespace strata::detail
