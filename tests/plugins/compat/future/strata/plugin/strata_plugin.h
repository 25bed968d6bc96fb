/*
 * TEST COPY — tests/plugins/compat/future: the 2.0 header as a hypothetical
 * future minor, ABI 2.8, would look (with 2.1's one addition,
 * strata_plugin_api.probe_environment, and 2.2's,
 * strata_kernel_call.attr_missing, in their places: a minor keeps every
 * field of the minors before it). Only the test plugin "minifuture" is
 * built against it (placed first on its include path). Changes from 2.0,
 * all marked "ABI 2.8 (test header)":
 *  - STRATA_ABI_MINOR 8;
 *  - every struct gets two trailing fields (future_a, future_b); the plugin
 *    table also a function pointer (future_call), the host services one
 *    (future_service). strata_extension and the extension structs are left
 *    alone: every extension embeds strata_extension by value as its first
 *    member, so it cannot grow without moving the extension's fields (they
 *    are versioned by their own `version` instead);
 *  - new enum values: STRATA_ERROR_FUTURE, STRATA_F4_E2M1 (DTYPE_COUNT 14),
 *    STRATA_DEVICE_FUTURE, STRATA_ATTR_FUTURE, flag STRATA_DEVICE_FUTURE_FLAG.
 * The *_MIN_SIZE macros are unchanged: what is required never changes
 * within a major.
 */
/*
 * strata_plugin.h — the Strata plugin ABI, version 2.0.
 *
 * This C99 header is the whole contract between the Strata core ("the host")
 * and a backend plugin. A plugin is a shared library named
 * `libstrata_plugin_<name>.so` exporting one C symbol,
 * STRATA_PLUGIN_ENTRY_SYMBOL, that returns a `strata_plugin_api` table.
 * docs/writing-a-backend.md walks through writing one; docs/abi-changelog.md
 * records every change of this file by version.
 *
 * 1. Compatibility
 * ----------------
 *  - Every struct that crosses the boundary begins with `size_t struct_size`,
 *    set by whoever fills it to the size of the struct as *it* was compiled
 *    (use the STRATA_*_SIZE macros or sizeof).
 *  - A reader first checks `struct_size >= STRATA_<STRUCT>_MIN_SIZE` (the
 *    size up to the struct's last *required* field) and refuses the struct
 *    with a message otherwise. Fields after that are optional: it reads them
 *    only when STRATA_HAS_FIELD says they lie inside the writer's
 *    `struct_size`, and treats them as absent (0 / NULL) when they do not.
 *    Fields a later minor appends are optional in this sense by definition.
 *  - Arrays of structs are always passed as arrays of *pointers*
 *    (`const strata_tensor* const* inputs`), so nobody ever indexes an array
 *    by its own sizeof of the element.
 *  - STRATA_ABI_MAJOR must match exactly; the host refuses another major and
 *    names both versions. A different minor on either side works: a minor
 *    only appends fields to structs (never functions to the table: every
 *    call takes one argument struct, PJRT's style), appends enum values, and
 *    adds named extensions (section 9).
 *
 * 2. Errors
 * ---------
 * Calls return a `strata_status`; on failure the plugin writes a NUL-
 * terminated message into the `strata_error` of the argument struct
 * (strata::plugin::fail() in strata_plugin.hpp does it). Nothing may throw or
 * longjmp across this boundary. Name what failed: op, dtypes, shapes, device.
 *
 * An asynchronous device may report a kernel's failure (an out-of-range
 * index, an integer division by zero) later, at the next synchronisation
 * point (stream_synchronize, event_synchronize, a synchronous copy to the
 * host), with STRATA_ERROR_DEFERRED and a message that names the failed op,
 * as CUDA's device-side asserts do. The device keeps working. A device that
 * can no longer work returns STRATA_ERROR_DEVICE_LOST from any call: the host
 * marks it lost for good (later work on it fails at once, naming the device
 * and this first message) and other devices carry on.
 *
 * 3. Threading
 * ------------
 *  - `probe` and `init` are called once, from one thread. `shutdown` is
 *    called once for every plugin whose `init` succeeded (also when the host
 *    then refuses the plugin or prefers another build of it).
 *  - Calls that name a stream — kernels, copies, alloc/free, event_record,
 *    stream_wait_event — are issued for one stream by one thread at a time:
 *    the host holds a lock per stream around each of them. A kernel calling
 *    the host's `workspace` service runs under that lock. A device whose
 *    props set STRATA_DEVICE_FREE_THREADED declares every entry point safe
 *    to call concurrently (a CPU backend whose kernels share nothing), and
 *    the host then takes no lock for it.
 *  - Everything else (device_props, memory_info, synchronisation, event
 *    queries, get_kernels) may be called from any thread at any time and
 *    must be thread-safe.
 *  - A plugin is never unloaded while the process runs; `shutdown` must
 *    release device resources but must not assume unloading follows.
 *
 * 4. Memory
 * ---------
 * Memory is stream-ordered. `alloc` and `free` name a stream: a buffer may be
 * used by work on that stream as soon as `alloc` returns, and `free` returns
 * it once the work queued on that stream before the `free` is done (the
 * plugin may recycle it for later work on the same stream at once). The host
 * keeps a caching allocator on top: it tags each cached block with the stream
 * that last used it and hands it to another stream only after an event
 * recorded on that stream has completed. A plugin that caches memory itself
 * sets STRATA_DEVICE_CACHES_MEMORY and the host then passes allocations
 * straight through, so memory is never cached twice.
 *
 * Buffers are opaque handles (a raw pointer for host-memory backends, an
 * object for Vulkan). Tensors name memory as (buffer, element offset). The
 * host never dereferences a device buffer; it moves bytes with `copy`. Memory
 * kinds: device memory and pinned host memory (host-addressable, for
 * asynchronous copies). `memory_info` reports free/total bytes, `memory_trim`
 * returns cached memory to the driver, `memory_stats` reports the plugin's
 * own counters.
 *
 * 5. Kernels
 * ----------
 * A plugin lists kernels per device as entries
 *   (namespaced op name, op version, dtype signature, flags) -> fn + user_data.
 * Op names are namespaced: the core's ops are "strata::<op>" (constants in
 * strata/plugin/strata_ops.h, contracts in docs/ops.md); a vendor's own ops
 * are "<plugin name>::<op>" and are registered through the host services
 * (section 8). The signature lists input dtypes, "->", output dtypes:
 * "f32,f32->f32". The host allocates outputs (contiguous unless the op's
 * contract says otherwise) before calling; kernels never allocate tensors the
 * host sees, but may ask for scratch memory through `call->workspace`.
 *
 * 6. Random numbers
 * -----------------
 * strata::random_uniform, strata::random_normal and strata::bernoulli are
 * counter-based Philox4x32-10 primitives with "seed" and "offset"
 * attributes; docs/ops.md specifies them bit for bit so every backend gives
 * the same numbers for one seed.
 */
