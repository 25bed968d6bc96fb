// memory.cpp — alloc, free, copy and the memory queries (ABI section 4).
//
// Caching: the plugin does not set STRATA_DEVICE_CACHES_MEMORY. The host's
// caching allocator (size classes, blocks tagged with their stream, the
// configured `memory_limit`, release-the-cache-and-retry-once on out of
// memory, `strata devices --stats`) sits on top, as for every backend, so
// memory is cached once. Below it, device memory comes from the
// stream-ordered cudaMallocAsync/cudaFreeAsync on the device's default memory
// pool, whose release threshold stays 0: what the host frees goes back to
// the driver at the next synchronisation, never cached a second time. On a
// device without memory pools, cudaMalloc/cudaFree (free then synchronises
// the device, which the host's cache makes rare).
#include <cstring>
#include <mutex>

#include "entry_points.hpp"

namespace strata::gpu {

using plugin::fail;

void count_alloc(Device& d, void* p, size_t bytes) {
  std::lock_guard lock(d.memory_mutex);
  d.live[p] = bytes;
  d.bytes_in_use += bytes;
  d.peak_bytes_in_use = std::max(d.peak_bytes_in_use, d.bytes_in_use);
  ++d.allocations;
}

void count_free(Device& d, void* p) {
  std::lock_guard lock(d.memory_mutex);
  auto it = d.live.find(p);
  if (it == d.live.end()) return;
  d.bytes_in_use -= it->second;
  d.live.erase(it);
}

namespace {

template <class E>
auto raw(const E& field) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &field, sizeof(v));
  return v;
}

strata_status out_of_memory(Device& d, cudaError_t e, const char* what, size_t bytes, strata_error* error) {
  size_t free_bytes = 0, total_bytes = 0;
  (void)cudaGetLastError();  // clear the non-sticky allocation error
  (void)cudaMemGetInfo(&free_bytes, &total_bytes);
  uint64_t held = 0;
  {
    std::lock_guard lock(d.memory_mutex);
    held = d.bytes_in_use;
  }
  return fail(error, STRATA_ERROR_OUT_OF_MEMORY,
              "%s of %zu bytes on %s failed: %s (device: %zu of %zu bytes free; this plugin holds %llu bytes)", what,
              bytes, d.id.c_str(), describe(e).c_str(), free_bytes, total_bytes,
              static_cast<unsigned long long>(held));
}

}  // namespace

strata_status State::alloc(Device& d, strata_alloc_args& a) {
  if (cudaError_t e = make_current(d); e != cudaSuccess) return runtime_failure(e, &d, "alloc", a.error);
  const size_t bytes = a.bytes == 0 ? 1 : a.bytes;
  void* p = nullptr;
  switch (raw(a.kind)) {
    case STRATA_MEMORY_DEVICE: {
      cudaError_t e = cudaSuccess;
#if STRATA_GPU_HAS_MEMPOOLS
      if (d.mempools) {
        e = cudaMallocAsync(&p, bytes, native_stream(d, a.stream));
      } else {
        e = cudaMalloc(&p, bytes);
      }
#else
      e = cudaMalloc(&p, bytes);
#endif
      if (e == cudaErrorMemoryAllocation) return out_of_memory(d, e, "alloc", bytes, a.error);
      if (e != cudaSuccess) return runtime_failure(e, &d, "alloc", a.error);
      a.host_pointer = nullptr;
      break;
    }
    case STRATA_MEMORY_PINNED_HOST: {
      cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
      if (e == cudaErrorMemoryAllocation) return out_of_memory(d, e, "pinned host alloc", bytes, a.error);
      if (e != cudaSuccess) return runtime_failure(e, &d, "pinned host alloc", a.error);
      a.host_pointer = p;
      break;
    }
    default:
      return fail(a.error, STRATA_ERROR_UNSUPPORTED, "alloc on %s: unknown memory kind %d", d.id.c_str(),
                  static_cast<int>(raw(a.kind)));
  }
  count_alloc(d, p, bytes);
  a.buffer = reinterpret_cast<strata_buffer>(p);
  return STRATA_OK;
}

strata_status State::free(Device& d, strata_alloc_args& a) {
  if (a.buffer == nullptr || make_current(d) != cudaSuccess) return STRATA_OK;
  void* p = reinterpret_cast<void*>(a.buffer);
  count_free(d, p);
  if (raw(a.kind) == STRATA_MEMORY_PINNED_HOST) {
    (void)cudaFreeHost(p);  // the host frees a staging block only after its copies completed
    return STRATA_OK;
  }
#if STRATA_GPU_HAS_MEMPOOLS
  if (d.mempools) {
    (void)cudaFreeAsync(p, native_stream(d, a.stream));  // stream-ordered: after the work queued before it
    return STRATA_OK;
  }
#endif
  (void)cudaFree(p);
  return STRATA_OK;
}

