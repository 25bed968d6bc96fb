// launch.cpp — `strata launch -n N [--master-port P] PROGRAM ARGS...`: starts
// N local ranks of a distributed program (docs/distributed.md, "Launching").
//
// Each rank gets STRATA_RANK, STRATA_WORLD_SIZE, STRATA_MASTER_ADDR=127.0.0.1
// and STRATA_MASTER_PORT (the given port, else a free one the kernel picks).
// Several nodes: run launch once per node with --nnodes K --node-rank R
// --master-addr A --master-port P; node R starts ranks R*N .. R*N+N-1 of a
// world of K*N, all meeting at rank 0's TCP store on A:P (node 0).
// Their stdout and stderr are forwarded line by line, prefixed "[rank k] ",
// to launch's own stdout and stderr. When a rank exits non-zero or is killed
// by a signal, launch names it, sends SIGTERM to the others, SIGKILL after
// a grace period, and exits with that rank's status (128 + signal for a
// signal). A program that cannot be started: exit 127. SIGINT/SIGTERM to
// launch are forwarded to the ranks.
//
// With more than one rank and OMP_NUM_THREADS unset, every rank gets
// OMP_NUM_THREADS=1, as torchrun does: N ranks each running a team of all
// the cores oversubscribe the machine and spin on each other's cores (the
// 2-rank digits demo took 26 s instead of about 1 s). Set OMP_NUM_THREADS
// (or devices.cpu.threads) to choose otherwise; launch says which it used.
#include "commands.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

