// store.cpp — the TCP rendezvous store's server and client, and the file
// store adaptor. The wire format is store_wire.hpp's, what the server does
// with a connection's frames store_session.cpp's; this file moves the
// bytes, with every transfer bounded (socket_io.hpp).
#include "store.hpp"

#include "log.hpp"

#include <strata/distributed.hpp>

#include <gloo/common/error.h>
#include <gloo/rendezvous/file_store.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace strata::distributed::detail {
namespace {

using wire::Bytes;
using wire::View;

/// How long a connection may take to say hello (at most; the I/O timeout
/// when shorter): a rank sends it right after connecting.
constexpr auto kHelloTime = std::chrono::seconds(10);
/// Refused connections logged before the server stops logging them.
constexpr int kMaxRefusalsLogged = 50;
/// What a client allows the server beyond a wait's own length to answer it.
constexpr auto kReplyMargin = std::chrono::milliseconds(2000);

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "\"" : ", \"") + k + "\"";
  return s;
}

std::string size_text(uint32_t bytes) { return std::to_string(bytes) + " bytes"; }

}  // namespace

// --- server -----------------------------------------------------------------

TcpStoreServer::TcpStoreServer(Options options) : options_(std::move(options)) {
  listen_fd_ = net::listen_on(options_.host, options_.port, bound_);
  // A host name that resolves to loopback on rank 0's own host (Debian's
  // /etc/hosts maps the host name to 127.0.1.1) cannot be reached from
  // other hosts, while it looks right in the ranks' environment.
  const std::string& host = options_.host;
  const bool loopback_name = host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
  if (!loopback_name && (bound_.rfind("127.", 0) == 0 || bound_.rfind("[::1]", 0) == 0))
    log_warn(
        "the TCP store listens on {}, a loopback address, because {} \"{}\" resolves to it "
        "on rank 0's host: ranks on other hosts cannot reach it; give rank 0's reachable address instead",
        bound_, options_.host_from, host);
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  ::close(listen_fd_);
  state_.stop();
  {
    std::lock_guard lock(mu_);
    for (auto& c : connections_)
      if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);
  }
  for (auto& c : connections_) c.thread.join();
}

void TcpStoreServer::refuse(const std::string& peer, const std::string& why) {
  int n = ++refusals_;
  if (n <= kMaxRefusalsLogged)
    log_warn("the TCP store at {} refused the connection from {}: {}{}", bound_, peer, why,
               n == kMaxRefusalsLogged ? " (further refusals are not logged)" : "");
}

void TcpStoreServer::accept_loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard lock(mu_);
    // Reap the connections that ended, so that strangers cost nothing once gone.
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      it->thread.join();
      it = connections_.erase(it);
    }
    if (stopping_ || connections_.size() >= options_.max_connections) {
      if (!stopping_)
        refuse(net::peer_address(fd), "the store serves at most " + std::to_string(options_.max_connections) +
                                          " connections at a time (the world size plus spares)");
      ::close(fd);
      continue;
    }
    Connection& c = connections_.emplace_back();
    c.fd = fd;
    try {
      c.thread = std::thread([this, &c] { serve(c); });
    } catch (const std::system_error& e) {
      refuse(net::peer_address(fd), std::string("cannot start a thread for it: ") + e.what());
      ::close(fd);
      connections_.pop_back();
    }
  }
}

