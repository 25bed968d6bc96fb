/* twin_plugin.c — two plugins claiming one physical device, ABI 2.0.
 *
 * Built twice, as "twina" and "twinb" (-DTWIN_NAME), like a CUDA and a Vulkan
 * plugin seeing one GPU: each serves one device of type GPU whose props carry
 * STRATA_DEVICE_HAS_UUID with the same 16 uuid bytes and the same PCI bus id.
 * The host must recognise them as one piece of hardware (DeviceInfo::
 * same_hardware_as) and offer only the one whose plugin the "prefer" list
 * names first as the default device. Memory is the plugin's own (handles
 * the host cannot read); kernels: strata::fill, strata::copy, strata::add
 * for f32, contiguous outputs except copy's.
 */
#include <strata/plugin/strata_ops.h>
#include <strata/plugin/strata_plugin.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TWIN_NAME
#error "define TWIN_NAME (\"twina\" or \"twinb\")"
#endif

#define TWIN_MAGIC 0x5457494eu

/* 5a1e0042-dead-beef-0123-456789abcdef (mixed digits and letters, so that the
 * host's formatting is checked: lower-case hex, 8-4-4-4-12). */
static const uint8_t kUuid[16] = {0x5a, 0x1e, 0x00, 0x42, 0xde, 0xad, 0xbe, 0xef,
                                  0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
#define TWIN_PCI_BUS_ID "0000:42:00.0"

typedef struct twin_buffer {
  uint32_t magic;
  size_t bytes;
  unsigned char* data;
} twin_buffer;

static int g_state_tag;
#define TWIN_STATE ((strata_plugin_state)&g_state_tag)

static strata_status twin_fail(strata_error* e, strata_status status, const char* message) {
  if (e != NULL && e->struct_size >= STRATA_ERROR_MIN_SIZE) {
    snprintf(e->message, sizeof(e->message), "%s: %s", TWIN_NAME, message);
  }
  return status;
}

static twin_buffer* as_buffer(strata_buffer b) {
  twin_buffer* t = (twin_buffer*)b;
  return (t != NULL && t->magic == TWIN_MAGIC) ? t : NULL;
}

static strata_status twin_probe(strata_probe_args* args) {
  if (args == NULL || args->struct_size < STRATA_PROBE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  args->score = 200;
  return STRATA_OK;
}

static strata_status twin_init(strata_init_args* args) {
  if (args == NULL || args->struct_size < STRATA_INIT_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  args->state = TWIN_STATE;
  args->device_count = 1;
  return STRATA_OK;
}

static strata_status twin_device_props(strata_device_args* args) {
  strata_device_props p;
  size_t bytes;
  if (args == NULL || args->struct_size < STRATA_DEVICE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->state != TWIN_STATE || args->device != 0) return twin_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "no such device");
  if (args->props == NULL || args->props->struct_size < STRATA_DEVICE_PROPS_MIN_SIZE) {
    return twin_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "device_props: props too small");
  }
  memset(&p, 0, sizeof(p));
  p.struct_size = sizeof(p);
  snprintf(p.name, sizeof(p.name), "Twin test GPU (seen through %s)", TWIN_NAME);
  p.type = STRATA_DEVICE_GPU;
  p.flags = STRATA_DEVICE_HAS_UUID;
  p.memory_bytes = UINT64_C(64) << 20;
  p.dtype_mask = STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_I64) | STRATA_DTYPE_BIT(STRATA_BOOL);
  p.compute_dtype_mask = STRATA_DTYPE_BIT(STRATA_F32);
  snprintf(p.compute_capability, sizeof(p.compute_capability), "twin 1");
  memcpy(p.uuid, kUuid, sizeof(kUuid));
  snprintf(p.pci_bus_id, sizeof(p.pci_bus_id), "%s", TWIN_PCI_BUS_ID);
  bytes = sizeof(p) < args->props->struct_size ? sizeof(p) : args->props->struct_size;
  memcpy(args->props, &p, bytes);
  args->props->struct_size = bytes;
  return STRATA_OK;
}

