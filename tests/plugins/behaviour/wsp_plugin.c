/* wsp_plugin.c — a kernel that asks the host for workspace (strata_plugin.h
 * sections 4 and 5: scratch memory through `call->workspace`, counted
 * against the device's memory limit and released when the kernel returns).
 *
 * Device "wsp:0" (no streams). Its strata::add (f32) first requests
 * `workspace_bytes` bytes — option {"workspace_bytes": N}, default 1 MiB —
 * and then computes through them: sums are staged in the workspace a chunk
 * at a time and copied to the output, so a workspace that is not a real
 * buffer of this device, or smaller than asked for, shows. When the host
 * refuses (any status but STRATA_OK), the kernel returns that status with
 * the message the host wrote. fill and copy need no workspace.
 */
#include "behaviour_common.h"

#include <stdio.h>

#define WSP_NAME "wsp"

static uint64_t g_workspace_bytes = UINT64_C(1) << 20; /* set by init */

static strata_status wsp_init(const char* options_json, strata_error* error) {
  g_workspace_bytes = bp_option_u64(options_json, "workspace_bytes", UINT64_C(1) << 20);
  if (g_workspace_bytes < sizeof(float)) {
    return tpc_fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: init: workspace_bytes must be at least %zu, found %llu",
                    WSP_NAME, sizeof(float), (unsigned long long)g_workspace_bytes);
  }
  return STRATA_OK;
}

static strata_status wsp_add(const strata_kernel_call* c) {
  strata_workspace_args ws;
  const strata_tensor *a = c->inputs[0], *b = c->inputs[1], *y = c->outputs[0];
  const float *as = bp_f32(a), *bs = bp_f32(b);
  float *ys = bp_f32(y), *stage;
  size_t got = 0;
  int64_t i, j, n = tpc_numel(y), chunk;
  strata_status st;
  if (c->workspace == NULL) {
    return tpc_fail(c->error, STRATA_ERROR_INTERNAL, "%s: %s: the host offers no workspace service", WSP_NAME, c->op);
  }
  ws.struct_size = sizeof(ws);
  ws.call = c;
  ws.bytes = (size_t)g_workspace_bytes;
  ws.buffer = NULL;
  ws.error = c->error; /* the host's reason becomes the kernel's message */
  st = c->workspace(&ws);
  if (st != STRATA_OK) return st;
  stage = (float*)bp_buffer_data(ws.buffer, &got);
  if (stage == NULL || got < ws.bytes) {
    return tpc_fail(c->error, STRATA_ERROR_INTERNAL, "%s: %s: workspace of %zu bytes is %s", WSP_NAME, c->op, ws.bytes,
                    stage == NULL ? "not a buffer of this device" : "smaller than asked for");
  }
  chunk = (int64_t)(ws.bytes / sizeof(float));
  for (i = 0; i < n; i += chunk) {
    int64_t m = n - i < chunk ? n - i : chunk;
    for (j = 0; j < m; ++j) stage[j] = as[bp_element(a, i + j)] + bs[bp_element(b, i + j)];
    for (j = 0; j < m; ++j) ys[bp_element(y, i + j)] = stage[j];
  }
  return STRATA_OK;
}

static strata_status wsp_kernel(const strata_kernel_call* c) { return bp_compute_or(c, BP_ADD, wsp_add); }

static const bp_kind kKernels[] = {BP_FILL, BP_COPY, BP_ADD};

const bp_plugin_desc bp_plugin = {BP_KERNELS(kKernels), .kernel = wsp_kernel, .init = wsp_init};

const strata_plugin_api bp_table = BP_TABLE(WSP_NAME, NULL);
