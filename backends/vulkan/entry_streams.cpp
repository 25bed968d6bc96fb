// entry_streams.cpp — the stream and event entry points: stream_create/destroy/synchronize,
// event_create/destroy/record/synchronize/query, stream_wait_event.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <strata/plugin/strata_plugin.hpp>

#include "entry_points.hpp"

namespace strata::vulkan {

using plugin::fail;

namespace {

/// The event of an argument struct, or nullptr with INVALID_ARGUMENT set.
Event* event_of(const strata_stream_args* a, const Device& d, const char* what) {
  if (a->event == nullptr) fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: null event", d.id().c_str(), what);
  return reinterpret_cast<Event*>(a->event);
}

}  // namespace

// ---- Streams ---------------------------------------------------------------------

strata_status stream_create(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: stream_create", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    auto s = std::make_unique<Stream>(*d);
    std::lock_guard lock(d->streams_mutex);
    d->streams.push_back(s.get());
    a->stream = reinterpret_cast<strata_stream>(s.release());
    return STRATA_OK;
  });
}

void stream_destroy(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return;
  Device* d = device_for(a);
  if (d == nullptr || a->stream == nullptr) return;
  auto* s = reinterpret_cast<Stream*>(a->stream);
  {
    std::lock_guard lock(d->streams_mutex);
    auto it = std::find(d->streams.begin(), d->streams.end(), s);
    if (it == d->streams.end() || s == d->default_stream.get()) return;
    d->streams.erase(it);
  }
  delete s;  // waits for its work
}

strata_status stream_synchronize(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: stream_synchronize", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    Stream& s = stream_of(*d, a->stream);
    {
      std::lock_guard lock(s.mutex());
      if (strata_status st = s.synchronize(a->error); st != STRATA_OK) return st;
    }
    return d->report_deferred(a->error);
  });
}

// ---- Events ----------------------------------------------------------------------

strata_status record_done(Stream& s, strata_event done, strata_error* error) {
  if (done == nullptr) return STRATA_OK;
  uint64_t seq = 0;
  if (strata_status st = s.flush(error, &seq); st != STRATA_OK) return st;
  reinterpret_cast<Event*>(done)->seq.store(seq, std::memory_order_release);
  return STRATA_OK;
}

strata_status event_create(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: event_create", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    // STRATA_EVENT_TIMING is accepted; event_elapsed is not offered.
    auto* e = new Event;
    e->device = d;
    a->event = reinterpret_cast<strata_event>(e);
    return STRATA_OK;
  });
}

void event_destroy(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return;
  delete reinterpret_cast<Event*>(a->event);
}

strata_status event_record(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: event_record", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    Event* e = event_of(a, *d, "event_record");
    if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    Stream& s = stream_of(*d, a->stream);
    std::lock_guard lock(s.mutex());
    // Submitting now puts the event's work ahead, in queue order, of anything
    // another stream submits after waiting on it.
    return record_done(s, a->event, a->error);
  });
}

strata_status stream_wait_event(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  Device* d = device_for(a);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (event_of(a, *d, "stream_wait_event") == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  // The event's submission is already on the one queue, and every batch
  // begins with a barrier on all earlier submissions: whatever the stream
  // records from now on is ordered after it without blocking the host.
  return d->check_lost(a->error);
}

strata_status event_synchronize(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "vulkan: event_synchronize", [&]() -> strata_status {
    Device* d = device_for(a);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    Event* e = event_of(a, *d, "event_synchronize");
    if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    if (strata_status st = d->wait(e->seq.load(std::memory_order_acquire), a->error); st != STRATA_OK) return st;
    return d->report_deferred(a->error);
  });
}

strata_status event_query(strata_stream_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_STREAM_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  Device* d = device_for(a);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  Event* e = event_of(a, *d, "event_query");
  if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (strata_status st = d->check_lost(a->error); st != STRATA_OK) return st;
  // Never blocks, and is no synchronisation point: deferred failures wait
  // for the next one.
  const uint64_t seq = e->seq.load(std::memory_order_acquire);
  a->complete = d->completed.load() >= seq || d->poll() >= seq ? 1 : 0;
  return STRATA_OK;
}

}  // namespace strata::vulkan