#ifndef STRATA_PLUGIN_H
#define STRATA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_ABI_MAJOR 2
#define STRATA_ABI_MINOR 8

/** The one symbol each plugin exports (type: strata_plugin_entry_fn). */
#define STRATA_PLUGIN_ENTRY_SYMBOL "strata_plugin_entry"

#if defined(_WIN32)
#define STRATA_PLUGIN_EXPORT __declspec(dllexport)
#else
#define STRATA_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/** Size of `type` up to and including `field`. */
#define STRATA_SIZE_UP_TO(type, field) (offsetof(type, field) + sizeof(((type*)0)->field))
/** Whether the struct behind `ptr` (of C type `type`) has `field`, judged by
 *  its writer's struct_size. */
#define STRATA_HAS_FIELD(ptr, type, field) ((ptr)->struct_size >= STRATA_SIZE_UP_TO(type, field))

/* ------------------------------------------------------------------------ */
/* Status and errors                                                         */
/* ------------------------------------------------------------------------ */

typedef enum strata_status {
  STRATA_OK = 0,
  STRATA_ERROR_INVALID_ARGUMENT = 1, /* bad descriptor, attribute, index    */
  STRATA_ERROR_OUT_OF_MEMORY = 2,    /* allocation or workspace failed      */
  STRATA_ERROR_UNSUPPORTED = 3,      /* this op/dtype/shape is not handled:  */
                                     /* the host applies its fallback policy */
  STRATA_ERROR_DEVICE = 4,           /* driver or device failure            */
  STRATA_ERROR_NO_DEVICE = 5,        /* init/probe: no usable device/driver  */
  STRATA_ERROR_INTERNAL = 6,         /* anything else                       */
  STRATA_ERROR_DEFERRED = 7,         /* at a sync point: earlier async work */
                                     /* failed; the message names its op    */
  STRATA_ERROR_DEVICE_LOST = 8,      /* sticky: the device is unusable      */
  STRATA_ERROR_FUTURE = 9            /* ABI 2.8 (test header)               */
} strata_status;

#define STRATA_ERROR_MESSAGE_CAPACITY 512

