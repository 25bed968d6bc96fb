// ops.cpp — `strata ops`: the op registry, and the generated SDK header
// strata/plugin/strata_ops.h (`strata ops --c-header`).
#include "commands.hpp"

#include <strata/strata.hpp>

#include <algorithm>
#include <cctype>
#include <iostream>

namespace strata::cli {

namespace {

/// Ops a backend writes kernels for: the core's primitives and composites
/// (views and joins never reach a kernel).
bool is_kernel_op(const OpInfo& op) {
  return op.plugin.empty() && (op.kind == "primitive" || op.kind == "composite");
}

std::string macro_name(const std::string& qualified) {
  std::string bare = qualified.substr(qualified.find("::") + 2);
  std::string m = "STRATA_OP_";
  for (char c : bare) m += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return m;
}

void print_c_header(std::vector<OpInfo> ops) {
  std::sort(ops.begin(), ops.end(), [](const OpInfo& a, const OpInfo& b) { return a.name < b.name; });
  std::cout << "/* strata_ops.h — the core's op names as constants, for plugin kernel tables.\n"
               " *\n"
               " * Generated from the core's op registry by `strata ops --c-header`; do not\n"
               " * edit. The test ops_header_current fails when it is out of date. Contracts\n"
               " * (operands, attributes, semantics) are in docs/ops.md. */\n"
               "#ifndef STRATA_OPS_H\n"
               "#define STRATA_OPS_H\n\n";
  uint32_t version = 1;
  for (const OpInfo& op : ops) {
    if (!is_kernel_op(op)) continue;
    std::cout << "#define " << macro_name(op.name) << " \"" << op.name << "\"\n";
    version = std::max(version, op.version);
  }
  std::cout << "\n/* Every op above is at contract version " << version << ". */\n"
            << "#define STRATA_OP_VERSION " << version << "\n\n#endif /* STRATA_OPS_H */\n";
}

}  // namespace

int run_ops(const OpsOptions& options) {
  std::vector<OpInfo> ops = runtime().ops();
  if (options.c_header) {
    print_c_header(std::move(ops));
    return kOk;
  }
  for (const OpInfo& op : ops) {
    std::cout << op.name << "  " << op.kind << "  " << (op.n_inputs < 0 ? std::string("n") : std::to_string(op.n_inputs))
              << " -> " << op.n_outputs << "  v" << op.version << (op.differentiable ? "  vjp" : "")
              << (op.forward_mode ? "  jvp" : "") << (op.plugin.empty() ? "" : "  (plugin " + op.plugin + ")")
              << (op.doc.empty() ? "" : "  — " + op.doc) << "\n";
  }
  return kOk;
}

}  // namespace strata::cli
