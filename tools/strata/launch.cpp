// launch.cpp — `strata launch -n N [--master-port P] PROGRAM ARGS...`: starts
// N local ranks of a distributed program (docs/distributed.md, "Launching").
// `--hosts H0,H1,...` starts one such launch on every host through a remote
// shell (`--launcher`, default ssh), node k on host k, and supervises them
// as it supervises local ranks ("Multi-host").
//
// Each rank gets STRATA_RANK, STRATA_WORLD_SIZE, STRATA_LOCAL_RANK (its index
// on this node), STRATA_LOCAL_WORLD_SIZE, STRATA_MASTER_ADDR=127.0.0.1,
// STRATA_MASTER_PORT (the given port, else a free one the kernel picks) and
// STRATA_JOB_TOKEN, the secret rank 0's store asks of every connection: 128
// random bits per run, or launch's own STRATA_JOB_TOKEN when it has one
// (--hosts hands its token to every node that way, on the remote shell's
// standard input rather than its command line).
// Several nodes: run launch once per node with --nnodes K --node-rank R
// --master-addr A --master-port P; node R starts ranks R*N .. R*N+N-1 of a
// world of K*N, all meeting at rank 0's TCP store on A:P (node 0).
// Their stdout and stderr are forwarded line by line, prefixed "[rank k] ",
// to launch's own stdout and stderr. When a rank exits non-zero or is killed
// by a signal, launch names it, sends SIGTERM to the others, SIGKILL after
// a grace period, and exits with that rank's status (128 + signal for a
// signal); "first" is the order the ranks ended in, which a thread blocked
// in waitpid(-1) sees, except that a rank killed by a signal within 1 s
// after a rank failed is named instead (supervise says why). A program that cannot be started: exit 127. SIGINT, SIGTERM and
// SIGHUP (a remote shell that goes away) to launch are forwarded to the ranks.
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
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace strata::cli {
namespace {

constexpr auto kGracePeriod = std::chrono::seconds(5);
/// After a rank fails, how long launch waits for others to end on their own
/// before it names the one that failed first (see supervise).
/// 250 ms once lost a SIGKILLed rank to the survivors' exit 1 on a loaded
/// machine (Launch.TheFirstRankToEndDecidesTheStatus in a parallel test run
/// beside a build); a second is nothing beside a failed job.
constexpr auto kSettleTime = std::chrono::milliseconds(1000);

/// A program that cannot be started, as a shell reports it.
constexpr int kNotFound = 127;
volatile std::sig_atomic_t g_forward_signal = 0;
/// The last failure supervise() named ("rank 1 was killed by signal 9"),
/// for the message of an exhausted restart budget.
std::string g_last_failure;

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

/// A fresh job token: 128 bits from /dev/urandom in hex; "" when it
/// cannot be read.
std::string random_token() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  unsigned char raw[16];
  if (!in.read(reinterpret_cast<char*>(raw), sizeof raw)) return "";
  static const char* digits = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : raw) {
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  return hex;
}

struct Stream {
  int fd = -1;
  std::string pending;  // a partial line
  std::ostream* sink = nullptr;
};

/// What to start: a local rank, or (with --hosts) the remote shell that runs
/// one node's launch.
struct ChildSpec {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // set in the child
  std::vector<std::string> unset;                         // removed from the child's environment first
  std::string prefix;                                     // before each output line
  std::string name;                                       // in messages: "rank 3", "node 1 (hostb)"
  std::string input;  // non-empty: the child's standard input, then end of file
};

struct Child {
  pid_t pid = -1;
  bool running = false;
  Stream out, err;
};

void emit(const std::string& prefix, Stream& s, bool flush_partial) {
  size_t start = 0;
  while (true) {
    size_t nl = s.pending.find('\n', start);
    if (nl == std::string::npos) break;
    *s.sink << prefix << std::string_view(s.pending).substr(start, nl - start + 1);
    start = nl + 1;
  }
  s.pending.erase(0, start);
  if (flush_partial && !s.pending.empty()) {
    *s.sink << prefix << s.pending << "\n";
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

/// Reaps children on a thread blocked in waitpid(-1), so that they are
/// reaped in the order they end (a loop polling each child in turn would
/// report whichever it looked at first when several had ended), and wakes
/// the supervising loop through a pipe.
class Reaper {
 public:
  Reaper() {
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
  }
  ~Reaper() {
    if (thread_.joinable()) thread_.join();
    for (int fd : wake_)
      if (fd >= 0) ::close(fd);
  }
  /// Call once every child was started: the thread ends when none is left.
  void start() {
    thread_ = std::thread([this] {
      sigset_t forwarded;
      ::sigemptyset(&forwarded);
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaddset(&forwarded, sig);
      ::pthread_sigmask(SIG_BLOCK, &forwarded, nullptr);  // they are the main loop's
      while (true) {
        int status = 0;
        pid_t pid = ::waitpid(-1, &status, 0);
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0) return;  // ECHILD: every child was reaped
        {
          std::lock_guard lock(mu_);
          ended_.emplace_back(pid, status);
        }
        char one = 1;
        [[maybe_unused]] ssize_t w = ::write(wake_[1], &one, 1);
      }
    });
  }
  int wake_fd() const { return wake_[0]; }
  /// The children that ended since the last call, in the order they ended.
  std::deque<std::pair<pid_t, int>> take() {
    char buf[64];
    while (::read(wake_[0], buf, sizeof buf) > 0) {
    }
    std::lock_guard lock(mu_);
    return std::exchange(ended_, {});
  }

 private:
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::mutex mu_;
  std::deque<std::pair<pid_t, int>> ended_;
};

/// Signals each child's process group (every child leads its own), so that
/// what a rank started itself (a shell's commands) ends with it. Groups of
/// children already reaped are signalled too: a process they left behind
/// may still hold the output pipes open.
void signal_all(std::vector<Child>& children, int sig) {
  for (auto& c : children)
    if (c.pid > 0) ::kill(-c.pid, sig);
}

/// Starts every child, forwards their output line by line with its prefix,
/// and ends them all when one fails or launch gets a signal. `what` names
/// the children in messages ("ranks", "nodes"). Returns launch's exit code.
int supervise(const std::vector<ChildSpec>& specs, const std::string& what) {
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  ::sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);

  std::vector<Child> children(specs.size());
  Reaper reaper;
  if (reaper.wake_fd() < 0) {
    std::cerr << "strata launch: pipe: " << std::strerror(errno) << "\n";
    return kFailure;
  }
  std::cout.flush();
  std::cerr.flush();
  for (size_t k = 0; k < specs.size(); ++k) {
    const ChildSpec& spec = specs[k];
    std::vector<char*> argv;
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int out[2], err[2], exec_err[2], in[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC) || ::pipe2(exec_err, O_CLOEXEC) ||
        (!spec.input.empty() && ::pipe2(in, O_CLOEXEC))) {
      std::cerr << "strata launch: pipe: " << std::strerror(errno) << "\n";
      signal_all(children, SIGKILL);
      return kFailure;
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      std::cerr << "strata launch: fork: " << std::strerror(errno) << "\n";
      signal_all(children, SIGKILL);
      return kFailure;
    }
    if (pid == 0) {
      ::setpgid(0, 0);
      for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::signal(sig, SIG_DFL);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      if (in[0] >= 0) ::dup2(in[0], STDIN_FILENO);
      for (const std::string& name : spec.unset) ::unsetenv(name.c_str());
      for (const auto& [name, value] : spec.env) ::setenv(name.c_str(), value.c_str(), 1);
      ::execvp(argv[0], argv.data());
      int e = errno;
      [[maybe_unused]] ssize_t w = ::write(exec_err[1], &e, sizeof e);
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also here: the child may not have run yet when we signal it
    ::close(out[1]);
    ::close(err[1]);
    ::close(exec_err[1]);
    if (in[0] >= 0) {
      // A line or two: fits the pipe's buffer, so the write does not block.
      // The child may be gone already (a launcher that failed): SIGPIPE is
      // ignored for the write, whose failure the child's status tells.
      ::close(in[0]);
      struct sigaction ignore{}, previous{};
      ignore.sa_handler = SIG_IGN;
      ::sigaction(SIGPIPE, &ignore, &previous);
      [[maybe_unused]] ssize_t w = ::write(in[1], spec.input.data(), spec.input.size());
      ::sigaction(SIGPIPE, &previous, nullptr);
      ::close(in[1]);
    }
    int e = 0;
    ssize_t got;
    do {
      got = ::read(exec_err[0], &e, sizeof e);
    } while (got < 0 && errno == EINTR);
    ::close(exec_err[0]);
    Child& c = children[k];
    c.pid = pid;
    c.running = true;
    c.out = {out[0], "", &std::cout};
    c.err = {err[0], "", &std::cerr};
    if (got == static_cast<ssize_t>(sizeof e)) {  // exec failed
      std::cerr << "strata launch: cannot run \"" << spec.argv[0] << "\": " << std::strerror(e) << "\n";
      signal_all(children, SIGKILL);
      for (auto& q : children)
        if (q.running) {
          ::waitpid(q.pid, nullptr, 0);
          ::close(q.out.fd);
          ::close(q.err.fd);
        }
      return kNotFound;
    }
  }

  int failed = -1, failed_status = 0;
  bool terminating = false;
  // Set by the first failure: the ranks that end until `decide_at` are
  // weighed before one is named (below).
  bool deciding = false;
  std::chrono::steady_clock::time_point decide_at{};
  std::chrono::steady_clock::time_point kill_at{};
  size_t running = children.size();
  reaper.start();
  while (true) {
    // Output.
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, Stream*>> which;
    for (size_t k = 0; k < children.size(); ++k)
      for (Stream* s : {&children[k].out, &children[k].err})
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          which.emplace_back(k, s);
        }
    if (running == 0 && fds.empty()) break;
    const size_t streams = fds.size();
    fds.push_back({reaper.wake_fd(), POLLIN, 0});
    int ready = ::poll(fds.data(), fds.size(), 50);
    for (size_t j = 0; ready > 0 && j < streams; ++j) {
      if (!(fds[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto [k, s] = which[j];
      char buf[8192];
      ssize_t n = ::read(s->fd, buf, sizeof buf);
      if (n > 0) {
        s->pending.append(buf, static_cast<size_t>(n));
        emit(specs[k].prefix, *s, false);
      } else if (n == 0 || errno != EINTR) {
        emit(specs[k].prefix, *s, true);
        ::close(s->fd);
        s->fd = -1;
      }
    }
    // Exits, in the order the children ended.
    for (auto [pid, status] : reaper.take()) {
      size_t k = 0;
      while (k < children.size() && children[k].pid != pid) ++k;
      if (k == children.size() || !children[k].running) continue;
      Child& c = children[k];
      c.running = false;
      --running;
      bool bad = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (!bad || terminating) continue;
      if (!deciding) {
        deciding = true;
        decide_at = std::chrono::steady_clock::now() + kSettleTime;
        failed = static_cast<int>(k);
        failed_status = status;
      } else if (WIFSIGNALED(status) && !WIFSIGNALED(failed_status)) {
        failed = static_cast<int>(k);
        failed_status = status;
      }
    }
    // The first failure, except that a rank killed by a signal in the
    // moments after (launch has signalled nobody yet) is named instead: a
    // killed rank's sockets close before the kernel lets its parent reap
    // it, so the ranks that lost it may exit 1 before it can be reaped, and
    // its death is the cause of theirs.
    if (deciding && !terminating &&
        (std::chrono::steady_clock::now() >= decide_at || running == 0 || g_forward_signal)) {
      g_last_failure = specs[static_cast<size_t>(failed)].name + " " + describe_status(failed_status);
      std::cerr << "strata launch: " << g_last_failure << (running > 0 ? "; terminating the other " + what : "")
                << "\n";
      terminating = true;
      signal_all(children, SIGTERM);
      kill_at = std::chrono::steady_clock::now() + kGracePeriod;
    }
    if (g_forward_signal && !terminating) {
      std::cerr << "strata launch: got signal " << g_forward_signal << "; terminating the " << what << "\n";
      terminating = true;
      signal_all(children, SIGTERM);
      kill_at = std::chrono::steady_clock::now() + kGracePeriod;
    }
    // After the grace period, SIGKILL whatever is left: ranks, or processes
    // they left behind that still hold the output pipes.
    if (terminating && (running > 0 || streams > 0) && std::chrono::steady_clock::now() >= kill_at) {
      signal_all(children, SIGKILL);
      kill_at = std::chrono::steady_clock::time_point::max();
    }
  }
  if (failed >= 0) return exit_code(failed_status);
  if (g_forward_signal) return 128 + g_forward_signal;
  return kOk;
}

/// False (after saying why) unless `port` is a TCP port, or -1 (none given).
bool port_ok(int port) {
  if (port == -1 || (port >= 1 && port <= 65535)) return true;
  std::cerr << "strata launch: --master-port " << port << " is not in 1..65535\n";
  return false;
}

/// False (after saying why) when `nodes` x `per_node` ranks do not fit a
/// world size (an int): ranks would get negative numbers.
bool world_fits(int64_t nodes, int64_t per_node, const std::string& nodes_given) {
  if (nodes * per_node <= INT_MAX) return true;
  std::cerr << "strata launch: " << nodes_given << " x -n " << per_node << " = " << nodes * per_node
            << " ranks: more than " << INT_MAX << ", the largest world size\n";
  return false;
}

/// The rank variables of the launchers init_process_group also reads
/// (distributed/src/launch_env.cpp), cleared for the ranks launch starts:
/// launch is their innermost launcher, so an outer one's variables (srun's
/// SLURM_PROCID of the task that runs launch, a pod's RANK) describe another
/// process and, beside STRATA_*, would read as a contradiction.
constexpr const char* kOuterLauncherVariables[] = {
    "RANK",         "WORLD_SIZE",      "LOCAL_RANK",      "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",     "PMI_SIZE",        "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "SLURM_PROCID", "SLURM_NTASKS",    "SLURM_LOCALID"};

/// The job token for the ranks: launch's own STRATA_JOB_TOKEN, else a fresh
/// random one when `fresh` (else ""). Sets `error` when /dev/urandom fails.
std::string job_token(bool fresh, std::string& error) {
  const char* given = std::getenv("STRATA_JOB_TOKEN");
  if (given && *given) return given;
  if (!fresh) return "";
  std::string token = random_token();
  if (token.empty()) error = std::string("cannot read /dev/urandom for the job token: ") + std::strerror(errno);
  return token;
}

/// `word` quoted for a POSIX shell.
std::string shell_quote(const std::string& word) {
  std::string q = "'";
  for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  for (char c : text) {
    if (c == sep) {
      parts.push_back(part);
      part.clear();
    } else {
      part += c;
    }
  }
  parts.push_back(part);
  return parts;
}

/// --hosts: node k runs `LAUNCHER HOST_k 'cd CWD && exec env ... STRATA launch
/// -n N --nnodes K --node-rank k --master-addr HOST_0 --master-port P PROGRAM
/// ARGS'`. The remote shell does not carry the environment, so STRATA_* and
/// OMP_NUM_THREADS are passed on the command line.
int run_hosts(const LaunchOptions& options) {
  std::vector<std::string> hosts = split(options.hosts, ',');
  for (size_t k = 0; k < hosts.size(); ++k)
    if (hosts[k].empty() || hosts[k].find_first_of(" \t'\"") != std::string::npos) {
      std::cerr << "strata launch: --hosts \"" << options.hosts << "\": entry " << k
                << " is not a host name (a comma-separated list such as node0,node1)\n";
      return kBadInput;
    }
  if (options.nnodes != 1 || options.node_rank != 0) {
    std::cerr << "strata launch: --hosts starts every node itself: give it without --nnodes and --node-rank\n";
    return kBadInput;
  }
  std::vector<std::string> launcher;
  for (const std::string& w : split(options.launcher, ' '))
    if (!w.empty()) launcher.push_back(w);
  if (launcher.empty()) {
    std::cerr << "strata launch: --launcher is empty (default: \"ssh -o BatchMode=yes\")\n";
    return kBadInput;
  }
  if (!port_ok(options.master_port) ||
      !world_fits(static_cast<int64_t>(hosts.size()), options.nprocs, std::to_string(hosts.size()) + " hosts"))
    return kBadInput;
  const int port = options.master_port < 0 ? 29500 : options.master_port;
  std::string error;
  const std::string token = job_token(true, error);
  if (token.empty()) {
    std::cerr << "strata launch: " << error << "\n";
    return kFailure;
  }
  const std::string master = options.master_addr.empty() ? hosts[0] : options.master_addr;
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  const std::string cwd = std::filesystem::current_path(ec).string();
  if (self.empty() || cwd.empty()) {
    std::cerr << "strata launch: cannot find this program's path or the working directory: " << ec.message() << "\n";
    return kFailure;
  }
  std::string env = "env";
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string name = kv.substr(0, kv.find('='));
    // The token travels on standard input: a command line is visible to
    // every user of the remote host.
    bool strata = name.rfind("STRATA_", 0) == 0 && name != "STRATA_RANK" && name != "STRATA_WORLD_SIZE" &&
                  name != "STRATA_MASTER_ADDR" && name != "STRATA_MASTER_PORT" && name != "STRATA_JOB_TOKEN";
    if (strata || name == "OMP_NUM_THREADS") env += " " + shell_quote(kv);
  }
  std::vector<ChildSpec> specs;
  for (size_t k = 0; k < hosts.size(); ++k) {
    std::string remote = "IFS= read -r STRATA_JOB_TOKEN && export STRATA_JOB_TOKEN && cd " + shell_quote(cwd) +
                         " && exec " + env + " " + shell_quote(self) + " launch -n " +
                         std::to_string(options.nprocs) + " --nnodes " + std::to_string(hosts.size()) +
                         " --node-rank " + std::to_string(k) + " --master-addr " + shell_quote(master) +
                         " --master-port " + std::to_string(port);
    for (const auto& a : options.command) remote.append(" ").append(shell_quote(a));
    ChildSpec spec;
    spec.argv = launcher;
    spec.argv.push_back(hosts[k]);
    spec.argv.push_back(remote);
    spec.name = "node " + std::to_string(k) + " (" + hosts[k] + ")";
    spec.input = token + "\n";
    specs.push_back(std::move(spec));
  }
  std::cerr << "strata launch: " << hosts.size() << " nodes x " << options.nprocs << " ranks, rank 0's store at "
            << master << ":" << port << ", started with \"" << options.launcher << "\"\n";
  return supervise(specs, "nodes");
}

}  // namespace

/// One attempt: the ranks of this node, started and supervised.
int run_ranks_once(const LaunchOptions& options, int first_rank, int world, const std::string& master_addr, int port,
                   const std::string& token, bool one_thread_each, int attempt);

int run_launch(const LaunchOptions& options) {
  if (options.nprocs < 1) {
    std::cerr << "strata launch: -n must be at least 1 (got " << options.nprocs << ")\n";
    return kBadInput;
  }
  if (options.command.empty()) {
    std::cerr << "strata launch: no program to run (strata launch -n N PROGRAM ARGS...)\n";
    return kBadInput;
  }
  if (!options.hosts.empty()) return run_hosts(options);
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
  if (!port_ok(options.master_port) ||
      !world_fits(options.nnodes, options.nprocs, "--nnodes " + std::to_string(options.nnodes)))
    return kBadInput;
  const std::string master_addr = options.master_addr.empty() ? "127.0.0.1" : options.master_addr;
  const int world = options.nnodes * options.nprocs;            // fits: checked above
  const int first_rank = options.node_rank * options.nprocs;   // below world
  int port = options.master_port;
  if (port < 0) {
    port = free_port();
    if (port < 0) {
      std::cerr << "strata launch: found no free TCP port: " << std::strerror(errno) << "\n";
      return kFailure;
    }
  }
  // Several nodes each run a launch: a token made here would be this
  // node's alone, so it must come from outside (--hosts passes its own).
  std::string error;
  const std::string token = job_token(options.nnodes == 1, error);
  if (!error.empty()) {
    std::cerr << "strata launch: " << error << "\n";
    return kFailure;
  }
  if (token.empty())
    std::cerr << "strata launch: STRATA_JOB_TOKEN is not set: rank 0's store admits any process that speaks its "
                 "protocol; set the same secret on every node (e.g. STRATA_JOB_TOKEN=$(openssl rand -hex 16))\n";

  const bool one_thread_each = options.nprocs > 1 && std::getenv("OMP_NUM_THREADS") == nullptr;
  if (one_thread_each) {
    std::cerr << "strata launch: OMP_NUM_THREADS is not set: each of the " << options.nprocs
              << " ranks runs with OMP_NUM_THREADS=1 (set it to use more threads per rank)\n";
  }
  if (options.max_restarts < 0) {
    std::cerr << "strata launch: --max-restarts must be at least 0 (got " << options.max_restarts << ")\n";
    return kBadInput;
  }
  if (options.max_restarts > 0 && options.nnodes > 1) {
    std::cerr << "strata launch: --max-restarts restarts the ranks of one node: with --nnodes " << options.nnodes
              << " the other nodes' ranks would not restart with them (restart the whole job instead)\n";
    return kBadInput;
  }
  // Elastic restarts (docs/distributed.md, "Restarts"): when a rank fails,
  // every rank is stopped and all start again, up to --max-restarts times,
  // each attempt told its number in STRATA_RESTART_COUNT; a program resumes
  // from its latest complete training state (distributed::Checkpointer).
  for (int attempt = 0;; ++attempt) {
    if (attempt > 0 && options.master_port < 0) {
      port = free_port();  // the last attempt's port may still be held by a dying rank
      if (port < 0) {
        std::cerr << "strata launch: found no free TCP port: " << std::strerror(errno) << "\n";
        return kFailure;
      }
    }
    const int status = run_ranks_once(options, first_rank, world, master_addr, port, token, one_thread_each, attempt);
    if (status == kOk || status == kNotFound || g_forward_signal != 0) return status;
    if (attempt >= options.max_restarts) {
      if (options.max_restarts > 0) {
        std::cerr << "strata launch: giving up after " << options.max_restarts << " restart"
                  << (options.max_restarts == 1 ? "" : "s") << ": the last failure: " << g_last_failure << "\n";
      }
      return status;
    }
    std::cerr << "strata launch: restarting the " << options.nprocs << " ranks (restart " << attempt + 1 << " of "
              << options.max_restarts << ")\n";
  }
}

int run_ranks_once(const LaunchOptions& options, int first_rank, int world, const std::string& master_addr, int port,
                   const std::string& token, bool one_thread_each, int attempt) {
  std::vector<ChildSpec> specs;
  for (int k = 0; k < options.nprocs; ++k) {
    ChildSpec spec;
    spec.argv = options.command;
    spec.env = {{"STRATA_RANK", std::to_string(first_rank + k)},
                {"STRATA_WORLD_SIZE", std::to_string(world)},
                {"STRATA_LOCAL_RANK", std::to_string(k)},
                {"STRATA_LOCAL_WORLD_SIZE", std::to_string(options.nprocs)},
                {"STRATA_MASTER_ADDR", master_addr},
                {"STRATA_MASTER_PORT", std::to_string(port)}};
    spec.unset.assign(std::begin(kOuterLauncherVariables), std::end(kOuterLauncherVariables));
    spec.env.emplace_back("STRATA_RESTART_COUNT", std::to_string(attempt));
    if (!token.empty()) spec.env.emplace_back("STRATA_JOB_TOKEN", token);
    if (one_thread_each) spec.env.emplace_back("OMP_NUM_THREADS", "1");
    spec.prefix = "[rank " + std::to_string(first_rank + k) + "] ";
    spec.name = "rank " + std::to_string(first_rank + k);
    specs.push_back(std::move(spec));
  }
  return supervise(specs, "ranks");
}

}  // namespace strata::cli