/** Filled by the plugin when a call fails. Allocated by the host. */
typedef struct strata_error {
  size_t struct_size;
  char message[STRATA_ERROR_MESSAGE_CAPACITY];
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_error;
#define STRATA_ERROR_MIN_SIZE STRATA_SIZE_UP_TO(strata_error, message)

/* ------------------------------------------------------------------------ */
/* Data types                                                                */
/* ------------------------------------------------------------------------ */

/** Element types. Values are part of the ABI; 7..11 are reserved now so that
 *  plugins and host agree on them before the core implements them. */
typedef enum strata_dtype {
  STRATA_F32 = 0,
  STRATA_F64 = 1,
  STRATA_F16 = 2,  /* IEEE 754 binary16 */
  STRATA_BF16 = 3, /* bfloat16 */
  STRATA_I32 = 4,
  STRATA_I64 = 5,
  STRATA_BOOL = 6,     /* one byte, 0 or 1 */
  STRATA_I8 = 7,       /* reserved */
  STRATA_U8 = 8,       /* reserved */
  STRATA_F8_E4M3 = 9,  /* reserved: OCP fp8 e4m3fn */
  STRATA_F8_E5M2 = 10, /* reserved: OCP fp8 e5m2 */
  STRATA_C64 = 11,     /* complex of two f32 */
  STRATA_C128 = 12,    /* complex of two f64 (2.0, 2026-11-27) */
  STRATA_F4_E2M1 = 13, /* ABI 2.8 (test header) */
  STRATA_DTYPE_COUNT = 14
} strata_dtype;

/** Bit for a dtype in 64-bit dtype masks. */
#define STRATA_DTYPE_BIT(dt) (UINT64_C(1) << (unsigned)(dt))

/* ------------------------------------------------------------------------ */
/* Opaque handles (owned by the plugin unless stated)                        */
/* ------------------------------------------------------------------------ */

typedef struct strata_plugin_state_t* strata_plugin_state; /* from init      */
typedef struct strata_buffer_t* strata_buffer;             /* memory         */
typedef struct strata_stream_t* strata_stream;             /* queue; NULL =  */
                                                           /* default stream */
typedef struct strata_event_t* strata_event;
typedef struct strata_value_t* strata_value; /* a host tensor (section 8)    */

/* ------------------------------------------------------------------------ */
/* Devices                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum strata_device_type {
  STRATA_DEVICE_CPU = 0,        /* includes software rasterisers (llvmpipe) */
  STRATA_DEVICE_GPU = 1,        /* discrete GPU                             */
  STRATA_DEVICE_IGPU = 2,       /* integrated GPU sharing host memory       */
  STRATA_DEVICE_ACCELERATOR = 3, /* anything else (NPU, TPU-like, FPGA, ...) */
  STRATA_DEVICE_FUTURE = 4       /* ABI 2.8 (test header) */
} strata_device_type;

/* strata_device_props.flags */
#define STRATA_DEVICE_HAS_STREAMS 0x1u    /* streams and events are real     */
#define STRATA_DEVICE_UNIFIED_MEMORY 0x2u /* device memory is host memory    */
#define STRATA_DEVICE_CACHES_MEMORY 0x4u  /* the plugin caches allocations:  */
                                          /* the host must not cache again   */
#define STRATA_DEVICE_FREE_THREADED 0x8u  /* every entry point is safe to    */
                                          /* call concurrently (section 3)   */
#define STRATA_DEVICE_HAS_UUID 0x10u      /* `uuid` identifies the hardware  */
#define STRATA_DEVICE_STAGE_PINNED 0x20u  /* stage host-to-device copies:   */
                                          /* see section 4                   */
#define STRATA_DEVICE_FUTURE_FLAG 0x40u   /* ABI 2.8 (test header)           */

