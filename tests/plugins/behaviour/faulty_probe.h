/* faulty_probe.h — the "strata_tests.faulty_probe" v1 extension of the
 * "faulty" behaviour plugin (faulty_plugin.c), through which a test makes
 * the plugin's kernels, allocations and copies fail on demand and counts
 * its calls. C and C++. Found like serial_probe.h's extension.
 *
 * A fault is armed per kind of call, one at a time per kind, and fires
 * once: set_fault(FAULTY_KERNEL, "mul", 2, 0) fails the second kernel call
 * of op "mul" from now on (counting only "mul" calls), then disarms itself.
 * The failed call does nothing (no output written, no memory allocated, no
 * byte copied) and returns `status` with a message naming the plugin, the
 * device, the call and the fault:
 *   "faulty:0: injected fault: kernel strata::mul".
 */
#ifndef STRATA_TESTS_FAULTY_PROBE_H
#define STRATA_TESTS_FAULTY_PROBE_H

#include <strata/plugin/strata_plugin.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FAULTY_PROBE_EXTENSION "strata_tests.faulty_probe"
#define FAULTY_PROBE_VERSION 1u

/* The kinds of call a fault can be armed for. */
#define FAULTY_KERNEL 0
#define FAULTY_ALLOC 1
#define FAULTY_COPY 2
#define FAULTY_KIND_COUNT 3

typedef struct faulty_probe_extension {
  strata_extension base; /* name FAULTY_PROBE_EXTENSION, version 1 */
  /* Arms the fault of `kind`: the `nth` matching call from now on (1: the
   * next one) fails with `status` (0: STRATA_ERROR_INTERNAL for kernels and
   * copies, STRATA_ERROR_OUT_OF_MEMORY for allocations). `filter` (NULL or
   * "": every call of the kind) narrows the calls counted: for kernels an
   * op name ("strata::mul", or "mul" in any namespace), for copies a
   * direction ("h2d", "d2h" or "d2d"); it is ignored for allocations. nth
   * 0 disarms that kind. */
  void (*set_fault)(int kind, const char* filter, uint64_t nth, int32_t status);
  /* Disarms every kind. */
  void (*clear_faults)(void);
  /* Whether a fault of `kind` is still armed (it has not fired yet). */
  int (*armed)(int kind);
  /* Calls of `kind` made so far, failed ones included. */
  uint64_t (*calls)(int kind);
  /* Faults that fired so far. */
  uint64_t (*fired)(void);
} faulty_probe_extension;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_TESTS_FAULTY_PROBE_H */
