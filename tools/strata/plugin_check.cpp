// plugin_check.cpp — the parent process of `strata plugin check`: validates
// the plugin path, runs the cases in worker processes (never loading the
// plugin itself), survives workers that crash or hang, and prints the report
// (a table, --json or --markdown).
#include "commands.hpp"
#include "plugin_check.hpp"
#include "worker_process.hpp"

#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace strata::cli {

namespace {

/// At most this many workers are started for one check (each crash or hang
/// costs one); after that the remaining cases are reported as not run.
constexpr int kMaxWorkers = 64;

// ---- validating the path ----------------------------------------------------------------

/// Whether a 64-bit little-endian ELF file has a PT_INTERP program header:
/// a position-independent executable (also of type ET_DYN), not a library.
bool has_interpreter(std::ifstream& in) {
  auto read_le = [&in](std::streamoff at, int bytes) -> uint64_t {
    std::array<unsigned char, 8> b{};
    in.clear();
    in.seekg(at);
    if (!in.read(reinterpret_cast<char*>(b.data()), bytes)) return 0;
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8u) | b[static_cast<size_t>(i)];
    return v;
  };
  const uint64_t phoff = read_le(32, 8), phentsize = read_le(54, 2), phnum = read_le(56, 2);
  constexpr uint64_t kPtInterp = 3;
  for (uint64_t i = 0; i < phnum && phentsize >= 4 && i < 4096; ++i) {
    if (read_le(static_cast<std::streamoff>(phoff + i * phentsize), 4) == kPtInterp) return true;
  }
  return false;
}

/// "" when `path` is a regular file holding an ELF shared object, else why not.
std::string validate_plugin_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return path + ": " + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) {
    return path + ": not a regular file (" + std::string(S_ISDIR(st.st_mode) ? "a directory" : "a special file") +
           "); a plugin is a shared library file libstrata_plugin_<name>.so";
  }
  std::ifstream in(path, std::ios::binary);
  std::array<unsigned char, 18> header{};
  if (!in.read(reinterpret_cast<char*>(header.data()), header.size())) {
    return path + ": not an ELF shared object (only " + std::to_string(in.gcount()) + " bytes)";
  }
  if (header[0] != 0x7f || header[1] != 'E' || header[2] != 'L' || header[3] != 'F') {
    return path + ": not an ELF shared object (no ELF magic)";
  }
  // e_type at offset 16, in the file's byte order (EI_DATA: 1 little, 2 big).
  const unsigned type = header[5] == 2 ? (header[16] << 8u) | header[17] : (header[17] << 8u) | header[16];
  if (type != 3) return path + ": an ELF file but not a shared object (e_type " + std::to_string(type) + ")";
  if (header[4] == 2 && header[5] == 1 && has_interpreter(in)) {
    return path + ": an ELF executable (it names a program interpreter), not a shared object";
  }
  return {};
}

// ---- one worker ---------------------------------------------------------------------------

/// A recorded case: the worker's report, or the parent's crash/hang record.
struct CaseRecord {
  int index = 0;
  std::string name, op, dtype;
  std::string status;  // pass fail skip fallback unsupported crash hang
  std::string message;
  nlohmann::json max_error = 0.0;
};

struct WorkerRun {
  bool refused = false;
  std::string refusal;
  bool done = false;            // the worker finished every case
  std::optional<CaseRecord> interrupted;  // started, never finished: crash or hang
  std::string death;            // how the worker ended, when not done
  std::optional<int> paused;    // stopped before the derivative cases, which start here
};

bool is_failure(const std::string& s) { return s == "fail" || s == "crash" || s == "hang"; }

