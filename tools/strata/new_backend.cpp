// new_backend.cpp — `strata new-backend NAME [--dir DIR]`: writes a plugin
// project that builds against the installed SDK (new_backend_templates.hpp).
//
// Refuses, writing nothing: a name that is not a valid plugin name (lower
// case letter, then lower case letters, digits or '_', at most 32), the name
// of an in-tree backend, and a target folder that exists and is not empty.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <system_error>
#include <vector>

#include "commands.hpp"
#include "new_backend_templates.hpp"

namespace strata::cli {
namespace {

namespace fs = std::filesystem;

/// Why `name` cannot name a plugin ("" when it can).
std::string name_problem(const std::string& name) {
  if (name.empty() || name.size() > 32) return "a plugin name has 1 to 32 characters";
  if (name[0] < 'a' || name[0] > 'z') return "a plugin name starts with a lower case letter (a-z)";
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return std::string("a plugin name has only lower case letters, digits and '_' (found '") + c + "')";
    }
  }
  for (const char* taken : {"cpu", "cuda", "hip", "vulkan", "strata"}) {
    if (name == taken) return "\"" + name + "\" is the name of Strata's own backend or namespace";
  }
  return {};
}

std::string substitute(std::string text, const std::string& name) {
  const std::string key = "@NAME@";
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + name.size())) {
    text.replace(at, key.size(), name);
  }
  return text;
}

}  // namespace

int run_new_backend(const std::string& name, const std::string& dir_option) {
  if (std::string why = name_problem(name); !why.empty()) {
    std::cerr << "strata new-backend: invalid name \"" << name << "\": " << why << "\n";
    return kBadInput;
  }
  const fs::path dir = dir_option.empty() ? fs::path(name) : fs::path(dir_option);
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) {
      std::cerr << "strata new-backend: " << dir.string() << " exists and is not a folder; nothing was written\n";
      return kBadInput;
    }
    if (!fs::is_empty(dir, ec) || ec) {
      std::cerr << "strata new-backend: " << dir.string()
                << " exists and is not empty; nothing was written (choose another --dir)\n";
      return kBadInput;
    }
  }
  const std::vector<std::pair<fs::path, const char*>> files = {
      {"CMakeLists.txt", templates::kCMakeLists},
      {fs::path("src") / "plugin.cpp", templates::kPlugin},
      {"README.md", templates::kReadme},
      {fs::path("tests") / "step.json", templates::kStepGraph},
  };
  fs::create_directories(dir / "src", ec);
  if (!ec) fs::create_directories(dir / "tests", ec);
  if (ec) {
    std::cerr << "strata new-backend: cannot create the folders of " << dir.string() << ": " << ec.message() << "\n";
    return kFailure;
  }
  for (const auto& [relative, text] : files) {
    const fs::path path = dir / relative;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << substitute(text, name);
    if (!out.flush()) {
      std::cerr << "strata new-backend: cannot write " << path.string() << "\n";
      return kFailure;
    }
  }
  std::cout << "Created the backend \"" << name << "\" in " << dir.string() << ":\n"
            << "  CMakeLists.txt  src/plugin.cpp  tests/step.json  README.md\n"
            << "Build it against this SDK and check it:\n"
            << "  cmake -S " << dir.string() << " -B " << (dir / "build").string()
            << " -DCMAKE_PREFIX_PATH=<Strata install prefix>\n"
            << "  cmake --build " << (dir / "build").string() << "\n"
            << "  strata plugin check " << (dir / "build" / ("libstrata_plugin_" + name + ".so")).string() << "\n";
  return kOk;
}

}  // namespace strata::cli
