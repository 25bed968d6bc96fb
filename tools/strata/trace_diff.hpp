// trace_diff.hpp — `strata trace diff GRAPH --device D [--reference R]`:
// which op of a traced program (Graph::save) first departs on a device from
// a reference device (docs/writing-a-backend.md, "Finding the op that
// departs").
//
// Every node of the program is checked on its own, forward and backward,
// on the inputs the reference computed for it (copied to the device), so a
// wrong kernel is blamed alone and its error does not travel on to the ops
// after it. Forward checks run in program order, backward checks in the
// order a backward pass runs (reverse), each comparing every output (or
// every input gradient, for a fixed random cotangent) within the dtype's
// tolerance. Like `plugin check`, the checks run in worker processes: a
// check that crashes or hangs the worker is recorded as such and a new
// worker resumes after it; when a forward check failed, the backward
// checks run with that kernel set aside (the device's exclude_kernels), so
// that the derivatives of the other ops are not blamed for it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::cli {

struct TraceDiffOptions {
  std::string graph;             // the graph file
  std::string device;            // --device: the device under test ("": the default device)
  std::string reference = "cpu:0";  // --reference
  std::string config;            // --config, passed on to the workers
  int timeout_ms = 10000;        // --timeout-ms: silence after which a check counts as a hang
  double rtol = -1.0, atol = -1.0;  // --rtol/--atol: every floating dtype (< 0: per-dtype defaults)
  bool json = false;             // --json
  bool forward_only = false;     // --forward-only
};

/// Options of the hidden worker subcommand `trace diff-worker`.
struct TraceDiffWorkerOptions {
  TraceDiffOptions diff;
  int event_fd = -1;
  int resume = 0;  // the first check to run
  /// Stop at the first backward check (the parent then decides which
  /// kernels to set aside for the backward checks).
  bool pause_before_backward = false;
  /// Kernels of the device under test set aside ("strata::mul
  /// f32,f32->f32", its configuration's exclude_kernels): those whose
  /// forward check failed, so that a backward check fails for its own
  /// op's kernels and rules only.
  std::vector<std::string> exclude_kernels;
  /// Nodes whose forward check failed: their backward checks are skipped.
  std::vector<uint64_t> skip_nodes;
};

/// Exit codes: 0 every check passed (or was not applicable), 1 an op
/// departed, crashed, hung or failed on the device, 2 bad input (a file that
/// is no traced graph, a device that does not exist, bad options).
int run_trace_diff(const TraceDiffOptions& options);
int run_trace_diff_worker(const TraceDiffWorkerOptions& options);

}  // namespace strata::cli
