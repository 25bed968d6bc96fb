/* behaviour_common.c — the small accelerator every behaviour plugin is
 * (see behaviour_common.h). C99; compiled into each plugin, so each has its
 * own copy of the state below.
 *
 * What it shares with the other test plugins (the error writer, the buffers
 * of its memory space, bounds-checked copies, descriptor checks, fill's
 * value, device props) is tests/plugins/common/test_plugin_common.c.
 *
 * It follows strata_plugin.h section 1 as mini_plugin.c does: every struct
 * the host hands over is checked against its *_MIN_SIZE before use, and
 * what the plugin writes carries its own struct_size. Counters that calls
 * on several threads may touch (memory statistics) use the __atomic
 * builtins of GCC and Clang.
 */
#include "behaviour_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BP_MAGIC 0x42455631u        /* "BEV1": state and buffers */
#define BP_STREAM_MAGIC 0x42535452u /* streams */
#define BP_EVENT_MAGIC 0x42455654u  /* events */
#define BP_MEMORY_BYTES (UINT64_C(64) << 20)

/* Streams and events are trivial: work is complete when its call returns. */
typedef struct bp_object {
  uint32_t magic;
} bp_object;

static tpc_state g_state = {0, NULL};

/* Memory counters (bytes in live buffers, their peak, allocations made). */
static uint64_t g_in_use = 0;
static uint64_t g_peak = 0;
static uint64_t g_allocations = 0;

/* The live buffers, when bp_plugin.release_at_shutdown asks for them:
 * a growing array under a spin lock (alloc and free may come from several
 * threads). */
static strata_buffer* g_live = NULL;
static size_t g_n_live = 0;
static size_t g_live_capacity = 0;
static int g_live_lock = 0;

static void live_lock(void) {
  while (__atomic_test_and_set(&g_live_lock, __ATOMIC_ACQUIRE)) {
  }
}

static void live_unlock(void) { __atomic_clear(&g_live_lock, __ATOMIC_RELEASE); }

/* Returns 0 when out of memory. */
static int live_add(strata_buffer b) {
  int ok = 1;
  live_lock();
  if (g_n_live == g_live_capacity) {
    size_t capacity = g_live_capacity == 0 ? 16 : 2 * g_live_capacity;
    strata_buffer* grown = (strata_buffer*)realloc(g_live, capacity * sizeof(*grown));
    if (grown == NULL) {
      ok = 0;
    } else {
      g_live = grown;
      g_live_capacity = capacity;
    }
  }
  if (ok) g_live[g_n_live++] = b;
  live_unlock();
  return ok;
}

static void live_remove(strata_buffer b) {
  size_t i;
  live_lock();
  for (i = 0; i < g_n_live; ++i) {
    if (g_live[i] == b) {
      g_live[i] = g_live[--g_n_live];
      break;
    }
  }
  live_unlock();
}

/* ---- kernels the common code knows -------------------------------------------- */

typedef struct bp_kernel_info {
  bp_kind kind;
  const char* op;
  const char* signature;
  int32_t n_inputs;
  uint32_t flags; /* STRATA_KERNEL_* besides STRIDED_INPUTS, which all have */
} bp_kernel_info;

/* Indexed by bp_kind; an entry's user_data points at its info. */
static bp_kernel_info kBpKernels[BP_KIND_COUNT] = {
    {BP_FILL, STRATA_OP_FILL, "->f32", 0, 0},
    {BP_COPY, STRATA_OP_COPY, "f32->f32", 1, 0},
    {BP_ADD, STRATA_OP_ADD, "f32,f32->f32", 2, 0},
    {BP_SUB, STRATA_OP_SUB, "f32,f32->f32", 2, 0},
    {BP_MUL, STRATA_OP_MUL, "f32,f32->f32", 2, 0},
    {BP_NEG, STRATA_OP_NEG, "f32->f32", 1, 0},
    {BP_SUM, STRATA_OP_SUM, "f32->f32", 1, 0},
    {BP_INDEX_SELECT, STRATA_OP_INDEX_SELECT, "f32,i64->f32", 2, 0},
    {BP_SGD_STEP, STRATA_OP_SGD_STEP, "f32,f32->f32", 2, STRATA_KERNEL_GROUPED},
};

