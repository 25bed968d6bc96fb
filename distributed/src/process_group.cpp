// process_group.cpp — the collectives of a process group and the default
// group. Each collective checks its tensors here, then runs on the group's
// worker (group_impl.cpp): the consistency check, then Gloo or a device
// communicator. Rendezvous is rendezvous.cpp's.
#include "group_impl.hpp"
#include "reduce.hpp"

#include <strata/distributed.hpp>
#include <strata/runtime.hpp>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/scatter.h>

#include <cstring>
#include <future>
#include <mutex>

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

using detail::Header;
using detail::Kind;
using detail::kDevicePath;
using detail::kBadTensor;
using detail::layout_tag;
using detail::make_header;

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;
int ProcessGroup::rank() const { return impl_->rank; }
int ProcessGroup::size() const { return impl_->size; }
const std::vector<int>& ProcessGroup::world_ranks() const { return impl_->world_ranks; }
bool ProcessGroup::is_member() const { return impl_->rank >= 0; }

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

/// "" when `stacked` is `row`'s dtype with shape [size, *row.shape]; else
/// "<stacked_role> f32[..] does not fit <row_role> f32[..] <how> N ranks
/// (want ...)".
std::string fits_stacked(const Tensor& stacked, const Tensor& row, int size, const char* stacked_role,
                         const char* row_role, const char* how) {
  Shape want{size};
  for (int64_t d : row.shape()) want.push_back(d);
  if (stacked.sizes() == want && stacked.dtype() == row.dtype()) return "";
  return std::string(stacked_role) + " " + type_string(stacked) + " does not fit " + row_role + " " +
         type_string(row) + " " + how + " " + std::to_string(size) + " ranks (want " +
         std::string(dtype_name(row.dtype())) + shape_string(want) + ")";
}

/// "" when `root` is a rank of a group of `size`.
std::string root_error(int root, int size) {
  if (root >= 0 && root < size) return "";
  return "root " + std::to_string(root) + " is not a rank of this group (0.." + std::to_string(size - 1) + ")";
}

/// Reductions of complex tensors are not implemented (docs/complex.md):
/// reduce real() and imag() instead. Empty when `t` is not complex.
std::string refuse_complex(const Tensor& t) {
  if (!is_complex(t.dtype())) return {};
  return "complex tensors (" + type_string(t) + ") are not reduced yet: reduce real() and imag() separately";
}

}  // namespace

Work ProcessGroup::all_reduce(Tensor& t, ReduceOp op) {
  Impl& g = *impl_;
  g.require_member(Kind::all_reduce);
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
    g.begin(Kind::all_reduce, h, error);
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
      opts.setTag(layout_tag(keep));
      opts.setTimeout(g.timeout);
      gloo::allreduce(opts);
    });
    if (op == ReduceOp::mean) detail::divide_in_place(keep.dtype(), data, n, g.size);
  });
}

Work ProcessGroup::broadcast(Tensor& t, int root) {
  Impl& g = *impl_;
  g.require_member(Kind::broadcast);
  void* data = nullptr;
  bool device = false;
  std::string error = host_pointer(Kind::broadcast, "tensor", t, data, &device);
  if (error.empty()) error = root_error(root, g.size);
  Header h = make_header(Kind::broadcast, &t, root);
  if (device) h.w[2] |= kDevicePath;
  if (!error.empty()) h.w[3] = kBadTensor;
  Tensor keep = t;
  return g.enqueue([&g, h, error, keep, data, root, device]() mutable {
    g.begin(Kind::broadcast, h, error);
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
      opts.setTag(layout_tag(keep));
      opts.setTimeout(g.timeout);
      gloo::broadcast(opts);
    });
  });
}

