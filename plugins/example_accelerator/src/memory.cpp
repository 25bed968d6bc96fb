// memory.cpp — alloc, free, copy and memory_info/trim/stats.
//
// Demonstrates (strata_plugin.h section 4):
//  - device memory behind opaque handles: `alloc` carves a block from the
//    device's arena and returns a tagged id; every call that takes a buffer
//    checks the handle (live, this device, right memory kind) and the byte
//    range, and names call, handle and range when they are wrong;
//  - pinned host memory (STRATA_MEMORY_PINNED_HOST): a host block whose
//    address goes back in `host_pointer`; the host stages large copies
//    through it (the device sets STRATA_DEVICE_STAGE_PINNED);
//  - stream-ordered frees: the block returns to the arena when the stream's
//    worker reaches the free, so work queued before it may still use it;
//  - one `copy` for all directions, run on the stream's worker: a synchronous
//    copy to the host waits for it and is a synchronisation point (deferred
//    failures are reported there), a synchronous copy from the host takes a
//    snapshot of the source so the host may reuse it at once, STRATA_COPY_ASYNC
//    copies complete later and record `done`, device-to-device copies may
//    overlap (memmove);
//  - memory_info/stats from the arena, memory_trim giving free pages back.
#include "runtime.hpp"

#include <cinttypes>
#include <cstdlib>
#include <cstring>

namespace example {

using strata::plugin::fail;

std::shared_ptr<Buffer> find_buffer(PluginState& state, const Device& d, strata_buffer handle, strata_error* error,
                                    const char* what) {
  if (handle == nullptr) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: buffer handle is NULL", what, d.name.c_str());
    return nullptr;
  }
  std::shared_ptr<Buffer> b = state.buffers.find(handle_id(handle));
  if (b == nullptr) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: %s is not a live buffer of this plugin (freed, or never allocated here)",
         what, d.name.c_str(), describe_handle(handle).c_str());
    return nullptr;
  }
  if (b->device != d.index) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: %s belongs to %s", what, d.name.c_str(),
         describe_handle(handle).c_str(), device_name(b->device).c_str());
    return nullptr;
  }
  return b;
}

namespace {

/// A device-memory buffer with [offset, offset + bytes) inside it, or nullptr
/// after a message naming the call, the handle and the range.
std::shared_ptr<Buffer> device_range(PluginState& state, const Device& d, strata_buffer handle, size_t offset,
                                     size_t bytes, strata_error* error, const char* what) {
  std::shared_ptr<Buffer> b = find_buffer(state, d, handle, error, what);
  if (b == nullptr) return nullptr;
  if (b->kind != STRATA_MEMORY_DEVICE) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: %s is pinned host memory, not device memory", what,
         d.name.c_str(), describe_handle(handle).c_str());
    return nullptr;
  }
  if (!range_ok(offset, bytes, b->bytes)) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: bytes [%zu, %zu) are outside %s of %zu bytes", what,
         d.name.c_str(), offset, offset + bytes, describe_handle(handle).c_str(), b->bytes);
    return nullptr;
  }
  return b;
}

size_t round_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

}  // namespace

strata_status PluginState::alloc(Device& d, strata_alloc_args& a) {
  if (this->stream(d, a.stream, a.error, "alloc") == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (a.bytes > d.arena.size() && a.kind == STRATA_MEMORY_DEVICE) {
    return fail(a.error, STRATA_ERROR_OUT_OF_MEMORY, "alloc on %s: %zu bytes exceed the %zu-byte arena",
                d.name.c_str(), a.bytes, d.arena.size());
  }
  auto b = std::make_shared<Buffer>();
  b->device = d.index;
  b->kind = a.kind;
  b->bytes = a.bytes;
  b->reserved = round_up(a.bytes == 0 ? 1 : a.bytes, kAlignment);
  if (a.kind == STRATA_MEMORY_PINNED_HOST) {
    // Plain host memory stands in for page-locked memory here.
    b->host = static_cast<std::byte*>(std::aligned_alloc(kAlignment, b->reserved));
    if (b->host == nullptr) {
      return fail(a.error, STRATA_ERROR_OUT_OF_MEMORY, "alloc on %s: no %zu bytes of pinned host memory",
                  d.name.c_str(), a.bytes);
    }
  } else if (a.kind == STRATA_MEMORY_DEVICE) {
    std::optional<size_t> offset = d.arena.allocate(b->reserved);
    if (!offset) {
      // Frees are stream-ordered: blocks freed on busy streams return to the
      // arena only when their workers reach the free. Wait for them once.
      for (const auto& s : streams_of(d)) s->drain();
      offset = d.arena.allocate(b->reserved);
    }
    if (!offset) {
      return fail(a.error, STRATA_ERROR_OUT_OF_MEMORY,
                  "alloc on %s: no block of %zu bytes in the arena (%zu of %zu bytes free, largest block %zu)",
                  d.name.c_str(), a.bytes, d.arena.free_bytes(), d.arena.size(), d.arena.largest_free());
    }
    b->offset = *offset;
    std::lock_guard lock(d.stats_mutex);
    d.in_use += b->reserved;
    d.peak = std::max(d.peak, d.in_use);
    ++d.allocations;
  } else {
    return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "alloc on %s: unknown memory kind %d", d.name.c_str(),
                static_cast<int>(a.kind));
  }
  a.host_pointer = b->host;
  a.buffer = to_handle<strata_buffer>(buffers.insert(std::move(b)));
  return STRATA_OK;
}