void TcpStoreServer::serve(Connection& c) {
  const int fd = c.fd;
  const std::string peer = net::peer_address(fd);
  {
    StoreSession session(state_, options_.token);
    const auto hello_time = std::min<std::chrono::milliseconds>(options_.io_timeout, kHelloTime);
    const auto hello_deadline = net::Clock::now() + hello_time;
    Bytes payload, reply;
    while (!stopping_) {
      const bool before_hello = !session.accepted();
      const auto last = before_hello ? hello_deadline : net::kNoDeadline;
      uint32_t announced = 0;
      int err = 0;
      net::Io r =
          net::read_frame(fd, session.max_frame(), payload, {last, options_.io_timeout, last}, &err, &announced);
      if (r != net::Io::ok) {
        if (stopping_) break;
        if (r == net::Io::too_large)
          refuse(peer, "it announced a frame of " + size_text(announced) + (before_hello ? " before its hello" : "") +
                           " (at most " + size_text(session.max_frame()) + ")");
        else if (before_hello)
          refuse(peer, r == net::Io::timed_out ? "it sent no hello within " + std::to_string(hello_time.count()) + " ms"
                                               : "it sent no hello (" + net::describe(r, err) + ")");
        else if (r != net::Io::closed)
          log_warn("the TCP store at {}: the connection from {} failed ({}): closing it", bound_, peer,
                     net::describe(r, err));
        break;
      }
      std::string why;
      bool keep = session.handle(wire::view(payload), reply, why);
      if (!keep) refuse(peer, why);
      if (net::write_frame(fd, reply, net::Clock::now() + options_.io_timeout) != net::Io::ok || !keep) break;
    }
  }  // the session ends here: the keys it owned are gone before the connection closes
  {
    std::lock_guard lock(mu_);
    ::close(fd);
    c.fd = -1;
    c.done = true;
  }
  ended_.notify_all();
}

void TcpStoreServer::linger(std::chrono::milliseconds most) {
  std::unique_lock lock(mu_);
  ended_.wait_for(lock, most, [this] {
    return std::all_of(connections_.begin(), connections_.end(), [](const Connection& c) { return c.done.load(); });
  });
}

// --- client -----------------------------------------------------------------

TcpStoreClient::TcpStoreClient(const std::string& host, int port, std::chrono::milliseconds timeout, std::string who,
                               std::string token)
    : host_(host), port_(port), timeout_(timeout), who_(std::move(who)), token_(std::move(token)) {
  const auto deadline = net::Clock::now() + timeout;
  std::string last_error = "no attempt";
  while (true) {
    int fd = net::connect_to(host, port, deadline, last_error);
    if (fd >= 0) {
      std::string why = hello(fd, deadline);  // throws when the token is refused
      if (why.empty()) {
        fd_ = fd;
        return;
      }
      last_error = why;
      ::close(fd);
    }
    if (net::Clock::now() >= deadline)
      throw DistributedError(who_ + ": could not reach the TCP store at " + describe() + " within " +
                             std::to_string(timeout.count()) + " ms (last error: " + last_error +
                             "); is rank 0 running with the same STRATA_MASTER_ADDR and STRATA_MASTER_PORT?");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 0 may not listen yet: retry
  }
}

