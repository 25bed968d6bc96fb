/* mini_v1.c — tests/plugins/mini_plugin.c as it was for ABI 1.0, built
 * against a verbatim copy of the 1.0 header (abi1/strata/plugin/) as the test
 * plugin "badabi": a real plugin of another ABI major, which a 2.0 host must
 * refuse naming both versions. Unchanged from the 1.0 source but for the
 * entry point's first line (see there).
 *
 * Original description: a minimal working accelerator plugin in C99.
 *
 * It has its own memory space (buffers are handles the core cannot read)
 * and implements only fill, copy and add for f32, so that everything else
 * exercises the core's fallback policy. It is what the smallest third-party
 * backend looks like.
 */
#include <strata/plugin/strata_plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MINI_MAGIC 0x4d494e49u

typedef struct mini_buffer {
  uint32_t magic;
  size_t bytes;
  unsigned char* data;
} mini_buffer;

static const strata_host_api* g_host = NULL;

static mini_buffer* as_buffer(strata_buffer b) { return (mini_buffer*)b; }

static float* f32_at(const strata_tensor* t) { return (float*)as_buffer(t->buffer)->data + t->offset; }

static strata_status mini_init(const strata_host_api* host, const char* options, strata_plugin_state* out,
                               strata_error* error) {
  (void)error;
  g_host = host;
  if (options != NULL && strcmp(options, "{}") != 0 && host != NULL) {
    host->log(STRATA_LOG_DEBUG, "mini", "options ignored");
  }
  *out = NULL;
  return STRATA_OK;
}

static int32_t mini_score(strata_plugin_state s) {
  (void)s;
  return 5;
}

static int32_t mini_device_count(strata_plugin_state s) {
  (void)s;
  return 1;
}

static strata_status mini_props(strata_plugin_state s, int32_t d, strata_device_props* p, strata_error* e) {
  (void)s;
  (void)e;
  if (d != 0) return STRATA_ERROR_INVALID_ARGUMENT;
  memset(p, 0, sizeof(*p));
  p->struct_size = sizeof(*p);
  snprintf(p->name, sizeof(p->name), "Mini test accelerator");
  p->type = STRATA_DEVICE_ACCELERATOR;
  p->memory_bytes = 64u << 20;
  p->dtype_mask = STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_I64) | STRATA_DTYPE_BIT(STRATA_BOOL);
  p->compute_dtype_mask = STRATA_DTYPE_BIT(STRATA_F32);
  snprintf(p->compute_capability, sizeof(p->compute_capability), "mini 1");
  return STRATA_OK;
}

static strata_status mini_alloc(strata_plugin_state s, int32_t d, size_t n, strata_buffer* out, strata_error* e) {
  mini_buffer* b;
  (void)s;
  (void)d;
  b = (mini_buffer*)malloc(sizeof(mini_buffer));
  if (b == NULL) return STRATA_ERROR_OUT_OF_MEMORY;
  b->magic = MINI_MAGIC;
  b->bytes = n;
  b->data = (unsigned char*)calloc(n > 0 ? n : 1, 1);
  if (b->data == NULL) {
    free(b);
    snprintf(e->message, sizeof(e->message), "mini: cannot allocate %zu bytes", n);
    return STRATA_ERROR_OUT_OF_MEMORY;
  }
  *out = (strata_buffer)b;
  return STRATA_OK;
}

static void mini_free(strata_plugin_state s, int32_t d, strata_buffer buffer) {
  mini_buffer* b = as_buffer(buffer);
  (void)s;
  (void)d;
  if (b == NULL || b->magic != MINI_MAGIC) return;
  b->magic = 0;
  free(b->data);
  free(b);
}

static int in_bounds(strata_buffer buffer, size_t offset, size_t n, strata_error* e) {
  mini_buffer* b = as_buffer(buffer);
  if (b == NULL || b->magic != MINI_MAGIC || offset + n > b->bytes) {
    snprintf(e->message, sizeof(e->message), "mini: copy of %zu bytes at %zu outside the buffer", n, offset);
    return 0;
  }
  return 1;
}

static strata_status mini_h2d(strata_plugin_state s, int32_t d, strata_buffer dst, size_t off, const void* src,
                              size_t n, strata_stream st, strata_error* e) {
  (void)s; (void)d; (void)st;
  if (!in_bounds(dst, off, n, e)) return STRATA_ERROR_INVALID_ARGUMENT;
  memcpy(as_buffer(dst)->data + off, src, n);
  return STRATA_OK;
}

static strata_status mini_d2h(strata_plugin_state s, int32_t d, void* dst, strata_buffer src, size_t off, size_t n,
                              strata_stream st, strata_error* e) {
  (void)s; (void)d; (void)st;
  if (!in_bounds(src, off, n, e)) return STRATA_ERROR_INVALID_ARGUMENT;
  memcpy(dst, as_buffer(src)->data + off, n);
  return STRATA_OK;
}

