// worker_process.hpp — the child processes of `strata plugin check` and
// `strata trace diff`: the same executable run with a hidden subcommand,
// reporting one JSON object per line ("events") on file descriptor 3.
//
// The parent never loads the plugin under test. A worker that dies on a
// signal or stays silent longer than its timeout is killed with its process
// group; the parent records what the worker was doing and starts a new one
// after it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace strata::cli {

/// How a worker ended.
struct WorkerExit {
  bool timed_out = false;  // silent for longer than its limit: killed
  bool greeted = false;    // it sent at least one event
  int signal = 0;          // the signal that ended it, 0 if none
  int exit_status = -1;    // its exit status, when it exited
  std::string stderr_tail; // the end of what it wrote to stderr (trimmed)
  int64_t limit_ms = 0;    // the silence that counted as a hang


  /// "hang (no answer within N ms)", "crash (signal 11, SIGSEGV)",
  /// "exit (status 3)".
  std::string death() const;
  /// "; its stderr ended with: ..." or "".
  std::string stderr_note() const;
};

/// The least a worker is given before its first event (loading plugins,
/// which the runtime's own child probe bounds, and building its work).
inline constexpr int64_t kWorkerStartupMs = 30000;

/// Runs `/proc/self/exe args...` (args[0] is the program name) in its own
/// process group, stdout discarded, stderr collected, events read from its
/// fd 3 and passed to `on_event` in order. The worker may stay silent for
/// `timeout_ms` between events, and for at least `startup_ms` before its
/// first (loading plugins). Throws std::runtime_error when it cannot start.
WorkerExit run_worker_process(const std::vector<std::string>& args, int64_t timeout_ms, int64_t startup_ms,
                              const std::function<void(const nlohmann::json&)>& on_event);

/// The worker's side: writes one event line to `fd` (all of it); exits the
/// process when the parent is gone.
void emit_event(int fd, const nlohmann::json& event);

/// "signal 11, SIGSEGV".
std::string signal_text(int sig);

}  // namespace strata::cli
