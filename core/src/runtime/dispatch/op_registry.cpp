// op_registry.cpp — the op table: every op's definition by id, found by name
// (the core's and plugin-defined ops), and the lookup handed down to the
// device records for the names in a plugin's kernel table.
#include "runtime/dispatch/op.hpp"

#include "base/config_internal.hpp"
#include "runtime/device/device_record.hpp"

#include <strata/error.hpp>
#include <strata/plugin_info.hpp>

#include <cstring>
#include <string>
#include <vector>

namespace strata::detail {

namespace {

std::vector<const OpDef*>& registry() {
  static auto* ops = [] {  // never destroyed: ops outlive static teardown
    auto* v = new std::vector<const OpDef*>();
    v->reserve(kMaxOps);  // never reallocates (see kMaxOps)
    return v;
  }();
  return *ops;
}

constexpr std::string_view kCoreNamespace = "strata::";

/// The core's op names, for the configuration's "fallback.ops" and "amp"
/// lists (checked by the loader in the layer below, which cannot see the
/// registry). Plugin-defined ops are registered later and namespaced; the
/// loader leaves those alone.
std::vector<std::string> core_op_names() {
  std::vector<std::string> names;
  for (const OpDef* op : registry()) {
    if (op->plugin_op == nullptr) names.emplace_back(op->name);
  }
  return names;
}

[[maybe_unused]] const bool g_op_names_installed = (config::set_op_names_source(&core_op_names), true);

}  // namespace

const OpDef& define_op(OpDef def) {
  // Callers check both first (the core's ops are few and unique; a plugin's
  // register_op names what it refuses): what reaches here is a bug, thrown
  // rather than abort()ed so a plugin's init can never end the process.
  if (find_op(def.name) != nullptr) throw Error("op '" + std::string(def.name) + "' is defined twice");
  if (registry().size() >= kMaxOps) {
    throw Error("op '" + std::string(def.name) + "' does not fit the op table of " + std::to_string(kMaxOps) + " ops");
  }
  auto* stored = new OpDef(def);
  stored->id = static_cast<int>(registry().size());
  if (def.name.find("::") == std::string_view::npos) {
    stored->kernel_name_storage = std::string(kCoreNamespace) + std::string(def.name);
    stored->kernel_name = stored->kernel_name_storage;
  } else {
    stored->kernel_name = stored->name;
  }
  registry().push_back(stored);
  return *stored;
}

const std::vector<const OpDef*>& all_ops() { return registry(); }

const OpDef* find_op(std::string_view name) {
  for (const OpDef* op : registry()) {
    if (op->name == name) return op;
  }
  return nullptr;
}

const OpDef* find_kernel_op(std::string_view qualified) {
  if (qualified.starts_with(kCoreNamespace)) {
    std::string_view bare = qualified.substr(kCoreNamespace.size());
    if (bare.find("::") != std::string_view::npos) return nullptr;
    return find_op(bare);
  }
  if (qualified.find("::") == std::string_view::npos) return nullptr;
  return find_op(qualified);
}

namespace {
/// op_tag's bits by name, in bit order.
constexpr const char* kTagNames[] = {"pointwise", "broadcasting", "reduction", "view",     "data_movement",
                                     "linalg",    "indexing",     "random",    "creation", "optimizer",
                                     "along_dim", "backward",     "predicate", "complex",  "autograd"};
static_assert(op_tag::autograd == OpTags{1} << (std::size(kTagNames) - 1), "a tag without its name in kTagNames");
}  // namespace

std::vector<std::string> op_tag_names(OpTags tags) {
  std::vector<std::string> out;
  for (size_t bit = 0; bit < std::size(kTagNames); ++bit) {
    if ((tags & (OpTags{1} << bit)) != 0) out.emplace_back(kTagNames[bit]);
  }
  return out;
}

const char* dtype_family_name(DTypeFamily family) {
  switch (family) {
    case DTypeFamily::unspecified: return "unspecified";
    case DTypeFamily::any: return "any";
    case DTypeFamily::numeric: return "numeric";
    case DTypeFamily::floating: return "floating";
    case DTypeFamily::accumulate: return "accumulate";
    case DTypeFamily::compare: return "compare";
    case DTypeFamily::logical: return "logical";
    case DTypeFamily::float_only: return "float_only";
    case DTypeFamily::index: return "index";
  }
  return "?";
}

const char* autocast_category_name(AutocastCategory category) {
  switch (category) {
    case AutocastCategory::none: return "none";
    case AutocastCategory::lower_precision: return "lower_precision";
    case AutocastCategory::fp32: return "fp32";
    case AutocastCategory::promote: return "promote";
  }
  return "?";
}

KernelOpRef kernel_op_ref(const char* qualified) {
  KernelOpRef ref;
  if (const OpDef* op = find_kernel_op(qualified)) {
    ref.id = op->id;
    ref.version = op->version;
    ref.kernel_name = op->kernel_name;
  } else if (std::strstr(qualified, "::") == nullptr && find_op(qualified) != nullptr) {
    ref.hint = " (ABI 2.0 names are namespaced: strata::" + std::string(qualified) + ")";
  }
  return ref;
}

}  // namespace strata::detail

namespace strata {

std::vector<std::string> op_tag_list() { return {std::begin(detail::kTagNames), std::end(detail::kTagNames)}; }

}  // namespace strata
