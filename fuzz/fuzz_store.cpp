// fuzz_store.cpp — the TCP rendezvous store's wire protocol, without
// sockets: fuzz bytes are what a client sends to rank 0's store. They are
// cut into frames as the server cuts them (a 4-byte length checked against
// the session's cap — 4 KiB before the hello, 64 MiB after — before
// anything is allocated) and handed to a StoreSession, the server's own
// per-connection logic (distributed/src/store_session.cpp): the hello with
// its job token, then SET/GET/WAIT/CHECK/ADD on the shared key-value data.
// Every reply the session makes must decode with the client's decoder, and
// every frame is also fed to the client's reply decoder and the request
// decoder as is. A refusal is the expected answer to bad bytes; a crash, a
// sanitizer report, an exception or a reply the client cannot read is a
// bug.
//
// Input: byte 0 picks the server's job token (bit 0 set: "fuzz-token",
// else none); the rest is the byte stream. Seeds (fuzz/corpus/fuzz_store/)
// follow that layout: a rank's whole session, no token, a wrong token,
// strangers (an HTTP request, a 4 GiB header), malformed requests.
#include "store_session.hpp"
#include "store_wire.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace wire = strata::distributed::detail::wire;

namespace {

/// The client's decoder must read every reply the server makes.
void expect_readable(const wire::Bytes& reply) {
  if (!wire::decode_reply(wire::view(reply))) std::abort();
}

/// A request that decodes re-encodes to one that decodes to the same parts.
void expect_round_trip(const wire::Request& r) {
  wire::Bytes again = wire::encode_request(r.command, r.wait_ms, r.parts);
  auto back = wire::decode_request(wire::view(again));
  if (!back || back->command != r.command || back->wait_ms != r.wait_ms || back->parts.size() != r.parts.size())
    std::abort();
  for (size_t i = 0; i < r.parts.size(); ++i)
    if (wire::text(back->parts[i]) != wire::text(r.parts[i])) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string token = (data[0] & 1) ? "fuzz-token" : "";
  wire::View stream(reinterpret_cast<const char*>(data) + 1, size - 1);

  strata::distributed::detail::StoreState state;
  strata::distributed::detail::StoreSession session(state, token);
  session.limit_waits(std::chrono::milliseconds(0));  // GET and WAIT answer at once
  while (stream.size() >= 4) {
    char header[4] = {stream[0], stream[1], stream[2], stream[3]};
    const uint32_t length = wire::frame_length(header);
    if (length > session.max_frame()) break;  // the server refuses and closes here
    if (stream.size() - 4 < length) break;    // the server would wait for the rest, then time out
    wire::View payload = stream.subspan(4, length);
    stream = stream.subspan(4 + length);

    (void)wire::decode_reply(payload);
    (void)wire::decode_hello(payload);
    if (auto request = wire::decode_request(payload)) expect_round_trip(*request);

    wire::Bytes reply;
    std::string why;
    const bool keep = session.handle(payload, reply, why);
    expect_readable(reply);
    if (!keep) break;
  }
  state.stop();
  return 0;
}
