// pipelines.hpp — the compute pipelines of one device, built from the embedded shaders on first use.
#pragma once

#include <strata/plugin/strata_plugin.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "vk_api.hpp"

namespace strata::vulkan {

struct Device;

/// Pipelines of one device, created on first use and cached, plus the
/// VkPipelineCache persisted across runs.
class Pipelines {
 public:
  explicit Pipelines(Device& device) : device_(device) {}
  ~Pipelines();
  strata_status init(const std::string& cache_file, strata_error* error);
  /// The pipeline of embedded shader `shader` with specialization constant 0
  /// = `op`. `kernel` names the op in error messages.
  strata_status get(std::string_view shader, int32_t op, const char* kernel, VkPipeline* out, strata_error* error);
  VkPipelineLayout layout() const { return layout_; }
  void save();

 private:
  Device& device_;
  std::mutex mutex_;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string cache_file_;
  bool dirty_ = false;
  std::unordered_map<std::string, VkShaderModule> modules_;
  std::unordered_map<std::string, VkPipeline> pipelines_;
};

}  // namespace strata::vulkan
