// vk_api.hpp — the Vulkan entry points the plugin uses, loaded at run time.
//
// The plugin never links libvulkan: init() dlopens the loader (option
// "loader", else $STRATA_VULKAN_LOADER, else "libvulkan.so.1") and resolves
// everything through vkGetInstanceProcAddr / vkGetDeviceProcAddr, so a
// machine without Vulkan gets a clean "no device" refusal instead of a
// plugin that fails to load.
#pragma once

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan_core.h>

#include <string>

namespace strata::vulkan {

// X-macro lists: one line per function, grouped by the object they hang off.
#define STRATA_VK_GLOBAL_FUNCTIONS(X) \
  X(vkCreateInstance)                 \
  X(vkEnumerateInstanceVersion)       \
  X(vkEnumerateInstanceLayerProperties)

#define STRATA_VK_INSTANCE_FUNCTIONS(X)       \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceMemoryProperties2)     \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)

#define STRATA_VK_DEVICE_FUNCTIONS(X) \
  X(vkDestroyDevice)                  \
  X(vkGetDeviceQueue)                 \
  X(vkQueueSubmit)                    \
  X(vkDeviceWaitIdle)                 \
  X(vkAllocateMemory)                 \
  X(vkFreeMemory)                     \
  X(vkMapMemory)                      \
  X(vkCreateBuffer)                   \
  X(vkDestroyBuffer)                  \
  X(vkGetBufferMemoryRequirements)    \
  X(vkBindBufferMemory)               \
  X(vkGetBufferDeviceAddress)         \
  X(vkCreateCommandPool)              \
  X(vkDestroyCommandPool)             \
  X(vkAllocateCommandBuffers)         \
  X(vkBeginCommandBuffer)             \
  X(vkEndCommandBuffer)               \
  X(vkResetCommandBuffer)             \
  X(vkCmdBindPipeline)                \
  X(vkCmdPushConstants)               \
  X(vkCmdDispatch)                    \
  X(vkCmdPipelineBarrier)             \
  X(vkCmdCopyBuffer)                  \
  X(vkCreateQueryPool)                \
  X(vkDestroyQueryPool)               \
  X(vkCmdResetQueryPool)              \
  X(vkCmdWriteTimestamp)              \
  X(vkGetQueryPoolResults)            \
  X(vkCreateSemaphore)                \
  X(vkDestroySemaphore)               \
  X(vkGetSemaphoreCounterValue)       \
  X(vkWaitSemaphores)                 \
  X(vkCreateShaderModule)             \
  X(vkDestroyShaderModule)            \
  X(vkCreatePipelineLayout)           \
  X(vkDestroyPipelineLayout)          \
  X(vkCreateComputePipelines)         \
  X(vkDestroyPipeline)                \
  X(vkCreatePipelineCache)            \
  X(vkDestroyPipelineCache)           \
  X(vkGetPipelineCacheData)

#define STRATA_VK_DECLARE(name) PFN_##name name = nullptr;

/// The loader library and the global and instance-level functions.
struct InstanceApi {
  void* library = nullptr;  // never dlclosed (plugins are never unloaded)
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  STRATA_VK_GLOBAL_FUNCTIONS(STRATA_VK_DECLARE)
  STRATA_VK_INSTANCE_FUNCTIONS(STRATA_VK_DECLARE)
};

/// Device-level functions of one VkDevice.
struct DeviceApi {
  STRATA_VK_DEVICE_FUNCTIONS(STRATA_VK_DECLARE)
};

/// dlopens `path` and resolves the global functions. On failure returns false
/// with the reason (dlerror's text included) in *why.
bool open_loader(const std::string& path, InstanceApi& api, std::string* why);

/// Resolves the instance-level functions; false (naming the missing one) on failure.
bool load_instance_functions(VkInstance instance, InstanceApi& api, std::string* why);

/// Resolves the device-level functions; false (naming the missing one) on failure.
bool load_device_functions(const InstanceApi& instance_api, VkDevice device, DeviceApi& api, std::string* why);

/// "VK_ERROR_OUT_OF_DEVICE_MEMORY" etc.
const char* result_name(VkResult result);

}  // namespace strata::vulkan
