// probe_cache.cpp — the cache of child probes (plugin_probe.hpp): a JSON
// file of good answers, each valid while the plugin file, its options, the
// probe timeout, the Strata version and the environment it declared are
// unchanged. A cache that cannot be used is said once and ignored.
#include "runtime/plugins/probe_cache.hpp"

#include "base/logging.hpp"
#include "runtime/plugins/file_digest.hpp"

#include <strata/version.hpp>

#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

extern char** environ;

namespace strata::detail {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxCacheEntries = 512;

//
// Only good answers are cached, and an answer stands only while everything
// that decided it is unchanged (plugin_probe.hpp): the file, the options, the
// probe timeout, the Strata version — the key — and the environment the
// plugin declared (strata_plugin_api.probe_environment, ABI 2.1) — the
// fingerprint stored with the answer and compared at every lookup.

std::mutex g_cache_mutex;
constexpr size_t kMaxCacheBytes = size_t{4} << 20;
constexpr int kMaxCacheDepth = 8;             // {"version", "entries": {key: {"environment": [...]}}}

/// Variables of the shell's own bookkeeping, which no plugin reads: left
/// out of the fingerprint of a plugin that declares nothing.
constexpr std::array<std::string_view, 12> kShellOwn{"PWD",     "OLDPWD",   "SHLVL", "_",       "LINES", "COLUMNS",
                                                     "HISTFILE", "PS1",     "PS2",   "PS4",     "PROMPT_COMMAND",
                                                     "TERM_SESSION_ID"};
/// Variables every plugin depends on: they decide which libraries it loads.
constexpr std::array<std::string_view, 2> kAlwaysCounted{"LD_LIBRARY_PATH", "LD_PRELOAD"};

/// Says once per process why the cache is not used (a FIFO or folder of its
/// name, a corrupt file): the plugins are then probed in a child every time.
void cache_unusable(const std::string& file, const std::string& why) {
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    logger("plugin")->warn("the plugin probe cache {} is not used: {}; every plugin is probed in a child process",
                           file, why);
  }
}

/// `<dir>/plugin-probes.json`: STRATA_CACHE_DIR, else $XDG_CACHE_HOME/strata,
/// else $HOME/.cache/strata; "" when none is set (no cache on disk).
std::string cache_file() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
  };
  std::string dir = env("STRATA_CACHE_DIR");
  if (dir.empty() && !env("XDG_CACHE_HOME").empty()) dir = env("XDG_CACHE_HOME") + "/strata";
  if (dir.empty() && !env("HOME").empty()) dir = env("HOME") + "/.cache/strata";
  return dir.empty() ? std::string() : dir + "/plugin-probes.json";
}

/// The GNU build id of an ELF64 little-endian file as hex (the linker's hash
/// of the file's contents), or "" when it has none or is another kind.
std::string gnu_build_id(int fd) {
  auto read_at = [fd](void* out, size_t n, uint64_t offset) {
    return ::pread(fd, out, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n);
  };
  unsigned char ident[16];
  if (!read_at(ident, sizeof ident, 0) || ident[4] != 2 /* ELFCLASS64 */ || ident[5] != 1 /* little-endian */) {
    return {};
  }
  uint64_t phoff = 0;
  uint16_t phentsize = 0, phnum = 0;
  if (!read_at(&phoff, 8, 32) || !read_at(&phentsize, 2, 54) || !read_at(&phnum, 2, 56) || phentsize < 56) return {};
  for (uint16_t i = 0; i < phnum && i < 128; ++i) {
    const uint64_t ph = phoff + uint64_t{i} * phentsize;
    uint32_t type = 0;
    uint64_t offset = 0, size = 0;
    if (!read_at(&type, 4, ph) || !read_at(&offset, 8, ph + 8) || !read_at(&size, 8, ph + 32)) return {};
    if (type != 4 /* PT_NOTE */ || size > 4096) continue;
    std::vector<unsigned char> notes(static_cast<size_t>(size));
    if (!read_at(notes.data(), notes.size(), offset)) return {};
    for (size_t at = 0; at + 12 <= notes.size();) {
      uint32_t namesz, descsz, note_type;
      std::memcpy(&namesz, &notes[at], 4);
      std::memcpy(&descsz, &notes[at + 4], 4);
      std::memcpy(&note_type, &notes[at + 8], 4);
      const size_t name_at = at + 12, desc_at = name_at + ((namesz + 3u) & ~3u);
      if (namesz > notes.size() || descsz > notes.size() || desc_at + descsz > notes.size()) break;
      if (note_type == 3 /* NT_GNU_BUILD_ID */ && namesz == 4 && std::memcmp(&notes[name_at], "GNU", 4) == 0) {
        static constexpr char kHex[] = "0123456789abcdef";
        std::string hex;
        for (size_t k = 0; k < descsz; ++k) {
          hex += kHex[notes[desc_at + k] >> 4];
          hex += kHex[notes[desc_at + k] & 15];
        }
        return hex;
      }
      at = desc_at + ((descsz + 3u) & ~3u);
    }
  }
  return {};
}

