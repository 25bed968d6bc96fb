// device_collectives.cpp — DeviceCommunicator (runtime.hpp): collectives over
// device memory through a plugin's strata.collectives extension.
//
// Unique ids: the host hands comm_unique_id a buffer of kMaxIdBytes bytes
// with id_bytes set to that capacity; the plugin writes its id and sets
// id_bytes to the id's length (1..capacity). comm_create gets the id back
// with its length. Collectives run on the device's default stream under the
// device's issue lock, like kernels (runtime/dispatch/kernel_call.cpp, call_kernel).
#include "runtime/device/device_record.hpp"
#include "runtime/tensor/tensor_impl.hpp"

#include <strata/error.hpp>
#include <strata/communicator.hpp>
#include <strata/tensor.hpp>

namespace strata {

namespace {

constexpr size_t kMaxIdBytes = 4096;

const strata_ext_collectives* find_collectives(const detail::DeviceRecord& d) {
  const auto* ext = d.plugin.extension_as<strata_ext_collectives>(
      STRATA_EXT_COLLECTIVES, STRATA_EXT_COLLECTIVES_VERSION, sizeof(strata_ext_collectives));
  if (ext == nullptr || ext->comm_unique_id == nullptr ||
      ext->comm_create == nullptr || ext->comm_destroy == nullptr || ext->all_reduce == nullptr ||
      ext->broadcast == nullptr || ext->all_gather == nullptr) {
    return nullptr;
  }
  return ext;
}

const strata_ext_collectives& require_collectives(const detail::DeviceRecord& d, const std::string& what) {
  const strata_ext_collectives* ext = find_collectives(d);
  if (ext == nullptr) {
    throw DeviceError(what + ": " + d.id + "'s plugin \"" + d.plugin.name +
                      "\" offers no strata.collectives extension (v1 with every function)");
  }
  return *ext;
}

strata_reduce_op reduce_of(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::sum: return STRATA_REDUCE_SUM;
    case CollectiveOp::product: return STRATA_REDUCE_PRODUCT;
    case CollectiveOp::min: return STRATA_REDUCE_MIN;
    case CollectiveOp::max: return STRATA_REDUCE_MAX;
    case CollectiveOp::average: return STRATA_REDUCE_AVERAGE;
  }
  throw ValueError("DeviceCommunicator: unknown CollectiveOp " + std::to_string(static_cast<int>(op)));
}

void describe(const Tensor& t, strata_tensor& d) {
  d = strata_tensor{};
  detail::describe_tensor(*t.impl(), d);
}

}  // namespace

struct DeviceCommunicator::Impl {
  detail::DeviceRecord* d = nullptr;
  const strata_ext_collectives* ext = nullptr;
  strata_comm comm = nullptr;
  int rank = 0;
  int world = 1;

  std::string what(const std::string& call) const {
    return "DeviceCommunicator::" + call + " on " + d->id + " (rank " + std::to_string(rank) + " of " +
           std::to_string(world) + ")";
  }

  /// The tensor a collective takes: defined, on this device, contiguous.
  void check_tensor(const std::string& call, const char* role, const Tensor& t) const {
    if (!t.defined() || t.impl()->storage == nullptr) throw DeviceError(what(call) + ": " + role + " is an undefined tensor");
    if (&t.impl()->record() != d) {
      throw DeviceError(what(call) + ": " + role + " " + type_string(t) + " is on " + t.device().str() +
                        ", not on the communicator's device " + d->id);
    }
    if (!t.impl()->is_contiguous()) {
      throw DeviceError(what(call) + ": " + role + " " + type_string(t) + " is not contiguous (shape " +
                        shape_string(t.sizes()) + ", strides " + shape_string(t.strides()) +
                        "): pass t.contiguous() and copy the result back");
    }
  }

  /// The arguments of a call on this communicator.
  strata_collective_args args(strata_error& err) const {
    strata_collective_args a = d->call_args<strata_collective_args>(err);
    a.comm = comm;
    a.rank = rank;
    a.world_size = world;
    return a;
  }

  /// Runs the collective `fn` from `send` into `recv`; one descriptor when
  /// they are the same tensor, which the ABI reads as in place (send ==
  /// recv). `set` fills the call's own fields (reduce, root).
  template <class Set>
  void collective(const std::string& call, const Tensor& send, const Tensor& recv,
                  strata_status (*fn)(strata_collective_args*), Set set) {
    strata_tensor send_desc, recv_desc;
    describe(send, send_desc);
    const bool in_place = &send == &recv;
    if (!in_place) describe(recv, recv_desc);
    strata_error err = detail::fresh_error();
    strata_collective_args a = args(err);
    a.send = &send_desc;
    a.recv = in_place ? &send_desc : &recv_desc;
    set(a);
    run(call, fn, a, err);
  }

