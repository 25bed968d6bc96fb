// config.cpp — the public Config API: loading a configuration (from a file,
// from text, or the built-in default) and the queries on it.
//
// The JSON is read by config_json.cpp and checked by config_validate.cpp;
// config_internal.hpp lists every part of the loader.
#include "config_internal.hpp"

#include <strata/config.hpp>
#include <strata/error.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

namespace strata {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kBuiltinSource = "<built-in default>";

}  // namespace

Config Config::from_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  auto fail_errno = [&](int err) {
    throw ConfigError(path + ": cannot open configuration file: " +
                      std::error_code(err, std::generic_category()).message());
  };
  if (fd < 0) fail_errno(errno);
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      fail_errno(err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
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
