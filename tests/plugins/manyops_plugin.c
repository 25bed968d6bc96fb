/* manyops_plugin.c — an op library (no devices) that defines MANYOPS_COUNT
 * ops "<name>::op_<k>" in its init, each y = x in shape and dtype with no
 * kernel and no derivative. Two builds of 600 ops each (manyopsa and
 * manyopsb, tests/plugins/CMakeLists.txt) do not fit the core's op table
 * together: the second must be refused by name, and no process may end
 * (an earlier core called abort() when the table overflowed). When the host
 * refuses one of its ops the plugin stops and returns the host's status, as
 * a plugin should.
 */
#include <strata/plugin/strata_plugin.h>

#include <stdio.h>
#include <string.h>

#include "common/test_plugin_common.h"

#ifndef MANYOPS_NAME
#define MANYOPS_NAME "manyops"
#endif
#ifndef MANYOPS_COUNT
#define MANYOPS_COUNT 600
#endif

static int g_state_tag;
static char g_names[MANYOPS_COUNT][48];
static strata_op_schema g_schemas[MANYOPS_COUNT];

static strata_status manyops_probe(strata_probe_args* args) {
  if (args == NULL || args->struct_size < STRATA_PROBE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  args->score = 1;
  return STRATA_OK;
}

/* y has x's dtype and shape. */
static strata_status infer_same(strata_infer_args* args) {
  int32_t d;
  if (args == NULL || args->struct_size < STRATA_INFER_ARGS_MIN_SIZE || args->n_inputs != 1 || args->n_outputs != 1 ||
      args->inputs == NULL || args->outputs == NULL || args->inputs[0] == NULL || args->outputs[0] == NULL) {
    return STRATA_ERROR_INVALID_ARGUMENT;
  }
  args->outputs[0]->dtype = args->inputs[0]->dtype;
  args->outputs[0]->rank = args->inputs[0]->rank;
  for (d = 0; d < args->inputs[0]->rank && d < STRATA_MAX_RANK; ++d) {
    args->outputs[0]->shape[d] = args->inputs[0]->shape[d];
  }
  return STRATA_OK;
}

static strata_status manyops_init(strata_init_args* args) {
  int k;
  if (args == NULL || args->struct_size < STRATA_INIT_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (args->host == NULL || args->host->struct_size < STRATA_HOST_API_MIN_SIZE || args->host->register_op == NULL) {
    return tpc_fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, MANYOPS_NAME ": init: no register_op");
  }
  for (k = 0; k < MANYOPS_COUNT; ++k) {
    strata_status st;
    snprintf(g_names[k], sizeof(g_names[k]), MANYOPS_NAME "::op_%d", k);
    memset(&g_schemas[k], 0, sizeof(g_schemas[k]));
    g_schemas[k].struct_size = sizeof(strata_op_schema);
    g_schemas[k].name = g_names[k];
    g_schemas[k].version = 1;
    g_schemas[k].n_inputs = 1;
    g_schemas[k].n_outputs = 1;
    g_schemas[k].infer = infer_same;
    g_schemas[k].doc = "one of many";
    st = args->host->register_op(&g_schemas[k], args->error);
    if (st != STRATA_OK) return st; /* the host wrote why */
  }
  args->state = (strata_plugin_state)&g_state_tag;
  args->device_count = 0;
  return STRATA_OK;
}

static strata_status no_device(strata_device_args* args) {
  (void)args;
  return STRATA_ERROR_INVALID_ARGUMENT;
}
static strata_status no_alloc(strata_alloc_args* args) {
  (void)args;
  return STRATA_ERROR_INVALID_ARGUMENT;
}
static void no_free(strata_alloc_args* args) { (void)args; }
static strata_status no_copy(strata_copy_args* args) {
  (void)args;
  return STRATA_ERROR_INVALID_ARGUMENT;
}

static const char* const kProbeEnvironment[] = {NULL}; /* depends on nothing in the environment */

static const strata_plugin_api kTable = {.struct_size = sizeof(strata_plugin_api),
                                         .abi_major = STRATA_ABI_MAJOR,
                                         .abi_minor = STRATA_ABI_MINOR,
                                         .min_host_minor = 0,
                                         .name = MANYOPS_NAME,
                                         .vendor = "Strata tests",
                                         .version = "0.0.1",
                                         .probe = manyops_probe,
                                         .init = manyops_init,
                                         .device_props = no_device,
                                         .get_kernels = no_device,
                                         .alloc = no_alloc,
                                         .free = no_free,
                                         .copy = no_copy,
                                         .probe_environment = kProbeEnvironment};

STRATA_PLUGIN_EXPORT const strata_plugin_api* strata_plugin_entry(uint32_t host_abi_major, uint32_t host_abi_minor) {
  (void)host_abi_major;
  (void)host_abi_minor;
  return &kTable;
}
