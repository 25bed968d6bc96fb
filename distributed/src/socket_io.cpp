// socket_io.cpp — deadline-bounded TCP helpers for the store (socket_io.hpp).
// Every transfer polls first and then moves what is there without blocking
// (MSG_DONTWAIT), so that no call waits past its deadline.
#include "socket_io.hpp"

#include <strata/distributed.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

namespace strata::distributed::detail::net {
namespace {

/// Waits for `events` on `fd` until `deadline`: true when ready (or an
/// error or hang-up that the next transfer will report).
bool wait_for(int fd, short events, Clock::time_point deadline) {
  while (true) {
    int ms = -1;
    if (deadline != kNoDeadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left < 0) return false;
      ms = static_cast<int>(std::min<int64_t>(left + 1, INT_MAX));  // +1: round up, never spin at 0
    }
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;  // the transfer reports it
    if (r == 0 && Clock::now() >= deadline) return false;
  }
}

std::string format_address(const sockaddr* a) {
  char host[INET6_ADDRSTRLEN] = {};
  if (a->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(a);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (a->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "an address of family " + std::to_string(a->sa_family);
}

using AddrList = std::unique_ptr<addrinfo, void (*)(addrinfo*)>;

/// host:port resolved, IPv4 addresses first (the order both ends use, so
/// that "localhost" means the same socket to the server and the clients).
std::vector<const addrinfo*> resolve(const std::string& host, int port, int flags, AddrList& holder,
                                     std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(), &hints, &found);
  holder = AddrList(found, ::freeaddrinfo);
  std::vector<const addrinfo*> out;
  if (rc != 0) {
    error = "cannot resolve \"" + host + "\": " + ::gai_strerror(rc);
    return out;
  }
  for (const addrinfo* a = found; a; a = a->ai_next) out.push_back(a);
  std::stable_partition(out.begin(), out.end(), [](const addrinfo* a) { return a->ai_family == AF_INET; });
  return out;
}

}  // namespace

std::string describe(Io result, int err) {
  switch (result) {
    case Io::ok:
      return "ok";
    case Io::closed:
      return "the connection closed";
    case Io::timed_out:
      return "timed out";
    case Io::too_large:
      return "the frame is larger than allowed";
    case Io::failed:
      return std::strerror(err);
  }
  return "?";
}

Io read_exact(int fd, char* data, size_t n, Clock::time_point deadline, int* err) {
  while (n > 0) {
    if (!wait_for(fd, POLLIN, deadline)) return Io::timed_out;
    ssize_t r = ::recv(fd, data, n, MSG_DONTWAIT);
    if (r > 0) {
      data += r;
      n -= static_cast<size_t>(r);
    } else if (r == 0) {
      return Io::closed;
    } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      if (err) *err = errno;
      return errno == ECONNRESET ? Io::closed : Io::failed;
    }
  }
  return Io::ok;
}

Io write_exact(int fd, const char* data, size_t n, Clock::time_point deadline, int* err) {
  while (n > 0) {
    if (!wait_for(fd, POLLOUT, deadline)) return Io::timed_out;
    ssize_t w = ::send(fd, data, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      if (err) *err = errno;
      return errno == EPIPE || errno == ECONNRESET ? Io::closed : Io::failed;
    }
  }
  return Io::ok;
}

Io read_frame(int fd, uint32_t cap, wire::Bytes& payload, const FrameDeadlines& deadlines, int* err,
              uint32_t* announced) {
  char header[4];
  if (Io r = read_exact(fd, header, 4, std::min(deadlines.header, deadlines.last), err); r != Io::ok) return r;
  const uint32_t n = wire::frame_length(header);
  if (announced) *announced = n;
  if (n > cap) return Io::too_large;
  auto deadline = std::min(Clock::now() + deadlines.body, deadlines.last);
  // Grow with what arrives: a peer that announces much and sends little
  // costs little.
  constexpr size_t kStep = 64 << 10;
  payload.clear();
  size_t got = 0;
  while (got < n) {
    size_t next = std::min<size_t>(n, got + kStep);
    payload.resize(next);
    if (Io r = read_exact(fd, payload.data() + got, next - got, deadline, err); r != Io::ok) return r;
    got = next;
  }
  return Io::ok;
}

Io write_frame(int fd, const wire::Bytes& payload, Clock::time_point deadline, int* err) {
  wire::Bytes bytes = wire::frame(payload);
  return write_exact(fd, bytes.data(), bytes.size(), deadline, err);
}

int connect_to(const std::string& host, int port, Clock::time_point deadline, std::string& error) {
  AddrList holder(nullptr, ::freeaddrinfo);
  for (const addrinfo* a : resolve(host, port, 0, holder, error)) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      rc = -1;
      if (wait_for(fd, POLLOUT, deadline)) {
        int so_error = 0;
        socklen_t len = sizeof so_error;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
        errno = so_error;
        rc = so_error == 0 ? 0 : -1;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  return -1;
}

int listen_on(const std::string& host, int port, std::string& bound) {
  AddrList holder(nullptr, ::freeaddrinfo);
  std::string error;
  auto addresses = resolve(host, port, AI_PASSIVE, holder, error);
  const std::string where = (host.empty() ? std::string("*") : host) + ":" + std::to_string(port);
  if (addresses.empty()) throw DistributedError("TCP store: cannot listen on " + where + ": " + error);
  for (const addrinfo* a : addresses) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    bound = format_address(a->ai_addr);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) return fd;
    int e = errno;
    ::close(fd);
    if (e == EADDRINUSE)
      throw DistributedError("TCP store: port " + std::to_string(port) + " is in use (binding " + bound +
                             "): choose another STRATA_MASTER_PORT / Options::master_port");
    error = bound + ": " + std::strerror(e) +
            (e == EADDRNOTAVAIL ? " (STRATA_MASTER_ADDR must name an address of rank 0's own host)" : "");
  }
  throw DistributedError("TCP store: cannot listen on " + where + ": " + error);
}

std::string peer_address(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "an unknown peer";
  return format_address(reinterpret_cast<const sockaddr*>(&a));
}

}  // namespace strata::distributed::detail::net
