// process_group.cpp — the process group: rendezvous, the worker thread that
// runs collectives in issue order, the cross-rank consistency check, and
// the translation of Gloo's exceptions into DistributedError.
#include "reduce.hpp"
#include "store.hpp"

#include <strata/distributed.hpp>
#include <strata/runtime.hpp>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <future>
#include <mutex>
#include <regex>
#include <thread>
#include <csignal>

namespace strata::distributed {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::mean: return "mean";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

// --- Work -------------------------------------------------------------------

struct Work::State {
  std::shared_future<void> future;
};

Work::Work() {
  std::promise<void> done;
  done.set_value();
  state_ = std::make_shared<State>(State{done.get_future().share()});
}

Work::Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

void Work::wait() { state_->future.get(); }

bool Work::completed() const {
  return state_->future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

namespace {

// --- the consistency header ---------------------------------------------------

enum class Kind : int64_t { all_reduce = 1, broadcast, all_gather, reduce_scatter, barrier };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::all_reduce: return "all_reduce";
    case Kind::broadcast: return "broadcast";
    case Kind::all_gather: return "all_gather";
    case Kind::reduce_scatter: return "reduce_scatter";
    case Kind::barrier: return "barrier";
  }
  return "?";
}

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

std::string header_tensor(const Header& h) {
  if (h.w[1] < 0) return "no tensor";
  std::string s = std::string(dtype_name(static_cast<DType>(h.w[1]))) + "[";
  for (int64_t d = 0; d < std::min<int64_t>(h.w[4], kMaxDims); ++d) s += (d ? ", " : "") + std::to_string(h.w[6 + d]);
  if (h.w[4] > kMaxDims) s += ", ...";
  return s + "]";
}

bool same_header(const Header& a, const Header& b) {
  return std::memcmp(a.w, b.w, sizeof a.w) == 0;
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

int env_int(const char* name, const char* field, bool required, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    if (required)
      throw DistributedError(std::string("init_process_group: ") + name + " is not set and Options::" + field +
                             " was not given (run under `strata launch -n N` or set " + name + ")");
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || value < INT32_MIN || value > INT32_MAX)
    throw DistributedError(std::string("init_process_group: ") + name + "=\"" + v + "\" is not an integer");
  return static_cast<int>(value);
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

}  // namespace

// --- the group ----------------------------------------------------------------

struct ProcessGroup::Impl {
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{60000};
  bool check = true;
  std::string store_where;                 // for messages
  bool liveness = false;                   // "strata/default/alive/<rank>" keys live with each rank's store connection
  std::vector<std::string> peer_addresses;  // rank -> the listening address of its pair with this rank
  std::unique_ptr<detail::TcpStoreServer> server;
  std::unique_ptr<detail::RendezvousStore> store;
  std::shared_ptr<gloo::rendezvous::Context> context;

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

  ~Impl() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
    devcomms.clear();
    if (context) context->closeConnections();
  }