/// Runs one worker from case `resume`, adding what it reports to `records`
/// (and its hello to `hello`).
WorkerRun run_worker(const PluginCheckOptions& options, int resume, const std::vector<std::string>& skip_cells,
                     const std::vector<std::string>& exclude, bool pause, nlohmann::json& hello,
                     std::vector<CaseRecord>& records) {
  WorkerRun run;
  std::vector<std::string> args{"strata", "plugin", "check-worker", options.path, "--event-fd", "3",
                                "--resume", std::to_string(resume), "--timeout-ms", std::to_string(options.timeout_ms)};
  if (!options.device.empty()) args.insert(args.end(), {"--device", options.device});
  if (!options.op_regex.empty()) args.insert(args.end(), {"--op", options.op_regex});
  if (options.quick) args.push_back("--quick");
  for (const std::string& cell : skip_cells) args.insert(args.end(), {"--skip-cell", cell});
  std::set<std::string> failed;  // by an earlier worker: failed, crashed or hung
  for (const CaseRecord& r : records) {
    if (!r.op.empty() && is_failure(r.status)) failed.insert(cell_key(r.op, r.dtype));
  }
  for (const std::string& cell : failed) args.insert(args.end(), {"--failed-cell", cell});
  for (const std::string& kernel : exclude) args.insert(args.end(), {"--exclude-kernel", kernel});
  if (pause) args.push_back("--pause-before-derivatives");

  std::optional<CaseRecord> started;
  const WorkerExit exit = run_worker_process(args, options.timeout_ms, kWorkerStartupMs, [&](const nlohmann::json& e) {
    const std::string kind = e["event"];
    if (kind == "hello") {
      if (hello.is_null()) hello = e;
    } else if (kind == "refused") {
      run.refused = true;
      run.refusal = e.value("reason", std::string("refused"));
      if (hello.is_null() && e.contains("plugin")) hello = e;
    } else if (kind == "start") {
      started = CaseRecord{e.value("case", 0), e.value("name", ""), e.value("op", ""), e.value("dtype", ""), "", "", 0.0};
    } else if (kind == "result" && started && started->index == e.value("case", -1)) {
      started->status = e.value("status", "fail");
      started->message = e.value("message", "");
      started->max_error = e.value("max_error", nlohmann::json(0.0));
      records.push_back(*started);
      started.reset();
    } else if (kind == "done") {
      run.done = true;
    } else if (kind == "paused") {
      run.paused = e.value("case", 0);
      run.done = true;
    }
  });
  const bool died = exit.timed_out || exit.signal != 0;
  if (died) run.done = false;
  if (died || (!run.done && !run.refused)) run.death = exit.death();
  if (!run.done && started) {
    started->status = exit.timed_out ? "hang" : "crash";
    started->message = run.death + " in " + (started->op.empty() ? started->name : started->op + " " + started->dtype) +
                       ", case \"" + started->name + "\"" + exit.stderr_note();
    run.interrupted = started;
    records.push_back(*started);
  } else if (!run.done && !run.refused) {
    run.death += exit.stderr_note();
  }
  return run;
}

// ---- the report ------------------------------------------------------------------------------

const std::vector<std::string> kDTypeColumns{"f32", "f64", "f16", "bf16", "i32", "i64", "bool", "c64", "c128"};

int severity(const std::string& s) {
  static const std::map<std::string, int> order{{"skip", 0}, {"pass", 1}, {"fallback", 2}, {"unsupported", 3},
                                                {"fail", 4}, {"hang", 5}, {"crash", 6}};
  auto it = order.find(s);
  return it == order.end() ? 4 : it->second;
}


std::string cell_text(const std::string& s) {
  if (s == "fail") return "FAIL";
  if (s == "crash") return "CRASH";
  if (s == "hang") return "HANG";
  if (s.empty()) return "-";
  return s;
}

struct Report {
  nlohmann::json plugin, device;
  std::string reference;
  std::vector<std::string> set_aside;  // kernels set aside for the derivative cases
  std::vector<CaseRecord> records;
  std::vector<std::string> rows;                               // ops, in first-seen order
  std::map<std::string, std::map<std::string, std::string>> matrix;  // op -> dtype -> worst status
  int passed = 0, failed = 0, skipped = 0;
  std::map<std::string, int> by_status;
  std::string aborted;  // why the check stopped early, if it did
};

Report make_report(const nlohmann::json& hello, std::vector<CaseRecord> records, std::string aborted) {
  Report r;
  r.plugin = hello.value("plugin", nlohmann::json::object());
  r.device = hello.value("device", nlohmann::json::object());
  r.reference = hello.value("reference", "");
  std::sort(records.begin(), records.end(), [](const CaseRecord& a, const CaseRecord& b) { return a.index < b.index; });
  r.records = std::move(records);
  r.aborted = std::move(aborted);
  for (const CaseRecord& c : r.records) {
    ++r.by_status[c.status];
    if (c.status == "pass") {
      ++r.passed;
    } else if (is_failure(c.status) || (c.status != "skip" && c.status != "fallback" && c.status != "unsupported")) {
      ++r.failed;
    } else {
      ++r.skipped;
    }
    if (c.op.empty()) continue;
    if (!r.matrix.contains(c.op)) r.rows.push_back(c.op);
    std::string& cell = r.matrix[c.op][c.dtype];
    if (cell.empty() || severity(c.status) > severity(cell)) cell = c.status;
  }
  // A claimed kernel that declined every one of its cases claims an op it
  // does not implement: one failure for the cell.
  for (auto& [op, cells] : r.matrix) {
    for (auto& [dtype, status] : cells) {
      if (status != "unsupported") continue;
      bool all = true;
      for (const CaseRecord& c : r.records) {
        if (c.op == op && c.dtype == dtype && c.status != "unsupported") all = false;
      }
      if (all) {
        status = "fail";
        ++r.failed;
        CaseRecord claim;
        claim.index = static_cast<int>(r.records.size());
        claim.name = op + " " + dtype + ": claimed but declined every case";
        claim.op = op;
        claim.dtype = dtype;
        claim.status = "fail";
        claim.message = "the kernel table lists " + op + " for " + dtype +
                        " but the kernel returned STRATA_ERROR_UNSUPPORTED for every case";
        r.records.push_back(claim);
      }
    }
  }
  if (!r.aborted.empty()) ++r.failed;
  return r;
}