static strata_status twin_alloc(strata_alloc_args* args) {
  twin_buffer* b;
  if (args == NULL || args->struct_size < STRATA_ALLOC_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->state != TWIN_STATE || args->device != 0) return twin_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "alloc: no such device");
  if (args->kind != STRATA_MEMORY_DEVICE && args->kind != STRATA_MEMORY_PINNED_HOST) {
    return twin_fail(args->error, STRATA_ERROR_UNSUPPORTED, "alloc: unknown memory kind");
  }
  b = (twin_buffer*)malloc(sizeof(twin_buffer));
  if (b != NULL) b->data = (unsigned char*)calloc(args->bytes > 0 ? args->bytes : 1, 1);
  if (b == NULL || b->data == NULL) {
    free(b);
    return twin_fail(args->error, STRATA_ERROR_OUT_OF_MEMORY, "alloc: out of memory");
  }
  b->magic = TWIN_MAGIC;
  b->bytes = args->bytes;
  args->buffer = (strata_buffer)b;
  args->host_pointer = args->kind == STRATA_MEMORY_PINNED_HOST ? (void*)b->data : NULL;
  return STRATA_OK;
}

static void twin_free(strata_alloc_args* args) {
  twin_buffer* b;
  if (args == NULL || args->struct_size < STRATA_ALLOC_ARGS_MIN_SIZE) return;
  b = as_buffer(args->buffer);
  if (b == NULL) return;
  b->magic = 0;
  free(b->data);
  free(b);
}

static int fits(strata_buffer buffer, size_t offset, size_t n) {
  twin_buffer* b = as_buffer(buffer);
  return b != NULL && offset <= b->bytes && n <= b->bytes - offset;
}

static strata_status twin_copy(strata_copy_args* args) {
  if (args == NULL || args->struct_size < STRATA_COPY_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->state != TWIN_STATE || args->device != 0) return twin_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "copy: no such device");
  if (args->bytes == 0) return STRATA_OK;
  switch (args->kind) {
    case STRATA_COPY_HOST_TO_DEVICE:
      if (args->src_host == NULL || !fits(args->dst, args->dst_offset, args->bytes)) break;
      memcpy(as_buffer(args->dst)->data + args->dst_offset, args->src_host, args->bytes);
      return STRATA_OK;
    case STRATA_COPY_DEVICE_TO_HOST:
      if (args->dst_host == NULL || !fits(args->src, args->src_offset, args->bytes)) break;
      memcpy(args->dst_host, as_buffer(args->src)->data + args->src_offset, args->bytes);
      return STRATA_OK;
    case STRATA_COPY_DEVICE_TO_DEVICE:
      if (!fits(args->dst, args->dst_offset, args->bytes) || !fits(args->src, args->src_offset, args->bytes)) break;
      memmove(as_buffer(args->dst)->data + args->dst_offset, as_buffer(args->src)->data + args->src_offset, args->bytes);
      return STRATA_OK;
    default:
      break;
  }
  return twin_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "copy outside a buffer or of an unknown kind");
}

/* ---- kernels (f32; the host checks shapes and dtypes, allocates outputs) --- */

static float* f32_at(const strata_tensor* t) { return (float*)as_buffer(t->buffer)->data + t->offset; }

static int64_t numel(const strata_tensor* t) {
  int64_t n = 1;
  int32_t k;
  for (k = 0; k < t->rank; ++k) n *= t->shape[k];
  return n;
}

static int64_t strided_offset(const strata_tensor* t, int64_t i) {
  int64_t off = 0;
  int32_t k;
  for (k = t->rank - 1; k >= 0; --k) {
    off += (i % t->shape[k]) * t->strides[k];
    i /= t->shape[k];
  }
  return off;
}

static int tensors_ok(const strata_kernel_call* c, int32_t n_inputs) {
  int32_t k;
  if (c->n_inputs != n_inputs || c->n_outputs != 1) return 0;
  for (k = 0; k <= n_inputs; ++k) {
    const strata_tensor* t = k < n_inputs ? c->inputs[k] : c->outputs[0];
    if (t == NULL || t->struct_size < STRATA_TENSOR_MIN_SIZE || t->dtype != STRATA_F32 || as_buffer(t->buffer) == NULL ||
        t->rank < 0 || t->rank > STRATA_MAX_RANK) {
      return 0;
    }
  }
  return 1;
}

