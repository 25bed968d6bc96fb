// streams.cpp — the stream and event entry points.
//
// Demonstrates (strata_plugin.h sections 2-4): streams as in-order queues
// with a worker thread each; events as markers queued on a stream
// (event_record) that complete when the worker reaches them, with a
// timestamp for STRATA_EVENT_TIMING events (event_elapsed); cross-stream
// ordering without blocking the host (stream_wait_event queues a wait on the
// waiting stream's worker); and deferred failures reported at the
// synchronisation points (stream_synchronize, event_synchronize,
// event_elapsed).
#include "runtime.hpp"

namespace example {

using strata::plugin::fail;

namespace {

/// The live event `handle` of device `d`, or nullptr after a message.
std::shared_ptr<Event> find_event(PluginState& state, const Device& d, strata_event handle, strata_error* error,
                                  const char* what, const char* role = "event") {
  std::shared_ptr<Event> e = handle != nullptr ? state.events.find(handle_id(handle)) : nullptr;
  if (e == nullptr) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: %s %s is not a live event of this plugin", what,
         d.name.c_str(), role, handle == nullptr ? "NULL" : describe_handle(handle).c_str());
    return nullptr;
  }
  if (e->device != d.index) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: %s %s belongs to %s", what, d.name.c_str(), role,
         describe_handle(handle).c_str(), device_name(e->device).c_str());
    return nullptr;
  }
  return e;
}

/// Blocks until the latest record of `e` (as of now) has been reached.
void wait_reached(PluginState& state, Event& e) {
  std::unique_lock lock(state.event_mutex);
  const uint64_t target = e.recorded;
  state.event_reached.wait(lock, [&] { return e.reached >= target; });
}

}  // namespace

strata_status PluginState::stream_create(Device& d, strata_stream_args& a) {
  a.stream = to_handle<strata_stream>(streams.insert(std::make_shared<Stream>(d, false)));
  return STRATA_OK;
}

strata_status PluginState::stream_destroy(Device& d, strata_stream_args& a) {
  if (a.stream == nullptr) return STRATA_OK;  // the default stream lives as long as the device
  if (this->stream(d, a.stream, a.error, "stream_destroy") == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  streams.erase(handle_id(a.stream));  // the destructor finishes the queue and joins the worker
  return STRATA_OK;
}

strata_status PluginState::stream_synchronize(Device& d, strata_stream_args& a) {
  Stream* s = this->stream(d, a.stream, a.error, "stream_synchronize");
  if (s == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  s->drain();
  return STRATA_OK;  // then deferred(), the device's failures
}

strata_status PluginState::event_create(Device& d, strata_stream_args& a) {
  auto e = std::make_shared<Event>();
  e->device = d.index;
  e->timing = (a.flags & STRATA_EVENT_TIMING) != 0;
  a.event = to_handle<strata_event>(events.insert(std::move(e)));
  return STRATA_OK;
}

strata_status PluginState::event_destroy(Device& d, strata_stream_args& a) {
  if (find_event(*this, d, a.event, a.error, "event_destroy") == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  events.erase(handle_id(a.event));  // a queued marker keeps the object until it ran
  return STRATA_OK;
}

strata_status PluginState::event_record(Device& d, strata_stream_args& a) {
  Stream* s = this->stream(d, a.stream, a.error, "event_record");
  if (s == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  std::shared_ptr<Event> e = find_event(*this, d, a.event, a.error, "event_record");
  if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  record_event(*s, e);
  return STRATA_OK;
}

strata_status PluginState::stream_wait_event(Device& d, strata_stream_args& a) {
  Stream* s = this->stream(d, a.stream, a.error, "stream_wait_event");
  if (s == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  std::shared_ptr<Event> e = find_event(*this, d, a.event, a.error, "stream_wait_event");
  if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  uint64_t target;
  {
    std::lock_guard lock(event_mutex);
    target = e->recorded;  // never recorded: nothing to wait for
  }
  if (target == 0) return STRATA_OK;
  // The wait runs on `s`'s worker, so the host goes on. The marker it waits
  // for is already queued on its stream, so the wait always ends.
  PluginState* st = this;
  s->enqueue("stream_wait_event", [st, e, target] {
    std::unique_lock lock(st->event_mutex);
    st->event_reached.wait(lock, [&] { return e->reached >= target; });
  });
  return STRATA_OK;
}

strata_status PluginState::event_synchronize(Device& d, strata_stream_args& a) {
  std::shared_ptr<Event> e = find_event(*this, d, a.event, a.error, "event_synchronize");
  if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  wait_reached(*this, *e);
  return STRATA_OK;  // then deferred()
}

strata_status PluginState::event_query(Device& d, strata_stream_args& a) {
  std::shared_ptr<Event> e = find_event(*this, d, a.event, a.error, "event_query");
  if (e == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  std::lock_guard lock(event_mutex);
  a.complete = e->reached >= e->recorded ? 1 : 0;  // never recorded: complete
  return STRATA_OK;
}

strata_status PluginState::event_elapsed(Device& d, strata_stream_args& a) {
  std::shared_ptr<Event> start = find_event(*this, d, a.event, a.error, "event_elapsed", "start event");
  if (start == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  std::shared_ptr<Event> end = find_event(*this, d, a.end, a.error, "event_elapsed", "end event");
  if (end == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  for (const auto& [e, handle] : {std::pair{start, a.event}, std::pair{end, a.end}}) {
    if (!e->timing) {
      return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT,
                  "event_elapsed on %s: %s was created without STRATA_EVENT_TIMING", d.name.c_str(),
                  describe_handle(handle).c_str());
    }
    std::lock_guard lock(event_mutex);
    if (e->recorded == 0) {
      return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "event_elapsed on %s: %s was never recorded",
                  d.name.c_str(), describe_handle(handle).c_str());
    }
  }
  wait_reached(*this, *start);
  wait_reached(*this, *end);
  {
    std::lock_guard lock(event_mutex);
    a.elapsed_ms = std::chrono::duration<double, std::milli>(end->when - start->when).count();
  }
  return STRATA_OK;  // then deferred()
}

}  // namespace example
