// plugin_probe.cpp — see plugin_probe.hpp.
#include "plugin_probe.hpp"

#include "device_record.hpp"
#include "file_digest.hpp"
#include "logging.hpp"
#include "plugin_loader.hpp"

#include <strata/config.hpp>
#include <strata/runtime.hpp>

#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

extern char** environ;

namespace strata::detail {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kMinPluginBytes = 64;             // an ELF header
constexpr int64_t kMaxPluginBytes = int64_t{4} << 30;
constexpr size_t kStderrTail = 600;                  // characters of the child's stderr quoted
constexpr size_t kMaxCacheEntries = 512;

std::string errno_text(int err) { return std::strerror(err); }

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a file";
}

std::string not_regular(mode_t mode) {
  return "not a regular file (" + file_kind(mode) + "); a plugin is a shared library file";
}

// ---- the cache of child probes ------------------------------------------------------------
//
// Only good answers are cached, and an answer stands only while everything
// that decided it is unchanged (plugin_probe.hpp): the file, the options, the
// probe timeout, the Strata version — the key — and the environment the
// plugin declared (strata_plugin_api.probe_environment, ABI 2.1) — the
// fingerprint stored with the answer and compared at every lookup.

std::mutex g_cache_mutex;
constexpr size_t kMaxCacheBytes = size_t{4} << 20;
constexpr int kMaxCacheDepth = 8;             // {"version", "entries": {key: {"environment": [...]}}}
constexpr size_t kMaxDeclaredNames = 256;     // a plugin's probe_environment
constexpr size_t kMaxDeclaredNameBytes = 256;

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
    if (errno != ENOENT) cache_unusable(file, errno_text(errno));
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

// ---- running the child ---------------------------------------------------------------------

struct ChildRun {
  bool started = false;
  std::string start_error;
  bool timed_out = false;
  int status = 0;
  std::string out, err;
  double ms = 0;
};

/// The child's environment: ours, with every sanitizer told to leave SIGSEGV, SIGBUS, SIGFPE and
/// SIGABRT alone. A sanitized build (asan/ubsan/tsan presets) would otherwise catch a plugin's crash,
/// print its report and exit with its own exit code, and the parent could not tell a crash from an
/// exit; with these the child dies by the signal, as an uninstrumented one does. Later flags win in
/// a sanitizer's option string, so they are appended to whatever the user set.
std::vector<std::string> child_environment() {
  static constexpr std::array<const char*, 3> kSanitizers{"ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"};
  static constexpr const char* kKeepSignals = "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_abort=0";
  std::vector<std::string> env;
  std::array<bool, kSanitizers.size()> seen{};
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry = *e;
    for (size_t k = 0; k < kSanitizers.size(); ++k) {
      const std::string prefix = std::string(kSanitizers[k]) + "=";
      if (!entry.starts_with(prefix)) continue;
      seen[k] = true;
      entry += entry.size() > prefix.size() ? std::string(":") + kKeepSignals : kKeepSignals;
    }
    env.push_back(std::move(entry));
  }
  for (size_t k = 0; k < kSanitizers.size(); ++k) {
    if (!seen[k]) env.push_back(std::string(kSanitizers[k]) + "=" + kKeepSignals);
  }
  return env;
}

/// A sanitizer's report in the child's stderr ("==123==ERROR: AddressSanitizer: ...", "...: runtime
/// error: ...", "WARNING: ThreadSanitizer: ..."): its first line, or "" when there is none.
std::string sanitizer_report(const std::string& err) {
  static constexpr std::array<const char*, 4> kMarks{"ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                                                     "WARNING: ThreadSanitizer", ": runtime error: "};
  size_t at = std::string::npos;
  for (const char* mark : kMarks) at = std::min(at, err.find(mark));
  if (at == std::string::npos) return {};
  const size_t begin = err.rfind('\n', at);
  const size_t from = begin == std::string::npos ? 0 : begin + 1;
  const size_t end = err.find('\n', at);
  return err.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

ChildRun run_child(const std::string& helper, const std::vector<std::string>& args, int timeout_ms) {
  ChildRun run;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    run.start_error = "pipe: " + errno_text(errno);
    return run;
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    run.start_error = "pipe: " + errno_text(errno);
    ::close(out[0]);
    ::close(out[1]);
    return run;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(helper.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = child_environment();
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, helper.c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    run.start_error = "cannot start " + helper + ": " + errno_text(rc);
    ::close(out[0]);
    ::close(err[0]);
    return run;
  }
  run.started = true;
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  std::array<pollfd, 2> fds{{{out[0], POLLIN, 0}, {err[0], POLLIN, 0}}};
  std::array<std::string*, 2> sinks{&run.out, &run.err};
  int open_fds = 2;
  bool exited = false;
  while (true) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      run.timed_out = true;
      break;
    }
    if (open_fds == 0) {
      // Both pipes closed: wait for the exit (a child may close them and go on).
      pid_t w = ::waitpid(pid, &run.status, WNOHANG);
      if (w == pid) {
        exited = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    const int wait_ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    const int n = ::poll(fds.data(), fds.size(), wait_ms);
    if (n < 0 && errno != EINTR) break;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      char buf[4096];
      const ssize_t got = ::read(fds[k].fd, buf, sizeof(buf));
      if (got > 0) {
        sinks[k]->append(buf, static_cast<size_t>(got));
        if (sinks[k]->size() > (size_t{1} << 20)) sinks[k]->erase(0, sinks[k]->size() - (size_t{1} << 19));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      }
    }
  }
  if (!exited) {
    if (run.timed_out) ::kill(pid, SIGKILL);
    while (::waitpid(pid, &run.status, 0) < 0 && errno == EINTR) {
    }
  }
  for (pollfd& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  run.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return run;
}

/// The last stage the child announced, and its result line (or null).
struct ChildReport {
  std::string stage = "starting";
  nlohmann::json result;
};

ChildReport parse_report(const std::string& out) {
  ChildReport r;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.starts_with("stage ")) r.stage = line.substr(6);
    if (line.starts_with("result ")) r.result = nlohmann::json::parse(line.substr(7), nullptr, false);
  }
  return r;
}

