// store.cpp — the TCP rendezvous store and the file store adaptor.
//
// Wire format (both directions), little-endian: a frame is a u32 byte count
// followed by that many bytes. A request is u8 command, i64 timeout in
// milliseconds, u32 part count, then parts (u32 length + bytes). A reply is
// u8 status (0 ok, 1 timed out, 2 bad request) and parts the same way.
//   SET  [key, value]      -> []
//   GET  [key]             -> [value]        waits for the key up to the timeout
//   WAIT [key...]          -> [] | missing   waits for every key up to the timeout
//   CHECK [key...]         -> ["0"|"1"...]
//   ADD  [key, i64 delta]  -> [i64 value]
#include "store.hpp"

#include <strata/distributed.hpp>

#include <gloo/common/error.h>
#include <gloo/rendezvous/file_store.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace strata::distributed::detail {
namespace {

enum Command : uint8_t { kSet = 1, kGet = 2, kWait = 3, kCheck = 4, kAdd = 5, kSetOwned = 6 };
enum Status : uint8_t { kOk = 0, kTimedOut = 1, kBadRequest = 2 };

using Parts = std::vector<std::vector<char>>;

std::string errno_text(int err) { return std::strerror(err); }

void put_u32(std::vector<char>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_i64(std::vector<char>& out, int64_t v) {
  auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
uint64_t get_le(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::vector<char> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string to_string(const std::vector<char>& v) { return {v.begin(), v.end()}; }

void put_parts(std::vector<char>& out, const Parts& parts) {
  put_u32(out, static_cast<uint32_t>(parts.size()));
  for (const auto& p : parts) {
    put_u32(out, static_cast<uint32_t>(p.size()));
    out.insert(out.end(), p.begin(), p.end());
  }
}

/// Parses parts from [pos, end); false when malformed.
bool get_parts(const std::vector<char>& in, size_t pos, Parts& parts) {
  if (pos + 4 > in.size()) return false;
  uint32_t n = static_cast<uint32_t>(get_le(in.data() + pos, 4));
  pos += 4;
  for (uint32_t i = 0; i < n; ++i) {
    if (pos + 4 > in.size()) return false;
    uint32_t len = static_cast<uint32_t>(get_le(in.data() + pos, 4));
    pos += 4;
    if (pos + len > in.size()) return false;
    parts.emplace_back(in.begin() + static_cast<long>(pos), in.begin() + static_cast<long>(pos + len));
    pos += len;
  }
  return pos == in.size();
}

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, char* data, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, data, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    data += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_frame(int fd, const std::vector<char>& payload) {
  std::vector<char> header;
  put_u32(header, static_cast<uint32_t>(payload.size()));
  return write_all(fd, header.data(), header.size()) && write_all(fd, payload.data(), payload.size());
}

bool read_frame(int fd, std::vector<char>& payload) {
  char header[4];
  if (!read_all(fd, header, 4)) return false;
  uint32_t n = static_cast<uint32_t>(get_le(header, 4));
  if (n > (1u << 30)) return false;
  payload.resize(n);
  return read_all(fd, payload.data(), n);
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "\"" : ", \"") + k + "\"";
  return s;
}

}  // namespace

// --- server -----------------------------------------------------------------

TcpStoreServer::TcpStoreServer(const std::string& host, int port) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw DistributedError("TCP store: socket(): " + errno_text(errno));
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (!host.empty() && ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    ::close(listen_fd_);
    throw DistributedError("TCP store: cannot listen on \"" + host + "\": not an IPv4 address");
  }
  std::string where = (host.empty() ? std::string("*") : host) + ":" + std::to_string(port);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    ::close(listen_fd_);
    if (err == EADDRINUSE)
      throw DistributedError("TCP store: port " + std::to_string(port) + " is in use (binding " + where +
                             "): choose another STRATA_MASTER_PORT / Options::master_port");
    throw DistributedError("TCP store: cannot bind " + where + ": " + errno_text(err));
  }
  if (::listen(listen_fd_, 128) != 0) {
    int err = errno;
    ::close(listen_fd_);
    throw DistributedError("TCP store: listen on " + where + ": " + errno_text(err));
  }
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    for (int fd : clients_) ::shutdown(fd, SHUT_RDWR);
    threads = std::move(client_threads_);
  }
  changed_.notify_all();
  for (auto& t : threads) t.join();
  for (int fd : clients_) ::close(fd);
}