/// What identifies one probe: the file as the kernel sees it (device, inode,
/// size, mtime and ctime — a replaced or rewritten file changes its ctime,
/// which no user can set back) and its GNU build id (a hash of its contents
/// the linker wrote), the options, the probe timeout and this Strata's
/// version. "" when the file cannot be opened.
std::string cache_key(const std::string& path, const std::string& options, int timeout_ms) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return {};
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  const std::string build_id = ok ? gnu_build_id(fd) : std::string();
  ::close(fd);
  if (!ok) return {};
  std::error_code ec;
  std::string canonical = fs::weakly_canonical(path, ec).string();
  if (ec) canonical = path;
  std::ostringstream key;
  key << canonical << '|' << st.st_dev << '|' << st.st_ino << '|' << st.st_size << '|' << st.st_mtim.tv_sec << '.'
      << st.st_mtim.tv_nsec << '|' << st.st_ctim.tv_sec << '.' << st.st_ctim.tv_nsec << '|' << build_id << '|'
      << options << '|' << timeout_ms << '|' << version();
  return key.str();
}

/// Whether environment variable `name` is one that `declared` lists (a
/// trailing '*' matches a prefix); with no list, every variable but the
/// shell's own counts.
bool counted(std::string_view name, const std::optional<std::vector<std::string>>& declared) {
  if (std::find(kAlwaysCounted.begin(), kAlwaysCounted.end(), name) != kAlwaysCounted.end()) return true;
  if (!declared) return std::find(kShellOwn.begin(), kShellOwn.end(), name) == kShellOwn.end();
  for (const std::string& d : *declared) {
    const bool prefix = !d.empty() && d.back() == '*';
    if (prefix ? name.starts_with(std::string_view(d).substr(0, d.size() - 1)) : name == d) {
      return true;
    }
  }
  return false;
}

/// SHA-256 of the counted variables, sorted, as "NAME=value" lines: the
/// environment a cached answer was given in (values are not stored).
std::string environment_fingerprint(const std::optional<std::vector<std::string>>& declared) {
  std::vector<std::string> entries;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry = *e;
    if (counted(entry.substr(0, entry.find('=')), declared)) entries.emplace_back(entry);
  }
  std::sort(entries.begin(), entries.end());
  std::string all;
  for (const std::string& e : entries) all += e + '\n';
  return sha256_hex(all);
}

