// group_impl.cpp — ProcessGroup::Impl (group_impl.hpp): teardown, the
// worker, device communicators, naming a lost peer, Gloo's exceptions as
// DistributedError, and the consistency check.
#include "group_impl.hpp"

#include "log.hpp"

#include <gloo/allgather.h>
#include <gloo/common/error.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace strata::distributed {
namespace detail {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::all_reduce:
      return "all_reduce";
    case Kind::broadcast:
      return "broadcast";
    case Kind::all_gather:
      return "all_gather";
    case Kind::reduce_scatter:
      return "reduce_scatter";
    case Kind::barrier:
      return "barrier";
    case Kind::gather:
      return "gather";
    case Kind::scatter:
      return "scatter";
    case Kind::all_to_all:
      return "all_to_all";
    case Kind::send:
      return "send";
    case Kind::recv:
      return "recv";
  }
  return "?";
}

Header make_header(Kind kind, const Tensor* t, int64_t arg) {
  Header h;
  h.w[0] = static_cast<int64_t>(kind);
  h.w[1] = -1;
  h.w[2] = arg;
  if (t && t->defined()) {
    h.w[1] = static_cast<int64_t>(t->dtype());
    h.w[4] = t->dim();
    h.w[5] = t->numel();
    for (int64_t d = 0; d < std::min<int64_t>(t->dim(), kMaxDims); ++d) h.w[6 + d] = t->size(d);
  }
  return h;
}

uint32_t layout_tag(const Tensor& t) {
  size_t element = dtype_size(t.dtype());
  uint32_t size_code = element >= 8 ? 3 : element >= 4 ? 2 : element >= 2 ? 1 : 0;
  return 0x80000000u | (size_code << 29) | (static_cast<uint32_t>(t.numel()) & 0x1fffffffu);
}

namespace {

std::string header_tensor(const Header& h) {
  if (h.w[1] < 0) return "no tensor";
  std::string s = std::string(dtype_name(static_cast<DType>(h.w[1]))) + "[";
  for (int64_t d = 0; d < std::min<int64_t>(h.w[4], kMaxDims); ++d) s += (d ? ", " : "") + std::to_string(h.w[6 + d]);
  if (h.w[4] > kMaxDims) s += ", ...";
  return s + "]";
}

bool same_header(const Header& a, const Header& b) { return std::memcmp(a.w, b.w, sizeof a.w) == 0; }

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return (ranks.size() > 1 ? "ranks " : "rank ") + s;
}

}  // namespace
}  // namespace detail

using detail::Header;
using detail::Kind;

ProcessGroup::Impl::~Impl() {
  std::string error = close();
  if (!error.empty()) detail::log_warn("rank {} of {}: Gloo failed closing the connections: {}", rank, size, error);
}

std::string ProcessGroup::Impl::close() {
  {
    std::lock_guard lock(mu);
    stopping = true;
  }
  cv.notify_all();
  if (worker.joinable()) worker.join();
  devcomms.clear();
  // Only a connected context has pairs: closing a half-built one (a failed
  // connectFullMesh) is itself an error in Gloo.
  if (!context || !meshed) return "";
  meshed = false;
  try {
    context->closeConnections();
  } catch (const std::exception& e) {  // gloo::Exception and gloo::EnforceNotMet (a std::exception only)
    return e.what();
  }
  return "";
}

void ProcessGroup::Impl::start_worker() {
  worker = std::thread([this] {
    while (true) {
      std::packaged_task<void()> task;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [this] { return stopping || !queue.empty(); });
        if (queue.empty()) return;
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();
    }
  });
}

Work ProcessGroup::Impl::enqueue(std::function<void()> body) {
  std::packaged_task<void()> task(std::move(body));
  auto state = std::make_shared<Work::State>(Work::State{task.get_future().share()});
  {
    std::lock_guard lock(mu);
    queue.push_back(std::move(task));
  }
  cv.notify_one();
  return Work(state);
}

DeviceCommunicator& ProcessGroup::Impl::device_comm(Kind kind, Device device) {
  std::string id = device.str();
  if (store == nullptr)  // a sub-group: no store of its own to publish a communicator's id under
    throw DistributedError(prefix(kind) + ": " + id + " tensors: device collectives (strata.collectives) run on the "
                           "default group only; copy to cpu:0 for a sub-group");
  if (auto it = devcomms.find(id); it != devcomms.end()) return *it->second;
  std::string key = "strata/default/devcomm/" + std::to_string(devcomm_count);
  try {
    std::vector<char> bytes;
    if (rank == 0) {
      std::vector<uint8_t> uid = DeviceCommunicator::unique_id(device);
      bytes.assign(uid.begin(), uid.end());
      store->set(key, bytes);
    } else {
      bytes = store->get(key);
    }
    std::vector<uint8_t> uid(bytes.begin(), bytes.end());
    auto comm = std::make_unique<DeviceCommunicator>(device, uid, rank, size);
    ++devcomm_count;
    return *devcomms.emplace(id, std::move(comm)).first->second;
  } catch (const DistributedError& e) {
    throw DistributedError(prefix(kind) + ": setting up the device communicator of " + id + " (store key " + key +
                           "): " + e.what());
  } catch (const Error& e) {
    throw DistributedError(prefix(kind) + ": setting up the device communicator of " + id + ": " + e.what());
  }
}