std::string stderr_tail(std::string err) {
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  if (err.empty()) return {};
  if (err.size() > kStderrTail) err = "..." + err.substr(err.size() - kStderrTail);
  return "; its last output: " + err;
}

}  // namespace

std::optional<ChildProbe> cached_child_probe(const std::string& path, const std::string& options_json,
                                             int timeout_ms) {
  return cached_probe(cache_key(path, options_json, timeout_ms));
}

std::string probe_cache_key(const std::string& path, const std::string& options_json, int timeout_ms) {
  return cache_key(path, options_json, timeout_ms);
}

std::string plugin_file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "cannot read \"" + path + "\": " + errno_text(errno);
  if (!S_ISREG(st.st_mode)) return not_regular(st.st_mode);  // by its type: a FIFO is never opened
  if (st.st_size == 0) return "empty file; a plugin is a shared library file";
  if (st.st_size < kMinPluginBytes) {
    return "not a loadable shared library: " + std::to_string(st.st_size) + " bytes is too small for an ELF file";
  }
  if (st.st_size > kMaxPluginBytes) {
    return "file of " + std::to_string(st.st_size) + " bytes is larger than any plugin (at most 4 GiB)";
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return "cannot open \"" + path + "\": " + errno_text(errno);
  struct stat opened {};
  std::array<unsigned char, 4> magic{};
  const bool regular = ::fstat(fd, &opened) == 0 && S_ISREG(opened.st_mode);
  const ssize_t got = regular ? ::read(fd, magic.data(), magic.size()) : -1;
  ::close(fd);
  if (!regular) return not_regular(opened.st_mode);  // swapped since the stat above
  if (got != 4 || magic[0] != 0x7f || magic[1] != 'E' || magic[2] != 'L' || magic[3] != 'F') {
    return "not a loadable shared library: not an ELF file (no ELF magic number at its start)";
  }
  return {};
}

std::string probe_helper_path() {
  if (const char* env = std::getenv("STRATA_PLUGIN_PROBE_HELPER"); env != nullptr && *env != '\0') return env;
  return (fs::path(library_directory()) / ".." / "libexec" / "strata" / "strata-plugin-probe")
      .lexically_normal()
      .string();
}

ChildProbe probe_in_child(const std::string& path, const std::string& options_json, int timeout_ms) {
  const std::string key = cache_key(path, options_json, timeout_ms);
  if (std::optional<ChildProbe> hit = cached_probe(key)) return *hit;
  const std::string helper = probe_helper_path();
  if (::access(helper.c_str(), X_OK) != 0) return {};  // how == "": no helper
  ChildRun run = run_child(helper, {"--plugin", path, "--options", options_json}, timeout_ms);
  if (!run.started) {
    logger("plugin")->warn("cannot probe {} in a child process: {}", path, run.start_error);
    return {};
  }
  char ms[32];
  std::snprintf(ms, sizeof(ms), "%.0f ms", run.ms);
  ChildProbe p;
  p.how = std::string("child process, ") + ms;
  ChildReport report = parse_report(run.out);
  const std::string during = " while " + report.stage;
  if (run.timed_out) {
    p.reason = "hung in a child probe: no answer within " + std::to_string(timeout_ms) + " ms (plugins.probe_timeout_ms)" +
               during + "; the child was killed" + stderr_tail(run.err);
  } else if (WIFSIGNALED(run.status)) {
    const int sig = WTERMSIG(run.status);
    p.reason = "crashed in a child probe: signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")" + during +
               stderr_tail(run.err);
  } else if (report.result.is_object() && report.result.contains("ok") && report.result["ok"].is_boolean()) {
    p.ok = report.result["ok"].get<bool>();
    if (!p.ok) {
      const auto reason = report.result.find("reason");
      p.reason = reason != report.result.end() && reason->is_string() ? reason->get<std::string>()
                                                                      : "refused by the child probe";
    }
    // What the plugin declared decides what its cached answer depends on;
    // a malformed declaration counts as none (the whole environment).
    if (p.ok && report.result.contains("environment")) {
      if (auto declared = declared_names(report.result["environment"])) p.environment = std::move(*declared);
    }
  } else if (const std::string sanitizer = sanitizer_report(run.err); !sanitizer.empty()) {
    // A sanitizer that does not take the options of child_environment() (or a report of its own,
    // such as a heap overflow): the plugin crashed all the same, and its report says where.
    p.reason = "crashed in a child probe: a sanitizer stopped it (exit status " +
               std::to_string(WIFEXITED(run.status) ? WEXITSTATUS(run.status) : -1) + ")" + during + ": " + sanitizer +
               stderr_tail(run.err);
  } else {
    p.reason = "ended a child probe with exit status " +
               std::to_string(WIFEXITED(run.status) ? WEXITSTATUS(run.status) : -1) + during +
               " before reporting (the plugin ended the process)" + stderr_tail(run.err);
  }
  remember_probe(key, p);
  return p;
}