Work ProcessGroup::all_gather(Tensor& out, const Tensor& in) {
  Impl& g = *impl_;
  g.require_member(Kind::all_gather);
  void* in_data = nullptr;
  void* out_data = nullptr;
  bool in_device = false, out_device = false;
  std::string error = host_pointer(Kind::all_gather, "input", in, in_data, &in_device);
  if (error.empty()) error = host_pointer(Kind::all_gather, "output", out, out_data, &out_device);
  if (error.empty() && (in_device || out_device) && in.device() != out.device())
    error = "input on " + in.device().str() + " and output on " + out.device().str() +
            ": a device collective needs both on one device";
  bool device = in_device || out_device;
  if (error.empty()) error = fits_stacked(out, in, g.size, "output", "input", "gathered from");
  Header h = make_header(Kind::all_gather, &in, 0);
  if (device) h.w[2] |= kDevicePath;
  if (!error.empty()) h.w[3] = kBadTensor;
  Tensor keep_in = in, keep_out = out;
  return g.enqueue([&g, h, error, keep_in, keep_out, in_data, out_data, device]() mutable {
    g.begin(Kind::all_gather, h, error);
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
      opts.setTag(layout_tag(keep_in));
      opts.setTimeout(g.timeout);
      gloo::allgather(opts);
    });
  });
}

