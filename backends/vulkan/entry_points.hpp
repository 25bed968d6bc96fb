// entry_points.hpp — private to the plugin: the table's entry points defined outside plugin.cpp
// (entry_memory.cpp, entry_copies.cpp, entry_streams.cpp) and the helpers they share.
//
// Every entry point checks its argument struct against the 2.0 minimum size
// and runs under plugin::guarded (nothing throws across the ABI). Locking is
// described in README.md ("Threading").
#pragma once

#include <strata/plugin/strata_plugin.h>
#include <strata/plugin/strata_plugin.hpp>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "device.hpp"

namespace strata::vulkan {

/// An event: the timeline value of the submission that recorded it (0: not
/// recorded yet, or recorded when nothing was pending — complete). Written by
/// event_record (serialised per stream), read by event_query/_synchronize
/// from any thread.
///
/// A TIMING event on a device with timestamps owns a timestamp query,
/// written (and submitted) each time it is recorded, so its seq is never 0
/// once recorded; other events are as cheap as without timing.
struct Event {
  Device* device = nullptr;
  std::atomic<uint64_t> seq{0};
  bool timing = false;  // created with STRATA_EVENT_TIMING on a device with timestamps
  TimestampSlot stamp;  // timing: its query
};

/// An enum field of a host struct as its integer: a newer host may send a
/// value this build does not know, which C++ must not load as the enum.
template <class E>
auto raw(const E& field) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &field, sizeof(v));
  return v;
}

/// The device an argument struct names, or nullptr with its error set.
template <class Args>
Device* device_for(const Args* a) {
  return device_of(a->state, a->device, a->error);
}

/// The Buffer behind a handle, checked to hold [offset, offset + bytes) (entry_memory.cpp).
Buffer* checked(strata_buffer handle, size_t offset, size_t bytes, const Device& d, const char* what,
                strata_error* error);
/// Records `done`, if any, at the stream's current end (submitting what is
/// recorded, and a TIMING event's timestamp). Requires the stream's mutex
/// (entry_streams.cpp).
strata_status record_done(Stream& s, strata_event done, strata_error* error);

// entry_memory.cpp
strata_status alloc(strata_alloc_args* a) noexcept;
void free_buffer(strata_alloc_args* a) noexcept;
strata_status memory_info(strata_memory_args* a) noexcept;
strata_status memory_trim(strata_memory_args* a) noexcept;
strata_status memory_stats(strata_memory_args* a) noexcept;

// entry_copies.cpp
strata_status copy(strata_copy_args* a) noexcept;

// entry_streams.cpp
strata_status stream_create(strata_stream_args* a) noexcept;
void stream_destroy(strata_stream_args* a) noexcept;
strata_status stream_synchronize(strata_stream_args* a) noexcept;
strata_status event_create(strata_stream_args* a) noexcept;
void event_destroy(strata_stream_args* a) noexcept;
strata_status event_record(strata_stream_args* a) noexcept;
strata_status stream_wait_event(strata_stream_args* a) noexcept;
strata_status event_synchronize(strata_stream_args* a) noexcept;
strata_status event_query(strata_stream_args* a) noexcept;
strata_status event_elapsed(strata_stream_args* a) noexcept;

}  // namespace strata::vulkan
