// store.hpp — rendezvous stores: the TCP key-value store (server on rank 0,
// a client on every rank) and Gloo's FileStore, both behind one interface
// that Gloo's connectFullMesh can use and that can tell which keys exist.
#pragma once

#include "socket_io.hpp"
#include "store_session.hpp"
#include "store_wire.hpp"

#include <gloo/rendezvous/store.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strata::distributed::detail {

/// A gloo store that can also check keys without waiting, and describe
/// itself for messages ("the TCP store at 127.0.0.1:29500").
class RendezvousStore : public gloo::rendezvous::Store {
 public:
  /// Which of `keys` are present (no waiting).
  virtual std::vector<bool> check(const std::vector<std::string>& keys) = 0;
  virtual std::string describe() const = 0;
  /// Sets `key` for as long as this client stays connected: the server
  /// erases it when the connection closes (the process exited or died), so
  /// that other ranks can tell who is gone. False when the store cannot
  /// (a file store); then nothing is set.
  virtual bool set_owned(const std::string& key, const std::vector<char>& data) { return false; }
  /// True for the first caller only: the first process to claim `key`
  /// (a rank number) owns it for the run.
  virtual bool claim(const std::string& key) = 0;
};

/// The key-value server rank 0 runs (docs/distributed.md, "The TCP
/// store"): one thread accepting, one per connection, each connection a
/// StoreSession. Values live until the server stops, except keys set with
/// set_owned, which live as long as the connection that set them.
class TcpStoreServer {
 public:
  struct Options {
    std::string host;  // the address to listen on (empty: every interface)
    int port = 0;
    std::string token;  // the job token a hello must carry; empty: any
    /// Bounds the hello (at most 10 s of it), a frame's payload once its
    /// header arrived, and every reply.
    std::chrono::milliseconds io_timeout{60000};
    size_t max_connections = 64;  // more are refused at once
    std::string host_from = "STRATA_MASTER_ADDR";  // where `host` came from, for messages
  };
  /// Binds host:port and starts serving. DistributedError naming the
  /// address when it is in use or not this host's.
  explicit TcpStoreServer(Options options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  /// Waits until no connection is open, for at most `most`: rank 0 failing
  /// its rendezvous keeps serving until the other ranks have read why.
  void linger(std::chrono::milliseconds most);

 private:
  struct Connection {
    int fd = -1;  // closed (and -1) by its thread, under mu_
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void accept_loop();
  void serve(Connection& c);
  /// Logs (at warn, the first kMaxRefusalsLogged times) that the
  /// connection from `peer` was refused and why.
  void refuse(const std::string& peer, const std::string& why);

  Options options_;
  std::string bound_;  // "127.0.0.1:29500", for messages
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  StoreState state_;
  std::mutex mu_;                  // guards connections_
  std::condition_variable ended_;  // a connection ended
  std::list<Connection> connections_;
  std::atomic<int> refusals_{0};
  std::thread acceptor_;
};

/// One rank's connection to the TCP store. Thread-safe (one request at a
/// time). Every request is bounded: its wait plus a margin of up to 2 s for
/// GET and WAIT, the timeout for the others; a request that fails on the
/// connection leaves it unusable (a late reply would answer the next one).
class TcpStoreClient : public RendezvousStore {
 public:
  /// Connects to host:port and says hello with `token`, retrying until
  /// `timeout`; DistributedError naming the address and the timeout when
  /// the server never answers, or at once when it refuses the token. `who`
  /// prefixes messages ("rank 1 of 2").
  TcpStoreClient(const std::string& host, int port, std::chrono::milliseconds timeout, std::string who,
                 std::string token = "");
  ~TcpStoreClient() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  bool set_owned(const std::string& key, const std::vector<char>& data) override;
  bool claim(const std::string& key) override { return add(key, 1) == 1; }
  /// Waits (up to the timeout) for the key, then returns its value.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  std::vector<bool> check(const std::vector<std::string>& keys) override;
  /// Adds `delta` to the integer stored at `key` (0 when absent); returns
  /// the new value.
  int64_t add(const std::string& key, int64_t delta);
  std::string describe() const override;

 private:
  /// Sends a request and returns the reply; DistributedError naming `what`
  /// ("get(\"k\")") when the connection fails, times out or the reply is
  /// malformed.
  wire::Reply request(wire::Command command, std::chrono::milliseconds wait, const std::vector<wire::View>& parts,
                      const std::string& what, wire::Bytes& storage);
  /// Says hello on a fresh connection; "" when welcomed, else why not.
  /// DistributedError when the server refuses the token.
  std::string hello(int fd, net::Clock::time_point deadline);

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::string who_;
  std::string token_;
  int fd_ = -1;
  std::string broken_;  // why the connection is unusable ("" while it is fine)
  std::mutex mu_;
};

/// Gloo's FileStore with check() made public.
class FileRendezvousStore : public RendezvousStore {
 public:
  FileRendezvousStore(const std::string& path, std::chrono::milliseconds timeout);
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  std::vector<bool> check(const std::vector<std::string>& keys) override;
  /// Creates a file named after `key` in the directory, exclusively.
  bool claim(const std::string& key) override;
  std::string describe() const override;

 private:
  std::string path_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<gloo::rendezvous::Store> store_;
};

/// Prefixes every key, so that groups (and generations) share one store.
class PrefixedStore : public RendezvousStore {
 public:
  PrefixedStore(std::string prefix, RendezvousStore& base) : prefix_(std::move(prefix)), base_(base) {}
  void set(const std::string& key, const std::vector<char>& data) override { base_.set(prefix_ + key, data); }
  std::vector<char> get(const std::string& key) override { return base_.get(prefix_ + key); }
  void wait(const std::vector<std::string>& keys) override { base_.wait(prefixed(keys)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    base_.wait(prefixed(keys), timeout);
  }
  std::vector<bool> check(const std::vector<std::string>& keys) override { return base_.check(prefixed(keys)); }
  std::string describe() const override { return base_.describe(); }
  bool set_owned(const std::string& key, const std::vector<char>& data) override {
    return base_.set_owned(prefix_ + key, data);
  }
  bool claim(const std::string& key) override { return base_.claim(prefix_ + key); }

 private:
  std::vector<std::string> prefixed(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(prefix_ + k);
    return out;
  }
  std::string prefix_;
  RendezvousStore& base_;
};

}  // namespace strata::distributed::detail