void TcpStoreServer::accept_loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, 200);
    if (r <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard lock(mu_);
    if (stopping_) {
      ::close(fd);
      break;
    }
    clients_.push_back(fd);
    client_threads_.emplace_back([this, fd] { serve(fd); });
  }
}

void TcpStoreServer::serve(int fd) {
  std::vector<char> request;
  std::vector<std::string> owned;  // keys that live as long as this connection
  struct ReleaseOwned {
    TcpStoreServer& server;
    std::vector<std::string>& keys;
    ~ReleaseOwned() {
      std::lock_guard lock(server.mu_);
      for (const auto& k : keys) server.data_.erase(k);
      server.changed_.notify_all();
    }
  } release{*this, owned};
  while (!stopping_ && read_frame(fd, request)) {
    Parts parts;
    std::vector<char> reply;
    if (request.size() < 9 || !get_parts(request, 9, parts)) {
      reply.push_back(static_cast<char>(kBadRequest));
      put_parts(reply, {});
      if (!write_frame(fd, reply)) return;
      continue;
    }
    auto command = static_cast<uint8_t>(request[0]);
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>(get_le(request.data() + 1, 8)));
    auto deadline = std::chrono::steady_clock::now() + timeout;
    Status status = kOk;
    Parts out;
    std::unique_lock lock(mu_);
    auto all_present = [&] {
      for (const auto& k : parts)
        if (!data_.count(to_string(k))) return false;
      return true;
    };
    switch (command) {
      case kSet:
      case kSetOwned:
        if (parts.size() != 2) {
          status = kBadRequest;
          break;
        }
        data_[to_string(parts[0])] = parts[1];
        if (command == kSetOwned) owned.push_back(to_string(parts[0]));
        changed_.notify_all();
        break;
      case kGet:
      case kWait:
        if (command == kGet && parts.size() != 1) {
          status = kBadRequest;
          break;
        }
        if (!changed_.wait_until(lock, deadline, [&] { return stopping_.load() || all_present(); }) || stopping_) {
          status = kTimedOut;
          for (const auto& k : parts)
            if (!data_.count(to_string(k))) out.push_back(k);
        } else if (command == kGet) {
          out.push_back(data_[to_string(parts[0])]);
        }
        break;
      case kCheck:
        for (const auto& k : parts) out.push_back(to_bytes(data_.count(to_string(k)) ? "1" : "0"));
        break;
      case kAdd: {
        if (parts.size() != 2 || parts[1].size() != 8) {
          status = kBadRequest;
          break;
        }
        auto& slot = data_[to_string(parts[0])];
        int64_t value = slot.size() == 8 ? static_cast<int64_t>(get_le(slot.data(), 8)) : 0;
        value += static_cast<int64_t>(get_le(parts[1].data(), 8));
        slot.clear();
        put_i64(slot, value);
        out.push_back(slot);
        changed_.notify_all();
        break;
      }
      default:
        status = kBadRequest;
    }
    lock.unlock();
    reply.clear();
    reply.push_back(static_cast<char>(status));
    put_parts(reply, out);
    if (!write_frame(fd, reply)) return;
  }
}

// --- client -----------------------------------------------------------------

