/* behaviour_common.h — what the ABI 2.0 behaviour test plugins share.
 *
 * The behaviour plugins (asyncfail, lostdev, serial, wsp, asynccopy,
 * faulty) each act out one rule of strata_plugin.h that a healthy backend
 * never shows: a failure reported at the next synchronisation (section 2),
 * a lost device (section 2), a device that is not free-threaded (section
 * 3), a kernel asking for workspace (sections 4 and 5), copies that
 * complete later, kernels, allocations and copies that fail on demand. Everything else about them is the same small
 * accelerator, written once here (behaviour_common.c, on top of the test
 * plugins' common code, ../common/test_plugin_common.h) and compiled into
 * each:
 *
 *  - one device of its own memory space: a buffer is a handle to a malloc'd
 *    block the core cannot read; copies are synchronous;
 *  - f32 kernels for fill, copy, add, sub, mul, neg and sum, all accepting
 *    strided inputs, plus entries a plugin computes itself (index_select);
 *  - streams and events as trivial objects (work completes when issued),
 *    used only by a plugin whose device sets STRATA_DEVICE_HAS_STREAMS;
 *  - its own memory counters for memory_info / memory_stats.
 *
 * A plugin's own file defines `bp_plugin` (its device, kernel list and
 * hooks) and `bp_table` (the ABI table, initialised with BP_TABLE); the
 * entry point, strata_plugin_entry, is the common code's and returns
 * bp_table.
 */
#ifndef STRATA_BEHAVIOUR_COMMON_H
#define STRATA_BEHAVIOUR_COMMON_H

#include <strata/plugin/strata_ops.h>
#include <strata/plugin/strata_plugin.h>

#include <stddef.h>
#include <stdint.h>

/* tpc_fail (the error writer), tpc_numel and the rest the test plugins
 * share. */
#include "../common/test_plugin_common.h"

/* The kernels the common code knows: op, signature and arity in kBpKernels
 * (behaviour_common.c). BP_INDEX_SELECT (f32,i64->f32) is listed but not
 * computed here, nor is BP_SGD_STEP (f32,f32->f32, registered with
 * STRATA_KERNEL_GROUPED): a plugin that lists one computes it in its own
 * kernel. */
typedef enum bp_kind {
  BP_FILL = 0,
  BP_COPY,
  BP_ADD,
  BP_SUB,
  BP_MUL,
  BP_NEG,
  BP_SUM,
  BP_INDEX_SELECT,
  BP_SGD_STEP,
  BP_KIND_COUNT
} bp_kind;

/* What one behaviour plugin is. Hooks may be NULL. */
typedef struct bp_plugin_desc {
  uint32_t device_flags;     /* STRATA_DEVICE_* of its one device           */
  const bp_kind* kernels;    /* the kernels it lists                        */
  int n_kernels;
  /* Every listed entry's function: the plugin's own wrapper, which calls
   * bp_compute for the arithmetic (NULL: bp_compute itself). */
  strata_kernel_fn kernel;
  /* From init, with the plugin's "options" JSON. */
  strata_status (*init)(const char* options_json, strata_error* error);
  /* First thing in alloc, copy, memory_info/trim/stats and every stream and
   * event call but the destroys: a non-OK status fails that call. */
  strata_status (*alive)(strata_error* error);
  /* At each synchronisation point (stream_synchronize, event_synchronize,
   * a synchronous device-to-host copy): a deferred failure, if any. */
  strata_status (*sync_point)(strata_error* error);
  /* After alloc's and copy's own checks, before they do anything: a non-OK
   * status (with its message in args->error) fails that call. */
  strata_status (*before_alloc)(strata_alloc_args* args);
  strata_status (*before_copy)(strata_copy_args* args);
  /* Non-zero: the common code tracks the live buffers and shutdown releases
   * the ones still held. The host frees nothing on a lost device (it calls
   * only shutdown, strata_plugin.h section 2), so a plugin whose device can
   * be lost sets it; the others leave it 0, so that a buffer the host forgot
   * to free still shows as a leak. */
  int release_at_shutdown;
} bp_plugin_desc;

/* `.kernels` and `.n_kernels` of a bp_plugin_desc from an array. */
#define BP_KERNELS(array) .kernels = (array), .n_kernels = (int)(sizeof(array) / sizeof((array)[0]))

/* Defined by each plugin's own file. */
extern const bp_plugin_desc bp_plugin;
extern const strata_plugin_api bp_table;

