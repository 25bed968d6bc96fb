/* broken_plugins.c — plugins that must be refused, one per compile definition:
 *   BROKEN_ABI_MAJOR   table claims ABI major 99
 *   BROKEN_NO_ENTRY    exports no entry symbol
 *   BROKEN_INIT        init reports that no driver is present
 *   BROKEN_NO_DEVICES  initialises but reports zero devices
 */
#include <strata/plugin/strata_plugin.h>

#include <stdio.h>
#include <string.h>

static strata_status broken_init(const strata_host_api* host, const char* options, strata_plugin_state* out,
                                 strata_error* error) {
  (void)host;
  (void)options;
  *out = NULL;
#ifdef BROKEN_INIT
  snprintf(error->message, sizeof(error->message), "no driver found (test plugin)");
  return STRATA_ERROR_NO_DEVICE;
#else
  (void)error;
  return STRATA_OK;
#endif
}

static int32_t broken_score(strata_plugin_state s) {
  (void)s;
  return 1;
}
static int32_t broken_device_count(strata_plugin_state s) {
  (void)s;
  return 0;
}
static strata_status broken_props(strata_plugin_state s, int32_t d, strata_device_props* p, strata_error* e) {
  (void)s;
  (void)d;
  (void)p;
  (void)e;
  return STRATA_ERROR_INTERNAL;
}
static strata_status broken_alloc(strata_plugin_state s, int32_t d, size_t n, strata_buffer* b, strata_error* e) {
  (void)s;
  (void)d;
  (void)n;
  (void)b;
  (void)e;
  return STRATA_ERROR_OUT_OF_MEMORY;
}
static void broken_free(strata_plugin_state s, int32_t d, strata_buffer b) {
  (void)s;
  (void)d;
  (void)b;
}
static strata_status broken_h2d(strata_plugin_state s, int32_t d, strata_buffer dst, size_t off, const void* src,
                                size_t n, strata_stream st, strata_error* e) {
  (void)s; (void)d; (void)dst; (void)off; (void)src; (void)n; (void)st; (void)e;
  return STRATA_ERROR_INTERNAL;
}
static strata_status broken_d2h(strata_plugin_state s, int32_t d, void* dst, strata_buffer src, size_t off, size_t n,
                                strata_stream st, strata_error* e) {
  (void)s; (void)d; (void)dst; (void)off; (void)src; (void)n; (void)st; (void)e;
  return STRATA_ERROR_INTERNAL;
}
static strata_status broken_d2d(strata_plugin_state s, int32_t d, strata_buffer dst, size_t doff, strata_buffer src,
                                size_t soff, size_t n, strata_stream st, strata_error* e) {
  (void)s; (void)d; (void)dst; (void)doff; (void)src; (void)soff; (void)n; (void)st; (void)e;
  return STRATA_ERROR_INTERNAL;
}
static strata_status broken_kernels(strata_plugin_state s, int32_t d, const strata_kernel_entry** k, int32_t* n,
                                    strata_error* e) {
  (void)s; (void)d; (void)e;
  *k = NULL;
  *n = 0;
  return STRATA_OK;
}

#ifndef BROKEN_NO_ENTRY
STRATA_PLUGIN_EXPORT const strata_plugin_api* strata_plugin_entry(uint32_t major, uint32_t minor) {
  static strata_plugin_api api;
  (void)major;
  (void)minor;
  memset(&api, 0, sizeof(api));
  api.struct_size = sizeof(api);
#ifdef BROKEN_ABI_MAJOR
  api.abi_major = 99;
#else
  api.abi_major = STRATA_ABI_MAJOR;
#endif
  api.abi_minor = 0;
  api.name = "broken";
  api.vendor = "Strata tests";
  api.version = "0.0.1";
  api.init = broken_init;
  api.score = broken_score;
  api.device_count = broken_device_count;
  api.device_props = broken_props;
  api.alloc = broken_alloc;
  api.free = broken_free;
  api.copy_h2d = broken_h2d;
  api.copy_d2h = broken_d2h;
  api.copy_d2d = broken_d2d;
  api.get_kernels = broken_kernels;
  return &api;
}
#else
/* Exports something, but not the entry point. */
STRATA_PLUGIN_EXPORT int strata_plugin_entry_misspelled(void) { return 0; }
#endif