TcpStoreClient::TcpStoreClient(const std::string& host, int port, std::chrono::milliseconds timeout, std::string who)
    : host_(host), port_(port), timeout_(timeout), who_(std::move(who)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last_error = "no attempt";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  while (true) {
    addrinfo* found = nullptr;
    int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (rc != 0) {
      last_error = std::string("cannot resolve \"") + host + "\": " + ::gai_strerror(rc);
    } else {
      for (addrinfo* a = found; a && fd_ < 0; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          fd_ = fd;
        } else {
          last_error = errno_text(errno);
          ::close(fd);
        }
      }
      ::freeaddrinfo(found);
    }
    if (fd_ >= 0) break;
    if (std::chrono::steady_clock::now() >= deadline)
      throw DistributedError(who_ + ": could not reach the TCP store at " + describe() + " within " +
                             std::to_string(timeout.count()) + " ms (last error: " + last_error +
                             "); is rank 0 running with the same STRATA_MASTER_ADDR and STRATA_MASTER_PORT?");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStoreClient::describe() const { return host_ + ":" + std::to_string(port_); }

std::vector<char> TcpStoreClient::request(const std::vector<char>& message, std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  if (!write_frame(fd_, message))
    throw DistributedError(who_ + ": lost the connection to the TCP store at " + describe() + " (rank 0 exited?)");
  // The server answers by the timeout; allow it a margin before giving up on it.
  pollfd p{fd_, POLLIN, 0};
  int wait_ms = static_cast<int>(std::min<int64_t>(timeout.count() + 5000, 1 << 30));
  int r;
  do {
    r = ::poll(&p, 1, wait_ms);
  } while (r < 0 && errno == EINTR);
  std::vector<char> reply;
  if (r <= 0 || !read_frame(fd_, reply))
    throw DistributedError(who_ + ": lost the connection to the TCP store at " + describe() + " (rank 0 exited?)");
  return reply;
}

namespace {
std::vector<char> make_request(Command command, std::chrono::milliseconds timeout, const Parts& parts) {
  std::vector<char> m;
  m.push_back(static_cast<char>(command));
  put_i64(m, timeout.count());
  put_parts(m, parts);
  return m;
}
}  // namespace

void TcpStoreClient::set(const std::string& key, const std::vector<char>& data) {
  auto reply = request(make_request(kSet, timeout_, {to_bytes(key), data}), timeout_);
  if (reply.empty() || reply[0] != kOk) throw DistributedError(who_ + ": the TCP store refused set(\"" + key + "\")");
}

bool TcpStoreClient::set_owned(const std::string& key, const std::vector<char>& data) {
  std::vector<char> reply = request(make_request(kSetOwned, timeout_, {to_bytes(key), data}), timeout_);
  if (reply.empty() || reply[0] != kOk)
    throw DistributedError(who_ + ": the TCP store at " + describe() + " refused to set \"" + key + "\"");
  return true;
}

std::vector<char> TcpStoreClient::get(const std::string& key) {
  auto reply = request(make_request(kGet, timeout_, {to_bytes(key)}), timeout_);
  Parts parts;
  if (reply.empty() || !get_parts(reply, 1, parts))
    throw DistributedError(who_ + ": malformed reply from the TCP store at " + describe());
  if (reply[0] == kTimedOut)
    throw DistributedError(who_ + ": timed out after " + std::to_string(timeout_.count()) +
                           " ms waiting for key \"" + key + "\" in the TCP store at " + describe());
  if (reply[0] != kOk || parts.size() != 1)
    throw DistributedError(who_ + ": the TCP store refused get(\"" + key + "\")");
  return parts[0];
}

void TcpStoreClient::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  Parts parts;
  for (const auto& k : keys) parts.push_back(to_bytes(k));
  auto reply = request(make_request(kWait, timeout, parts), timeout);
  Parts missing;
  if (reply.empty() || !get_parts(reply, 1, missing))
    throw DistributedError(who_ + ": malformed reply from the TCP store at " + describe());
  if (reply[0] == kTimedOut) {
    std::vector<std::string> names;
    for (const auto& m : missing) names.push_back(to_string(m));
    throw DistributedError(who_ + ": timed out after " + std::to_string(timeout.count()) + " ms waiting for key(s) " +
                           join_keys(names) + " in the TCP store at " + describe());
  }
  if (reply[0] != kOk) throw DistributedError(who_ + ": the TCP store refused wait()");
}

std::vector<bool> TcpStoreClient::check(const std::vector<std::string>& keys) {
  Parts parts;
  for (const auto& k : keys) parts.push_back(to_bytes(k));
  auto reply = request(make_request(kCheck, timeout_, parts), timeout_);
  Parts flags;
  if (reply.empty() || reply[0] != kOk || !get_parts(reply, 1, flags) || flags.size() != keys.size())
    throw DistributedError(who_ + ": malformed reply from the TCP store at " + describe());
  std::vector<bool> out;
  for (const auto& f : flags) out.push_back(to_string(f) == "1");
  return out;
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  std::vector<char> d;
  put_i64(d, delta);
  auto reply = request(make_request(kAdd, timeout_, {to_bytes(key), d}), timeout_);
  Parts parts;
  if (reply.empty() || reply[0] != kOk || !get_parts(reply, 1, parts) || parts.size() != 1 || parts[0].size() != 8)
    throw DistributedError(who_ + ": the TCP store refused add(\"" + key + "\")");
  return static_cast<int64_t>(get_le(parts[0].data(), 8));
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

std::string FileRendezvousStore::describe() const { return "file store " + path_; }

}  // namespace strata::distributed::detail