strata_status PluginState::free(Device& d, strata_alloc_args& a) {
  Stream* stream = this->stream(d, a.stream, a.error, "free");
  if (stream == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (find_buffer(*this, d, a.buffer, a.error, "free") == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  // The handle dies now (later use is an error); the memory returns once the
  // work queued on `stream` before this free has run. (free returns nothing:
  // a failure goes to the host's log.)
  std::shared_ptr<Buffer> b = buffers.erase(handle_id(a.buffer));
  if (b->kind == STRATA_MEMORY_DEVICE) {
    std::lock_guard lock(d.stats_mutex);
    d.in_use -= b->reserved;
  }
  Device* device = &d;
  stream->enqueue("free", [device, b] {
    if (b->kind == STRATA_MEMORY_DEVICE) {
      device->arena.release(b->offset, b->reserved);
    } else {
      std::free(b->host);
    }
  });
  return STRATA_OK;
}

strata_status PluginState::copy(Device& d, strata_copy_args& a) {
  const bool async = (a.flags & STRATA_COPY_ASYNC) != 0;
  const char* what = a.kind == STRATA_COPY_HOST_TO_DEVICE   ? (async ? "copy (host to device, async)" : "copy (host to device)")
                     : a.kind == STRATA_COPY_DEVICE_TO_HOST ? (async ? "copy (device to host, async)" : "copy (device to host)")
                                                             : "copy (device to device)";
  Stream* stream = this->stream(d, a.stream, a.error, what);
  if (stream == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  std::shared_ptr<Event> done;
  if (a.done != nullptr) {
    done = events.find(handle_id(a.done));
    if (done == nullptr || done->device != d.index) {
      return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: `done` %s is not a live event of this device",
                  what, d.name.c_str(), describe_handle(a.done).c_str());
    }
  }
  const size_t n = a.bytes;
  std::byte* const arena = d.arena.base();
  switch (a.kind) {
    case STRATA_COPY_HOST_TO_DEVICE: {
      auto dst = device_range(*this, d, a.dst, a.dst_offset, n, a.error, what);
      if (dst == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
      if (a.src_host == nullptr && n > 0) {
        return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: src_host is NULL", what, d.name.c_str());
      }
      std::byte* to = arena + dst->offset + a.dst_offset;
      if (async) {  // the host keeps src_host alive until `done`
        const void* from = a.src_host;
        stream->enqueue(what, [to, from, n] { std::memcpy(to, from, n); });
      } else {  // consumed on return: take a snapshot for the worker
        auto* begin = static_cast<const std::byte*>(a.src_host);
        auto snapshot = std::make_shared<std::vector<std::byte>>(begin, begin + n);
        stream->enqueue(what, [to, snapshot] { std::memcpy(to, snapshot->data(), snapshot->size()); });
      }
      break;
    }
    case STRATA_COPY_DEVICE_TO_HOST: {
      auto src = device_range(*this, d, a.src, a.src_offset, n, a.error, what);
      if (src == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
      if (a.dst_host == nullptr && n > 0) {
        return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: dst_host is NULL", what, d.name.c_str());
      }
      void* to = a.dst_host;
      const std::byte* from = arena + src->offset + a.src_offset;
      const uint64_t ticket = stream->enqueue(what, [to, from, n] { std::memcpy(to, from, n); });
      if (!async) {  // filled on return: a synchronisation point
        if (done) record_event(*stream, done);
        stream->wait(ticket);
        return STRATA_OK;  // then deferred(), the device's failures
      }
      break;
    }
    case STRATA_COPY_DEVICE_TO_DEVICE: {
      auto dst = device_range(*this, d, a.dst, a.dst_offset, n, a.error, what);
      if (dst == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
      auto src = device_range(*this, d, a.src, a.src_offset, n, a.error, what);
      if (src == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
      std::byte* to = arena + dst->offset + a.dst_offset;
      const std::byte* from = arena + src->offset + a.src_offset;
      stream->enqueue(what, [to, from, n] { std::memmove(to, from, n); });  // ranges may overlap
      break;
    }
    default:
      return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "copy on %s: unknown copy kind %d", d.name.c_str(),
                  static_cast<int>(a.kind));
  }
  if (done) record_event(*stream, done);
  return STRATA_OK;
}


strata_status PluginState::memory_info(Device& d, strata_memory_args& a) {
  a.free_bytes = d.arena.free_bytes();
  a.total_bytes = d.arena.size();
  return STRATA_OK;
}

strata_status PluginState::memory_trim(Device& d, strata_memory_args&) {
  // Frees still queued on streams are not waited for: trim never blocks on work.
  const size_t given = d.arena.trim();
  char message[160];
  std::snprintf(message, sizeof(message), "memory_trim on %s: %zu bytes of free arena pages given back",
                d.name.c_str(), given);
  strata::plugin::log(host, STRATA_LOG_DEBUG, kPluginName, message);
  return STRATA_OK;
}

strata_status PluginState::memory_stats(Device& d, strata_memory_args& a) {
  std::lock_guard lock(d.stats_mutex);
  a.bytes_in_use = d.in_use;
  a.bytes_reserved = d.arena.size();  // the arena is held from the "driver" (the OS) whole
  a.peak_bytes_in_use = d.peak;
  a.allocations = d.allocations;
  return STRATA_OK;
}

}  // namespace example
