// entry_copies.cpp — the copy entry point: host to device, device to host, device to device.
#include <atomic>
#include <cstring>
#include <mutex>
#include <strata/plugin/strata_plugin.hpp>

#include "entry_points.hpp"

namespace strata::vulkan {

using plugin::fail;

namespace {

/// `done` of a copy that was complete, as far as the host is concerned, when
/// it returned: complete at `seq`. A TIMING event still gets its timestamp,
/// written at the queue's current end (record_done).
strata_status complete_done(Stream& s, strata_event done, uint64_t seq, strata_error* error) {
  if (done == nullptr) return STRATA_OK;
  auto* e = reinterpret_cast<Event*>(done);
  if (e->timing) return record_done(s, done, error);
  e->seq.store(seq, std::memory_order_release);
  return STRATA_OK;
}

strata_status copy_to_device(Device& d, Stream& s, const strata_copy_args& a) {
  Buffer* b = checked(a.dst, a.dst_offset, a.bytes, d, "copy to device", a.error);
  if (b == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (a.bytes > 0 && a.src_host == nullptr) {
    return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: copy to device: no host source", d.id().c_str());
  }
  std::lock_guard lock(s.mutex());
  if (a.bytes == 0) return record_done(s, a.done, a.error);
  if (d.direct && s.idle() && d.poll() >= d.last_submitted.load(std::memory_order_acquire)) {
    // Nothing anywhere on the device can still touch the range: complete at once.
    std::memcpy(b->host() + a.dst_offset, a.src_host, a.bytes);
    return complete_done(s, a.done, 0, a.error);
  }
  // Queued behind earlier work through a staging range: the host bytes are
  // consumed on return, the write is ordered like any work on the stream.
  if (strata_status st = s.upload(a.src_host, a.bytes, *b, a.dst_offset, a.error); st != STRATA_OK) return st;
  return record_done(s, a.done, a.error);
}

strata_status copy_to_host(Device& d, Stream& s, const strata_copy_args& a) {
  Buffer* b = checked(a.src, a.src_offset, a.bytes, d, "copy to host", a.error);
  if (b == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (a.bytes > 0 && a.dst_host == nullptr) {
    return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: copy to host: no host destination", d.id().c_str());
  }
  {
    // Always synchronous (STRATA_COPY_ASYNC too): the bytes are on the host
    // when this returns, and it is a synchronisation point.
    std::lock_guard lock(s.mutex());
    strata_status st = STRATA_OK;
    if (d.direct || a.bytes == 0) {
      st = s.synchronize(a.error);
      if (st == STRATA_OK && a.bytes > 0) std::memcpy(a.dst_host, b->host() + a.src_offset, a.bytes);
    } else {
      Buffer* staging = nullptr;
      if (st = d.staging->allocate(a.bytes, &staging, a.error); st != STRATA_OK) return st;
      st = s.copy(b->vk_buffer(), b->offset + a.src_offset, staging->vk_buffer(), staging->offset, a.bytes, a.error);
      if (st == STRATA_OK) st = s.synchronize(a.error);
      if (st == STRATA_OK) {
        std::memcpy(a.dst_host, staging->host(), a.bytes);
        d.staging->release(staging);
      } else {
        s.retire_with_batch(staging);
      }
    }
    if (st == STRATA_OK) st = complete_done(s, a.done, s.last_seq(), a.error);
    if (st != STRATA_OK) return st;
  }
  // A synchronisation point: the SDK asks deferred() after a synchronous
  // copy; an ASYNC one is synchronous here too, so it asks now.
  return (a.flags & STRATA_COPY_ASYNC) != 0 ? d.report_deferred(a.error) : STRATA_OK;
}

strata_status copy_on_device(Device& d, Stream& s, const strata_copy_args& a) {
  Buffer* to = checked(a.dst, a.dst_offset, a.bytes, d, "device copy (destination)", a.error);
  if (to == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  Buffer* from = checked(a.src, a.src_offset, a.bytes, d, "device copy (source)", a.error);
  if (from == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  std::lock_guard lock(s.mutex());
  if (a.bytes == 0) return record_done(s, a.done, a.error);
  const VkDeviceSize dst = to->offset + a.dst_offset;
  const VkDeviceSize src = from->offset + a.src_offset;
  strata_status st = STRATA_OK;
  if (to->block == from->block && dst < src + a.bytes && src < dst + a.bytes) {
    // Overlapping ranges of one VkBuffer (vkCmdCopyBuffer forbids that): through a temporary.
    Buffer* tmp = nullptr;
    if (st = d.staging->allocate(a.bytes, &tmp, a.error); st != STRATA_OK) return st;
    st = s.copy(from->vk_buffer(), src, tmp->vk_buffer(), tmp->offset, a.bytes, a.error);
    if (st == STRATA_OK) st = s.copy(tmp->vk_buffer(), tmp->offset, to->vk_buffer(), dst, a.bytes, a.error);
    s.retire_with_batch(tmp);
  } else {
    st = s.copy(from->vk_buffer(), src, to->vk_buffer(), dst, a.bytes, a.error);
  }
  if (st != STRATA_OK) return st;
  return record_done(s, a.done, a.error);
}

}  // namespace

strata_status State::copy(Device& d, strata_copy_args& a) {
  if (strata_status s = d.check_lost(a.error); s != STRATA_OK) return s;
  Stream& s = stream_of(d, a.stream);
  const auto kind = raw(a.kind);
  switch (kind) {
    case STRATA_COPY_HOST_TO_DEVICE:
      return copy_to_device(d, s, a);
    case STRATA_COPY_DEVICE_TO_HOST:
      return copy_to_host(d, s, a);
    case STRATA_COPY_DEVICE_TO_DEVICE:
      return copy_on_device(d, s, a);
    default:
      return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: copy: unknown copy kind %d", d.id().c_str(),
                  static_cast<int>(kind));
  }
}

}  // namespace strata::vulkan
