// runtime.cpp — the simulated accelerator: the arena allocator, the stream
// workers, event markers and the per-device record of deferred failures
// (see runtime.hpp).
#include "runtime.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>

namespace example {

using strata::plugin::fail;

std::string device_name(int device) { return std::string(kPluginName) + ":" + std::to_string(device); }

const char* kind_name(HandleKind kind) {
  switch (kind) {
    case HandleKind::buffer: return "buffer";
    case HandleKind::stream: return "stream";
    case HandleKind::event: return "event";
  }
  return "handle";
}

std::string describe_handle(const void* handle) {
  const uint64_t id = handle_id(handle);
  const char* kind = "handle";
  for (HandleKind k : {HandleKind::buffer, HandleKind::stream, HandleKind::event}) {
    if ((id >> 56) == static_cast<uint64_t>(k)) kind = kind_name(k);
  }
  char text[64];
  std::snprintf(text, sizeof(text), "%s 0x%016" PRIx64, kind, id);
  return text;
}

// ---- Arena ------------------------------------------------------------------------

Arena::Arena(size_t bytes) : size_(bytes) {
  // An anonymous private mapping: pages are committed when first touched, and
  // trim() can hand free ones back, as a driver would.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  base_ = static_cast<std::byte*>(p);
  free_.emplace(0, bytes);
}

Arena::~Arena() { ::munmap(base_, size_); }

std::optional<size_t> Arena::allocate(size_t bytes) {
  std::lock_guard lock(mutex_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const size_t offset = it->first;
    const size_t rest = it->second - bytes;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + bytes, rest);
    return offset;
  }
  return std::nullopt;
}

void Arena::release(size_t offset, size_t bytes) {
  std::lock_guard lock(mutex_);
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {  // merge with the block after
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {  // merge with the block before
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_.emplace(offset, bytes);
}

size_t Arena::trim() {
  std::lock_guard lock(mutex_);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t given = 0;
  for (const auto& [offset, bytes] : free_) {
    const size_t begin = (offset + page - 1) / page * page;
    const size_t end = (offset + bytes) / page * page;
    if (end > begin && ::madvise(base_ + begin, end - begin, MADV_DONTNEED) == 0) given += end - begin;
  }
  return given;
}

size_t Arena::free_bytes() const {
  std::lock_guard lock(mutex_);
  size_t total = 0;
  for (const auto& [offset, bytes] : free_) total += bytes;
  return total;
}

size_t Arena::largest_free() const {
  std::lock_guard lock(mutex_);
  size_t largest = 0;
  for (const auto& [offset, bytes] : free_) largest = std::max(largest, bytes);
  return largest;
}

// ---- Stream -------------------------------------------------------------------------

Stream::Stream(Device& device, bool is_default)
    : device_(device), is_default_(is_default), worker_([this] { run(); }) {}

Stream::~Stream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();  // the worker finishes the queue first
}

uint64_t Stream::enqueue(std::string what, std::function<void()> work) {
  uint64_t ticket;
  {
    std::lock_guard lock(mutex_);
    ticket = ++issued_;
    queue_.push_back(Item{ticket, std::move(what), std::move(work)});
  }
  changed_.notify_all();
  return ticket;
}

void Stream::wait(uint64_t ticket) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return completed_ >= ticket; });
}

void Stream::drain() {
  uint64_t ticket;
  {
    std::lock_guard lock(mutex_);
    ticket = issued_;
  }
  wait(ticket);
}

void Stream::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      item.work();
    } catch (const DeferredFailure& e) {
      device_.record_failure(e.what());
    } catch (const std::exception& e) {
      device_.record_failure(item.what + " on " + device_.name + ": " + e.what());
    } catch (...) {
      device_.record_failure(item.what + " on " + device_.name + ": unknown failure");
    }
    item.work = nullptr;  // release what the closure holds before reporting completion
    lock.lock();
    completed_ = item.ticket;
    changed_.notify_all();
  }
}

// ---- Device -------------------------------------------------------------------------

Device::Device(int i, size_t arena_bytes)
    : index(i), name(device_name(i)), arena(arena_bytes), default_stream(std::make_shared<Stream>(*this, true)) {}

Device::~Device() { default_stream.reset(); }

void Device::record_failure(const std::string& message) {
  std::lock_guard lock(failures_mutex_);
  if (failures_++ == 0) first_failure_ = message;
}

strata_status Device::take_failures(strata_error* error) {
  std::lock_guard lock(failures_mutex_);
  if (failures_ == 0) return STRATA_OK;
  const uint64_t later = failures_ - 1;
  failures_ = 0;
  if (later == 0) return fail(error, STRATA_ERROR_DEFERRED, "%s", first_failure_.c_str());
  return fail(error, STRATA_ERROR_DEFERRED, "%s (and %" PRIu64 " later failure%s)", first_failure_.c_str(), later,
              later == 1 ? "" : "s");
}

// ---- PluginState --------------------------------------------------------------------

PluginState::~PluginState() {
  streams.clear();
  for (auto& d : devices) d->default_stream.reset();
}

Device* PluginState::device(int32_t index, strata_error* error, const char* what) {
  if (index < 0 || static_cast<size_t>(index) >= devices.size()) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: device %d does not exist (this plugin serves %zu)", what, index,
         devices.size());
    return nullptr;
  }
  return devices[static_cast<size_t>(index)].get();
}

Stream* PluginState::stream(Device& d, strata_stream handle, strata_error* error, const char* what) {
  if (handle == nullptr) return d.default_stream.get();
  std::shared_ptr<Stream> s = streams.find(handle_id(handle));
  if (s == nullptr) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: %s is not a live stream of this plugin", what,
         d.name.c_str(), describe_handle(handle).c_str());
    return nullptr;
  }
  if (&s->device() != &d) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: %s belongs to %s", what, d.name.c_str(),
         describe_handle(handle).c_str(), s->device().name.c_str());
    return nullptr;
  }
  return s.get();  // the table keeps it alive until stream_destroy
}

void PluginState::record_event(Stream& stream, const std::shared_ptr<Event>& event) {
  uint64_t generation;
  {
    std::lock_guard lock(event_mutex);
    generation = ++event->recorded;
  }
  stream.enqueue("event_record", [this, event, generation] {
    {
      std::lock_guard lock(event_mutex);
      if (generation > event->reached) {
        event->reached = generation;
        event->when = std::chrono::steady_clock::now();
      }
    }
    event_reached.notify_all();
  });
}

std::vector<std::shared_ptr<Stream>> PluginState::streams_of(const Device& d) {
  std::vector<std::shared_ptr<Stream>> out{d.default_stream};
  for (auto& s : streams.all()) {
    if (&s->device() == &d) out.push_back(std::move(s));
  }
  return out;
}

}  // namespace example