/* The kernel table, built by init (one thread) from bp_plugin.kernels and
 * valid until the process exits. */
static strata_kernel_entry g_entries[BP_KIND_COUNT];
static const strata_kernel_entry* g_entry_pointers[BP_KIND_COUNT];
static int32_t g_n_entries = 0;

/* ---- helpers ----------------------------------------------------------------- */

const char* bp_name(void) { return bp_table.name; }

void bp_log(strata_log_level level, const char* message) { tpc_log(&g_state, bp_name(), level, message); }

uint64_t bp_option_u64(const char* json, const char* key, uint64_t fallback) {
  char quoted[96];
  const char* p;
  char* end;
  unsigned long long value;
  if (json == NULL || key == NULL || strlen(key) + 3 > sizeof(quoted)) return fallback;
  snprintf(quoted, sizeof(quoted), "\"%s\"", key);
  p = strstr(json, quoted);
  if (p == NULL) return fallback;
  p += strlen(quoted);
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') ++p;
  if (*p != ':') return fallback;
  ++p;
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') ++p;
  if (*p < '0' || *p > '9') return fallback;
  value = strtoull(p, &end, 10);
  return end == p ? fallback : (uint64_t)value;
}

static int state_ok(strata_plugin_state s) { return tpc_state_ok(&g_state, BP_MAGIC, s); }

static tpc_buffer* as_buffer(strata_buffer b) { return tpc_buffer_of(b, BP_MAGIC); }

void* bp_buffer_data(strata_buffer buffer, size_t* bytes) {
  tpc_buffer* b = as_buffer(buffer);
  if (b == NULL) return NULL;
  if (bytes != NULL) *bytes = b->bytes;
  return b->data;
}

int64_t bp_element(const strata_tensor* t, int64_t i) { return t->offset + tpc_strided_offset(t, i); }

float* bp_f32(const strata_tensor* t) { return (float*)((tpc_buffer*)t->buffer)->data; }
int64_t* bp_i64(const strata_tensor* t) { return (int64_t*)((tpc_buffer*)t->buffer)->data; }

static strata_status check_alive(strata_error* error) {
  return bp_plugin.alive != NULL ? bp_plugin.alive(error) : STRATA_OK;
}

static strata_status check_sync_point(strata_error* error) {
  return bp_plugin.sync_point != NULL ? bp_plugin.sync_point(error) : STRATA_OK;
}

/* The checks at the top of every call on the device: the argument struct
 * (its size against `min_size`), this plugin's state, device 0, and then
 * whether the device is alive. */
static strata_status call_ok(const void* args, size_t struct_size, size_t min_size, strata_plugin_state state, int32_t device,
                             strata_error* error, const char* what) {
  if (args == NULL || struct_size < min_size) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!state_ok(state) || device != 0) {
    return tpc_fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: bad state or device %d", bp_name(), what, (int)device);
  }
  return check_alive(error);
}
#define BP_CALL_OK(args, MIN_SIZE, what)                                                                        \
  ((args) == NULL ? STRATA_ERROR_INVALID_ARGUMENT                                                              \
                  : call_ok((args), (args)->struct_size, (MIN_SIZE), (args)->state, (args)->device, (args)->error, (what)))

/* ---- lifecycle and devices ------------------------------------------------------ */