namespace {

/// The table's probe_environment (ABI 2.1) as JSON: null when the table
/// lacks the field or leaves it NULL; at most kMaxDeclaredNames names (a
/// list without its terminator within that many counts as none).
nlohmann::json declared_environment(const strata_plugin_api& api) {
  if (!STRATA_HAS_FIELD(&api, strata_plugin_api, probe_environment) || api.probe_environment == nullptr) {
    return nullptr;
  }
  nlohmann::json names = nlohmann::json::array();
  for (size_t k = 0; k <= kMaxDeclaredNames; ++k) {
    const char* name = api.probe_environment[k];
    if (name == nullptr) return names;
    if (k == kMaxDeclaredNames || std::strlen(name) > kMaxDeclaredNameBytes) break;
    names.push_back(name);
  }
  return nullptr;
}

}  // namespace

int plugin_probe_main(int argc, char** argv) {
  std::string path, options = "{}";
  for (int k = 1; k + 1 < argc; k += 2) {
    const std::string flag = argv[k];
    if (flag == "--plugin") path = argv[k + 1];
    if (flag == "--options") options = argv[k + 1];
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: strata-plugin-probe --plugin PATH [--options JSON]\n"
                         "Probes one Strata plugin for the runtime, which starts it; not meant to be run by hand.\n");
    return 2;
  }
  auto stage = [](const std::string& what) {
    std::printf("stage %s\n", what.c_str());
    std::fflush(stdout);
  };
  auto result = [](bool ok, const std::string& reason, nlohmann::json environment = nullptr) {
    const nlohmann::json line{{"ok", ok}, {"reason", reason}, {"environment", std::move(environment)}};
    std::printf("result %s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    std::fflush(stdout);
  };
  try {
    // A runtime with no plugins, so that host services the plugin calls
    // (register_kernels looks at the devices) never load plugins here.
    ::unsetenv("STRATA_PLUGIN_PATH");
    Config empty = Config::builtin_default();
    empty.plugin_paths.clear();
    runtime().configure(empty);

    Config cfg = empty;
    cfg.allow_insecure_permissions = true;  // the parent checked
    cfg.isolate_plugins = false;
    Candidate candidate{path, plugin_name_from_path(path), {}};
    if (!candidate.name.empty()) {
      DeviceConfig dc;
      dc.options_json = options;
      cfg.devices[candidate.name] = dc;
    }
    PluginInfo info;
    stage("loading the library and running its probe");
    std::unique_ptr<Manifest> manifest = read_manifest(candidate, cfg, info);
    if (!manifest) {
      result(false, info.reason);
      std::_Exit(0);
    }
    stage("running its init");
    std::unique_ptr<LoadedPlugin> plugin = init_plugin(*manifest, cfg, info);
    if (!plugin) {
      result(false, info.reason);
      std::_Exit(0);
    }
    std::vector<std::string> warnings;
    for (int32_t i = 0; i < plugin->device_count; ++i) {
      stage("opening device " + std::to_string(i) + " (device_props, get_kernels)");
      auto* record = new DeviceRecord(*plugin, i, i);  // never freed: the process ends below
      record->id = plugin->name + ":" + std::to_string(i);
      open_device(*record, warnings);  // a refused device is the parent's to report
    }
    stage("running its shutdown");
    shutdown_plugin(*plugin);
    result(true, "", declared_environment(*manifest->api));
  } catch (const std::exception& e) {
    result(false, std::string("the child probe failed: ") + e.what());
  }
  std::_Exit(0);
}

}  // namespace strata::detail
