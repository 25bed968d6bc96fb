// plugin_probe.hpp — checking a plugin file before it enters the process:
// that it is a regular, readable ELF file of sane size, and what it does when
// loaded, probed and initialised in a short-lived child process
// (`strata-plugin-probe`), so that a plugin that crashes, exits or hangs is
// refused with the reason and never takes the host down.
//
// Good answers of child probes are cached (docs/configuration.md, "Plugin
// isolation"): a file whose identity (device, inode, size, mtime, ctime)
// and GNU build id are unchanged, probed with the same options and timeout
// by the same Strata version, in an environment whose variables the plugin
// declared (ABI 2.1 probe_environment; without a declaration, the whole
// environment but the shell's own variables) are unchanged, is not probed
// again. Refusals are never cached.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace strata::detail {

/// Why `path` cannot be a plugin (not a regular file, unreadable, empty, too
/// small or too large, not ELF), or "" when it may be one. Opens nothing that
/// could block: a FIFO or a device file is refused by its type first (dlopen
/// of a FIFO blocks until a writer comes), and the file it opens to read the
/// ELF magic is opened non-blocking and checked again by descriptor.
std::string plugin_file_problem(const std::string& path);

/// What a child probe found.
struct ChildProbe {
  /// The plugin loaded, probed, initialised, opened its devices and shut
  /// down in the child. When false, `reason` says why it is refused.
  bool ok = false;
  std::string reason;
  /// How the answer was obtained, for `strata devices`:
  /// "child process, 41 ms" or "cached child probe".
  std::string how;
  /// The environment variables the plugin declared its probe depends on
  /// (strata_plugin_api.probe_environment); none when it declared none.
  std::optional<std::vector<std::string>> environment;
};

/// Probes `path` in a child process with the plugin's `options_json`,
/// killing it after `timeout_ms`. Returns `how == ""` when no child could be
/// started (the probe helper is missing): the caller then probes in this
/// process and says so.
ChildProbe probe_in_child(const std::string& path, const std::string& options_json, int timeout_ms);

/// What probe_in_child consults first: the cached good answer for probing
/// `path` with these inputs, when the cache holds one and the environment
/// it depends on is unchanged. For the tests and the fuzzer
/// (fuzz_probe_cache), which also build entries under probe_cache_key.
std::optional<ChildProbe> cached_child_probe(const std::string& path, const std::string& options_json, int timeout_ms);
std::string probe_cache_key(const std::string& path, const std::string& options_json, int timeout_ms);

/// The probe helper's side: loads `path`, checks it against the ABI, runs
/// probe, init, device_props and get_kernels of every device and shutdown,
/// writing one line per stage and a final JSON result line to stdout.
/// Returns the process exit code.
int plugin_probe_main(int argc, char** argv);

/// Where the probe helper is expected: next to libstrata.so's folder, in
/// ../libexec/strata/strata-plugin-probe.
std::string probe_helper_path();

}  // namespace strata::detail
