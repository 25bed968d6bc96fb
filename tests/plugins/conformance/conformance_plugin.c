/* conformance_plugin.c — deliberately wrong plugins for `strata plugin check`.
 *
 * A small working f32 accelerator in C99, ABI 2.0, in the style of
 * mini_plugin.c (its own memory space, synchronous copies), with kernels for
 * strata::fill, strata::copy, strata::add, strata::sub, strata::mul and
 * strata::exp (f32). One source, one build per defect
 * (tests/plugins/conformance/CMakeLists.txt); CONF_NAME is the plugin's name:
 *
 *   wrongadd  -DCONF_WRONG_ADD: strata::add gives a + b + 1 for every element
 *             whose index is 3 modulo 7 (a wrong result, not an error)
 *   crashmul  -DCONF_CRASH_MUL: strata::mul raises SIGSEGV
 *   hangsub   -DCONF_HANG_SUB:  strata::sub never returns
 *   liar      -DCONF_LIAR:      claims strata::exp but its kernel writes
 *             nothing and returns STRATA_OK, and claims strata::log but
 *             declines every call with STRATA_ERROR_UNSUPPORTED
 *   readsalpha -DCONF_UNDECLARED_ATTR: strata::add looks for an attribute
 *             "alpha", which strata::add does not declare (it would add
 *             alpha·b if present; never, so its results are right)
 *
 * Everything else works, so that the checker's report names exactly the
 * defect. Without a CONF_* define the build is correct ("conformok").
 */
#include <strata/plugin/strata_ops.h>
#include <strata/plugin/strata_plugin.h>

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "../common/test_plugin_common.h"

#ifndef CONF_NAME
#define CONF_NAME "conformok"
#endif

#define CONF_MAGIC 0x434f4e46u

static tpc_state g_state = {0, NULL};

static int state_ok(strata_plugin_state s) { return tpc_state_ok(&g_state, CONF_MAGIC, s); }

static float* f32_at(const strata_tensor* t) { return (float*)((tpc_buffer*)t->buffer)->data + t->offset; }

/* ---- lifecycle and device ------------------------------------------------------- */

static strata_status conf_probe(strata_probe_args* args) {
  if (args == NULL || args->struct_size < STRATA_PROBE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  args->score = 5;
  return STRATA_OK;
}

static strata_status conf_init(strata_init_args* args) {
  if (args == NULL || args->struct_size < STRATA_INIT_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->host == NULL || args->host->struct_size < STRATA_HOST_API_MIN_SIZE) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, CONF_NAME ": init: host services too small");
  }
  g_state.magic = CONF_MAGIC;
  g_state.host = args->host;
  args->state = (strata_plugin_state)&g_state;
  args->device_count = 1;
  return STRATA_OK;
}

static void conf_shutdown(strata_plugin_state s) {
  if (state_ok(s)) g_state.magic = 0;
}

static strata_status conf_device_props(strata_device_args* args) {
  strata_device_props p;
  strata_status st = tpc_device_args_ok(args, &g_state, CONF_MAGIC, CONF_NAME, "device_props");
  if (st == STRATA_OK) st = tpc_props_ok(args, CONF_NAME);
  if (st != STRATA_OK) return st;
  tpc_props_init(&p, STRATA_DEVICE_ACCELERATOR, 0, UINT64_C(64) << 20, STRATA_DTYPE_BIT(STRATA_F32),
                 STRATA_DTYPE_BIT(STRATA_F32));
  snprintf(p.name, sizeof(p.name), "Conformance test accelerator (%s)", CONF_NAME);
  snprintf(p.compute_capability, sizeof(p.compute_capability), "conformance 1");
  (void)tpc_publish_props(args->props, &p);
  return STRATA_OK;
}

static strata_status conf_alloc(strata_alloc_args* args) {
  strata_status st;
  if (args == NULL || args->struct_size < STRATA_ALLOC_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!state_ok(args->state) || args->device != 0) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, CONF_NAME ": alloc: bad state or device %d", (int)args->device);
  }
  st = tpc_alloc(args, CONF_MAGIC, CONF_NAME);
  if (st == STRATA_ERROR_OUT_OF_MEMORY) {
    return tpc_fail(args->error, STRATA_ERROR_OUT_OF_MEMORY, CONF_NAME ": cannot allocate %zu bytes", args->bytes);
  }
  return st;
}

static void conf_free(strata_alloc_args* args) { (void)tpc_free(args, CONF_MAGIC); }

