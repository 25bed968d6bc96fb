/* asynccopy_probe.h — the "strata_tests.asynccopy_probe" v1 extension of the
 * "asynccopy" behaviour plugin (asynccopy_plugin.c), through which a test
 * reads what the plugin saw of the host's asynchronous copies. C and C++.
 * Found like serial_probe.h's extension.
 */
#ifndef STRATA_TESTS_ASYNCCOPY_PROBE_H
#define STRATA_TESTS_ASYNCCOPY_PROBE_H

#include <strata/plugin/strata_plugin.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ASYNCCOPY_PROBE_EXTENSION "strata_tests.asynccopy_probe"
#define ASYNCCOPY_PROBE_VERSION 1u

typedef struct asynccopy_probe_extension {
  strata_extension base; /* name ASYNCCOPY_PROBE_EXTENSION, version 1 */
  /* Host-to-device copies issued with STRATA_COPY_ASYNC (queued). */
  uint64_t (*async_copies)(void);
  /* Queued copies whose pinned source changed between issue and execution:
   * the host reused staging memory before the copy's event completed. */
  uint64_t (*violations)(void);
  /* Pinned host blocks allocated and not freed. */
  uint64_t (*pinned_blocks)(void);
} asynccopy_probe_extension;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_TESTS_ASYNCCOPY_PROBE_H */
