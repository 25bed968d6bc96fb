// plugin_probe.cpp — see plugin_probe.hpp.
#include "runtime/plugins/plugin_probe.hpp"
#include "runtime/plugins/probe_cache.hpp"

#include "base/logging.hpp"
#include "runtime/device/device_record.hpp"
#include "runtime/plugins/file_digest.hpp"
#include "runtime/plugins/plugin_loader.hpp"

#include <strata/config.hpp>
#include <strata/plugin_info.hpp>

#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace strata::detail {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kMinPluginBytes = 64;             // an ELF header
constexpr int64_t kMaxPluginBytes = int64_t{4} << 30;
constexpr size_t kStderrTail = 600;                  // characters of the child's stderr quoted

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a file";
}

namespace {

std::string not_regular(mode_t mode) {
  return "not a regular file (" + file_kind(mode) + "); a plugin is a shared library file";
}

// ---- running the child ---------------------------------------------------------------------

struct ChildRun {
  bool started = false;
  std::string start_error;
  bool timed_out = false;
  int status = 0;
  std::string out, err;
  double ms = 0;
};

/// The child's environment: ours, with every sanitizer told to leave SIGSEGV, SIGBUS, SIGFPE and
/// SIGABRT alone. A sanitized build (asan/ubsan/tsan presets) would otherwise catch a plugin's crash,
/// print its report and exit with its own exit code, and the parent could not tell a crash from an
/// exit; with these the child dies by the signal, as an uninstrumented one does. Later flags win in
/// a sanitizer's option string, so they are appended to whatever the user set.
std::vector<std::string> child_environment() {
  static constexpr std::array<const char*, 3> kSanitizers{"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"};
  static constexpr const char* kKeepSignals = "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_abort=0";
  std::vector<std::string> env;
  std::array<bool, kSanitizers.size()> seen{};
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry = *e;
    for (size_t k = 0; k < kSanitizers.size(); ++k) {
      const std::string prefix = std::string(kSanitizers[k]) + "=";
      if (!entry.starts_with(prefix)) continue;
      seen[k] = true;
      entry += entry.size() > prefix.size() ? std::string(":") + kKeepSignals : kKeepSignals;
    }
    env.push_back(std::move(entry));
  }
  for (size_t k = 0; k < kSanitizers.size(); ++k) {
    if (!seen[k]) env.push_back(std::string(kSanitizers[k]) + "=" + kKeepSignals);
  }
  return env;
}

/// A sanitizer's report in the child's stderr ("==123==ERROR: AddressSanitizer: ...", "...: runtime
/// error: ...", "WARNING: ThreadSanitizer: ..."): its first line, or "" when there is none.
std::string sanitizer_report(const std::string& err) {
  static constexpr std::array<const char*, 4> kMarks{"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                                                     "WARNING: ThreadSanitizer", ": runtime error: "};
  size_t at = std::string::npos;
  for (const char* mark : kMarks) at = std::min(at, err.find(mark));
  if (at == std::string::npos) return {};
  const size_t begin = err.rfind('\n', at);
  const size_t from = begin == std::string::npos ? 0 : begin + 1;
  const size_t end = err.find('\n', at);
  return err.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

ChildRun run_child(const std::string& helper, const std::vector<std::string>& args, int timeout_ms) {
  ChildRun run;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    run.start_error = "pipe: " + errno_text(errno);
    return run;
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    run.start_error = "pipe: " + errno_text(errno);
    ::close(out[0]);
    ::close(out[1]);
    return run;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(helper.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = child_environment();
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, helper.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    run.start_error = "cannot start " + helper + ": " + errno_text(rc);
    ::close(out[0]);
    ::close(err[0]);
    return run;
  }
  run.started = true;
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  std::array<pollfd, 2> fds{{{out[0], POLLIN, 0}, {err[0], POLLIN, 0}}};
  std::array<std::string*, 2> sinks{&run.out, &run.err};
  int open_fds = 2;
  bool exited = false;
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      run.timed_out = true;
      break;
    }
    if (open_fds == 0) {
      // Both pipes closed: wait for the exit (a child may close them and go on).
      pid_t w = ::waitpid(pid, &run.status, WNOHANG);
      if (w == pid) {
        exited = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    const int wait_ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    const int n = ::poll(fds.data(), fds.size(), wait_ms);
    if (n < 0 && errno != EINTR) break;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      char buf[4096];
      const ssize_t got = ::read(fds[k].fd, buf, sizeof(buf));
      if (got > 0) {
        sinks[k]->append(buf, static_cast<size_t>(got));
        if (sinks[k]->size() > (size_t{1} << 20)) sinks[k]->erase(0, sinks[k]->size() - (size_t{1} << 19));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      }
    }
  }
  if (!exited) {
    if (run.timed_out) ::kill(pid, SIGKILL);
    while (::waitpid(pid, &run.status, 0) < 0 && errno == EINTR) {
    }
  }
  for (pollfd& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  run.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return run;
}

/// The last stage the child announced, and its result line (or null).
struct ChildReport {
  std::string stage = "starting";
  nlohmann::json result;
};

ChildReport parse_report(const std::string& out) {
  ChildReport r;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("stage ")) r.stage = line.substr(6);
    if (line.starts_with("result ")) r.result = nlohmann::json::parse(line.substr(7), nullptr, false);
  }
  return r;
}