static strata_status conf_copy(strata_copy_args* args) {
  if (args == NULL || args->struct_size < STRATA_COPY_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!state_ok(args->state) || args->device != 0) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, CONF_NAME ": copy: bad state or device %d", (int)args->device);
  }
  return tpc_copy(args, CONF_MAGIC, CONF_NAME, NULL);
}

/* ---- kernels ------------------------------------------------------------------------- */

/* An f32 descriptor in one of this plugin's buffers, every element inside. */
static strata_status check_f32(const strata_kernel_call* c, const strata_tensor* t, const char* role) {
  tpc_buffer* b;
  int64_t last = 0;
  strata_status st = tpc_check_descriptor(c, t, CONF_NAME, role);
  if (st != STRATA_OK) return st;
  if (t->dtype != STRATA_F32) {
    return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED, CONF_NAME ": %s: %s is not f32", c->op, role);
  }
  st = tpc_check_extent(c, t, CONF_NAME, role, &last);
  if (st != STRATA_OK) return st;
  b = tpc_buffer_of(t->buffer, CONF_MAGIC);
  if (b == NULL || (size_t)(t->offset + last + 1) * sizeof(float) > b->bytes) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, CONF_NAME ": %s: %s reaches past its buffer", c->op, role);
  }
  return STRATA_OK;
}

static strata_status check_call(const strata_kernel_call* c, int32_t n_inputs) {
  int32_t k;
  strata_status st;
  if (c == NULL || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!state_ok(c->state) || c->device != 0 || c->op == NULL || c->user_data == NULL ||
      strcmp(c->op, (const char*)c->user_data) != 0) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, CONF_NAME ": kernel called with a foreign state, device or op");
  }
  if (c->n_inputs != n_inputs || c->n_outputs != 1 || (n_inputs > 0 && c->inputs == NULL) || c->outputs == NULL) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, CONF_NAME ": %s: %d inputs, %d outputs", c->op,
                    (int)c->n_inputs, (int)c->n_outputs);
  }
  st = check_f32(c, c->outputs[0], "output");
  for (k = 0; st == STRATA_OK && k < n_inputs; ++k) {
    st = check_f32(c, c->inputs[k], "input");
    if (st == STRATA_OK && c->inputs[k]->rank != c->outputs[0]->rank) {
      st = tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, CONF_NAME ": %s: input rank differs from the output's", c->op);
    }
  }
  return st;
}

static strata_status k_fill(const strata_kernel_call* c) {
  double value = 0.0;
  int64_t i, n;
  float* y;
  strata_status st = check_call(c, 0);
  if (st == STRATA_OK) st = tpc_fill_value(c, CONF_NAME, &value);
  if (st != STRATA_OK) return st;
  n = tpc_numel(c->outputs[0]);
  y = f32_at(c->outputs[0]);
  for (i = 0; i < n; ++i) y[tpc_strided_offset(c->outputs[0], i)] = (float)value;
  return STRATA_OK;
}

/* Inputs arrive compact; outputs too, except copy's, which may be strided. */
static strata_status k_copy(const strata_kernel_call* c) {
  int64_t i, n;
  float* dst;
  const float* src;
  strata_status st = check_call(c, 1);
  if (st != STRATA_OK) return st;
  n = tpc_numel(c->outputs[0]);
  dst = f32_at(c->outputs[0]);
  src = f32_at(c->inputs[0]);
  for (i = 0; i < n; ++i) dst[tpc_strided_offset(c->outputs[0], i)] = src[tpc_strided_offset(c->inputs[0], i)];
  return STRATA_OK;
}

enum conf_binary { CONF_ADD, CONF_SUB, CONF_MUL };

static strata_status binary(const strata_kernel_call* c, enum conf_binary which) {
  int64_t i, n;
  const float *a, *b;
  float* y;
  strata_status st = check_call(c, 2);
  if (st != STRATA_OK) return st;
  n = tpc_numel(c->outputs[0]);
  a = f32_at(c->inputs[0]);
  b = f32_at(c->inputs[1]);
  y = f32_at(c->outputs[0]);
  for (i = 0; i < n; ++i) {
    float x = a[tpc_strided_offset(c->inputs[0], i)], z = b[tpc_strided_offset(c->inputs[1], i)];
    float r = which == CONF_ADD ? x + z : which == CONF_SUB ? x - z : x * z;
#ifdef CONF_WRONG_ADD
    if (which == CONF_ADD && i % 7 == 3) r += 1.0f; /* the defect */
#endif
    y[tpc_strided_offset(c->outputs[0], i)] = r;
  }
  return STRATA_OK;
}

