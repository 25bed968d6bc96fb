// store.hpp — rendezvous stores: the TCP key-value store (server on rank 0,
// a client on every rank) and Gloo's FileStore, both behind one interface
// that Gloo's connectFullMesh can use and that can tell which keys exist.
#pragma once

#include <gloo/rendezvous/store.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
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
};

/// The key-value server rank 0 runs: one thread accepting, one per
/// connection. Values live until the server stops, except keys set with
/// set_owned, which live as long as the connection that set them.
class TcpStoreServer {
 public:
  /// Binds host:port (the wildcard address when `host` is empty) and
  /// starts serving. DistributedError naming the port when it is in use.
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

 private:
  void accept_loop();
  void serve(int fd);

  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;  // guards data_, clients_, client_threads_
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> data_;
  std::vector<int> clients_;
  std::vector<std::thread> client_threads_;
};

/// One rank's connection to the TCP store. Thread-safe (one request at a
/// time).
class TcpStoreClient : public RendezvousStore {
 public:
  /// Connects to host:port, retrying until `timeout`; DistributedError
  /// naming the address and the timeout when the server never answers.
  /// `who` prefixes messages ("rank 1 of 2").
  TcpStoreClient(const std::string& host, int port, std::chrono::milliseconds timeout, std::string who);
  ~TcpStoreClient() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  bool set_owned(const std::string& key, const std::vector<char>& data) override;
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
  std::vector<char> request(const std::vector<char>& message, std::chrono::milliseconds timeout);

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::string who_;
  int fd_ = -1;
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
