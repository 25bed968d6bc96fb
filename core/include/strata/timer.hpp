// timer.hpp — DeviceTimer: time between two marks in a device's stream of work.
#pragma once

#include <strata/device.hpp>

namespace strata {

/// Time between two marks in a device's stream of work, as the device
/// measures it (the plugin's timing events: CUDA's cudaEventElapsedTime)
/// where it can, else by the host clock around synchronisations (then
/// start() and stop() wait for the device). Marks are queued like work: on
/// a measuring device start() and stop() return at once, and elapsed_ms()
/// waits until the device has reached stop's mark.
///
///   DeviceTimer timer(dev);
///   timer.start();
///   Tensor y = matmul(a, b);
///   timer.stop();
///   double ms = timer.elapsed_ms();
class DeviceTimer {
 public:
  explicit DeviceTimer(Device device);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  void start();
  void stop();
  /// Milliseconds from start() to stop(); Error when either is missing.
  double elapsed_ms();
  /// Whether the device measures (false: the host clock does).
  bool device_measured() const { return measured_; }

 private:
  Device device_;
  bool measured_ = false;
  void* start_event_ = nullptr;
  void* stop_event_ = nullptr;
  bool started_ = false, stopped_ = false;
  double start_host_ms_ = 0, stop_host_ms_ = 0;
};

}  // namespace strata
