// shaders.hpp — the SPIR-V modules compiled from shaders/*.comp at build time
// and embedded in the library (CMakeLists.txt generates the table).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace strata::vulkan {

struct ShaderBlob {
  const char* name;  // variant name, e.g. "unary_f32_f32"
  const uint32_t* words;
  size_t word_count;
};

/// The embedded module called `name`, or nullptr.
const ShaderBlob* find_shader(std::string_view name);

}  // namespace strata::vulkan
