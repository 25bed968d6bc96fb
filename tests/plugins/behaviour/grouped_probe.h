/* grouped_probe.h — the "strata_tests.grouped_probe" v1 extension of the
 * "grouped" behaviour plugin (grouped_plugin.c), through which a test reads
 * how the host called its grouped strata::sgd_step kernel
 * (STRATA_KERNEL_GROUPED, strata_plugin.h) and sets how the kernel answers
 * groups. C and C++.
 *
 * A test finds it on the table of the plugin the runtime loaded: dlopen the
 * plugin's file with RTLD_NOLOAD (it is already loaded), call its
 * STRATA_PLUGIN_ENTRY_SYMBOL and walk `extensions` for this name.
 */
#ifndef STRATA_TESTS_GROUPED_PROBE_H
#define STRATA_TESTS_GROUPED_PROBE_H

#include <strata/plugin/strata_plugin.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GROUPED_PROBE_EXTENSION "strata_tests.grouped_probe"
#define GROUPED_PROBE_VERSION 1u

/* How the sgd_step kernel answers a call of more than one application. */
#define GROUPED_RUN 0     /* runs it */
#define GROUPED_DECLINE 1 /* STRATA_ERROR_UNSUPPORTED: the host must run each alone */
#define GROUPED_FAIL 2    /* STRATA_ERROR_INVALID_ARGUMENT, "refuses groups on purpose" */

typedef struct grouped_probe_extension {
  strata_extension base; /* name GROUPED_PROBE_EXTENSION, version 1 */
  /* sgd_step kernel calls, the applications they held in all, and the most
   * one call held, since the last reset. */
  uint64_t (*calls)(void);
  uint64_t (*applications)(void);
  uint64_t (*largest)(void);
  /* Pairs of applications in one call whose operands shared memory, which
   * the host promises never to group (each such call still runs). */
  uint64_t (*overlaps)(void);
  void (*reset)(void);
  void (*set_mode)(int32_t mode); /* GROUPED_RUN, GROUPED_DECLINE, GROUPED_FAIL */
} grouped_probe_extension;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_TESTS_GROUPED_PROBE_H */