  /// The device communicator of `device` (on the worker): rank 0 makes the
  /// unique id and publishes it under "strata/default/devcomm/<k>" (k: the
  /// group's k-th device communicator), the others read it, every rank
  /// joins. Ranks meet their device tensors in the same collective, so each
  /// rank's k-th communicator is the same communicator.
  DeviceCommunicator& device_comm(Kind kind, Device device) {
    std::string id = device.str();
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

  /// Runs `fn` (device collectives), turning the core's errors into
  /// DistributedError, and waits for the device.
  template <typename Fn>
  void on_device(Kind kind, Device device, Fn&& fn) {
    DeviceCommunicator& comm = device_comm(kind, device);
    try {
      fn(comm);
      runtime().synchronize(device);
    } catch (const Error& e) {
      broken = prefix(kind) + ": " + e.what();
      throw DistributedError(broken);
    }
  }

  std::string who() const { return "rank " + std::to_string(rank) + " of " + std::to_string(size); }
  std::string prefix(Kind kind) const { return std::string(kind_name(kind)) + " on " + who(); }

  void start_worker() {
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

  Work enqueue(std::function<void()> body) {
    std::packaged_task<void()> task(std::move(body));
    auto state = std::make_shared<Work::State>(Work::State{task.get_future().share()});
    {
      std::lock_guard lock(mu);
      queue.push_back(std::move(task));
    }
    cv.notify_one();
    return Work(state);
  }

  /// Names the rank whose Gloo address appears in a Gloo message.
  std::string peer_in(const std::string& message) const {
    if (size == 2) return "rank " + std::to_string(1 - rank);  // the only peer
    for (int r = 0; r < size; ++r) {
      if (r == rank || peer_addresses.size() != static_cast<size_t>(size) || peer_addresses[r].empty()) continue;
      if (message.find(peer_addresses[r]) != std::string::npos)
        return "rank " + std::to_string(r) + " (" + peer_addresses[r] + ")";
    }
    return "";
  }

  /// The ranks that are gone, by their liveness keys in the TCP store
  /// ("rank 2", "ranks 1, 3"), for a broken connection whose Gloo message
  /// quotes an address no rank published. A rank's "alive/<r>" key lives as
  /// long as its connection to the store; a rank that saw the failure itself
  /// first sets "failed/<r>" (note_failure), so that its own exit afterwards
  /// does not make it look like the cause to a slower rank. The store
  /// notices a closed connection a moment after the peer's Gloo sockets
  /// close: asks for up to a second. "" when unknown: a file store, a store
  /// that cannot be reached (rank 0, which serves it, is gone too or has
  /// exited), or no key gone yet.
  std::string gone_peers() const {
    if (!liveness) return "";
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
        return "";
      }
      if (present.size() != keys.size()) return "";
      std::string gone;
      int count = 0;
      for (size_t k = 0; k < ranks.size(); ++k) {
        if (present[2 * k] || present[2 * k + 1]) continue;  // connected, or saw the failure itself
        gone += (gone.empty() ? "" : ", ") + std::to_string(ranks[k]);
        ++count;
      }
      if (count > 0) return (count > 1 ? "ranks " : "rank ") + gone;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "";
  }

  /// Records in the store that this rank is alive and saw a transport
  /// failure (see gone_peers); errors are ignored (the store may be gone).
  void note_failure() const {
    if (!liveness) return;
    try {
      store->set("strata/default/failed/" + std::to_string(rank), {});
    } catch (const DistributedError&) {  // NOLINT(bugprone-empty-catch): best effort
    }
  }

  /// Runs `fn` (Gloo calls), turning Gloo's exceptions into DistributedError.
  template <typename Fn>
  void guarded(Kind kind, const std::string& what, Fn&& fn) {
    try {
      fn();
    } catch (const gloo::IoException& e) {
      std::string msg = e.what();
      // STRATA_DIST_TEST_NAME_BY_STORE=1 (tests only) skips the address
      // lookup, so that the store's liveness keys must name the peer.
      static const bool by_store_only = std::getenv("STRATA_DIST_TEST_NAME_BY_STORE") != nullptr;
      std::string peer = by_store_only ? std::string() : peer_in(msg);
      const bool timed_out = msg.find("Timed out") != std::string::npos ||
                             msg.find("timed out") != std::string::npos || msg.find("Timeout") != std::string::npos;
      if (!timed_out) note_failure();
      if (peer.empty() && !timed_out) peer = gone_peers();
      std::string text;
      if (timed_out)
        text = prefix(kind) + ": timed out after " + std::to_string(timeout.count()) + " ms waiting for " +
               (peer.empty() ? std::string("its peers") : peer) + " during " + what;
      else
        text = prefix(kind) + ": lost " + (peer.empty() ? std::string("a peer") : peer) + " during " + what +
               " (it exited or its connection failed)";
      text += " [Gloo: " + msg + "]";
      broken = text;
      throw DistributedError(text);
    } catch (const gloo::Exception& e) {
      throw DistributedError(prefix(kind) + ": Gloo failed during " + what + ": " + e.what());
    }
  }

  /// Exchanges headers; throws on every rank when they differ.
  void exchange(Kind kind, const Header& mine, const std::string& local_error) {
    std::vector<Header> all(static_cast<size_t>(size));
    guarded(kind, "the consistency check", [&] {
      gloo::AllgatherOptions opts(context);
      opts.setInput(const_cast<int64_t*>(mine.w), kHeaderWords);
      opts.setOutput(all.data()->w, static_cast<size_t>(kHeaderWords) * static_cast<size_t>(size));
      opts.setTag(1);
      opts.setTimeout(timeout);
      gloo::allgather(opts);
    });
    if (!local_error.empty()) throw DistributedError(prefix(kind) + ": " + local_error);
    std::vector<int> failed;
    for (int r = 0; r < size; ++r)
      if (all[r].w[3] != kNone) failed.push_back(r);
    if (!failed.empty()) {
      std::string list;
      for (int r : failed) list += (list.empty() ? "" : ", ") + std::to_string(r);
      throw DistributedError(prefix(kind) + ": rank" + (failed.size() > 1 ? "s " : " ") + list +
                             " could not take part (bad tensor or argument; its own error says which)");
    }
    bool same = true;
    for (int r = 0; r < size; ++r) same = same && same_header(all[r], all[0]);
    if (same) return;
    // Name every rank's view, grouping ranks that agree.
    std::string detail;
    std::vector<bool> done(static_cast<size_t>(size), false);
    for (int r = 0; r < size; ++r) {
      if (done[r]) continue;
      std::string ranks;
      for (int q = r; q < size; ++q)
        if (!done[q] && same_header(all[q], all[r])) {
          done[q] = true;
          ranks += (ranks.empty() ? "" : ", ") + std::to_string(q);
        }
      const Header& h = all[r];
      std::string what = static_cast<Kind>(h.w[0]) != kind ? std::string("called ") + kind_name(static_cast<Kind>(h.w[0]))
                                                           : "";
      std::string desc = header_tensor(h);
      int64_t arg = h.w[2] & ~kDevicePath;
      if (kind == Kind::all_reduce || kind == Kind::reduce_scatter)
        desc += " op " + std::string(reduce_op_name(static_cast<ReduceOp>(arg)));
      if (kind == Kind::broadcast) desc += " root " + std::to_string(arg);
      if (h.w[2] & kDevicePath) desc += " on a device communicator";
      detail += std::string(detail.empty() ? "" : "; ") + "rank" + (ranks.find(',') != std::string::npos ? "s " : " ") +
                ranks + ": " + (what.empty() ? desc : what + " with " + desc);
    }
    throw DistributedError(prefix(kind) + ": the ranks disagree on the collective's tensors: " + detail);
  }
};

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;
int ProcessGroup::rank() const { return impl_->rank; }
int ProcessGroup::size() const { return impl_->size; }

namespace {

/// The host address of a tensor a collective takes, or the reason it
/// cannot ("" on success). With `device` given, a tensor whose device has no
/// host memory but whose plugin offers strata.collectives is accepted too:
/// *device becomes true and `data` stays null.
std::string host_pointer(Kind kind, const char* role, const Tensor& t, void*& data, bool* device = nullptr) {
  data = nullptr;
  if (device) *device = false;
  if (!t.defined()) return std::string(role) + " is an undefined tensor";
  std::string tensor = std::string(role) + " " + type_string(t) + " on " + t.device().str();
  if (t.dtype() == DType::boolean) return tensor + ": bool tensors are not supported (f32, f64, bf16, f16, i32, i64)";
  std::string no_backend = tensor +
                           ": no collective backend for this device (Gloo handles host memory; device memory needs "
                           "a plugin with the strata.collectives extension" +
                           (kind == Kind::reduce_scatter ? std::string(", and reduce_scatter is host-only") : "") +
                           ": copy the tensor to cpu:0 and back)";
  auto not_contiguous = [&] {
    return tensor + " is not contiguous (strides " + shape_string(t.strides()) +
           "): pass t.contiguous() and copy the result back";
  };
  NativeView view;
  bool host = false;
  try {
    view = native_view(t);
    host = view.api == "host";
  } catch (const DeviceError&) {
    host = false;
  }
  if (!host) {
    if (device == nullptr || !DeviceCommunicator::available(t.device())) return no_backend;
    if (!t.is_contiguous()) return not_contiguous();
    *device = true;
    return "";
  }
  if (!t.is_contiguous()) return not_contiguous();
  runtime().synchronize(t.device());
  data = view.data;
  return "";
}

size_t nbytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * dtype_size(t.dtype()); }

/// Reductions of complex tensors are not implemented (docs/complex.md):
/// reduce real() and imag() instead. Empty when `t` is not complex.
std::string refuse_complex(const Tensor& t) {
  if (!is_complex(t.dtype())) return {};
  return "complex tensors (" + type_string(t) + ") are not reduced yet: reduce real() and imag() separately";
}

}  // namespace

