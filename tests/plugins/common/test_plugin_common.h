/* test_plugin_common.h — what the C test plugins share (C99).
 *
 * The test plugins (mini, twin, the refused ones of broken_plugins.c, opslib
 * and the behaviour plugins) are small accelerators written against the SDK
 * header as a third party would. What they have in common is written once
 * here and in test_plugin_common.c, which each of them compiles in
 * (strata_test_plugin(... SOURCES ... ${STRATA_TEST_PLUGIN_COMMON})):
 *
 *  - the error writer (a printf-formatted message into a host-allocated
 *    strata_error) and the entry point;
 *  - the plugin state (a magic while initialised, the host services) and
 *    its logger;
 *  - a memory space of its own: a buffer is a handle to a malloc'd block the
 *    core cannot read, tagged with the plugin's magic; allocation, release
 *    and a synchronous, bounds-checked copy;
 *  - the checks of device arguments and of the device props the host hands
 *    over, and the publishing of props within the host's capacity;
 *  - tensor descriptors: size, rank, offset, shape and stride checks, the
 *    element count and row-major element offsets; fill's "value".
 *
 * It uses only what every ABI 2.x header has (the SDK's and both headers of
 * tests/plugins/compat, which mini is also built against): the *_MIN_SIZE
 * parts of the structs and nothing behind STRATA_HAS_FIELD but host->log.
 * Messages that name the plugin take its name as `name` and start with it.
 */
#ifndef STRATA_TEST_PLUGIN_COMMON_H
#define STRATA_TEST_PLUGIN_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <strata/plugin/strata_plugin.h>

#if defined(__GNUC__)
#define TPC_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TPC_PRINTF(f, a)
#endif

/* Writes a message into a host-allocated strata_error, when it is one, and
 * returns `status`. */
strata_status TPC_PRINTF(3, 4) tpc_fail(strata_error* error, strata_status status, const char* format, ...);

/* The plugin's entry point, returning TABLE (a `const strata_plugin_api*`)
 * whatever the host's version: the host compares the majors and names both
 * when they differ, which a NULL cannot do. At file scope, with no `;`. */
#define TPC_PLUGIN_ENTRY(TABLE)                                                                \
  STRATA_PLUGIN_EXPORT const strata_plugin_api* strata_plugin_entry(uint32_t host_abi_major,   \
                                                                    uint32_t host_abi_minor) { \
    (void)host_abi_major;                                                                      \
    (void)host_abi_minor;                                                                      \
    return (TABLE);                                                                            \
  }

/* ---- state ------------------------------------------------------------------------ */

/* A plugin's state: `magic` is the plugin's magic while it is initialised
 * (0 otherwise); `host` the host services init was given. */
typedef struct tpc_state {
  uint32_t magic;
  const strata_host_api* host;
} tpc_state;

/* Whether `s` is `state` and `state` is initialised with `magic`. */
int tpc_state_ok(const tpc_state* state, uint32_t magic, strata_plugin_state s);
/* Writes to the host's logger (when it has one) as `name`. */
void tpc_log(const tpc_state* state, const char* name, strata_log_level level, const char* message);

/* The checks of a device call's arguments: the struct's size, the state
 * ("<name>: <what>: not my state") and device 0 ("... no device D (one
 * device)"). */
strata_status tpc_device_args_ok(strata_device_args* args, const tpc_state* state, uint32_t magic, const char* name,
                                 const char* what);
/* The same for a plugin of `devices` devices (0 .. devices - 1). */
strata_status tpc_device_args_ok_of(strata_device_args* args, const tpc_state* state, uint32_t magic,
                                    const char* name, const char* what, int32_t devices);

/* ---- device props -------------------------------------------------------------------- */

/* Whether the host's props hold at least the required fields
 * ("<name>: device_props: props of N bytes, need M"). */
strata_status tpc_props_ok(strata_device_args* args, const char* name);
/* Clears `p` and sets its struct_size and the fields every plugin sets;
 * the caller writes the name and compute capability. */
void tpc_props_init(strata_device_props* p, strata_device_type type, uint32_t flags, uint64_t memory_bytes,
                    uint64_t dtype_mask, uint64_t compute_dtype_mask);
/* Copies `p` into the host's props, never more than their capacity (their
 * struct_size on entry), and sets their struct_size to what was written,
 * which it returns. */
size_t tpc_publish_props(strata_device_props* out, const strata_device_props* p);

/* ---- memory ------------------------------------------------------------------------- */

/* A buffer: a handle to a malloc'd block, tagged with the plugin's magic. */
typedef struct tpc_buffer {
  uint32_t magic;
  size_t bytes;
  unsigned char* data;
} tpc_buffer;

/* The buffer behind a handle, or NULL when it is none of `magic`'s. */
tpc_buffer* tpc_buffer_of(strata_buffer buffer, uint32_t magic);
/* A buffer of `bytes` zeroed bytes, or NULL when out of memory. */
tpc_buffer* tpc_buffer_new(size_t bytes, uint32_t magic);
/* Releases a buffer of `magic` (anything else is left alone); returns its
 * size (0 for anything else). */
size_t tpc_buffer_delete(strata_buffer buffer, uint32_t magic);
/* Whether [offset, offset + n) lies inside a buffer of `magic`. */
int tpc_buffer_fits(strata_buffer buffer, uint32_t magic, size_t offset, size_t n);

/* The allocation of an alloc call (whose state and device the caller has
 * checked): a DEVICE or PINNED_HOST block into args->buffer (host_pointer
 * for pinned memory). Another kind: STRATA_ERROR_UNSUPPORTED, "<name>:
 * alloc: memory kind K". STRATA_ERROR_OUT_OF_MEMORY with no message: the
 * caller writes it. */
strata_status tpc_alloc(strata_alloc_args* args, uint32_t magic, const char* name);
/* The release of a free call; returns the bytes released. */
size_t tpc_free(strata_alloc_args* args, uint32_t magic);
/* A copy call (whose state and device the caller has checked), done at
 * once (STRATA_COPY_ASYNC may complete so), every buffer range checked
 * ("<name>: copy of N bytes at O outside the source buffer (B bytes)").
 * `sync_point`, when not NULL, runs before a synchronous device-to-host
 * copy reads: a failure it returns is reported instead of the data. */
strata_status tpc_copy(strata_copy_args* args, uint32_t magic, const char* name,
                       strata_status (*sync_point)(strata_error* error));

/* ---- tensors ----------------------------------------------------------------------- */

int64_t tpc_numel(const strata_tensor* t);
/* Element offset (relative to t->offset) of the i-th row-major element. */
int64_t tpc_strided_offset(const strata_tensor* t, int64_t i);
/* Whether a descriptor holds the required fields ("<name>: <op>: <role>
 * descriptor of N bytes, need M"). */
strata_status tpc_check_descriptor(const strata_kernel_call* call, const strata_tensor* t, const char* name,
                                   const char* role);
/* Rank, offset, and each dim's shape and stride of a descriptor; `*last`:
 * the offset (relative to t->offset) of its last element. */
strata_status tpc_check_extent(const strata_kernel_call* call, const strata_tensor* t, const char* name,
                               const char* role, int64_t* last);
/* fill's "value": an exact SCALAR (I64/BOOL in i, F64 in f); FLOAT, INT and
 * BOOL accepted too. */
strata_status tpc_fill_value(const strata_kernel_call* call, const char* name, double* value);

#endif /* STRATA_TEST_PLUGIN_COMMON_H */
