// harness.hpp — what the distributed suites share: running dist_worker (or
// `strata launch`) as real processes on loopback, each run bounded in
// time, with their exit statuses and output collected.
#pragma once

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace strata_dist_test {

using Env = std::map<std::string, std::string>;

struct Result {
  int status = -1;  // exit status, 128+signal, or -1 when killed at the deadline
  bool timed_out = false;
  std::string output;  // stdout and stderr together
};

/// A port nobody listens on now (the kernel's pick; a small race remains).
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// Runs the commands concurrently, each with its environment added to
/// ours; kills what is left at `deadline`.
inline std::vector<Result> run_all(const std::vector<std::vector<std::string>>& argvs, const std::vector<Env>& envs,
                                   std::chrono::seconds deadline = std::chrono::seconds(60)) {
  size_t n = argvs.size();
  std::vector<pid_t> pids(n);
  std::vector<int> fds(n);
  std::vector<Result> results(n);
  for (size_t k = 0; k < n; ++k) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) std::abort();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(p[1], 1);
      ::dup2(p[1], 2);
      for (const auto& [key, value] : envs[k]) ::setenv(key.c_str(), value.c_str(), 1);
      std::vector<char*> args;
      for (const auto& a : argvs[k]) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      std::perror("execv");
      std::_Exit(126);
    }
    ::close(p[1]);
    pids[k] = pid;
    fds[k] = p[0];
  }
  auto end = std::chrono::steady_clock::now() + deadline;
  size_t open = n;
  while (open > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    std::vector<pollfd> p;
    std::vector<size_t> which;
    for (size_t k = 0; k < n; ++k)
      if (fds[k] >= 0) {
        p.push_back({fds[k], POLLIN, 0});
        which.push_back(k);
      }
    if (::poll(p.data(), p.size(), static_cast<int>(std::min<long>(left, 1000))) <= 0) continue;
    for (size_t j = 0; j < p.size(); ++j) {
      if (!(p[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t r = ::read(p[j].fd, buf, sizeof buf);
      size_t k = which[j];
      if (r > 0) {
        results[k].output.append(buf, static_cast<size_t>(r));
      } else {
        ::close(fds[k]);
        fds[k] = -1;
        --open;
      }
    }
  }
  for (size_t k = 0; k < n; ++k) {
    int status = 0;
    pid_t got = ::waitpid(pids[k], &status, WNOHANG);
    if (got == 0) {  // still running at the deadline (or closed its output and hangs)
      auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (got == 0 && std::chrono::steady_clock::now() < std::min(end, grace) + std::chrono::seconds(0)) {
        ::usleep(20000);
        got = ::waitpid(pids[k], &status, WNOHANG);
      }
      if (got == 0) {
        ::kill(pids[k], SIGKILL);
        ::waitpid(pids[k], &status, 0);
        results[k].timed_out = true;
        results[k].status = -1;
        if (fds[k] >= 0) ::close(fds[k]);
        continue;
      }
    }
    if (fds[k] >= 0) ::close(fds[k]);
    results[k].status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return results;
}

struct Ranks {
  int world = 2;
  std::string scenario;
  Env env;                      // for every rank
  std::map<int, Env> rank_env;  // per rank
  bool file_store = false;
  int ranks_started = -1;  // -1: all of them
};

inline std::string file_store_dir() {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path() /
             ("strata-dist-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline std::vector<Result> run_ranks(const Ranks& spec, std::chrono::seconds deadline = std::chrono::seconds(60)) {
  int port = free_port();
  std::string dir = spec.file_store ? file_store_dir() : "";
  std::vector<std::vector<std::string>> argvs;
  std::vector<Env> envs;
  int started = spec.ranks_started < 0 ? spec.world : spec.ranks_started;
  for (int r = 0; r < started; ++r) {
    argvs.push_back({DIST_WORKER, spec.scenario});
    Env e{{"STRATA_RANK", std::to_string(r)},
          {"STRATA_WORLD_SIZE", std::to_string(spec.world)},
          {"STRATA_MASTER_ADDR", "127.0.0.1"},
          {"STRATA_MASTER_PORT", std::to_string(port)},
          {"STRATA_DIST_TIMEOUT_MS", "20000"}};
    if (spec.file_store) e["DIST_TEST_FILE_STORE"] = dir;
    for (const auto& [k, v] : spec.env) e[k] = v;
    if (auto it = spec.rank_env.find(r); it != spec.rank_env.end())
      for (const auto& [k, v] : it->second) e[k] = v;
    envs.push_back(e);
  }
  auto results = run_all(argvs, envs, deadline);
  if (!dir.empty()) std::filesystem::remove_all(dir);
  return results;
}

inline std::string describe(const std::vector<Result>& results) {
  std::string s;
  for (size_t r = 0; r < results.size(); ++r)
    s += "--- rank " + std::to_string(r) + " status " + std::to_string(results[r].status) +
         (results[r].timed_out ? " (killed at the deadline)" : "") + "\n" + results[r].output;
  return s;
}

inline void expect_all_pass(const std::vector<Result>& results) {
  for (const auto& r : results) EXPECT_EQ(r.status, 0) << describe(results);
}

inline bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

}  // namespace strata_dist_test