namespace strata::cli {
namespace {

constexpr auto kGracePeriod = std::chrono::seconds(5);

volatile std::sig_atomic_t g_forward_signal = 0;

void on_signal(int sig) { g_forward_signal = sig; }

/// A TCP port free on this host now (the kernel's pick).
int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

struct Stream {
  int fd = -1;
  std::string pending;  // a partial line
  std::ostream* sink = nullptr;
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  Stream out, err;
};

void emit(int rank, Stream& s, bool flush_partial) {
  size_t start = 0;
  while (true) {
    size_t nl = s.pending.find('\n', start);
    if (nl == std::string::npos) break;
    *s.sink << "[rank " << rank << "] " << std::string_view(s.pending).substr(start, nl - start + 1);
    start = nl + 1;
  }
  s.pending.erase(0, start);
  if (flush_partial && !s.pending.empty()) {
    *s.sink << "[rank " << rank << "] " << s.pending << "\n";
    s.pending.clear();
  }
  s.sink->flush();
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + ::strsignal(WTERMSIG(status)) + ")";
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

int exit_code(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

void signal_all(std::vector<Rank>& ranks, int sig) {
  for (auto& r : ranks)
    if (r.running) ::kill(r.pid, sig);
}

}  // namespace

int run_launch(const LaunchOptions& options) {
  if (options.nprocs < 1) {
    std::cerr << "strata launch: -n must be at least 1 (got " << options.nprocs << ")\n";
    return kBadInput;
  }
  if (options.command.empty()) {
    std::cerr << "strata launch: no program to run (strata launch -n N PROGRAM ARGS...)\n";
    return kBadInput;
  }
  if (options.nnodes < 1 || options.node_rank < 0 || options.node_rank >= options.nnodes) {
    std::cerr << "strata launch: --node-rank " << options.node_rank << " is not in 0.." << options.nnodes - 1
              << " (--nnodes " << options.nnodes << ")\n";
    return kBadInput;
  }
  if (options.nnodes > 1 && (options.master_addr.empty() || options.master_port < 0)) {
    std::cerr << "strata launch: --nnodes " << options.nnodes
              << " needs --master-addr and --master-port (node 0's address and a port every node uses)\n";
    return kBadInput;
  }
  const std::string master_addr = options.master_addr.empty() ? "127.0.0.1" : options.master_addr;
  const int world = options.nnodes * options.nprocs;
  const int first_rank = options.node_rank * options.nprocs;
  int port = options.master_port;
  if (port < 0) {
    port = free_port();
    if (port < 0) {
      std::cerr << "strata launch: found no free TCP port: " << std::strerror(errno) << "\n";
      return kFailure;
    }
  } else if (port == 0 || port > 65535) {
    std::cerr << "strata launch: --master-port " << port << " is not in 1..65535\n";
    return kBadInput;
  }

  std::vector<char*> argv;
  for (const auto& a : options.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  const bool one_thread_each = options.nprocs > 1 && std::getenv("OMP_NUM_THREADS") == nullptr;
  if (one_thread_each) {
    std::cerr << "strata launch: OMP_NUM_THREADS is not set: each of the " << options.nprocs
              << " ranks runs with OMP_NUM_THREADS=1 (set it to use more threads per rank)\n";
  }
  std::vector<Rank> ranks(static_cast<size_t>(options.nprocs));
  std::cout.flush();
  std::cerr.flush();
  for (int k = 0; k < options.nprocs; ++k) {
    int out[2], err[2], exec_err[2];
    if (::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC) || ::pipe2(exec_err, O_CLOEXEC)) {
      std::cerr << "strata launch: pipe: " << std::strerror(errno) << "\n";
      signal_all(ranks, SIGKILL);
      return kFailure;
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      std::cerr << "strata launch: fork: " << std::strerror(errno) << "\n";
      signal_all(ranks, SIGKILL);
      return kFailure;
    }
    if (pid == 0) {
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::setenv("STRATA_RANK", std::to_string(first_rank + k).c_str(), 1);
      ::setenv("STRATA_WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("STRATA_MASTER_ADDR", master_addr.c_str(), 1);
      ::setenv("STRATA_MASTER_PORT", std::to_string(port).c_str(), 1);
      if (one_thread_each) ::setenv("OMP_NUM_THREADS", "1", 1);
      ::execvp(argv[0], argv.data());
      int e = errno;
      [[maybe_unused]] ssize_t w = ::write(exec_err[1], &e, sizeof e);
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    ::close(exec_err[1]);
    int e = 0;
    ssize_t got;
    do {
      got = ::read(exec_err[0], &e, sizeof e);
    } while (got < 0 && errno == EINTR);
    ::close(exec_err[0]);
    Rank& r = ranks[static_cast<size_t>(k)];
    r.pid = pid;
    r.running = true;
    r.out = {out[0], "", &std::cout};
    r.err = {err[0], "", &std::cerr};
    if (got == static_cast<ssize_t>(sizeof e)) {  // exec failed
      std::cerr << "strata launch: cannot run \"" << options.command[0] << "\": " << std::strerror(e) << "\n";
      signal_all(ranks, SIGKILL);
      for (auto& q : ranks)
        if (q.running) {
          ::waitpid(q.pid, nullptr, 0);
          ::close(q.out.fd);
          ::close(q.err.fd);
        }
      return 127;
    }
  }

  int failed_rank = -1, failed_status = 0;
  bool terminating = false;
  std::chrono::steady_clock::time_point kill_at{};
  size_t running = ranks.size();
  while (true) {
    // Output.
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, Stream*>> which;
    for (size_t k = 0; k < ranks.size(); ++k)
      for (Stream* s : {&ranks[k].out, &ranks[k].err})
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          which.emplace_back(k, s);
        }
    if (running == 0 && fds.empty()) break;
    int ready = fds.empty() ? (::usleep(50000), 0) : ::poll(fds.data(), fds.size(), 50);
    for (size_t j = 0; ready > 0 && j < fds.size(); ++j) {
      if (!(fds[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [k, s] = which[j];
      char buf[8192];
      ssize_t n = ::read(s->fd, buf, sizeof buf);
      if (n > 0) {
        s->pending.append(buf, static_cast<size_t>(n));
        emit(first_rank + static_cast<int>(k), *s, false);
      } else if (n == 0 || errno != EINTR) {
        emit(first_rank + static_cast<int>(k), *s, true);
        ::close(s->fd);
        s->fd = -1;
      }
    }
    // Exits.
    for (size_t k = 0; k < ranks.size(); ++k) {
      Rank& r = ranks[k];
      if (!r.running) continue;
      int status = 0;
      if (::waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      r.running = false;
      --running;
      bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (failed && failed_rank < 0 && !terminating) {
        failed_rank = static_cast<int>(k);
        failed_status = status;
        std::cerr << "strata launch: rank " << first_rank + static_cast<int>(k) << " " << describe_status(status)
                  << (running > 0 ? "; terminating the other ranks" : "") << "\n";
        terminating = true;
        signal_all(ranks, SIGTERM);
        kill_at = std::chrono::steady_clock::now() + kGracePeriod;
      }
    }
    if (g_forward_signal && !terminating) {
      std::cerr << "strata launch: got signal " << g_forward_signal << "; terminating the ranks\n";
      terminating = true;
      signal_all(ranks, SIGTERM);
      kill_at = std::chrono::steady_clock::now() + kGracePeriod;
    }
    if (terminating && running > 0 && std::chrono::steady_clock::now() >= kill_at) {
      signal_all(ranks, SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
  }
  if (failed_rank >= 0) return exit_code(failed_status);
  if (g_forward_signal) return 128 + g_forward_signal;
  return kOk;
}

}  // namespace strata::cli