strata_status State::copy(Device& d, strata_copy_args& a) {
  if (cudaError_t e = make_current(d); e != cudaSuccess) return runtime_failure(e, &d, "copy", a.error);
  cudaStream_t stream = native_stream(d, a.stream);
  const bool async = (a.flags & STRATA_COPY_ASYNC) != 0;
  const auto kind = raw(a.kind);
  const bool host_src = kind == STRATA_COPY_HOST_TO_DEVICE, host_dst = kind == STRATA_COPY_DEVICE_TO_HOST;
  if (!host_src && !host_dst && kind != STRATA_COPY_DEVICE_TO_DEVICE) {
    return fail(a.error, STRATA_ERROR_UNSUPPORTED, "copy on %s: unknown copy kind %d", d.id.c_str(),
                static_cast<int>(kind));
  }
  // Each end is a host pointer or a device buffer plus its offset.
  const char* what = host_src ? "copy to the device" : host_dst ? "copy to the host" : "copy within the device";
  const char* src = host_src                ? static_cast<const char*>(a.src_host)
                    : a.src == nullptr     ? nullptr
                                            : reinterpret_cast<const char*>(a.src) + a.src_offset;
  char* dst = host_dst                ? static_cast<char*>(a.dst_host)
              : a.dst == nullptr     ? nullptr
                                      : reinterpret_cast<char*>(a.dst) + a.dst_offset;
  if (src == nullptr || dst == nullptr) {
    return fail(a.error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: NULL source or destination", what, d.id.c_str());
  }
  cudaError_t e = cudaSuccess;
  if (kind != STRATA_COPY_DEVICE_TO_DEVICE) {
    e = cudaMemcpyAsync(dst, src, a.bytes, host_src ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream);
  } else if (dst < src + a.bytes && src < dst + a.bytes && dst != src) {
    // cudaMemcpy's ranges must not overlap; the ABI allows it, so an
    // overlapping copy goes through a scratch buffer.
    void* scratch = nullptr;
    e = cudaMalloc(&scratch, a.bytes);
    if (e == cudaErrorMemoryAllocation) return out_of_memory(d, e, what, a.bytes, a.error);
    if (e == cudaSuccess) e = cudaMemcpyAsync(scratch, src, a.bytes, cudaMemcpyDeviceToDevice, stream);
    if (e == cudaSuccess) e = cudaMemcpyAsync(dst, scratch, a.bytes, cudaMemcpyDeviceToDevice, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (scratch != nullptr) (void)cudaFree(scratch);
  } else if (dst != src) {
    e = cudaMemcpyAsync(dst, src, a.bytes, cudaMemcpyDeviceToDevice, stream);
  }
  if (e != cudaSuccess) return runtime_failure(e, &d, what, a.error);
  if (strata_status s = record_done(d, stream, a.done, a.error); s != STRATA_OK) return s;
  // Without ASYNC the host memory must be consumed or filled on return; a
  // copy to the host is a synchronisation point (the SDK asks deferred()).
  if (!async && kind != STRATA_COPY_DEVICE_TO_DEVICE) {
    if (cudaError_t w = cudaStreamSynchronize(stream); w != cudaSuccess) return runtime_failure(w, &d, what, a.error);
  }
  return STRATA_OK;
}

strata_status State::memory_info(Device& d, strata_memory_args& a) {
  if (cudaError_t e = make_current(d); e != cudaSuccess) return runtime_failure(e, &d, "memory_info", a.error);
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes); e != cudaSuccess) {
    return runtime_failure(e, &d, "cudaMemGetInfo", a.error);
  }
  a.free_bytes = free_bytes;
  a.total_bytes = total_bytes;
  return STRATA_OK;
}

strata_status State::memory_trim(Device& d, strata_memory_args& a) {
#if STRATA_GPU_HAS_MEMPOOLS
  if (d.mempools) {
    if (cudaError_t e = make_current(d); e != cudaSuccess) return runtime_failure(e, &d, "memory_trim", a.error);
    cudaMemPool_t pool = nullptr;
    if (cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, d.ordinal); e != cudaSuccess) {
      return runtime_failure(e, &d, "cudaDeviceGetDefaultMemPool", a.error);
    }
    if (cudaError_t e = cudaMemPoolTrimTo(pool, 0); e != cudaSuccess) {
      return runtime_failure(e, &d, "cudaMemPoolTrimTo", a.error);
    }
  }
#endif
  return STRATA_OK;
}

strata_status State::memory_stats(Device& d, strata_memory_args& a) {
  std::lock_guard lock(d.memory_mutex);
  a.bytes_in_use = d.bytes_in_use;
  a.bytes_reserved = d.bytes_in_use;  // nothing is reserved beyond live buffers (see above)
  a.peak_bytes_in_use = d.peak_bytes_in_use;
  a.allocations = d.allocations;
  return STRATA_OK;
}

}  // namespace strata::gpu