strata_status bp_probe(strata_probe_args* args) {
  if (args == NULL || args->struct_size < STRATA_PROBE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  args->score = 5;
  return STRATA_OK;
}

strata_status bp_init(strata_init_args* args) {
  int k;
  strata_status st;
  if (args == NULL || args->struct_size < STRATA_INIT_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->host == NULL || args->host->struct_size < STRATA_HOST_API_MIN_SIZE) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: init: host services of %zu bytes, need %zu", bp_name(),
                    args->host != NULL ? args->host->struct_size : (size_t)0, (size_t)STRATA_HOST_API_MIN_SIZE);
  }
  g_state.host = args->host;
  if (bp_plugin.init != NULL) {
    st = bp_plugin.init(args->options_json != NULL ? args->options_json : "{}", args->error);
    if (st != STRATA_OK) return st;
  }
  g_n_entries = 0;
  for (k = 0; k < bp_plugin.n_kernels; ++k) {
    bp_kind kind = bp_plugin.kernels[k];
    strata_kernel_entry* e = &g_entries[g_n_entries];
    if ((int)kind < 0 || kind >= BP_KIND_COUNT) continue;
    memset(e, 0, sizeof(*e));
    e->struct_size = sizeof(*e);
    e->op = kBpKernels[kind].op;
    e->op_version = STRATA_OP_VERSION;
    e->signature = kBpKernels[kind].signature;
    e->flags = STRATA_KERNEL_STRIDED_INPUTS | kBpKernels[kind].flags;
    e->fn = bp_plugin.kernel != NULL ? bp_plugin.kernel : bp_compute;
    e->user_data = &kBpKernels[kind];
    g_entry_pointers[g_n_entries] = e;
    ++g_n_entries;
  }
  g_state.magic = BP_MAGIC;
  args->state = (strata_plugin_state)&g_state;
  args->device_count = 1;
  return STRATA_OK;
}

void bp_shutdown(strata_plugin_state s) {
  size_t i;
  if (!state_ok(s)) return;
  g_state.magic = 0;
  /* Shutdown releases the device's resources: with release_at_shutdown the
   * buffers the host still holds (on a lost device, all of them). */
  live_lock();
  for (i = 0; i < g_n_live; ++i) tpc_buffer_delete(g_live[i], BP_MAGIC);
  free(g_live);
  g_live = NULL;
  g_n_live = g_live_capacity = 0;
  live_unlock();
}

static strata_status device_args_ok(strata_device_args* args, const char* what) {
  return tpc_device_args_ok(args, &g_state, BP_MAGIC, bp_name(), what);
}

strata_status bp_device_props(strata_device_args* args) {
  strata_device_props p;
  strata_status st = device_args_ok(args, "device_props");
  if (st == STRATA_OK) st = tpc_props_ok(args, bp_name());
  if (st != STRATA_OK) return st;
  tpc_props_init(&p, STRATA_DEVICE_ACCELERATOR, bp_plugin.device_flags, BP_MEMORY_BYTES,
                 STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_I64) | STRATA_DTYPE_BIT(STRATA_BOOL),
                 STRATA_DTYPE_BIT(STRATA_F32));
  snprintf(p.name, sizeof(p.name), "Behaviour test accelerator (%s)", bp_name());
  snprintf(p.compute_capability, sizeof(p.compute_capability), "behaviour 2");
  (void)tpc_publish_props(args->props, &p);
  return STRATA_OK;
}

strata_status bp_get_kernels(strata_device_args* args) {
  strata_status st = device_args_ok(args, "get_kernels");
  if (st != STRATA_OK) return st;
  args->entries = g_entry_pointers;
  args->n_entries = g_n_entries;
  return STRATA_OK;
}

/* ---- memory -------------------------------------------------------------------------- */

