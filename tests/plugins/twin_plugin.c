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
#include <string.h>

#include "common/test_plugin_common.h"

#ifndef TWIN_NAME
#error "define TWIN_NAME (\"twina\" or \"twinb\")"
#endif

#define TWIN_MAGIC 0x5457494eu

/* 5a1e0042-dead-beef-0123-456789abcdef (mixed digits and letters, so that the
 * host's formatting is checked: lower-case hex, 8-4-4-4-12). */
static const uint8_t kUuid[16] = {0x5a, 0x1e, 0x00, 0x42, 0xde, 0xad, 0xbe, 0xef,
                                  0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
#define TWIN_PCI_BUS_ID "0000:42:00.0"

static int g_state_tag;
#define TWIN_STATE ((strata_plugin_state)&g_state_tag)

static strata_status twin_fail(strata_error* e, strata_status status, const char* message) {
  return tpc_fail(e, status, "%s: %s", TWIN_NAME, message);
}

static tpc_buffer* as_buffer(strata_buffer b) { return tpc_buffer_of(b, TWIN_MAGIC); }

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
  if (args == NULL || args->struct_size < STRATA_DEVICE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->state != TWIN_STATE || args->device != 0) return twin_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "no such device");
  if (args->props == NULL || args->props->struct_size < STRATA_DEVICE_PROPS_MIN_SIZE) {
    return twin_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "device_props: props too small");
  }
  tpc_props_init(&p, STRATA_DEVICE_GPU, STRATA_DEVICE_HAS_UUID, UINT64_C(64) << 20,
                 STRATA_DTYPE_BIT(STRATA_F32) | STRATA_DTYPE_BIT(STRATA_I64) | STRATA_DTYPE_BIT(STRATA_BOOL),
                 STRATA_DTYPE_BIT(STRATA_F32));
  snprintf(p.name, sizeof(p.name), "Twin test GPU (seen through %s)", TWIN_NAME);
  snprintf(p.compute_capability, sizeof(p.compute_capability), "twin 1");
  memcpy(p.uuid, kUuid, sizeof(kUuid));
  snprintf(p.pci_bus_id, sizeof(p.pci_bus_id), "%s", TWIN_PCI_BUS_ID);
  (void)tpc_publish_props(args->props, &p);
  return STRATA_OK;
}

static strata_status twin_alloc(strata_alloc_args* args) {
  tpc_buffer* b;
  if (args == NULL || args->struct_size < STRATA_ALLOC_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->state != TWIN_STATE || args->device != 0) return twin_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "alloc: no such device");
  if (args->kind != STRATA_MEMORY_DEVICE && args->kind != STRATA_MEMORY_PINNED_HOST) {
    return twin_fail(args->error, STRATA_ERROR_UNSUPPORTED, "alloc: unknown memory kind");
  }
  b = tpc_buffer_new(args->bytes, TWIN_MAGIC);
  if (b == NULL) return twin_fail(args->error, STRATA_ERROR_OUT_OF_MEMORY, "alloc: out of memory");
  args->buffer = (strata_buffer)b;
  args->host_pointer = args->kind == STRATA_MEMORY_PINNED_HOST ? (void*)b->data : NULL;
  return STRATA_OK;
}

static void twin_free(strata_alloc_args* args) { (void)tpc_free(args, TWIN_MAGIC); }

static int fits(strata_buffer buffer, size_t offset, size_t n) { return tpc_buffer_fits(buffer, TWIN_MAGIC, offset, n); }

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
  n = tpc_numel(c->outputs[0]);
  for (i = 0; i < n; ++i) f32_at(c->outputs[0])[tpc_strided_offset(c->outputs[0], i)] = (float)value;
  return STRATA_OK;
}

static strata_status k_copy(const strata_kernel_call* c) {
  int64_t i, n;
  if (c == NULL || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!tensors_ok(c, 1)) return twin_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "copy: bad operands");
  n = tpc_numel(c->outputs[0]);
  for (i = 0; i < n; ++i) {
    f32_at(c->outputs[0])[tpc_strided_offset(c->outputs[0], i)] = f32_at(c->inputs[0])[tpc_strided_offset(c->inputs[0], i)];
  }
  return STRATA_OK;
}

static strata_status k_add(const strata_kernel_call* c) {
  int64_t i, n;
  if (c == NULL || c->struct_size < STRATA_KERNEL_CALL_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!tensors_ok(c, 2)) return twin_fail(c->error, STRATA_ERROR_INVALID_ARGUMENT, "add: bad operands");
  n = tpc_numel(c->outputs[0]);
  for (i = 0; i < n; ++i) {
    f32_at(c->outputs[0])[tpc_strided_offset(c->outputs[0], i)] =
        f32_at(c->inputs[0])[tpc_strided_offset(c->inputs[0], i)] + f32_at(c->inputs[1])[tpc_strided_offset(c->inputs[1], i)];
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

TPC_PLUGIN_ENTRY(&kTable)
