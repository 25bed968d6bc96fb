// entry_points.hpp — private to the plugin: what the State members of the
// table defined outside plugin.cpp (entry_memory.cpp, entry_copies.cpp,
// entry_streams.cpp) share. The SDK (make_api<State>()) checks each argument
// struct and device index and turns exceptions into statuses before a member
// runs. Locking is described in README.md ("Threading").
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

/// The Buffer behind a handle, checked to hold [offset, offset + bytes) (entry_memory.cpp).
Buffer* checked(strata_buffer handle, size_t offset, size_t bytes, const Device& d, const char* what,
                strata_error* error);
/// Records `done`, if any, at the stream's current end (submitting what is
/// recorded, and a TIMING event's timestamp). Requires the stream's mutex
/// (entry_streams.cpp).
strata_status record_done(Stream& s, strata_event done, strata_error* error);

}  // namespace strata::vulkan
