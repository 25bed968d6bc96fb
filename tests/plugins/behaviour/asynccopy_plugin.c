/* asynccopy_plugin.c — a device whose copies to and from the host really are
 * asynchronous (strata_plugin.h section 4: pinned host memory, STRATA_COPY_ASYNC,
 * events), so that a test can see whether the host keeps the rule that goes
 * with them: the source of an asynchronous copy stays untouched, and the
 * destination of one to the host unread, until the copy's `done` event has
 * completed.
 *
 * Device "asynccopy:0", flags HAS_STREAMS | STAGE_PINNED (the host stages
 * large copies in both directions through pinned blocks of this device).
 *  - alloc of STRATA_MEMORY_PINNED_HOST: a malloc'd block; `host_pointer` is
 *    its address.
 *  - copy with STRATA_COPY_ASYNC between the device and a pinned block, in
 *    either direction: queued for a worker thread that performs it
 *    `delay_us` later (option {"delay_us": N}, default 300). At issue the
 *    plugin takes a checksum of the source; the worker takes it again before
 *    copying, and a source that changed in between counts as a violation
 *    (probe, asynccopy_probe.h). A copy to the host fills its destination
 *    with 0xa5 bytes at issue, so a host that reads before `done` sees
 *    garbage. `done` completes when the worker has copied. An asynchronous
 *    copy with host memory that is not one of its pinned blocks is refused:
 *    the host must stage through pinned memory on this device.
 *  - everything else that touches device memory (kernels, synchronous copies,
 *    stream and event synchronisation, event_record) first waits for the
 *    queue to drain, so the device stays in stream order.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep, pthreads */

#include "asynccopy_probe.h"
#include "behaviour_common.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ASYNCCOPY_NAME "asynccopy"
#define PINNED_MAGIC 0x50494e4eu /* "PINN" */
#define EVENT_MAGIC 0x41435645u  /* "ACVE" */
#define QUEUE_SIZE 64

typedef struct pinned_block {
  uint32_t magic;
  size_t bytes;
  unsigned char* data;
} pinned_block;

/* An event: complete once the worker has finished copy number `ticket`.
 * Its time (STRATA_EVENT_TIMING) is when that copy finished, or when it was
 * recorded if nothing was pending then. */
typedef struct ac_event {
  uint32_t magic;
  uint64_t ticket;
  uint64_t recorded_ns; /* 0: the time is that of copy `ticket` */
} ac_event;

typedef struct copy_job {
  unsigned char* dst;
  const unsigned char* src;
  size_t bytes;
  uint64_t checksum;
} copy_job;

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_changed = PTHREAD_COND_INITIALIZER;
static copy_job g_queue[QUEUE_SIZE];
static uint64_t g_issued = 0; /* copies queued so far (tickets 1, 2, ...) */
static uint64_t g_done = 0;   /* copies the worker finished */
static int g_worker_started = 0;
static uint64_t g_delay_us = 300;
static uint64_t g_violations = 0;
static uint64_t g_pinned_blocks = 0;
/* When each of the last TIMES copies finished (CLOCK_MONOTONIC ns), by ticket. */
#define TIMES 1024
static uint64_t g_done_ns[TIMES];

/* Pinned blocks, for recognising an async copy's source (a short list: the
 * host keeps a few). Guarded by g_mutex. */
#define MAX_PINNED 256
static pinned_block* g_pinned[MAX_PINNED];

static uint64_t checksum(const unsigned char* p, size_t n) {
  uint64_t h = UINT64_C(1469598103934665603);
  size_t i;
  for (i = 0; i < n; ++i) h = (h ^ p[i]) * UINT64_C(1099511628211);
  return h;
}

