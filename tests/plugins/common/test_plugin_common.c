/* test_plugin_common.c — the code the C test plugins share (see
 * test_plugin_common.h). C99; compiled into each plugin, against whichever
 * ABI 2.x header that plugin is built with.
 */
#include "test_plugin_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

strata_status tpc_fail(strata_error* e, strata_status status, const char* format, ...) {
  if (e != NULL && e->struct_size >= STRATA_ERROR_MIN_SIZE) {
    va_list args;
    va_start(args, format);
    vsnprintf(e->message, sizeof(e->message), format, args);
    va_end(args);
  }
  return status;
}

/* ---- state ------------------------------------------------------------------------ */

int tpc_state_ok(const tpc_state* state, uint32_t magic, strata_plugin_state s) {
  return (const void*)s == (const void*)state && state->magic == magic;
}

void tpc_log(const tpc_state* state, const char* name, strata_log_level level, const char* message) {
  const strata_host_api* host = state->host;
  if (host != NULL && STRATA_HAS_FIELD(host, strata_host_api, log) && host->log != NULL) {
    host->log(level, name, message);
  }
}

strata_status tpc_device_args_ok_of(strata_device_args* args, const tpc_state* state, uint32_t magic,
                                    const char* name, const char* what, int32_t devices) {
  if (args == NULL || args->struct_size < STRATA_DEVICE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!tpc_state_ok(state, magic, args->state)) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: not my state", name, what);
  }
  if (args->device < 0 || args->device >= devices) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: no device %d (%d device%s)", name, what,
                    (int)args->device, (int)devices, devices == 1 ? "" : "s");
  }
  return STRATA_OK;
}

strata_status tpc_device_args_ok(strata_device_args* args, const tpc_state* state, uint32_t magic, const char* name,
                                 const char* what) {
  return tpc_device_args_ok_of(args, state, magic, name, what, 1);
}

/* ---- device props -------------------------------------------------------------------- */

strata_status tpc_props_ok(strata_device_args* args, const char* name) {
  if (args->props == NULL || args->props->struct_size < STRATA_DEVICE_PROPS_MIN_SIZE) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: device_props: props of %zu bytes, need %zu", name,
                    args->props != NULL ? args->props->struct_size : (size_t)0, (size_t)STRATA_DEVICE_PROPS_MIN_SIZE);
  }
  return STRATA_OK;
}

void tpc_props_init(strata_device_props* p, strata_device_type type, uint32_t flags, uint64_t memory_bytes,
                    uint64_t dtype_mask, uint64_t compute_dtype_mask) {
  memset(p, 0, sizeof(*p));
  p->struct_size = sizeof(*p);
  p->type = type;
  p->flags = flags;
  p->memory_bytes = memory_bytes;
  p->dtype_mask = dtype_mask;
  p->compute_dtype_mask = compute_dtype_mask;
}

size_t tpc_publish_props(strata_device_props* out, const strata_device_props* p) {
  size_t capacity = out->struct_size;
  size_t bytes = sizeof(*p) < capacity ? sizeof(*p) : capacity;
  memcpy(out, p, bytes);
  out->struct_size = bytes;
  return bytes;
}

/* ---- memory ------------------------------------------------------------------------- */

tpc_buffer* tpc_buffer_of(strata_buffer buffer, uint32_t magic) {
  tpc_buffer* b = (tpc_buffer*)buffer;
  return (b != NULL && b->magic == magic) ? b : NULL;
}

tpc_buffer* tpc_buffer_new(size_t bytes, uint32_t magic) {
  tpc_buffer* b = (tpc_buffer*)malloc(sizeof(tpc_buffer));
  if (b != NULL) b->data = (unsigned char*)calloc(bytes > 0 ? bytes : 1, 1);
  if (b == NULL || b->data == NULL) {
    free(b);
    return NULL;
  }
  b->magic = magic;
  b->bytes = bytes;
  return b;
}

size_t tpc_buffer_delete(strata_buffer buffer, uint32_t magic) {
  tpc_buffer* b = tpc_buffer_of(buffer, magic);
  size_t bytes;
  if (b == NULL) return 0;
  bytes = b->bytes;
  b->magic = 0;
  free(b->data);
  free(b);
  return bytes;
}

int tpc_buffer_fits(strata_buffer buffer, uint32_t magic, size_t offset, size_t n) {
  tpc_buffer* b = tpc_buffer_of(buffer, magic);
  return b != NULL && offset <= b->bytes && n <= b->bytes - offset;
}

strata_status tpc_alloc(strata_alloc_args* args, uint32_t magic, const char* name) {
  tpc_buffer* b;
  if (args->kind != STRATA_MEMORY_DEVICE && args->kind != STRATA_MEMORY_PINNED_HOST) {
    return tpc_fail(args->error, STRATA_ERROR_UNSUPPORTED, "%s: alloc: memory kind %d", name, (int)args->kind);
  }
  b = tpc_buffer_new(args->bytes, magic);
  if (b == NULL) return STRATA_ERROR_OUT_OF_MEMORY;
  args->buffer = (strata_buffer)b;
  args->host_pointer = args->kind == STRATA_MEMORY_PINNED_HOST ? (void*)b->data : NULL;
  return STRATA_OK;
}

size_t tpc_free(strata_alloc_args* args, uint32_t magic) {
  if (args == NULL || args->struct_size < STRATA_ALLOC_ARGS_MIN_SIZE) return 0;
  return tpc_buffer_delete(args->buffer, magic);
}