static strata_status k_fill(const strata_kernel_call* c) {
  double value = 0.0;
  int found = 0;
  int64_t i, n;
  int32_t k;
  if (c == NULL || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!tensors_ok(c, 0)) return twin_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "fill: bad operands");
  for (k = 0; k < c->n_attrs; ++k) {
    const strata_attr* a = c->attrs[k];
    if (a == NULL || a->struct_size < STRATA_ATTR_MIN_SIZE || a->name == NULL || strcmp(a->name, "value") != 0) continue;
    found = 1;
    if (a->kind == STRATA_ATTR_SCALAR) value = a->scalar_dtype == STRATA_F64 ? a->f : (double)a->i;
    else if (a->kind == STRATA_ATTR_FLOAT) value = a->f;
    else value = (double)a->i;
  }
  if (!found) return twin_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "fill: no attribute \"value\"");
  n = numel(c->outputs[0]);
  for (i = 0; i < n; ++i) f32_at(c->outputs[0])[strided_offset(c->outputs[0], i)] = (float)value;
  return STRATA_OK;
}

static strata_status k_copy(const strata_kernel_call* c) {
  int64_t i, n;
  if (c == NULL || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!tensors_ok(c, 1)) return twin_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "copy: bad operands");
  n = numel(c->outputs[0]);
  for (i = 0; i < n; ++i) {
    f32_at(c->outputs[0])[strided_offset(c->outputs[0], i)] = f32_at(c->inputs[0])[strided_offset(c->inputs[0], i)];
  }
  return STRATA_OK;
}

static strata_status k_add(const strata_kernel_call* c) {
  int64_t i, n;
  if (c == NULL || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!tensors_ok(c, 2)) return twin_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "add: bad operands");
  n = numel(c->outputs[0]);
  for (i = 0; i < n; ++i) {
    f32_at(c->outputs[0])[strided_offset(c->outputs[0], i)] =
        f32_at(c->inputs[0])[strided_offset(c->inputs[0], i)] + f32_at(c->inputs[1])[strided_offset(c->inputs[1], i)];
  }
  return STRATA_OK;
}

static const strata_kernel_entry kFill = {sizeof(strata_kernel_entry), STRATA_OP_FILL, STRATA_OP_VERSION, "->f32", 0, k_fill, NULL};
static const strata_kernel_entry kCopy = {sizeof(strata_kernel_entry), STRATA_OP_COPY, STRATA_OP_VERSION, "f32->f32", 0, k_copy, NULL};
static const strata_kernel_entry kAdd = {sizeof(strata_kernel_entry), STRATA_OP_ADD, STRATA_OP_VERSION, "f32,f32->f32", 0, k_add, NULL};
static const strata_kernel_entry* const kEntries[] = {&kFill, &kCopy, &kAdd};

static strata_status twin_get_kernels(strata_device_args* args) {
  if (args == NULL || args->struct_size < STRATA_DEVICE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->state != TWIN_STATE || args->device != 0) return twin_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "no such device");
  args->entries = kEntries;
  args->n_entries = (int32_t)(sizeof(kEntries) / sizeof(kEntries[0]));
  return STRATA_OK;
}

static const strata_plugin_api kTable = {
    .struct_size = sizeof(strata_plugin_api),
    .abi_major = STRATA_ABI_MAJOR,
    .abi_minor = STRATA_ABI_MINOR,
    .min_host_minor = 0,
    .name = TWIN_NAME,
    .vendor = "Strata tests",
    .version = "1.0.0",
    .probe = twin_probe,
    .init = twin_init,
    .device_props = twin_device_props,
    .get_kernels = twin_get_kernels,
    .alloc = twin_alloc,
    .free = twin_free,
    .copy = twin_copy,
};

STRATA_PLUGIN_EXPORT const strata_plugin_api* strata_plugin_entry(uint32_t host_abi_major, uint32_t host_abi_minor) {
  (void)host_abi_major;
  (void)host_abi_minor;
  return &kTable;
}
