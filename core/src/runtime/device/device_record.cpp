// device_record.cpp — calls into a plugin's table, kernel signatures, and the
// mapping of statuses to exceptions.
#include "runtime/device/device_record.hpp"

#include "base/logging.hpp"

#include <strata/dtype.hpp>
#include <strata/error.hpp>

#include <cstring>
#include <string>

namespace strata::detail {

namespace {

constexpr int kDTypeBits = 6;
constexpr uint64_t kDTypeMask = (uint64_t{1} << kDTypeBits) - 1;
constexpr uint64_t kSeparator = kDTypeMask;  // never a dtype value
constexpr int kMaxSignatureDTypes = 9;       // 1 + 10 * 6 bits fit in 64
constexpr int kMaxParsedDTypes = 16;         // per side of a signature string

thread_local DeviceRecord* t_issue_holder = nullptr;

}  // namespace

const strata_extension* LoadedPlugin::extension(std::string_view wanted, uint32_t min_version) const {
  if (!has(&strata_plugin_api::extensions)) return nullptr;
  int guard = 0;  // a cyclic list must not hang the host
  for (const strata_extension* e = api->extensions; e != nullptr && guard < 256; e = e->next, ++guard) {
    if (e->struct_size < STRATA_EXTENSION_MIN_SIZE || e->name == nullptr) continue;
    if (wanted == e->name && e->version >= min_version) return e;
  }
  return nullptr;
}

// --- Kernels ---------------------------------------------------------------------

std::string DeviceRecord::add_kernel(const strata_kernel_entry* e, int index_in_table, KernelOpLookup lookup) {
  std::string where = "kernel entry " + std::to_string(index_in_table);
  if (e == nullptr) return where + ": null pointer";
  if (e->struct_size < STRATA_KERNEL_ENTRY_MIN_SIZE) {
    return where + ": struct_size " + std::to_string(e->struct_size) + " below the minimum " +
           std::to_string(STRATA_KERNEL_ENTRY_MIN_SIZE);
  }
  if (e->op == nullptr || e->fn == nullptr) return where + ": no op name or no function";
  where = where + " (" + e->op + (e->signature != nullptr ? std::string(" ") + e->signature : "") + ")";
  const KernelOpRef op = lookup(e->op);
  if (op.id < 0) return where + ": unknown op" + op.hint;
  if (e->op_version != op.version) {
    return where + ": op version " + std::to_string(e->op_version) + ", but this Strata core speaks version " +
           std::to_string(op.version) + " of " + std::string(op.kernel_name);
  }
  uint64_t key = parse_signature(e->signature);
  if (key == 0) return where + ": malformed signature";
  auto& slots = kernels[static_cast<size_t>(op.id)];
  for (const KernelSlot& s : slots) {
    if (s.signature == key) return {};  // the first entry for a signature wins
  }
  void* user_data = STRATA_HAS_FIELD(e, strata_kernel_entry, user_data) ? e->user_data : nullptr;
  slots.push_back({key, e->fn, e->flags, user_data});
  kernel_list.push_back({e->op, e->signature, (e->flags & STRATA_KERNEL_STRIDED_INPUTS) != 0});
  ++kernel_count;
  return {};
}

std::vector<std::string> DeviceRecord::exclude_kernels(const std::vector<std::string>& entries,
                                                       KernelOpLookup lookup) {
  std::vector<std::string> unmatched;
  for (const std::string& entry : entries) {
    const size_t space = entry.find(' ');
    const std::string name = entry.substr(0, space);
    const std::string signature = space == std::string::npos ? "" : entry.substr(space + 1);
    const KernelOpRef op = lookup(name.c_str());
    const uint64_t key = signature.empty() ? 0 : parse_signature(signature.c_str());
    size_t removed = 0;
    if (op.id >= 0 && (signature.empty() || key != 0)) {
      const auto named = [&](uint64_t k) { return signature.empty() || k == key; };
      auto& slots = kernels[static_cast<size_t>(op.id)];
      removed = std::erase_if(slots, [&](const KernelSlot& s) { return named(s.signature); });
      for (KernelInfo& k : kernel_list) {
        if (lookup(k.op.c_str()).id == op.id && named(parse_signature(k.signature.c_str()))) k.excluded = true;
      }
      kernel_count -= static_cast<int>(removed);
    }
    if (removed == 0) unmatched.push_back(entry);
  }
  return unmatched;
}

bool DeviceRecord::kernel_excluded(std::string_view op, uint64_t signature) const {
  constexpr std::string_view kCore = "strata::";
  for (const KernelInfo& k : kernel_list) {
    if (!k.excluded || parse_signature(k.signature.c_str()) != signature) continue;
    const std::string_view name = k.op;
    if (name == op || (name.starts_with(kCore) && name.substr(kCore.size()) == op)) return true;
  }
  return false;
}

uint64_t signature_key(const DType* inputs, int n_inputs, const DType* outputs, int n_outputs) {
  if (n_inputs + n_outputs > kMaxSignatureDTypes) [[unlikely]] {
    // More dtypes than 64 bits hold (fused_elementwise: up to 8 + 6): keyed
    // by count and the one dtype they share, bit 63 set (a key of at most
    // 9 dtypes stays below 2^61); mixed dtypes have no key.
    const DType d = n_inputs > 0 ? inputs[0] : outputs[0];
    for (int k = 0; k < n_inputs; ++k)
      if (inputs[k] != d) return 0;
    for (int k = 0; k < n_outputs; ++k)
      if (outputs[k] != d) return 0;
    return (uint64_t{1} << 63) | (static_cast<uint64_t>(d) << 16) | (static_cast<uint64_t>(n_inputs) << 8) |
           static_cast<uint64_t>(n_outputs);
  }
  uint64_t key = 1;
  for (int k = 0; k < n_inputs; ++k) key = (key << kDTypeBits) | static_cast<uint64_t>(inputs[k]);
  key = (key << kDTypeBits) | kSeparator;
  for (int k = 0; k < n_outputs; ++k) key = (key << kDTypeBits) | static_cast<uint64_t>(outputs[k]);
  return key;
}

uint64_t parse_signature(const char* text) {
  if (text == nullptr) return 0;
  std::string s(text);
  size_t arrow = s.find("->");
  if (arrow == std::string::npos) return 0;
  auto parse_list = [](const std::string& list, DType* out, int& n) {
    n = 0;
    if (list.empty()) return true;
    size_t start = 0;
    while (true) {
      size_t comma = list.find(',', start);
      std::string name = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (n == kMaxParsedDTypes) return false;
      try {
        out[n++] = dtype_from_name(name);
      } catch (const Error&) {
        return false;
      }
      if (comma == std::string::npos) return true;
      start = comma + 1;
    }
  };
  DType in[kMaxParsedDTypes];
  DType out[kMaxParsedDTypes];
  int n_in = 0;
  int n_out = 0;
  if (!parse_list(s.substr(0, arrow), in, n_in) || !parse_list(s.substr(arrow + 2), out, n_out) || n_out == 0) {
    return 0;
  }
  return signature_key(in, n_in, out, n_out);  // 0 for more than 9 dtypes of several kinds
}

std::string signature_string(const DType* inputs, int n_inputs, const DType* outputs, int n_outputs) {
  std::string s;
  for (int k = 0; k < n_inputs; ++k) {
    if (k > 0) s += ",";
    s += dtype_name(inputs[k]);
  }
  s += "->";
  for (int k = 0; k < n_outputs; ++k) {
    if (k > 0) s += ",";
    s += dtype_name(outputs[k]);
  }
  return s;
}

// --- Errors and the lost state ---------------------------------------------------

void DeviceRecord::check(strata_status status, const strata_error& error, const std::string& what) {
  if (status == STRATA_OK) return;
  std::string message = message_of(status, error);
  switch (status) {
    case STRATA_ERROR_DEVICE_LOST:
      mark_lost(message);
      throw DeviceLostError(id + " is lost (" + what + "): " + message);
    case STRATA_ERROR_DEFERRED:
      throw DeviceError(id + ": an earlier asynchronous operation failed, reported at " + what + ": " + message);
    case STRATA_ERROR_OUT_OF_MEMORY:
      throw OutOfMemoryError(id + ": " + what + " failed: " + message);
    default:
      throw DeviceError(id + ": " + what + " failed: " + message);
  }
}

void DeviceRecord::mark_lost(const std::string& reason) {
  std::lock_guard lock(lost_mutex_);
  if (lost_.load(std::memory_order_relaxed)) return;  // the first reason stays
  lost_reason_ = reason;
  lost_.store(true, std::memory_order_release);
  logger("core")->error("{} is lost: {}; later work on it fails, other devices carry on", id, reason);
}

std::string DeviceRecord::lost_reason() const {
  std::lock_guard lock(lost_mutex_);
  return lost_reason_;
}

void DeviceRecord::throw_lost() const {
  throw DeviceLostError(id + " was lost earlier and cannot be used: " + lost_reason());
}

void throw_cannot_store(const DeviceRecord& device, DType dtype, std::string_view what) {
  std::string stored;
  for (DType t : kAllDTypes) {
    if (!device.stores(t)) continue;
    if (!stored.empty()) stored += ", ";
    stored += dtype_name(t);
  }
  throw DTypeError(std::string(what) + ": " + device.id + " cannot store " + std::string(dtype_name(dtype)) + " (" +
                   (stored.empty() ? std::string("it stores no dtype") : "it stores " + stored) + ")");
}

DeviceRecord::IssueLock::IssueLock(DeviceRecord& d) {
  if (d.free_threaded || t_issue_holder == &d) return;
  d.issue_mutex_.lock();
  locked_ = &d;
  previous_ = t_issue_holder;
  t_issue_holder = &d;
}

DeviceRecord::IssueLock::~IssueLock() {
  if (locked_ == nullptr) return;
  t_issue_holder = previous_;
  locked_->issue_mutex_.unlock();
}

// --- Memory and copies -----------------------------------------------------------

namespace {
strata_alloc_args alloc_args(const DeviceRecord& d, strata_stream on_stream, strata_error& err) {
  strata_alloc_args a = d.call_args<strata_alloc_args>(err);
  a.kind = STRATA_MEMORY_DEVICE;
  a.stream = on_stream;
  return a;
}
}  // namespace

strata_buffer DeviceRecord::alloc(size_t bytes, strata_stream on_stream, strata_memory_kind kind, void** host) {
  ensure_alive();
  strata_error err = fresh_error();
  strata_alloc_args args = alloc_args(*this, on_stream, err);
  args.kind = kind;
  args.bytes = bytes;
  strata_status st;
  {
    IssueLock lock(*this);
    st = plugin.api->alloc(&args);
  }
  if (st == STRATA_OK && args.buffer == nullptr) {
    st = STRATA_ERROR_INTERNAL;
    std::snprintf(err.message, sizeof(err.message), "alloc returned no buffer");
  }
  if (st == STRATA_ERROR_OUT_OF_MEMORY) throw OutOfMemoryError(message_of(st, err));  // the allocator adds context
  check(st, err, "alloc");
  if (host != nullptr) *host = args.host_pointer;
  return args.buffer;
}

void DeviceRecord::free(strata_buffer buffer, strata_stream on_stream, strata_memory_kind kind) {
  if (lost()) return;  // nothing to return memory to
  strata_error err = fresh_error();
  strata_alloc_args args = alloc_args(*this, on_stream, err);
  args.kind = kind;
  args.buffer = buffer;
  IssueLock lock(*this);
  plugin.api->free(&args);
}

namespace {
/// Runs one copy under the issue lock; `fill` sets its operands (and flags).
template <class Fill>
void run_copy(DeviceRecord& d, strata_copy_kind kind, const char* what, Fill&& fill) {
  d.ensure_alive();
  strata_error err = fresh_error();
  strata_copy_args a = d.call_args<strata_copy_args>(err);
  a.kind = kind;
  fill(a);
  strata_status st;
  {
    DeviceRecord::IssueLock lock(d);
    st = d.plugin.api->copy(&a);
  }
  d.check(st, err, what);
}
}  // namespace

namespace {
/// One copy between `host` and `offset` bytes into `buffer`, either way;
/// asynchronous when `done` is given (`host` then lies in a pinned block).
void copy_one(DeviceRecord& d, strata_copy_kind kind, strata_buffer buffer, size_t offset, const void* host,
              size_t bytes, strata_event done) {
  const bool to_host = kind == STRATA_COPY_DEVICE_TO_HOST;
  const char* what = to_host ? (done ? "asynchronous copy to host" : "copy to host")
                             : (done ? "asynchronous copy from host" : "copy from host");
  run_copy(d, kind, what, [&](strata_copy_args& a) {
    a.flags = done ? STRATA_COPY_ASYNC : 0u;
    (to_host ? a.src : a.dst) = buffer;
    (to_host ? a.src_offset : a.dst_offset) = offset;
    if (to_host) {
      a.dst_host = const_cast<void*>(host);
    } else {
      a.src_host = host;
    }
    a.bytes = bytes;
    a.done = done;
  });
}
}  // namespace

void DeviceRecord::copy_to_host(void* dst, strata_buffer src, size_t src_offset, size_t bytes) {
  if (staging.enabled && bytes >= PinnedStaging::kMinBytes && staging.copy_to_host(dst, src, src_offset, bytes)) {
    return;
  }
  copy_one(*this, STRATA_COPY_DEVICE_TO_HOST, src, src_offset, dst, bytes, nullptr);
}

void DeviceRecord::copy_from_host(strata_buffer dst, size_t dst_offset, const void* src, size_t bytes) {
  if (staging.enabled && bytes >= PinnedStaging::kMinBytes && staging.copy_from_host(dst, dst_offset, src, bytes)) {
    return;
  }
  copy_one(*this, STRATA_COPY_HOST_TO_DEVICE, dst, dst_offset, src, bytes, nullptr);
}

void DeviceRecord::copy_async_from_host(strata_buffer dst, size_t dst_offset, const void* pinned_src, size_t bytes,
                                        strata_event done) {
  copy_one(*this, STRATA_COPY_HOST_TO_DEVICE, dst, dst_offset, pinned_src, bytes, done);
}

void DeviceRecord::copy_async_to_host(void* pinned_dst, strata_buffer src, size_t src_offset, size_t bytes,
                                      strata_event done) {
  copy_one(*this, STRATA_COPY_DEVICE_TO_HOST, src, src_offset, pinned_dst, bytes, done);
}

// --- Streams and events ----------------------------------------------------------


void DeviceRecord::synchronize() {
  ensure_alive();
  if (!has_streams) return;
  strata_error err = fresh_error();
  strata_stream_args a = call_args<strata_stream_args>(err);
  check(plugin.api->stream_synchronize(&a), err, "synchronize");
}

strata_event DeviceRecord::create_event(uint32_t flags) {
  ensure_alive();
  strata_error err = fresh_error();
  strata_stream_args a = call_args<strata_stream_args>(err);
  a.flags = flags;
  check(plugin.api->event_create(&a), err, "event_create");
  return a.event;
}

namespace {
/// event_record on `on_stream`; throws (the event stays the caller's) when it fails.
void record_on(DeviceRecord& d, strata_event event, strata_stream on_stream) {
  strata_error err = fresh_error();
  strata_stream_args a = d.call_args<strata_stream_args>(err);
  a.event = event;
  a.stream = on_stream;
  strata_status st;
  {
    DeviceRecord::IssueLock lock(d);
    st = d.plugin.api->event_record(&a);
  }
  d.check(st, err, "event_record");
}
}  // namespace

strata_event DeviceRecord::record_event(strata_stream on_stream) {
  if (!has_streams) return nullptr;
  strata_event event = create_event();
  try {
    record_on(*this, event, on_stream);
  } catch (...) {
    destroy_event(event);
    throw;
  }
  return event;
}

void DeviceRecord::record(strata_event event) {
  ensure_alive();
  record_on(*this, event, stream);
}

double DeviceRecord::elapsed_ms(strata_event start, strata_event end) {
  ensure_alive();
  strata_error err = fresh_error();
  strata_stream_args a = call_args<strata_stream_args>(err);
  a.event = start;
  a.end = end;
  check(plugin.api->event_elapsed(&a), err, "event_elapsed");
  return a.elapsed_ms;
}

bool DeviceRecord::event_done(strata_event event) {
  if (event == nullptr) return true;
  ensure_alive();
  strata_error err = fresh_error();
  strata_stream_args a = call_args<strata_stream_args>(err);
  a.event = event;
  if (plugin.has(&strata_plugin_api::event_query)) {
    check(plugin.api->event_query(&a), err, "event_query");
    return a.complete != 0;
  }
  wait_event(event);
  return true;
}

void DeviceRecord::wait_event(strata_event event) {
  if (event == nullptr) return;
  ensure_alive();
  strata_error err = fresh_error();
  strata_stream_args a = call_args<strata_stream_args>(err);
  a.event = event;
  check(plugin.api->event_synchronize(&a), err, "event_synchronize");
}

void DeviceRecord::destroy_event(strata_event event) {
  if (event == nullptr || lost()) return;
  strata_error err = fresh_error();
  strata_stream_args a = call_args<strata_stream_args>(err);
  a.event = event;
  plugin.api->event_destroy(&a);
}

}  // namespace strata::detail
