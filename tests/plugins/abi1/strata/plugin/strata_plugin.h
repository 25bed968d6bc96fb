/*
 * strata_plugin.h — the Strata plugin ABI, version 1.0.
 *
 * This C99 header is the whole contract between the Strata core and a backend
 * plugin. A plugin is a shared library named `libstrata_plugin_<name>.so` that
 * exports one C symbol, STRATA_PLUGIN_ENTRY_SYMBOL, returning a pointer to a
 * `strata_plugin_api` table. Everything else is reached through that table.
 *
 * Compatibility rules
 * -------------------
 *  - Every struct that crosses the boundary begins with `size_t struct_size`,
 *    set by whoever fills the struct to `sizeof` of the struct as *it* was
 *    compiled. A reader only touches fields that lie entirely inside
 *    `struct_size`; fields beyond it are treated as absent (NULL / 0).
 *  - STRATA_ABI_MAJOR must match exactly: the core refuses (and logs) a plugin
 *    with another major and keeps loading the others.
 *  - A different STRATA_ABI_MINOR on either side works. New minors only append
 *    fields to the end of structs and new entries to the end of tables.
 *  - Optional function pointers may be NULL; the core then uses a documented
 *    default (see each field).
 *
 * Errors
 * ------
 * Functions return a `strata_status`. On failure the plugin writes a
 * human-readable, NUL-terminated message into the `strata_error` the core
 * passed (use strata_error_set() in plugin/strata_plugin.hpp, or snprintf into
 * `message`). Nothing may throw or longjmp across this boundary.
 *
 * Threading and lifetime
 * ----------------------
 *  - `init` is called once. All other entry points may be called from several
 *    threads at once; the core serialises nothing except what is stated here.
 *    Kernels on one stream are issued by one thread at a time.
 *  - A plugin is never unloaded while the process runs. `shutdown`, when
 *    present, is called at process exit before static destruction of the core;
 *    it must release device resources but must not assume unloading follows.
 *
 * Memory model
 * ------------
 * Device memory is opaque to the core: `alloc` returns a `strata_buffer`
 * handle (a raw pointer for host-memory backends, an object for APIs such as
 * Vulkan). Tensors name memory as (buffer, element offset). The core never
 * dereferences a buffer; it moves bytes with the copy functions. The core keeps
 * a caching allocator on top of `alloc`/`free`, so plugins may implement
 * them plainly.
 *
 * Kernels
 * -------
 * A plugin lists kernels as (op name, dtype signature, flags, function). Op
 * names and their operand/attribute conventions are specified in
 * docs/ops.md of the Strata source tree; the signature string lists input
 * dtypes, then "->", then output dtypes, e.g. "f32,f32->f32" or "f32->bool".
 * Output tensors are always allocated by the core (contiguous unless an op's
 * contract says otherwise) before the kernel runs; kernels never allocate
 * tensors the core sees.
 */
#ifndef STRATA_PLUGIN_H
#define STRATA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_ABI_MAJOR 1
#define STRATA_ABI_MINOR 0

/** The one symbol each plugin exports (type: strata_plugin_entry_fn). */
#define STRATA_PLUGIN_ENTRY_SYMBOL "strata_plugin_entry"

#if defined(_WIN32)
#define STRATA_PLUGIN_EXPORT __declspec(dllexport)
#else
#define STRATA_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------ */
/* Status and errors                                                         */
/* ------------------------------------------------------------------------ */

typedef enum strata_status {
  STRATA_OK = 0,
  STRATA_ERROR_INVALID_ARGUMENT = 1, /* bad descriptor, attribute, index   */
  STRATA_ERROR_OUT_OF_MEMORY = 2,    /* allocation failed                   */
  STRATA_ERROR_UNSUPPORTED = 3,      /* this op/dtype/shape is not handled:  */
                                     /* the core applies its fallback policy */
  STRATA_ERROR_DEVICE = 4,           /* driver or device failure            */
  STRATA_ERROR_NO_DEVICE = 5,        /* init: no usable device / driver     */
  STRATA_ERROR_INTERNAL = 6          /* anything else                       */
} strata_status;

#define STRATA_ERROR_MESSAGE_CAPACITY 512

/** Filled by the plugin when a call fails. Allocated by the core. */
typedef struct strata_error {
  size_t struct_size;
  char message[STRATA_ERROR_MESSAGE_CAPACITY];
} strata_error;

/* ------------------------------------------------------------------------ */
/* Data types and devices                                                    */
/* ------------------------------------------------------------------------ */

/** Element types. The numeric values are part of the ABI. */
typedef enum strata_dtype {
  STRATA_F32 = 0,
  STRATA_F64 = 1,
  STRATA_F16 = 2,  /* IEEE 754 binary16 */
  STRATA_BF16 = 3, /* bfloat16 */
  STRATA_I32 = 4,
  STRATA_I64 = 5,
  STRATA_BOOL = 6, /* one byte, 0 or 1 */
  STRATA_DTYPE_COUNT = 7
} strata_dtype;