static strata_status k_add(const strata_kernel_call* c) {
#ifdef CONF_UNDECLARED_ATTR
  if (strata_kernel_attr(c, "alpha") != NULL) { /* the defect: a name strata::add does not declare */
    return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED, CONF_NAME ": add with alpha is not implemented");
  }
#endif
  return binary(c, CONF_ADD);
}

static strata_status k_sub(const strata_kernel_call* c) {
#ifdef CONF_HANG_SUB
  volatile int spin = 1; /* the defect: never returns */
  while (spin) {
  }
#endif
  return binary(c, CONF_SUB);
}

static strata_status k_mul(const strata_kernel_call* c) {
#ifdef CONF_CRASH_MUL
  if (c != NULL) raise(SIGSEGV); /* the defect */
#endif
  return binary(c, CONF_MUL);
}

static strata_status k_exp(const strata_kernel_call* c) {
  int64_t i, n;
  const float* x;
  float* y;
  strata_status st = check_call(c, 1);
  if (st != STRATA_OK) return st;
#ifdef CONF_LIAR
  return STRATA_OK; /* the defect: claims exp, computes nothing */
#endif
  n = tpc_numel(c->outputs[0]);
  x = f32_at(c->inputs[0]);
  y = f32_at(c->outputs[0]);
  for (i = 0; i < n; ++i) y[tpc_strided_offset(c->outputs[0], i)] = expf(x[tpc_strided_offset(c->inputs[0], i)]);
  return STRATA_OK;
}

#ifdef CONF_LIAR
/* The other lie: claims log, declines every call. */
static strata_status k_log(const strata_kernel_call* c) {
  strata_status st = check_call(c, 1);
  if (st != STRATA_OK) return st;
  return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED, CONF_NAME ": %s: not implemented", c->op);
}
#endif

#define CONF_ENTRY(op_, signature_, fn_)                                                                       \
  {                                                                                                            \
    .struct_size = sizeof(strata_kernel_entry), .op = (op_), .op_version = STRATA_OP_VERSION,                  \
    .signature = (signature_), .flags = 0, .fn = (fn_), .user_data = (op_)                                     \
  }

static const strata_kernel_entry kFill = CONF_ENTRY(STRATA_OP_FILL, "->f32", k_fill);
static const strata_kernel_entry kCopy = CONF_ENTRY(STRATA_OP_COPY, "f32->f32", k_copy);
static const strata_kernel_entry kAdd = CONF_ENTRY(STRATA_OP_ADD, "f32,f32->f32", k_add);
static const strata_kernel_entry kSub = CONF_ENTRY(STRATA_OP_SUB, "f32,f32->f32", k_sub);
static const strata_kernel_entry kMul = CONF_ENTRY(STRATA_OP_MUL, "f32,f32->f32", k_mul);
static const strata_kernel_entry kExp = CONF_ENTRY(STRATA_OP_EXP, "f32->f32", k_exp);
#ifdef CONF_LIAR
static const strata_kernel_entry kLog = CONF_ENTRY(STRATA_OP_LOG, "f32->f32", k_log);
static const strata_kernel_entry* const kEntries[] = {&kFill, &kCopy, &kAdd, &kSub, &kMul, &kExp, &kLog};
#else
static const strata_kernel_entry* const kEntries[] = {&kFill, &kCopy, &kAdd, &kSub, &kMul, &kExp};
#endif

static strata_status conf_get_kernels(strata_device_args* args) {
  strata_status st = tpc_device_args_ok(args, &g_state, CONF_MAGIC, CONF_NAME, "get_kernels");
  if (st != STRATA_OK) return st;
  args->entries = kEntries;
  args->n_entries = (int32_t)(sizeof(kEntries) / sizeof(kEntries[0]));
  return STRATA_OK;
}

static const strata_plugin_api kTable = {.struct_size = sizeof(strata_plugin_api),
                                         .abi_major = STRATA_ABI_MAJOR,
                                         .abi_minor = STRATA_ABI_MINOR,
                                         .min_host_minor = 0,
                                         .name = CONF_NAME,
                                         .vendor = "Strata tests",
                                         .version = "1.0.0",
                                         .probe = conf_probe,
                                         .init = conf_init,
                                         .shutdown = conf_shutdown,
                                         .device_props = conf_device_props,
                                         .get_kernels = conf_get_kernels,
                                         .alloc = conf_alloc,
                                         .free = conf_free,
                                         .copy = conf_copy};

TPC_PLUGIN_ENTRY(&kTable)