std::string TcpStoreClient::hello(int fd, net::Clock::time_point deadline) {
  int err = 0;
  net::Io w = net::write_frame(fd, wire::encode_hello(token_), deadline, &err);
  if (w != net::Io::ok) return "saying hello: " + net::describe(w, err);
  Bytes payload;
  uint32_t announced = 0;
  net::Io r = net::read_frame(fd, wire::kMaxHelloFrame, payload, {deadline, timeout_, deadline}, &err, &announced);
  if (r == net::Io::too_large)
    return "the server answered the hello with a frame of " + size_text(announced) + ": not a Strata store?";
  if (r != net::Io::ok) return "waiting for the answer to the hello: " + net::describe(r, err);
  std::optional<wire::Reply> welcome = wire::decode_reply(wire::view(payload));
  if (!welcome) return "the server's answer to the hello is not a Strata store's";
  if (welcome->status == wire::kRefused) {
    ::close(fd);
    throw DistributedError(who_ + ": the TCP store at " + describe() + " refused this rank's job token (" +
                           (token_.empty() ? std::string("STRATA_JOB_TOKEN is not set here") : "STRATA_JOB_TOKEN") +
                           ") : it serves another job, or the ranks were given different tokens");
  }
  return welcome->status == wire::kOk ? "" : "the server's answer to the hello is not a Strata store's";
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStoreClient::describe() const { return host_ + ":" + std::to_string(port_); }

wire::Reply TcpStoreClient::request(wire::Command command, std::chrono::milliseconds wait,
                                    const std::vector<View>& parts, const std::string& what, Bytes& storage) {
  std::lock_guard lock(mu_);
  auto fail = [&](const std::string& why) {
    broken_ = why;
    ::close(fd_);
    fd_ = -1;
    return DistributedError(who_ + ": " + what + " in the TCP store at " + describe() + ": " + why);
  };
  if (!broken_.empty())
    throw DistributedError(who_ + ": " + what + " in the TCP store at " + describe() +
                           ": the connection is unusable after an earlier failure (" + broken_ + ")");
  const auto start = net::Clock::now();
  int err = 0;
  net::Io w = net::write_frame(fd_, wire::encode_request(command, wait.count(), parts), start + timeout_, &err);
  if (w == net::Io::timed_out)
    throw fail("the request could not be sent within " + std::to_string(timeout_.count()) +
               " ms (STRATA_DIST_TIMEOUT_MS)");
  if (w != net::Io::ok) throw fail("lost the connection (" + net::describe(w, err) + "; rank 0 exited?)");
  // The server answers a wait when it ends; other requests at once.
  const bool waits = command == wire::kGet || command == wire::kWait;
  const auto allowed = waits ? wait + std::min<std::chrono::milliseconds>(timeout_, kReplyMargin) : timeout_;
  const auto deadline = start + allowed;
  uint32_t announced = 0;
  net::Io r = net::read_frame(fd_, wire::kMaxFrame, storage, {deadline, allowed, deadline}, &err, &announced);
  if (r == net::Io::timed_out)
    throw fail("no reply within " + std::to_string(allowed.count()) + " ms (STRATA_DIST_TIMEOUT_MS" +
               (waits ? " and a margin" : "") + ")");
  if (r == net::Io::too_large)
    throw fail("the reply announces " + size_text(announced) + ", more than " + size_text(wire::kMaxFrame) +
               ": not a Strata store?");
  if (r != net::Io::ok) throw fail("lost the connection (" + net::describe(r, err) + "; rank 0 exited?)");
  std::optional<wire::Reply> reply = wire::decode_reply(wire::view(storage));
  if (!reply) throw fail("a malformed reply of " + size_text(static_cast<uint32_t>(storage.size())));
  if (reply->status == wire::kBadRequest)
    throw DistributedError(who_ + ": the TCP store at " + describe() + " refused " + what + " as malformed");
  return *reply;
}

void TcpStoreClient::set(const std::string& key, const std::vector<char>& data) {
  Bytes storage;
  request(wire::kSet, timeout_, {wire::view(key), wire::view(data)}, "set(\"" + key + "\")", storage);
}

bool TcpStoreClient::set_owned(const std::string& key, const std::vector<char>& data) {
  Bytes storage;
  request(wire::kSetOwned, timeout_, {wire::view(key), wire::view(data)}, "set(\"" + key + "\")", storage);
  return true;
}

std::vector<char> TcpStoreClient::get(const std::string& key) {
  Bytes storage;
  wire::Reply reply = request(wire::kGet, timeout_, {wire::view(key)}, "get(\"" + key + "\")", storage);
  if (reply.status == wire::kTimedOut)
    throw DistributedError(who_ + ": timed out after " + std::to_string(timeout_.count()) + " ms waiting for key \"" +
                           key + "\" in the TCP store at " + describe());
  if (reply.status != wire::kOk || reply.parts.size() != 1)
    throw DistributedError(who_ + ": the TCP store at " + describe() + " gave a malformed reply to get(\"" + key +
                           "\")");
  return {reply.parts[0].begin(), reply.parts[0].end()};
}

void TcpStoreClient::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  std::vector<View> parts;
  for (const auto& k : keys) parts.push_back(wire::view(k));
  Bytes storage;
  wire::Reply reply = request(wire::kWait, timeout, parts, "wait(" + join_keys(keys) + ")", storage);
  if (reply.status == wire::kTimedOut) {
    std::vector<std::string> names;
    for (const auto& m : reply.parts) names.push_back(wire::text(m));
    throw DistributedError(who_ + ": timed out after " + std::to_string(timeout.count()) + " ms waiting for key(s) " +
                           join_keys(names) + " in the TCP store at " + describe());
  }
}

