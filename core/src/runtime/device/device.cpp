// device.cpp — a Device's name, backend and index, device type names,
// byte counts for people, and DeviceTimer: marks in a device's stream of work
// (the plugin's timing events), or the host clock around synchronisations.
#include "runtime/device/device_record.hpp"

#include <strata/device_info.hpp>
#include <strata/error.hpp>
#include <strata/memory.hpp>
#include <strata/timer.hpp>

#include <chrono>
#include <cstdio>
#include <string>

namespace strata {

std::string_view device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::gpu: return "gpu";
    case DeviceType::igpu: return "igpu";
    case DeviceType::accelerator: return "accelerator";
  }
  return "?";
}

std::string Device::str() const { return valid() ? detail::device_record(*this).id : std::string("<no device>"); }
std::string Device::backend() const { return detail::device_record(*this).plugin.name; }
int Device::index() const { return detail::device_record(*this).index; }

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

DeviceTimer::DeviceTimer(Device device) : device_(device) {
  detail::DeviceRecord& r = detail::device_record(device);
  measured_ = r.can_time();
  if (!measured_) return;
  start_event_ = r.create_event(STRATA_EVENT_TIMING);
  try {
    stop_event_ = r.create_event(STRATA_EVENT_TIMING);
  } catch (...) {
    r.destroy_event(static_cast<strata_event>(start_event_));
    throw;
  }
}

DeviceTimer::~DeviceTimer() {
  if (!measured_) return;
  detail::DeviceRecord& r = detail::device_record(device_);
  r.destroy_event(static_cast<strata_event>(start_event_));
  r.destroy_event(static_cast<strata_event>(stop_event_));
}

namespace {
double host_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void DeviceTimer::start() {
  detail::DeviceRecord& r = detail::device_record(device_);
  if (measured_) {
    r.record(static_cast<strata_event>(start_event_));
  } else {
    r.synchronize();
    start_host_ms_ = host_ms();
  }
  started_ = true;
  stopped_ = false;
}

void DeviceTimer::stop() {
  if (!started_) throw Error("DeviceTimer on " + device_.str() + ": stop() before start()");
  detail::DeviceRecord& r = detail::device_record(device_);
  if (measured_) {
    r.record(static_cast<strata_event>(stop_event_));
  } else {
    r.synchronize();
    stop_host_ms_ = host_ms();
  }
  stopped_ = true;
}

double DeviceTimer::elapsed_ms() {
  if (!started_ || !stopped_) {
    throw Error("DeviceTimer on " + device_.str() + ": elapsed_ms() needs start() and then stop()");
  }
  if (!measured_) return stop_host_ms_ - start_host_ms_;
  return detail::device_record(device_).elapsed_ms(static_cast<strata_event>(start_event_),
                                                   static_cast<strata_event>(stop_event_));
}

}  // namespace strata
