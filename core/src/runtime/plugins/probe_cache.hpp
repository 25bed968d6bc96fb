// probe_cache.hpp — what the cache of child probes (probe_cache.cpp) offers
// the probe's parent side (plugin_probe.cpp), beside plugin_probe.hpp's
// cached_child_probe and probe_cache_key.
#pragma once

#include "runtime/plugins/plugin_probe.hpp"

#include <nlohmann/json_fwd.hpp>
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace strata::detail {

/// The most variables a plugin's probe_environment may name, and the
/// longest name: a cache entry or a child's result beyond them is malformed.
inline constexpr size_t kMaxDeclaredNames = 256;
inline constexpr size_t kMaxDeclaredNameBytes = 256;

/// The good answer cached under `key` whose declared environment is as it
/// was, or nullopt.
std::optional<ChildProbe> cached_probe(const std::string& key);
/// Adds one good result; refusals are not cached (their cause may be gone
/// next time).
void remember_probe(const std::string& key, const ChildProbe& p);
/// The variables a cache entry or a child's result declares: null (none
/// declared), else an array of bounded strings; nullopt when malformed.
std::optional<std::optional<std::vector<std::string>>> declared_names(const nlohmann::json& v);
/// What a file that is not a regular file is ("a directory", "a FIFO", ...)
/// (plugin_probe.cpp).
std::string file_kind(mode_t mode);

}  // namespace strata::detail