Work ProcessGroup::all_reduce(Tensor& t, ReduceOp op) {
  Impl& g = *impl_;
  void* data = nullptr;
  bool device = false;
  std::string error = host_pointer(Kind::all_reduce, "tensor", t, data, &device);
  if (error.empty()) error = refuse_complex(t);
  if (error.empty() && op == ReduceOp::mean && !is_floating(t.dtype()))
    error = "mean needs a floating dtype (got " + std::string(dtype_name(t.dtype())) + "): use sum and divide";
  Header h = make_header(Kind::all_reduce, &t, static_cast<int64_t>(op));
  if (device) h.w[2] |= kDevicePath;
  if (!error.empty()) h.w[3] = kBadTensor;
  Tensor keep = t;
  return g.enqueue([&g, h, error, keep, data, op, device]() mutable {
    if (!g.broken.empty())
      throw DistributedError(g.prefix(Kind::all_reduce) + ": the group is unusable after an earlier failure: " + g.broken);
    if (g.check) g.exchange(Kind::all_reduce, h, error);
    if (!error.empty()) throw DistributedError(g.prefix(Kind::all_reduce) + ": " + error);
    size_t n = static_cast<size_t>(keep.numel());
    if (device) {
      if (n == 0) return;
      CollectiveOp cop = op == ReduceOp::sum    ? CollectiveOp::sum
                         : op == ReduceOp::mean ? CollectiveOp::average
                         : op == ReduceOp::max  ? CollectiveOp::max
                                                : CollectiveOp::min;
      g.on_device(Kind::all_reduce, keep.device(), [&](DeviceCommunicator& c) { c.all_reduce(keep, cop); });
      return;
    }
    if (n == 0 || g.size == 1) {
      if (op == ReduceOp::mean) detail::divide_in_place(keep.dtype(), data, n, g.size);
      return;
    }
    g.guarded(Kind::all_reduce, "the reduction", [&] {
      gloo::AllreduceOptions opts(g.context);
      switch (dtype_size(keep.dtype())) {
        case 8: opts.setOutput(static_cast<int64_t*>(data), n); break;
        case 4: opts.setOutput(static_cast<int32_t*>(data), n); break;
        default: opts.setOutput(static_cast<uint16_t*>(data), n); break;
      }
      opts.setReduceFunction(detail::reduce_function(keep.dtype(), op));
      opts.setTag(0);
      opts.setTimeout(g.timeout);
      gloo::allreduce(opts);
    });
    if (op == ReduceOp::mean) detail::divide_in_place(keep.dtype(), data, n, g.size);
  });
}