  void run(const std::string& call, strata_status (*fn)(strata_collective_args*), strata_collective_args& a,
           strata_error& err) {
    d->ensure_alive();
    strata_status status;
    {
      detail::DeviceRecord::IssueLock lock(*d);
      status = fn(&a);
    }
    d->check(status, err,
             "DeviceCommunicator::" + call + " (rank " + std::to_string(rank) + " of " + std::to_string(world) + ")");
  }
};

bool DeviceCommunicator::available(Device device) {
  return find_collectives(detail::device_record(device)) != nullptr;
}

std::vector<uint8_t> DeviceCommunicator::unique_id(Device device) {
  detail::DeviceRecord& d = detail::device_record(device);
  const strata_ext_collectives& ext = require_collectives(d, "DeviceCommunicator::unique_id");
  d.ensure_alive();
  std::vector<uint8_t> id(kMaxIdBytes, 0);
  strata_error err = detail::fresh_error();
  strata_collective_args a = d.call_args<strata_collective_args>(err);
  a.unique_id = id.data();
  a.id_bytes = id.size();
  d.check(ext.comm_unique_id(&a), err, "DeviceCommunicator::unique_id (comm_unique_id)");
  if (a.id_bytes == 0 || a.id_bytes > kMaxIdBytes) {
    throw DeviceError(d.id + ": DeviceCommunicator::unique_id: the plugin \"" + d.plugin.name + "\" reported an id of " +
                      std::to_string(a.id_bytes) + " bytes (want 1.." + std::to_string(kMaxIdBytes) + ")");
  }
  id.resize(a.id_bytes);
  return id;
}

DeviceCommunicator::DeviceCommunicator(Device device, std::span<const uint8_t> unique_id, int rank, int world_size)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.d = &detail::device_record(device);
  m.rank = rank;
  m.world = world_size;
  m.ext = &require_collectives(*m.d, "DeviceCommunicator");
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw DeviceError(m.what("create") + ": rank " + std::to_string(rank) + " is not in 0.." +
                      std::to_string(world_size - 1));
  }
  if (unique_id.empty() || unique_id.size() > kMaxIdBytes) {
    throw DeviceError(m.what("create") + ": a unique id of " + std::to_string(unique_id.size()) + " bytes (want 1.." +
                      std::to_string(kMaxIdBytes) + ", from DeviceCommunicator::unique_id)");
  }
  std::vector<uint8_t> id(unique_id.begin(), unique_id.end());
  strata_error err = detail::fresh_error();
  strata_collective_args a = m.d->call_args<strata_collective_args>(err);
  a.unique_id = id.data();
  a.id_bytes = id.size();
  a.rank = rank;
  a.world_size = world_size;
  m.run("create (comm_create)", m.ext->comm_create, a, err);
  if (a.comm == nullptr) throw DeviceError(m.what("create") + ": the plugin's comm_create returned no communicator");
  m.comm = a.comm;
}

DeviceCommunicator::~DeviceCommunicator() {
  if (!impl_ || impl_->comm == nullptr) return;
  Impl& m = *impl_;
  strata_error err = detail::fresh_error();
  strata_collective_args a = m.args(err);
  detail::DeviceRecord::IssueLock lock(*m.d);
  m.ext->comm_destroy(&a);
}

void DeviceCommunicator::all_reduce(Tensor& t, CollectiveOp op) {
  Impl& m = *impl_;
  m.check_tensor("all_reduce", "tensor", t);
  const strata_reduce_op reduce = reduce_of(op);
  m.collective("all_reduce", t, t, m.ext->all_reduce, [reduce](strata_collective_args& a) { a.reduce = reduce; });
}

void DeviceCommunicator::broadcast(Tensor& t, int root) {
  Impl& m = *impl_;
  m.check_tensor("broadcast", "tensor", t);
  if (root < 0 || root >= m.world) {
    throw DeviceError(m.what("broadcast") + ": root " + std::to_string(root) + " is not in 0.." +
                      std::to_string(m.world - 1));
  }
  m.collective("broadcast", t, t, m.ext->broadcast, [root](strata_collective_args& a) { a.root = root; });
}

void DeviceCommunicator::all_gather(Tensor& out, const Tensor& in) {
  Impl& m = *impl_;
  m.check_tensor("all_gather", "input", in);
  m.check_tensor("all_gather", "output", out);
  Shape want{m.world};
  for (int64_t s : in.sizes()) want.push_back(s);
  if (out.sizes() != want || out.dtype() != in.dtype()) {
    throw DeviceError(m.what("all_gather") + ": output " + type_string(out) + " does not fit input " + type_string(in) +
                      " gathered from " + std::to_string(m.world) + " ranks (want " +
                      std::string(dtype_name(in.dtype())) + shape_string(want) + ")");
  }
  m.collective("all_gather", in, out, m.ext->all_gather, [](strata_collective_args&) {});
}

Device DeviceCommunicator::device() const { return impl_->d->device(); }
int DeviceCommunicator::rank() const { return impl_->rank; }
int DeviceCommunicator::world_size() const { return impl_->world; }

}  // namespace strata
