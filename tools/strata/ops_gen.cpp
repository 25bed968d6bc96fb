// ops_gen.cpp — strata_ops_gen, the build's generator of the files read off
// the op registry: the SDK header strata/plugin/strata_ops.h (--c-header) and
// the op table of docs/ops.md (--markdown), as `strata ops` prints them. A
// program of its own, linked to the core only, with no plugin loaded: the
// CLI is built after the CPU plugin, which names every op's constant, so a
// new op's constant must exist before the CLI can be built
// (tools/CMakeLists.txt, targets strata_ops_header and strata_ops_doc).
#include "commands.hpp"

#include <strata/strata.hpp>

#include <exception>
#include <iostream>
#include <string_view>

int main(int argc, char** argv) {
  strata::cli::OpsOptions options;
  const std::string_view mode = argc == 2 ? argv[1] : "";
  if (mode == "--c-header") {
    options.c_header = true;
  } else if (mode == "--markdown") {
    options.markdown = true;
  } else {
    std::cerr << "usage: strata_ops_gen --c-header | --markdown\n";
    return 2;
  }
  try {
    // The core's ops only: no plugin is loaded (none defines a core op).
    strata::Config config = strata::Config::builtin_default();
    config.plugin_paths.clear();
    config.plugin_paths_given = true;
    strata::runtime().configure(config);
    return strata::cli::run_ops(options);
  } catch (const std::exception& e) {
    std::cerr << "strata_ops_gen: " << e.what() << "\n";
    return 1;
  }
}
