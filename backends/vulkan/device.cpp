// device.cpp — logical devices, submission and the timeline, streams and
// pipelines (see device.hpp).
#include "device.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <strata/plugin/strata_plugin.hpp>

#include "kernels.hpp"
#include "shaders.hpp"

namespace strata::vulkan {

using plugin::fail;

namespace {

constexpr VkDeviceSize kArenaBytes = 64 << 10;
constexpr size_t kMaxInFlight = 16;  // submissions per stream before the host waits

constexpr VkPipelineStageFlags kWorkStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;

/// Orders everything recorded (or submitted) before it against everything after.
void full_barrier(const DeviceApi& vk, VkCommandBuffer cb) {
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                     VK_ACCESS_TRANSFER_WRITE_BIT;
  vk.vkCmdPipelineBarrier(cb, kWorkStages, kWorkStages, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

/// Makes the batch's writes visible to the host once the timeline says it is done.
void host_barrier(const DeviceApi& vk, VkCommandBuffer cb) {
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vk.vkCmdPipelineBarrier(cb, kWorkStages, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
}

/// The "test_fail_pipeline" hook: whether `hook` is "<shader>/<kernel>".
bool forced_to_fail(std::string_view hook, std::string_view shader, std::string_view kernel) {
  if (hook.empty()) return false;
  // "unary_f32_f32/exp" names strata::exp: the namespace may be left out.
  if (const size_t colons = kernel.rfind("::");
      colons != std::string_view::npos && hook.size() == shader.size() + 1 + kernel.size() - colons - 2) {
    kernel.remove_prefix(colons + 2);
  }
  return hook.size() == shader.size() + 1 + kernel.size() && hook.starts_with(shader) && hook[shader.size()] == '/' &&
         hook.ends_with(kernel);
}

}  // namespace

// ---- State -------------------------------------------------------------------

void State::log(strata_log_level level, const std::string& message) const {
  plugin::log(host, level, kPluginName, message.c_str());
}

Device* device_of(strata_plugin_state state, int32_t device, strata_error* error) {
  State* s = as_state(state);
  if (s == nullptr || device < 0 || device >= static_cast<int32_t>(s->devices.size())) {
    fail(error, STRATA_ERROR_INVALID_ARGUMENT, "vulkan: no device %d (there are %d)", device,
         s == nullptr ? 0 : static_cast<int>(s->devices.size()));
    return nullptr;
  }
  return s->devices[static_cast<size_t>(device)].get();
}

Stream& stream_of(Device& device, strata_stream stream) {
  return stream == nullptr ? *device.default_stream : *reinterpret_cast<Stream*>(stream);
}

// ---- Device: submission and the timeline ----------------------------------------

strata_status Device::check_lost(strata_error* error) {
  if (!is_lost.load(std::memory_order_acquire)) return STRATA_OK;
  std::lock_guard lock(lost_mutex);
  return fail(error, STRATA_ERROR_DEVICE_LOST, "%s: the device failed earlier and is unusable: %s", id().c_str(),
              lost.c_str());
}

void Device::mark_lost(const std::string& why) {
  {
    std::lock_guard lock(lost_mutex);
    if (lost.empty()) lost = why;
    is_lost.store(true, std::memory_order_release);
  }
  state->log(STRATA_LOG_ERROR, id() + ": " + why);
}

void Device::count_alloc(uint64_t bytes) {
  const uint64_t now = live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

strata_status Device::report_deferred(strata_error* error) {
  if (deferred == nullptr) return STRATA_OK;
  auto* record = reinterpret_cast<DeferredRecord*>(deferred->host());
  std::atomic_ref<uint32_t> state_word(record->state);
  if (state_word.load(std::memory_order_acquire) != 2u) return STRATA_OK;  // none, or still being written
  DeferredRecord r{};
  {
    std::lock_guard lock(deferred_mutex);
    if (state_word.load(std::memory_order_acquire) != 2u) return STRATA_OK;  // another thread reported it
    r = *record;
    state_word.store(0u, std::memory_order_release);  // later submissions see the record cleared
  }
  const OpSpec* spec = op_spec_by_id(r.site);
  const char* op = spec != nullptr ? spec->op : "a kernel";
  if (r.what == ERR_DIV_ZERO) {
    return fail(error, STRATA_ERROR_DEFERRED, "%s on %s: integer division by zero (reported at synchronisation)", op,
                id().c_str());
  }
  const auto value = static_cast<int64_t>((uint64_t{r.value_hi} << 32) | r.value_lo);
  return fail(error, STRATA_ERROR_DEFERRED,
              "%s on %s: index %lld out of range [0, %u) along dim %u (reported at synchronisation)", op, id().c_str(),
              static_cast<long long>(value), r.bound, r.dim);
}

strata_status Device::submit(VkCommandBuffer commands, uint64_t* seq, strata_error* error) {
  if (strata_status s = check_lost(error); s != STRATA_OK) return s;
  std::lock_guard lock(queue_mutex);
  const uint64_t value = last_submitted.load(std::memory_order_relaxed) + 1;
  VkTimelineSemaphoreSubmitInfo tsi{};
  tsi.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO;
  tsi.signalSemaphoreValueCount = 1;
  tsi.pSignalSemaphoreValues = &value;
  VkSubmitInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  si.pNext = &tsi;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &commands;
  si.signalSemaphoreCount = 1;
  si.pSignalSemaphores = &timeline;
  const VkResult r = fn.vkQueueSubmit(queue, 1, &si, VK_NULL_HANDLE);
  if (r != VK_SUCCESS) {
    const std::string why = std::string("vkQueueSubmit failed: ") + result_name(r);
    mark_lost(why);
    return fail(error, STRATA_ERROR_DEVICE_LOST, "%s: %s", id().c_str(), why.c_str());
  }
  last_submitted.store(value, std::memory_order_release);
  *seq = value;
  return STRATA_OK;
}

uint64_t Device::poll() {
  uint64_t value = 0;
  if (fn.vkGetSemaphoreCounterValue(device, timeline, &value) != VK_SUCCESS) return completed.load();
  uint64_t seen = completed.load();
  while (value > seen && !completed.compare_exchange_weak(seen, value)) {
  }
  return std::max(value, seen);
}

strata_status Device::wait(uint64_t seq, strata_error* error) {
  if (seq == 0 || completed.load() >= seq || poll() >= seq) return STRATA_OK;
  VkSemaphoreWaitInfo wi{};
  wi.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO;
  wi.semaphoreCount = 1;
  wi.pSemaphores = &timeline;
  wi.pValues = &seq;
  for (;;) {
    const VkResult r = fn.vkWaitSemaphores(device, &wi, 10'000'000'000ull);
    if (r == VK_SUCCESS) break;
    if (r == VK_TIMEOUT) {
      if (strata_status s = check_lost(error); s != STRATA_OK) return s;
      continue;
    }
    const std::string why = std::string("waiting for submitted work failed: ") + result_name(r);
    mark_lost(why);
    return fail(error, STRATA_ERROR_DEVICE_LOST, "%s: %s", id().c_str(), why.c_str());
  }
  poll();
  return STRATA_OK;
}

// ---- Stream --------------------------------------------------------------------

Stream::Stream(Device& device) : device_(device) {}

Stream::~Stream() {
  strata_error ignored{sizeof(strata_error), {}};
  {
    std::lock_guard lock(mutex_);
    (void)synchronize(&ignored);
    if (current_ != nullptr) {
      release_frees(*current_);
      for (Buffer* b : current_->staging) device_.staging->release(b);
      if (current_->arena != nullptr) device_.staging->release(current_->arena);
      spare_.push_back(current_);
      current_ = nullptr;
    }
    // Everything in flight is complete after synchronize() unless the device
    // was lost; then the ranges are simply leaked with the device.
    reclaim();
  }
  for (Batch* b : spare_) delete b;
  for (Batch* b : in_flight_) delete b;
  if (pool_ != VK_NULL_HANDLE) device_.fn.vkDestroyCommandPool(device_.device, pool_, nullptr);
}

void Stream::reclaim() {
  if (in_flight_.empty()) return;
  const uint64_t done = device_.poll();
  while (!in_flight_.empty() && in_flight_.front()->seq <= done) {
    Batch* b = in_flight_.front();
    in_flight_.pop_front();
    for (Buffer* s : b->staging) device_.staging->release(s);
    b->staging.clear();
    if (b->arena != nullptr) device_.staging->release(b->arena);
    b->arena = nullptr;
    b->arena_used = 0;
    b->seq = 0;
    b->recorded = 0;
    spare_.push_back(b);
  }
}

strata_status Stream::open(strata_error* error) {
  if (current_ != nullptr) return STRATA_OK;
  if (strata_status s = device_.check_lost(error); s != STRATA_OK) return s;
  const DeviceApi& vk = device_.fn;
  if (pool_ == VK_NULL_HANDLE) {
    VkCommandPoolCreateInfo pci{};
    pci.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pci.queueFamilyIndex = device_.queue_family;
    const VkResult r = vk.vkCreateCommandPool(device_.device, &pci, nullptr, &pool_);
    if (r != VK_SUCCESS) {
      return fail(error, STRATA_ERROR_DEVICE, "%s: vkCreateCommandPool failed: %s", device_.id().c_str(),
                  result_name(r));
    }
  }
  reclaim();
  if (in_flight_.size() >= kMaxInFlight) {
    if (strata_status s = device_.wait(in_flight_.front()->seq, error); s != STRATA_OK) return s;
    reclaim();
  }
  Batch* b = nullptr;
  if (!spare_.empty()) {
    b = spare_.back();
    spare_.pop_back();
  } else {
    b = new Batch;
    VkCommandBufferAllocateInfo ai{};
    ai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    const VkResult r = vk.vkAllocateCommandBuffers(device_.device, &ai, &b->commands);
    if (r != VK_SUCCESS) {
      delete b;
      return fail(error, STRATA_ERROR_DEVICE, "%s: vkAllocateCommandBuffers failed: %s", device_.id().c_str(),
                  result_name(r));
    }
  }
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  const VkResult r = vk.vkBeginCommandBuffer(b->commands, &bi);  // implicitly resets it
  if (r != VK_SUCCESS) {
    spare_.push_back(b);
    return fail(error, STRATA_ERROR_DEVICE, "%s: vkBeginCommandBuffer failed: %s", device_.id().c_str(),
                result_name(r));
  }
  full_barrier(vk, b->commands);  // after everything submitted earlier, from any stream
  current_ = b;
  return STRATA_OK;
}

strata_status Stream::upload_params(const void* data, size_t bytes, VkDeviceAddress* address, strata_error* error) {
  if (strata_status s = open(error); s != STRATA_OK) return s;
  Batch& b = *current_;
  VkDeviceSize at = (b.arena_used + 15) & ~VkDeviceSize{15};
  if (b.arena == nullptr || at + bytes > b.arena->size) {
    if (b.arena != nullptr) b.staging.push_back(b.arena);  // released with the batch
    b.arena = nullptr;
    b.arena_used = 0;
    at = 0;
    if (strata_status s = device_.staging->allocate(std::max<size_t>(kArenaBytes, bytes), &b.arena, error);
        s != STRATA_OK)
      return s;
  }
  std::memcpy(b.arena->host() + at, data, bytes);
  b.arena_used = at + bytes;
  *address = b.arena->address() + at;
  return STRATA_OK;
}

strata_status Stream::dispatch(VkPipeline pipeline, const void* push, uint32_t push_bytes, uint32_t gx, uint32_t gy,
                               uint32_t gz, strata_error* error) {
  if (strata_status s = open(error); s != STRATA_OK) return s;
  const DeviceApi& vk = device_.fn;
  VkCommandBuffer cb = current_->commands;
  vk.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
  vk.vkCmdPushConstants(cb, device_.pipelines->layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  vk.vkCmdDispatch(cb, gx, gy, gz);
  full_barrier(vk, cb);
  if (++current_->recorded >= device_.state->options.batch_dispatches) return flush(error);
  return STRATA_OK;
}

strata_status Stream::copy(VkBuffer src, VkDeviceSize src_offset, VkBuffer dst, VkDeviceSize dst_offset,
                           VkDeviceSize bytes, strata_error* error) {
  if (bytes == 0) return STRATA_OK;
  if (strata_status s = open(error); s != STRATA_OK) return s;
  VkBufferCopy region{src_offset, dst_offset, bytes};
  device_.fn.vkCmdCopyBuffer(current_->commands, src, dst, 1, &region);
  full_barrier(device_.fn, current_->commands);
  if (++current_->recorded >= device_.state->options.batch_dispatches) return flush(error);
  return STRATA_OK;
}

strata_status Stream::upload(const void* src, size_t bytes, const Buffer& dst, VkDeviceSize dst_offset,
                             strata_error* error) {
  if (strata_status s = open(error); s != STRATA_OK) return s;
  Buffer* staging = nullptr;
  if (strata_status s = device_.staging->allocate(bytes, &staging, error); s != STRATA_OK) return s;
  std::memcpy(staging->host(), src, bytes);
  current_->staging.push_back(staging);
  return copy(staging->vk_buffer(), staging->offset, dst.vk_buffer(), dst.offset + dst_offset, bytes, error);
}

void Stream::release_frees(Batch& batch) {
  for (Buffer* f : batch.frees) f->pool->release(f);
  batch.frees.clear();
}

void Stream::free_buffer(Buffer* buffer) {
  if (has_recorded()) {
    current_->frees.push_back(buffer);  // the batch may still use it
  } else {
    buffer->pool->release(buffer);  // every earlier use is submitted
  }
}

Buffer* Stream::take_freed(size_t bytes) {
  if (current_ == nullptr || current_->frees.empty()) return nullptr;
  const VkDeviceSize want =
      std::max<VkDeviceSize>(kBufferAlignment, (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment);
  auto& frees = current_->frees;
  for (size_t k = frees.size(); k-- > 0;) {
    Buffer* b = frees[k];
    if (b->pool != device_.memory.get() || b->reserved < want || b->reserved - want > want / 4) continue;
    frees[k] = frees.back();
    frees.pop_back();
    b->size = bytes;
    return b;
  }
  return nullptr;
}

void Stream::retire_with_batch(Buffer* buffer) {
  // The command that used `buffer` may have filled the batch and been flushed
  // with it: then the last submitted batch is the one to wait for.
  if (current_ != nullptr) {
    current_->staging.push_back(buffer);
  } else if (!in_flight_.empty()) {
    in_flight_.back()->staging.push_back(buffer);
  } else {
    device_.staging->release(buffer);
  }
}

strata_status Stream::flush(strata_error* error, uint64_t* seq) {
  if (current_ == nullptr || current_->recorded == 0) {
    if (seq != nullptr) *seq = last_seq_;
    return STRATA_OK;
  }
  const DeviceApi& vk = device_.fn;
  Batch* b = current_;
  current_ = nullptr;
  host_barrier(vk, b->commands);
  VkResult r = vk.vkEndCommandBuffer(b->commands);
  uint64_t value = 0;
  strata_status s = STRATA_OK;
  if (r != VK_SUCCESS) {
    // The batch's recorded work is lost: later results would silently miss
    // it, so the device is unusable from here on.
    const std::string why = std::string("vkEndCommandBuffer failed: ") + result_name(r);
    device_.mark_lost(why);
    s = fail(error, STRATA_ERROR_DEVICE_LOST, "%s: %s", device_.id().c_str(), why.c_str());
  } else {
    s = device_.submit(b->commands, &value, error);
  }
  // Submitted (or never to run): what was freed during the batch may go to
  // anyone now, since later submissions are ordered after this one.
  release_frees(*b);
  if (s != STRATA_OK) {
    // Nothing of the batch will run: its staging ranges can go back now.
    for (Buffer* st : b->staging) device_.staging->release(st);
    b->staging.clear();
    if (b->arena != nullptr) device_.staging->release(b->arena);
    b->arena = nullptr;
    b->recorded = 0;
    spare_.push_back(b);
    return s;
  }
  b->seq = value;
  last_seq_ = value;
  in_flight_.push_back(b);
  if (seq != nullptr) *seq = value;
  return STRATA_OK;
}

strata_status Stream::synchronize(strata_error* error) {
  if (strata_status s = flush(error); s != STRATA_OK) return s;
  if (strata_status s = device_.wait(last_seq_, error); s != STRATA_OK) return s;
  reclaim();
  return STRATA_OK;
}

bool Stream::idle() { return !has_recorded() && device_.poll() >= last_seq_; }

// ---- Pipelines -----------------------------------------------------------------

Pipelines::~Pipelines() {
  const DeviceApi& vk = device_.fn;
  for (auto& [key, p] : pipelines_) vk.vkDestroyPipeline(device_.device, p, nullptr);
  for (auto& [key, m] : modules_) vk.vkDestroyShaderModule(device_.device, m, nullptr);
  if (cache_ != VK_NULL_HANDLE) vk.vkDestroyPipelineCache(device_.device, cache_, nullptr);
  if (layout_ != VK_NULL_HANDLE) vk.vkDestroyPipelineLayout(device_.device, layout_, nullptr);
}

strata_status Pipelines::init(const std::string& cache_file, strata_error* error) {
  const DeviceApi& vk = device_.fn;
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes};
  VkPipelineLayoutCreateInfo lci{};
  lci.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  lci.pushConstantRangeCount = 1;
  lci.pPushConstantRanges = &range;
  VkResult r = vk.vkCreatePipelineLayout(device_.device, &lci, nullptr, &layout_);
  if (r != VK_SUCCESS) {
    return fail(error, STRATA_ERROR_DEVICE, "%s: vkCreatePipelineLayout failed: %s", device_.id().c_str(),
                result_name(r));
  }
  cache_file_ = cache_file;
  std::vector<char> initial;
  if (!cache_file_.empty()) {
    std::ifstream in(cache_file_, std::ios::binary);
    if (in) initial.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  VkPipelineCacheCreateInfo cci{};
  cci.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO;
  // The driver checks the header (vendor, device, cache UUID) and ignores
  // data written by another driver or device.
  cci.initialDataSize = initial.size();
  cci.pInitialData = initial.empty() ? nullptr : initial.data();
  r = vk.vkCreatePipelineCache(device_.device, &cci, nullptr, &cache_);
  if (r != VK_SUCCESS && !initial.empty()) {
    cci.initialDataSize = 0;
    cci.pInitialData = nullptr;
    r = vk.vkCreatePipelineCache(device_.device, &cci, nullptr, &cache_);
  }
  if (r != VK_SUCCESS) cache_ = VK_NULL_HANDLE;  // pipelines still work without one
  return STRATA_OK;
}

strata_status Pipelines::get(std::string_view shader, int32_t op, const char* kernel, VkPipeline* out,
                             strata_error* error) {
  std::string key;
  key.reserve(shader.size() + 4);
  key.append(shader);
  key.push_back('#');
  key.append(std::to_string(op));
  // The test hook fails every request of that kernel, cached or not.
  const bool forced = forced_to_fail(device_.state->options.fail_pipeline, shader, kernel);
  std::lock_guard lock(mutex_);
  if (auto it = pipelines_.find(key); !forced && it != pipelines_.end()) {
    *out = it->second;
    return STRATA_OK;
  }
  const DeviceApi& vk = device_.fn;
  auto mit = modules_.find(std::string(shader));
  if (mit == modules_.end()) {
    const ShaderBlob* blob = find_shader(shader);
    if (blob == nullptr) {
      return fail(error, STRATA_ERROR_INTERNAL, "%s: kernel %s: no embedded shader \"%.*s\"", device_.id().c_str(),
                  kernel, static_cast<int>(shader.size()), shader.data());
    }
    VkShaderModuleCreateInfo mci{};
    mci.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    mci.codeSize = blob->word_count * sizeof(uint32_t);
    mci.pCode = blob->words;
    VkShaderModule module = VK_NULL_HANDLE;
    const VkResult r = vk.vkCreateShaderModule(device_.device, &mci, nullptr, &module);
    if (r != VK_SUCCESS) {
      return fail(error, STRATA_ERROR_DEVICE, "%s: kernel %s: creating shader module \"%s\" failed: %s",
                  device_.id().c_str(), kernel, blob->name, result_name(r));
    }
    mit = modules_.emplace(std::string(shader), module).first;
  }
  VkSpecializationMapEntry entry{0, 0, sizeof(int32_t)};
  VkSpecializationInfo spec{1, &entry, sizeof(int32_t), &op};
  VkComputePipelineCreateInfo pci{};
  pci.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
  pci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  pci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  pci.stage.module = mit->second;
  pci.stage.pName = "main";
  pci.stage.pSpecializationInfo = &spec;
  pci.layout = layout_;
  VkPipeline pipeline = VK_NULL_HANDLE;
  const VkResult r = forced ? VK_ERROR_INITIALIZATION_FAILED
                            : vk.vkCreateComputePipelines(device_.device, cache_, 1, &pci, nullptr, &pipeline);
  if (r != VK_SUCCESS) {
    return fail(error, STRATA_ERROR_DEVICE,
                "%s: kernel %s: creating the pipeline of shader \"%.*s\" (op %d) failed: %s%s", device_.id().c_str(),
                kernel, static_cast<int>(shader.size()), shader.data(), op, result_name(r),
                forced ? " (forced by the test hook option \"test_fail_pipeline\")" : "");
  }
  pipelines_.emplace(std::move(key), pipeline);
  dirty_ = true;
  *out = pipeline;
  return STRATA_OK;
}

void Pipelines::save() {
  std::lock_guard lock(mutex_);
  if (!dirty_ || cache_ == VK_NULL_HANDLE || cache_file_.empty()) return;
  const DeviceApi& vk = device_.fn;
  size_t size = 0;
  if (vk.vkGetPipelineCacheData(device_.device, cache_, &size, nullptr) != VK_SUCCESS || size == 0) return;
  std::vector<char> data(size);
  if (vk.vkGetPipelineCacheData(device_.device, cache_, &size, data.data()) != VK_SUCCESS) return;
  // Temp file + rename: a concurrent process never reads a half-written cache.
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(cache_file_).parent_path(), ec);
  // The process id keeps two processes sharing the cache from writing one temp file.
  const std::string tmp =
      cache_file_ + ".tmp" + std::to_string(::getpid()) + "-" + std::to_string(reinterpret_cast<uintptr_t>(this));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return;
    out.write(data.data(), static_cast<std::streamsize>(size));
    if (!out) return;
  }
  std::filesystem::rename(tmp, cache_file_, ec);
  if (ec) std::filesystem::remove(tmp, ec);
  dirty_ = false;
}

// ---- Opening and closing --------------------------------------------------------

strata_status open_device(Device& d, strata_error* error) {
  const InstanceApi& api = d.state->api;
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{};
  qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  qci.queueFamilyIndex = d.queue_family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;

  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  f12.bufferDeviceAddress = VK_TRUE;
  f12.timelineSemaphore = VK_TRUE;
  f12.storageBuffer8BitAccess = d.has_storage8 ? VK_TRUE : VK_FALSE;
  VkPhysicalDeviceVulkan11Features f11{};
  f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  f11.pNext = &f12;
  f11.storageBuffer16BitAccess = d.has_storage16 ? VK_TRUE : VK_FALSE;
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &f11;
  features.features.shaderInt64 = d.has_int64 ? VK_TRUE : VK_FALSE;

  VkDeviceCreateInfo dci{};
  dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  dci.pNext = &features;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  VkResult r = api.vkCreateDevice(d.physical, &dci, nullptr, &d.device);
  if (r != VK_SUCCESS) {
    d.device = VK_NULL_HANDLE;
    return fail(error, STRATA_ERROR_NO_DEVICE, "%s (%s): vkCreateDevice failed: %s", d.id().c_str(),
                d.properties.deviceName, result_name(r));
  }
  std::string why;
  if (!load_device_functions(api, d.device, d.fn, &why)) {
    return fail(error, STRATA_ERROR_NO_DEVICE, "%s: %s", d.id().c_str(), why.c_str());
  }
  d.fn.vkGetDeviceQueue(d.device, d.queue_family, 0, &d.queue);

  VkSemaphoreTypeCreateInfo sti{};
  sti.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO;
  sti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  sti.initialValue = 0;
  VkSemaphoreCreateInfo sci{};
  sci.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO;
  sci.pNext = &sti;
  r = d.fn.vkCreateSemaphore(d.device, &sci, nullptr, &d.timeline);
  if (r != VK_SUCCESS) {
    return fail(error, STRATA_ERROR_NO_DEVICE, "%s: creating a timeline semaphore failed: %s", d.id().c_str(),
                result_name(r));
  }
  const Options& o = d.state->options;
  d.memory = std::make_unique<BlockAllocator>(d, d.memory_type, d.direct, o.block_bytes, "device memory");
  d.staging = std::make_unique<BlockAllocator>(d, d.staging_type, true, std::min<uint64_t>(o.block_bytes, 16ull << 20),
                                               "host-visible staging memory");
  d.pipelines = std::make_unique<Pipelines>(d);
  std::string cache_file;
  if (!o.pipeline_cache_dir.empty()) {
    char name[96];
    std::snprintf(name, sizeof(name), "vulkan-%04x-%04x-%08x.pipeline-cache", d.properties.vendorID,
                  d.properties.deviceID, d.properties.driverVersion);
    cache_file = (std::filesystem::path(o.pipeline_cache_dir) / name).string();
  }
  if (strata_status s = d.pipelines->init(cache_file, error); s != STRATA_OK) return s;
  Buffer* record = nullptr;
  if (strata_status s = d.staging->allocate(sizeof(DeferredRecord), &record, error); s != STRATA_OK) return s;
  std::memset(record->host(), 0, sizeof(DeferredRecord));
  d.deferred = record;
  d.default_stream = std::make_unique<Stream>(d);
  std::lock_guard lock(d.streams_mutex);
  d.streams.push_back(d.default_stream.get());
  return STRATA_OK;
}

void close_device(Device& d) {
  if (d.device == VK_NULL_HANDLE) return;
  {
    // The function table may be partial when open_device failed early.
    std::lock_guard lock(d.lost_mutex);
    if (d.lost.empty() && d.fn.vkDeviceWaitIdle != nullptr) d.fn.vkDeviceWaitIdle(d.device);
  }
  d.completed = d.last_submitted.load();
  if (d.pipelines) d.pipelines->save();
  std::vector<Stream*> others;
  {
    std::lock_guard lock(d.streams_mutex);
    for (Stream* s : d.streams) {
      if (s != d.default_stream.get()) others.push_back(s);
    }
    d.streams.clear();
  }
  // Streams the core created and never destroyed: their pools die with the device.
  for (Stream* s : others) delete s;
  d.default_stream.reset();
  if (d.deferred != nullptr) d.staging->release(d.deferred);
  d.deferred = nullptr;
  d.pipelines.reset();
  d.staging.reset();
  d.memory.reset();
  if (d.timeline != VK_NULL_HANDLE) d.fn.vkDestroySemaphore(d.device, d.timeline, nullptr);
  if (d.fn.vkDestroyDevice != nullptr) d.fn.vkDestroyDevice(d.device, nullptr);
  d.device = VK_NULL_HANDLE;
}

}  // namespace strata::vulkan