std::string totals_line(const Report& r) {
  return std::to_string(r.passed) + " passed, " + std::to_string(r.failed) + " failed, " + std::to_string(r.skipped) +
         " skipped";
}

void print_table(const Report& r, std::ostream& os) {
  os << "Plugin " << r.plugin.value("name", "?") << " " << r.plugin.value("version", "") << " ("
     << r.plugin.value("vendor", "") << "), ABI " << r.plugin.value("abi", "") << ": " << r.plugin.value("path", "")
     << "\n";
  os << "Device " << r.device.value("id", "?") << " \"" << r.device.value("name", "") << "\", reference "
     << r.reference << "\n\n";
  os << "General checks:\n";
  for (const CaseRecord& c : r.records) {
    if (!c.op.empty()) continue;
    os << "  " << std::left << std::setw(10) << cell_text(c.status) << c.name
       << (c.message.empty() || is_failure(c.status) ? "" : "  (" + c.message + ")") << "\n";
  }
  size_t width = 4;
  for (const std::string& op : r.rows) width = std::max(width, op.size());
  os << "\n" << std::left << std::setw(static_cast<int>(width + 2)) << "op";
  for (const std::string& d : kDTypeColumns) os << std::setw(12) << d;
  os << "\n";
  for (const std::string& op : r.rows) {
    os << std::setw(static_cast<int>(width + 2)) << op;
    const auto& cells = r.matrix.at(op);
    for (const std::string& d : kDTypeColumns) {
      auto it = cells.find(d);
      os << std::setw(12) << cell_text(it == cells.end() ? "" : it->second);
    }
    os << "\n";
  }
  bool header = false;
  for (const CaseRecord& c : r.records) {
    if (!is_failure(c.status) && c.status != "unsupported" && !(c.status == "skip" && !c.op.empty())) continue;
    if (!header) os << "\nDetails:\n";
    header = true;
    os << "  " << cell_text(c.status) << "  " << c.name << "\n      " << c.message << "\n";
  }
  if (!r.set_aside.empty()) {
    os << "\nThe derivative cases ran with the kernels that failed their own cases set aside (their calls fell back "
          "to the reference), so that each derivative row judges its own op:\n";
    for (const std::string& k : r.set_aside) os << "  " << k << "\n";
  }
  if (!r.aborted.empty()) os << "\nThe check stopped early: " << r.aborted << "\n";
  os << "\n" << totals_line(r) << "\n";
}

nlohmann::json report_json(const Report& r) {
  nlohmann::json cases = nlohmann::json::array();
  for (const CaseRecord& c : r.records) {
    cases.push_back({{"index", c.index}, {"name", c.name}, {"op", c.op}, {"dtype", c.dtype}, {"status", c.status},
                     {"message", c.message}, {"max_error", c.max_error}});
  }
  nlohmann::json matrix = nlohmann::json::object();
  for (const std::string& op : r.rows) matrix[op] = r.matrix.at(op);
  return {{"plugin", r.plugin},
          {"device", r.device},
          {"reference", r.reference},
          {"cases", cases},
          {"matrix", matrix},
          {"set_aside", r.set_aside},
          {"totals", {{"passed", r.passed}, {"failed", r.failed}, {"skipped", r.skipped}, {"by_status", r.by_status}}},
          {"aborted", r.aborted.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.aborted)}};
}

