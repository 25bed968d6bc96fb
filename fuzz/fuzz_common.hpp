// fuzz_common.hpp — what the fuzz targets share: a quiet runtime on the
// build's CPU plugin, and a temporary file per process.
#pragma once

#include <strata/strata.hpp>

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

namespace strata_fuzz {

/// Configures the runtime once: logging off (the loader and the runtime
/// warn about every refused input), plugins from the build tree loaded in
/// this process (no child probe per run), cpu:0 only, one thread, and a
/// memory limit so that a graph or file asking for a huge tensor gets an
/// OutOfMemoryError rather than the fuzzer's RSS limit.
inline void quiet_runtime() {
  static const bool done = [] {
    strata::runtime().configure(strata::Config::from_string(
        R"({"version": 1,
            "plugins": {"paths": ["${STRATA_LIBDIR}/strata/plugins"], "isolate": false},
            "prefer": ["cpu"],
            "devices": {"cpu": {"memory_limit": "256MiB", "threads": 1}},
            "logging": {"level": "off", "sinks": []}})",
        "fuzz-runtime.json", "/tmp"));
    return true;
  }();
  (void)done;
}

/// A file under the temporary directory, one per process (libFuzzer's
/// -jobs/-fork workers each get their own), rewritten for every input.
inline std::filesystem::path write_temp(const char* stem, const uint8_t* data, size_t size) {
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() / (std::string(stem) + "." + std::to_string(::getpid()));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace strata_fuzz

namespace strata_fuzz {

/// The model fuzz_checkpoint loads training states into, and make_seeds
/// saves them from: small, with parameters of two ranks and a LayerNorm.
inline std::shared_ptr<strata::nn::Sequential> small_model() {
  using namespace strata;
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::Tanh>(), std::make_shared<nn::LayerNorm>(Shape{4}),
      std::make_shared<nn::Linear>(4, 2)});
}

}  // namespace strata_fuzz
