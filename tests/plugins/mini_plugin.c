/* mini_plugin.c — a minimal working accelerator plugin in C99, ABI 2.0.
 *
 * It has its own memory space (buffers are handles the core cannot read)
 * and implements only strata::fill, strata::copy and strata::add for f32, so
 * that everything else exercises the core's fallback policy. It is what the
 * smallest third-party backend looks like, and it follows the compatibility
 * rules of strata_plugin.h section 1 to the letter: every struct the host
 * hands over is checked against its *_MIN_SIZE before use, optional fields
 * are read only behind STRATA_HAS_FIELD, and what the plugin writes carries
 * its own struct_size.
 *
 * One source, several builds (tests/plugins/CMakeLists.txt):
 *   mini         against the SDK header (ABI 2.0)
 *   minifuture   -DMINI_FUTURE, against compat/future (a future minor, 2.8:
 *                every struct has trailing fields the 2.0 host does not know)
 *   miniolder    -DMINI_OLDER, against compat/older (the structs the plugin
 *                writes cut after their last required field)
 *   badentries   -DMINI_BAD_ENTRIES: a kernel table with three malformed
 *                entries among the good ones; the host must refuse just those
 *   commhost     -DMINI_COLLECTIVES: with strata.collectives v1 across
 *                processes over POSIX shared memory (commhost_collectives.c)
 *   minicomplex  -DMINI_COMPLEX: stores c64 and c128 too, with no kernel for
 *                them, so that every complex op follows the fallback policy
 *   minishortext -DMINI_SHORT_EXTENSION: a strata.native_handles extension
 *                whose struct_size ends before its functions (which crash):
 *                the host must treat it as absent, not call past the size
 *   minienv, minienvall  -DMINI_CRASH_ENV="VAR": init crashes (SIGSEGV) when
 *                the environment variable VAR is set, as a plugin whose
 *                driver is pointed at a broken library does; minienv
 *                declares VAR as its probe_environment (ABI 2.1), minienvall
 *                declares nothing (the host then counts the whole
 *                environment). The probe cache must never let either into
 *                the host unprobed once VAR is set.
 * MINI_NAME is the plugin's name (also its file's and its messages' name).
 */
#include <strata/plugin/strata_ops.h>
#include <strata/plugin/strata_plugin.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_plugin_common.h"
#ifdef MINI_COLLECTIVES
#include "commhost_collectives.h"
#endif

/* The versions its table claims: a build for another major (miniabi3) and a
 * build that needs a newer host (mininewhost) must be refused. */
#ifndef MINI_ABI_MAJOR
#define MINI_ABI_MAJOR STRATA_ABI_MAJOR
#endif
#ifndef MINI_MIN_HOST_MINOR
#define MINI_MIN_HOST_MINOR 0
#endif

#ifndef MINI_NAME
#define MINI_NAME "mini"
#endif

/* How many devices: "minipair" has two (the default device following the
 * local rank, tests/runtime/abi_compat_test.cpp); they share the memory. */
#ifndef MINI_DEVICES
#define MINI_DEVICES 1
#endif

#if defined(MINI_FUTURE) && STRATA_ABI_MINOR != 8
#error "MINI_FUTURE must be built against tests/plugins/compat/future (ABI 2.8)"
#endif
#if defined(MINI_OLDER) && defined(STRATA_DEVICE_HAS_UUID)
#error "MINI_OLDER must be built against tests/plugins/compat/older"
#endif

#define MINI_MAGIC 0x4d494e49u
/* Bytes that must never be read: they lie past the struct_size of what this
 * plugin hands to the host (only an older-minor build makes that region
 * reachable by a host reading too far). */
#define MINI_POISON UINT64_C(0xa5a5a5a5a5a5a5a5)
#define MINI_POISON_8 {MINI_POISON, MINI_POISON, MINI_POISON, MINI_POISON, \
                       MINI_POISON, MINI_POISON, MINI_POISON, MINI_POISON}

static tpc_state g_state = {0, NULL};

/* ---- helpers --------------------------------------------------------------- */

static void mini_log(strata_log_level level, const char* message) { tpc_log(&g_state, MINI_NAME, level, message); }

static int state_ok(strata_plugin_state s) { return tpc_state_ok(&g_state, MINI_MAGIC, s); }

#ifdef MINI_COLLECTIVES
int commhost_state_ok(strata_plugin_state s) { return state_ok(s); }
#endif

static tpc_buffer* as_buffer(strata_buffer b) { return tpc_buffer_of(b, MINI_MAGIC); }