strata_status bp_alloc(strata_alloc_args* args) {
  uint64_t in_use, peak;
  strata_status st = BP_CALL_OK(args, STRATA_ALLOC_ARGS_MIN_SIZE, "alloc");
  if (st == STRATA_OK && bp_plugin.before_alloc != NULL) {
    st = bp_plugin.before_alloc(args);
    if (st != STRATA_OK) return st;
  }
  if (st == STRATA_OK) st = tpc_alloc(args, BP_MAGIC, bp_name());
  if (st == STRATA_ERROR_OUT_OF_MEMORY) {
    return tpc_fail(args->error, STRATA_ERROR_OUT_OF_MEMORY, "%s:0: cannot allocate %zu bytes", bp_name(), args->bytes);
  }
  if (st != STRATA_OK) return st;
  if (bp_plugin.release_at_shutdown && !live_add(args->buffer)) {
    tpc_buffer_delete(args->buffer, BP_MAGIC);
    args->buffer = NULL;
    return tpc_fail(args->error, STRATA_ERROR_OUT_OF_MEMORY, "%s:0: cannot allocate %zu bytes", bp_name(), args->bytes);
  }
  in_use = __atomic_add_fetch(&g_in_use, (uint64_t)args->bytes, __ATOMIC_RELAXED);
  peak = __atomic_load_n(&g_peak, __ATOMIC_RELAXED);
  while (in_use > peak && !__atomic_compare_exchange_n(&g_peak, &peak, in_use, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  __atomic_add_fetch(&g_allocations, 1, __ATOMIC_RELAXED);
  return STRATA_OK;
}

/* Also after a device is lost: the host memory behind it is released. */
void bp_free(strata_alloc_args* args) {
  size_t bytes;
  if (bp_plugin.release_at_shutdown && args != NULL && args->struct_size >= STRATA_ALLOC_ARGS_MIN_SIZE) {
    live_remove(args->buffer);
  }
  bytes = tpc_free(args, BP_MAGIC);
  if (bytes > 0) __atomic_sub_fetch(&g_in_use, (uint64_t)bytes, __ATOMIC_RELAXED);
}

strata_status bp_copy(strata_copy_args* args) {
  strata_status st = BP_CALL_OK(args, STRATA_COPY_ARGS_MIN_SIZE, "copy");
  if (st == STRATA_OK && bp_plugin.before_copy != NULL) st = bp_plugin.before_copy(args);
  if (st != STRATA_OK) return st;
  /* Synchronous (STRATA_COPY_ASYNC may complete at once). A synchronous
   * copy to the host is a synchronisation point: a deferred failure is
   * reported instead of the data (as CUDA does). */
  return tpc_copy(args, BP_MAGIC, bp_name(), check_sync_point);
}

static strata_status memory_args_ok(strata_memory_args* args, const char* what) {
  return BP_CALL_OK(args, STRATA_MEMORY_ARGS_MIN_SIZE, what);
}

strata_status bp_memory_info(strata_memory_args* args) {
  uint64_t in_use;
  strata_status st = memory_args_ok(args, "memory_info");
  if (st != STRATA_OK) return st;
  in_use = __atomic_load_n(&g_in_use, __ATOMIC_RELAXED);
  args->total_bytes = BP_MEMORY_BYTES;
  args->free_bytes = in_use < BP_MEMORY_BYTES ? BP_MEMORY_BYTES - in_use : 0;
  return STRATA_OK;
}

/* Nothing is cached: every freed buffer went back to malloc. */
strata_status bp_memory_trim(strata_memory_args* args) { return memory_args_ok(args, "memory_trim"); }

strata_status bp_memory_stats(strata_memory_args* args) {
  strata_status st = memory_args_ok(args, "memory_stats");
  if (st != STRATA_OK) return st;
  args->bytes_in_use = __atomic_load_n(&g_in_use, __ATOMIC_RELAXED);
  args->bytes_reserved = args->bytes_in_use;
  args->peak_bytes_in_use = __atomic_load_n(&g_peak, __ATOMIC_RELAXED);
  args->allocations = __atomic_load_n(&g_allocations, __ATOMIC_RELAXED);
  return STRATA_OK;
}

/* ---- streams and events ------------------------------------------------------------- */

static strata_status stream_args_ok(strata_stream_args* args, const char* what) {
  return BP_CALL_OK(args, STRATA_STREAM_ARGS_MIN_SIZE, what);
}

/* A new stream (event = 0) or event (event = 1) into args->stream / event. */
static strata_status create_object(strata_stream_args* args, int event) {
  const char* what = event ? "event_create" : "stream_create";
  bp_object* o;
  strata_status st = stream_args_ok(args, what);
  if (st != STRATA_OK) return st;
  o = (bp_object*)malloc(sizeof(bp_object));
  if (o == NULL) return tpc_fail(args->error, STRATA_ERROR_OUT_OF_MEMORY, "%s: %s: out of memory", bp_name(), what);
  o->magic = event ? BP_EVENT_MAGIC : BP_STREAM_MAGIC;
  if (event) args->event = (strata_event)o;
  else args->stream = (strata_stream)o;
  return STRATA_OK;
}

static void destroy_object(strata_stream_args* args, int event) {
  bp_object* o;
  if (args == NULL || args->struct_size < STRATA_STREAM_ARGS_MIN_SIZE) return;
  o = event ? (bp_object*)args->event : (bp_object*)args->stream;
  if (o == NULL || o->magic != (event ? BP_EVENT_MAGIC : BP_STREAM_MAGIC)) return;
  o->magic = 0;
  free(o);
}

strata_status bp_stream_create(strata_stream_args* args) { return create_object(args, 0); }
void bp_stream_destroy(strata_stream_args* args) { destroy_object(args, 0); }
strata_status bp_event_create(strata_stream_args* args) { return create_object(args, 1); }
void bp_event_destroy(strata_stream_args* args) { destroy_object(args, 1); }

strata_status bp_stream_synchronize(strata_stream_args* args) {
  strata_status st = stream_args_ok(args, "stream_synchronize");
  return st != STRATA_OK ? st : check_sync_point(args->error);
}

strata_status bp_event_record(strata_stream_args* args) { return stream_args_ok(args, "event_record"); }

strata_status bp_stream_wait_event(strata_stream_args* args) { return stream_args_ok(args, "stream_wait_event"); }

strata_status bp_event_synchronize(strata_stream_args* args) {
  strata_status st = stream_args_ok(args, "event_synchronize");
  return st != STRATA_OK ? st : check_sync_point(args->error);
}

strata_status bp_event_query(strata_stream_args* args) {
  strata_status st = stream_args_ok(args, "event_query");
  if (st == STRATA_OK) args->complete = 1;
  return st;
}


/* ---- kernels ------------------------------------------------------------------------- */

bp_kind bp_kind_of(const strata_kernel_call* c) {
  const bp_kernel_info* info;
  if (c == NULL || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return BP_KIND_COUNT;
  info = (const bp_kernel_info*)c->user_data;
  if (info < &kBpKernels[0] || info >= &kBpKernels[BP_KIND_COUNT]) return BP_KIND_COUNT;
  return info->kind;
}

static size_t dtype_bytes(strata_dtype dt) { return dt == STRATA_I64 ? 8 : dt == STRATA_BOOL ? 1 : 4; }

static const char* dtype_name(strata_dtype dt) { return dt == STRATA_F32 ? "f32" : dt == STRATA_I64 ? "i64" : "other"; }

/* A descriptor of `dtype` in one of this plugin's buffers, every element of
 * which lies inside the buffer. */
static strata_status check_tensor(const strata_kernel_call* c, const strata_tensor* t, strata_dtype dtype, const char* role) {
  tpc_buffer* b;
  int64_t last = 0;
  strata_status st = tpc_check_descriptor(c, t, bp_name(), role);
  if (st != STRATA_OK) return st;
  if (t->dtype != dtype) {
    return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED, "%s: %s: %s has dtype %d, expected %s", bp_name(), c->op, role,
                    (int)t->dtype, dtype_name(dtype));
  }
  st = tpc_check_extent(c, t, bp_name(), role, &last);
  if (st != STRATA_OK) return st;
  b = as_buffer(t->buffer);
  if (b == NULL || (size_t)(t->offset + last + 1) * dtype_bytes(dtype) > b->bytes) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: %s reaches past its buffer", bp_name(), c->op, role);
  }
  return STRATA_OK;
}

static int same_shape(const strata_tensor* a, const strata_tensor* b) {
  int32_t k;
  if (a->rank != b->rank) return 0;
  for (k = 0; k < a->rank; ++k) {
    if (a->shape[k] != b->shape[k]) return 0;
  }
  return 1;
}

/* The shapes a kind's inputs and output must have (the core's contract,
 * docs/ops.md): equal for elementwise ops; sum keeps the rank with reduced
 * dims of size 1; index_select replaces x's `dim` by the index's length. */
static strata_status check_shapes(const strata_kernel_call* c, bp_kind kind) {
  const strata_tensor* y = c->outputs[0];
  const strata_tensor* x = c->n_inputs > 0 ? c->inputs[0] : NULL;
  int32_t k;
  int64_t dim;
  switch (kind) {
    case BP_FILL:
      return STRATA_OK;
    case BP_SUM:
      if (x->rank != y->rank) break;
      for (k = 0; k < x->rank; ++k) {
        if (y->shape[k] != x->shape[k] && y->shape[k] != 1) break;
      }
      if (k < x->rank) break;
      return STRATA_OK;
    case BP_INDEX_SELECT:
      dim = bp_attr_int(c, "dim", -1);
      if (dim < 0 || dim >= x->rank || y->rank != x->rank || c->inputs[1]->rank != 1 ||
          y->shape[dim] != c->inputs[1]->shape[0]) {
        break;
      }
      for (k = 0; k < x->rank; ++k) {
        if (k != dim && y->shape[k] != x->shape[k]) break;
      }
      if (k < x->rank) break;
      return STRATA_OK;
    default:
      for (k = 0; k < c->n_inputs; ++k) {
        if (!same_shape(c->inputs[k], y)) break;
      }
      if (k < c->n_inputs) break;
      return STRATA_OK;
  }
  return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: input and output shapes do not fit the op", bp_name(),
                  c->op);
}

