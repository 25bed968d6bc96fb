// runtime.hpp — the simulated accelerator itself: device memory, handles,
// streams with worker threads, events and deferred errors.
//
// Demonstrates (strata_plugin.h sections 2-4):
//  - a device with its own memory space: one arena per device (a single host
//    mapping) carved up by a first-fit allocator; the host only ever sees
//    opaque handles, never an address it could dereference;
//  - handles that are validated on every use: a handle is a tagged 64-bit id
//    (kind in the top byte, then a counter that is never reused) looked up in
//    a table, so a stale, foreign or mistyped handle is an error with a
//    message instead of a crash;
//  - asynchronous execution: every stream owns a worker thread that runs the
//    work queued on it (kernels, copies, event markers, stream-ordered frees)
//    in order;
//  - events as markers in a stream's queue, with timestamps;
//  - deferred errors: a failure found by a worker is kept per device and
//    reported (STRATA_ERROR_DEFERRED) at the next synchronisation point.
#pragma once

#include <strata/plugin/backend.hpp>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace example {

inline constexpr const char* kPluginName = "example";
inline constexpr size_t kAlignment = 256;  // of every arena block, like a GPU allocator

/// Thrown by work running on a worker thread: the message becomes the
/// device's pending deferred error (it names the op and the device).
struct DeferredFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// "example:0"
std::string device_name(int device);

// ---- Device memory ------------------------------------------------------------

/// One device's memory: a single anonymous mapping, carved up first-fit.
/// Free blocks are kept by offset and merged with their neighbours on release.
class Arena {
 public:
  explicit Arena(size_t bytes);  // throws std::bad_alloc when the mapping fails
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  /// Offset of a block of `bytes` (a multiple of kAlignment), or nothing.
  std::optional<size_t> allocate(size_t bytes);
  void release(size_t offset, size_t bytes);
  /// Gives the pages wholly inside free blocks back to the OS (madvise);
  /// returns the bytes given back.
  size_t trim();

  std::byte* base() const { return base_; }
  size_t size() const { return size_; }
  size_t free_bytes() const;
  size_t largest_free() const;

 private:
  std::byte* base_ = nullptr;
  size_t size_ = 0;
  mutable std::mutex mutex_;
  std::map<size_t, size_t> free_;  // offset -> bytes
};

// ---- Handles ------------------------------------------------------------------

enum class HandleKind : uint64_t { buffer = 0xB1, stream = 0x51, event = 0xE7 };
const char* kind_name(HandleKind kind);

/// Objects of one kind behind opaque ids. Ids are never reused, so a stale
/// handle is always recognised as such. Thread-safe.
template <class T>
class HandleTable {
 public:
  explicit HandleTable(HandleKind kind) : kind_(kind) {}

  uint64_t insert(std::shared_ptr<T> object) {
    std::lock_guard lock(mutex_);
    const uint64_t id = (static_cast<uint64_t>(kind_) << 56) | ++counter_;
    objects_.emplace(id, std::move(object));
    return id;
  }
  /// The object, or nullptr for an unknown (or freed) id.
  std::shared_ptr<T> find(uint64_t id) const {
    std::lock_guard lock(mutex_);
    auto it = objects_.find(id);
    return it == objects_.end() ? nullptr : it->second;
  }
  std::shared_ptr<T> erase(uint64_t id) {
    std::lock_guard lock(mutex_);
    auto it = objects_.find(id);
    if (it == objects_.end()) return nullptr;
    std::shared_ptr<T> object = std::move(it->second);
    objects_.erase(it);
    return object;
  }
  std::vector<std::shared_ptr<T>> all() const {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<T>> out;
    for (const auto& [id, object] : objects_) out.push_back(object);
    return out;
  }
  /// Drops every object (outside the lock: a stream's destructor joins its worker).
  void clear() {
    std::unordered_map<uint64_t, std::shared_ptr<T>> gone;
    {
      std::lock_guard lock(mutex_);
      gone.swap(objects_);
    }
  }
  HandleKind kind() const { return kind_; }

 private:
  HandleKind kind_;
  mutable std::mutex mutex_;
  uint64_t counter_ = 0;
  std::unordered_map<uint64_t, std::shared_ptr<T>> objects_;
};

/// "buffer 0xb100000000000003" for messages, naming the kind the bits say.
std::string describe_handle(const void* handle);

// ---- Buffers ------------------------------------------------------------------

struct Buffer {
  int device = 0;
  strata_memory_kind kind = STRATA_MEMORY_DEVICE;
  size_t bytes = 0;     // as requested: the valid range is [0, bytes)
  size_t reserved = 0;  // arena bytes held (a multiple of kAlignment)
  size_t offset = 0;    // DEVICE: in the arena
  std::byte* host = nullptr;  // PINNED_HOST: its host address
};

// ---- Streams and events -------------------------------------------------------

class Device;

/// An in-order queue with one worker thread. Tickets number the work items
/// from 1; `completed()` is the ticket of the last one finished.
class Stream {
 public:
  Stream(Device& device, bool is_default);
  ~Stream();  // drains the queue and joins the worker
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /// Queues `work` (run on the worker; `what` names it in failure messages).
  uint64_t enqueue(std::string what, std::function<void()> work);
  /// Blocks until every item up to `ticket` has run.
  void wait(uint64_t ticket);
  /// Blocks until everything queued so far has run.
  void drain();

