/* serial_probe.h — the "strata_tests.serial_probe" v1 extension of the
 * "serial" behaviour plugin (serial_plugin.c), through which a test reads
 * how often the plugin saw the threading rule of strata_plugin.h section 3
 * broken. C and C++.
 *
 * A test finds it on the table of the plugin the runtime loaded: dlopen the
 * plugin's file with RTLD_NOLOAD (it is already loaded), call its
 * STRATA_PLUGIN_ENTRY_SYMBOL and walk `extensions` for this name.
 */
#ifndef STRATA_TESTS_SERIAL_PROBE_H
#define STRATA_TESTS_SERIAL_PROBE_H

#include <strata/plugin/strata_plugin.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SERIAL_PROBE_EXTENSION "strata_tests.serial_probe"
#define SERIAL_PROBE_VERSION 1u

typedef struct serial_probe_extension {
  strata_extension base; /* name SERIAL_PROBE_EXTENSION, version 1 */
  /* Kernel calls that found another call of the device in flight (each
   * also wrote NaN over its output on purpose). */
  uint64_t (*violations)(void);
  /* Kernel calls made so far. */
  uint64_t (*kernel_calls)(void);
} serial_probe_extension;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_TESTS_SERIAL_PROBE_H */