Work ProcessGroup::reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) {
  Impl& g = *impl_;
  g.require_member(Kind::reduce_scatter);
  void* in_data = nullptr;
  void* out_data = nullptr;
  std::string error = host_pointer(Kind::reduce_scatter, "input", in, in_data);
  if (error.empty()) error = host_pointer(Kind::reduce_scatter, "output", out, out_data);
  if (error.empty()) error = fits_stacked(in, out, g.size, "input", "output", "scattered over");
  if (error.empty()) error = refuse_complex(in);
  if (error.empty() && op == ReduceOp::mean && !is_floating(in.dtype()))
    error = "mean needs a floating dtype (got " + std::string(dtype_name(in.dtype())) + "): use sum and divide";
  Header h = make_header(Kind::reduce_scatter, &in, static_cast<int64_t>(op));
  if (!error.empty()) h.w[3] = kBadTensor;
  Tensor keep_in = in, keep_out = out;
  return g.enqueue([&g, h, error, keep_in, keep_out, in_data, out_data, op] {
    g.begin(Kind::reduce_scatter, h, error);
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
        opts.setTag(layout_tag(keep_in));
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
  g.require_member(Kind::barrier);
  Header h = make_header(Kind::barrier, nullptr, 0);
  return g.enqueue([&g, h] {
    g.begin(Kind::barrier, h, "");
    if (g.size == 1) return;
    g.guarded(Kind::barrier, "the barrier", [&] {
      gloo::BarrierOptions opts(g.context);
      opts.setTag(0);
      opts.setTimeout(g.timeout);
      gloo::barrier(opts);
    });
  });
}


Work ProcessGroup::gather(Tensor& out, const Tensor& in, int root) {
  Impl& g = *impl_;
  g.require_member(Kind::gather);
  void* in_data = nullptr;
  void* out_data = nullptr;
  std::string error = host_pointer(Kind::gather, "input", in, in_data);
  if (error.empty()) error = root_error(root, g.size);
  if (error.empty() && g.rank == root) error = host_pointer(Kind::gather, "output", out, out_data);
  if (error.empty() && g.rank == root) error = fits_stacked(out, in, g.size, "output", "input", "gathered from");
  Header h = make_header(Kind::gather, &in, root);
  if (!error.empty()) h.w[3] = kBadTensor;
  Tensor keep_in = in, keep_out = out;
  return g.enqueue([&g, h, error, keep_in, keep_out, in_data, out_data, root] {
    g.begin(Kind::gather, h, error);
    const size_t bytes = nbytes(keep_in);
    if (bytes == 0) return;
    if (g.size == 1) {
      std::memcpy(out_data, in_data, bytes);
      return;
    }
    g.guarded(Kind::gather, "the gather to rank " + std::to_string(root), [&] {
      gloo::GatherOptions opts(g.context);
      opts.setInput(static_cast<uint8_t*>(in_data), bytes);
      if (g.rank == root) opts.setOutput(static_cast<uint8_t*>(out_data), bytes * static_cast<size_t>(g.size));
      opts.setRoot(root);
      opts.setTag(layout_tag(keep_in));
      opts.setTimeout(g.timeout);
      gloo::gather(opts);
    });
  });
}

Work ProcessGroup::scatter(Tensor& out, const Tensor& in, int root) {
  Impl& g = *impl_;
  g.require_member(Kind::scatter);
  void* in_data = nullptr;
  void* out_data = nullptr;
  std::string error = host_pointer(Kind::scatter, "output", out, out_data);
  if (error.empty()) error = root_error(root, g.size);
  if (error.empty() && g.rank == root) error = host_pointer(Kind::scatter, "input", in, in_data);
  if (error.empty() && g.rank == root) error = fits_stacked(in, out, g.size, "input", "output", "scattered over");
  Header h = make_header(Kind::scatter, &out, root);
  if (!error.empty()) h.w[3] = kBadTensor;
  Tensor keep_in = in, keep_out = out;
  return g.enqueue([&g, h, error, keep_in, keep_out, in_data, out_data, root] {
    g.begin(Kind::scatter, h, error);
    const size_t bytes = nbytes(keep_out);
    if (bytes == 0) return;
    if (g.size == 1) {
      std::memcpy(out_data, in_data, bytes);
      return;
    }
    g.guarded(Kind::scatter, "the scatter from rank " + std::to_string(root), [&] {
      gloo::ScatterOptions opts(g.context);
      if (g.rank == root) {
        std::vector<uint8_t*> rows;
        for (int r = 0; r < g.size; ++r) rows.push_back(static_cast<uint8_t*>(in_data) + bytes * static_cast<size_t>(r));
        opts.setInputs(rows, bytes);
      }
      opts.setOutput(static_cast<uint8_t*>(out_data), bytes);
      opts.setRoot(root);
      opts.setTag(layout_tag(keep_out));
      opts.setTimeout(g.timeout);
      gloo::scatter(opts);
    });
  });
}

Work ProcessGroup::all_to_all(Tensor& out, const Tensor& in) {
  Impl& g = *impl_;
  g.require_member(Kind::all_to_all);
  void* in_data = nullptr;
  void* out_data = nullptr;
  std::string error = host_pointer(Kind::all_to_all, "input", in, in_data);
  if (error.empty()) error = host_pointer(Kind::all_to_all, "output", out, out_data);
  if (error.empty() && (in.dim() == 0 || in.size(0) != g.size))
    error = "input " + type_string(in) + " needs a first dim of " + std::to_string(g.size) + " (one row per rank)";
  if (error.empty() && (out.sizes() != in.sizes() || out.dtype() != in.dtype()))
    error = "output " + type_string(out) + " is not shaped like input " + type_string(in);
  Header h = make_header(Kind::all_to_all, &in, 0);
  if (!error.empty()) h.w[3] = kBadTensor;
  Tensor keep_in = in, keep_out = out;
  return g.enqueue([&g, h, error, keep_in, keep_out, in_data, out_data] {
    g.begin(Kind::all_to_all, h, error);
    const size_t bytes = nbytes(keep_in);
    if (bytes == 0) return;
    if (g.size == 1) {
      std::memcpy(out_data, in_data, bytes);
      return;
    }
    g.guarded(Kind::all_to_all, "the exchange", [&] {
      gloo::AlltoallOptions opts(g.context);
      opts.setInput(static_cast<uint8_t*>(in_data), bytes);
      opts.setOutput(static_cast<uint8_t*>(out_data), bytes);
      opts.setTag(layout_tag(keep_in));
      opts.setTimeout(g.timeout);
      gloo::alltoall(opts);
    });
  });
}

namespace {

/// The most tags a send/recv may use: tag, size and element size share one
/// Gloo slot with a prefix no collective uses.
constexpr int kMaxTag = (1 << 27) - 1;

/// The Gloo slot of a point-to-point message: prefix 0x7f (collectives use
/// 0x01..0x08), the tag, and the layout tag (so that a size that does not
/// match waits on another slot until the timeout instead of overrunning
/// the receiver's buffer).
uint64_t p2p_slot(int tag, const Tensor& t) {
  return (uint64_t{0x7f} << 56) | (static_cast<uint64_t>(tag) << 29) | (layout_tag(t) & ((1u << 29) - 1));
}

/// Point to point: `t` to (send) or from (recv) rank `peer`.
Work point_to_point(ProcessGroup::Impl& g, Kind kind, const Tensor& t, int peer, int tag) {
  g.require_member(kind);
  void* data = nullptr;
  std::string error = host_pointer(kind, "tensor", t, data);
  const char* role = kind == Kind::send ? "destination" : "source";
  if (error.empty() && (peer < 0 || peer >= g.size || peer == g.rank))
    error = std::string(role) + " rank " + std::to_string(peer) + " is not another rank of this group (0.." +
            std::to_string(g.size - 1) + ", this rank " + std::to_string(g.rank) + ")";
  if (error.empty() && (tag < 0 || tag > kMaxTag))
    error = "tag " + std::to_string(tag) + " is outside 0.." + std::to_string(kMaxTag);
  Tensor keep = t;
  return g.enqueue([&g, kind, error, keep, data, peer, tag] {
    if (!g.broken.empty())
      throw DistributedError(g.prefix(kind) + ": the group is unusable after an earlier failure: " + g.broken);
    if (!error.empty()) throw DistributedError(g.prefix(kind) + ": " + error);
    const size_t bytes = nbytes(keep);
    if (bytes == 0) return;
    const std::string what = (kind == Kind::send ? "the send to rank " : "the receive from rank ") +
                             std::to_string(peer) + " (tag " + std::to_string(tag) + ", " + type_string(keep) + ")";
    g.guarded(kind, what, [&] {
      auto buffer = g.context->createUnboundBuffer(data, bytes);
      const uint64_t slot = p2p_slot(tag, keep);
      bool done = false;
      if (kind == Kind::send) {
        buffer->send(peer, slot);
        done = buffer->waitSend(nullptr, g.timeout);
      } else {
        buffer->recv(peer, slot);
        done = buffer->waitRecv(nullptr, g.timeout);
      }
      if (!done) throw DistributedError(what + " was aborted");
    });
  });
}

}  // namespace

Work ProcessGroup::send(const Tensor& t, int dst, int tag) { return point_to_point(*impl_, Kind::send, t, dst, tag); }

Work ProcessGroup::recv(Tensor& t, int src, int tag) { return point_to_point(*impl_, Kind::recv, t, src, tag); }

// --- the default group ----------------------------------------------------------

namespace {

std::mutex g_default_mu;
// Never destroyed at exit (only by destroy_process_group): a group left
// open at exit may have a collective blocked on a peer, and Gloo's threads
// must not be joined during static destruction.
ProcessGroup* g_default = nullptr;

}  // namespace

void init_process_group(const Options& options) {
  std::lock_guard lock(g_default_mu);
  if (g_default)
    throw DistributedError("init_process_group: the default group is already initialised (rank " +
                           std::to_string(g_default->rank()) + " of " + std::to_string(g_default->size()) +
                           "); call destroy_process_group() first");
  g_default = detail::make_group(options).release();
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
  if (!g) return;
  const std::string who = g->impl().who();
  const std::string error = g->impl().close();
  delete g;
  if (!error.empty())
    throw DistributedError("destroy_process_group on " + who + ": Gloo failed closing the connections: " + error);
}

std::unique_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) {
  return detail::make_subgroup(group().impl(), ranks);
}

int rank() { return group().rank(); }
int world_size() { return group().size(); }

}  // namespace strata::distributed