static void sleep_us(uint64_t us) {
  struct timespec ts;
  ts.tv_sec = (time_t)(us / 1000000u);
  ts.tv_nsec = (long)(us % 1000000u) * 1000L;
  nanosleep(&ts, NULL);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void* worker(void* unused) {
  (void)unused;
  pthread_mutex_lock(&g_mutex);
  for (;;) {
    copy_job job;
    while (g_done == g_issued) pthread_cond_wait(&g_changed, &g_mutex);
    job = g_queue[g_done % QUEUE_SIZE];
    pthread_mutex_unlock(&g_mutex);
    sleep_us(g_delay_us);  /* the "transfer" */
    if (checksum(job.src, job.bytes) != job.checksum) __atomic_add_fetch(&g_violations, 1, __ATOMIC_RELAXED);
    memcpy(job.dst, job.src, job.bytes);
    pthread_mutex_lock(&g_mutex);
    ++g_done;
    g_done_ns[g_done % TIMES] = now_ns();
    pthread_cond_broadcast(&g_changed);
  }
  return NULL;
}

/* Waits until every queued copy is done (stream order for what follows). */
static void drain(void) {
  pthread_mutex_lock(&g_mutex);
  while (g_done != g_issued) pthread_cond_wait(&g_changed, &g_mutex);
  pthread_mutex_unlock(&g_mutex);
}

static strata_status asynccopy_init(const char* options_json, strata_error* error) {
  pthread_t thread;
  g_delay_us = bp_option_u64(options_json, "delay_us", 300);
  if (g_worker_started) return STRATA_OK;
  if (pthread_create(&thread, NULL, worker, NULL) != 0) {
    return tpc_fail(error, STRATA_ERROR_INTERNAL, "%s: init: cannot start the copy thread", ASYNCCOPY_NAME);
  }
  pthread_detach(thread);
  g_worker_started = 1;
  return STRATA_OK;
}

/* The pinned block holding [p, p + n), or NULL. Requires g_mutex. */
static pinned_block* pinned_holding(const void* p, size_t n) {
  const unsigned char* c = (const unsigned char*)p;
  int k;
  for (k = 0; k < MAX_PINNED; ++k) {
    pinned_block* b = g_pinned[k];
    if (b != NULL && c >= b->data && n <= b->bytes && (size_t)(c - b->data) <= b->bytes - n) return b;
  }
  return NULL;
}

static strata_status ac_alloc(strata_alloc_args* args) {
  pinned_block* b;
  int k;
  if (args == NULL || args->struct_size < STRATA_ALLOC_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->kind != STRATA_MEMORY_PINNED_HOST) return bp_alloc(args);
  b = (pinned_block*)malloc(sizeof(*b));
  if (b == NULL) return tpc_fail(args->error, STRATA_ERROR_OUT_OF_MEMORY, "%s:0: out of host memory", ASYNCCOPY_NAME);
  b->magic = PINNED_MAGIC;
  b->bytes = args->bytes;
  b->data = (unsigned char*)malloc(args->bytes > 0 ? args->bytes : 1);
  pthread_mutex_lock(&g_mutex);
  for (k = 0; k < MAX_PINNED && g_pinned[k] != NULL; ++k) {
  }
  if (k < MAX_PINNED && b->data != NULL) g_pinned[k] = b;
  pthread_mutex_unlock(&g_mutex);
  if (k == MAX_PINNED || b->data == NULL) {
    free(b->data);
    free(b);
    return tpc_fail(args->error, STRATA_ERROR_OUT_OF_MEMORY, "%s:0: cannot allocate %zu pinned bytes (%d blocks held)",
                    ASYNCCOPY_NAME, args->bytes, MAX_PINNED);
  }
  __atomic_add_fetch(&g_pinned_blocks, 1, __ATOMIC_RELAXED);
  args->buffer = (strata_buffer)b;
  args->host_pointer = b->data;
  return STRATA_OK;
}

static void ac_free(strata_alloc_args* args) {
  pinned_block* b;
  int k;
  if (args == NULL || args->struct_size < STRATA_ALLOC_ARGS_MIN_SIZE) return;
  if (args->kind != STRATA_MEMORY_PINNED_HOST) {
    bp_free(args);
    return;
  }
  b = (pinned_block*)args->buffer;
  if (b == NULL || b->magic != PINNED_MAGIC) return;
  drain(); /* a queued copy may still read it (the host should not free it then) */
  pthread_mutex_lock(&g_mutex);
  for (k = 0; k < MAX_PINNED; ++k) {
    if (g_pinned[k] == b) g_pinned[k] = NULL;
  }
  pthread_mutex_unlock(&g_mutex);
  b->magic = 0;
  free(b->data);
  free(b);
  __atomic_sub_fetch(&g_pinned_blocks, 1, __ATOMIC_RELAXED);
}

static ac_event* event_of(strata_event e) {
  ac_event* ev = (ac_event*)e;
  return ev != NULL && ev->magic == EVENT_MAGIC ? ev : NULL;
}

static strata_status ac_copy(strata_copy_args* args) {
  unsigned char* device;
  size_t device_bytes = 0, device_offset;
  const void* host;
  copy_job job;
  if (args == NULL || args->struct_size < STRATA_COPY_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!(args->flags & STRATA_COPY_ASYNC) || args->kind == STRATA_COPY_DEVICE_TO_DEVICE) {
    drain();
    return bp_copy(args);
  }
  const int to_device = args->kind == STRATA_COPY_HOST_TO_DEVICE;
  device = (unsigned char*)bp_buffer_data(to_device ? args->dst : args->src, &device_bytes);
  device_offset = to_device ? args->dst_offset : args->src_offset;
  host = to_device ? args->src_host : (const void*)args->dst_host;
  if (device == NULL || device_offset > device_bytes || args->bytes > device_bytes - device_offset) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s:0: async copy: device range out of range",
                    ASYNCCOPY_NAME);
  }
  job.dst = to_device ? device + device_offset : (unsigned char*)args->dst_host;
  job.src = to_device ? (const unsigned char*)args->src_host : device + device_offset;
  job.bytes = args->bytes;
  pthread_mutex_lock(&g_mutex);
  if (pinned_holding(host, args->bytes) == NULL) {
    pthread_mutex_unlock(&g_mutex);
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT,
                    "%s:0: async copy with host memory that is not a pinned block of this device", ASYNCCOPY_NAME);
  }
  /* Until `done`, a copy's host destination holds garbage: a host that reads
   * it early sees this pattern, not the tensor. */
  if (!to_device) memset(args->dst_host, 0xA5, args->bytes);
  while (g_issued - g_done == QUEUE_SIZE) pthread_cond_wait(&g_changed, &g_mutex);
  job.checksum = checksum(job.src, job.bytes);
  g_queue[g_issued % QUEUE_SIZE] = job;
  ++g_issued;
  if (event_of(args->done) != NULL) {
    event_of(args->done)->ticket = g_issued;
    event_of(args->done)->recorded_ns = 0;
  }
  pthread_cond_broadcast(&g_changed);
  pthread_mutex_unlock(&g_mutex);
  return STRATA_OK;
}