void print_markdown(const Report& r, std::ostream& os) {
  os << "### " << r.plugin.value("name", "?") << " " << r.plugin.value("version", "") << " — "
     << r.device.value("id", "?") << " (" << r.device.value("name", "") << ")\n\n";
  os << "General checks: ";
  int general = 0, general_ok = 0;
  for (const CaseRecord& c : r.records) {
    if (!c.op.empty()) continue;
    ++general;
    general_ok += c.status == "pass" ? 1 : 0;
  }
  os << general_ok << " of " << general << " passed.\n\n| op |";
  for (const std::string& d : kDTypeColumns) os << " " << d << " |";
  os << "\n|---|";
  for (size_t i = 0; i < kDTypeColumns.size(); ++i) os << "---|";
  os << "\n";
  for (const std::string& op : r.rows) {
    os << "| `" << op << "` |";
    const auto& cells = r.matrix.at(op);
    for (const std::string& d : kDTypeColumns) {
      auto it = cells.find(d);
      os << " " << cell_text(it == cells.end() ? "" : it->second) << " |";
    }
    os << "\n";
  }
  os << "\n" << totals_line(r) << "\n";
}

/// The kernels of the device under test whose own cases failed, crashed or
/// hung, as "device|op signature" (its kernel list in `hello`): a kernel
/// matches a failed case of its op when the case's dtype is one of its
/// signature's.
std::vector<std::string> failed_kernels(const nlohmann::json& hello, const std::vector<CaseRecord>& records) {
  const nlohmann::json device = hello.value("device", nlohmann::json::object());
  std::set<std::string> out;
  std::set<std::string> failed;  // cells of the cases before the derivative ones
  for (const CaseRecord& r : records) {
    const bool kernel_case = !r.op.empty() && !r.op.ends_with(" (derivatives)");
    if (is_failure(r.status) && kernel_case) failed.insert(cell_key(r.op, r.dtype));
  }
  for (const nlohmann::json& k : device.value("kernels", nlohmann::json::array())) {
    const std::string text = k.get<std::string>();  // "strata::mul f32,f32->f32"
    for (const std::string& cell : kernel_cells(text)) {
      if (failed.contains(cell)) out.insert(device.value("id", "") + "|" + text);
    }
  }
  return {out.begin(), out.end()};
}

}  // namespace

int run_plugin_check(const PluginCheckOptions& options) {
  if (std::string why = validate_plugin_path(options.path); !why.empty()) {
    std::cerr << "strata plugin check: " << why << "\n";
    return kBadInput;
  }
  if (options.timeout_ms < 100) {
    std::cerr << "strata plugin check: --timeout-ms " << options.timeout_ms << " is below the minimum of 100\n";
    return kBadInput;
  }
  nlohmann::json hello;
  std::vector<CaseRecord> records;
  std::string aborted;
  int resume = 0;
  std::vector<std::string> skip_cells;
  // Until a worker pauses before the derivative cases: then the kernels
  // that failed before them are set aside for the rest.
  bool pause = true;
  std::vector<std::string> exclude;
  for (int worker = 0;; ++worker) {
    if (worker == kMaxWorkers) {
      aborted = std::to_string(kMaxWorkers) + " workers crashed or hung; the cases from " + std::to_string(resume) +
                " on were not run";
      break;
    }
    WorkerRun run = run_worker(options, resume, skip_cells, exclude, pause, hello, records);
    if (run.refused) {
      std::cerr << "strata plugin check: " << options.path << ": refused: " << run.refusal << "\n";
      if (options.json) {
        std::cout << nlohmann::json{{"plugin", options.path}, {"refused", run.refusal}}.dump(2) << "\n";
      }
      return kPluginRefused;
    }
    if (run.paused) {  // a case failed before the derivative ones: resume them with its kernels set aside
      resume = *run.paused;
      exclude = failed_kernels(hello, records);
      pause = false;
      --worker;  // not a crash
      continue;
    }
    if (run.done) break;
    if (!run.interrupted) {
      // The worker died outside any case: while loading the plugin, or
      // between cases. A new worker would die the same way.
      aborted = "the worker ended outside a case: " + run.death;
      if (hello.is_null()) {
        std::cerr << "strata plugin check: " << options.path << ": the worker loading the plugin ended: " << run.death
                  << "\n";
        return kFailure;
      }
      break;
    }
    resume = run.interrupted->index + 1;
    // One crash or hang per kernel is enough: its other cases are skipped.
    if (!run.interrupted->op.empty()) skip_cells.push_back(cell_key(run.interrupted->op, run.interrupted->dtype));
  }
  Report report = make_report(hello, std::move(records), aborted);
  for (const std::string& e : exclude) report.set_aside.push_back(e.substr(e.find('|') + 1));
  if (options.json) {
    std::cout << report_json(report).dump(2) << "\n";
  } else if (options.markdown) {
    print_markdown(report, std::cout);
  } else {
    print_table(report, std::cout);
  }
  return report.failed == 0 ? kOk : kFailure;
}

}  // namespace strata::cli