strata_status bp_check_call(const strata_kernel_call* c, bp_kind kind) {
  const bp_kernel_info* info;
  int32_t k;
  strata_status st;
  if (c == NULL || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if ((int)kind < 0 || kind >= BP_KIND_COUNT) {
    return tpc_fail(c->error, STRATA_ERROR_INTERNAL, "%s: %s: user_data %p is none of this plugin's kernels", bp_name(),
                    c->op != NULL ? c->op : "(null)", c->user_data);
  }
  info = &kBpKernels[kind];
  if (c->op == NULL || strcmp(c->op, info->op) != 0 || c->op_version != STRATA_OP_VERSION) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: kernel of %s v%d called as %s v%u", bp_name(), info->op,
                    STRATA_OP_VERSION, c->op != NULL ? c->op : "(null)", (unsigned)c->op_version);
  }
  if (!state_ok(c->state) || c->device != 0) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: bad state or device %d", bp_name(), c->op, (int)c->device);
  }
  if (c->n_inputs != info->n_inputs || c->n_outputs != 1 || (info->n_inputs > 0 && c->inputs == NULL) ||
      c->outputs == NULL) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: %d inputs, %d outputs", bp_name(), c->op,
                    (int)c->n_inputs, (int)c->n_outputs);
  }
  st = check_tensor(c, c->outputs[0], STRATA_F32, "output");
  for (k = 0; st == STRATA_OK && k < c->n_inputs; ++k) {
    st = check_tensor(c, c->inputs[k], kind == BP_INDEX_SELECT && k == 1 ? STRATA_I64 : STRATA_F32, "input");
  }
  return st != STRATA_OK ? st : check_shapes(c, kind);
}