static float* f32_at(const strata_tensor* t) { return (float*)((tpc_buffer*)t->buffer)->data + t->offset; }

/* ---- lifecycle --------------------------------------------------------------- */

static strata_status mini_probe(strata_probe_args* args) {
  if (args == NULL || args->struct_size < STRATA_PROBE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
#ifdef MINI_PROBE_SCORE
  args->score = MINI_PROBE_SCORE; /* a second build of one plugin, scored higher */
#else
  args->score = 5;
#endif
#ifdef MINI_FUTURE
  /* A field a 2.0 host does not write: read it only when the host's
   * struct_size says it is there. */
  if (STRATA_HAS_FIELD(args, strata_probe_args, future_a) && args->future_a != 0) args->score = 6;
#endif
  return STRATA_OK;
}

static strata_status mini_init(strata_init_args* args) {
  if (args == NULL || args->struct_size < STRATA_INIT_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->host == NULL || args->host->struct_size < STRATA_HOST_API_MIN_SIZE) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, MINI_NAME ": init: host services of %zu bytes, need %zu",
                    args->host != NULL ? args->host->struct_size : (size_t)0, (size_t)STRATA_HOST_API_MIN_SIZE);
  }
#ifdef MINI_CRASH_ENV
  if (getenv(MINI_CRASH_ENV) != NULL) raise(SIGSEGV);
#endif
  g_state.magic = MINI_MAGIC;
  g_state.host = args->host;
  if (args->options_json != NULL && strcmp(args->options_json, "{}") != 0) mini_log(STRATA_LOG_DEBUG, "options ignored");
#ifdef MINI_FUTURE
  /* Future host services and future out-fields: only behind STRATA_HAS_FIELD. */
  if (STRATA_HAS_FIELD(args->host, strata_host_api, future_service) && args->host->future_service != NULL) {
    args->host->future_service(MINI_NAME);
  }
  if (STRATA_HAS_FIELD(args, strata_init_args, future_a)) args->future_a = 7;
#endif
  args->state = (strata_plugin_state)&g_state;
  args->device_count = MINI_DEVICES;
  return STRATA_OK;
}

static void mini_shutdown(strata_plugin_state s) {
  if (state_ok(s)) g_state.magic = 0;
}

/* ---- devices ------------------------------------------------------------------- */

static strata_status device_args_ok(strata_device_args* args, const char* what) {
  return tpc_device_args_ok_of(args, &g_state, MINI_MAGIC, MINI_NAME, what, MINI_DEVICES);
}

static strata_status mini_device_props(strata_device_args* args) {
  strata_device_props p;
#ifdef MINI_OLDER
  size_t capacity, bytes;
#endif
  strata_status st = device_args_ok(args, "device_props");
  if (st == STRATA_OK) st = tpc_props_ok(args, MINI_NAME);
  if (st != STRATA_OK) return st;
  tpc_props_init(&p, STRATA_DEVICE_ACCELERATOR, 0, UINT64_C(64) << 20,
                 STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_I64) | STRATA_DTYPE_BIT(STRATA_BOOL),
                 STRATA_DTYPE_BIT(STRATA_F32));
  snprintf(p.name, sizeof(p.name), "Mini test accelerator (%s)", MINI_NAME);
  snprintf(p.compute_capability, sizeof(p.compute_capability), "mini 2");
#ifdef MINI_FUTURE
  /* What a 2.8 plugin would say: a flag and a dtype the 2.0 host does not
   * know (it must ignore both), and the future fields (past the 2.0 host's
   * capacity, so never copied to it). */
  p.flags |= STRATA_DEVICE_FUTURE_FLAG;
  p.dtype_mask |= STRATA_DTYPE_BIT(STRATA_F4_E2M1);
  p.future_a = UINT64_C(0x2007);
  p.future_b = &g_state;
#endif
#ifdef MINI_COMPLEX
  /* Memory is bytes: complex tensors are stored and copied like any other,
   * and their ops fall back (docs/complex.md, "Other devices"). */
  p.dtype_mask |= STRATA_DTYPE_BIT(STRATA_C64) | STRATA_DTYPE_BIT(STRATA_C128);
#endif
  /* Never more than the host's capacity (its struct_size on entry), and say
   * how much was written. */
#ifdef MINI_OLDER
  capacity = args->props->struct_size;
  bytes = tpc_publish_props(args->props, &p);
  /* An older plugin knows nothing past `bytes`: fill the rest of the host's
   * struct with garbage, which the host must ignore (uuid, pci_bus_id). */
  if (capacity > bytes) memset((unsigned char*)args->props + bytes, 0xa5, capacity - bytes);
