// fuzz_probe_cache.cpp — the plugin probe cache file (plugin-probes.json
// under STRATA_CACHE_DIR) as the runtime reads it before trusting a cached
// answer: read_cache's checks (a regular file of at most 4 MiB, JSON with a
// depth cap, version 2) and cached_probe's checks of an entry (its declared
// environment and fingerprint). Each input is tried twice: as the whole file,
// and — when it is JSON — as the entry for a real key, so that the entry
// checks run on fuzzed values too. A miss or a hit is the expected outcome;
// a crash, a hang, a sanitizer report or an exception is a bug.
#include "runtime/plugins/plugin_probe.hpp"

#include <strata/error.hpp>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

/// A cache folder of this process, and the file the lookups are for (this
/// fuzzer's own executable: any readable regular file has a key).
struct Scratch {
  fs::path dir;
  std::string subject;
  Scratch() {
    dir = fs::temp_directory_path() / ("strata_fuzz_probe_cache_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    ::setenv("STRATA_CACHE_DIR", dir.c_str(), 1);
    subject = fs::read_symlink("/proc/self/exe").string();
  }
  void write(const std::string& text) const { std::ofstream(dir / "plugin-probes.json", std::ios::trunc) << text; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Scratch scratch;
  const std::string text(reinterpret_cast<const char*>(data), size);
  scratch.write(text);
  (void)strata::detail::cached_child_probe(scratch.subject, "{}", 1000);
  // Small inputs, nested at most kEntryDepth deep: this side copies the
  // entry into a document, and nlohmann's copy recurses once per level (a
  // 4000-deep seed overflowed the stack of the unoptimised fuzz build here,
  // in this harness, not in read_cache, which caps the depth at 8). Deeper
  // than read_cache's cap is all the entry needs to be to test it.
  constexpr int kEntryDepth = 64;
  if (text.size() >= 4096) return 0;
  bool too_deep = false;
  nlohmann::json entry = nlohmann::json::parse(
      text,
      [&too_deep](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
        too_deep = too_deep || depth > kEntryDepth;
        return !too_deep;
      },
      false);
  if (!too_deep && !entry.is_discarded()) {
    const std::string key = strata::detail::probe_cache_key(scratch.subject, "{}", 1000);
    nlohmann::json doc{{"version", 2}, {"entries", {{key, entry}}}};
    scratch.write(doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    (void)strata::detail::cached_child_probe(scratch.subject, "{}", 1000);
  }
  return 0;
}