void ProcessGroup::Impl::on_device(Kind kind, Device device, const std::function<void(DeviceCommunicator&)>& fn) {
  DeviceCommunicator& comm = device_comm(kind, device);
  try {
    fn(comm);
    runtime().synchronize(device);
  } catch (const Error& e) {
    broken = prefix(kind) + ": " + e.what();
    throw DistributedError(broken);
  }
}

int ProcessGroup::Impl::peer_rank_in(const std::string& message) const {
  if (size == 2) return 1 - rank;  // the only peer
  for (int r = 0; r < size; ++r) {
    if (r == rank || peer_addresses.size() != static_cast<size_t>(size) || peer_addresses[r].empty()) continue;
    if (message.find(peer_addresses[r]) != std::string::npos) return r;
  }
  return -1;
}

std::string ProcessGroup::Impl::peer_name(int r) const {
  std::string address = static_cast<size_t>(r) < peer_addresses.size() ? peer_addresses[r] : "";
  return "rank " + std::to_string(r) + (address.empty() || size == 2 ? "" : " (" + address + ")");
}

/// A rank's "alive/<r>" key lives as long as its connection to the TCP
/// store; a rank that saw a transport failure itself first sets
/// "failed/<r>" (note_failure), so that its own exit afterwards does not
/// make it look like the cause to a slower rank. Gone: alive key absent,
/// failed key absent. The store notices a closed connection a moment after
/// the peer's Gloo sockets close: asks for up to a second. Empty when
/// unknown: a file store, a store that cannot be reached (rank 0, which
/// serves it, is gone too or has exited), or no key gone yet.
std::vector<int> ProcessGroup::Impl::gone_peers() const {
  if (!liveness) return {};
  std::vector<std::string> keys;
  std::vector<int> ranks;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    keys.push_back("strata/default/alive/" + std::to_string(r));
    keys.push_back("strata/default/failed/" + std::to_string(r));
    ranks.push_back(r);
  }
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::vector<bool> present;
    try {
      present = store->check(keys);
    } catch (const DistributedError&) {
      return {};
    }
    if (present.size() != keys.size()) return {};
    std::vector<int> gone;
    for (size_t k = 0; k < ranks.size(); ++k)
      if (!present[2 * k] && !present[2 * k + 1]) gone.push_back(ranks[k]);
    if (!gone.empty()) return gone;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the store has not noticed yet
  }
  return {};
}

void ProcessGroup::Impl::note_failure() const {
  if (!liveness) return;
  try {
    store->set("strata/default/failed/" + std::to_string(rank), {});
  } catch (const DistributedError&) {  // NOLINT(bugprone-empty-catch): best effort
  }
}

