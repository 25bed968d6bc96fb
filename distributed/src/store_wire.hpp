// store_wire.hpp — the TCP store's wire format, without sockets: frames,
// the hello a client sends first, requests and replies. Every decoder takes
// untrusted bytes and answers "malformed" instead of throwing, allocating
// by what the bytes announce, or reading past them (fuzz/fuzz_store.cpp
// feeds it arbitrary input). docs/distributed.md, "The TCP store", describes
// the protocol for people.
//
// All integers are little-endian.
//   frame    u32 payload length, then the payload
//   hello    (the client's first frame) the 16-byte magic kHelloMagic, then
//            the job token (0..kMaxTokenBytes bytes)
//   welcome  (the server's answer to a hello) a reply without parts, status
//            kOk, or kRefused (then the server closes the connection)
//   request  u8 command, i64 wait in milliseconds, u32 part count, then
//            parts, each a u32 length and that many bytes
//   reply    u8 status, u32 part count, parts as above
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::distributed::detail::wire {

/// The largest frame before the hello was accepted: a stranger costs at
/// most this much memory.
inline constexpr uint32_t kMaxHelloFrame = 4096;
/// The largest frame after it (a request or a reply): the biggest value the
/// ranks exchange is a list of addresses, far below this.
inline constexpr uint32_t kMaxFrame = 64u << 20;
/// The most parts (keys or values) in one request or reply.
inline constexpr uint32_t kMaxParts = (1u << 20) + 16;
inline constexpr size_t kMaxTokenBytes = 256;
/// The longest wait a request may ask the server for (a longer one is
/// clamped): keeps deadline arithmetic far from overflow.
inline constexpr int64_t kMaxWaitMs = int64_t{7} * 24 * 3600 * 1000;
inline constexpr std::string_view kHelloMagic{"strata-store/v1\n", 16};

enum Command : uint8_t { kSet = 1, kGet = 2, kWait = 3, kCheck = 4, kAdd = 5, kSetOwned = 6 };
enum Status : uint8_t { kOk = 0, kTimedOut = 1, kBadRequest = 2, kRefused = 3 };

using Bytes = std::vector<char>;
using View = std::span<const char>;

/// The payload length a frame's 4-byte header announces. Readers compare it
/// with their cap (kMaxHelloFrame or kMaxFrame) before allocating anything.
uint32_t frame_length(const char (&header)[4]);
/// `payload` with its header in front.
Bytes frame(const Bytes& payload);

Bytes encode_hello(std::string_view token);
/// The token of a hello, or nullopt when `payload` is not one.
std::optional<std::string> decode_hello(View payload);
/// Whether a client's token opens a store whose token is `expected`: an
/// empty `expected` (no token configured) accepts every hello; otherwise
/// the comparison takes the same time wherever the tokens differ.
bool token_accepted(std::string_view expected, std::string_view given);

struct Request {
  Command command = kSet;
  int64_t wait_ms = 0;      // clamped to [0, kMaxWaitMs]
  std::vector<View> parts;  // views into the decoded payload
};
Bytes encode_request(Command command, int64_t wait_ms, const std::vector<View>& parts);
/// nullopt when malformed (short, trailing bytes, too many parts, an unknown
/// command). The parts point into `payload`.
std::optional<Request> decode_request(View payload);

struct Reply {
  Status status = kOk;
  std::vector<View> parts;  // views into the decoded payload
};
Bytes encode_reply(Status status, const std::vector<View>& parts);
std::optional<Reply> decode_reply(View payload);

void put_i64(Bytes& out, int64_t v);
int64_t get_i64(View in);  // the first 8 bytes; `in` must hold them
inline View view(const Bytes& b) { return {b.data(), b.size()}; }
inline View view(std::string_view s) { return {s.data(), s.size()}; }
inline std::string text(View v) { return {v.begin(), v.end()}; }

}  // namespace strata::distributed::detail::wire
