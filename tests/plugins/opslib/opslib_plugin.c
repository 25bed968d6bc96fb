/* opslib_plugin.c — a test plugin that defines its own differentiable ops
 * through the host services of ABI 2.0 (strata_plugin.h, "Plugin-defined
 * ops"), in C99.
 *
 * It serves one device, opslib:0, an accelerator with its own memory space
 * (buffers are handles to malloc'd blocks the core cannot read) whose kernel
 * table holds strata::fill and strata::copy (f32, f64, i64, bool) and its own
 * ops; every other core op falls back to the CPU. In init it defines
 *
 *   opslib::cube(x; a)              y = a * x^3
 *       VJP  x̄ = cube_backward(ȳ, x; a)            JVP  ẏ = cube_backward(ẋ, x; a)
 *   opslib::cube_backward(g, x; a)  z = 3a * x^2 * g
 *       VJP  ḡ = cube_backward(z̄, x; a),  x̄ = scale(x * g * z̄; s = 6a)
 *       JVP  ż = cube_backward(ġ, x; a) + scale(x * g * ẋ; s = 6a)
 *   opslib::scale(x; s)             y = s * x   (no core op a derivative can
 *       VJP  x̄ = scale(ȳ; s)         JVP  ẏ = scale(ẋ; s)     reach takes a
 *                                                          scalar attribute)
 *   opslib::scale_bad_rule(x; s)    y = s * x   (own device, f64; its VJP hands
 *       call_op an attribute cut below STRATA_ATTR_MIN_SIZE, which the host
 *       must refuse: the backward pass fails with an error naming the call)
 *   opslib::misfit(x; s)            y = s * x   (f32, its own device and the
 *       CPU's) whose derivatives do not fit: the VJP returns the seed
 *       summed over dim 0, the JVP the tangent cast to f64. The host must
 *       refuse both results, naming op, rule, shapes and dtypes.
 *
 * Every derivative is a call of ops through host->call_op, recorded by the
 * host like any op, so the ops are differentiable to any order. It registers
 * kernels for the three ops on its own device and, through
 * host->register_kernels, on the CPU plugin's devices; those get CPU
 * buffers, whose addresses they ask for through the CPU plugin's
 * strata.native_handles extension (host->find_extension).
 *
 * It also checks six refusals the host must make, and carries on after
 * them: an op in another plugin's namespace ("cpu::evil"), a second
 * registration of opslib::cube, an op whose attribute schema is below its
 * minimum struct_size, one that declares an attribute name twice, one
 * with an attribute kind the ABI does not define, and one whose test
 * domain (ABI 2.3) is no interval. The host records each in
 * the plugin's warnings (PluginInfo::warnings).
 *
 * tests/runtime/plugin_ops_test.cpp is its test.
 */
#include <strata/plugin/strata_ops.h>
#include <strata/plugin/strata_plugin.h>

#include <stdio.h>
#include <string.h>

#include "../common/test_plugin_common.h"

#ifndef OPSLIB_NAME
#define OPSLIB_NAME "opslib"
#endif
#define OPSLIB_MAGIC 0x4f50534cu /* "OPSL" */
/* The contract version of the plugin's own ops. */
#define OPSLIB_OP_VERSION 1u

#define OPSLIB_OP_CUBE OPSLIB_NAME "::cube"
#define OPSLIB_OP_CUBE_BACKWARD OPSLIB_NAME "::cube_backward"
#define OPSLIB_OP_SCALE OPSLIB_NAME "::scale"
/* s·x like scale, but its derivative hands call_op a short attribute. */
#define OPSLIB_OP_SCALE_BAD_RULE OPSLIB_NAME "::scale_bad_rule"
/* s·x like scale, batched by its own rule (ABI 2.6, strata_op_schema::batch). */
#define OPSLIB_OP_SCALE_RULED OPSLIB_NAME "::scale_ruled"
/* s·x like scale, but its derivatives return results that do not fit. */
#define OPSLIB_OP_MISFIT OPSLIB_NAME "::misfit"

static tpc_state g_state = {0, NULL};

/* ---- helpers ------------------------------------------------------------------ */

static void opslib_log(strata_log_level level, const char* message) { tpc_log(&g_state, OPSLIB_NAME, level, message); }

static int state_ok(strata_plugin_state s) { return tpc_state_ok(&g_state, OPSLIB_MAGIC, s); }

static tpc_buffer* as_buffer(strata_buffer b) { return tpc_buffer_of(b, OPSLIB_MAGIC); }

static const char* dtype_name(strata_dtype dt) {
  switch (dt) {
    case STRATA_F32: return "f32";
    case STRATA_F64: return "f64";
    case STRATA_F16: return "f16";
    case STRATA_BF16: return "bf16";
    case STRATA_I32: return "i32";
    case STRATA_I64: return "i64";
    case STRATA_BOOL: return "bool";
    default: return "an unknown dtype";
  }
}

/* Bytes per element of the dtypes this device stores (0: not stored). */
static size_t element_size(strata_dtype dt) {
  switch (dt) {
    case STRATA_F32: return 4;
    case STRATA_F64: return 8;
    case STRATA_I64: return 8;
    case STRATA_BOOL: return 1;
    default: return 0;
  }
}

static int is_computed(strata_dtype dt) { return dt == STRATA_F32 || dt == STRATA_F64; }

/* The attribute `name` of an attribute array, or NULL. */
static const strata_attr* find_attr(const strata_attr* const* attrs, int32_t n, const char* name) {
  int32_t k;
  if (attrs == NULL) return NULL;
  for (k = 0; k < n; ++k) {
    const strata_attr* a = attrs[k];
    if (a != NULL && a->struct_size >= STRATA_ATTR_MIN_SIZE && a->name != NULL && strcmp(a->name, name) == 0) return a;
  }
  return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------ */

static strata_status opslib_probe(strata_probe_args* args) {
  if (args == NULL || args->struct_size < STRATA_PROBE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  /* Low (the CPU plugin says 50): a test device, never meant to win. */
  args->score = 10;
  return STRATA_OK;
}

static strata_status register_ops(const strata_host_api* host, strata_error* error);

static strata_status opslib_init(strata_init_args* args) {
  strata_status st;
  if (args == NULL || args->struct_size < STRATA_INIT_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->host == NULL || args->host->struct_size < STRATA_HOST_API_MIN_SIZE || args->host->register_op == NULL ||
      args->host->call_op == NULL || args->host->register_kernels == NULL || args->host->find_extension == NULL) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT,
                    OPSLIB_NAME ": init: host services of %zu bytes (need %zu, with register_op, call_op, "
                                "register_kernels and find_extension)",
                    args->host != NULL ? args->host->struct_size : (size_t)0, (size_t)STRATA_HOST_API_MIN_SIZE);
  }
  g_state.magic = OPSLIB_MAGIC;
  g_state.host = args->host;
  st = register_ops(args->host, args->error);
  if (st != STRATA_OK) {
    g_state.magic = 0;
    return st;
  }
  args->state = (strata_plugin_state)&g_state;
#ifdef OPSLIB_NO_DEVICE
  args->device_count = 0; /* an op library: kernels on the CPU plugin's devices only */
#else
  args->device_count = 1;
#endif
  return STRATA_OK;
}

static void opslib_shutdown(strata_plugin_state s) {
  if (state_ok(s)) g_state.magic = 0;
}

/* ---- the device ------------------------------------------------------------------ */

static strata_status device_args_ok(strata_device_args* args, const char* what) {
  return tpc_device_args_ok(args, &g_state, OPSLIB_MAGIC, OPSLIB_NAME, what);
}

static strata_status opslib_device_props(strata_device_args* args) {
  strata_device_props p;
  strata_status st = device_args_ok(args, "device_props");
  if (st == STRATA_OK) st = tpc_props_ok(args, OPSLIB_NAME);
  if (st != STRATA_OK) return st;
  tpc_props_init(&p, STRATA_DEVICE_ACCELERATOR, 0, UINT64_C(256) << 20,
                 STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_F64) | STRATA_DTYPE_BIT(STRATA_I64) |
                     STRATA_DTYPE_BIT(STRATA_BOOL),
                 STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_F64));
  snprintf(p.name, sizeof(p.name), "Opslib test accelerator");
  snprintf(p.compute_capability, sizeof(p.compute_capability), "opslib 1");
  (void)tpc_publish_props(args->props, &p);
  return STRATA_OK;
}