typedef struct strata_device_props {
  size_t struct_size;
  char name[128];              /* e.g. "NVIDIA H100 80GB HBM3"             */
  strata_device_type type;
  uint32_t flags;              /* STRATA_DEVICE_*                          */
  uint64_t memory_bytes;       /* total memory usable by tensors           */
  uint64_t dtype_mask;         /* STRATA_DTYPE_BIT of each storable dtype  */
  uint64_t compute_dtype_mask; /* dtypes kernels compute in natively       */
  char compute_capability[32]; /* "9.0", "avx512_core", "vulkan 1.3", ...   */
  /* Optional from here. Identity, so that one physical device seen through two plugins (CUDA and
   * Vulkan on one GPU) is recognised: a UUID (flag HAS_UUID) and/or a PCI
   * bus id "0000:65:00.0" (empty when none). */
  uint8_t uuid[16];
  char pci_bus_id[32];
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_device_props;
#define STRATA_DEVICE_PROPS_MIN_SIZE STRATA_SIZE_UP_TO(strata_device_props, compute_capability)

/* ------------------------------------------------------------------------ */
/* Tensor descriptors and attributes handed to kernels                       */
/* ------------------------------------------------------------------------ */

#define STRATA_MAX_RANK 8

/**
 * A strided view of device memory. Element (i0, ..., i{rank-1}) lives at
 * element index `offset + sum_k ik * strides[k]` of `buffer`. Strides are in
 * elements and may be 0 (broadcast) but never negative. rank 0 is a scalar.
 */
typedef struct strata_tensor {
  size_t struct_size;
  strata_buffer buffer;
  int64_t offset; /* in elements */
  strata_dtype dtype;
  int32_t rank;
  int64_t shape[STRATA_MAX_RANK];
  int64_t strides[STRATA_MAX_RANK];
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_tensor;
#define STRATA_TENSOR_MIN_SIZE STRATA_SIZE_UP_TO(strata_tensor, strides)

typedef enum strata_attr_kind {
  STRATA_ATTR_INT = 0,    /* i                                              */
  STRATA_ATTR_FLOAT = 1,  /* f                                              */
  STRATA_ATTR_INTS = 2,   /* ints[0..count)                                 */
  STRATA_ATTR_BOOL = 3,   /* i: 0 or 1                                      */
  STRATA_ATTR_STRING = 4, /* string (NUL-terminated), count = its length    */
  STRATA_ATTR_FLOATS = 5, /* floats[0..count)                               */
  STRATA_ATTR_DTYPE = 6,  /* i: a strata_dtype                              */
  STRATA_ATTR_SCALAR = 7, /* exact scalar: scalar_dtype says which field    */
                          /* holds it (I64/BOOL: i; F64: f), never rounded   */
  STRATA_ATTR_FUTURE = 8  /* ABI 2.8 (test header)                           */
} strata_attr_kind;

/** One named attribute, e.g. {"dim", INT, .i = 1}. */
typedef struct strata_attr {
  size_t struct_size;
  const char* name;
  strata_attr_kind kind;
  strata_dtype scalar_dtype; /* SCALAR only: STRATA_I64, STRATA_F64, STRATA_BOOL */
  int64_t i;
  double f;
  const int64_t* ints;
  const double* floats;
  const char* string;
  int64_t count;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_attr;
#define STRATA_ATTR_MIN_SIZE STRATA_SIZE_UP_TO(strata_attr, count)

/* ------------------------------------------------------------------------ */
/* Host services                                                             */
/* ------------------------------------------------------------------------ */

typedef enum strata_log_level {
  STRATA_LOG_TRACE = 0,
  STRATA_LOG_DEBUG = 1,
  STRATA_LOG_INFO = 2,
  STRATA_LOG_WARN = 3,
  STRATA_LOG_ERROR = 4
} strata_log_level;

struct strata_kernel_call;
struct strata_op_schema;
struct strata_call_op_args;
struct strata_kernel_registration;

/** `call->workspace(&args)`: scratch memory for the running kernel. */
typedef struct strata_workspace_args {
  size_t struct_size;
  const struct strata_kernel_call* call; /* the call being run             */
  size_t bytes;                          /* in: at least this many bytes    */
  strata_buffer buffer;                  /* out: valid on call->stream      */
                                         /* until the kernel returns        */
  strata_error* error;                   /* out: why not (OUT_OF_MEMORY)    */
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_workspace_args;
#define STRATA_WORKSPACE_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_workspace_args, error)

/**
 * What the host offers a plugin, passed to `init` and to every kernel. Every
 * service is thread-safe. Functions past the writer's struct_size are absent.
 */
typedef struct strata_host_api {
  size_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  /** Writes to the host's logger "strata.<plugin_name>". */
  void (*log)(strata_log_level level, const char* plugin_name, const char* message);
  /** Defines a new op "<plugin name>::<op>" (section 8). Call from `init`. */
  strata_status (*register_op)(const struct strata_op_schema* schema, strata_error* error);
  /** Runs an op on host values, recorded for differentiation (section 8). */
  strata_status (*call_op)(struct strata_call_op_args* args);
  /** Adds kernels for the devices of another plugin ("cpu", "cuda"), e.g.
   *  a custom-op library's kernels for its own op (section 8). */
  strata_status (*register_kernels)(const struct strata_kernel_registration* registration,
                                    strata_error* error);
  /** The extension `name` (at least `min_version`) of the plugin serving
   *  devices of `plugin_name`, or NULL: how a custom op reaches another
   *  plugin's native handles (section 9). */
  const struct strata_extension* (*find_extension)(const char* plugin_name, const char* name,
                                                   uint32_t min_version);
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
  void (*future_service)(const char* plugin_name); /* ABI 2.8 (test header) */
} strata_host_api;
#define STRATA_HOST_API_MIN_SIZE STRATA_SIZE_UP_TO(strata_host_api, find_extension)

/* ------------------------------------------------------------------------ */
/* Kernels                                                                   */
/* ------------------------------------------------------------------------ */

/** Everything one kernel invocation receives (one argument struct). */
typedef struct strata_kernel_call {
  size_t struct_size;
  const char* op;       /* "strata::add"                                  */
  uint32_t op_version;  /* the contract version the host calls it with    */
  strata_plugin_state state; /* of the plugin whose device runs it        */
  int32_t device;       /* device index within that plugin                */
  strata_stream stream; /* NULL: the device's default stream              */
  void* user_data;      /* of the kernel entry                            */
  const strata_tensor* const* inputs;
  int32_t n_inputs;
  const strata_tensor* const* outputs;
  int32_t n_outputs;
  const strata_attr* const* attrs; /* any number, never truncated         */
  int32_t n_attrs;
  const strata_host_api* host;
  /** Scratch memory on `stream`, counted against the device's memory
   *  limit and released when the kernel returns. */
  strata_status (*workspace)(strata_workspace_args* args);
  void* host_context; /* opaque to the plugin: the host's, for workspace  */
  strata_error* error;
  void (*attr_missing)(const struct strata_kernel_call* call, const char* name); /* ABI 2.2 */
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_kernel_call;
#define STRATA_KERNEL_CALL_MIN_SIZE STRATA_SIZE_UP_TO(strata_kernel_call, error)

/**
 * A kernel. Return STRATA_ERROR_UNSUPPORTED (with a message) to decline a
 * particular call, e.g. a rank it does not handle: the host then applies the
 * fallback policy exactly as if no kernel were registered.
 */
typedef strata_status (*strata_kernel_fn)(const strata_kernel_call* call);

/* strata_kernel_entry.flags */
#define STRATA_KERNEL_STRIDED_INPUTS 0x1u /* accepts non-contiguous inputs  */
                                          /* (else the host passes compact  */
                                          /* row-major copies)              */

typedef struct strata_kernel_entry {
  size_t struct_size;
  const char* op;        /* "strata::add", "acme::swiglu"                   */
  uint32_t op_version;   /* the op contract it implements (docs/ops.md)     */
  const char* signature; /* "f32,f32->f32"                                  */
  uint32_t flags;        /* STRATA_KERNEL_*                                 */
  strata_kernel_fn fn;
  /* Optional from here. */
  void* user_data;       /* handed back in strata_kernel_call.user_data     */
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_kernel_entry;
#define STRATA_KERNEL_ENTRY_MIN_SIZE STRATA_SIZE_UP_TO(strata_kernel_entry, fn)

/* ------------------------------------------------------------------------ */
/* Plugin-defined ops (host services register_op / call_op)                  */
/* ------------------------------------------------------------------------ */

/** One attribute an op accepts. */
typedef struct strata_attr_schema {
  size_t struct_size;
  const char* name;
  strata_attr_kind kind;
  int32_t required; /* nonzero: a call without it is an error */
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_attr_schema;
#define STRATA_ATTR_SCHEMA_MIN_SIZE STRATA_SIZE_UP_TO(strata_attr_schema, required)

/** Metadata of one tensor for shape rules: no buffer. */
typedef struct strata_tensor_meta {
  size_t struct_size;
  strata_dtype dtype;
  int32_t rank;
  int64_t shape[STRATA_MAX_RANK];
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_tensor_meta;
#define STRATA_TENSOR_META_MIN_SIZE STRATA_SIZE_UP_TO(strata_tensor_meta, shape)

/** Shape and dtype rule: validate inputs, fill outputs[k]'s dtype and shape. */
typedef struct strata_infer_args {
  size_t struct_size;
  const char* op;
  const strata_tensor_meta* const* inputs;
  int32_t n_inputs;
  strata_tensor_meta* const* outputs; /* out: dtype, rank, shape */
  int32_t n_outputs;
  const strata_attr* const* attrs;
  int32_t n_attrs;
  void* user_data; /* of the schema */
  strata_error* error;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_infer_args;
#define STRATA_INFER_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_infer_args, error)

/**
 * A derivative written as calls of other ops. VJP: `seeds` are the output
 * cotangents, fill `results[k]` with the gradient of input k (NULL: zero /
 * not needed). JVP: `seeds` are the input tangents, fill `results[k]` with the
 * tangent of output k. NULL seeds are zero. Values are host tensors: combine
 * them only through `host->call_op`; the results are handed over to the host.
 */
typedef struct strata_derivative_args {
  size_t struct_size;
  const char* op;
  const strata_value* inputs;
  int32_t n_inputs;
  const strata_value* outputs;
  int32_t n_outputs;
  const strata_value* seeds;
  int32_t n_seeds;
  strata_value* results; /* out */
  int32_t n_results;
  const uint8_t* needed; /* VJP: nonzero where the gradient is wanted */
  const strata_attr* const* attrs;
  int32_t n_attrs;
  const strata_host_api* host;
  void* user_data; /* of the schema */
  strata_error* error;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_derivative_args;
#define STRATA_DERIVATIVE_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_derivative_args, error)

typedef strata_status (*strata_infer_fn)(strata_infer_args* args);
typedef strata_status (*strata_derivative_fn)(strata_derivative_args* args);

typedef struct strata_op_schema {
  size_t struct_size;
  const char* name;   /* "<plugin name>::<op>"; the namespace must be the  */
                      /* registering plugin's name                          */
  uint32_t version;   /* contract version (>= 1)                           */
  int32_t n_inputs;   /* 1..4 */
  int32_t n_outputs;  /* 1..2 */
  const strata_attr_schema* const* attrs;
  int32_t n_attrs;
  strata_infer_fn infer;      /* required */
  strata_derivative_fn vjp;   /* NULL: not differentiable */
  strata_derivative_fn jvp;   /* NULL: no forward mode */
  void* user_data;
  const char* doc;            /* one line for `strata ops` and errors */
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_op_schema;
#define STRATA_OP_SCHEMA_MIN_SIZE STRATA_SIZE_UP_TO(strata_op_schema, doc)

/** `host->call_op`: runs `op` on values; recorded like any op. */
typedef struct strata_call_op_args {
  size_t struct_size;
  const char* op; /* "strata::mul", "acme::swiglu_backward" */
  const strata_value* inputs;
  int32_t n_inputs;
  const strata_attr* const* attrs;
  int32_t n_attrs;
  strata_value* outputs; /* out: n_outputs values owned by the host */
  int32_t n_outputs;     /* capacity of outputs */
  strata_error* error;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_call_op_args;
#define STRATA_CALL_OP_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_call_op_args, error)

/** `host->register_kernels`: kernels for another plugin's devices. */
typedef struct strata_kernel_registration {
  size_t struct_size;
  const char* plugin_name; /* devices of this plugin: "cpu", "cuda" */
  const strata_kernel_entry* const* entries;
  int32_t n_entries;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_kernel_registration;
#define STRATA_KERNEL_REGISTRATION_MIN_SIZE STRATA_SIZE_UP_TO(strata_kernel_registration, n_entries)

/* ------------------------------------------------------------------------ */
/* Argument structs of the table's calls                                     */
/* ------------------------------------------------------------------------ */

/** probe: learn whether the plugin can run here, touching no driver. */
typedef struct strata_probe_args {
  size_t struct_size;
  const char* options_json; /* as for init (e.g. a "loader" path to check) */
  int32_t score;       /* out: 0 = cannot run here; higher wins among     */
                       /* builds of one backend. In-tree: 10 software, 50 */
                       /* CPU, 100 integrated GPU, 200 discrete GPU.      */
  strata_error* error; /* out: why the score is 0                         */
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_probe_args;
#define STRATA_PROBE_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_probe_args, error)

typedef struct strata_init_args {
  size_t struct_size;
  const strata_host_api* host;
  /** This plugin's "options" object from the configuration, as JSON (never
   *  NULL; "{}" when none), plus per-device settings ("threads"). */
  const char* options_json;
  strata_plugin_state state; /* out */
  int32_t device_count;      /* out: devices this plugin serves */
  int32_t score;             /* in: the probe's; out: init may lower it now */
                             /* that it has seen the devices (lavapipe: 10) */
  strata_error* error;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_init_args;
#define STRATA_INIT_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_init_args, error)

/** device_props and get_kernels. */
typedef struct strata_device_args {
  size_t struct_size;
  strata_plugin_state state;
  int32_t device;
  strata_device_props* props; /* device_props: filled; its struct_size on */
                              /* entry is the host's capacity             */
  const strata_kernel_entry* const* entries; /* get_kernels: out, valid   */
  int32_t n_entries;                         /* until the process exits   */
  strata_error* error;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_device_args;
#define STRATA_DEVICE_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_device_args, error)

typedef enum strata_memory_kind {
  STRATA_MEMORY_DEVICE = 0,     /* device memory                            */
  STRATA_MEMORY_PINNED_HOST = 1 /* page-locked host memory: `host_pointer`  */
                                /* is its address; async copies use it      */
} strata_memory_kind;

typedef struct strata_alloc_args {
  size_t struct_size;
  strata_plugin_state state;
  int32_t device;
  strata_memory_kind kind;
  size_t bytes;
  strata_stream stream;  /* the buffer is first used on this stream        */
  strata_buffer buffer;  /* out: alloc; in: free                           */
  void* host_pointer;    /* out (PINNED_HOST): its host address            */
  strata_error* error;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_alloc_args;
#define STRATA_ALLOC_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_alloc_args, error)

typedef enum strata_copy_kind {
  STRATA_COPY_HOST_TO_DEVICE = 0,
  STRATA_COPY_DEVICE_TO_HOST = 1,
  STRATA_COPY_DEVICE_TO_DEVICE = 2 /* within one device; ranges may overlap */
} strata_copy_kind;

/* strata_copy_args.flags */
#define STRATA_COPY_ASYNC 0x1u /* may return before completion; the host  */
                               /* keeps host memory alive until `done`     */
                               /* (or the stream) completes                */

typedef struct strata_copy_args {
  size_t struct_size;
  strata_plugin_state state;
  int32_t device;
  strata_copy_kind kind;
  uint32_t flags;            /* STRATA_COPY_*                                */
  strata_buffer dst;         /* device destination (H2D, D2D)               */
  size_t dst_offset;         /* bytes                                       */
  void* dst_host;            /* host destination (D2H)                      */
  strata_buffer src;         /* device source (D2H, D2D)                    */
  size_t src_offset;         /* bytes                                       */
  const void* src_host;      /* host source (H2D)                           */
  size_t bytes;
  strata_stream stream;
  strata_event done;         /* optional: recorded when the copy completes  */
  strata_error* error;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_copy_args;
#define STRATA_COPY_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_copy_args, error)
/* Without STRATA_COPY_ASYNC a copy is complete when it returns (a D2H copy
 * is a synchronisation point and may report STRATA_ERROR_DEFERRED). */

/* strata_stream_args.flags (event_create) */
#define STRATA_EVENT_TIMING 0x1u /* the event records a timestamp */

/** Streams and events: stream_create/destroy/synchronize, event_create/
 *  destroy/record/synchronize/query/elapsed, stream_wait_event. */
typedef struct strata_stream_args {
  size_t struct_size;
  strata_plugin_state state;
  int32_t device;
  strata_stream stream;  /* in; out for stream_create                      */
  strata_event event;    /* in; out for event_create                       */
  strata_event end;      /* event_elapsed: the later event                 */
  uint32_t flags;        /* event_create: STRATA_EVENT_*                   */
  int32_t complete;      /* out, event_query: 1 when the event completed   */
  double elapsed_ms;     /* out, event_elapsed: end - event                */
  strata_error* error;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_stream_args;
#define STRATA_STREAM_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_stream_args, error)

/** memory_info, memory_trim, memory_stats. */
typedef struct strata_memory_args {
  size_t struct_size;
  strata_plugin_state state;
  int32_t device;
  uint64_t free_bytes;      /* out, memory_info                             */
  uint64_t total_bytes;     /* out, memory_info                             */
  uint64_t bytes_in_use;    /* out, memory_stats: held by live buffers      */
  uint64_t bytes_reserved;  /* out, memory_stats: held from the driver      */
  uint64_t peak_bytes_in_use;  /* out, memory_stats                        */
  uint64_t allocations;     /* out, memory_stats: driver allocations made   */
  strata_error* error;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_memory_args;
#define STRATA_MEMORY_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_memory_args, error)

/* ------------------------------------------------------------------------ */
/* Extensions (section 9)                                                    */
/* ------------------------------------------------------------------------ */

/**
 * Optional capabilities, a linked list hung off the table. Each starts with
 * this header and is identified by a vendor-qualified name and a version;
 * a reader walks the list, matches the name, checks `version` and
 * `struct_size`, and ignores names it does not know.
 */
typedef struct strata_extension {
  size_t struct_size;
  const char* name;  /* "strata.native_handles", "acme.tracing" */
  uint32_t version;  /* of that extension's struct, from 1 */
  const struct strata_extension* next;
} strata_extension;
#define STRATA_EXTENSION_MIN_SIZE STRATA_SIZE_UP_TO(strata_extension, next)

/* -- strata.native_handles v1: interop without private API ----------------- */
#define STRATA_EXT_NATIVE_HANDLES "strata.native_handles"

typedef struct strata_native_args {
  size_t struct_size;
  strata_plugin_state state;
  int32_t device;
  strata_buffer buffer;  /* in, buffer_pointer                            */
  strata_stream stream;  /* in, stream_handle (NULL: default stream)      */
  void* handle;          /* out: a device pointer (e.g. CUdeviceptr, or a */
                         /* host address for CPU), or a native stream     */
                         /* (cudaStream_t, hipStream_t, VkQueue)          */
  const char* api;       /* out: "host", "cuda", "hip", "vulkan", ...     */
  strata_error* error;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_native_args;
#define STRATA_NATIVE_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_native_args, error)

typedef struct strata_ext_native_handles {
  strata_extension base;
  strata_status (*buffer_pointer)(strata_native_args* args);
  strata_status (*stream_handle)(strata_native_args* args);
} strata_ext_native_handles;

/* -- strata.graph_execution v1: a traced graph handed whole to a plugin ----- */
#define STRATA_EXT_GRAPH_EXECUTION "strata.graph_execution"

typedef struct strata_graph_args {
  size_t struct_size;
  strata_plugin_state state;
  int32_t device;
  /** compile: the graph in the "strata-graph" JSON format of
   *  docs/autograd.md (ops, attributes, shapes and dtypes of every value). */
  const char* graph_json;
  void* executable;  /* out of compile; in for execute and destroy */
  const strata_tensor* const* inputs;  /* execute: graph inputs, in order  */
  int32_t n_inputs;
  const strata_tensor* const* outputs; /* execute: allocated by the host    */
  int32_t n_outputs;
  strata_stream stream;
  strata_error* error;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_graph_args;
#define STRATA_GRAPH_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_graph_args, error)

typedef struct strata_ext_graph_execution {
  strata_extension base;
  /** UNSUPPORTED: the host runs the graph op by op instead. */
  strata_status (*compile)(strata_graph_args* args);
  strata_status (*execute)(strata_graph_args* args);
  void (*destroy)(strata_graph_args* args);
} strata_ext_graph_execution;

/* -- strata.collectives v1: data-parallel communication over device buffers */
#define STRATA_EXT_COLLECTIVES "strata.collectives"

typedef enum strata_reduce_op {
  STRATA_REDUCE_SUM = 0,
  STRATA_REDUCE_PRODUCT = 1,
  STRATA_REDUCE_MIN = 2,
  STRATA_REDUCE_MAX = 3,
  STRATA_REDUCE_AVERAGE = 4
} strata_reduce_op;

typedef struct strata_comm_t* strata_comm;

typedef struct strata_collective_args {
  size_t struct_size;
  strata_plugin_state state;
  int32_t device;
  strata_comm comm;          /* out of comm_create; in otherwise          */
  /** comm_create: an id of `id_bytes` bytes that rank 0 made with
   *  comm_unique_id and the host sent to every rank (its TCP store). */
  uint8_t* unique_id;
  size_t id_bytes;
  int32_t rank;
  int32_t world_size;
  const strata_tensor* send; /* all_reduce (in place when send == recv),  */
  const strata_tensor* recv; /* broadcast (root's send), all_gather       */
  strata_reduce_op reduce;
  int32_t root;              /* broadcast                                 */
  strata_stream stream;      /* ordered after prior work on this stream   */
  strata_error* error;
  uint64_t future_a; /* ABI 2.8 (test header) */
  void* future_b;    /* ABI 2.8 (test header) */
} strata_collective_args;
#define STRATA_COLLECTIVE_ARGS_MIN_SIZE STRATA_SIZE_UP_TO(strata_collective_args, error)

typedef struct strata_ext_collectives {
  strata_extension base;
  strata_status (*comm_unique_id)(strata_collective_args* args); /* fills unique_id */
  strata_status (*comm_create)(strata_collective_args* args);
  void (*comm_destroy)(strata_collective_args* args);
  strata_status (*all_reduce)(strata_collective_args* args);
  strata_status (*broadcast)(strata_collective_args* args);
  /** recv holds world_size slices of send's shape along a new dim 0. */
  strata_status (*all_gather)(strata_collective_args* args);
} strata_ext_collectives;

/* ------------------------------------------------------------------------ */
/* The plugin table                                                          */
/* ------------------------------------------------------------------------ */

typedef struct strata_plugin_api {
  size_t struct_size;
  /* -- The manifest: static data the host reads before running any code. -- */
  uint32_t abi_major;       /* STRATA_ABI_MAJOR the plugin was built with    */
  uint32_t abi_minor;       /* STRATA_ABI_MINOR it was built with            */
  uint32_t min_host_minor;  /* the oldest host minor it works with           */
  const char* name;         /* short, lower case: "cpu", "vulkan", "acme";   */
                            /* also the namespace of its own ops             */
  const char* vendor;       /* "Strata project", "ACME Corp."                */
  const char* version;      /* plugin version, free form ("1.2.0")           */

  /* -- Lifecycle. ---------------------------------------------------------- */
  /** Required. Touches no driver: may this build run here, and how well?
   *  Called before `init`, so the host can choose among builds. */
  strata_status (*probe)(strata_probe_args* args);
  /** Required. Opens the driver and devices. STRATA_ERROR_NO_DEVICE (no
   *  driver, no device) is a normal outcome: the host records the message. */
  strata_status (*init)(strata_init_args* args);
  /** Optional. Releases device resources (section 3). */
  void (*shutdown)(strata_plugin_state state);

  /* -- Devices. ------------------------------------------------------------ */
  strata_status (*device_props)(strata_device_args* args);  /* required */
  /** Required. The kernel table of one device. */
  strata_status (*get_kernels)(strata_device_args* args);

  /* -- Memory (section 4). `alloc`, `free`, `copy` are required. ----------- */
  strata_status (*alloc)(strata_alloc_args* args);
  void (*free)(strata_alloc_args* args);
  strata_status (*copy)(strata_copy_args* args);
  /* -- Optional from here: a table may end after `copy`. ------------------- */
  strata_status (*memory_info)(strata_memory_args* args);  /* optional */
  strata_status (*memory_trim)(strata_memory_args* args);  /* optional */
  strata_status (*memory_stats)(strata_memory_args* args); /* optional */

  /* -- Streams and events: required when a device sets HAS_STREAMS; else the
   *    host uses the NULL stream and treats every call as synchronous. ---- */
  strata_status (*stream_create)(strata_stream_args* args);
  void (*stream_destroy)(strata_stream_args* args);
  strata_status (*stream_synchronize)(strata_stream_args* args);
  strata_status (*event_create)(strata_stream_args* args);
  void (*event_destroy)(strata_stream_args* args);
  strata_status (*event_record)(strata_stream_args* args);
  /** Makes `stream` wait for `event` without blocking the host. */
  strata_status (*stream_wait_event)(strata_stream_args* args);
  strata_status (*event_synchronize)(strata_stream_args* args);
  strata_status (*event_query)(strata_stream_args* args);
  strata_status (*event_elapsed)(strata_stream_args* args); /* optional */

  /** Optional capabilities (NULL when none). */
  const strata_extension* extensions;
  /* ABI 2.1: what the future minor keeps of the minors before it. */
  const char* const* probe_environment;
  /* -- ABI 2.8 (test header): appended by a future minor. ------------- */
  uint64_t future_a;
  void* future_b;
  strata_status (*future_call)(strata_probe_args* args);
} strata_plugin_api;
#define STRATA_PLUGIN_API_MIN_SIZE STRATA_SIZE_UP_TO(strata_plugin_api, copy)

/**
 * The entry point: returns the plugin's static table. It must not touch a
 * driver or allocate (the host calls it to read the manifest). The host
 * passes its own ABI version so that a plugin may adapt; returning NULL
 * declines ("the entry returned no table").
 */
typedef const strata_plugin_api* (*strata_plugin_entry_fn)(uint32_t host_abi_major, uint32_t host_abi_minor);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_PLUGIN_H */