Work ProcessGroup::broadcast(Tensor& t, int root) {
  Impl& g = *impl_;
  void* data = nullptr;
  bool device = false;
  std::string error = host_pointer(Kind::broadcast, "tensor", t, data, &device);
  if (error.empty() && (root < 0 || root >= g.size))
    error = "root " + std::to_string(root) + " is not a rank of this group (0.." + std::to_string(g.size - 1) + ")";
  Header h = make_header(Kind::broadcast, &t, root);
  if (device) h.w[2] |= kDevicePath;
  if (!error.empty()) h.w[3] = kBadTensor;
  Tensor keep = t;
  return g.enqueue([&g, h, error, keep, data, root, device]() mutable {
    if (!g.broken.empty())
      throw DistributedError(g.prefix(Kind::broadcast) + ": the group is unusable after an earlier failure: " + g.broken);
    if (g.check) g.exchange(Kind::broadcast, h, error);
    if (!error.empty()) throw DistributedError(g.prefix(Kind::broadcast) + ": " + error);
    size_t bytes = nbytes(keep);
    if (device) {
      if (bytes == 0) return;
      g.on_device(Kind::broadcast, keep.device(), [&](DeviceCommunicator& c) { c.broadcast(keep, root); });
      return;
    }
    if (bytes == 0 || g.size == 1) return;
    g.guarded(Kind::broadcast, "the broadcast from rank " + std::to_string(root), [&] {
      gloo::BroadcastOptions opts(g.context);
      opts.setOutput(static_cast<uint8_t*>(data), bytes);
      opts.setRoot(root);
      opts.setTag(0);
      opts.setTimeout(g.timeout);
      gloo::broadcast(opts);
    });
  });
}

