/* lostdev_plugin.c — a device that is lost for good (strata_plugin.h
 * section 2: STRATA_ERROR_DEVICE_LOST is sticky).
 *
 * Device "lostdev:0" (no streams) works normally — f32 fill, copy, add, mul
 * — until it has run N kernels, N from its options {"lose_after": N}
 * (default 3). The next kernel, number N + 1, and every later call (kernels,
 * alloc, copy, memory_info/trim/stats) return STRATA_ERROR_DEVICE_LOST with
 *   "lostdev:0: device lost (simulated after N kernels)".
 * device_props and get_kernels still answer (they describe the device, they
 * do not use it), and `free` still releases the host memory behind a buffer.
 * The host frees nothing of a lost device and calls only `shutdown`, which
 * releases the buffers still held (release_at_shutdown).
 */
#include "behaviour_common.h"

#include <stdio.h>

#define LD_NAME "lostdev"

static uint64_t g_lose_after = 3; /* set by init, read-only afterwards */
static uint64_t g_kernels = 0;    /* kernels started */
static int g_lost = 0;

static strata_status ld_init(const char* options_json, strata_error* error) {
  (void)error;
  g_lose_after = bp_option_u64(options_json, "lose_after", 3);
  return STRATA_OK;
}

static strata_status lost(strata_error* error) {
  return tpc_fail(error, STRATA_ERROR_DEVICE_LOST, "%s:0: device lost (simulated after %llu kernels)", LD_NAME,
                  (unsigned long long)g_lose_after);
}

static strata_status ld_alive(strata_error* error) {
  return __atomic_load_n(&g_lost, __ATOMIC_ACQUIRE) ? lost(error) : STRATA_OK;
}

static strata_status ld_kernel(const strata_kernel_call* c) {
  strata_error* error = c != NULL && c->struct_size >= STRATA_KERNEL_CALL_MIN_SIZE ? c->error : NULL;
  if (__atomic_load_n(&g_lost, __ATOMIC_ACQUIRE)) return lost(error);
  if (__atomic_add_fetch(&g_kernels, 1, __ATOMIC_ACQ_REL) > g_lose_after) {
    __atomic_store_n(&g_lost, 1, __ATOMIC_RELEASE);
    bp_log(STRATA_LOG_WARN, "simulating a lost device");
    return lost(error);
  }
  return bp_compute(c);
}

static const bp_kind kKernels[] = {BP_FILL, BP_COPY, BP_ADD, BP_MUL};

const bp_plugin_desc bp_plugin = {BP_KERNELS(kKernels), .kernel = ld_kernel, .init = ld_init, .alive = ld_alive,
                                   .release_at_shutdown = 1};

const strata_plugin_api bp_table = BP_TABLE(LD_NAME, NULL);
