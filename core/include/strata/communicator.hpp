// communicator.hpp — collectives over device memory through a plugin's
// strata.collectives extension (NCCL in the CUDA plugin).
#pragma once

#include <strata/device.hpp>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace strata {

class Tensor;

/// How DeviceCommunicator::all_reduce combines the ranks' values
/// (strata_reduce_op). `average` is the sum divided by the world size.
enum class CollectiveOp { sum, product, min, max, average };

/// A communicator over one device per rank through the device's plugin's
/// strata.collectives extension (NCCL in the CUDA plugin; the "commhost"
/// test plugin over POSIX shared memory). Every rank of the group builds one
/// with the same unique id and calls the same collectives in the same order
/// with tensors of the same dtype and shape.
///
/// Tensors must be on the communicator's device and contiguous. Calls are
/// ordered on the device's default stream after the work queued before
/// them and hold the device's issue lock (as kernels do); the memory is
/// final once runtime().synchronize(device) returns (or in stream order for
/// later work on the device). Collectives write device memory directly:
/// autograd's version counters are not bumped (use them on gradients and
/// buffers you own). Errors: DeviceError naming the device, the call and
/// the plugin's message (DeviceLostError when the plugin reports the device
/// lost). The object is not thread-safe; one communicator per device and
/// group.
class DeviceCommunicator {
 public:
  /// Whether `device`'s plugin offers strata.collectives v1.
  static bool available(Device device);
  /// A new unique id (comm_unique_id). Rank 0 makes it and sends it to every
  /// rank (a store); DeviceError "<id>'s plugin \"x\" offers no
  /// strata.collectives extension" when the plugin has none.
  static std::vector<uint8_t> unique_id(Device device);
  /// Joins the communicator of `world_size` ranks named by `unique_id` as
  /// `rank` (comm_create; blocks until the plugin says so, typically until
  /// every rank joined).
  DeviceCommunicator(Device device, std::span<const uint8_t> unique_id, int rank, int world_size);
  /// comm_destroy.
  ~DeviceCommunicator();
  DeviceCommunicator(const DeviceCommunicator&) = delete;
  DeviceCommunicator& operator=(const DeviceCommunicator&) = delete;

  /// In place: every rank's `t` becomes the reduction over all ranks.
  void all_reduce(Tensor& t, CollectiveOp op);
  /// In place: every rank's `t` becomes rank `root`'s.
  void broadcast(Tensor& t, int root);
  /// `out` (shape [world_size, *in.shape], in's dtype) gets every rank's
  /// `in`, row r from rank r.
  void all_gather(Tensor& out, const Tensor& in);

  Device device() const;
  int rank() const;
  int world_size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