/* The table's functions (behaviour_common.c). */
strata_status bp_probe(strata_probe_args* args);
strata_status bp_init(strata_init_args* args);
void bp_shutdown(strata_plugin_state state);
strata_status bp_device_props(strata_device_args* args);
strata_status bp_get_kernels(strata_device_args* args);
strata_status bp_alloc(strata_alloc_args* args);
void bp_free(strata_alloc_args* args);
strata_status bp_copy(strata_copy_args* args);
strata_status bp_memory_info(strata_memory_args* args);
strata_status bp_memory_trim(strata_memory_args* args);
strata_status bp_memory_stats(strata_memory_args* args);
strata_status bp_stream_create(strata_stream_args* args);
void bp_stream_destroy(strata_stream_args* args);
strata_status bp_stream_synchronize(strata_stream_args* args);
strata_status bp_event_create(strata_stream_args* args);
void bp_event_destroy(strata_stream_args* args);
strata_status bp_event_record(strata_stream_args* args);
strata_status bp_stream_wait_event(strata_stream_args* args);
strata_status bp_event_synchronize(strata_stream_args* args);
strata_status bp_event_query(strata_stream_args* args);

/* The ABI table of plugin NAME (a string literal) with EXTENSIONS (a
 * `const strata_extension*`, or NULL). Stream and event functions are
 * always there (but event_elapsed: work completes when issued, so there is
 * no device time to report); the host uses them only for a device with
 * HAS_STREAMS. */
#define BP_TABLE(NAME, EXTENSIONS)                                                                        \
  {                                                                                                       \
    .struct_size = sizeof(strata_plugin_api), .abi_major = STRATA_ABI_MAJOR, .abi_minor = STRATA_ABI_MINOR, \
    .min_host_minor = 0, .name = (NAME), .vendor = "Strata tests", .version = "2.0.0", .probe = bp_probe,   \
    .init = bp_init, .shutdown = bp_shutdown, .device_props = bp_device_props,                            \
    .get_kernels = bp_get_kernels, .alloc = bp_alloc, .free = bp_free, .copy = bp_copy,                   \
    .memory_info = bp_memory_info, .memory_trim = bp_memory_trim, .memory_stats = bp_memory_stats,         \
    .stream_create = bp_stream_create, .stream_destroy = bp_stream_destroy,                               \
    .stream_synchronize = bp_stream_synchronize, .event_create = bp_event_create,                         \
    .event_destroy = bp_event_destroy, .event_record = bp_event_record,                                   \
    .stream_wait_event = bp_stream_wait_event, .event_synchronize = bp_event_synchronize,                 \
    .event_query = bp_event_query, .event_elapsed = NULL, .extensions = (EXTENSIONS)                       \
  }

/* ---- for the plugins' own code ------------------------------------------------ */

/* The plugin's name (bp_table.name). */
const char* bp_name(void);
/* (Errors: tpc_fail of test_plugin_common.h.) */
/* Writes to the host's logger "strata.<name>". */
void bp_log(strata_log_level level, const char* message);

/* An unsigned integer option "key": N of the options JSON, or `fallback`
 * when absent. A minimal reader: it finds the quoted key and reads the
 * number after the colon. */
uint64_t bp_option_u64(const char* options_json, const char* key, uint64_t fallback);

/* The kind of the kernel entry a call came through (its user_data), or
 * BP_KIND_COUNT when the call is not one of ours. */
bp_kind bp_kind_of(const strata_kernel_call* call);
/* Checks a call of `kind` (struct sizes, state, device, op, arity, every
 * descriptor: dtype and bounds within its buffer) without touching data. */
strata_status bp_check_call(const strata_kernel_call* call, bp_kind kind);
/* Checks and computes a call of a kind the common code computes. */
strata_status bp_compute(const strata_kernel_call* call);
/* A plugin's kernel that computes `own` itself: calls of that kind are
 * checked and handed to `own_fn`, every other kind to bp_compute. */
strata_status bp_compute_or(const strata_kernel_call* call, bp_kind own, strata_kernel_fn own_fn);

/* Buffers: the block behind a handle (NULL if it is none of ours), and
 * typed element access by (tensor, row-major element index). */
void* bp_buffer_data(strata_buffer buffer, size_t* bytes);
/* Element offset (from the buffer's start) of t's i-th row-major element
 * (the element count is tpc_numel's). */
int64_t bp_element(const strata_tensor* t, int64_t i);
float* bp_f32(const strata_tensor* t);     /* the buffer's elements as f32 */
int64_t* bp_i64(const strata_tensor* t);   /* ... as i64 */

/* An integer attribute (INT) `name` of the call, or `fallback`. */
int64_t bp_attr_int(const strata_kernel_call* call, const char* name, int64_t fallback);

#endif /* STRATA_BEHAVIOUR_COMMON_H */
