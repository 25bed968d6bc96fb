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

std::string upper(const std::string& s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

/// The header a backend includes for the op names, their arity and tags
/// (an X-macro over every kernel op) and the attribute names the ops take.
void print_c_header(std::vector<OpInfo> ops) {
  std::sort(ops.begin(), ops.end(), [](const OpInfo& a, const OpInfo& b) { return a.name < b.name; });
  std::erase_if(ops, [](const OpInfo& op) { return !is_kernel_op(op); });
  std::cout << "/* strata_ops.h — the core's op names as constants, for plugin kernel tables,\n"
               " * with each op's arity, tags and attribute names.\n"
               " *\n"
               " * Generated from the core's op registry by `strata ops --c-header`; do not\n"
               " * edit. The test ops_header_current fails when it is out of date. Contracts\n"
               " * (operands, attributes, semantics) are in docs/ops.md. */\n"
               "#ifndef STRATA_OPS_H\n"
               "#define STRATA_OPS_H\n\n";
  uint32_t version = 1;
  for (const OpInfo& op : ops) {
    std::cout << "#define " << macro_name(op.name) << " \"" << op.name << "\"\n";
    version = std::max(version, op.version);
  }
  std::cout << "\n/* Every op above is at contract version " << version << ". */\n"
            << "#define STRATA_OP_VERSION " << version << "\n";
  std::cout << "\n/* What an op is (docs/ops.md, \"Tags and attributes\"): bits of the tags\n"
               " * column of STRATA_OP_LIST. */\n";
  const std::vector<std::string> tags = op_tag_list();
  for (size_t k = 0; k < tags.size(); ++k) {
    std::cout << "#define STRATA_OP_TAG_" << upper(tags[k]) << " (1u << " << k << ")\n";
  }
  std::cout << "\n/* Every op above as X(MACRO_SUFFIX, name, inputs, outputs, tags); inputs -1\n"
               " * is any number. A backend's tables and tests can iterate it:\n"
               " *   #define X(id, name, n_in, n_out, tags) ...\n"
               " *   STRATA_OP_LIST(X)\n"
               " *   #undef X */\n"
               "#define STRATA_OP_LIST(X)";
  for (const OpInfo& op : ops) {
    std::string tag_expr;
    for (const std::string& t : op.tags) tag_expr += (tag_expr.empty() ? "" : " | ") + ("STRATA_OP_TAG_" + upper(t));
    std::cout << " \\\n  X(" << macro_name(op.name).substr(std::string("STRATA_OP_").size()) << ", \"" << op.name
              << "\", " << op.n_inputs << ", " << op.n_outputs << ", " << (tag_expr.empty() ? "0u" : tag_expr) << ")";
  }
  std::cout << "\n\n/* The attribute names the ops above take, each once; which op takes\n"
               " * which, of which kind, is in docs/ops.md and `strata ops`. */\n";
  std::vector<std::string> names;
  for (const OpInfo& op : ops) {
    for (const OpAttrInfo& a : op.attrs) names.push_back(a.name);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (const std::string& n : names) std::cout << "#define STRATA_ATTR_NAME_" << upper(n) << " \"" << n << "\"\n";
  std::cout << "\n#endif /* STRATA_OPS_H */\n";
}

}  // namespace

int run_ops(const OpsOptions& options) {
  std::vector<OpInfo> ops = runtime().ops();
  if (options.c_header) {
    print_c_header(std::move(ops));
    return kOk;
  }
  for (const OpInfo& op : ops) {
    std::string tags, attrs;
    for (const std::string& t : op.tags) tags += (tags.empty() ? "" : ",") + t;
    for (const OpAttrInfo& a : op.attrs) {
      attrs += (attrs.empty() ? "" : ", ") + a.name + " " + a.kind + (a.required ? "" : "?");
    }
    std::cout << op.name << "  " << op.kind << "  " << (op.n_inputs < 0 ? std::string("n") : std::to_string(op.n_inputs))
              << " -> " << op.n_outputs << "  v" << op.version << (op.differentiable ? "  vjp" : "")
              << (op.forward_mode ? "  jvp" : "") << (tags.empty() ? "" : "  [" + tags + "]")
              << (attrs.empty() ? "" : "  (" + attrs + ")") << (op.plugin.empty() ? "" : "  (plugin " + op.plugin + ")")
              << (op.doc.empty() ? "" : "  — " + op.doc) << "\n";
  }
  return kOk;
}

}  // namespace strata::cli
