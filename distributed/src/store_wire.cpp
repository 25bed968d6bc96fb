// store_wire.cpp — encoding and decoding of the TCP store's frames
// (store_wire.hpp). Decoders check every length against what is left
// before using it and never allocate by an announced size.
#include "store_wire.hpp"

#include <algorithm>

namespace strata::distributed::detail::wire {
namespace {

void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t get_le(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

void put_parts(Bytes& out, const std::vector<View>& parts) {
  put_u32(out, static_cast<uint32_t>(parts.size()));
  for (const View& p : parts) {
    put_u32(out, static_cast<uint32_t>(p.size()));
    out.insert(out.end(), p.begin(), p.end());
  }
}

/// Parts from `in` starting at `pos`, which must use up `in` exactly.
bool get_parts(View in, size_t pos, std::vector<View>& parts) {
  if (in.size() - pos < 4) return false;
  uint32_t n = static_cast<uint32_t>(get_le(in.data() + pos, 4));
  pos += 4;
  // Each part takes at least its 4-byte length: a count the payload cannot
  // hold is refused before anything is reserved for it.
  if (n > kMaxParts || n > (in.size() - pos) / 4) return false;
  parts.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (in.size() - pos < 4) return false;
    size_t len = static_cast<uint32_t>(get_le(in.data() + pos, 4));
    pos += 4;
    if (len > in.size() - pos) return false;
    parts.push_back(in.subspan(pos, len));
    pos += len;
  }
  return pos == in.size();
}

}  // namespace

uint32_t frame_length(const char (&header)[4]) { return static_cast<uint32_t>(get_le(header, 4)); }

Bytes frame(const Bytes& payload) {
  Bytes out;
  out.reserve(4 + payload.size());
  put_u32(out, static_cast<uint32_t>(payload.size()));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

Bytes encode_hello(std::string_view token) {
  std::string text;
  text.reserve(kHelloMagic.size() + token.size());
  text.append(kHelloMagic).append(token);
  return {text.begin(), text.end()};
}

std::optional<std::string> decode_hello(View payload) {
  if (payload.size() < kHelloMagic.size() || payload.size() - kHelloMagic.size() > kMaxTokenBytes) return std::nullopt;
  if (!std::equal(kHelloMagic.begin(), kHelloMagic.end(), payload.begin())) return std::nullopt;
  return std::string(payload.begin() + static_cast<long>(kHelloMagic.size()), payload.end());
}

bool token_accepted(std::string_view expected, std::string_view given) {
  if (expected.empty()) return true;
  // Every byte of the longer is compared, so the time taken does not tell
  // where the first difference is.
  size_t n = std::max(expected.size(), given.size());
  unsigned diff = expected.size() == given.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    unsigned char a = i < expected.size() ? static_cast<unsigned char>(expected[i]) : 0;
    unsigned char b = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= static_cast<unsigned>(a ^ b);
  }
  return diff == 0;
}

void put_i64(Bytes& out, int64_t v) {
  auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

int64_t get_i64(View in) { return static_cast<int64_t>(get_le(in.data(), 8)); }

Bytes encode_request(Command command, int64_t wait_ms, const std::vector<View>& parts) {
  Bytes out;
  out.push_back(static_cast<char>(command));
  put_i64(out, wait_ms);
  put_parts(out, parts);
  return out;
}

std::optional<Request> decode_request(View payload) {
  if (payload.size() < 9) return std::nullopt;
  Request r;
  auto command = static_cast<uint8_t>(payload[0]);
  if (command < kSet || command > kSetOwned) return std::nullopt;
  r.command = static_cast<Command>(command);
  r.wait_ms = std::clamp<int64_t>(get_i64(payload.subspan(1)), 0, kMaxWaitMs);
  if (!get_parts(payload, 9, r.parts)) return std::nullopt;
  return r;
}

Bytes encode_reply(Status status, const std::vector<View>& parts) {
  Bytes out;
  out.push_back(static_cast<char>(status));
  put_parts(out, parts);
  return out;
}

std::optional<Reply> decode_reply(View payload) {
  if (payload.empty()) return std::nullopt;
  auto status = static_cast<uint8_t>(payload[0]);
  if (status > kRefused) return std::nullopt;
  Reply r;
  r.status = static_cast<Status>(status);
  if (!get_parts(payload, 1, r.parts)) return std::nullopt;
  return r;
}

}  // namespace strata::distributed::detail::wire