static strata_status mini_d2d(strata_plugin_state s, int32_t d, strata_buffer dst, size_t doff, strata_buffer src,
                              size_t soff, size_t n, strata_stream st, strata_error* e) {
  (void)s; (void)d; (void)st;
  if (!in_bounds(dst, doff, n, e) || !in_bounds(src, soff, n, e)) return STRATA_ERROR_INVALID_ARGUMENT;
  memmove(as_buffer(dst)->data + doff, as_buffer(src)->data + soff, n);
  return STRATA_OK;
}

static int64_t numel(const strata_tensor* t) {
  int64_t n = 1;
  int32_t k;
  for (k = 0; k < t->rank; ++k) n *= t->shape[k];
  return n;
}

/* Offset of the i-th row-major element of a strided tensor. */
static int64_t strided_offset(const strata_tensor* t, int64_t i) {
  int64_t off = 0;
  int32_t k;
  for (k = t->rank - 1; k >= 0; --k) {
    off += (i % t->shape[k]) * t->strides[k];
    i /= t->shape[k];
  }
  return off;
}

static strata_status k_fill(const strata_kernel_context* c, const strata_tensor* in, int32_t ni,
                            const strata_tensor* out, int32_t no, const strata_attrs* attrs, strata_error* e) {
  float value = 0.0f;
  int64_t i, n = numel(&out[0]);
  int32_t k;
  (void)c; (void)in; (void)ni; (void)no; (void)e;
  for (k = 0; k < attrs->count; ++k) {
    if (strcmp(attrs->items[k].name, "value") == 0) value = (float)attrs->items[k].f;
  }
  for (i = 0; i < n; ++i) f32_at(&out[0])[i] = value;
  return STRATA_OK;
}

/* Inputs arrive compact (no STRATA_KERNEL_STRIDED_INPUTS); the output of copy may be strided. */
static strata_status k_copy(const strata_kernel_context* c, const strata_tensor* in, int32_t ni,
                            const strata_tensor* out, int32_t no, const strata_attrs* attrs, strata_error* e) {
  int64_t i, n = numel(&out[0]);
  float* dst = f32_at(&out[0]);
  const float* src = f32_at(&in[0]);
  (void)c; (void)ni; (void)no; (void)attrs; (void)e;
  for (i = 0; i < n; ++i) dst[strided_offset(&out[0], i)] = src[i];
  return STRATA_OK;
}

static strata_status k_add(const strata_kernel_context* c, const strata_tensor* in, int32_t ni,
                           const strata_tensor* out, int32_t no, const strata_attrs* attrs, strata_error* e) {
  int64_t i, n = numel(&out[0]);
  const float* a = f32_at(&in[0]);
  const float* b = f32_at(&in[1]);
  float* y = f32_at(&out[0]);
  (void)c; (void)ni; (void)no; (void)attrs; (void)e;
  for (i = 0; i < n; ++i) y[i] = a[i] + b[i];
  return STRATA_OK;
}

static const strata_kernel_entry kKernels[] = {
    {sizeof(strata_kernel_entry), "fill", "->f32", 0, k_fill},
    {sizeof(strata_kernel_entry), "copy", "f32->f32", 0, k_copy},
    {sizeof(strata_kernel_entry), "add", "f32,f32->f32", 0, k_add},
    {sizeof(strata_kernel_entry), "no_such_op", "f32->f32", 0, k_add}, /* ignored by the core */
};

static strata_status mini_kernels(strata_plugin_state s, int32_t d, const strata_kernel_entry** k, int32_t* n,
                                  strata_error* e) {
  (void)s; (void)d; (void)e;
  *k = kKernels;
  *n = (int32_t)(sizeof(kKernels) / sizeof(kKernels[0]));
  return STRATA_OK;
}

STRATA_PLUGIN_EXPORT const strata_plugin_api* strata_plugin_entry(uint32_t major, uint32_t minor) {
  static strata_plugin_api api;
  (void)minor;
  /* (test copy) The 1.0 original declined any other host major here
   * (`if (major != STRATA_ABI_MAJOR) return NULL;`); this copy answers every
   * host, so that a 2.0 host reads the table's ABI version and refuses it by
   * name, which is what the test checks. */
  (void)major;
  memset(&api, 0, sizeof(api));
  api.struct_size = sizeof(api);
  api.abi_major = STRATA_ABI_MAJOR;
  api.abi_minor = STRATA_ABI_MINOR;
  api.name = "mini";
  api.vendor = "Strata tests";
  api.version = "1.0.0";
  api.init = mini_init;
  api.score = mini_score;
  api.device_count = mini_device_count;
  api.device_props = mini_props;
  api.alloc = mini_alloc;
  api.free = mini_free;
  api.copy_h2d = mini_h2d;
  api.copy_d2h = mini_d2h;
  api.copy_d2d = mini_d2d;
  api.get_kernels = mini_kernels;
  return &api;
}