  Device& device() const { return device_; }
  bool is_default() const { return is_default_; }

 private:
  struct Item {
    uint64_t ticket;
    std::string what;
    std::function<void()> work;
  };
  void run();

  Device& device_;
  bool is_default_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Item> queue_;
  uint64_t issued_ = 0;
  uint64_t completed_ = 0;
  bool stopping_ = false;
  std::thread worker_;  // last: starts once the rest is built
};

/// An event: complete when the marker of its latest record has run.
struct Event {
  int device = 0;
  bool timing = false;
  uint64_t recorded = 0;  // generation of the latest record (0: never)
  uint64_t reached = 0;   // highest generation whose marker has run
  std::chrono::steady_clock::time_point when{};  // of the latest marker run
};

// ---- Devices and the plugin state -------------------------------------------

class Device {
 public:
  Device(int index, size_t arena_bytes);
  ~Device();

  int index;
  std::string name;  // "example:0"
  Arena arena;
  std::shared_ptr<Stream> default_stream;

  /// A failure of queued work, kept until the next synchronisation point.
  void record_failure(const std::string& message);
  /// STRATA_ERROR_DEFERRED with the first pending failure (and a count of
  /// later ones), clearing them; STRATA_OK when none.
  strata_status take_failures(strata_error* error);

  // memory_stats counters (bytes)
  std::mutex stats_mutex;
  uint64_t in_use = 0;
  uint64_t peak = 0;
  uint64_t allocations = 0;

 private:
  std::mutex failures_mutex_;
  std::string first_failure_;
  uint64_t failures_ = 0;
};

/// The plugin: its state, and the backend class make_api<PluginState>()
/// turns into the C table (strata/plugin/backend.hpp; the SDK checks struct
/// sizes and device indices, turns exceptions into statuses, and asks
/// deferred() at every synchronisation point). Members by file: plugin.cpp
/// (manifest, probe, init, props, kernels), memory.cpp, streams.cpp.
struct PluginState : strata::plugin::DeviceList<Device> {
  static constexpr const char* kName = kPluginName;
  static constexpr const char* kVendor = "Strata project (example)";
  static constexpr const char* kVersion = "0.1.0";
  /// The environment variables that decide probe and init: none (ABI 2.1).
  static const char* const kProbeEnvironment[];
  using Device = example::Device;

  PluginState() = default;
  PluginState(const PluginState&) = delete;
  PluginState& operator=(const PluginState&) = delete;
  /// Finishes and joins every worker (created streams, then the default
  /// ones) while the event mutex their markers take still exists.
  ~PluginState();

  const strata_host_api* host = nullptr;
  HandleTable<Buffer> buffers{HandleKind::buffer};
  HandleTable<Stream> streams{HandleKind::stream};
  HandleTable<Event> events{HandleKind::event};

  // Every event's `recorded`/`reached`/`when` is guarded by this mutex;
  // markers notify `event_reached` so event_synchronize and
  // stream_wait_event can wait.
  std::mutex event_mutex;
  std::condition_variable event_reached;

  // ---- The table (plugin.cpp, memory.cpp, streams.cpp) ----
  STRATA_BACKEND_MEMBERS(PluginState, Device);
  using DeviceList::device;  // device(index), next to the kernels' lookup below
  strata_device_props props(Device& d) const;
  STRATA_BACKEND_MEMORY_MEMBERS(Device);
  STRATA_BACKEND_STREAM_MEMBERS(Device);
  /// Failures of earlier work on `d`'s workers (STRATA_ERROR_DEFERRED).
  strata_status deferred(Device& d, strata_error* error) { return d.take_failures(error); }

  // ---- Helpers of the entry points and the kernels ----
  /// Device `index`, or nullptr after writing a message naming `what` (the
  /// kernels' lookup: a kernel call is not framed by the SDK).
  Device* device(int32_t index, strata_error* error, const char* what);
  /// The stream a call names: NULL is the device's default stream. nullptr
  /// (message written) for an unknown handle or one of another device.
  Stream* stream(Device& device, strata_stream handle, strata_error* error, const char* what);
  /// Queues a marker for `event` on `stream` (event_record, a copy's `done`).
  void record_event(Stream& stream, const std::shared_ptr<Event>& event);
  /// Every stream of `device`, the default one first.
  std::vector<std::shared_ptr<Stream>> streams_of(const Device& device);
};

inline PluginState* as_state(strata_plugin_state s) { return reinterpret_cast<PluginState*>(s); }

inline uint64_t handle_id(const void* handle) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle)); }
template <class H>
H to_handle(uint64_t id) {
  return reinterpret_cast<H>(static_cast<uintptr_t>(id));
}

}  // namespace example

namespace example {

/// The live buffer `handle` names on `device`, or nullptr after a message
/// naming `what`, the device and the handle (unknown, freed, or another
/// device's). Either memory kind.
std::shared_ptr<Buffer> find_buffer(PluginState& state, const Device& device, strata_buffer handle,
                                    strata_error* error, const char* what);

/// Whether [offset, offset + bytes) lies inside [0, size), without overflow.
inline bool range_ok(uint64_t offset, uint64_t bytes, uint64_t size) { return offset <= size && bytes <= size - offset; }

}  // namespace example