#else
  (void)tpc_publish_props(args->props, &p);
#endif
  return STRATA_OK;
}

/* ---- memory ---------------------------------------------------------------------- */

static strata_status mini_alloc(strata_alloc_args* args) {
  strata_status st;
  if (args == NULL || args->struct_size < STRATA_ALLOC_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!state_ok(args->state) || args->device < 0 || args->device >= MINI_DEVICES) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, MINI_NAME ": alloc: bad state or device %d", (int)args->device);
  }
  st = tpc_alloc(args, MINI_MAGIC, MINI_NAME);
  if (st == STRATA_ERROR_OUT_OF_MEMORY) {
    return tpc_fail(args->error, STRATA_ERROR_OUT_OF_MEMORY, MINI_NAME ": cannot allocate %zu bytes", args->bytes);
  }
  return st;
}

static void mini_free(strata_alloc_args* args) { (void)tpc_free(args, MINI_MAGIC); }

static strata_status mini_copy(strata_copy_args* args) {
  if (args == NULL || args->struct_size < STRATA_COPY_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!state_ok(args->state) || args->device < 0 || args->device >= MINI_DEVICES) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, MINI_NAME ": copy: bad state or device %d", (int)args->device);
  }
  /* Synchronous: STRATA_COPY_ASYNC is allowed to complete at once. */
  return tpc_copy(args, MINI_MAGIC, MINI_NAME, NULL);
}

/* ---- kernels ------------------------------------------------------------------------ */

/* What each entry's user_data points at: the kernel checks it gets its own. */
typedef struct mini_kernel_info {
  const char* op;
} mini_kernel_info;

static mini_kernel_info g_fill_info = {STRATA_OP_FILL};
static mini_kernel_info g_copy_info = {STRATA_OP_COPY};
static mini_kernel_info g_add_info = {STRATA_OP_ADD};

/* A descriptor of an f32 tensor in one of this plugin's buffers, every
 * element of which lies inside the buffer. */
static strata_status check_f32(const strata_kernel_call* c, const strata_tensor* t, const char* role) {
  tpc_buffer* b;
  int64_t last = 0;
  strata_status st = tpc_check_descriptor(c, t, MINI_NAME, role);
  if (st != STRATA_OK) return st;
  if (t->dtype != STRATA_F32) {
    return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED, MINI_NAME ": %s: %s has dtype %d, only f32 is handled", c->op, role,
                    (int)t->dtype);
  }
  st = tpc_check_extent(c, t, MINI_NAME, role, &last);
  if (st != STRATA_OK) return st;
  b = as_buffer(t->buffer);
  if (b == NULL || (size_t)(t->offset + last + 1) * sizeof(float) > b->bytes) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, MINI_NAME ": %s: %s reaches past its buffer", c->op, role);
  }
  return STRATA_OK;
}

/* The checks every kernel makes on its call before touching it. */
static strata_status check_call(const strata_kernel_call* c, const mini_kernel_info* info, int32_t n_inputs) {
  int32_t k;
  strata_status st;
  if (c == NULL || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (c->op == NULL || strcmp(c->op, info->op) != 0 || c->op_version != STRATA_OP_VERSION) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, MINI_NAME ": kernel of %s v%d called as %s v%u", info->op,
                    STRATA_OP_VERSION, c->op != NULL ? c->op : "(null)", (unsigned)c->op_version);
  }
  if (!state_ok(c->state) || c->device < 0 || c->device >= MINI_DEVICES) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, MINI_NAME ": %s: bad state or device %d", c->op, (int)c->device);
  }
#ifdef MINI_OLDER
  /* Our entries end before user_data: the host must hand back NULL. */
  if (c->user_data != NULL) {
    return tpc_fail(c->error, STRATA_ERROR_INTERNAL,
                    MINI_NAME ": %s: user_data %p, but the entry (struct_size %zu) has none: the host read past it", c->op,
                    c->user_data, (size_t)sizeof(strata_kernel_entry));
  }
#else
  if (c->user_data != (const void*)info) {
    return tpc_fail(c->error, STRATA_ERROR_INTERNAL, MINI_NAME ": %s: user_data %p is not the entry's %p", c->op, c->user_data,
                    (const void*)info);
  }
#endif
#ifdef MINI_FUTURE
  /* A 2.0 host's call struct ends before future_a. */
  if (STRATA_HAS_FIELD(c, strata_kernel_call, future_a) && c->future_a != 0) mini_log(STRATA_LOG_TRACE, "future call field");
