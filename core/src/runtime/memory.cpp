// memory.cpp — memory queries and controls per device (Runtime's
// memory_stats, device_memory_info, trim_memory, reset_peak_memory) and
// MemoryScope: the caching allocator's figures, and the plugin's own where
// its table has memory_info / memory_stats / memory_trim.
#include "runtime/device/device_record.hpp"

#include <strata/runtime.hpp>

namespace strata {

using detail::DeviceRecord;

MemoryStats Runtime::memory_stats(Device device) { return detail::device_record(device).allocator.stats(); }


DeviceMemoryInfo Runtime::device_memory_info(Device device) {
  DeviceRecord& r = detail::device_record(device);
  r.ensure_alive();
  DeviceMemoryInfo out;
  strata_error err = detail::fresh_error();
  strata_memory_args a = r.call_args<strata_memory_args>(err);
  if (r.plugin.has(&strata_plugin_api::memory_info)) {
    r.check(r.plugin.api->memory_info(&a), err, "memory_info");
    out.free_bytes = a.free_bytes;
    out.total_bytes = a.total_bytes;
  }
  if (r.plugin.has(&strata_plugin_api::memory_stats)) {
    r.check(r.plugin.api->memory_stats(&a), err, "memory_stats");
    out.plugin_bytes_in_use = a.bytes_in_use;
    out.plugin_bytes_reserved = a.bytes_reserved;
    out.plugin_peak_bytes_in_use = a.peak_bytes_in_use;
    out.plugin_allocations = a.allocations;
  }
  detail::PinnedStaging::Stats staging = r.staging.stats();
  out.staging_bytes = staging.held_bytes;
  out.staged_copies = staging.staged_copies;
  return out;
}

void Runtime::trim_memory(Device device) {
  DeviceRecord& r = detail::device_record(device);
  r.allocator.empty_cache();
  r.staging.trim();
  if (!r.plugin.has(&strata_plugin_api::memory_trim) || r.lost()) return;
  strata_error err = detail::fresh_error();
  strata_memory_args a = r.call_args<strata_memory_args>(err);
  r.check(r.plugin.api->memory_trim(&a), err, "memory_trim");
}

void Runtime::reset_peak_memory(Device device) { detail::device_record(device).allocator.reset_peak(); }

MemoryScope::MemoryScope(Device device) : device_(device) {
  detail::CachingAllocator& a = detail::device_record(device).allocator;
  MemoryStats s = a.stats();
  start_ = s.allocated_bytes;
  outer_peak_ = s.peak_allocated_bytes;
  a.reset_peak();
}

MemoryScope::~MemoryScope() { detail::device_record(device_).allocator.raise_peak(outer_peak_); }

uint64_t MemoryScope::peak_bytes() const {
  uint64_t peak = detail::device_record(device_).allocator.stats().peak_allocated_bytes;
  return peak > start_ ? peak - start_ : 0;
}

int64_t MemoryScope::current_bytes() const {
  uint64_t now = detail::device_record(device_).allocator.stats().allocated_bytes;
  return static_cast<int64_t>(now) - static_cast<int64_t>(start_);
}

}  // namespace strata
