/* grouped_plugin.c — a kernel that takes groups (STRATA_KERNEL_GROUPED,
 * strata_plugin.h): several applications of its op in one call.
 *
 * Device "grouped:0" (no streams). Its strata::sgd_step (f32) is registered
 * with STRATA_KERNEL_GROUPED: a call holds k >= 1 applications, inputs
 * (p, g) of application j at inputs[2j], inputs[2j+1] and its output at
 * outputs[j]. Each application is checked as a call of its own and computed
 * as the op's decomposition computes it in f32 (p - (g [+ p*wd]) * lr, the
 * scalars rounded to f32 first), element by element through its strides.
 * The kernel counts calls and applications, and checks the host's promise
 * that no two applications of a call share memory. Through the extension
 * "strata_tests.grouped_probe" v1 (grouped_probe.h) a test reads the counts
 * and makes the kernel decline or refuse groups. fill, copy, add, sub, mul
 * and neg (the decomposition's ops) come from the common code.
 */
#include "behaviour_common.h"
#include "grouped_probe.h"

#include <string.h>

#define GROUPED_NAME "grouped"

static uint64_t g_calls = 0, g_applications = 0, g_largest = 0, g_overlaps = 0;
static int32_t g_mode = GROUPED_RUN;

/* The elements [lo, hi) of its buffer that t may touch. */
static void extent(const strata_tensor* t, int64_t* lo, int64_t* hi) {
  int32_t d;
  *lo = t->offset;
  *hi = t->offset + 1;
  for (d = 0; d < t->rank; ++d) {
    int64_t reach = (t->shape[d] - 1) * t->strides[d];
    if (reach < 0) {
      *lo += reach;
    } else {
      *hi += reach;
    }
  }
}

static int overlap(const strata_tensor* a, const strata_tensor* b) {
  int64_t alo, ahi, blo, bhi;
  if (a->buffer != b->buffer || tpc_numel(a) == 0 || tpc_numel(b) == 0) return 0;
  extent(a, &alo, &ahi);
  extent(b, &blo, &bhi);
  return alo < bhi && blo < ahi;
}

/* Whether an operand of application j shares memory with one of l. */
static int applications_overlap(const strata_kernel_call* c, int32_t j, int32_t l) {
  const strata_tensor* x[3] = {c->inputs[2 * j], c->inputs[2 * j + 1], c->outputs[j]};
  const strata_tensor* y[3] = {c->inputs[2 * l], c->inputs[2 * l + 1], c->outputs[l]};
  int a, b;
  for (a = 0; a < 3; ++a) {
    for (b = 0; b < 3; ++b) {
      if (overlap(x[a], y[b])) return 1;
    }
  }
  return 0;
}

static double attr_float(const strata_kernel_call* c, const char* name, double fallback) {
  int32_t k;
  for (k = 0; k < c->n_attrs; ++k) {
    const strata_attr* a = c->attrs[k];
    if (a == NULL || a->struct_size < STRATA_ATTR_MIN_SIZE || a->name == NULL || strcmp(a->name, name) != 0) continue;
    if (a->kind == STRATA_ATTR_FLOAT) return a->f;
  }
  return fallback;
}

static strata_status grouped_sgd_step(const strata_kernel_call* c) {
  strata_kernel_call one;
  int32_t k, j, l;
  uint64_t largest;
  strata_status st;
  float lr, wd;
  if (c == NULL || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (c->n_outputs <= 0 || c->n_inputs != 2 * c->n_outputs) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: %d inputs and %d outputs are no group of (2 -> 1)",
                    GROUPED_NAME, c->op, (int)c->n_inputs, (int)c->n_outputs);
  }
  k = c->n_outputs;
  for (j = 0; j < k; ++j) {
    one = *c;
    one.inputs = c->inputs + 2 * j;
    one.n_inputs = 2;
    one.outputs = c->outputs + j;
    one.n_outputs = 1;
    st = bp_check_call(&one, BP_SGD_STEP);
    if (st != STRATA_OK) return st;
  }
  __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&g_applications, (uint64_t)k, __ATOMIC_RELAXED);
  largest = __atomic_load_n(&g_largest, __ATOMIC_RELAXED);
  while ((uint64_t)k > largest &&
         !__atomic_compare_exchange_n(&g_largest, &largest, (uint64_t)k, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  for (j = 0; j < k; ++j) {
    for (l = j + 1; l < k; ++l) {
      if (applications_overlap(c, j, l)) __atomic_add_fetch(&g_overlaps, 1, __ATOMIC_RELAXED);
    }
  }
  if (k > 1 && __atomic_load_n(&g_mode, __ATOMIC_RELAXED) == GROUPED_DECLINE) {
    return tpc_fail(c->error, STRATA_ERROR_UNSUPPORTED, "%s: declines groups (%d applications)", GROUPED_NAME, (int)k);
  }
  if (k > 1 && __atomic_load_n(&g_mode, __ATOMIC_RELAXED) == GROUPED_FAIL) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: refuses groups on purpose (%d applications)",
                    GROUPED_NAME, (int)k);
  }
  lr = (float)attr_float(c, "lr", 0.0);
  wd = (float)attr_float(c, "weight_decay", 0.0);
  for (j = 0; j < k; ++j) {
    const strata_tensor *pt = c->inputs[2 * j], *gt = c->inputs[2 * j + 1], *yt = c->outputs[j];
    const float *p = bp_f32(pt), *g = bp_f32(gt);
    float* y = bp_f32(yt);
    int64_t i, n = tpc_numel(yt);
    for (i = 0; i < n; ++i) {
      float value = p[bp_element(pt, i)], grad = g[bp_element(gt, i)];
      if (wd != 0.0f) grad = grad + value * wd;
      y[bp_element(yt, i)] = value - grad * lr;
    }
  }
  return STRATA_OK;
}

static strata_status grouped_kernel(const strata_kernel_call* c) {
  if (bp_kind_of(c) == BP_SGD_STEP) return grouped_sgd_step(c);
  return bp_compute(c);
}

static uint64_t probe_calls(void) { return __atomic_load_n(&g_calls, __ATOMIC_RELAXED); }
static uint64_t probe_applications(void) { return __atomic_load_n(&g_applications, __ATOMIC_RELAXED); }
static uint64_t probe_largest(void) { return __atomic_load_n(&g_largest, __ATOMIC_RELAXED); }
static uint64_t probe_overlaps(void) { return __atomic_load_n(&g_overlaps, __ATOMIC_RELAXED); }
static void probe_reset(void) {
  __atomic_store_n(&g_calls, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&g_applications, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&g_largest, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&g_overlaps, 0, __ATOMIC_RELAXED);
}
static void probe_set_mode(int32_t mode) { __atomic_store_n(&g_mode, mode, __ATOMIC_RELAXED); }

static const grouped_probe_extension kProbe = {
    {sizeof(grouped_probe_extension), GROUPED_PROBE_EXTENSION, GROUPED_PROBE_VERSION, NULL},
    probe_calls,
    probe_applications,
    probe_largest,
    probe_overlaps,
    probe_reset,
    probe_set_mode,
};

static const bp_kind kKernels[] = {BP_FILL, BP_COPY, BP_ADD, BP_SUB, BP_MUL, BP_NEG, BP_SGD_STEP};

const bp_plugin_desc bp_plugin = {BP_KERNELS(kKernels), .kernel = grouped_kernel};

const strata_plugin_api bp_table = BP_TABLE(GROUPED_NAME, &kProbe.base);