std::string stderr_tail(std::string err) {
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  if (err.empty()) return {};
  if (err.size() > kStderrTail) err = "..." + err.substr(err.size() - kStderrTail);
  return "; its last output: " + err;
}

}  // namespace

std::string plugin_file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "cannot read \"" + path + "\": " + errno_text(errno);
  if (!S_ISREG(st.st_mode)) return not_regular(st.st_mode);  // by its type: a FIFO is never opened
  if (st.st_size == 0) return "empty file; a plugin is a shared library file";
  if (st.st_size < kMinPluginBytes) {
    return "not a loadable shared library: " + std::to_string(st.st_size) + " bytes is too small for an ELF file";
  }
  if (st.st_size > kMaxPluginBytes) {
    return "file of " + std::to_string(st.st_size) + " bytes is larger than any plugin (at most 4 GiB)";
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return "cannot open \"" + path + "\": " + errno_text(errno);
  struct stat opened {};
  std::array<unsigned char, 4> magic{};
  const bool regular = ::fstat(fd, &opened) == 0 && S_ISREG(opened.st_mode);
  const ssize_t got = regular ? ::read(fd, magic.data(), magic.size()) : -1;
  ::close(fd);
  if (!regular) return not_regular(opened.st_mode);  // swapped since the stat above
  if (got != 4 || magic[0] != 0x7f || magic[1] != 'E' || magic[2] != 'L' || magic[3] != 'F') {
    return "not a loadable shared library: not an ELF file (no ELF magic number at its start)";
  }
  return {};
}

std::string probe_helper_path() {
  if (const char* env = std::getenv("STRATA_PLUGIN_PROBE_HELPER"); env != nullptr && *env != '\0') return env;
  return (fs::path(library_directory()) / ".." / "libexec" / "strata" / "strata-plugin-probe")
      .lexically_normal()
      .string();
}

ChildProbe probe_in_child(const std::string& path, const std::string& options_json, int timeout_ms) {
  const std::string key = probe_cache_key(path, options_json, timeout_ms);
  if (std::optional<ChildProbe> hit = cached_probe(key)) return *hit;
  const std::string helper = probe_helper_path();
  if (::access(helper.c_str(), X_OK) != 0) return {};  // how == "": no helper
  ChildRun run = run_child(helper, {"--plugin", path, "--options", options_json}, timeout_ms);
  if (!run.started) {
    logger("plugin")->warn("cannot probe {} in a child process: {}", path, run.start_error);
    return {};
  }
  char ms[32];
  std::snprintf(ms, sizeof(ms), "%.0f ms", run.ms);
  ChildProbe p;
  p.how = std::string("child process, ") + ms;
  ChildReport report = parse_report(run.out);
  const std::string during = " while " + report.stage;
  if (run.timed_out) {
    p.reason = "hung in a child probe: no answer within " + std::to_string(timeout_ms) + " ms (plugins.probe_timeout_ms)" +
               during + "; the child was killed" + stderr_tail(run.err);
  } else if (WIFSIGNALED(run.status)) {
    const int sig = WTERMSIG(run.status);
    p.reason = "crashed in a child probe: signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")" + during +
               stderr_tail(run.err);
  } else if (report.result.is_object() && report.result.contains("ok") && report.result["ok"].is_boolean()) {
    p.ok = report.result["ok"].get<bool>();
    if (!p.ok) {
      const auto reason = report.result.find("reason");
      p.reason = reason != report.result.end() && reason->is_string() ? reason->get<std::string>()
                                                                      : "refused by the child probe";
    }
    // What the plugin declared decides what its cached answer depends on;
    // a malformed declaration counts as none (the whole environment).
    if (p.ok && report.result.contains("environment")) {
      if (auto declared = declared_names(report.result["environment"])) p.environment = std::move(*declared);
    }
  } else if (const std::string sanitizer = sanitizer_report(run.err); !sanitizer.empty()) {
    // A sanitizer that does not take the options of child_environment() (or a report of its own,
    // such as a heap overflow): the plugin crashed all the same, and its report says where.
    p.reason = "crashed in a child probe: a sanitizer stopped it (exit status " +
               std::to_string(WIFEXITED(run.status) ? WEXITSTATUS(run.status) : -1) + ")" + during + ": " + sanitizer +
               stderr_tail(run.err);
  } else {
    p.reason = "ended a child probe with exit status " +
               std::to_string(WIFEXITED(run.status) ? WEXITSTATUS(run.status) : -1) + during +
               " before reporting (the plugin ended the process)" + stderr_tail(run.err);
  }
  remember_probe(key, p);
  return p;
}

}  // namespace strata::detail