/* ---- memory --------------------------------------------------------------------- */

static strata_status opslib_alloc(strata_alloc_args* args) {
  strata_status st;
  if (args == NULL || args->struct_size < STRATA_ALLOC_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!state_ok(args->state) || args->device != 0) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, OPSLIB_NAME ": alloc: bad state or device %d",
                    (int)args->device);
  }
  st = tpc_alloc(args, OPSLIB_MAGIC, OPSLIB_NAME);
  if (st == STRATA_ERROR_OUT_OF_MEMORY) {
    return tpc_fail(args->error, STRATA_ERROR_OUT_OF_MEMORY, OPSLIB_NAME ": cannot allocate %zu bytes", args->bytes);
  }
  return st;
}

static void opslib_free(strata_alloc_args* args) { (void)tpc_free(args, OPSLIB_MAGIC); }

static strata_status opslib_copy(strata_copy_args* args) {
  if (args == NULL || args->struct_size < STRATA_COPY_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!state_ok(args->state) || args->device != 0) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, OPSLIB_NAME ": copy: bad state or device %d",
                    (int)args->device);
  }
  /* synchronous: an ASYNC copy may complete at once */
  return tpc_copy(args, OPSLIB_MAGIC, OPSLIB_NAME, NULL);
}

/* ---- kernels -------------------------------------------------------------------- */

typedef enum opslib_kernel_kind {
  KERNEL_FILL,
  KERNEL_COPY,
  KERNEL_CUBE,
  KERNEL_CUBE_BACKWARD,
  KERNEL_SCALE
} opslib_kernel_kind;

typedef enum opslib_memory {
  MEMORY_OWN, /* opslib:0: tpc_buffer handles                               */
  MEMORY_CPU  /* a CPU plugin's device: addresses from its native handles   */
} opslib_memory;

/* What each kernel entry's user_data points at (not const: user_data is a
 * plain void*). */
typedef struct opslib_kernel_info {
  const char* op;
  uint32_t op_version;
  opslib_kernel_kind kind;
  int32_t n_inputs;
  opslib_memory memory;
} opslib_kernel_info;

static opslib_kernel_info g_fill = {STRATA_OP_FILL, STRATA_OP_VERSION, KERNEL_FILL, 0, MEMORY_OWN};
static opslib_kernel_info g_copy = {STRATA_OP_COPY, STRATA_OP_VERSION, KERNEL_COPY, 1, MEMORY_OWN};
static opslib_kernel_info g_cube = {OPSLIB_OP_CUBE, OPSLIB_OP_VERSION, KERNEL_CUBE, 1, MEMORY_OWN};
static opslib_kernel_info g_cube_bw = {OPSLIB_OP_CUBE_BACKWARD, OPSLIB_OP_VERSION, KERNEL_CUBE_BACKWARD, 2,
                                             MEMORY_OWN};
static opslib_kernel_info g_scale = {OPSLIB_OP_SCALE, OPSLIB_OP_VERSION, KERNEL_SCALE, 1, MEMORY_OWN};
static opslib_kernel_info g_bad_rule = {OPSLIB_OP_SCALE_BAD_RULE, OPSLIB_OP_VERSION, KERNEL_SCALE, 1, MEMORY_OWN};
static opslib_kernel_info g_cpu_cube = {OPSLIB_OP_CUBE, OPSLIB_OP_VERSION, KERNEL_CUBE, 1, MEMORY_CPU};
static opslib_kernel_info g_cpu_cube_bw = {OPSLIB_OP_CUBE_BACKWARD, OPSLIB_OP_VERSION, KERNEL_CUBE_BACKWARD, 2,
                                                 MEMORY_CPU};
static opslib_kernel_info g_cpu_scale = {OPSLIB_OP_SCALE, OPSLIB_OP_VERSION, KERNEL_SCALE, 1, MEMORY_CPU};
static opslib_kernel_info g_scale_ruled = {OPSLIB_OP_SCALE_RULED, OPSLIB_OP_VERSION, KERNEL_SCALE, 1, MEMORY_OWN};
static opslib_kernel_info g_cpu_scale_ruled = {OPSLIB_OP_SCALE_RULED, OPSLIB_OP_VERSION, KERNEL_SCALE, 1,
                                               MEMORY_CPU};
static opslib_kernel_info g_misfit = {OPSLIB_OP_MISFIT, OPSLIB_OP_VERSION, KERNEL_SCALE, 1, MEMORY_OWN};
static opslib_kernel_info g_cpu_misfit = {OPSLIB_OP_MISFIT, OPSLIB_OP_VERSION, KERNEL_SCALE, 1, MEMORY_CPU};

#define MAX_OPERANDS 3 /* inputs + the output */

/* One kernel call, checked, with the address of element 0 of each operand's
 * buffer (the descriptor's offset is added per element). */
typedef struct opslib_operands {
  const strata_tensor* t[MAX_OPERANDS]; /* inputs, then the output */
  unsigned char* base[MAX_OPERANDS];
  int32_t count;
} opslib_operands;

/* A descriptor every element of which lies inside `bytes` bytes (when known)
 * and whose dtype this kernel handles. */
static strata_status check_tensor(const strata_kernel_call* c, const strata_tensor* t, const char* role, size_t bytes,
                                  int bytes_known) {
  int64_t last = 0;
  size_t es;
  strata_status st = tpc_check_descriptor(c, t, OPSLIB_NAME, role);
  if (st != STRATA_OK) return st;
  es = element_size(t->dtype);
  if (es == 0) {
    return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED, OPSLIB_NAME ": %s: %s has dtype %s, which opslib does not handle",
                    c->op, role, dtype_name(t->dtype));
  }
  st = tpc_check_extent(c, t, OPSLIB_NAME, role, &last);
  if (st != STRATA_OK) return st;
  if (bytes_known && (size_t)(t->offset + last + 1) * es > bytes) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT,
                    OPSLIB_NAME ": %s: %s (offset %lld) reaches past its buffer of %zu bytes", c->op, role,
                    (long long)t->offset, bytes);
  }
  return STRATA_OK;
}

/* Address of a CPU plugin's buffer, through its strata.native_handles v1. */
static strata_status cpu_pointer(const strata_kernel_call* c, strata_buffer buffer, const char* role, unsigned char** out) {
  const strata_extension* e;
  const strata_ext_native_handles* nh;
  strata_native_args na;
  strata_status st;
  if (c->host == NULL || c->host->struct_size < STRATA_HOST_API_MIN_SIZE || c->host->find_extension == NULL) {
    return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED, OPSLIB_NAME ": %s: the kernel call carries no find_extension",
                    c->op);
  }
  e = c->host->find_extension("cpu", STRATA_EXT_NATIVE_HANDLES, 1);
  if (e == NULL || e->struct_size < sizeof(strata_ext_native_handles) || e->version < 1) {
    return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED,
                    OPSLIB_NAME ": %s: the cpu plugin offers no " STRATA_EXT_NATIVE_HANDLES
                                " v1 extension (find_extension returned %s), so its buffers cannot be read",
                    c->op, e == NULL ? "NULL" : "a struct too small");
  }
  nh = (const strata_ext_native_handles*)e;
  if (nh->buffer_pointer == NULL) {
    return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED, OPSLIB_NAME ": %s: the cpu plugin's " STRATA_EXT_NATIVE_HANDLES
                                                        " has no buffer_pointer", c->op);
  }
  memset(&na, 0, sizeof(na));
  na.struct_size = sizeof(na);
  na.state = c->state;
  na.device = c->device;
  na.buffer = buffer;
  na.error = c->error;
  st = nh->buffer_pointer(&na);
  if (st != STRATA_OK) return st; /* the cpu plugin wrote the message */
  if (na.handle == NULL || (na.api != NULL && strcmp(na.api, "host") != 0)) {
    return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED,
                    OPSLIB_NAME ": %s: the cpu plugin gave the %s buffer as %s pointer %p; a host address is needed",
                    c->op, role, na.api != NULL ? na.api : "(no api)", na.handle);
  }
  *out = (unsigned char*)na.handle;
  return STRATA_OK;
}