#endif
  if (c->n_inputs != n_inputs || c->n_outputs != 1 || (n_inputs > 0 && c->inputs == NULL) || c->outputs == NULL) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, MINI_NAME ": %s: %d inputs, %d outputs", c->op, (int)c->n_inputs,
                    (int)c->n_outputs);
  }
  st = check_f32(c, c->outputs[0], "output");
  for (k = 0; st == STRATA_OK && k < n_inputs; ++k) {
    st = check_f32(c, c->inputs[k], "input");
    if (st == STRATA_OK && c->inputs[k]->rank != c->outputs[0]->rank) {
      st = tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, MINI_NAME ": %s: input rank %d, output rank %d", c->op,
                    (int)c->inputs[k]->rank, (int)c->outputs[0]->rank);
    }
  }
  return st;
}

/* Outputs are compact (the core allocates them), except copy's. */
static strata_status k_fill(const strata_kernel_call* c) {
  double value = 0.0;
  int64_t i, n;
  float* y;
  strata_status st = check_call(c, &g_fill_info, 0);
  if (st == STRATA_OK) st = tpc_fill_value(c, MINI_NAME, &value);
  if (st != STRATA_OK) return st;
  n = tpc_numel(c->outputs[0]);
  y = f32_at(c->outputs[0]);
  for (i = 0; i < n; ++i) y[tpc_strided_offset(c->outputs[0], i)] = (float)value;
  return STRATA_OK;
}

/* Inputs arrive compact (no STRATA_KERNEL_STRIDED_INPUTS); copy's output may
 * be any strided view. */
static strata_status k_copy(const strata_kernel_call* c) {
  int64_t i, n;
  float* dst;
  const float* src;
  strata_status st = check_call(c, &g_copy_info, 1);
  if (st != STRATA_OK) return st;
  n = tpc_numel(c->outputs[0]);
  dst = f32_at(c->outputs[0]);
  src = f32_at(c->inputs[0]);
  for (i = 0; i < n; ++i) dst[tpc_strided_offset(c->outputs[0], i)] = src[tpc_strided_offset(c->inputs[0], i)];
  return STRATA_OK;
}

static strata_status k_add(const strata_kernel_call* c) {
  int64_t i, n;
  const float *a, *b;
  float* y;
  strata_status st = check_call(c, &g_add_info, 2);
  if (st != STRATA_OK) return st;
  n = tpc_numel(c->outputs[0]);
  a = f32_at(c->inputs[0]);
  b = f32_at(c->inputs[1]);
  y = f32_at(c->outputs[0]);
  for (i = 0; i < n; ++i) {
    y[tpc_strided_offset(c->outputs[0], i)] = a[tpc_strided_offset(c->inputs[0], i)] + b[tpc_strided_offset(c->inputs[1], i)];
  }
  return STRATA_OK;
}

/* The kernel table. Each entry sits in front of poison, so that a host
 * reading past an entry's struct_size (which for miniolder ends at fn) gets
 * garbage and fails loudly. */
typedef struct mini_entry {
  strata_kernel_entry e;
  uint64_t poison[8];
} mini_entry;

#if defined(MINI_OLDER)
#define MINI_ENTRY_TAIL(info)
#elif defined(MINI_FUTURE)
#define MINI_ENTRY_TAIL(info) , .user_data = (info), .future_a = UINT64_C(0x2007), .future_b = (info)
#else
#define MINI_ENTRY_TAIL(info) , .user_data = (info)
#endif

#define MINI_ENTRY(op_, version_, signature_, fn_, info_)                                                     \
  {                                                                                                          \
    {.struct_size = sizeof(strata_kernel_entry), .op = (op_), .op_version = (version_), .signature = (signature_), \
     .flags = 0, .fn = (fn_) MINI_ENTRY_TAIL(info_)},                                                        \
        MINI_POISON_8                                                                                        \
  }

static const mini_entry kFill = MINI_ENTRY(STRATA_OP_FILL, STRATA_OP_VERSION, "->f32", k_fill, &g_fill_info);
static const mini_entry kCopy = MINI_ENTRY(STRATA_OP_COPY, STRATA_OP_VERSION, "f32->f32", k_copy, &g_copy_info);
static const mini_entry kAdd = MINI_ENTRY(STRATA_OP_ADD, STRATA_OP_VERSION, "f32,f32->f32", k_add, &g_add_info);