int64_t bp_attr_int(const strata_kernel_call* c, const char* name, int64_t fallback) {
  int32_t k;
  for (k = 0; k < c->n_attrs; ++k) {
    const strata_attr* a = c->attrs[k];
    if (a == NULL || a->struct_size < STRATA_ATTR_MIN_SIZE || a->name == NULL || strcmp(a->name, name) != 0) continue;
    if (a->kind == STRATA_ATTR_INT || a->kind == STRATA_ATTR_BOOL) return a->i;
  }
  return fallback;
}

/* sum: the output keeps the input's rank, reduced dims of size 1. */
static void sum_f32(const strata_tensor* x, const strata_tensor* y) {
  float* out = bp_f32(y);
  const float* in = bp_f32(x);
  int64_t i, n = tpc_numel(y);
  for (i = 0; i < n; ++i) out[bp_element(y, i)] = 0.0f;
  n = tpc_numel(x);
  for (i = 0; i < n; ++i) {
    int64_t rest = i, at = y->offset;
    int32_t k;
    for (k = x->rank - 1; k >= 0; --k) {
      if (y->shape[k] != 1) at += (rest % x->shape[k]) * y->strides[k];
      rest /= x->shape[k];
    }
    out[at] += in[bp_element(x, i)];
  }
}

strata_status bp_compute(const strata_kernel_call* c) {
  bp_kind kind = bp_kind_of(c);
  const strata_tensor* y;
  float* out;
  const float *a = NULL, *b = NULL;
  double value = 0.0;
  int64_t i, n;
  strata_status st = bp_check_call(c, kind);
  if (st != STRATA_OK) return st;
  y = c->outputs[0];
  out = bp_f32(y);
  n = tpc_numel(y);
  if (c->n_inputs > 0) a = bp_f32(c->inputs[0]);
  if (c->n_inputs > 1) b = bp_f32(c->inputs[1]);
  switch (kind) {
    case BP_FILL:
      st = tpc_fill_value(c, bp_name(), &value);
      if (st != STRATA_OK) return st;
      for (i = 0; i < n; ++i) out[bp_element(y, i)] = (float)value;
      return STRATA_OK;
    case BP_COPY:
      for (i = 0; i < n; ++i) out[bp_element(y, i)] = a[bp_element(c->inputs[0], i)];
      return STRATA_OK;
    case BP_NEG:
      for (i = 0; i < n; ++i) out[bp_element(y, i)] = -a[bp_element(c->inputs[0], i)];
      return STRATA_OK;
    case BP_ADD:
      for (i = 0; i < n; ++i) out[bp_element(y, i)] = a[bp_element(c->inputs[0], i)] + b[bp_element(c->inputs[1], i)];
      return STRATA_OK;
    case BP_SUB:
      for (i = 0; i < n; ++i) out[bp_element(y, i)] = a[bp_element(c->inputs[0], i)] - b[bp_element(c->inputs[1], i)];
      return STRATA_OK;
    case BP_MUL:
      for (i = 0; i < n; ++i) out[bp_element(y, i)] = a[bp_element(c->inputs[0], i)] * b[bp_element(c->inputs[1], i)];
      return STRATA_OK;
    case BP_SUM:
      sum_f32(c->inputs[0], y);
      return STRATA_OK;
    default:
      return tpc_fail(c->error, STRATA_ERROR_INTERNAL, "%s: %s: not computed by the common kernels", bp_name(), c->op);
  }
}

strata_status bp_compute_or(const strata_kernel_call* c, bp_kind own, strata_kernel_fn own_fn) {
  bp_kind kind = bp_kind_of(c);
  strata_status st;
  if (kind != own) return bp_compute(c);
  st = bp_check_call(c, kind);
  return st != STRATA_OK ? st : own_fn(c);
}

/* ---- the entry point ------------------------------------------------------------------ */

TPC_PLUGIN_ENTRY(&bp_table)
