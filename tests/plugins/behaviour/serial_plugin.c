/* serial_plugin.c — a device that is not free-threaded and notices when the
 * host breaks the threading rule of strata_plugin.h section 3.
 *
 * Device "serial:0" sets no STRATA_DEVICE_FREE_THREADED and no
 * STRATA_DEVICE_HAS_STREAMS: the host uses the NULL stream only, so all of
 * the device's stream-naming calls (kernels, copies, alloc, free) must come
 * one at a time, under the host's lock for that stream. Kernels: f32 fill,
 * copy, add, sub, mul, neg, sum (enough for a small backward pass; anything
 * else falls back to the CPU).
 *
 * Each kernel keeps an in-flight counter: incremented on entry, decremented
 * on exit, with a deliberate window in between (the kernel computes, then
 * calls sched_yield() `window_yields` times — option {"window_yields": N},
 * default 4 — checking the counter after each). A kernel that finds another
 * call in flight on entry or in its window counts a violation and writes NaN
 * over its output on purpose, so that the broken rule also shows in the
 * numbers. Tests read the counts through the extension
 * "strata_tests.serial_probe" v1 (serial_probe.h) on the table.
 */
#define _POSIX_C_SOURCE 200809L

#include "behaviour_common.h"
#include "serial_probe.h"

#include <math.h>
#include <sched.h>

#define SERIAL_NAME "serial"

static uint64_t g_window_yields = 4; /* set by init, read-only afterwards */
static int g_in_flight = 0;
static uint64_t g_violations = 0;
static uint64_t g_calls = 0;

static strata_status serial_init(const char* options_json, strata_error* error) {
  (void)error;
  g_window_yields = bp_option_u64(options_json, "window_yields", 4);
  return STRATA_OK;
}

static void poison_output(const strata_kernel_call* c) {
  const strata_tensor* y = c->outputs[0];
  float* out = bp_f32(y);
  int64_t i, n = tpc_numel(y);
  for (i = 0; i < n; ++i) out[bp_element(y, i)] = NAN;
}

static strata_status serial_kernel(const strata_kernel_call* c) {
  int violated = 0;
  uint64_t k;
  strata_status st;
  __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED);
  if (__atomic_fetch_add(&g_in_flight, 1, __ATOMIC_ACQ_REL) != 0) violated = 1;
  st = bp_compute(c);
  for (k = 0; k < g_window_yields; ++k) {
    sched_yield();
    if (__atomic_load_n(&g_in_flight, __ATOMIC_ACQUIRE) != 1) violated = 1;
  }
  if (violated) {
    __atomic_add_fetch(&g_violations, 1, __ATOMIC_RELAXED);
    if (st == STRATA_OK) poison_output(c);
  }
  __atomic_sub_fetch(&g_in_flight, 1, __ATOMIC_ACQ_REL);
  return st;
}

static uint64_t probe_violations(void) { return __atomic_load_n(&g_violations, __ATOMIC_RELAXED); }
static uint64_t probe_kernel_calls(void) { return __atomic_load_n(&g_calls, __ATOMIC_RELAXED); }

static const serial_probe_extension kProbe = {
    {sizeof(serial_probe_extension), SERIAL_PROBE_EXTENSION, SERIAL_PROBE_VERSION, NULL},
    probe_violations,
    probe_kernel_calls,
};

static const bp_kind kKernels[] = {BP_FILL, BP_COPY, BP_ADD, BP_SUB, BP_MUL, BP_NEG, BP_SUM};

/* Neither FREE_THREADED nor HAS_STREAMS. */
const bp_plugin_desc bp_plugin = {.device_flags = 0, BP_KERNELS(kKernels), .kernel = serial_kernel, .init = serial_init};

const strata_plugin_api bp_table = BP_TABLE(SERIAL_NAME, &kProbe.base);