/* The checks every kernel makes before touching its call, and the operands'
 * addresses. */
static strata_status prepare_call(const strata_kernel_call* c, opslib_operands* o) {
  const opslib_kernel_info* info;
  int32_t k;
  strata_status st;
  if (c == NULL || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  info = (const opslib_kernel_info*)c->user_data;
  if (info != &g_fill && info != &g_copy && info != &g_cube && info != &g_cube_bw && info != &g_scale &&
      info != &g_bad_rule && info != &g_cpu_cube && info != &g_cpu_cube_bw && info != &g_cpu_scale &&
      info != &g_misfit && info != &g_cpu_misfit && info != &g_scale_ruled && info != &g_cpu_scale_ruled) {
    return tpc_fail(c->error, STRATA_ERROR_INTERNAL, OPSLIB_NAME ": %s: user_data %p is none of this plugin's entries",
                    c->op != NULL ? c->op : "(null)", c->user_data);
  }
  if (c->op == NULL || strcmp(c->op, info->op) != 0 || c->op_version != info->op_version) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, OPSLIB_NAME ": kernel of %s v%u called as %s v%u",
                    info->op, (unsigned)info->op_version, c->op != NULL ? c->op : "(null)", (unsigned)c->op_version);
  }
  if (info->memory == MEMORY_OWN && (!state_ok(c->state) || c->device != 0)) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, OPSLIB_NAME ": %s: bad state or device %d", c->op,
                    (int)c->device);
  }
  if (c->n_inputs != info->n_inputs || c->n_outputs != 1 || (c->n_inputs > 0 && c->inputs == NULL) ||
      c->outputs == NULL) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, OPSLIB_NAME ": %s: %d inputs and %d outputs, expected %d and 1",
                    c->op, (int)c->n_inputs, (int)c->n_outputs, (int)info->n_inputs);
  }
  o->count = info->n_inputs + 1;
  for (k = 0; k < o->count; ++k) {
    const strata_tensor* t = k < info->n_inputs ? c->inputs[k] : c->outputs[0];
    const char* role = k < info->n_inputs ? "input" : "output";
    if (info->memory == MEMORY_OWN) {
      tpc_buffer* b = as_buffer(t != NULL && t->struct_size >= STRATA_TENSOR_MIN_SIZE ? t->buffer : NULL);
      if (b == NULL) {
        return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, OPSLIB_NAME ": %s: %s %d is not an opslib buffer",
                        c->op, role, (int)k);
      }
      st = check_tensor(c, t, role, b->bytes, 1);
      if (st != STRATA_OK) return st;
      o->base[k] = b->data;
    } else {
      st = check_tensor(c, t, role, 0, 0);
      if (st == STRATA_OK) st = cpu_pointer(c, t->buffer, role, &o->base[k]);
      if (st != STRATA_OK) return st;
    }
    o->t[k] = t;
  }
  /* Every input has the output's dtype and shape (the shape rules say so). */
  for (k = 0; k + 1 < o->count; ++k) {
    const strata_tensor* in = o->t[k];
    const strata_tensor* out = o->t[o->count - 1];
    int32_t d;
    int same = in->dtype == out->dtype && in->rank == out->rank;
    for (d = 0; same && d < in->rank; ++d) same = in->shape[d] == out->shape[d];
    if (!same) {
      return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT,
                      OPSLIB_NAME ": %s: input %d (%s, rank %d) does not match the output (%s, rank %d)", c->op,
                      (int)k, dtype_name(in->dtype), (int)in->rank, dtype_name(out->dtype), (int)out->rank);
    }
  }
  if ((info->kind == KERNEL_CUBE || info->kind == KERNEL_CUBE_BACKWARD || info->kind == KERNEL_SCALE) &&
      !is_computed(o->t[o->count - 1]->dtype)) {
    return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED, OPSLIB_NAME ": %s: dtype %s (only f32 and f64 are computed)",
                    c->op, dtype_name(o->t[o->count - 1]->dtype));
  }
  return STRATA_OK;
}

/* A FLOAT attribute of a kernel call. */
static strata_status float_attr(const strata_kernel_call* c, const char* name, double* value) {
  const strata_attr* a = find_attr(c->attrs, c->n_attrs, name);
  if (a == NULL) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, OPSLIB_NAME ": %s: missing attribute '%s'", c->op, name);
  }
  if (a->kind != STRATA_ATTR_FLOAT) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, OPSLIB_NAME ": %s: attribute '%s' has kind %d, not FLOAT",
                    c->op, name, (int)a->kind);
  }
  *value = a->f;
  return STRATA_OK;
}

static double load(const opslib_operands* o, int32_t k, int64_t i) {
  const strata_tensor* t = o->t[k];
  int64_t at = t->offset + tpc_strided_offset(t, i);
  return t->dtype == STRATA_F32 ? (double)((const float*)o->base[k])[at] : ((const double*)o->base[k])[at];
}

static void store(const opslib_operands* o, int32_t k, int64_t i, double v) {
  const strata_tensor* t = o->t[k];
  int64_t at = t->offset + tpc_strided_offset(t, i);
  if (t->dtype == STRATA_F32) {
    ((float*)o->base[k])[at] = (float)v;
  } else {
    ((double*)o->base[k])[at] = v;
  }
}

/* opslib::cube, cube_backward and scale, on either memory. */
static strata_status k_elementwise(const strata_kernel_call* c) {
  opslib_operands o;
  const opslib_kernel_info* info;
  double a = 0.0;
  int64_t i, n;
  int32_t out;
  strata_status st = prepare_call(c, &o);
  if (st != STRATA_OK) return st;
  info = (const opslib_kernel_info*)c->user_data;
  st = float_attr(c, info->kind == KERNEL_SCALE ? "s" : "a", &a);
  if (st != STRATA_OK) return st;
  out = o.count - 1;
  n = tpc_numel(o.t[out]);
  switch (info->kind) {
    case KERNEL_CUBE:
      for (i = 0; i < n; ++i) {
        double x = load(&o, 0, i);
        store(&o, out, i, a * x * x * x);
      }
      break;
    case KERNEL_CUBE_BACKWARD:
      for (i = 0; i < n; ++i) {
        double g = load(&o, 0, i), x = load(&o, 1, i);
        store(&o, out, i, 3.0 * a * x * x * g);
      }
      break;
    case KERNEL_SCALE:
      for (i = 0; i < n; ++i) store(&o, out, i, a * load(&o, 0, i));
      break;
    default:
      return tpc_fail(c->error, STRATA_ERROR_INTERNAL, OPSLIB_NAME ": %s: not an elementwise kernel", c->op);
  }
  return STRATA_OK;
}

/* strata::fill's "value" is an exact SCALAR: I64/BOOL in i, F64 in f. */
static strata_status k_fill(const strata_kernel_call* c) {
  opslib_operands o;
  const strata_attr* a;
  const strata_tensor* y;
  double real = 0.0;
  int64_t integer = 0, i, n;
  strata_status st = prepare_call(c, &o);
  if (st != STRATA_OK) return st;
  a = find_attr(c->attrs, c->n_attrs, "value");
  if (a == NULL || a->kind != STRATA_ATTR_SCALAR) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, OPSLIB_NAME ": %s: attribute 'value' %s", c->op,
                    a == NULL ? "is missing" : "must be SCALAR");
  }
  if (a->scalar_dtype == STRATA_F64) {
    real = a->f;
    integer = (int64_t)a->f;
  } else if (a->scalar_dtype == STRATA_I64 || a->scalar_dtype == STRATA_BOOL) {
    integer = a->i;
    real = (double)a->i;
  } else {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, OPSLIB_NAME ": %s: 'value' has scalar dtype %s", c->op,
                    dtype_name(a->scalar_dtype));
  }
  y = o.t[0];
  n = tpc_numel(y);
  for (i = 0; i < n; ++i) {
    int64_t at = y->offset + tpc_strided_offset(y, i);
    switch (y->dtype) {
      case STRATA_F32: ((float*)o.base[0])[at] = (float)real; break;
      case STRATA_F64: ((double*)o.base[0])[at] = real; break;
      case STRATA_I64: ((int64_t*)o.base[0])[at] = integer; break;
      case STRATA_BOOL: o.base[0][at] = (unsigned char)(a->scalar_dtype == STRATA_F64 ? real != 0.0 : integer != 0); break;
      default: return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED, OPSLIB_NAME ": %s: dtype %s", c->op, dtype_name(y->dtype));
    }
  }
  return STRATA_OK;
}

