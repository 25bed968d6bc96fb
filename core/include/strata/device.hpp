// device.hpp — a handle naming one device of one loaded plugin.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>

namespace strata {

/// A device such as "cpu:0" or "vulkan:1". A cheap value (an index into the
/// runtime's device table); only devices of loaded plugins exist.
class Device {
 public:
  /// An invalid device; most APIs then use the runtime's default device.
  constexpr Device() = default;
  /// Looks up "name:index" (or "name", meaning index 0) among loaded devices.
  /// Throws DeviceError naming the available devices when there is none.
  explicit Device(std::string_view spec);
  Device(const char* spec) : Device(std::string_view(spec)) {}  // NOLINT: implicit by design

  bool valid() const { return slot_ >= 0; }
  /// "cpu:0".
  std::string str() const;
  /// Plugin name, "cpu".
  std::string backend() const;
  /// Index within the plugin.
  int index() const;

  friend bool operator==(Device a, Device b) { return a.slot_ == b.slot_; }

  /// Internal: position in the runtime's device table.
  int32_t slot() const { return slot_; }
  static constexpr Device from_slot(int32_t slot) {
    Device d;
    d.slot_ = slot;
    return d;
  }

 private:
  int32_t slot_ = -1;
};

std::ostream& operator<<(std::ostream& os, Device d);

}  // namespace strata