Work ProcessGroup::all_gather(Tensor& out, const Tensor& in) {
  Impl& g = *impl_;
  void* in_data = nullptr;
  void* out_data = nullptr;
  bool in_device = false, out_device = false;
  std::string error = host_pointer(Kind::all_gather, "input", in, in_data, &in_device);
  if (error.empty()) error = host_pointer(Kind::all_gather, "output", out, out_data, &out_device);
  if (error.empty() && (in_device || out_device) && in.device() != out.device())
    error = "input on " + in.device().str() + " and output on " + out.device().str() +
            ": a device collective needs both on one device";
  bool device = in_device || out_device;
  if (error.empty()) {
    Shape want{g.size};
    for (int64_t d : in.shape()) want.push_back(d);
    if (out.sizes() != want || out.dtype() != in.dtype())
      error = "output " + type_string(out) + " does not fit input " + type_string(in) + " gathered from " +
              std::to_string(g.size) + " ranks (want " + std::string(dtype_name(in.dtype())) + shape_string(want) + ")";
  }
  Header h = make_header(Kind::all_gather, &in, 0);
  if (device) h.w[2] |= kDevicePath;
  if (!error.empty()) h.w[3] = kBadTensor;
  Tensor keep_in = in, keep_out = out;
  return g.enqueue([&g, h, error, keep_in, keep_out, in_data, out_data, device]() mutable {
    if (!g.broken.empty())
      throw DistributedError(g.prefix(Kind::all_gather) + ": the group is unusable after an earlier failure: " + g.broken);
    if (g.check) g.exchange(Kind::all_gather, h, error);
    if (!error.empty()) throw DistributedError(g.prefix(Kind::all_gather) + ": " + error);
    size_t bytes = nbytes(keep_in);
    if (bytes == 0) return;
    if (device) {
      g.on_device(Kind::all_gather, keep_in.device(),
                  [&](DeviceCommunicator& c) { c.all_gather(keep_out, keep_in); });
      return;
    }
    if (g.size == 1) {
      std::memcpy(out_data, in_data, bytes);
      return;
    }
    g.guarded(Kind::all_gather, "the gather", [&] {
      gloo::AllgatherOptions opts(g.context);
      opts.setInput(static_cast<uint8_t*>(in_data), bytes);
      opts.setOutput(static_cast<uint8_t*>(out_data), bytes * static_cast<size_t>(g.size));
      opts.setTag(0);
      opts.setTimeout(g.timeout);
      gloo::allgather(opts);
    });
  });
}