static strata_status ac_kernel(const strata_kernel_call* c) {
  drain();
  return bp_compute(c);
}

/* ---- events: complete when the worker reached their ticket ---------------------------- */

static strata_status ac_event_create(strata_stream_args* args) {
  ac_event* ev;
  if (args == NULL || args->struct_size < STRATA_STREAM_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  ev = (ac_event*)malloc(sizeof(*ev));
  if (ev == NULL) return tpc_fail(args->error, STRATA_ERROR_OUT_OF_MEMORY, "%s:0: out of host memory", ASYNCCOPY_NAME);
  ev->magic = EVENT_MAGIC;
  ev->ticket = 0;
  ev->recorded_ns = now_ns();
  args->event = (strata_event)ev;
  return STRATA_OK;
}

static void ac_event_destroy(strata_stream_args* args) {
  ac_event* ev;
  if (args == NULL || args->struct_size < STRATA_STREAM_ARGS_MIN_SIZE) return;
  ev = event_of(args->event);
  if (ev == NULL) return;
  ev->magic = 0;
  free(ev);
}

/* Recorded at the stream's end: after every copy queued so far. */
static strata_status ac_event_record(strata_stream_args* args) {
  ac_event* ev;
  if (args == NULL || args->struct_size < STRATA_STREAM_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  ev = event_of(args->event);
  if (ev == NULL) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s:0: event_record: not an event", ASYNCCOPY_NAME);
  }
  pthread_mutex_lock(&g_mutex);
  ev->ticket = g_issued;
  ev->recorded_ns = g_done == g_issued ? now_ns() : 0;
  pthread_mutex_unlock(&g_mutex);
  return STRATA_OK;
}

static strata_status ac_event_query(strata_stream_args* args) {
  ac_event* ev;
  if (args == NULL || args->struct_size < STRATA_STREAM_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  ev = event_of(args->event);
  if (ev == NULL) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s:0: event_query: not an event", ASYNCCOPY_NAME);
  }
  pthread_mutex_lock(&g_mutex);
  args->complete = g_done >= ev->ticket ? 1 : 0;
  pthread_mutex_unlock(&g_mutex);
  return STRATA_OK;
}

static strata_status ac_event_synchronize(strata_stream_args* args) {
  ac_event* ev;
  if (args == NULL || args->struct_size < STRATA_STREAM_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  ev = event_of(args->event);
  if (ev == NULL) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s:0: event_synchronize: not an event", ASYNCCOPY_NAME);
  }
  pthread_mutex_lock(&g_mutex);
  while (g_done < ev->ticket) pthread_cond_wait(&g_changed, &g_mutex);
  pthread_mutex_unlock(&g_mutex);
  return STRATA_OK;
}

/* Waits for both events; their times are host clock readings of when the
 * worker finished their copies (the device's "timestamps"). */
static strata_status ac_event_elapsed(strata_stream_args* args) {
  ac_event *a, *b;
  uint64_t ta, tb;
  if (args == NULL || args->struct_size < STRATA_STREAM_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  a = event_of(args->event);
  b = event_of(args->end);
  if (a == NULL || b == NULL) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s:0: event_elapsed: not an event", ASYNCCOPY_NAME);
  }
  pthread_mutex_lock(&g_mutex);
  while (g_done < a->ticket || g_done < b->ticket) pthread_cond_wait(&g_changed, &g_mutex);
  if (g_done - a->ticket >= TIMES || g_done - b->ticket >= TIMES) {
    pthread_mutex_unlock(&g_mutex);
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT,
                    "%s:0: event_elapsed: an event is older than the last %d copies", ASYNCCOPY_NAME, TIMES);
  }
  ta = a->recorded_ns != 0 ? a->recorded_ns : g_done_ns[a->ticket % TIMES];
  tb = b->recorded_ns != 0 ? b->recorded_ns : g_done_ns[b->ticket % TIMES];
  pthread_mutex_unlock(&g_mutex);
  args->elapsed_ms = ((double)tb - (double)ta) / 1e6;
  return STRATA_OK;
}

