#define _POSIX_C_SOURCE 200809L /* nanosleep */
/* broken_plugins.c — ABI 2.0 plugins that must be refused, one per compile
 * definition:
 *   BROKEN_NO_ENTRY    exports no entry symbol
 *   BROKEN_INIT        init reports that no driver is present
 *   BROKEN_NO_DEVICES  initialises but reports zero devices
 * and plugins that would take a host down if the host loaded them into its
 * own process (the runtime probes them in a child process first):
 *   BROKEN_CRASH_ENTRY   the entry point dereferences NULL (SIGSEGV)
 *   BROKEN_ABORT_INIT    init calls abort() (SIGABRT)
 *   BROKEN_FPE_INIT      init raises SIGFPE
 *   BROKEN_EXIT_PROBE    probe calls exit(0)
 *   BROKEN_HANG_INIT     init sleeps for ten minutes
 *   BROKEN_CRASH_KERNELS get_kernels dereferences NULL (SIGSEGV)
 * BROKEN_NAME is the name in the table (each variant has its own, so that
 * the host never takes two of them for builds of one backend).
 * (A plugin of another ABI major is the real ABI 1.0 build in abi1/.)
 */
#include <strata/plugin/strata_plugin.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "common/test_plugin_common.h"

#ifndef BROKEN_NAME
#define BROKEN_NAME "broken"
#endif

#ifndef BROKEN_NO_ENTRY
#ifndef BROKEN_INIT
static int g_state_tag;
#endif

#if defined(BROKEN_CRASH_ENTRY) || defined(BROKEN_CRASH_KERNELS)
/* Where a crash must happen: read through a pointer the compiler cannot prove NULL. */
static volatile int* volatile g_nowhere = NULL;
/* The read is meant to die of SIGSEGV: UndefinedBehaviorSanitizer (the asan
 * preset) would stop it first with "load of null pointer" and an exit, and
 * the test of the signal would test the sanitizer instead. */
#if defined(__GNUC__) || defined(__clang__)
#define BROKEN_CRASHES __attribute__((no_sanitize("undefined"))) /* gcc 8+ and clang */
#else
#define BROKEN_CRASHES
#endif
#endif

static strata_status broken_probe(strata_probe_args* args) {
  if (args == NULL || args->struct_size < STRATA_PROBE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
#ifdef BROKEN_EXIT_PROBE
  exit(0);
#endif
  args->score = 1;
  return STRATA_OK;
}

static strata_status broken_init(strata_init_args* args) {
  if (args == NULL || args->struct_size < STRATA_INIT_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
#if defined(BROKEN_ABORT_INIT)
  abort();
#elif defined(BROKEN_FPE_INIT)
  raise(SIGFPE);
#elif defined(BROKEN_HANG_INIT)
  {
    struct timespec ts = {600, 0};
    nanosleep(&ts, NULL);
  }
#endif
#ifdef BROKEN_INIT
  return tpc_fail(args->error, STRATA_ERROR_NO_DEVICE, "no driver found (test plugin)");
#else
  args->state = (strata_plugin_state)&g_state_tag;
#ifdef BROKEN_NO_DEVICES
  args->device_count = 0;
#else
  args->device_count = 1;
#endif
  return STRATA_OK;
#endif
}

#ifdef BROKEN_NO_DEVICES
/* The host refuses this plugin after its init succeeded, so it must call
 * shutdown at once; the test sees it through a marker file it names. */
static void broken_shutdown(strata_plugin_state state) {
  const char* marker = getenv("STRATA_TEST_SHUTDOWN_MARKER");
  FILE* f;
  (void)state;
  if (marker == NULL || *marker == '\0') return;
  f = fopen(marker, "w");
  if (f == NULL) return;
  fputs(BROKEN_NAME " shut down\n", f);
  fclose(f);
}
#endif

#ifndef BROKEN_CRASH_KERNELS
static strata_status broken_device(strata_device_args* args) {
  (void)args;
  return STRATA_ERROR_INTERNAL;
}
#else
static strata_status broken_props(strata_device_args* args) {
  strata_device_props* p;
  if (args == NULL || args->props == NULL) return STRATA_ERROR_INVALID_ARGUMENT;
  p = args->props;
  p->struct_size = STRATA_DEVICE_PROPS_MIN_SIZE;
  snprintf(p->name, sizeof(p->name), "%s", "crashes in get_kernels");
  p->type = STRATA_DEVICE_ACCELERATOR;
  p->memory_bytes = 1 << 20;
  p->dtype_mask = STRATA_DTYPE_BIT(STRATA_F32);
  return STRATA_OK;
}
BROKEN_CRASHES static strata_status broken_kernels(strata_device_args* args) {
  (void)args;
  return (strata_status)*g_nowhere;
}
#endif
static strata_status broken_alloc(strata_alloc_args* args) {
  (void)args;
  return STRATA_ERROR_OUT_OF_MEMORY;
}
static void broken_free(strata_alloc_args* args) { (void)args; }
static strata_status broken_copy(strata_copy_args* args) {
  (void)args;
  return STRATA_ERROR_INTERNAL;
}

static const strata_plugin_api kTable = {
    .struct_size = sizeof(strata_plugin_api),
    .abi_major = STRATA_ABI_MAJOR,
    .abi_minor = STRATA_ABI_MINOR,
    .min_host_minor = 0,
    .name = BROKEN_NAME,
    .vendor = "Strata tests",
    .version = "0.0.1",
    .probe = broken_probe,
    .init = broken_init,
#ifdef BROKEN_NO_DEVICES
    .shutdown = broken_shutdown,
#endif
#ifdef BROKEN_CRASH_KERNELS
    .device_props = broken_props,
    .get_kernels = broken_kernels,
#else
    .device_props = broken_device,
    .get_kernels = broken_device,
#endif
    .alloc = broken_alloc,
    .free = broken_free,
    .copy = broken_copy,
};

#ifdef BROKEN_CRASH_ENTRY
BROKEN_CRASHES STRATA_PLUGIN_EXPORT const strata_plugin_api* strata_plugin_entry(uint32_t host_abi_major,
                                                                                uint32_t host_abi_minor) {
  (void)host_abi_major;
  (void)host_abi_minor;
  return *g_nowhere != 0 ? &kTable : NULL;
}
#else
TPC_PLUGIN_ENTRY(&kTable)
#endif
#else
/* Exports something, but not the entry point. */
STRATA_PLUGIN_EXPORT int strata_plugin_entry_misspelled(void) { return 0; }
#endif
