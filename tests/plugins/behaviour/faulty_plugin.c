/* faulty_plugin.c — a device whose kernels, allocations and copies fail on
 * demand, for the exception-safety tests (a failed op leaves its inputs,
 * the tape and the allocator's counts as they were).
 *
 * Device "faulty:0" (no streams) is the behaviour plugins' small f32
 * accelerator (fill, copy, add, sub, mul, neg, sum; anything else falls
 * back to the CPU) and works normally until a test arms a fault through
 * the extension "strata_tests.faulty_probe" v1 (faulty_probe.h): the nth
 * kernel call of an op, the nth allocation or the nth copy (of a
 * direction) from then on fails, once, with a real status and a message
 * and without touching memory. The device carries on afterwards.
 */
#define _POSIX_C_SOURCE 200809L

#include "behaviour_common.h"
#include "faulty_probe.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define FAULTY_NAME "faulty"

typedef struct fault {
  uint64_t remaining; /* matching calls until the one that fails; 0: disarmed */
  char filter[64];    /* "" : every call of the kind */
  int32_t status;
} fault;

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static fault g_faults[FAULTY_KIND_COUNT];
static uint64_t g_calls[FAULTY_KIND_COUNT];
static uint64_t g_fired = 0;

static const char* const kKindNames[FAULTY_KIND_COUNT] = {"kernel", "alloc", "copy"};

/* Whether a call named `name` ("strata::mul", "h2d") passes `filter`:
 * every call for "", else the name itself or its part after "::". */
static int matches(const char* filter, const char* name) {
  const char* colon;
  if (filter[0] == '\0') return 1;
  if (name == NULL) return 0;
  colon = strstr(name, "::");
  return strcmp(filter, name) == 0 || (colon != NULL && strcmp(filter, colon + 2) == 0);
}

/* Counts a call of `kind` (`name`: its op or direction) and returns the
 * status of the fault it fires, or STRATA_OK. */
static strata_status tick(int kind, const char* name) {
  strata_status st = STRATA_OK;
  fault* f = &g_faults[kind];
  pthread_mutex_lock(&g_mutex);
  ++g_calls[kind];
  if (f->remaining > 0 && matches(f->filter, name)) {
    if (--f->remaining == 0) {
      st = (strata_status)f->status;
      ++g_fired;
    }
  }
  pthread_mutex_unlock(&g_mutex);
  return st;
}

static strata_status injected(strata_error* error, strata_status st, const char* what, const char* name, size_t bytes) {
  if (bytes > 0) {
    return tpc_fail(error, st, "%s:0: injected fault: %s %s of %zu bytes", FAULTY_NAME, what, name, bytes);
  }
  return tpc_fail(error, st, "%s:0: injected fault: %s %s", FAULTY_NAME, what, name);
}

static strata_status faulty_kernel(const strata_kernel_call* c) {
  strata_status st;
  if (c == NULL || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  st = tick(FAULTY_KERNEL, c->op);
  if (st != STRATA_OK) return injected(c->error, st, "kernel", c->op != NULL ? c->op : "(null)", 0);
  return bp_compute(c);
}

static strata_status faulty_before_alloc(strata_alloc_args* args) {
  strata_status st = tick(FAULTY_ALLOC, NULL);
  return st == STRATA_OK ? st : injected(args->error, st, "alloc", "", args->bytes);
}

static const char* direction(strata_copy_kind kind) {
  switch (kind) {
    case STRATA_COPY_HOST_TO_DEVICE: return "h2d";
    case STRATA_COPY_DEVICE_TO_HOST: return "d2h";
    case STRATA_COPY_DEVICE_TO_DEVICE: return "d2d";
    default: return "?";
  }
}

static strata_status faulty_before_copy(strata_copy_args* args) {
  const char* dir = direction(args->kind);
  strata_status st = tick(FAULTY_COPY, dir);
  return st == STRATA_OK ? st : injected(args->error, st, "copy", dir, args->bytes);
}

/* ---- the probe ------------------------------------------------------------------ */

static void probe_set_fault(int kind, const char* filter, uint64_t nth, int32_t status) {
  fault* f;
  if (kind < 0 || kind >= FAULTY_KIND_COUNT) return;
  f = &g_faults[kind];
  pthread_mutex_lock(&g_mutex);
  f->remaining = nth;
  f->filter[0] = '\0';
  if (filter != NULL && kind != FAULTY_ALLOC) {
    strncpy(f->filter, filter, sizeof(f->filter) - 1);
    f->filter[sizeof(f->filter) - 1] = '\0';
  }
  f->status = status != 0 ? status : kind == FAULTY_ALLOC ? STRATA_ERROR_OUT_OF_MEMORY : STRATA_ERROR_INTERNAL;
  pthread_mutex_unlock(&g_mutex);
  if (nth > 0) {
    char message[128];
    snprintf(message, sizeof(message), "armed: %s %s, call %llu", kKindNames[kind], f->filter, (unsigned long long)nth);
    bp_log(STRATA_LOG_DEBUG, message);
  }
}

static void probe_clear_faults(void) {
  int k;
  for (k = 0; k < FAULTY_KIND_COUNT; ++k) probe_set_fault(k, NULL, 0, 0);
}

static int probe_armed(int kind) {
  int armed;
  if (kind < 0 || kind >= FAULTY_KIND_COUNT) return 0;
  pthread_mutex_lock(&g_mutex);
  armed = g_faults[kind].remaining > 0;
  pthread_mutex_unlock(&g_mutex);
  return armed;
}

static uint64_t probe_calls(int kind) {
  uint64_t n;
  if (kind < 0 || kind >= FAULTY_KIND_COUNT) return 0;
  pthread_mutex_lock(&g_mutex);
  n = g_calls[kind];
  pthread_mutex_unlock(&g_mutex);
  return n;
}

static uint64_t probe_fired(void) {
  uint64_t n;
  pthread_mutex_lock(&g_mutex);
  n = g_fired;
  pthread_mutex_unlock(&g_mutex);
  return n;
}

static const faulty_probe_extension kProbe = {
    {sizeof(faulty_probe_extension), FAULTY_PROBE_EXTENSION, FAULTY_PROBE_VERSION, NULL},
    probe_set_fault,
    probe_clear_faults,
    probe_armed,
    probe_calls,
    probe_fired,
};

static const bp_kind kKernels[] = {BP_FILL, BP_COPY, BP_ADD, BP_SUB, BP_MUL, BP_NEG, BP_SUM};

const bp_plugin_desc bp_plugin = {.device_flags = 0,
                                  BP_KERNELS(kKernels),
                                  .kernel = faulty_kernel,
                                  .before_alloc = faulty_before_alloc,
                                  .before_copy = faulty_before_copy};

const strata_plugin_api bp_table = BP_TABLE(FAULTY_NAME, &kProbe.base);
