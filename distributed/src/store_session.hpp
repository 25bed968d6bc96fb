// store_session.hpp — what the TCP store's server does with the frames of
// one connection, without the socket: check the hello (magic and job
// token), then answer requests from the key-value data all connections
// share. TcpStoreServer (store.cpp) moves the bytes; fuzz/fuzz_store.cpp
// drives a session with fuzzed frames directly.
#pragma once

#include "store_wire.hpp"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace strata::distributed::detail {

/// The keys and values of one server, shared by its sessions.
class StoreState {
 public:
  /// Ends every wait at once (it answers "timed out"); used when the server
  /// stops.
  void stop();

 private:
  friend class StoreSession;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, wire::Bytes> data_;
  bool stopping_ = false;
};

/// One connection's conversation. Until a hello was accepted, frames may
/// hold at most wire::kMaxHelloFrame bytes and the only frame understood is
/// the hello; a wrong one ends the session. Then requests, each answered
/// with a reply, frames up to wire::kMaxFrame.
class StoreSession {
 public:
  /// `token`: the job token the hello must carry; empty accepts any
  /// well-formed hello (ranks started by hand without STRATA_JOB_TOKEN).
  StoreSession(StoreState& state, std::string token);
  /// Erases the keys this connection set with kSetOwned (the rank is gone).
  ~StoreSession();
  StoreSession(const StoreSession&) = delete;
  StoreSession& operator=(const StoreSession&) = delete;

  bool accepted() const { return accepted_; }
  /// The largest payload the next frame may announce.
  uint32_t max_frame() const { return accepted_ ? wire::kMaxFrame : wire::kMaxHelloFrame; }
  /// Waits of requests are cut to this (the fuzz target uses 0: nothing
  /// blocks).
  void limit_waits(std::chrono::milliseconds most) { max_wait_ = most; }

  /// Handles one frame's payload and fills `reply` with the payload to send
  /// back. False when the connection must be closed after sending it: the
  /// first frame was not a hello, or its token was wrong (`why` says which,
  /// for the log).
  bool handle(wire::View payload, wire::Bytes& reply, std::string& why);

 private:
  bool hello(wire::View payload, wire::Bytes& reply, std::string& why);
  wire::Bytes answer(const wire::Request& request);

  StoreState& state_;
  std::string token_;
  bool accepted_ = false;
  std::chrono::milliseconds max_wait_{wire::kMaxWaitMs};
  std::vector<std::string> owned_;  // keys that live as long as this connection
};

}  // namespace strata::distributed::detail
