// plugin_check.hpp — `strata plugin check`: the conformance suite a backend
// author runs against a plugin file (docs/writing-a-backend.md, "Checking a
// backend").
//
// The command never loads the plugin itself. It validates the path, then
// runs the cases in a worker process (the same executable, hidden
// subcommand `plugin check-worker`) that reports one JSON line per event on
// a pipe. A worker that dies on a signal or stays silent too long is killed
// with its process group; the case it was running is recorded as a crash or
// a hang and a new worker resumes after it.
#pragma once

#include <set>
#include <string>
#include <vector>

namespace strata::cli {

/// Exit code of `strata plugin check` when the plugin (or the requested
/// device) cannot be used here: the runtime refused the plugin, it has no
/// device on this machine, or --device names none of its devices.
inline constexpr int kPluginRefused = 3;

struct PluginCheckOptions {
  std::string path;             // the plugin file under test
  std::string device;           // --device: "" = the plugin's first device
  bool json = false;            // --json
  bool markdown = false;        // --markdown
  int timeout_ms = 10000;       // --timeout-ms: silence after which a worker is killed
  std::string op_regex;         // --op: only op cases whose op name matches (ECMAScript regex)
  bool quick = false;           // --quick: no large shapes
};

/// Options of the hidden worker subcommand.
struct PluginWorkerOptions {
  PluginCheckOptions check;
  int event_fd = -1;   // where the JSON event lines go
  int resume = 0;      // the first case to run
  /// "op|dtype" cells whose kernel crashed or hung in an earlier worker:
  /// their remaining cases are reported as skipped, not run again.
  std::vector<std::string> skip_cells;
  /// "op|dtype" cells whose kernel failed a case in an earlier worker (the
  /// general checks that use one skip, naming it: Context::failed_cells).
  std::vector<std::string> failed_cells;
  /// Kernels of the device under test set aside (its configuration's
  /// devices.<id>.exclude_kernels), as "device|op signature": those that
  /// failed their own cases, while the derivative cases run.
  std::vector<std::string> exclude_kernels;
  /// Stop before the first derivative case when a case failed, crashed or
  /// hung before it (the parent then resumes with those kernels set aside).
  bool pause_before_derivatives = false;
};

/// The cell key of a case: its op without " (derivatives)", "|", its dtype.
std::string cell_key(const std::string& op, const std::string& dtype);

/// The cell keys a kernel "op signature" ("strata::mul f32,f32->f32")
/// covers: its op with each dtype of its signature.
std::set<std::string> kernel_cells(const std::string& kernel);

/// The parent: validates, runs workers, prints the report. Exit codes: 0
/// nothing failed, crashed or hung; 1 something did; 2 bad input (a path
/// that is no plugin file, bad options); 3 (kPluginRefused).
int run_plugin_check(const PluginCheckOptions& options);

/// The worker: loads the plugin and the CPU reference, runs the cases from
/// `resume` on, writes events to `event_fd`.
int run_plugin_check_worker(const PluginWorkerOptions& options);

}  // namespace strata::cli
