// streams.cpp — streams and events mapped one to one onto the runtime's
// (ABI sections 3 and 4). After the synchronisation points
// (stream_synchronize, event_synchronize, event_elapsed) the SDK asks
// State::deferred, which reports deferred kernel failures.
#include "entry_points.hpp"

namespace strata::gpu {

using plugin::fail;

namespace {

Event* event_of(strata_event e) { return reinterpret_cast<Event*>(e); }

/// A runtime error at a synchronisation point; on success the SDK asks
/// deferred() next, which reports a kernel's failure (it names the op).
strata_status sync_result(Device& d, cudaError_t e, const char* what, strata_error* error) {
  return e != cudaSuccess ? runtime_failure(e, &d, what, error) : STRATA_OK;
}

}  // namespace

strata_status record_done(Device& d, cudaStream_t stream, strata_event done, strata_error* error) {
  if (done == nullptr) return STRATA_OK;
  Event* ev = event_of(done);
  if (cudaError_t e = cudaEventRecord(ev->native, stream); e != cudaSuccess) {
    return runtime_failure(e, &d, "cudaEventRecord", error);
  }
  ev->recorded.store(true, std::memory_order_release);
  return STRATA_OK;
}

strata_status State::stream_create(Device& d, strata_stream_args& a) {
  if (cudaError_t e = make_current(d); e != cudaSuccess) return runtime_failure(e, &d, "stream_create", a.error);
  auto s = std::make_unique<Stream>();
  s->device = &d;
  if (cudaError_t e = cudaStreamCreateWithFlags(&s->native, cudaStreamNonBlocking); e != cudaSuccess) {
    return runtime_failure(e, &d, "cudaStreamCreateWithFlags", a.error);
  }
  a.stream = reinterpret_cast<strata_stream>(s.release());
  return STRATA_OK;
}

strata_status State::stream_destroy(Device&, strata_stream_args& a) {
  if (a.stream == nullptr) return STRATA_OK;
  Stream* s = reinterpret_cast<Stream*>(a.stream);
  if (make_current(*s->device) == cudaSuccess) (void)cudaStreamDestroy(s->native);  // waits for its work itself
  delete s;
  return STRATA_OK;
}

strata_status State::stream_synchronize(Device& d, strata_stream_args& a) {
  if (cudaError_t e = make_current(d); e != cudaSuccess) {
    return runtime_failure(e, &d, "stream_synchronize", a.error);
  }
  return sync_result(d, cudaStreamSynchronize(native_stream(d, a.stream)), "cudaStreamSynchronize", a.error);
}

strata_status State::event_create(Device& d, strata_stream_args& a) {
  if (cudaError_t e = make_current(d); e != cudaSuccess) return runtime_failure(e, &d, "event_create", a.error);
  auto ev = std::make_unique<Event>();
  ev->device = &d;
  ev->timing = (a.flags & STRATA_EVENT_TIMING) != 0;
  const unsigned flags = ev->timing ? cudaEventDefault : cudaEventDisableTiming;
  if (cudaError_t e = cudaEventCreateWithFlags(&ev->native, flags); e != cudaSuccess) {
    return runtime_failure(e, &d, "cudaEventCreateWithFlags", a.error);
  }
  a.event = reinterpret_cast<strata_event>(ev.release());
  return STRATA_OK;
}

strata_status State::event_destroy(Device&, strata_stream_args& a) {
  if (a.event == nullptr) return STRATA_OK;
  Event* ev = event_of(a.event);
  if (make_current(*ev->device) == cudaSuccess) (void)cudaEventDestroy(ev->native);
  delete ev;
  return STRATA_OK;
}

strata_status State::event_record(Device& d, strata_stream_args& a) {
  if (a.event == nullptr) {
    return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "event_record on %s: NULL event", d.id.c_str());
  }
  if (cudaError_t e = make_current(d); e != cudaSuccess) return runtime_failure(e, &d, "event_record", a.error);
  return record_done(d, native_stream(d, a.stream), a.event, a.error);
}

strata_status State::stream_wait_event(Device& d, strata_stream_args& a) {
  if (a.event == nullptr) {
    return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "stream_wait_event on %s: NULL event", d.id.c_str());
  }
  if (cudaError_t e = make_current(d); e != cudaSuccess) return runtime_failure(e, &d, "stream_wait_event", a.error);
  if (cudaError_t e = cudaStreamWaitEvent(native_stream(d, a.stream), event_of(a.event)->native, 0);
      e != cudaSuccess) {
    return runtime_failure(e, &d, "cudaStreamWaitEvent", a.error);
  }
  return STRATA_OK;
}

strata_status State::event_synchronize(Device& d, strata_stream_args& a) {
  if (a.event == nullptr) {
    return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "event_synchronize on %s: NULL event", d.id.c_str());
  }
  if (cudaError_t e = make_current(d); e != cudaSuccess) return runtime_failure(e, &d, "event_synchronize", a.error);
  return sync_result(d, cudaEventSynchronize(event_of(a.event)->native), "cudaEventSynchronize", a.error);
}

strata_status State::event_query(Device& d, strata_stream_args& a) {
  if (a.event == nullptr) {
    return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "event_query on %s: NULL event", d.id.c_str());
  }
  if (cudaError_t e = make_current(d); e != cudaSuccess) return runtime_failure(e, &d, "event_query", a.error);
  cudaError_t e = cudaEventQuery(event_of(a.event)->native);
  if (e == cudaErrorNotReady) {
    a.complete = 0;
    return STRATA_OK;
  }
  if (e != cudaSuccess) return runtime_failure(e, &d, "cudaEventQuery", a.error);
  a.complete = 1;
  return STRATA_OK;
}

strata_status State::event_elapsed(Device& d, strata_stream_args& a) {
  Event* start = event_of(a.event);
  Event* end = event_of(a.end);
  if (start == nullptr || end == nullptr) {
    return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "event_elapsed on %s: NULL event", d.id.c_str());
  }
  for (const Event* ev : {start, end}) {
    if (!ev->timing) {
      return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT,
                  "event_elapsed on %s: an event was created without STRATA_EVENT_TIMING", d.id.c_str());
    }
    if (!ev->recorded.load(std::memory_order_acquire)) {
      return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "event_elapsed on %s: an event was never recorded",
                  d.id.c_str());
    }
  }
  if (cudaError_t e = make_current(d); e != cudaSuccess) return runtime_failure(e, &d, "event_elapsed", a.error);
  for (const Event* ev : {start, end}) {
    if (strata_status s = sync_result(d, cudaEventSynchronize(ev->native), "cudaEventSynchronize", a.error);
        s != STRATA_OK) {
      return s;
    }
  }
  float ms = 0;
  if (cudaError_t e = cudaEventElapsedTime(&ms, start->native, end->native); e != cudaSuccess) {
    return runtime_failure(e, &d, "cudaEventElapsedTime", a.error);
  }
  a.elapsed_ms = ms;
  return STRATA_OK;
}

}  // namespace strata::gpu