void ProcessGroup::Impl::guarded(Kind kind, const std::string& what, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const gloo::IoException& e) {
    std::string msg = e.what();
    const bool timed_out = msg.find("Timed out") != std::string::npos || msg.find("timed out") != std::string::npos ||
                           msg.find("Timeout") != std::string::npos;
    std::string text;
    // A wait that timed out may have waited on a survivor that exited after
    // its own error, while the rank that died broke another connection:
    // the store's liveness keys still say who is gone (a rank killed while
    // this one waited on a recv that no closed connection ends).
    std::vector<int> gone_while_waiting;
    if (timed_out && size > 2) gone_while_waiting = gone_peers();
    if (timed_out && !gone_while_waiting.empty()) {
      note_failure();
      text = prefix(kind) + ": lost " + detail::rank_list(gone_while_waiting) + " during " + what +
             " (it exited or its connection failed; noticed after waiting " + std::to_string(timeout.count()) +
             " ms)";
    } else if (timed_out) {
      int r = peer_rank_in(msg);
      text = prefix(kind) + ": timed out after " + std::to_string(timeout.count()) + " ms waiting for " +
             (r < 0 ? std::string("its peers") : peer_name(r)) + " during " + what;
    } else {
      note_failure();
      // STRATA_DIST_TEST_NAME_BY_STORE=1 (tests only) skips the address
      // lookup, so that the store's liveness keys must name the peer.
      static const bool by_store_only = std::getenv("STRATA_DIST_TEST_NAME_BY_STORE") != nullptr;
      int r = by_store_only ? -1 : peer_rank_in(msg);
      // The address names the connection that broke, which may be a
      // survivor that exited after its own error; the store knows which
      // rank is gone without having reported a failure, and is believed
      // first (with two ranks there is no one else to blame).
      std::vector<int> gone = size == 2 ? std::vector<int>{} : gone_peers();
      std::string peer;
      if (!gone.empty() && std::find(gone.begin(), gone.end(), r) == gone.end())
        peer = detail::rank_list(gone);
      else if (r >= 0)
        peer = peer_name(r);
      text = prefix(kind) + ": lost " + (peer.empty() ? std::string("a peer") : peer) + " during " + what +
             " (it exited or its connection failed)";
    }
    // Without the check, tensors of other sizes on the ranks meet here: the
    // ranks wait on each other until the first times out and closes its
    // connections (layout_tag).
    if (!check)
      text += " (the consistency check is off, STRATA_DIST_CHECK=0: ranks that pass tensors of different sizes or "
              "element sizes also end here, the first to time out dropping its connections to the others; turn "
              "the check on to have them named)";
    text += " [Gloo: " + msg + "]";
    broken = text;
    throw DistributedError(text);
  } catch (const gloo::Exception& e) {
    throw DistributedError(prefix(kind) + ": Gloo failed during " + what + ": " + e.what());
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {  // gloo::EnforceNotMet: Gloo's state is not to be trusted after it
    broken = prefix(kind) + ": Gloo failed during " + what + ": " + e.what();
    throw DistributedError(broken);
  }
}

void ProcessGroup::Impl::require_member(Kind kind) const {
  if (rank >= 0) return;
  throw DistributedError(std::string(kind_name(kind)) + " on " + label + ": rank " + std::to_string(world_rank) +
                         " of the default group is not a member (new_group left it out)");
}

void ProcessGroup::Impl::begin(Kind kind, const Header& mine, const std::string& local_error) {
  if (!broken.empty())
    throw DistributedError(prefix(kind) + ": the group is unusable after an earlier failure: " + broken);
  if (check) exchange(kind, mine, local_error);
  if (!local_error.empty()) throw DistributedError(prefix(kind) + ": " + local_error);
}

void ProcessGroup::Impl::exchange(Kind kind, const Header& mine, const std::string& local_error) {
  std::vector<Header> all(static_cast<size_t>(size));
  guarded(kind, "the consistency check", [&] {
    gloo::AllgatherOptions opts(context);
    opts.setInput(const_cast<int64_t*>(mine.w), detail::kHeaderWords);
    opts.setOutput(all.data()->w, static_cast<size_t>(detail::kHeaderWords) * static_cast<size_t>(size));
    opts.setTag(1);
    opts.setTimeout(timeout);
    gloo::allgather(opts);
  });
  if (!local_error.empty()) throw DistributedError(prefix(kind) + ": " + local_error);
  std::vector<int> failed;
  for (int r = 0; r < size; ++r)
    if (all[r].w[3] != detail::kNone) failed.push_back(r);
  if (!failed.empty())
    throw DistributedError(prefix(kind) + ": " + detail::rank_list(failed) +
                           " could not take part (bad tensor or argument; its own error says which)");
  bool same = true;
  for (int r = 0; r < size; ++r) same = same && detail::same_header(all[r], all[0]);
  if (same) return;
  // Name every rank's view, grouping ranks that agree.
  std::string views;
  std::vector<bool> done(static_cast<size_t>(size), false);
  for (int r = 0; r < size; ++r) {
    if (done[r]) continue;
    std::vector<int> agree;
    for (int q = r; q < size; ++q)
      if (!done[q] && detail::same_header(all[q], all[r])) {
        done[q] = true;
        agree.push_back(q);
      }
    const Header& h = all[r];
    std::string what =
        static_cast<Kind>(h.w[0]) != kind ? std::string("called ") + detail::kind_name(static_cast<Kind>(h.w[0])) : "";
    std::string desc = detail::header_tensor(h);
    int64_t arg = h.w[2] & ~detail::kDevicePath;
    if (kind == Kind::all_reduce || kind == Kind::reduce_scatter)
      desc += " op " + std::string(reduce_op_name(static_cast<ReduceOp>(arg)));
    if (kind == Kind::broadcast || kind == Kind::gather || kind == Kind::scatter) desc += " root " + std::to_string(arg);
    if (h.w[2] & detail::kDevicePath) desc += " on a device communicator";
    views += std::string(views.empty() ? "" : "; ") + detail::rank_list(agree) + ": " +
             (what.empty() ? desc : what + " with " + desc);
  }
  throw DistributedError(prefix(kind) + ": the ranks disagree on the collective's tensors: " + views);
}

}  // namespace strata::distributed