/// The cache file's entries, or an empty object when there is no usable
/// file. Opened without blocking and read only when it is a regular file of
/// at most kMaxCacheBytes (a FIFO of that name would block a plain open
/// forever; a folder would throw from a stream), and parsed with a depth cap.
nlohmann::json read_cache(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    if (errno != ENOENT) cache_unusable(file, std::strerror(errno));
    return nlohmann::json::object();
  }
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* f) {
    ::close(*f);
    delete f;
  });
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    cache_unusable(file, "not a regular file (" + file_kind(st.st_mode) + ")");
    return nlohmann::json::object();
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxCacheBytes) {
    cache_unusable(file, std::to_string(st.st_size) + " bytes, more than a cache of its size limit holds");
    return nlohmann::json::object();
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text, [](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
      if ((event == nlohmann::json::parse_event_t::object_start ||
           event == nlohmann::json::parse_event_t::array_start) &&
          depth >= kMaxCacheDepth) {
        throw std::runtime_error("nested deeper than a cache file is");
      }
      return true;
    });
  } catch (const std::exception& e) {
    cache_unusable(file, std::string("not a cache file (") + e.what() + ")");
    return nlohmann::json::object();
  }
  // Every member's type is checked before it is read: json::value() throws
  // on a member of another type ("version": {}), found by fuzz_probe_cache.
  const auto version = doc.is_object() ? doc.find("version") : doc.end();
  if (!doc.is_object() || version == doc.end() || !version->is_number_integer() || *version != 2 ||
      !doc.contains("entries") || !doc["entries"].is_object()) {
    return nlohmann::json::object();  // another version's file: rewritten by the next probe
  }
  return doc["entries"];
}

}  // namespace

/// The variables a cache entry or a child's result declares: null (none
/// declared), else an array of at most kMaxDeclaredNames strings.
std::optional<std::optional<std::vector<std::string>>> declared_names(const nlohmann::json& v) {
  if (v.is_null()) return std::optional<std::vector<std::string>>();
  if (!v.is_array() || v.size() > kMaxDeclaredNames) return std::nullopt;
  std::vector<std::string> names;
  for (const nlohmann::json& n : v) {
    if (!n.is_string() || n.get_ref<const std::string&>().size() > kMaxDeclaredNameBytes) return std::nullopt;
    names.push_back(n.get<std::string>());
  }
  return std::optional<std::vector<std::string>>(std::move(names));
}

std::optional<ChildProbe> cached_probe(const std::string& key) {
  const std::string file = cache_file();
  if (key.empty() || file.empty()) return std::nullopt;
  std::lock_guard lock(g_cache_mutex);
  nlohmann::json entries = read_cache(file);
  auto it = entries.find(key);
  if (it == entries.end() || !it->is_object() || !it->contains("environment") || !it->contains("fingerprint") ||
      !(*it)["fingerprint"].is_string()) {
    return std::nullopt;
  }
  auto declared = declared_names((*it)["environment"]);
  if (!declared || environment_fingerprint(*declared) != (*it)["fingerprint"].get<std::string>()) {
    return std::nullopt;  // the environment it depends on changed: probe again
  }
  ChildProbe p;
  p.ok = true;
  p.environment = std::move(*declared);
  p.how = "cached child probe";
  return p;
}

/// Adds one good result; written to a temporary file and renamed, so
/// readers in other processes never see half a file (a concurrent writer
/// may win). Refusals are not cached: their cause may be gone next time.
void remember_probe(const std::string& key, const ChildProbe& p) {
  const std::string file = cache_file();
  if (key.empty() || file.empty() || !p.ok) return;
  std::lock_guard lock(g_cache_mutex);
  std::error_code ec;
  fs::create_directories(fs::path(file).parent_path(), ec);
  nlohmann::json entries = read_cache(file);
  if (entries.size() >= kMaxCacheEntries) entries = nlohmann::json::object();
  nlohmann::json declared = nullptr;
  if (p.environment) declared = *p.environment;
  entries[key] = {{"environment", declared}, {"fingerprint", environment_fingerprint(p.environment)}};
  const std::string tmp = file + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return;
    out << nlohmann::json{{"version", 2}, {"entries", entries}}.dump(-1, ' ', false,
                                                                      nlohmann::json::error_handler_t::replace);
    if (!out) return;
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    cache_unusable(file, "cannot replace it: " + ec.message());
    fs::remove(tmp, ec);
  }
}

std::optional<ChildProbe> cached_child_probe(const std::string& path, const std::string& options_json,
                                             int timeout_ms) {
  return cached_probe(cache_key(path, options_json, timeout_ms));
}

std::string probe_cache_key(const std::string& path, const std::string& options_json, int timeout_ms) {
  return cache_key(path, options_json, timeout_ms);
}

}  // namespace strata::detail
