// store_session.cpp — the TCP store's server logic for one connection
// (store_session.hpp): the hello, then the key-value commands.
//   SET       [key, value]      -> []
//   SET_OWNED [key, value]      -> []        erased when the connection ends
//   GET       [key]             -> [value]   waits for the key up to the request's wait
//   WAIT      [key...]          -> [] | the missing keys, status kTimedOut
//   CHECK     [key...]          -> ["0"|"1"...]
//   ADD       [key, i64 delta]  -> [i64 value]
#include "store_session.hpp"

namespace strata::distributed::detail {

using wire::Bytes;
using wire::View;

void StoreState::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
}

StoreSession::StoreSession(StoreState& state, std::string token) : state_(state), token_(std::move(token)) {}

StoreSession::~StoreSession() {
  if (owned_.empty()) return;
  {
    std::lock_guard lock(state_.mu_);
    for (const auto& k : owned_) state_.data_.erase(k);
  }
  state_.changed_.notify_all();
}

bool StoreSession::handle(View payload, Bytes& reply, std::string& why) {
  if (!accepted_) return hello(payload, reply, why);
  std::optional<wire::Request> request = wire::decode_request(payload);
  reply = request ? answer(*request) : wire::encode_reply(wire::kBadRequest, {});
  return true;
}

bool StoreSession::hello(View payload, Bytes& reply, std::string& why) {
  reply = wire::encode_reply(wire::kRefused, {});
  std::optional<std::string> token = wire::decode_hello(payload);
  if (!token) {
    why = "its first " + std::to_string(payload.size()) + "-byte frame is not a Strata store hello";
    return false;
  }
  if (!wire::token_accepted(token_, *token)) {
    why = token->empty() ? "it sent no job token (STRATA_JOB_TOKEN)" : "its job token is not this job's";
    return false;
  }
  accepted_ = true;
  reply = wire::encode_reply(wire::kOk, {});
  return true;
}

Bytes StoreSession::answer(const wire::Request& request) {
  const auto& parts = request.parts;
  auto bad = [] { return wire::encode_reply(wire::kBadRequest, {}); };
  auto key = [&](size_t i) { return wire::text(parts[i]); };
  std::unique_lock lock(state_.mu_);
  auto& data = state_.data_;
  switch (request.command) {
    case wire::kSet:
    case wire::kSetOwned: {
      if (parts.size() != 2) return bad();
      data[key(0)].assign(parts[1].begin(), parts[1].end());
      if (request.command == wire::kSetOwned) owned_.push_back(key(0));
      state_.changed_.notify_all();
      return wire::encode_reply(wire::kOk, {});
    }
    case wire::kGet:
    case wire::kWait: {
      if (request.command == wire::kGet && parts.size() != 1) return bad();
      std::vector<std::string> keys;
      keys.reserve(parts.size());
      for (size_t i = 0; i < parts.size(); ++i) keys.push_back(key(i));
      auto all_present = [&] {
        for (const auto& k : keys)
          if (!data.count(k)) return false;
        return true;
      };
      auto wait = std::min(std::chrono::milliseconds(request.wait_ms), max_wait_);
      auto deadline = std::chrono::steady_clock::now() + wait;
      bool present = state_.changed_.wait_until(lock, deadline, [&] { return state_.stopping_ || all_present(); }) &&
                     !state_.stopping_;
      if (!present) {
        std::vector<View> missing;
        for (size_t i = 0; i < keys.size(); ++i)
          if (!data.count(keys[i])) missing.push_back(parts[i]);
        return wire::encode_reply(wire::kTimedOut, missing);
      }
      if (request.command == wire::kWait) return wire::encode_reply(wire::kOk, {});
      return wire::encode_reply(wire::kOk, {wire::view(data[keys[0]])});
    }
    case wire::kCheck: {
      static const Bytes yes{'1'}, no{'0'};
      std::vector<View> flags;
      flags.reserve(parts.size());
      for (size_t i = 0; i < parts.size(); ++i) flags.push_back(wire::view(data.count(key(i)) ? yes : no));
      return wire::encode_reply(wire::kOk, flags);
    }
    case wire::kAdd: {
      if (parts.size() != 2 || parts[1].size() != 8) return bad();
      Bytes& slot = data[key(0)];
      int64_t value = slot.size() == 8 ? wire::get_i64(wire::view(slot)) : 0;
      // Wraps like two's complement instead of overflowing (undefined).
      value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(wire::get_i64(parts[1])));
      slot.clear();
      wire::put_i64(slot, value);
      state_.changed_.notify_all();
      return wire::encode_reply(wire::kOk, {wire::view(slot)});
    }
  }
  return bad();
}

}  // namespace strata::distributed::detail