/** Bit for a dtype in strata_device_props.dtype_mask. */
#define STRATA_DTYPE_BIT(dt) (1u << (unsigned)(dt))

typedef enum strata_device_type {
  STRATA_DEVICE_CPU = 0,         /* includes software rasterisers (llvmpipe) */
  STRATA_DEVICE_GPU = 1,         /* discrete GPU                              */
  STRATA_DEVICE_IGPU = 2,        /* integrated GPU sharing host memory        */
  STRATA_DEVICE_ACCELERATOR = 3  /* anything else (NPU, TPU-like, FPGA, ...)  */
} strata_device_type;

typedef struct strata_device_props {
  size_t struct_size;
  char name[128];              /* e.g. "Intel Xeon (oneDNN avx512_core)" */
  strata_device_type type;
  uint64_t memory_bytes;       /* total memory usable by tensors          */
  uint32_t dtype_mask;         /* STRATA_DTYPE_BIT of each storable dtype */
  uint32_t compute_dtype_mask; /* dtypes kernels compute in natively       */
  char compute_capability[32]; /* "8.9", "avx512_core", "vulkan 1.3", ... */
  int32_t has_streams;         /* nonzero: stream_* and event_* usable    */
  int32_t unified_memory;      /* nonzero: device memory is host memory   */
} strata_device_props;

/* ------------------------------------------------------------------------ */
/* Opaque handles (owned by the plugin)                                      */
/* ------------------------------------------------------------------------ */

typedef struct strata_plugin_state_t* strata_plugin_state; /* from init      */
typedef struct strata_buffer_t* strata_buffer;             /* device memory  */
typedef struct strata_stream_t* strata_stream;             /* queue; NULL =  */
                                                           /* default stream */
typedef struct strata_event_t* strata_event;

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
} strata_tensor;

typedef enum strata_attr_kind {
  STRATA_ATTR_INT = 0,
  STRATA_ATTR_FLOAT = 1,
  STRATA_ATTR_INTS = 2,
  STRATA_ATTR_BOOL = 3
} strata_attr_kind;

/** One named attribute, e.g. {"dim", INT, .i = 1}. */
typedef struct strata_attr {
  const char* name;
  strata_attr_kind kind;
  int64_t i;           /* INT and BOOL */
  double f;            /* FLOAT        */
  const int64_t* ints; /* INTS         */
  int32_t n_ints;
} strata_attr;

typedef struct strata_attrs {
  size_t struct_size;
  const strata_attr* items;
  int32_t count;
} strata_attrs;

/** Everything a kernel receives besides its tensors. */
typedef struct strata_kernel_context {
  size_t struct_size;
  strata_plugin_state state;
  int32_t device_index;
  strata_stream stream; /* may be NULL: the device's default stream */
} strata_kernel_context;

/**
 * A kernel. `inputs` and `outputs` are descriptors as specified for the op in
 * docs/ops.md. Return STRATA_ERROR_UNSUPPORTED (with a message) to decline a
 * particular call, e.g. a rank the kernel does not handle; the core then
 * applies the fallback policy exactly as if no kernel were registered.
 */
typedef strata_status (*strata_kernel_fn)(const strata_kernel_context* ctx,
                                          const strata_tensor* inputs,
                                          int32_t n_inputs,
                                          const strata_tensor* outputs,
                                          int32_t n_outputs,
                                          const strata_attrs* attrs,
                                          strata_error* error);

/** Kernel flags. */
#define STRATA_KERNEL_STRIDED_INPUTS 0x1u /* accepts non-contiguous inputs  */
                                          /* (else the core passes compact  */
                                          /* row-major copies)              */

typedef struct strata_kernel_entry {
  size_t struct_size;
  const char* op;        /* "add", "matmul", "relu_backward", ...          */
  const char* signature; /* "f32,f32->f32"                                  */
  uint32_t flags;        /* STRATA_KERNEL_*                                */
  strata_kernel_fn fn;
} strata_kernel_entry;

/* ------------------------------------------------------------------------ */
/* Services the core offers to plugins                                       */
/* ------------------------------------------------------------------------ */

typedef enum strata_log_level {
  STRATA_LOG_TRACE = 0,
  STRATA_LOG_DEBUG = 1,
  STRATA_LOG_INFO = 2,
  STRATA_LOG_WARN = 3,
  STRATA_LOG_ERROR = 4
} strata_log_level;

typedef struct strata_host_api {
  size_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  /** Writes to the core's logger "strata.<plugin name>". Thread-safe. */
  void (*log)(strata_log_level level, const char* plugin_name,
              const char* message);
} strata_host_api;

/* ------------------------------------------------------------------------ */
/* Extension chain                                                           */
/* ------------------------------------------------------------------------ */

/**
 * Optional capabilities are appended as a linked list of extensions, each
 * starting with this header, so that a later minor (for example a
 * whole-graph execution entry for fusion) can be added without touching the
 * table below. The core ignores types it does not know.
 */
typedef struct strata_extension {
  size_t struct_size;
  uint32_t type; /* STRATA_EXTENSION_* ; 0 is reserved */
  const struct strata_extension* next;
} strata_extension;

