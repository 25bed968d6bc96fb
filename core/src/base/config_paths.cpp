// config_paths.cpp — paths in a configuration: expanding ${STRATA_LIBDIR},
// ${CONFIG_DIR} and ${HOME}, resolving relative paths, and finding the
// folder of libstrata.so.
#include "base/config_internal.hpp"

#include <strata/error.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace strata {
namespace {

namespace fs = std::filesystem;

char anchor;  // an object inside libstrata.so, for dladdr

}  // namespace

namespace detail::config {

std::optional<std::string> expand(const std::string& path, const std::string& config_dir,
                                  std::string& error) {
  std::string out;
  std::size_t i = 0;
  while (i < path.size()) {
    if (path[i] != '$' || i + 1 >= path.size() || path[i + 1] != '{') {
      out += path[i++];
      continue;
    }
    auto close = path.find('}', i + 2);
    if (close == std::string::npos) {
      error = "unterminated variable reference \"${\" in " + quote(path);
      return std::nullopt;
    }
    std::string name = path.substr(i + 2, close - i - 2);
    if (name == "STRATA_LIBDIR") {
      out += library_directory();
    } else if (name == "CONFIG_DIR") {
      out += config_dir;
    } else if (name == "HOME") {
      const char* home = std::getenv("HOME");
      std::string value = home != nullptr ? home : "";
      if (value.empty()) {
        // Fall back on the password database, as shells do.
        struct passwd pw {};
        struct passwd* result = nullptr;
        std::vector<char> buf(16384);
        if (getpwuid_r(getuid(), &pw, buf.data(), buf.size(), &result) == 0 && result != nullptr &&
            result->pw_dir != nullptr) {
          value = result->pw_dir;
        }
      }
      if (value.empty()) {
        error = "${HOME} is used in " + quote(path) + " but HOME is not set";
        return std::nullopt;
      }
      out += value;
    } else {
      std::string suggestion = closest(name, {"STRATA_LIBDIR", "CONFIG_DIR", "HOME"});
      error = "unknown variable ${" + name + "} in " + quote(path) +
              " (expected one of: ${STRATA_LIBDIR}, ${CONFIG_DIR}, ${HOME})";
      if (!suggestion.empty()) error += "; did you mean ${" + suggestion + "}?";
      return std::nullopt;
    }
    i = close + 1;
  }
  return out;
}

std::string resolve(const std::string& path, const std::string& base) {
  fs::path p(path);
  if (p.is_relative()) p = fs::path(base) / p;
  fs::path out;
  bool trailing_slash = !path.empty() && path.back() == '/';
  for (const auto& part : p) {
    if (part == "." || part.empty()) continue;
    out /= part;
  }
  std::string s = out.string();
  if (trailing_slash && !s.empty() && s.back() != '/') s += '/';
  return s;
}

std::string absolute_dir(const std::string& dir) {
  std::error_code ec;
  fs::path p = dir.empty() ? fs::current_path(ec) : fs::absolute(fs::path(dir), ec);
  if (ec) p = fs::path(dir.empty() ? "." : dir);
  std::string s = resolve(p.string(), "/");
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

std::string log_file_problem(const std::string& path) {
  auto os_error = [](int err) { return std::error_code(err, std::generic_category()).message(); };
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return "cannot open log file " + quote(path) + " for appending: it is a directory";
    int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return "cannot open log file " + quote(path) + " for appending: " + os_error(errno);
    ::close(fd);
    return {};
  }
  if (errno != ENOENT) return "cannot open log file " + quote(path) + " for appending: " + os_error(errno);
  // A new file: the nearest folder above it that exists must take it.
  fs::path dir = fs::path(path).parent_path();
  for (;;) {
    if (dir.empty()) dir = ".";
    if (::stat(dir.c_str(), &st) == 0) break;
    if (errno != ENOENT || dir == "." || dir == dir.root_path()) {
      return "cannot create log file " + quote(path) + ": " + quote(dir.string()) + ": " + os_error(errno);
    }
    dir = dir.parent_path();
  }
  if (!S_ISDIR(st.st_mode)) {
    return "cannot create log file " + quote(path) + ": " + quote(dir.string()) + " is not a directory";
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return "cannot create log file " + quote(path) + " in " + quote(dir.string()) + ": " + os_error(errno);
  }
  return {};
}

}  // namespace detail::config

std::string expand_path_variables(const std::string& path, const std::string& config_dir) {
  std::string error;
  auto expanded = detail::config::expand(path, config_dir, error);
  if (!expanded) throw ConfigError(error);
  return *expanded;
}

std::string library_directory() {
  static const std::string dir = [] {
    Dl_info info{};
    if (dladdr(&anchor, &info) == 0 || info.dli_fname == nullptr || info.dli_fname[0] == '\0') {
      return std::string(".");
    }
    std::error_code ec;
    // canonical() resolves "bin/../lib" (an $ORIGIN rpath) and symlinks alike.
    fs::path lib = fs::canonical(fs::path(info.dli_fname), ec);
    if (ec) lib = fs::absolute(fs::path(info.dli_fname), ec);
    if (ec) lib = fs::path(info.dli_fname);
    std::string parent = detail::config::resolve(lib.parent_path().string(), "/");
    while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
    return parent;
  }();
  return dir;
}

}  // namespace strata