static int in_bounds(strata_buffer buffer, uint32_t magic, size_t offset, size_t n, strata_error* e, const char* name,
                     const char* role) {
  tpc_buffer* b = tpc_buffer_of(buffer, magic);
  if (!tpc_buffer_fits(buffer, magic, offset, n)) {
    tpc_fail(e, STRATA_ERROR_INVALID_ARGUMENT, "%s: copy of %zu bytes at %zu outside the %s buffer (%zu bytes)", name,
             n, offset, role, b != NULL ? b->bytes : (size_t)0);
    return 0;
  }
  return 1;
}

strata_status tpc_copy(strata_copy_args* args, uint32_t magic, const char* name,
                       strata_status (*sync_point)(strata_error* error)) {
  strata_status st;
  switch (args->kind) {
    case STRATA_COPY_HOST_TO_DEVICE:
      if (args->src_host == NULL && args->bytes > 0) break;
      if (!in_bounds(args->dst, magic, args->dst_offset, args->bytes, args->error, name, "destination")) {
        return STRATA_ERROR_INVALID_ARGUMENT;
      }
      if (args->bytes > 0)
        memcpy(tpc_buffer_of(args->dst, magic)->data + args->dst_offset, args->src_host, args->bytes);
      return STRATA_OK;
    case STRATA_COPY_DEVICE_TO_HOST:
      if (args->dst_host == NULL && args->bytes > 0) break;
      if (!in_bounds(args->src, magic, args->src_offset, args->bytes, args->error, name, "source")) {
        return STRATA_ERROR_INVALID_ARGUMENT;
      }
      if (sync_point != NULL && (args->flags & STRATA_COPY_ASYNC) == 0) {
        st = sync_point(args->error);
        if (st != STRATA_OK) return st;
      }
      if (args->bytes > 0)
        memcpy(args->dst_host, tpc_buffer_of(args->src, magic)->data + args->src_offset, args->bytes);
      return STRATA_OK;
    case STRATA_COPY_DEVICE_TO_DEVICE:
      if (!in_bounds(args->dst, magic, args->dst_offset, args->bytes, args->error, name, "destination") ||
          !in_bounds(args->src, magic, args->src_offset, args->bytes, args->error, name, "source")) {
        return STRATA_ERROR_INVALID_ARGUMENT;
      }
      if (args->bytes > 0) {
        memmove(tpc_buffer_of(args->dst, magic)->data + args->dst_offset,
                tpc_buffer_of(args->src, magic)->data + args->src_offset, args->bytes);
      }
      return STRATA_OK;
    default:
      return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: copy: unknown kind %d", name, (int)args->kind);
  }
  return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: copy: no host pointer", name);
}

/* ---- tensors ----------------------------------------------------------------------- */

int64_t tpc_numel(const strata_tensor* t) {
  int64_t n = 1;
  int32_t k;
  for (k = 0; k < t->rank; ++k) n *= t->shape[k];
  return n;
}

int64_t tpc_strided_offset(const strata_tensor* t, int64_t i) {
  int64_t off = 0;
  int32_t k;
  for (k = t->rank - 1; k >= 0; --k) {
    off += (i % t->shape[k]) * t->strides[k];
    i /= t->shape[k];
  }
  return off;
}

strata_status tpc_check_descriptor(const strata_kernel_call* c, const strata_tensor* t, const char* name,
                                   const char* role) {
  if (t == NULL || t->struct_size < STRATA_TENSOR_MIN_SIZE) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: %s descriptor of %zu bytes, need %zu", name,
                    c->op, role, t != NULL ? t->struct_size : (size_t)0, (size_t)STRATA_TENSOR_MIN_SIZE);
  }
  return STRATA_OK;
}

strata_status tpc_check_extent(const strata_kernel_call* c, const strata_tensor* t, const char* name, const char* role,
                               int64_t* last) {
  int32_t k;
  *last = 0;
  if (t->rank < 0 || t->rank > STRATA_MAX_RANK || t->offset < 0) {
    return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: %s has rank %d, offset %lld", name, c->op, role,
                    (int)t->rank, (long long)t->offset);
  }
  for (k = 0; k < t->rank; ++k) {
    if (t->shape[k] <= 0 || t->strides[k] < 0) {
      return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: %s has shape %lld / stride %lld in dim %d",
                      name, c->op, role, (long long)t->shape[k], (long long)t->strides[k], (int)k);
    }
    *last += (t->shape[k] - 1) * t->strides[k];
  }
  return STRATA_OK;
}

strata_status tpc_fill_value(const strata_kernel_call* c, const char* name, double* value) {
  int32_t k;
  for (k = 0; k < c->n_attrs; ++k) {
    const strata_attr* a = c->attrs[k];
    if (a == NULL || a->struct_size < STRATA_ATTR_MIN_SIZE) {
      return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: attribute %d of %zu bytes, need %zu", name,
                      c->op, (int)k, a != NULL ? a->struct_size : (size_t)0, (size_t)STRATA_ATTR_MIN_SIZE);
    }
    if (a->name == NULL || strcmp(a->name, "value") != 0) continue;
    switch (a->kind) {
      case STRATA_ATTR_SCALAR:
        if (a->scalar_dtype == STRATA_F64) {
          *value = a->f;
        } else if (a->scalar_dtype == STRATA_I64 || a->scalar_dtype == STRATA_BOOL) {
          *value = (double)a->i;
        } else {
          return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: value has scalar dtype %d", name, c->op,
                          (int)a->scalar_dtype);
        }
        return STRATA_OK;
      case STRATA_ATTR_FLOAT:
        *value = a->f;
        return STRATA_OK;
      case STRATA_ATTR_INT:
      case STRATA_ATTR_BOOL:
        *value = (double)a->i;
        return STRATA_OK;
      default:
        return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: value has attribute kind %d", name, c->op,
                        (int)a->kind);
    }
  }
  return tpc_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: no attribute \"value\"", name, c->op);
}