static strata_status ac_stream_synchronize(strata_stream_args* args) {
  drain();
  return bp_stream_synchronize(args);
}

static uint64_t probe_async_copies(void) {
  uint64_t n;
  pthread_mutex_lock(&g_mutex);
  n = g_issued;
  pthread_mutex_unlock(&g_mutex);
  return n;
}
static uint64_t probe_violations(void) { return __atomic_load_n(&g_violations, __ATOMIC_RELAXED); }
static uint64_t probe_pinned_blocks(void) { return __atomic_load_n(&g_pinned_blocks, __ATOMIC_RELAXED); }

static const asynccopy_probe_extension kProbe = {
    {sizeof(asynccopy_probe_extension), ASYNCCOPY_PROBE_EXTENSION, ASYNCCOPY_PROBE_VERSION, NULL},
    probe_async_copies,
    probe_violations,
    probe_pinned_blocks,
};

static const bp_kind kKernels[] = {BP_FILL, BP_COPY, BP_ADD, BP_SUB, BP_MUL, BP_NEG, BP_SUM};

const bp_plugin_desc bp_plugin = {.device_flags = STRATA_DEVICE_HAS_STREAMS | STRATA_DEVICE_STAGE_PINNED,
                                  BP_KERNELS(kKernels), .kernel = ac_kernel, .init = asynccopy_init};

/* BP_TABLE with this plugin's memory, copy and event functions. */
const strata_plugin_api bp_table = {
    .struct_size = sizeof(strata_plugin_api), .abi_major = STRATA_ABI_MAJOR, .abi_minor = STRATA_ABI_MINOR,
    .min_host_minor = 0, .name = ASYNCCOPY_NAME, .vendor = "Strata tests", .version = "2.0.0", .probe = bp_probe,
    .init = bp_init, .shutdown = bp_shutdown, .device_props = bp_device_props, .get_kernels = bp_get_kernels,
    .alloc = ac_alloc, .free = ac_free, .copy = ac_copy, .memory_info = bp_memory_info,
    .memory_trim = bp_memory_trim, .memory_stats = bp_memory_stats, .stream_create = bp_stream_create,
    .stream_destroy = bp_stream_destroy, .stream_synchronize = ac_stream_synchronize,
    .event_create = ac_event_create, .event_destroy = ac_event_destroy, .event_record = ac_event_record,
    .stream_wait_event = bp_stream_wait_event, .event_synchronize = ac_event_synchronize,
    .event_query = ac_event_query, .event_elapsed = ac_event_elapsed, .extensions = &kProbe.base};