/* strata::copy: compact input (no STRIDED_INPUTS flag), any strided output. */
static strata_status k_copy(const strata_kernel_call* c) {
  opslib_operands o;
  size_t es;
  int64_t i, n;
  strata_status st = prepare_call(c, &o);
  if (st != STRATA_OK) return st;
  es = element_size(o.t[1]->dtype);
  n = tpc_numel(o.t[1]);
  for (i = 0; i < n; ++i) {
    int64_t from = o.t[0]->offset + tpc_strided_offset(o.t[0], i);
    int64_t to = o.t[1]->offset + tpc_strided_offset(o.t[1], i);
    memmove(o.base[1] + (size_t)to * es, o.base[0] + (size_t)from * es, es);
  }
  return STRATA_OK;
}

#define ENTRY(name_, op_, version_, signature_, fn_, info_)                                                    \
  static const strata_kernel_entry name_ = {.struct_size = sizeof(strata_kernel_entry), .op = (op_),            \
                                            .op_version = (version_), .signature = (signature_), .flags = 0, \
                                            .fn = (fn_), .user_data = (info_)}

/* opslib:0 */
ENTRY(kFillF32, STRATA_OP_FILL, STRATA_OP_VERSION, "->f32", k_fill, &g_fill);
ENTRY(kFillF64, STRATA_OP_FILL, STRATA_OP_VERSION, "->f64", k_fill, &g_fill);
ENTRY(kFillI64, STRATA_OP_FILL, STRATA_OP_VERSION, "->i64", k_fill, &g_fill);
ENTRY(kFillBool, STRATA_OP_FILL, STRATA_OP_VERSION, "->bool", k_fill, &g_fill);
ENTRY(kCopyF32, STRATA_OP_COPY, STRATA_OP_VERSION, "f32->f32", k_copy, &g_copy);
ENTRY(kCopyF64, STRATA_OP_COPY, STRATA_OP_VERSION, "f64->f64", k_copy, &g_copy);
ENTRY(kCopyI64, STRATA_OP_COPY, STRATA_OP_VERSION, "i64->i64", k_copy, &g_copy);
ENTRY(kCopyBool, STRATA_OP_COPY, STRATA_OP_VERSION, "bool->bool", k_copy, &g_copy);
ENTRY(kCubeF32, OPSLIB_OP_CUBE, OPSLIB_OP_VERSION, "f32->f32", k_elementwise, &g_cube);
ENTRY(kCubeF64, OPSLIB_OP_CUBE, OPSLIB_OP_VERSION, "f64->f64", k_elementwise, &g_cube);
ENTRY(kCubeBwF32, OPSLIB_OP_CUBE_BACKWARD, OPSLIB_OP_VERSION, "f32,f32->f32", k_elementwise, &g_cube_bw);
ENTRY(kCubeBwF64, OPSLIB_OP_CUBE_BACKWARD, OPSLIB_OP_VERSION, "f64,f64->f64", k_elementwise, &g_cube_bw);
ENTRY(kScaleF32, OPSLIB_OP_SCALE, OPSLIB_OP_VERSION, "f32->f32", k_elementwise, &g_scale);
ENTRY(kScaleF64, OPSLIB_OP_SCALE, OPSLIB_OP_VERSION, "f64->f64", k_elementwise, &g_scale);
ENTRY(kScaleRuledF32, OPSLIB_OP_SCALE_RULED, OPSLIB_OP_VERSION, "f32->f32", k_elementwise, &g_scale_ruled);
ENTRY(kScaleRuledF64, OPSLIB_OP_SCALE_RULED, OPSLIB_OP_VERSION, "f64->f64", k_elementwise, &g_scale_ruled);
ENTRY(kBadRuleF64, OPSLIB_OP_SCALE_BAD_RULE, OPSLIB_OP_VERSION, "f64->f64", k_elementwise, &g_bad_rule);
ENTRY(kMisfitF32, OPSLIB_OP_MISFIT, OPSLIB_OP_VERSION, "f32->f32", k_elementwise, &g_misfit);

static const strata_kernel_entry* const kEntries[] = {&kFillF32, &kFillF64,  &kFillI64,   &kFillBool, &kCopyF32,
                                                      &kCopyF64, &kCopyI64,  &kCopyBool,  &kCubeF32,  &kCubeF64,
                                                      &kCubeBwF32, &kCubeBwF64, &kScaleF32, &kScaleF64,
                                                      &kBadRuleF64, &kMisfitF32, &kScaleRuledF32, &kScaleRuledF64};

/* The CPU plugin's devices (host->register_kernels). */
ENTRY(kCpuCubeF32, OPSLIB_OP_CUBE, OPSLIB_OP_VERSION, "f32->f32", k_elementwise, &g_cpu_cube);
ENTRY(kCpuCubeF64, OPSLIB_OP_CUBE, OPSLIB_OP_VERSION, "f64->f64", k_elementwise, &g_cpu_cube);
ENTRY(kCpuCubeBwF32, OPSLIB_OP_CUBE_BACKWARD, OPSLIB_OP_VERSION, "f32,f32->f32", k_elementwise, &g_cpu_cube_bw);
ENTRY(kCpuCubeBwF64, OPSLIB_OP_CUBE_BACKWARD, OPSLIB_OP_VERSION, "f64,f64->f64", k_elementwise, &g_cpu_cube_bw);
ENTRY(kCpuScaleF32, OPSLIB_OP_SCALE, OPSLIB_OP_VERSION, "f32->f32", k_elementwise, &g_cpu_scale);
ENTRY(kCpuScaleF64, OPSLIB_OP_SCALE, OPSLIB_OP_VERSION, "f64->f64", k_elementwise, &g_cpu_scale);
ENTRY(kCpuScaleRuledF32, OPSLIB_OP_SCALE_RULED, OPSLIB_OP_VERSION, "f32->f32", k_elementwise, &g_cpu_scale_ruled);
ENTRY(kCpuScaleRuledF64, OPSLIB_OP_SCALE_RULED, OPSLIB_OP_VERSION, "f64->f64", k_elementwise, &g_cpu_scale_ruled);
ENTRY(kCpuMisfitF32, OPSLIB_OP_MISFIT, OPSLIB_OP_VERSION, "f32->f32", k_elementwise, &g_cpu_misfit);

static const strata_kernel_entry* const kCpuEntries[] = {&kCpuCubeF32,   &kCpuCubeF64,  &kCpuCubeBwF32,
                                                         &kCpuCubeBwF64, &kCpuScaleF32, &kCpuScaleF64,
                                                         &kCpuMisfitF32, &kCpuScaleRuledF32, &kCpuScaleRuledF64};

static strata_status opslib_get_kernels(strata_device_args* args) {
  strata_status st = device_args_ok(args, "get_kernels");
  if (st != STRATA_OK) return st;
  args->entries = kEntries;
  args->n_entries = (int32_t)(sizeof(kEntries) / sizeof(kEntries[0]));
  return STRATA_OK;
}

/* ---- shape rules ------------------------------------------------------------------ */

