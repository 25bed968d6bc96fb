/* broken_plugins.c — ABI 2.0 plugins that must be refused, one per compile
 * definition:
 *   BROKEN_NO_ENTRY    exports no entry symbol
 *   BROKEN_INIT        init reports that no driver is present
 *   BROKEN_NO_DEVICES  initialises but reports zero devices
 * BROKEN_NAME is the name in the table (each variant has its own, so that
 * the host never takes two of them for builds of one backend).
 * (A plugin of another ABI major is the real ABI 1.0 build in abi1/.)
 */
#include <strata/plugin/strata_plugin.h>

#include <stdio.h>
#include <stdlib.h>

#include "common/test_plugin_common.h"

#ifndef BROKEN_NAME
#define BROKEN_NAME "broken"
#endif

#ifndef BROKEN_NO_ENTRY
#ifndef BROKEN_INIT
static int g_state_tag;
#endif

static strata_status broken_probe(strata_probe_args* args) {
  if (args == NULL || args->struct_size < STRATA_PROBE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  args->score = 1;
  return STRATA_OK;
}

static strata_status broken_init(strata_init_args* args) {
  if (args == NULL || args->struct_size < STRATA_INIT_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
#ifdef BROKEN_INIT
  return tpc_fail(args->error, STRATA_ERROR_NO_DEVICE, "no driver found (test plugin)");
#else
  args->state = (strata_plugin_state)&g_state_tag;
  args->device_count = 0;
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

static strata_status broken_device(strata_device_args* args) {
  (void)args;
  return STRATA_ERROR_INTERNAL;
}
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
    .device_props = broken_device,
    .get_kernels = broken_device,
    .alloc = broken_alloc,
    .free = broken_free,
    .copy = broken_copy,
};

TPC_PLUGIN_ENTRY(&kTable)
#else
/* Exports something, but not the entry point. */
STRATA_PLUGIN_EXPORT int strata_plugin_entry_misspelled(void) { return 0; }
#endif