std::vector<bool> TcpStoreClient::check(const std::vector<std::string>& keys) {
  std::vector<View> parts;
  for (const auto& k : keys) parts.push_back(wire::view(k));
  Bytes storage;
  wire::Reply reply = request(wire::kCheck, timeout_, parts, "check(" + join_keys(keys) + ")", storage);
  if (reply.status != wire::kOk || reply.parts.size() != keys.size())
    throw DistributedError(who_ + ": the TCP store at " + describe() + " gave a malformed reply to check()");
  std::vector<bool> out;
  for (const auto& f : reply.parts) out.push_back(f.size() == 1 && f[0] == '1');
  return out;
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  Bytes d;
  wire::put_i64(d, delta);
  Bytes storage;
  wire::Reply reply = request(wire::kAdd, timeout_, {wire::view(key), wire::view(d)}, "add(\"" + key + "\")", storage);
  if (reply.status != wire::kOk || reply.parts.size() != 1 || reply.parts[0].size() != 8)
    throw DistributedError(who_ + ": the TCP store at " + describe() + " gave a malformed reply to add(\"" + key +
                           "\")");
  return wire::get_i64(reply.parts[0]);
}

// --- file store -----------------------------------------------------------------

namespace {
class OpenFileStore : public gloo::rendezvous::FileStore {
 public:
  using FileStore::check;
  using FileStore::FileStore;
};
}  // namespace

FileRendezvousStore::FileRendezvousStore(const std::string& path, std::chrono::milliseconds timeout)
    : path_(path), timeout_(timeout), store_(std::make_unique<OpenFileStore>(path)) {}

void FileRendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  try {
    store_->set(key, data);
  } catch (const gloo::Exception& e) {
    throw DistributedError("file store " + path_ + ": set(\"" + key + "\"): " + e.what());
  }
}

std::vector<char> FileRendezvousStore::get(const std::string& key) {
  wait({key}, timeout_);
  try {
    return store_->get(key);
  } catch (const gloo::Exception& e) {
    throw DistributedError("file store " + path_ + ": get(\"" + key + "\"): " + e.what());
  }
}

void FileRendezvousStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto present = check(keys);
    std::vector<std::string> missing;
    for (size_t i = 0; i < keys.size(); ++i)
      if (!present[i]) missing.push_back(keys[i]);
    if (missing.empty()) return;
    if (std::chrono::steady_clock::now() >= deadline)
      throw DistributedError("timed out after " + std::to_string(timeout.count()) + " ms waiting for key(s) " +
                             join_keys(missing) + " in the file store " + path_);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::vector<bool> FileRendezvousStore::check(const std::vector<std::string>& keys) {
  std::vector<bool> out;
  auto& s = static_cast<OpenFileStore&>(*store_);
  for (const auto& k : keys) out.push_back(s.check({k}));
  return out;
}

bool FileRendezvousStore::claim(const std::string& key) {
  std::string name = "claim-" + key;
  for (char& ch : name)
    if (ch == '/') ch = '_';
  std::string file = path_ + "/" + name;
  int fd = ::open(file.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    return true;
  }
  if (errno == EEXIST) return false;
  throw DistributedError("file store " + path_ + ": cannot create " + file + ": " + std::strerror(errno));
}

std::string FileRendezvousStore::describe() const { return "file store " + path_; }

}  // namespace strata::distributed::detail
