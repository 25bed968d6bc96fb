// config.cpp — the public Config API: loading a configuration (from a file,
// from text, or the built-in default) and the queries on it.
//
// The JSON is read by config_json.cpp and checked by config_validate.cpp;
// config_internal.hpp lists every part of the loader.
#include "base/config_internal.hpp"

#include <strata/config.hpp>
#include <strata/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kBuiltinSource = "<built-in default>";

}  // namespace

Config Config::from_file(const std::string& path) {
  using detail::config::kMaxConfigBytes;
  // O_NONBLOCK: opening a FIFO without a writer must not wait for one. It is
  // cleared again below so that reads from pipes wait for their data.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  auto fail_errno = [&](int err) {
    throw ConfigError(path + ": cannot open configuration file: " +
                      std::error_code(err, std::generic_category()).message());
  };
  if (fd < 0) fail_errno(errno);
  auto fail = [&](const std::string& problem) {
    ::close(fd);
    throw ConfigError(path + ": " + problem);
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail_errno(err);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail_errno(EISDIR);
  }
  const std::string limit = " (at most " + std::to_string(kMaxConfigBytes) + " bytes, 1 MiB)";
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > kMaxConfigBytes) {
    fail("configuration file too large: " + std::to_string(st.st_size) + " bytes" + limit);
  }
  if (int flags = ::fcntl(fd, F_GETFL); flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  // A bounded read: a device (/dev/zero) or a pipe is read up to one byte
  // past the limit, and refused there.
  std::string text;
  char buf[65536];
  while (text.size() <= kMaxConfigBytes) {
    std::size_t want = std::min(sizeof buf, kMaxConfigBytes + 1 - text.size());
    ssize_t n = ::read(fd, buf, want);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      fail_errno(err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  if (text.size() > kMaxConfigBytes) {
    fail("configuration file too large: read more than the limit of " + std::to_string(kMaxConfigBytes) +
         " bytes (1 MiB) without reaching its end");
  }
  ::close(fd);
  std::error_code ec;
  fs::path abs = fs::absolute(fs::path(path), ec);
  std::string dir = ec ? fs::path(path).parent_path().string() : abs.parent_path().string();
  return from_string(text, path, dir);
}

Config Config::from_string(const std::string& text, const std::string& source,
                           const std::string& base_dir) {
  detail::config::Json doc = detail::config::parse_document(text, source);
  return detail::config::validate_document(doc, source, detail::config::absolute_dir(base_dir));
}

Config Config::builtin_default() {
  Config cfg;
  cfg.source = std::string(kBuiltinSource);
  cfg.plugin_paths = {library_directory() + "/strata/plugins"};
  return cfg;
}

Config Config::find() {
  if (const char* env = std::getenv("STRATA_CONFIG"); env != nullptr && *env != '\0') return from_file(env);
  const fs::path installed = fs::path(library_directory()) / ".." / "share" / "strata" / "configs" / "default.json";
  std::error_code ec;
  if (fs::exists(installed, ec)) return from_file(installed.lexically_normal().string());
  return builtin_default();
}

DeviceConfig Config::device(const std::string& backend, int index) const {
  if (index >= 0) {
    auto it = devices.find(backend + ":" + std::to_string(index));
    if (it != devices.end()) return it->second;
  }
  auto it = devices.find(backend);
  if (it != devices.end()) return it->second;
  return DeviceConfig{};
}

FallbackPolicy Config::fallback_for(const std::string& op) const {
  auto it = fallback_ops.find(op);
  return it != fallback_ops.end() ? it->second : fallback;
}

}  // namespace strata