#ifdef MINI_BAD_ENTRIES
/* Malformed entries the host must refuse one by one, keeping the rest:
 *  - an entry whose struct_size (16: struct_size and op) is below
 *    STRATA_KERNEL_ENTRY_MIN_SIZE; the bytes after it are poison;
 *  - an entry for an op the core does not know;
 *  - an entry for strata::add at op version 99 (the core speaks 1).
 * Their kernels must never run. */
#define BAD_OP_UNKNOWN "strata::no_such_op"

typedef struct short_entry {
  size_t struct_size;
  const char* op;
  uint64_t poison[8];
} short_entry;

static strata_status k_never(const strata_kernel_call* c) {
  return tpc_fail(c->error, STRATA_ERROR_INTERNAL, MINI_NAME ": a refused kernel entry (%s v%u) ran", c->op, (unsigned)c->op_version);
}

static const short_entry kShort = {STRATA_SIZE_UP_TO(strata_kernel_entry, op), STRATA_OP_MUL, MINI_POISON_8};
static const mini_entry kUnknown = MINI_ENTRY(BAD_OP_UNKNOWN, STRATA_OP_VERSION, "f32->f32", k_never, &g_add_info);
static const mini_entry kAddV99 = MINI_ENTRY(STRATA_OP_ADD, 99, "f32,f32->f32", k_never, &g_add_info);

static const strata_kernel_entry* const kEntries[] = {
    &kFill.e, &kCopy.e, (const strata_kernel_entry*)&kShort, &kAddV99.e, &kAdd.e, &kUnknown.e,
};
#else
static const strata_kernel_entry* const kEntries[] = {&kFill.e, &kCopy.e, &kAdd.e};
#endif

static strata_status mini_get_kernels(strata_device_args* args) {
  strata_status st = device_args_ok(args, "get_kernels");
  if (st != STRATA_OK) return st;
  args->entries = kEntries;
  args->n_entries = (int32_t)(sizeof(kEntries) / sizeof(kEntries[0]));
  return STRATA_OK;
}

/* ---- the table ------------------------------------------------------------------------ */

#ifdef MINI_FUTURE
static strata_status mini_future_call(strata_probe_args* args) {
  (void)args;
  return STRATA_ERROR_UNSUPPORTED;
}
#define MINI_TABLE_TAIL , .future_a = UINT64_C(0x2007), .future_b = &g_state, .future_call = mini_future_call
#elif defined(MINI_COLLECTIVES)
#define MINI_TABLE_TAIL , .extensions = &commhost_collectives.base
#elif defined(MINI_SHORT_EXTENSION)
/* strata.native_handles whose struct_size ends with its base: the function
 * pointers behind it are poison the host must never call. */
static strata_status mini_poisoned_native(strata_native_args* args) {
  (void)args;
  raise(SIGSEGV); /* reached only by a host that read past struct_size */
  return STRATA_ERROR_INTERNAL;
}
static const strata_ext_native_handles kShortNativeHandles = {
    .base = {.struct_size = sizeof(strata_extension), .name = STRATA_EXT_NATIVE_HANDLES, .version = 1, .next = NULL},
    .buffer_pointer = mini_poisoned_native,
    .stream_handle = mini_poisoned_native};
#define MINI_TABLE_TAIL , .extensions = &kShortNativeHandles.base
#elif defined(MINI_CRASH_ENV) && defined(MINI_DECLARES_ENV)
static const char* const kProbeEnvironment[] = {MINI_CRASH_ENV, NULL};
#define MINI_TABLE_TAIL , .probe_environment = kProbeEnvironment
#else
#define MINI_TABLE_TAIL
#endif

/* The table, followed by poison: miniolder's table ends at `copy`, and a
 * host reading memory_info, the stream calls or extensions anyway gets
 * 0xa5a5... pointers. */
static const struct {
  strata_plugin_api api;
  uint64_t poison[8];
} kTable = {
    {.struct_size = sizeof(strata_plugin_api),
     .abi_major = MINI_ABI_MAJOR,
     .abi_minor = STRATA_ABI_MINOR,
     .min_host_minor = MINI_MIN_HOST_MINOR,
     .name = MINI_NAME,
     .vendor = "Strata tests",
     .version = "2.0.0",
     .probe = mini_probe,
     .init = mini_init,
     .shutdown = mini_shutdown,
     .device_props = mini_device_props,
     .get_kernels = mini_get_kernels,
     .alloc = mini_alloc,
     .free = mini_free,
     .copy = mini_copy MINI_TABLE_TAIL},
    MINI_POISON_8};

TPC_PLUGIN_ENTRY(&kTable.api)
