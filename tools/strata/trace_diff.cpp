// trace_diff.cpp — the parent process of `strata trace diff` (trace_diff.hpp):
// runs the checks in worker processes (never loading a plugin itself),
// survives workers that crash or hang, and prints which op departs first.
#include "trace_diff.hpp"
#include "commands.hpp"
#include "worker_process.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>

namespace strata::cli {

namespace {

/// At most this many workers for one diff (each crash or hang costs one).
constexpr int kMaxWorkers = 32;

struct CheckRecord {
  int index = 0;
  uint64_t node = 0;
  std::string op, kernel, direction, signature;
  std::string status;  // pass depart n/a skip error crash hang
  std::string message, how;
  nlohmann::json max_error = 0.0;
};

bool is_failure(const std::string& status) { return status != "pass" && status != "n/a" && status != "skip"; }

struct Run {
  std::vector<CheckRecord> records;
  nlohmann::json hello;
  std::string refused;   // the worker refused the inputs: why
  std::string aborted;   // the diff stopped early: why
  bool start_failed = false;  // no worker got as far as its first event
  int start_exit = 0;
  std::vector<std::string> set_aside;  // kernels set aside for the backward checks
};

/// The worker's command line: from check `resume`, before the backward
/// checks pausing, after them with the failed kernels set aside.
std::vector<std::string> worker_args(const TraceDiffOptions& o, const std::string& device, int resume,
                                     bool pause, const std::vector<std::string>& exclude,
                                     const std::vector<uint64_t>& skip) {
  std::vector<std::string> args{"strata", "trace", "diff-worker", o.graph, "--event-fd", "3",
                                "--resume", std::to_string(resume), "--timeout-ms", std::to_string(o.timeout_ms),
                                "--reference", o.reference};
  if (!device.empty()) args.insert(args.end(), {"--device", device});
  if (!o.config.empty()) args.insert(args.end(), {"--config", o.config});
  if (o.rtol >= 0) args.insert(args.end(), {"--rtol", std::to_string(o.rtol)});
  if (o.atol >= 0) args.insert(args.end(), {"--atol", std::to_string(o.atol)});
  if (o.forward_only) args.push_back("--forward-only");
  if (pause) args.push_back("--pause-before-backward");
  for (const std::string& k : exclude) args.insert(args.end(), {"--exclude-kernel", k});
  for (uint64_t n : skip) args.insert(args.end(), {"--skip-node", std::to_string(n)});
  return args;
}

Run run_checks(const TraceDiffOptions& o) {
  Run run;
  int resume = 0;
  bool backward = false;  // the forward checks are done
  std::vector<uint64_t> skip;
  for (int worker = 0;; ++worker) {
    if (worker == kMaxWorkers) {
      run.aborted = std::to_string(kMaxWorkers) + " workers crashed or hung; the checks from " +
                    std::to_string(resume) + " on were not run";
      return run;
    }
    std::optional<CheckRecord> started;
    std::optional<int> paused;
    bool done = false;
    // Once known, the device is named: the kernels set aside are its.
    const std::string device = run.hello.is_null() ? o.device : run.hello.value("device", o.device);
    const auto args = worker_args(o, device, resume, !backward, run.set_aside, skip);
    const WorkerExit exit = run_worker_process(args, o.timeout_ms, kWorkerStartupMs, [&](const nlohmann::json& e) {
      const std::string kind = e["event"];
      if (kind == "hello") {
        run.hello = e;
      } else if (kind == "refused") {
        run.refused = e.value("reason", std::string("refused"));
      } else if (kind == "start") {
        started = CheckRecord{e.value("check", 0), e.value("node", uint64_t{0}), e.value("op", ""),
                              e.value("kernel", ""), e.value("direction", ""), e.value("signature", ""), "", "", "",
                              0.0};
      } else if (kind == "result" && started && started->index == e.value("check", -1)) {
        started->status = e.value("status", "error");
        started->message = e.value("message", "");
        started->how = e.value("how", "");
        started->max_error = e.value("max_error", nlohmann::json(0.0));
        run.records.push_back(*started);
        started.reset();
      } else if (kind == "paused") {
        paused = e.value("check", 0);
      } else if (kind == "done") {
        done = true;
      }
    });
    if (!run.refused.empty()) return run;
    const bool died = exit.timed_out || exit.signal != 0;
    if (paused && !died) {
      // The forward checks are done: the kernels that failed them are set
      // aside for the backward checks, and their nodes' own are skipped.
      for (const CheckRecord& r : run.records) {
        if (!is_failure(r.status)) continue;
        run.set_aside.push_back(r.kernel);
        skip.push_back(r.node);
      }
      backward = true;
      resume = *paused;
      --worker;  // not a crash
      continue;
    }
    if (done && !died) return run;
    if (!started) {  // outside any check: loading, or computing the reference
      run.aborted = "the worker ended " + std::string(run.hello.is_null() ? "before its first check" : "between checks") +
                    ": " + exit.death() + exit.stderr_note();
      run.start_failed = run.hello.is_null();
      run.start_exit = exit.exit_status;
      return run;
    }
    started->status = exit.timed_out ? "hang" : "crash";
    started->message = exit.death() + " in the " + started->direction + " check of node #" +
                       std::to_string(started->node) + " (" + started->op + ")" + exit.stderr_note();
    run.records.push_back(*started);
    resume = started->index + 1;
  }
}

/// How the device served a check, in a word: "fallback" when any op of it
/// fell back to the CPU, else "decomposed" when one was decomposed, else
/// "kernels"; "-" when nothing ran there (views, not run).
const char* served(const std::string& how) {
  if (how.empty()) return "-";
  if (how.find("fallback") != std::string::npos) return "fallback";
  if (how.find("decomposition") != std::string::npos) return "decomposed";
  return "kernels";
}

nlohmann::json record_json(const CheckRecord& r) {
  return {{"check", r.index},         {"node", r.node},     {"op", r.op},   {"kernel", r.kernel},
          {"direction", r.direction}, {"signature", r.signature}, {"status", r.status}, {"how", r.how},
          {"message", r.message},     {"max_error", r.max_error}};
}

}  // namespace

int run_trace_diff(const TraceDiffOptions& o) {
  if (o.timeout_ms < 100) {
    std::cerr << "strata trace diff: --timeout-ms " << o.timeout_ms << " is below the minimum of 100\n";
    return kBadInput;
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(o.graph, ec)) {
    std::cerr << "strata trace diff: " << o.graph << ": no such file\n";
    return kBadInput;
  }
  // The workers' stderr is quoted when one crashes or hangs: the plugin's
  // own last words, not the runtime's loading notes and fallback warnings.
  ::setenv("STRATA_LOG_LEVEL", "error", 0);  // unless the user asked for a level
  Run run = run_checks(o);
  if (!run.refused.empty()) {
    std::cerr << "strata trace diff: " << run.refused << "\n";
    return kBadInput;
  }
  if (run.start_failed) {
    std::cerr << "strata trace diff: " << run.aborted << "\n";
    return run.start_exit == kBadInput ? kBadInput : kFailure;
  }
  std::map<std::string, int> totals;
  const CheckRecord* first = nullptr;
  for (const CheckRecord& r : run.records) {
    ++totals[r.status];
    if (first == nullptr && is_failure(r.status)) first = &r;
  }
  const std::string device = run.hello.value("device", o.device), reference = run.hello.value("reference", o.reference);
  const bool failed = first != nullptr || !run.aborted.empty();
  if (o.json) {
    nlohmann::json j{{"graph", o.graph}, {"device", device}, {"reference", reference}, {"totals", totals}};
    j["checks"] = nlohmann::json::array();
    for (const CheckRecord& r : run.records) j["checks"].push_back(record_json(r));
    j["first_departure"] = first != nullptr ? record_json(*first) : nlohmann::json();
    if (!run.aborted.empty()) j["aborted"] = run.aborted;
    j["set_aside"] = run.set_aside;
    std::cout << j.dump(2) << "\n";
    return failed ? kFailure : kOk;
  }
  std::cout << "Trace diff of " << o.graph << ": " << device << " against " << reference << ", each node given "
            << reference << "'s values of its inputs (" << run.hello.value("nodes", 0) << " nodes, " << run.hello.value("checks", 0)
            << " checks)\n";
  size_t width = 8;
  for (const CheckRecord& r : run.records) width = std::max(width, r.op.size());
  for (const CheckRecord& r : run.records) {
    std::printf("  %-8s #%-4llu %-*s  %-7s %-11s %s\n", r.direction.c_str(), static_cast<unsigned long long>(r.node),
                static_cast<int>(width), r.op.c_str(), r.status.c_str(), served(r.how), r.signature.c_str());
    if (r.status != "pass" && !r.message.empty()) std::printf("      %s\n", r.message.c_str());
    if (is_failure(r.status) && !r.how.empty()) std::printf("      ran on %s: %s\n", device.c_str(), r.how.c_str());
  }
  if (!run.set_aside.empty()) {
    std::cout << "The backward checks ran with the kernels that failed their forward checks set aside:";
    for (const std::string& k : run.set_aside) std::cout << " " << k << (&k == &run.set_aside.back() ? "" : ",");
    std::cout << "\n";
  }
  if (!run.aborted.empty()) std::cout << "Stopped: " << run.aborted << "\n";
  if (first != nullptr) {
    std::cout << "First departure: the " << first->direction << " of node #" << first->node << " (" << first->op
              << ") on " << device << ": " << first->message << "\n";
  } else if (run.aborted.empty() && totals["pass"] == 0) {
    std::cout << "Nothing was compared: no check applies to " << device << ".\n";
  } else if (run.aborted.empty()) {
    std::cout << "No op departs from " << reference << ".\n";
  }
  std::cout << totals["pass"] << " passed, " << totals["depart"] << " departed, " << totals["n/a"]
            << " not applicable, " << totals["skip"] << " skipped, " << totals["error"] << " errors, " << totals["crash"] << " crashed, "
            << totals["hang"] << " hung\n";
  return failed ? kFailure : kOk;
}

}  // namespace strata::cli