Work ProcessGroup::reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
  Impl& g = *impl_;
  void* in_data = nullptr;
  void* out_data = nullptr;
  std::string error = host_pointer(Kind::reduce_scatter, "input", in, in_data);
  if (error.empty()) error = host_pointer(Kind::reduce_scatter, "output", out, out_data);
  if (error.empty()) {
    Shape want{g.size};
    for (int64_t d : out.shape()) want.push_back(d);
    if (in.sizes() != want || out.dtype() != in.dtype())
      error = "input " + type_string(in) + " does not fit output " + type_string(out) + " scattered over " +
              std::to_string(g.size) + " ranks (want " + std::string(dtype_name(out.dtype())) + shape_string(want) + ")";
  }
  if (error.empty()) error = refuse_complex(in);
  if (error.empty() && op == ReduceOp::mean && !is_floating(in.dtype()))
    error = "mean needs a floating dtype (got " + std::string(dtype_name(in.dtype())) + "): use sum and divide";
  Header h = make_header(Kind::reduce_scatter, &in, static_cast<int64_t>(op));
  if (!error.empty()) h.w[3] = kBadTensor;
  Tensor keep_in = in, keep_out = out;
  return g.enqueue([&g, h, error, keep_in, keep_out, in_data, out_data, op] {
    if (!g.broken.empty())
      throw DistributedError(g.prefix(Kind::reduce_scatter) +
                             ": the group is unusable after an earlier failure: " + g.broken);
    if (g.check) g.exchange(Kind::reduce_scatter, h, error);
    if (!error.empty()) throw DistributedError(g.prefix(Kind::reduce_scatter) + ": " + error);
    size_t chunk = nbytes(keep_out);
    size_t n = static_cast<size_t>(keep_out.numel());
    if (chunk == 0) return;
    // All-to-all: rank r receives every rank's in[r] (size x chunk bytes),
    // then reduces them locally. Moves (size-1)/size of the input per rank.
    std::vector<char> gathered(chunk * static_cast<size_t>(g.size));
    if (g.size == 1) {
      std::memcpy(gathered.data(), in_data, chunk);
    } else {
      g.guarded(Kind::reduce_scatter, "the exchange", [&] {
        gloo::AlltoallOptions opts(g.context);
        opts.setInput(static_cast<uint8_t*>(in_data), chunk * static_cast<size_t>(g.size));
        opts.setOutput(reinterpret_cast<uint8_t*>(gathered.data()), gathered.size());
        opts.setTag(0);
        opts.setTimeout(g.timeout);
        gloo::alltoall(opts);
      });
    }
    auto fn = detail::reduce_function(keep_out.dtype(), op);
    std::memcpy(out_data, gathered.data(), chunk);
    for (int r = 1; r < g.size; ++r) fn(out_data, out_data, gathered.data() + chunk * static_cast<size_t>(r), n);
    if (op == ReduceOp::mean) detail::divide_in_place(keep_out.dtype(), out_data, n, g.size);
  });
}

Work ProcessGroup::barrier() {
  Impl& g = *impl_;
  Header h = make_header(Kind::barrier, nullptr, 0);
  return g.enqueue([&g, h] {
    if (!g.broken.empty())
      throw DistributedError(g.prefix(Kind::barrier) + ": the group is unusable after an earlier failure: " + g.broken);
    if (g.check) g.exchange(Kind::barrier, h, "");
    if (g.size == 1) return;
    g.guarded(Kind::barrier, "the barrier", [&] {
      gloo::BarrierOptions opts(g.context);
      opts.setTag(0);
      opts.setTimeout(g.timeout);
      gloo::barrier(opts);
    });
  });
}

// --- the default group ----------------------------------------------------------

namespace {

std::mutex g_default_mu;
// Never destroyed at exit (only by destroy_process_group): a group left
// open at exit may have a collective blocked on a peer, and Gloo's threads
// must not be joined during static destruction.
ProcessGroup* g_default = nullptr;

/// Gloo's TCP transport writes to its sockets without MSG_NOSIGNAL in
/// places, so a write to a peer that has gone raises SIGPIPE, whose default
/// action kills this process (seen: a survivor killed while the dead rank's
/// connection closed). A group turns that into an error instead: SIGPIPE is
/// ignored when the program left it at its default (a handler the program
/// installed is kept), as Python does for every program.
void ignore_sigpipe() {
  struct sigaction current{};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL &&
      (current.sa_flags & SA_SIGINFO) == 0) {
    struct sigaction ignore{};
    ignore.sa_handler = SIG_IGN;
    ::sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, nullptr);
  }
}

