// pipelines.cpp — compute pipelines: shader modules, the pipeline cache on disk, the test_fail_pipeline hook
// (see pipelines.hpp).
#include "pipelines.hpp"

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <strata/plugin/strata_plugin.hpp>
#include <string>
#include <vector>

#include "device.hpp"
#include "shaders.hpp"

namespace strata::vulkan {

using plugin::fail;

namespace {

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

}  // namespace strata::vulkan