static strata_status infer_args_ok(strata_infer_args* args, int32_t n_inputs) {
  int32_t k;
  if (args == NULL || args->struct_size < STRATA_INFER_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->n_inputs != n_inputs || args->n_outputs != 1 || args->inputs == NULL || args->outputs == NULL ||
      args->outputs[0] == NULL || args->outputs[0]->struct_size < STRATA_TENSOR_META_MIN_SIZE) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %d inputs and %d outputs, expected %d and 1",
                    args->op != NULL ? args->op : OPSLIB_NAME, (int)args->n_inputs, (int)args->n_outputs,
                    (int)n_inputs);
  }
  for (k = 0; k < n_inputs; ++k) {
    const strata_tensor_meta* m = args->inputs[k];
    if (m == NULL || m->struct_size < STRATA_TENSOR_META_MIN_SIZE || m->rank < 0 || m->rank > STRATA_MAX_RANK) {
      return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: malformed metadata of input %d", args->op,
                      (int)k);
    }
    if (!is_computed(m->dtype)) {
      return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT,
                      "%s is defined for floating dtypes only (f32, f64), but input %d has dtype %s", args->op,
                      (int)k, dtype_name(m->dtype));
    }
  }
  return STRATA_OK;
}

static void copy_meta(strata_tensor_meta* out, const strata_tensor_meta* in) {
  int32_t d;
  out->dtype = in->dtype;
  out->rank = in->rank;
  for (d = 0; d < in->rank; ++d) out->shape[d] = in->shape[d];
}

/* cube and scale: y has x's dtype and shape. */
static strata_status infer_unary(strata_infer_args* args) {
  strata_status st = infer_args_ok(args, 1);
  if (st != STRATA_OK) return st;
  copy_meta(args->outputs[0], args->inputs[0]);
  return STRATA_OK;
}

/* cube_backward: g and x of one dtype and shape, z like them. */
static strata_status infer_cube_backward(strata_infer_args* args) {
  const strata_tensor_meta *g, *x;
  int32_t d;
  int same;
  strata_status st = infer_args_ok(args, 2);
  if (st != STRATA_OK) return st;
  g = args->inputs[0];
  x = args->inputs[1];
  same = g->dtype == x->dtype && g->rank == x->rank;
  for (d = 0; same && d < g->rank; ++d) same = g->shape[d] == x->shape[d];
  if (!same) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT,
                    "%s needs g and x of one dtype and shape (no promotion, no broadcasting): g is %s of rank %d, "
                    "x is %s of rank %d",
                    args->op, dtype_name(g->dtype), (int)g->rank, dtype_name(x->dtype), (int)x->rank);
  }
  copy_meta(args->outputs[0], x);
  return STRATA_OK;
}

/* ---- derivatives, as calls of ops ---------------------------------------------------- */

