// worker_process.cpp — starting, reading and burying the worker processes
// of `strata plugin check` and `strata trace diff` (worker_process.hpp).
#include "worker_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace strata::cli {

namespace {

constexpr size_t kStderrTail = 400;

}  // namespace

std::string signal_text(int sig) {
  const char* name = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) + (name != nullptr ? std::string(", SIG") + name : std::string());
}

std::string WorkerExit::death() const {
  if (timed_out) return "hang (no answer within " + std::to_string(limit_ms) + " ms)";
  if (signal != 0) return "crash (" + signal_text(signal) + ")";
  return "exit (status " + std::to_string(exit_status) + ")";
}

std::string WorkerExit::stderr_note() const {
  return stderr_tail.empty() ? "" : "; its stderr ended with: " + stderr_tail;
}

void emit_event(int fd, const nlohmann::json& event) {
  const std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) std::_Exit(4);  // the parent is gone: nobody to report to
    done += static_cast<size_t>(n);
  }
}

WorkerExit run_worker_process(const std::vector<std::string>& args, int64_t timeout_ms, int64_t startup_ms,
                              const std::function<void(const nlohmann::json&)>& on_event) {
  WorkerExit exit;
  int events[2], errs[2];
  if (::pipe2(events, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  if (::pipe2(errs, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(events[0]);
    ::close(events[1]);
    throw std::runtime_error(std::string("pipe: ") + std::strerror(e));
  }
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {events[0], events[1], errs[0], errs[1]}) ::close(fd);
    throw std::runtime_error(std::string("fork: ") + std::strerror(e));
  }
  if (pid == 0) {
    // The child: its own process group (killed as one), events on fd 3,
    // stdout discarded (a plugin may print), stderr to the parent.
    ::setpgid(0, 0);
    const int null_fd = ::open("/dev/null", O_WRONLY);
    if (::dup2(events[1], 3) < 0 || ::dup2(errs[1], 2) < 0 || null_fd < 0 || ::dup2(null_fd, 1) < 0) ::_exit(127);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: no race with the child's own call
  ::close(events[1]);
  ::close(errs[1]);

  std::string pending, err_tail;
  auto last_event = std::chrono::steady_clock::now();
  std::array<pollfd, 2> fds{{{events[0], POLLIN, 0}, {errs[0], POLLIN, 0}}};
  while (fds[0].fd >= 0) {
    const auto silent =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - last_event);
    const int64_t limit = exit.greeted ? timeout_ms : std::max(timeout_ms, startup_ms);
    const int64_t left = limit - silent.count();
    if (left <= 0) {
      exit.timed_out = true;
      exit.limit_ms = limit;
      break;
    }
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left, 1000)));
    if (n < 0 && errno != EINTR) break;
    for (pollfd& f : fds) {
      if (f.fd < 0 || (f.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[8192];
      const ssize_t got = ::read(f.fd, buf, sizeof buf);
      if (got <= 0) {
        if (got < 0 && errno == EINTR) continue;
        ::close(f.fd);
        f.fd = -1;
        continue;
      }
      if (&f == &fds[1]) {
        err_tail.append(buf, static_cast<size_t>(got));
        if (err_tail.size() > 4 * kStderrTail) err_tail.erase(0, err_tail.size() - kStderrTail);
        continue;
      }
      pending.append(buf, static_cast<size_t>(got));
      last_event = std::chrono::steady_clock::now();
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        nlohmann::json e = nlohmann::json::parse(pending.substr(0, nl), nullptr, false);
        pending.erase(0, nl + 1);
        if (e.is_discarded() || !e.is_object() || !e.contains("event")) continue;
        exit.greeted = true;
        on_event(e);
      }
    }
  }
  if (exit.timed_out) ::kill(-pid, SIGKILL);
  for (pollfd& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::kill(-pid, SIGKILL);  // anything the plugin left behind in the group
  if (WIFSIGNALED(status) && !exit.timed_out) exit.signal = WTERMSIG(status);
  if (WIFEXITED(status)) exit.exit_status = WEXITSTATUS(status);

  std::string tail = err_tail.size() > kStderrTail ? err_tail.substr(err_tail.size() - kStderrTail) : err_tail;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  exit.stderr_tail = tail;
  return exit;
}

}  // namespace strata::cli
