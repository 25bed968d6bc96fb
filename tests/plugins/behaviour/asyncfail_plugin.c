/* asyncfail_plugin.c — a device that reports a kernel's failure later, at
 * the next synchronisation point (strata_plugin.h section 2), as CUDA's
 * device-side asserts do.
 *
 * Device "asyncfail:0" sets STRATA_DEVICE_HAS_STREAMS (its streams and
 * events are trivial: work is complete when issued; behaviour_common.c). Its
 * strata::index_select (f32 data, i64 index) checks every index as a GPU
 * would, in the kernel: for an out-of-range index it writes nothing for that
 * row, returns STRATA_OK, and keeps a pending error. The next
 * stream_synchronize, event_synchronize or synchronous device-to-host copy
 * returns STRATA_ERROR_DEFERRED with
 *   "strata::index_select on asyncfail:0: index 7 out of range [0, 5)"
 * (the real index and size) and clears it: the device keeps working. Only
 * the first failure before a synchronisation is kept (later ones are
 * counted in the message). Kernels also: fill, copy, add (f32).
 *
 * Kernels run under the host's per-stream lock, but synchronisation may be
 * called from any thread at any time (section 3), so the pending error is
 * guarded by a mutex.
 */
#define _POSIX_C_SOURCE 200809L

#include "behaviour_common.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define AF_NAME "asyncfail"

static pthread_mutex_t g_pending_mutex = PTHREAD_MUTEX_INITIALIZER;
static char g_pending[STRATA_ERROR_MESSAGE_CAPACITY];
static int g_pending_count = 0; /* failures since the last synchronisation */

static void defer_failure(const char* message) {
  pthread_mutex_lock(&g_pending_mutex);
  if (g_pending_count == 0) snprintf(g_pending, sizeof(g_pending), "%s", message);
  ++g_pending_count;
  pthread_mutex_unlock(&g_pending_mutex);
}

static strata_status af_sync_point(strata_error* error) {
  strata_status st = STRATA_OK;
  pthread_mutex_lock(&g_pending_mutex);
  if (g_pending_count == 1) {
    st = tpc_fail(error, STRATA_ERROR_DEFERRED, "%s", g_pending);
  } else if (g_pending_count > 1) {
    st = tpc_fail(error, STRATA_ERROR_DEFERRED, "%s (and %d later failures)", g_pending, g_pending_count - 1);
  }
  g_pending_count = 0;
  pthread_mutex_unlock(&g_pending_mutex);
  return st;
}

/* y[..i..] = x[..index[i]..] along `dim`. An out-of-range index leaves its
 * row of y unwritten and defers the failure. */
static strata_status af_index_select(const strata_kernel_call* c) {
  const strata_tensor *x = c->inputs[0], *index = c->inputs[1], *y = c->outputs[0];
  const float* xs = bp_f32(x);
  const int64_t* is = bp_i64(index);
  float* ys = bp_f32(y);
  int64_t dim = bp_attr_int(c, "dim", -1);
  int64_t i, n = tpc_numel(y);
  int reported = 0;
  for (i = 0; i < n; ++i) {
    /* The coordinates of y's i-th element; x's differ only along dim. */
    int64_t rest = i, at = x->offset, row = 0, chosen;
    int32_t k;
    for (k = y->rank - 1; k >= 0; --k) {
      int64_t coord = rest % y->shape[k];
      rest /= y->shape[k];
      if (k == dim) row = coord;
      else at += coord * x->strides[k];
    }
    chosen = is[bp_element(index, row)];
    if (chosen < 0 || chosen >= x->shape[dim]) {
      if (!reported) {
        char message[STRATA_ERROR_MESSAGE_CAPACITY];
        snprintf(message, sizeof(message), "%s on %s:0: index %lld out of range [0, %lld)", c->op, AF_NAME,
                 (long long)chosen, (long long)x->shape[dim]);
        defer_failure(message);
        reported = 1;
      }
      continue;
    }
    ys[bp_element(y, i)] = xs[at + chosen * x->strides[dim]];
  }
  return STRATA_OK;
}

static strata_status af_kernel(const strata_kernel_call* c) { return bp_compute_or(c, BP_INDEX_SELECT, af_index_select); }

static const bp_kind kKernels[] = {BP_FILL, BP_COPY, BP_ADD, BP_INDEX_SELECT};

const bp_plugin_desc bp_plugin = {.device_flags = STRATA_DEVICE_HAS_STREAMS, BP_KERNELS(kKernels), .kernel = af_kernel,
                                   .sync_point = af_sync_point};

const strata_plugin_api bp_table = BP_TABLE(AF_NAME, NULL);