std::unique_ptr<ProcessGroup> make_group(const Options& options) {
  ignore_sigpipe();
  auto impl = std::make_unique<ProcessGroup::Impl>();
  int world = options.world_size >= 0 ? options.world_size : env_int("STRATA_WORLD_SIZE", "world_size", true, 0);
  int rank = options.rank >= 0 ? options.rank : env_int("STRATA_RANK", "rank", true, 0);
  if (world < 1)
    throw DistributedError("init_process_group: world size " + std::to_string(world) + " (" +
                           (options.world_size >= 0 ? "Options::world_size" : "STRATA_WORLD_SIZE") + ") must be >= 1");
  if (rank >= world)
    throw DistributedError("init_process_group: rank " + std::to_string(rank) + " (" +
                           (options.rank >= 0 ? "Options::rank" : "STRATA_RANK") + ") is not below the world size " +
                           std::to_string(world));
  std::string addr = !options.master_addr.empty() ? options.master_addr : env_or("STRATA_MASTER_ADDR", "127.0.0.1");
  int port = options.master_port >= 0 ? options.master_port : env_int("STRATA_MASTER_PORT", "master_port", false, 29500);
  if (port < 1 || port > 65535)
    throw DistributedError("init_process_group: master port " + std::to_string(port) + " is not in 1..65535");
  auto timeout = options.timeout;
  if (const char* t = std::getenv("STRATA_DIST_TIMEOUT_MS"); t && *t) {
    int ms = env_int("STRATA_DIST_TIMEOUT_MS", "timeout", false, 0);
    if (ms <= 0) throw DistributedError(std::string("init_process_group: STRATA_DIST_TIMEOUT_MS=\"") + t + "\" must be > 0");
    timeout = std::chrono::milliseconds(ms);
  }
  bool check = options.check_consistency;
  if (const char* c = std::getenv("STRATA_DIST_CHECK"); c && *c) check = std::string(c) != "0";
  std::string token = !options.job_token.empty() ? options.job_token : env_or("STRATA_JOB_TOKEN", "");
  if (token.size() > detail::wire::kMaxTokenBytes)
    throw DistributedError("init_process_group: the job token (" +
                           std::string(options.job_token.empty() ? "STRATA_JOB_TOKEN" : "Options::job_token") +
                           ") has " + std::to_string(token.size()) + " bytes; at most " +
                           std::to_string(detail::wire::kMaxTokenBytes));

  impl->rank = rank;
  impl->size = world;
  impl->timeout = timeout;
  impl->check = check;
  std::string who = "init_process_group on " + impl->who();

  // The store: rank 0 serves it on the master address itself, to at most
  // one connection per rank and a few spares.
  if (!options.file_store.empty()) {
    impl->store = std::make_unique<detail::FileRendezvousStore>(options.file_store, timeout);
  } else {
    if (rank == 0) {
      try {
        impl->server = std::make_unique<detail::TcpStoreServer>(
            detail::TcpStoreServer::Options{addr, port, token, timeout, static_cast<size_t>(world) + 32});
      } catch (const DistributedError& e) {
        throw DistributedError(who + ": " + e.what());
      }
    }
    impl->store = std::make_unique<detail::TcpStoreClient>(addr, port, timeout, who, token);
  }
  impl->store_where = impl->store->describe();

  // Gloo's device: loopback when the master is, else this host's name
  // (STRATA_DIST_HOSTNAME or STRATA_DIST_IFACE override it).
  gloo::transport::tcp::attr attr;
  if (const char* iface = std::getenv("STRATA_DIST_IFACE"); iface && *iface) {
    attr.iface = iface;
  } else {
    std::string host = env_or("STRATA_DIST_HOSTNAME", "");
    if (host.empty()) {
      if (is_loopback(addr) || !options.file_store.empty()) {
        host = "127.0.0.1";
      } else {
        char name[256] = {};
        ::gethostname(name, sizeof name - 1);
        host = name;
      }
    }
    attr.hostname = host;
  }
  std::shared_ptr<gloo::transport::Device> device;
  try {
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw DistributedError(who + ": cannot create Gloo's TCP device on \"" +
                           (attr.iface.empty() ? attr.hostname : "interface " + attr.iface) + "\": " + e.what() +
                           " (set STRATA_DIST_HOSTNAME or STRATA_DIST_IFACE)");
  }

  // Arrival: every rank announces itself with its Gloo address, then waits
  // for the others, so that a missing rank is named.
  detail::PrefixedStore store("strata/default/", *impl->store);
  const std::string device_address = device->str();
  store.set("arrived/" + std::to_string(rank), std::vector<char>(device_address.begin(), device_address.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back("arrived/" + std::to_string(r));
  try {
    store.wait(keys, timeout);
  } catch (const DistributedError&) {
    std::vector<bool> present = store.check(keys);
    std::string missing;
    int count = 0;
    for (int r = 0; r < world; ++r)
      if (!present[r]) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        ++count;
      }
    throw DistributedError(who + ": timed out after " + std::to_string(timeout.count()) + " ms waiting for rank" +
                           (count > 1 ? "s " : " ") + missing + " to arrive at the " +
                           (options.file_store.empty() ? "TCP store at " : "") + impl->store_where +
                           " (not started, crashed, or given another address or port?)");
  }
  impl->peer_addresses.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    auto bytes = store.get(keys[r]);
    impl->peer_addresses[r] = std::string(bytes.begin(), bytes.end());
  }

  // Connect every pair of ranks; a barrier, so that no rank needs the
  // store once init returns.
  impl->context = std::make_shared<gloo::rendezvous::Context>(rank, world);
  impl->context->setTimeout(timeout);
  try {
    detail::PrefixedStore mesh("strata/default/mesh/", *impl->store);
    impl->context->connectFullMesh(mesh, device);
    // Every pair's listening address, so that a Gloo message naming a peer's
    // address can be turned into its rank: rank q publishes, line by line,
    // the address of its pair with each rank.
    std::string mine;
    for (int r = 0; r < world; ++r) mine += (r == rank ? std::string() : impl->context->getPair(r)->address().str()) + "\n";
    store.set("pairs/" + std::to_string(rank), std::vector<char>(mine.begin(), mine.end()));
    for (int q = 0; q < world; ++q) {
      if (q == rank) continue;
      auto bytes = store.get("pairs/" + std::to_string(q));
      std::string lines(bytes.begin(), bytes.end());
      size_t pos = 0;
      for (int r = 0; r < world && pos <= lines.size(); ++r) {
        size_t nl = lines.find('\n', pos);
        if (nl == std::string::npos) break;
        if (r == rank) impl->peer_addresses[q] = lines.substr(pos, nl - pos);
        pos = nl + 1;
      }
    }
    // Liveness: a key that lives as long as this rank's connection to the
    // TCP store, so that when a Gloo connection breaks the survivors can
    // ask which rank is gone (Impl::gone_peers). Set before the barrier,
    // so every rank's key exists once init returns.
    impl->liveness = store.set_owned("alive/" + std::to_string(rank), {});
    if (world > 1) {
      gloo::BarrierOptions opts(impl->context);
      opts.setTimeout(timeout);
      gloo::barrier(opts);
    }
  } catch (const DistributedError& e) {
    throw DistributedError(who + ": connecting the ranks: " + e.what());
  } catch (const gloo::Exception& e) {
    std::string peer = impl->peer_in(e.what());
    throw DistributedError(who + ": connecting the ranks failed" + (peer.empty() ? "" : " (with " + peer + ")") +
                           ": " + e.what());
  }
  impl->start_worker();
  return std::make_unique<ProcessGroup>(std::move(impl));
}

}  // namespace

void init_process_group(const Options& options) {
  std::lock_guard lock(g_default_mu);
  if (g_default)
    throw DistributedError("init_process_group: the default group is already initialised (rank " +
                           std::to_string(g_default->rank()) + " of " + std::to_string(g_default->size()) +
                           "); call destroy_process_group() first");
  g_default = make_group(options).release();
}

bool is_initialized() {
  std::lock_guard lock(g_default_mu);
  return g_default != nullptr;
}

ProcessGroup& group() {
  std::lock_guard lock(g_default_mu);
  if (!g_default) throw DistributedError("distributed: no process group: call init_process_group() first");
  return *g_default;
}

void destroy_process_group() {
  ProcessGroup* g;
  {
    std::lock_guard lock(g_default_mu);
    g = g_default;
    g_default = nullptr;
  }
  delete g;
}

int rank() { return group().rank(); }
int world_size() { return group().size(); }

}  // namespace strata::distributed