/* Reserved for a future graph-execution extension (ABI 1.x). */
#define STRATA_EXTENSION_GRAPH_EXECUTION 1u

/* ------------------------------------------------------------------------ */
/* The plugin table                                                          */
/* ------------------------------------------------------------------------ */

typedef struct strata_plugin_api {
  size_t struct_size;
  uint32_t abi_major; /* STRATA_ABI_MAJOR the plugin was built with */
  uint32_t abi_minor;
  const char* name;    /* short, lower case: "cpu", "vulkan", "acme"  */
  const char* vendor;  /* "Strata project", "ACME Corp."             */
  const char* version; /* plugin version, free form ("1.2.0")        */

  /**
   * Initialises the plugin. `options_json` is the JSON object of this
   * plugin's "options" from the configuration (never NULL; "{}" when none)
   * plus the per-device settings the core forwards (e.g. "threads").
   * Returning STRATA_ERROR_NO_DEVICE (no driver, no device) is a normal
   * outcome: the core records the message and moves on.
   */
  strata_status (*init)(const strata_host_api* host, const char* options_json,
                        strata_plugin_state* out_state, strata_error* error);

  /** Optional. Releases device resources at process exit. */
  void (*shutdown)(strata_plugin_state state);

  /**
   * How well this build suits this machine: 0 = cannot run here; higher
   * wins among builds of one backend (e.g. an AVX-512 build over a generic
   * one). In-tree convention: 10 software devices, 50 CPU, 100 integrated GPU,
   * 200 discrete GPU.
   */
  int32_t (*score)(strata_plugin_state state);

  int32_t (*device_count)(strata_plugin_state state);
  strata_status (*device_props)(strata_plugin_state state, int32_t device,
                                strata_device_props* out_props,
                                strata_error* error);

  /* Memory. Buffers are at least 64-byte aligned where the hardware allows. */
  strata_status (*alloc)(strata_plugin_state state, int32_t device,
                         size_t bytes, strata_buffer* out_buffer,
                         strata_error* error);
  void (*free)(strata_plugin_state state, int32_t device, strata_buffer buffer);
  /** Host -> device; returns once `src` may be reused. */
  strata_status (*copy_h2d)(strata_plugin_state state, int32_t device,
                            strata_buffer dst, size_t dst_offset_bytes,
                            const void* src, size_t bytes,
                            strata_stream stream, strata_error* error);
  /** Device -> host; returns once `dst` holds the data (synchronous). */
  strata_status (*copy_d2h)(strata_plugin_state state, int32_t device,
                            void* dst, strata_buffer src,
                            size_t src_offset_bytes, size_t bytes,
                            strata_stream stream, strata_error* error);
  /** Device -> device on one device, ordered on `stream`. */
  strata_status (*copy_d2d)(strata_plugin_state state, int32_t device,
                            strata_buffer dst, size_t dst_offset_bytes,
                            strata_buffer src, size_t src_offset_bytes,
                            size_t bytes, strata_stream stream,
                            strata_error* error);

  /* Streams and events. All optional (NULL when has_streams == 0): the core
   * then uses the NULL stream and treats every call as synchronous. */
  strata_status (*stream_create)(strata_plugin_state state, int32_t device,
                                 strata_stream* out_stream,
                                 strata_error* error);
  void (*stream_destroy)(strata_plugin_state state, int32_t device,
                         strata_stream stream);
  strata_status (*stream_synchronize)(strata_plugin_state state,
                                      int32_t device, strata_stream stream,
                                      strata_error* error);
  strata_status (*event_create)(strata_plugin_state state, int32_t device,
                                strata_event* out_event, strata_error* error);
  void (*event_destroy)(strata_plugin_state state, int32_t device,
                        strata_event event);
  strata_status (*event_record)(strata_plugin_state state, int32_t device,
                                strata_event event, strata_stream stream,
                                strata_error* error);
  /** Makes `stream` wait for `event` without blocking the host. */
  strata_status (*stream_wait_event)(strata_plugin_state state, int32_t device,
                                     strata_stream stream, strata_event event,
                                     strata_error* error);
  strata_status (*event_synchronize)(strata_plugin_state state, int32_t device,
                                     strata_event event, strata_error* error);

  /**
   * The kernel table of one device. The array stays valid and unchanged until
   * the process exits. Ops missing from it fall back per the core's policy.
   */
  strata_status (*get_kernels)(strata_plugin_state state, int32_t device,
                               const strata_kernel_entry** out_entries,
                               int32_t* out_count, strata_error* error);

  /** Optional capabilities (NULL when none). */
  const strata_extension* extensions;
} strata_plugin_api;

/**
 * The entry point. The core passes its own ABI version so that a plugin may
 * adapt or decline (return NULL: the core reports "entry returned no table").
 */
typedef const strata_plugin_api* (*strata_plugin_entry_fn)(uint32_t host_abi_major,
                                                           uint32_t host_abi_minor);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* STRATA_PLUGIN_H */
