// group_impl.hpp — the inside of a ProcessGroup: its store and Gloo
// context, the worker thread that runs collectives in issue order, the
// cross-rank consistency header, and the translation of Gloo's failures
// into DistributedError (group_impl.cpp). rendezvous.cpp builds one;
// process_group.cpp runs the collectives on it.
#pragma once

#include "store.hpp"

#include <strata/distributed.hpp>
#include <strata/runtime.hpp>

#include <gloo/rendezvous/context.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strata::distributed {
namespace detail {

enum class Kind : int64_t { all_reduce = 1, broadcast, all_gather, reduce_scatter, barrier, gather, scatter,
                            all_to_all, send, recv };
const char* kind_name(Kind k);

/// What a rank announces before a collective: 16 int64 (128 bytes).
/// Shapes are compared on their element count and first kMaxDims dims.
constexpr int kHeaderWords = 16;
constexpr int kMaxDims = 10;
struct Header {
  int64_t w[kHeaderWords] = {};
  // w[0] kind, w[1] dtype (-1 none), w[2] op or root, w[3] local error code
  // (0 none), w[4] rank (dims), w[5] numel, w[6..15] dims.
};

/// Set in w[2] when the rank runs the collective through a device
/// communicator (strata.collectives) rather than Gloo: ranks that disagree
/// on the path fail the consistency check instead of waiting on each other.
constexpr int64_t kDevicePath = int64_t{1} << 40;

enum LocalError : int64_t {
  kNone = 0,
  kBadTensor = 1,  // undefined, device, dtype, contiguity, shape of out
  kBadArgument = 2,
};

Header make_header(Kind kind, const Tensor* t, int64_t arg);

/// The Gloo tag of a collective's data, made of its element size and
/// element count (modulo 2^29). Gloo matches messages by tag, so ranks that
/// pass tensors of different sizes wait on different slots and time out
/// instead of sending one rank more bytes than it posted (which Gloo
/// answers with an assertion on its event-loop thread: an abort). The
/// consistency check's own exchange uses tag 1, which this never is.
uint32_t layout_tag(const Tensor& t);

/// Joins the default group (init_process_group; rendezvous.cpp).
std::unique_ptr<ProcessGroup> make_group(const Options& options);
/// A group of `ranks` of `world` (new_group; rendezvous.cpp).
std::unique_ptr<ProcessGroup> make_subgroup(ProcessGroup::Impl& world, const std::vector<int>& ranks);

}  // namespace detail

struct Work::State {
  std::shared_future<void> future;
};

struct ProcessGroup::Impl {
  using Kind = detail::Kind;

  int rank = 0;  // -1 on a rank a new_group() left out
  int size = 1;
  /// The default group's ranks this group spans (rank r is world_ranks[r]),
  /// and, for a sub-group, "group [0, 2]" in messages; this process's rank
  /// in the default group.
  std::vector<int> world_ranks;
  std::string label;
  int world_rank = 0;
  /// The default group's Gloo device (sub-groups connect over it) and how
  /// many sub-groups it has made (their store keys).
  std::shared_ptr<gloo::transport::Device> transport;
  int subgroups = 0;
  std::chrono::milliseconds timeout{60000};
  bool check = true;
  std::string store_where;                  // for messages
  bool liveness = false;                    // "strata/default/alive/<rank>" keys live with each rank's store connection
  std::vector<std::string> peer_addresses;  // rank -> the listening address of its pair with this rank
  std::unique_ptr<detail::TcpStoreServer> server;
  std::unique_ptr<detail::RendezvousStore> store;
  std::shared_ptr<gloo::rendezvous::Context> context;
  bool meshed = false;  // connectFullMesh completed: the context has connections to close

  // The worker.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::packaged_task<void()>> queue;
  bool stopping = false;
  std::thread worker;
  // Set (on the worker) after a transport failure: the group cannot be used.
  std::string broken;
  // Device communicators (strata.collectives), made on the worker when a
  // collective first meets a device tensor, by device; `devcomm_count`
  // numbers them for the store key under which rank 0 publishes each id.
  std::map<std::string, std::unique_ptr<DeviceCommunicator>> devcomms;
  int devcomm_count = 0;

  /// Closes what close() did not; a failure is logged (a destructor cannot
  /// throw).
  ~Impl();
  /// Stops the worker (after the queued collectives) and closes the
  /// connections. What Gloo threw closing them, "" when nothing; a second
  /// call does nothing.
  std::string close();

  std::string who() const {
    return (label.empty() ? "" : label + ", ") + "rank " + std::to_string(rank) + " of " + std::to_string(size);
  }
  /// DistributedError when this rank is not a member (a new_group() left it out).
  void require_member(Kind kind) const;
  std::string prefix(Kind kind) const { return std::string(kind_name(kind)) + " on " + who(); }

  void start_worker();
  Work enqueue(std::function<void()> body);

  /// The device communicator of `device` (on the worker): rank 0 makes the
  /// unique id and publishes it under "strata/default/devcomm/<k>" (k: the
  /// group's k-th device communicator), the others read it, every rank
  /// joins. Ranks meet their device tensors in the same collective, so each
  /// rank's k-th communicator is the same communicator.
  DeviceCommunicator& device_comm(Kind kind, Device device);
  /// Runs `fn` (device collectives), turning the core's errors into
  /// DistributedError, and waits for the device.
  void on_device(Kind kind, Device device, const std::function<void(DeviceCommunicator&)>& fn);

  /// The rank whose Gloo address appears in a Gloo message, -1 if none.
  int peer_rank_in(const std::string& message) const;
  /// "rank 2 (address)" for a rank found by its address.
  std::string peer_name(int r) const;
  /// The ranks that are gone by their liveness keys in the TCP store (see
  /// group_impl.cpp); empty when unknown.
  std::vector<int> gone_peers() const;
  /// Records in the store that this rank is alive and saw a transport
  /// failure (see gone_peers); errors are ignored (the store may be gone).
  void note_failure() const;

  /// Runs `fn` (Gloo calls), turning Gloo's exceptions into DistributedError
  /// naming the collective, this rank and the peer.
  void guarded(Kind kind, const std::string& what, const std::function<void()>& fn);
  /// Exchanges headers; throws on every rank when they differ.
  void exchange(Kind kind, const detail::Header& mine, const std::string& local_error);
  /// What every collective does first, on the worker: refuse when the group
  /// is broken, exchange headers (when checking), throw `local_error`.
  void begin(Kind kind, const detail::Header& mine, const std::string& local_error);
};

}  // namespace strata::distributed
