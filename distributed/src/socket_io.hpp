// socket_io.hpp — TCP socket helpers for the store, every one bounded by a
// deadline: connect, read and write (across partial transfers), and framed
// reads that check the announced length against a cap before allocating.
#pragma once

#include "store_wire.hpp"

#include <chrono>
#include <string>

namespace strata::distributed::detail::net {

using Clock = std::chrono::steady_clock;
/// No deadline: wait until the peer sends or the socket is shut down.
inline constexpr Clock::time_point kNoDeadline = Clock::time_point::max();

enum class Io { ok, closed, timed_out, failed, too_large };
/// "the connection closed", "timed out", ... for messages (with errno's
/// text for `failed`, as it was when the call returned).
std::string describe(Io result, int err = 0);

/// Reads exactly `n` bytes by `deadline`. `err` gets errno for Io::failed.
Io read_exact(int fd, char* data, size_t n, Clock::time_point deadline, int* err = nullptr);
Io write_exact(int fd, const char* data, size_t n, Clock::time_point deadline, int* err = nullptr);
/// How long a frame may take.
struct FrameDeadlines {
  Clock::time_point header = kNoDeadline;  // for its 4-byte header
  std::chrono::milliseconds body{0};       // for its payload, from when the header arrived
  Clock::time_point last = kNoDeadline;    // for the whole frame
};
/// One frame of at most `cap` payload bytes (Io::too_large, nothing
/// allocated, when its header announces more; `announced` gets the length).
/// The payload grows with the bytes that arrive, not with the announced
/// size.
Io read_frame(int fd, uint32_t cap, wire::Bytes& payload, const FrameDeadlines& deadlines, int* err = nullptr,
              uint32_t* announced = nullptr);
Io write_frame(int fd, const wire::Bytes& payload, Clock::time_point deadline, int* err = nullptr);

/// A connected TCP socket to host:port (IPv4 addresses first), or -1 with
/// `error` set; gives up at `deadline`.
int connect_to(const std::string& host, int port, Clock::time_point deadline, std::string& error);
/// A socket listening on host:port (the first address `host` resolves to,
/// IPv4 first). Throws DistributedError naming the address; `bound` gets
/// the numeric address bound ("127.0.0.1:29500").
int listen_on(const std::string& host, int port, std::string& bound);
/// "127.0.0.1:41234" of the other end of `fd` ("an unknown peer" if none).
std::string peer_address(int fd);

}  // namespace strata::distributed::detail::net
