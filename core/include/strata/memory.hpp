// memory.hpp — memory per device: the caching allocator's statistics, what
// the plugin reports, and scoped peak measurements.
#pragma once

#include <strata/device.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace strata {

/// Memory as the plugin reports it (fields the plugin does not report stay
/// unset).
struct DeviceMemoryInfo {
  std::optional<uint64_t> free_bytes;
  std::optional<uint64_t> total_bytes;
  std::optional<uint64_t> plugin_bytes_in_use;
  std::optional<uint64_t> plugin_bytes_reserved;
  std::optional<uint64_t> plugin_peak_bytes_in_use;
  std::optional<uint64_t> plugin_allocations;
  /// Pinned host memory the core holds for staging host-to-device copies
  /// (devices with STRATA_DEVICE_STAGE_PINNED; 0 elsewhere), and the copies
  /// staged so far.
  uint64_t staging_bytes = 0;
  uint64_t staged_copies = 0;
};

/// Allocator statistics of one device.
struct MemoryStats {
  uint64_t allocated_bytes = 0;  // held by live tensors
  uint64_t cached_bytes = 0;     // freed, kept for reuse
  uint64_t peak_allocated_bytes = 0;
  uint64_t device_allocations = 0;  // calls into the plugin's alloc
  std::optional<uint64_t> limit_bytes;
};

/// Scoped memory measurement on one device: the bytes allocated and the
/// peak reached since the scope began, relative to the bytes live at its
/// start. Scopes nest: the enclosing scope's (and the runtime's) peak still
/// accounts for what happened inside.
class MemoryScope {
 public:
  explicit MemoryScope(Device device);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

  /// Highest allocated bytes since the start, minus the bytes at the start.
  uint64_t peak_bytes() const;
  /// Allocated bytes now minus at the start (negative when memory was freed).
  int64_t current_bytes() const;
  Device device() const { return device_; }

 private:
  Device device_;
  uint64_t start_;
  uint64_t outer_peak_;
};

/// A byte count as Strata's messages and tools write it: "512 B", "1.5 MiB".
std::string format_bytes(uint64_t bytes);

}  // namespace strata
