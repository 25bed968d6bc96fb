// entry_streams.cpp — the stream and event entry points: stream_create/destroy/synchronize,
// event_create/destroy/record/synchronize/query/elapsed, stream_wait_event.
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
Event* event_of(const strata_stream_args& a, const Device& d, const char* what) {
  if (a.event == nullptr) fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: null event", d.id().c_str(), what);
  return reinterpret_cast<Event*>(a.event);
}

}  // namespace

// ---- Streams ---------------------------------------------------------------------

strata_status State::stream_create(Device& d, strata_stream_args& a) {
  auto s = std::make_unique<Stream>(d);
  std::lock_guard lock(d.streams_mutex);
  d.streams.push_back(s.get());
  a.stream = reinterpret_cast<strata_stream>(s.release());
  return STRATA_OK;
}

strata_status State::stream_destroy(Device& d, strata_stream_args& a) {
  if (a.stream == nullptr) return STRATA_OK;
  auto* s = reinterpret_cast<Stream*>(a.stream);
  {
    std::lock_guard lock(d.streams_mutex);
    auto it = std::find(d.streams.begin(), d.streams.end(), s);
    if (it == d.streams.end() || s == d.default_stream.get()) return STRATA_OK;
    d.streams.erase(it);
  }
  delete s;  // waits for its work
  return STRATA_OK;
}

strata_status State::stream_synchronize(Device& d, strata_stream_args& a) {
  Stream& s = stream_of(d, a.stream);
  {
    std::lock_guard lock(s.mutex());
    return s.synchronize(a.error);  // then deferred()
  }
}

// ---- Events ----------------------------------------------------------------------

strata_status record_done(Stream& s, strata_event done, strata_error* error) {
  if (done == nullptr) return STRATA_OK;
  Event* e = reinterpret_cast<Event*>(done);
  if (e->timing) {
    // Written once everything before it on the queue has completed, and
    // submitted below with the batch it ends.
    if (strata_status st = s.write_timestamp(e->stamp.pool, e->stamp.query, error); st != STRATA_OK) return st;
  }
  uint64_t seq = 0;
  if (strata_status st = s.flush(error, &seq); st != STRATA_OK) return st;
  e->seq.store(seq, std::memory_order_release);
  return STRATA_OK;
}

strata_status State::event_create(Device& d, strata_stream_args& a) {
  auto e = std::make_unique<Event>();
  e->device = &d;
  // TIMING on a device without timestamps gives a plain event; event_elapsed
  // then says why it cannot measure.
  if ((a.flags & STRATA_EVENT_TIMING) != 0 && d.timestamps != nullptr) {
    if (strata_status st = d.timestamps->acquire(&e->stamp, a.error); st != STRATA_OK) return st;
    e->timing = true;
  }
  a.event = reinterpret_cast<strata_event>(e.release());
  return STRATA_OK;
}

strata_status State::event_destroy(Device&, strata_stream_args& a) {
  auto* e = reinterpret_cast<Event*>(a.event);
  if (e != nullptr && e->timing) e->device->timestamps->release(e->stamp);
  delete e;
  return STRATA_OK;
}

strata_status State::event_record(Device& d, strata_stream_args& a) {
  Event* e = event_of(a, d, "event_record");
  if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  Stream& s = stream_of(d, a.stream);
  std::lock_guard lock(s.mutex());
  // Submitting now puts the event's work ahead, in queue order, of anything
  // another stream submits after waiting on it.
  return record_done(s, a.event, a.error);
}

strata_status State::stream_wait_event(Device& d, strata_stream_args& a) {
  if (event_of(a, d, "stream_wait_event") == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  // The event's submission is already on the one queue, and every batch
  // begins with a barrier on all earlier submissions: whatever the stream
  // records from now on is ordered after it without blocking the host.
  return d.check_lost(a.error);
}

strata_status State::event_synchronize(Device& d, strata_stream_args& a) {
  Event* e = event_of(a, d, "event_synchronize");
  if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  return d.wait(e->seq.load(std::memory_order_acquire), a.error);  // then deferred()
}

strata_status State::event_query(Device& d, strata_stream_args& a) {
  Event* e = event_of(a, d, "event_query");
  if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (strata_status st = d.check_lost(a.error); st != STRATA_OK) return st;
  // Never blocks, and is no synchronisation point: deferred failures wait
  // for the next one.
  const uint64_t seq = e->seq.load(std::memory_order_acquire);
  a.complete = d.completed.load() >= seq || d.poll() >= seq ? 1 : 0;
  return STRATA_OK;
}

strata_status State::event_elapsed(Device& d, strata_stream_args& a) {
  if (d.timestamps == nullptr) {
    return fail(a.error, STRATA_ERROR_UNSUPPORTED,
                "%s (%s): event_elapsed: the device's compute queue writes no timestamps (timestampValidBits %u%s); "
                "time with the host clock instead",
                d.id().c_str(), d.properties.deviceName, d.timestamp_bits,
                d.state->options.no_timestamps ? ", forced by the test hook option \"test_no_timestamps\"" : "");
  }
  if (strata_status st = d.check_lost(a.error); st != STRATA_OK) return st;
  const Event* const events[2] = {reinterpret_cast<const Event*>(a.event), reinterpret_cast<const Event*>(a.end)};
  const char* const names[2] = {"start event (args->event)", "end event (args->end)"};
  uint64_t seqs[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    const Event* e = events[k];
    if (e == nullptr) {
      return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: event_elapsed: null %s", d.id().c_str(), names[k]);
    }
    if (e->device != &d) {
      return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: event_elapsed: the %s belongs to %s", d.id().c_str(),
                  names[k], e->device != nullptr ? e->device->id().c_str() : "no device");
    }
    if (!e->timing) {
      return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: event_elapsed: the %s was not created with STRATA_EVENT_TIMING", d.id().c_str(), names[k]);
    }
    seqs[k] = e->seq.load(std::memory_order_acquire);
    if (seqs[k] == 0) {  // a recorded TIMING event always has a submission
      return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: event_elapsed: the %s was never recorded",
                  d.id().c_str(), names[k]);
    }
  }
  // One queue and one timeline: waiting for the later submission waits for both.
  if (strata_status st = d.wait(std::max(seqs[0], seqs[1]), a.error); st != STRATA_OK) return st;
  uint64_t ticks[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    if (strata_status st = d.timestamps->read(events[k]->stamp, &ticks[k], a.error); st != STRATA_OK) return st;
  }
  // Only the low timestampValidBits count; the queue runs submissions in
  // order, so the later submission's timestamp is the later one, also
  // across a wrap of the counter.
  const uint64_t mask = d.timestamp_bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << d.timestamp_bits) - 1;
  const bool forward = seqs[1] >= seqs[0];
  const uint64_t delta = (forward ? ticks[1] - ticks[0] : ticks[0] - ticks[1]) & mask;
  const double ms = static_cast<double>(delta) * static_cast<double>(d.timestamp_period) / 1e6;
  a.elapsed_ms = forward ? ms : -ms;
  return STRATA_OK;
}

}  // namespace strata::vulkan