static strata_status derivative_args_ok(strata_derivative_args* d, int32_t n_inputs) {
  if (d == NULL || d->struct_size < STRATA_DERIVATIVE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (d->host == NULL || d->host->struct_size < STRATA_HOST_API_MIN_SIZE || d->host->call_op == NULL) {
    return tpc_fail(d->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: no call_op in the host services", d->op);
  }
  if (d->n_inputs != n_inputs || d->inputs == NULL || d->results == NULL || d->n_seeds < 0 ||
      (d->n_seeds > 0 && d->seeds == NULL)) {
    return tpc_fail(d->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: a derivative with %d inputs, expected %d", d->op,
                    (int)d->n_inputs, (int)n_inputs);
  }
  return STRATA_OK;
}

static strata_value seed(const strata_derivative_args* d, int32_t k) { return k < d->n_seeds ? d->seeds[k] : NULL; }
static int needed(const strata_derivative_args* d, int32_t k) { return d->needed == NULL || d->needed[k] != 0; }

/* host->call_op of a one-output op, with at most one attribute. */
static strata_status call_op1(const strata_host_api* host, strata_error* error, const char* op, strata_value a,
                              strata_value b, const strata_attr* attr, strata_value* out) {
  strata_value inputs[2];
  const strata_attr* attrs[1];
  strata_call_op_args args;
  inputs[0] = a;
  inputs[1] = b;
  attrs[0] = attr;
  memset(&args, 0, sizeof(args));
  args.struct_size = sizeof(args);
  args.op = op;
  args.inputs = inputs;
  args.n_inputs = b != NULL ? 2 : 1;
  args.attrs = attr != NULL ? attrs : NULL;
  args.n_attrs = attr != NULL ? 1 : 0;
  args.outputs = out;
  args.n_outputs = 1;
  args.error = error;
  *out = NULL;
  return host->call_op(&args);
}

/* One call of `op` from a derivative rule: a (and b when not NULL), one attribute. */
static strata_status call1(strata_derivative_args* d, const char* op, strata_value a, strata_value b,
                           const strata_attr* attr, strata_value* out) {
  return call_op1(d->host, d->error, op, a, b, attr, out);
}

/* A FLOAT attribute of a derivative's op (the host checked the schema). */
static strata_status derivative_attr(strata_derivative_args* d, const char* name, const strata_attr** out) {
  const strata_attr* a = find_attr(d->attrs, d->n_attrs, name);
  if (a == NULL || a->kind != STRATA_ATTR_FLOAT) {
    return tpc_fail(d->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: derivative without FLOAT attribute '%s'", d->op, name);
  }
  *out = a;
  return STRATA_OK;
}

static strata_attr scale_attr(double s) {
  strata_attr a;
  memset(&a, 0, sizeof(a));
  a.struct_size = sizeof(a);
  a.name = "s";
  a.kind = STRATA_ATTR_FLOAT;
  a.scalar_dtype = STRATA_F64;
  a.f = s;
  return a;
}

/* x̄ = cube_backward(ȳ, x; a) = 3a·x²·ȳ */
static strata_status cube_vjp(strata_derivative_args* d) {
  const strata_attr* a = NULL;
  strata_status st = derivative_args_ok(d, 1);
  if (st == STRATA_OK) st = derivative_attr(d, "a", &a);
  if (st != STRATA_OK) return st;
  d->results[0] = NULL;
  if (seed(d, 0) == NULL || !needed(d, 0)) return STRATA_OK;
#ifdef OPSLIB_WRONG_VJP /* the wrongvjp fixture of `strata plugin check`: 1 % off */
  {
    strata_attr off = *a;
    off.f *= 1.01;
    return call1(d, OPSLIB_OP_CUBE_BACKWARD, seed(d, 0), d->inputs[0], &off, &d->results[0]);
  }
#else
  return call1(d, OPSLIB_OP_CUBE_BACKWARD, seed(d, 0), d->inputs[0], a, &d->results[0]);
#endif
}

/* ẏ = cube_backward(ẋ, x; a) */
static strata_status cube_jvp(strata_derivative_args* d) {
  const strata_attr* a = NULL;
  strata_status st = derivative_args_ok(d, 1);
  if (st == STRATA_OK) st = derivative_attr(d, "a", &a);
  if (st != STRATA_OK) return st;
  d->results[0] = NULL;
  if (seed(d, 0) == NULL) return STRATA_OK;
#ifdef OPSLIB_WRONG_JVP /* the wrongjvp fixture of `strata plugin check`: 1 % off */
  {
    strata_attr off = *a;
    off.f *= 1.01;
    return call1(d, OPSLIB_OP_CUBE_BACKWARD, seed(d, 0), d->inputs[0], &off, &d->results[0]);
  }
#else
  return call1(d, OPSLIB_OP_CUBE_BACKWARD, seed(d, 0), d->inputs[0], a, &d->results[0]);
#endif
}

/* 6a·x·g·w, the derivative of z = 3a·x²·g in x applied to w. */
static strata_status cube_backward_dx(strata_derivative_args* d, const strata_attr* a, strata_value w, strata_value* out) {
  strata_value xg = NULL, xgw = NULL;
  strata_attr six_a = scale_attr(6.0 * a->f);
  strata_status st = call1(d, STRATA_OP_MUL, d->inputs[1], d->inputs[0], NULL, &xg);
  if (st == STRATA_OK) st = call1(d, STRATA_OP_MUL, xg, w, NULL, &xgw);
  if (st == STRATA_OK) st = call1(d, OPSLIB_OP_SCALE, xgw, NULL, &six_a, out);
  return st;
}

/* ḡ = cube_backward(z̄, x; a) = 3a·x²·z̄;  x̄ = scale(x·g·z̄; 6a) */
static strata_status cube_backward_vjp(strata_derivative_args* d) {
  const strata_attr* a = NULL;
  strata_value zbar;
  strata_status st = derivative_args_ok(d, 2);
  if (st == STRATA_OK) st = derivative_attr(d, "a", &a);
  if (st != STRATA_OK) return st;
  d->results[0] = NULL;
  d->results[1] = NULL;
  zbar = seed(d, 0);
  if (zbar == NULL) return STRATA_OK;
  if (needed(d, 0)) st = call1(d, OPSLIB_OP_CUBE_BACKWARD, zbar, d->inputs[1], a, &d->results[0]);
  if (st == STRATA_OK && needed(d, 1)) st = cube_backward_dx(d, a, zbar, &d->results[1]);
  return st;
}

/* ż = cube_backward(ġ, x; a) + scale(x·g·ẋ; 6a) (either term absent when
 * its tangent is zero) */
static strata_status cube_backward_jvp(strata_derivative_args* d) {
  const strata_attr* a = NULL;
  strata_value from_g = NULL, from_x = NULL;
  strata_status st = derivative_args_ok(d, 2);
  if (st == STRATA_OK) st = derivative_attr(d, "a", &a);
  if (st != STRATA_OK) return st;
  d->results[0] = NULL;
  if (seed(d, 0) != NULL) st = call1(d, OPSLIB_OP_CUBE_BACKWARD, seed(d, 0), d->inputs[1], a, &from_g);
  if (st == STRATA_OK && seed(d, 1) != NULL) st = cube_backward_dx(d, a, seed(d, 1), &from_x);
  if (st != STRATA_OK) return st;
  if (from_g != NULL && from_x != NULL) return call1(d, STRATA_OP_ADD, from_g, from_x, NULL, &d->results[0]);
  d->results[0] = from_g != NULL ? from_g : from_x;
  return STRATA_OK;
}

/* scale is linear: both rules scale the seed again (with the op itself). */
static strata_status scale_derivative(strata_derivative_args* d) {
  const strata_attr* s = NULL;
  strata_status st = derivative_args_ok(d, 1);
  if (st == STRATA_OK) st = derivative_attr(d, "s", &s);
  if (st != STRATA_OK) return st;
  d->results[0] = NULL;
  if (seed(d, 0) == NULL || !needed(d, 0)) return STRATA_OK;
  return call1(d, d->op, seed(d, 0), NULL, s, &d->results[0]);
}

/* scale_bad_rule's VJP: scale(seed; s) through call_op, but with its
 * attribute cut to 8 bytes (below STRATA_ATTR_MIN_SIZE). The host must
 * refuse the call, naming it, and the backward pass fails cleanly. */
static strata_status scale_bad_rule_vjp(strata_derivative_args* d) {
  const strata_attr* s = NULL;
  strata_attr cut;
  strata_status st = derivative_args_ok(d, 1);
  if (st == STRATA_OK) st = derivative_attr(d, "s", &s);
  if (st != STRATA_OK) return st;
  d->results[0] = NULL;
  if (seed(d, 0) == NULL || !needed(d, 0)) return STRATA_OK;
  cut = *s;
  cut.struct_size = 8;
  return call1(d, OPSLIB_OP_SCALE, seed(d, 0), NULL, &cut, &d->results[0]);
}

/* misfit's VJP: the seed summed over dim 0 (kept as size 1); for an input
 * of more than one row the gradient does not have the input's shape, and
 * the host must refuse it. */
static strata_status misfit_vjp(strata_derivative_args* d) {
  static const int64_t kDim0[] = {0};
  strata_attr dims;
  strata_status st = derivative_args_ok(d, 1);
  if (st != STRATA_OK) return st;
  d->results[0] = NULL;
  if (seed(d, 0) == NULL || !needed(d, 0)) return STRATA_OK;
  memset(&dims, 0, sizeof(dims));
  dims.struct_size = sizeof(dims);
  dims.name = "dims";
  dims.kind = STRATA_ATTR_INTS;
  dims.ints = kDim0;
  dims.count = 1;
  return call1(d, STRATA_OP_SUM, seed(d, 0), NULL, &dims, &d->results[0]);
}

/* misfit's JVP: the tangent cast to f64, for an f32 output: the host must
 * refuse the dtype. */
static strata_status misfit_jvp(strata_derivative_args* d) {
  strata_attr dtype;
  strata_status st = derivative_args_ok(d, 1);
  if (st != STRATA_OK) return st;
  d->results[0] = NULL;
  if (seed(d, 0) == NULL) return STRATA_OK;
  memset(&dtype, 0, sizeof(dtype));
  dtype.struct_size = sizeof(dtype);
  dtype.name = "dtype";
  dtype.kind = STRATA_ATTR_DTYPE;
  dtype.i = STRATA_F64;
  return call1(d, STRATA_OP_CAST, seed(d, 0), NULL, &dtype, &d->results[0]);
}

/* scale_ruled's batching rule (ABI 2.6): scale is elementwise, so the lanes
 * are scaled in one call of the op itself. As fixtures of the host's
 * handling it declines for s < 0 (the host loops over the lanes) and, for
 * s == 7, returns the lanes summed over dim 0, which lacks the lanes' dim
 * (the host must refuse it, naming the rule). */
static strata_status scale_ruled_batch(strata_batch_args* b) {
  const strata_attr* s;
  strata_status st;
  if (b == NULL || b->struct_size < STRATA_BATCH_ARGS_MIN_SIZE || b->n_inputs != 1 || b->n_results != 1 ||
      b->inputs == NULL || b->batched == NULL || b->results == NULL || b->host == NULL) {
    return STRATA_ERROR_INVALID_ARGUMENT;
  }
  b->results[0] = NULL;
  s = find_attr(b->attrs, b->n_attrs, "s");
  if (s == NULL || s->kind != STRATA_ATTR_FLOAT) {
    return tpc_fail(b->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: batching rule without FLOAT attribute 's'", b->op);
  }
  if (s->f < 0.0) return STRATA_OK; /* declined */
  st = call_op1(b->host, b->error, OPSLIB_OP_SCALE_RULED, b->inputs[0], NULL, s, &b->results[0]);
  if (st == STRATA_OK && s->f == 7.0) {
    static const int64_t kDim0[] = {0};
    strata_attr dims;
    strata_value lanes = b->results[0];
    memset(&dims, 0, sizeof(dims));
    dims.struct_size = sizeof(dims);
    dims.name = "dims";
    dims.kind = STRATA_ATTR_INTS;
    dims.ints = kDim0;
    dims.count = 1;
    st = call_op1(b->host, b->error, STRATA_OP_SUM, lanes, NULL, &dims, &b->results[0]);
  }
  return st;
}

/* ---- registration ----------------------------------------------------------------------- */

static const strata_attr_schema kAttrA = {sizeof(strata_attr_schema), "a", STRATA_ATTR_FLOAT, 1};
static const strata_attr_schema kAttrS = {sizeof(strata_attr_schema), "s", STRATA_ATTR_FLOAT, 1};
static const strata_attr_schema* const kAttrsA[] = {&kAttrA};
static const strata_attr_schema* const kAttrsS[] = {&kAttrS};

static const strata_op_schema kCubeSchema = {
    .struct_size = sizeof(strata_op_schema),
    .name = OPSLIB_OP_CUBE,
    .version = OPSLIB_OP_VERSION,
    .n_inputs = 1,
    .n_outputs = 1,
    .attrs = kAttrsA,
    .n_attrs = 1,
    .infer = infer_unary,
    .vjp = cube_vjp,
    .jvp = cube_jvp,
    .user_data = NULL,
    .doc = "y = a * x^3 (test op of the opslib plugin)",
    /* ABI 2.3: where `strata plugin check` draws its inputs (the others
     * declare none and get the checker's default). */
    .domain_low = 0.25,
    .domain_high = 2.0,
    /* ABI 2.5: elementwise, so leading dims are independent (vmap runs it
     * once on the lanes; scale declares nothing and runs lane by lane). */
    .batching = STRATA_OP_BATCH_LEADING_DIMS};

static const strata_op_schema kCubeBackwardSchema = {
    .struct_size = sizeof(strata_op_schema),
    .name = OPSLIB_OP_CUBE_BACKWARD,
    .version = OPSLIB_OP_VERSION,
    .n_inputs = 2,
    .n_outputs = 1,
    .attrs = kAttrsA,
    .n_attrs = 1,
    .infer = infer_cube_backward,
    .vjp = cube_backward_vjp,
    .jvp = cube_backward_jvp,
    .user_data = NULL,
    .doc = "z = 3a * x^2 * g, the gradient of opslib::cube (inputs g, x)",
    .batching = STRATA_OP_BATCH_LEADING_DIMS};

static const strata_op_schema kScaleSchema = {
    .struct_size = sizeof(strata_op_schema),
    .name = OPSLIB_OP_SCALE,
    .version = OPSLIB_OP_VERSION,
    .n_inputs = 1,
    .n_outputs = 1,
    .attrs = kAttrsS,
    .n_attrs = 1,
    .infer = infer_unary,
    .vjp = scale_derivative,
    .jvp = scale_derivative,
    .user_data = NULL,
    .doc = "y = s * x"};

static const strata_op_schema kScaleRuledSchema = {
    .struct_size = sizeof(strata_op_schema),
    .name = OPSLIB_OP_SCALE_RULED,
    .version = OPSLIB_OP_VERSION,
    .n_inputs = 1,
    .n_outputs = 1,
    .attrs = kAttrsS,
    .n_attrs = 1,
    .infer = infer_unary,
    .vjp = scale_derivative,
    .jvp = scale_derivative,
    .user_data = NULL,
    .doc = "y = s * x, batched under vmap by its own rule (declines for s < 0)",
    .batch = scale_ruled_batch};

static const strata_op_schema kScaleBadRuleSchema = {
    .struct_size = sizeof(strata_op_schema),
    .name = OPSLIB_OP_SCALE_BAD_RULE,
    .version = OPSLIB_OP_VERSION,
    .n_inputs = 1,
    .n_outputs = 1,
    .attrs = kAttrsS,
    .n_attrs = 1,
    .infer = infer_unary,
    .vjp = scale_bad_rule_vjp,
    .jvp = NULL,
    .user_data = NULL,
    .doc = "y = s * x, whose VJP passes call_op a short attribute (test of the host's refusal)"};

static const strata_op_schema kMisfitSchema = {
    .struct_size = sizeof(strata_op_schema),
    .name = OPSLIB_OP_MISFIT,
    .version = OPSLIB_OP_VERSION,
    .n_inputs = 1,
    .n_outputs = 1,
    .attrs = kAttrsS,
    .n_attrs = 1,
    .infer = infer_unary,
    .vjp = misfit_vjp,
    .jvp = misfit_jvp,
    .user_data = NULL,
    .doc = "y = s * x, whose VJP and JVP return results that do not fit (test of the host's checks)"};

/* Schemas the host must refuse (the plugin carries on after each): all
 * unary, without rules. */
#define REFUSED_SCHEMA_IN(var_, name_, attrs_, n_attrs_, low_, high_)                                           \
  static const strata_op_schema var_ = {.struct_size = sizeof(strata_op_schema), .name = (name_), .version = 1,    \
                                        .n_inputs = 1, .n_outputs = 1, .attrs = (attrs_), .n_attrs = (n_attrs_),   \
                                        .infer = infer_unary, .vjp = NULL, .jvp = NULL, .user_data = NULL,         \
                                        .doc = "must never be defined", .domain_low = (low_), .domain_high = (high_)}
#define REFUSED_SCHEMA(var_, name_, attrs_, n_attrs_) REFUSED_SCHEMA_IN(var_, name_, attrs_, n_attrs_, 0.0, 0.0)

/* An op in the CPU plugin's namespace. */
REFUSED_SCHEMA(kEvilSchema, "cpu::evil", NULL, 0);

/* An op whose one attribute schema is cut below STRATA_ATTR_SCHEMA_MIN_SIZE
 * (a writer that forgot `required`). */
static const strata_attr_schema kShortAttr = {
    .struct_size = STRATA_SIZE_UP_TO(strata_attr_schema, kind), .name = "s", .kind = STRATA_ATTR_FLOAT, .required = 1};
static const strata_attr_schema* const kShortAttrs[] = {&kShortAttr};
REFUSED_SCHEMA(kShortAttrSchema, OPSLIB_NAME "::short_attr", kShortAttrs, 1);

/* Two attributes of one name, and an attribute kind the ABI does not define. */
static const strata_attr_schema* const kTwiceAttrs[] = {&kAttrS, &kAttrS};
REFUSED_SCHEMA(kTwiceAttrSchema, OPSLIB_NAME "::twice_attr", kTwiceAttrs, 2);
static const strata_attr_schema kAlienKindAttr = {sizeof(strata_attr_schema), "s", (strata_attr_kind)99, 1};
static const strata_attr_schema* const kAlienKindAttrs[] = {&kAlienKindAttr};
REFUSED_SCHEMA(kAlienKindSchema, OPSLIB_NAME "::alien_kind", kAlienKindAttrs, 1);

/* A test domain that is no interval (ABI 2.3): [2, 1]. */
REFUSED_SCHEMA_IN(kEmptyDomainSchema, OPSLIB_NAME "::empty_domain", NULL, 0, 2.0, 1.0);

/* A batching property the ABI does not define (2.5): 7. */
static const strata_op_schema kAlienBatchingSchema = {
    .struct_size = sizeof(strata_op_schema), .name = OPSLIB_NAME "::alien_batching", .version = 1, .n_inputs = 1,
    .n_outputs = 1, .infer = infer_unary, .doc = "must never be defined", .batching = 7};

static strata_status register_ops(const strata_host_api* host, strata_error* error) {
  static const strata_op_schema* const kOps[] = {&kCubeSchema,         &kCubeBackwardSchema, &kScaleSchema,
                                                  &kScaleBadRuleSchema, &kMisfitSchema,       &kScaleRuledSchema};
  static const strata_op_schema* const kRefused[] = {&kEvilSchema,        &kCubeSchema,
                                                      &kShortAttrSchema,   &kTwiceAttrSchema,
                                                      &kAlienKindSchema,   &kEmptyDomainSchema,
                                                      &kAlienBatchingSchema};
  strata_kernel_registration reg;
  strata_error refusal;
  strata_status st;
  size_t k;
  for (k = 0; k < sizeof(kOps) / sizeof(kOps[0]); ++k) {
    st = host->register_op(kOps[k], error);
    if (st != STRATA_OK) return st; /* the host wrote why */
  }
  /* Refusals the host must make (a second registration of cube among them);
   * the plugin carries on after each. Not in the builds that are fixtures
   * of `strata plugin check`, whose manifest check would name them. */
#ifdef OPSLIB_CHECK_FIXTURE
  (void)kRefused;
  (void)refusal;
  if (0)
#endif
  for (k = 0; k < sizeof(kRefused) / sizeof(kRefused[0]); ++k) {
    memset(&refusal, 0, sizeof(refusal));
    refusal.struct_size = sizeof(refusal);
    if (host->register_op(kRefused[k], &refusal) == STRATA_OK) {
      opslib_log(STRATA_LOG_ERROR, "the host accepted a schema it must refuse:");
      opslib_log(STRATA_LOG_ERROR, kRefused[k]->name);
    } else {
      opslib_log(STRATA_LOG_DEBUG, refusal.message);
    }
  }
  /* Kernels for the CPU plugin's devices. */
  memset(&reg, 0, sizeof(reg));
  reg.struct_size = sizeof(reg);
  reg.plugin_name = "cpu";
  reg.entries = kCpuEntries;
  reg.n_entries = (int32_t)(sizeof(kCpuEntries) / sizeof(kCpuEntries[0]));
  return host->register_kernels(&reg, error);
}

/* ---- cases of its own for `strata plugin check` (strata.test_cases) ------------------------ */

#ifdef OPSLIB_CHECK_FIXTURE
/* cube outside its declared domain [0.25, 2], where the checker draws none,
 * with the values it must give (a = 2: y = 2x^3) and its derivatives. */
static const int64_t kShape4[] = {4};
static const double kCubeX[] = {-2.0, -1.0, 0.5, 3.0};
static const double kCubeY[] = {-16.0, -2.0, 0.25, 54.0};
static const strata_test_tensor kCubeIn = {sizeof(strata_test_tensor), STRATA_F64, 1, kShape4, kCubeX};
static const strata_test_tensor kCubeOut = {sizeof(strata_test_tensor), STRATA_F64, 1, kShape4, kCubeY};
static const strata_test_tensor* const kCubeIns[] = {&kCubeIn};
static const strata_test_tensor* const kCubeOuts[] = {&kCubeOut};
static const strata_attr kA2 = {.struct_size = sizeof(strata_attr), .name = "a", .kind = STRATA_ATTR_FLOAT, .f = 2.0};
static const strata_attr* const kAttrsA2[] = {&kA2};
/* scale in f32 with a negative factor, compared with cpu:0 (no expected). */
static const int64_t kShape23[] = {2, 3};
static const double kScaleX[] = {-1.5, -0.25, 0.0, 0.75, 1.0, 2.5};
static const strata_test_tensor kScaleIn = {sizeof(strata_test_tensor), STRATA_F32, 2, kShape23, kScaleX};
static const strata_test_tensor* const kScaleIns[] = {&kScaleIn};
static const strata_attr kSHalf = {
    .struct_size = sizeof(strata_attr), .name = "s", .kind = STRATA_ATTR_FLOAT, .f = -0.5};
static const strata_attr* const kAttrsSHalf[] = {&kSHalf};

#define OPSLIB_CASE(var_, name_, op_, ins_, n_ins_, attrs_, expected_, n_expected_, flags_)                         \
  static const strata_test_case var_ = {.struct_size = sizeof(strata_test_case), .name = (name_), .op = (op_),     \
                                        .inputs = (ins_), .n_inputs = (n_ins_), .attrs = (attrs_), .n_attrs = 1,   \
                                        .expected = (expected_), .n_expected = (n_expected_), .rtol = 0.0,         \
                                        .atol = 0.0, .flags = (flags_)}

OPSLIB_CASE(kCubeCase, "cube beyond its domain", OPSLIB_OP_CUBE, kCubeIns, 1, kAttrsA2, kCubeOuts, 1,
            STRATA_TEST_CASE_DERIVATIVES);
OPSLIB_CASE(kScaleCase, "scale by -0.5 in f32", OPSLIB_OP_SCALE, kScaleIns, 1, kAttrsSHalf, NULL, 0, 0u);

#ifdef OPSLIB_BAD_CASES
/* The badcases build: besides the two good cases, one whose expected value
 * is wrong (54 written 55), one with a rank the ABI does not allow, and one
 * that names an op nobody defined. Each must fail its own row only. */
static const double kCubeWrongY[] = {-16.0, -2.0, 0.25, 55.0};
static const strata_test_tensor kCubeWrongOut = {sizeof(strata_test_tensor), STRATA_F64, 1, kShape4, kCubeWrongY};
static const strata_test_tensor* const kCubeWrongOuts[] = {&kCubeWrongOut};
static const strata_test_tensor kRank9 = {sizeof(strata_test_tensor), STRATA_F64, 9, kShape4, kCubeX};
static const strata_test_tensor* const kRank9Ins[] = {&kRank9};
OPSLIB_CASE(kWrongCase, "cube, a wrong expectation", OPSLIB_OP_CUBE, kCubeIns, 1, kAttrsA2, kCubeWrongOuts, 1, 0u);
OPSLIB_CASE(kRank9Case, "cube of rank 9", OPSLIB_OP_CUBE, kRank9Ins, 1, kAttrsA2, NULL, 0, 0u);
OPSLIB_CASE(kNoOpCase, "an op nobody defined", OPSLIB_NAME "::nope", kCubeIns, 1, kAttrsA2, NULL, 0, 0u);
/* What the host must refuse field by field: a bool of 2, a complex dtype,
 * a second case of one name, a negative tolerance, inputs counted but not
 * given, a NULL in the array, and a dtype of -1. */
static const double kTwo[] = {2.0};
static const int64_t kShape1[] = {1};
static const strata_test_tensor kBoolTwo = {sizeof(strata_test_tensor), STRATA_BOOL, 1, kShape1, kTwo};
static const strata_test_tensor kComplex = {sizeof(strata_test_tensor), STRATA_C64, 1, kShape1, kTwo};
static const strata_test_tensor* const kBoolTwoIns[] = {&kBoolTwo};
static const strata_test_tensor* const kComplexIns[] = {&kComplex};
/* A dtype no enumerator names, as a C plugin may store it: the host reads
 * the field's bits, never the C++ enum (found by fuzz_test_cases). */
static const strata_test_tensor kNegativeDtype = {sizeof(strata_test_tensor), (strata_dtype)-1, 1, kShape1, kTwo};
static const strata_test_tensor* const kNegativeDtypeIns[] = {&kNegativeDtype};
OPSLIB_CASE(kBoolTwoCase, "a bool of 2", OPSLIB_OP_CUBE, kBoolTwoIns, 1, kAttrsA2, NULL, 0, 0u);
OPSLIB_CASE(kComplexCase, "a complex input", OPSLIB_OP_CUBE, kComplexIns, 1, kAttrsA2, NULL, 0, 0u);
OPSLIB_CASE(kNegativeDtypeCase, "a dtype of -1", OPSLIB_OP_CUBE, kNegativeDtypeIns, 1, kAttrsA2, NULL, 0, 0u);
OPSLIB_CASE(kTwiceCase, "cube beyond its domain", OPSLIB_OP_CUBE, kCubeIns, 1, kAttrsA2, NULL, 0, 0u);
static const strata_test_case kNegativeTolCase = {.struct_size = sizeof(strata_test_case), .name = "a negative rtol",
                                                  .op = OPSLIB_OP_CUBE, .inputs = kCubeIns, .n_inputs = 1,
                                                  .attrs = kAttrsA2, .n_attrs = 1, .expected = kCubeOuts,
                                                  .n_expected = 1, .rtol = -1.0, .atol = 0.0, .flags = 0u};
static const strata_test_case kNoInputsCase = {.struct_size = sizeof(strata_test_case), .name = "inputs not given",
                                               .op = OPSLIB_OP_CUBE, .inputs = NULL, .n_inputs = 2,
                                               .attrs = kAttrsA2, .n_attrs = 1, .expected = NULL,
                                               .n_expected = 0, .rtol = 0.0, .atol = 0.0, .flags = 0u};
static const strata_test_case* const kCases[] = {&kCubeCase,    &kWrongCase,       &kRank9Case,    &kNoOpCase,
                                                 &kScaleCase,   &kBoolTwoCase,     &kComplexCase,  &kTwiceCase,
                                                 &kNegativeTolCase, &kNoInputsCase, NULL, &kNegativeDtypeCase};
#else
static const strata_test_case* const kCases[] = {&kCubeCase, &kScaleCase};
#endif

static const strata_ext_test_cases kTestCases = {
    .base = {sizeof(strata_ext_test_cases), STRATA_EXT_TEST_CASES, STRATA_EXT_TEST_CASES_VERSION, NULL},
    .cases = kCases,
    .n_cases = (int32_t)(sizeof(kCases) / sizeof(kCases[0]))};
#define OPSLIB_EXTENSIONS (&kTestCases.base)
#else
#define OPSLIB_EXTENSIONS NULL
#endif

/* ---- the table ---------------------------------------------------------------------------- */

static const strata_plugin_api kTable = {.struct_size = sizeof(strata_plugin_api),
                                         .abi_major = STRATA_ABI_MAJOR,
                                         .abi_minor = STRATA_ABI_MINOR,
                                         .min_host_minor = 0,
                                         .name = OPSLIB_NAME,
                                         .vendor = "Strata tests",
                                         .version = "1.0.0",
                                         .probe = opslib_probe,
                                         .init = opslib_init,
                                         .shutdown = opslib_shutdown,
                                         .device_props = opslib_device_props,
                                         .get_kernels = opslib_get_kernels,
                                         .alloc = opslib_alloc,
                                         .free = opslib_free,
                                         .copy = opslib_copy,
                                         .extensions = OPSLIB_EXTENSIONS};

TPC_PLUGIN_ENTRY(&kTable)
