// config_validate.cpp — checks a parsed configuration document against what
// docs/configuration.md allows and builds the Config it describes.
//
// The validator walks the document once and throws ConfigError at the first
// problem, as
//   <source>: <JSON pointer>: <what was expected>, found <what was found>
#include "base/config_internal.hpp"

#include <strata/error.hpp>

#include <algorithm>
#include <cctype>
#include <atomic>
#include <cmath>
#include <regex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace strata::detail::config {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kMinProbeTimeoutMs = 100;
constexpr int kMaxProbeTimeoutMs = 600000;
constexpr std::string_view kSizeExpected =
    "a positive size (integer bytes or a string like \"512MiB\")";

bool is_lower_name(std::string_view s) {
  if (s.empty() || s[0] < 'a' || s[0] > 'z') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

bool is_device_key(std::string_view key) {
  auto colon = key.find(':');
  if (colon == std::string_view::npos) return is_lower_name(key);
  if (!is_lower_name(key.substr(0, colon))) return false;
  auto index = key.substr(colon + 1);
  if (index.empty() || index.size() > 9) return false;
  if (index.size() > 1 && index[0] == '0') return false;
  return std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; });
}

class Validator {
 public:
  Validator(std::string source, std::string config_dir)
      : source_(std::move(source)), dir_(std::move(config_dir)) {}

  Config run(const Json& doc) {
    Config cfg;
    cfg.source = source_;
    cfg.plugin_paths = {library_directory() + "/strata/plugins"};
    const std::string root;
    expect_object(doc, root);
    for (const auto& [key, value] : doc.items()) {
      std::string ptr = child(root, key);
      if (key == "$schema") {
        if (!value.is_string()) fail(ptr, "expected a string, found " + describe(value));
      } else if (key == "version") {
        version(value, ptr);
      } else if (key == "plugins") {
        plugins(value, ptr, cfg);
      } else if (key == "prefer") {
        cfg.prefer = names(value, ptr, "backend", "cuda", /*unique=*/true, /*non_empty=*/true);
      } else if (key == "devices") {
        devices(value, ptr, cfg);
      } else if (key == "fallback") {
        fallback(value, ptr, cfg);
      } else if (key == "logging") {
        logging(value, ptr, cfg);
      } else if (key == "amp") {
        amp(value, ptr, cfg);
      } else if (key == "checkpoint") {
        cfg.checkpoint = checkpoint(value, ptr);
      } else {
        unknown_key(key, ptr,
                    {"$schema", "version", "plugins", "prefer", "devices", "fallback", "amp", "checkpoint",
                     "logging"});
      }
    }
    return cfg;
  }

 private:
  [[noreturn]] void fail(const std::string& ptr, const std::string& problem) const {
    throw ConfigError(source_ + ": " + (ptr.empty() ? std::string("/") : ptr) + ": " + problem);
  }

  [[noreturn]] void unknown_key(const std::string& key, const std::string& ptr,
                                std::initializer_list<std::string_view> known) const {
    std::vector<std::string> names(known.begin(), known.end());
    std::string problem =
        "unknown key " + quote(key) + " (expected one of: " + join(names, ", ") + ")";
    std::string suggestion = closest(key, known);
    if (!suggestion.empty()) problem += "; did you mean " + quote(suggestion) + "?";
    fail(ptr, problem);
  }

  void expect_object(const Json& v, const std::string& ptr) const {
    if (!v.is_object()) fail(ptr, "expected an object, found " + describe(v));
  }

  bool boolean(const Json& v, const std::string& ptr) const {
    if (!v.is_boolean()) fail(ptr, "expected true or false, found " + describe(v));
    return v.get<bool>();
  }

  std::string enumeration(const Json& v, const std::string& ptr,
                          std::initializer_list<std::string_view> allowed) const {
    std::string expected = "expected one of " + quoted_list(allowed);
    if (!v.is_string()) fail(ptr, expected + ", found " + describe(v));
    const auto& s = v.get_ref<const std::string&>();
    if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
      std::string problem = expected + ", found " + show(v);
      std::string suggestion = closest(s, allowed);
      if (!suggestion.empty()) problem += "; did you mean " + quote(suggestion) + "?";
      fail(ptr, problem);
    }
    return s;
  }

  FallbackPolicy policy(const Json& v, const std::string& ptr) const {
    return enumeration(v, ptr, {"cpu", "error"}) == "cpu" ? FallbackPolicy::cpu
                                                          : FallbackPolicy::error;
  }

  void version(const Json& v, const std::string& ptr) const {
    auto n = whole_number(v);
    if (!v.is_number()) fail(ptr, "expected the integer 1, found " + describe(v));
    if (!n || *n != 1) {
      fail(ptr, "expected 1 (the only configuration version this Strata reads), found " + show(v));
    }
  }

  /// An op of the registry ("fallback.ops" keys, "amp" lists). Names with a
  /// namespace other than the core's ("acme::swiglu") are ops that plugins
  /// define when they load: they cannot be checked before that.
  void known_op(const std::string& name, const std::string& ptr) const {
    OpNamesSource source = op_names_source();
    if (source == nullptr) return;
    if (name.find("::") != std::string::npos && !name.starts_with("strata::")) return;
    if (!op_names_) {
      op_names_ = source();
      op_set_.insert(op_names_->begin(), op_names_->end());
    }
    if (op_set_.contains(name)) return;
    std::string problem = "expected the name of an op (docs/ops.md), found " + quote(name);
    std::string bare = name.starts_with("strata::") ? name.substr(8) : name;
    std::string suggestion = op_set_.contains(bare) ? bare : closest(name, *op_names_);
    if (!suggestion.empty()) problem += "; did you mean " + quote(suggestion) + "?";
    fail(ptr, problem);
  }

  /// An array of lower-case names ("cuda", "hip"); with `ops`, each one the
  /// name of an op.
  void pins(const Json& v, const std::string& ptr, Config& cfg) const {
    expect_object(v, ptr);
    for (const auto& [name, digest] : v.items()) {
      std::string p = child(ptr, name);
      if (!is_lower_name(name)) {
        fail(p, "expected a plugin name as key (lower case letters, digits, '_' or '-', like \"cpu\"), found " +
                    quote(name));
      }
      const std::string expected = "expected the plugin file's SHA-256 as 64 hexadecimal digits (sha256sum prints it)";
      if (!digest.is_string()) fail(p, expected + ", found " + describe(digest));
      std::string hex = digest.get<std::string>();
      if (hex.size() != 64 || !std::all_of(hex.begin(), hex.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
        fail(p, expected + ", found " + show(digest));
      }
      std::transform(hex.begin(), hex.end(), hex.begin(), [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
      cfg.plugin_pins[name] = hex;
    }
  }

  std::vector<std::string> names(const Json& v, const std::string& ptr, std::string_view what,
                                 std::string_view example, bool unique, bool non_empty, bool ops = false) const {
    if (!v.is_array()) fail(ptr, "expected an array of " + std::string(what) + " names, found " + describe(v));
    if (non_empty && v.empty()) {
      fail(ptr, "expected at least one " + std::string(what) + " name, found []");
    }
    std::vector<std::string> out;
    out.reserve(v.size());
    std::unordered_map<std::string_view, std::size_t> first_at;  // views into `v`: linear, not quadratic
    for (std::size_t i = 0; i < v.size(); ++i) {
      const Json& item = v[i];
      std::string item_ptr = child(ptr, i);
      if (!item.is_string()) fail(item_ptr, "expected a string, found " + describe(item));
      const auto& s = item.get_ref<const std::string&>();
      if (!is_lower_name(s)) {
        fail(item_ptr, "expected a " + std::string(what) + " name (lower case letters, digits, "
                       "'_' or '-', like " + quote(example) + "), found " + show(item));
      }
      if (ops) known_op(s, item_ptr);
      if (unique) {
        auto [it, fresh] = first_at.try_emplace(s, i);
        if (!fresh) {
          fail(item_ptr, "expected each " + std::string(what) + " once, found " + show(item) +
                             " again (first at " + child(ptr, it->second) + ")");
        }
      }
      out.push_back(s);
    }
    return out;
  }

  std::string path(const Json& v, const std::string& ptr) const {
    if (!v.is_string()) fail(ptr, "expected a path (a string), found " + describe(v));
    const auto& s = v.get_ref<const std::string&>();
    if (s.empty()) fail(ptr, "expected a non-empty path, found \"\"");
    std::string error;
    auto expanded = expand(s, dir_, error);
    if (!expanded) fail(ptr, error);
    return resolve(*expanded, dir_);
  }

  void plugins(const Json& v, const std::string& ptr, Config& cfg) const {
    expect_object(v, ptr);
    for (const auto& [key, value] : v.items()) {
      std::string p = child(ptr, key);
      if (key == "paths") {
        if (!value.is_array()) {
          fail(p, "expected an array of paths, found " + describe(value));
        }
        cfg.plugin_paths.clear();
        cfg.plugin_paths_given = true;
        for (std::size_t i = 0; i < value.size(); ++i) {
          cfg.plugin_paths.push_back(path(value[i], child(p, i)));
        }
      } else if (key == "disabled") {
        cfg.disabled_plugins = names(value, p, "plugin", "hip", /*unique=*/false, /*non_empty=*/false);
      } else if (key == "allow_insecure_permissions") {
        cfg.allow_insecure_permissions = boolean(value, p);
      } else if (key == "pins") {
        pins(value, p, cfg);
      } else if (key == "isolate") {
        cfg.isolate_plugins = boolean(value, p);
      } else if (key == "probe_timeout_ms") {
        auto n = whole_number(value);
        std::string expected = "expected an integer from " + std::to_string(kMinProbeTimeoutMs) + " to " +
                               std::to_string(kMaxProbeTimeoutMs) + " (milliseconds)";
        if (!value.is_number()) fail(p, expected + ", found " + describe(value));
        if (!n || *n < kMinProbeTimeoutMs || *n > kMaxProbeTimeoutMs) fail(p, expected + ", found " + show(value));
        cfg.probe_timeout_ms = static_cast<int>(*n);
      } else {
        unknown_key(key, p, {"paths", "disabled", "allow_insecure_permissions", "isolate", "probe_timeout_ms", "pins"});
      }
    }
  }

  void devices(const Json& v, const std::string& ptr, Config& cfg) const {
    expect_object(v, ptr);
    for (const auto& [key, value] : v.items()) {
      std::string p = child(ptr, key);
      if (!is_device_key(key)) {
        fail(p, "expected a backend name like \"cpu\" or a device id like \"cuda:1\" as key "
                "(lower case, index without leading zeros), found " + quote(key));
      }
      cfg.devices[key] = device(value, p);
    }
  }

  DeviceConfig device(const Json& v, const std::string& ptr) const {
    expect_object(v, ptr);
    DeviceConfig d;
    for (const auto& [key, value] : v.items()) {
      std::string p = child(ptr, key);
      if (key == "memory_limit") {
        d.memory_limit = memory_limit(value, p);
      } else if (key == "allocator_cache") {
        d.allocator_cache = boolean(value, p);
      } else if (key == "threads") {
        auto n = whole_number(value);
        std::string expected = "expected an integer from 0 to " + std::to_string(kMaxThreads);
        if (!value.is_number()) fail(p, expected + ", found " + describe(value));
        if (!n || *n < 0 || *n > kMaxThreads) fail(p, expected + ", found " + show(value));
        d.threads = static_cast<int>(*n);
      } else if (key == "options") {
        if (!value.is_object()) fail(p, "expected an object, found " + describe(value));
        d.options_json = value.dump();
      } else if (key == "exclude_kernels") {
        d.exclude_kernels = kernel_names(value, p);
      } else {
        unknown_key(key, p, {"memory_limit", "allocator_cache", "threads", "options", "exclude_kernels"});
      }
    }
    return d;
  }

  /// "exclude_kernels": kernels named "op" or "op signature".
  std::vector<std::string> kernel_names(const Json& v, const std::string& ptr) const {
    const std::string form = "a kernel as \"namespace::op\" or \"namespace::op signature\" (\"strata::mul\", "
                             "\"strata::mul f32,f32->f32\")";
    if (!v.is_array()) fail(ptr, "expected an array of kernels, found " + describe(v));
    static const std::regex kernel(
        R"(^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*( ([a-z0-9]+(,[a-z0-9]+)*)?->[a-z0-9]+(,[a-z0-9]+)*)?$)");
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const Json& item = v[i];
      if (!item.is_string() || !std::regex_match(item.get_ref<const std::string&>(), kernel)) {
        fail(child(ptr, i), "expected " + form + ", found " + show(item));
      }
      out.push_back(item.get<std::string>());
    }
    return out;
  }

  std::optional<uint64_t> memory_limit(const Json& v, const std::string& ptr) const {
    return byte_size(v, ptr, "memory limit", /*nullable=*/true);
  }

  /// A byte count: an integer or a string like "512MiB"; null only when
  /// `nullable` (meaning none).
  std::optional<uint64_t> byte_size(const Json& v, const std::string& ptr, const std::string& what,
                                    bool nullable) const {
    const std::string expected = "expected " + std::string(kSizeExpected);
    const std::string zero =
        " (a " + what + " must be positive" + (nullable ? "; use null for no limit)" : ")");
    const std::string absurd_expected =
        "expected a size of at most 1PiB (" + std::to_string(kMaxMemoryLimit) + " bytes), found ";
    if (nullable && v.is_null()) return std::nullopt;
    if (v.is_number()) {
      auto n = whole_number(v);
      if (n && *n > static_cast<double>(kMaxMemoryLimit)) {
        fail(ptr, absurd_expected + show(v) + ", an absurd " + what);
      }
      if (!n) fail(ptr, expected + ", found " + show(v) + " (a number of bytes must be whole)");
      if (*n < 0) fail(ptr, expected + ", found " + show(v));
      if (*n == 0) fail(ptr, expected + ", found " + show(v) + zero);
      return static_cast<uint64_t>(*n);
    }
    if (v.is_string()) {
      SizeParse r = parse_size_string(v.get_ref<const std::string&>());
      switch (r.status) {
        case SizeParse::negative: fail(ptr, expected + ", found " + show(v));
        case SizeParse::too_big: fail(ptr, absurd_expected + show(v) + ", an absurd " + what);
        case SizeParse::malformed:
          fail(ptr, expected + ", found " + show(v) + " (" + r.hint +
                        "; units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
        case SizeParse::ok:
          if (r.bytes == 0) fail(ptr, expected + ", found " + show(v) + zero);
          return r.bytes;
      }
    }
    fail(ptr, expected + (nullable ? " or null" : "") + ", found " + describe(v));
  }

  void fallback(const Json& v, const std::string& ptr, Config& cfg) const {
    expect_object(v, ptr);
    for (const auto& [key, value] : v.items()) {
      std::string p = child(ptr, key);
      if (key == "policy") {
        cfg.fallback = policy(value, p);
      } else if (key == "ops") {
        expect_object(value, p);
        for (const auto& [op, op_policy] : value.items()) {
          std::string op_ptr = child(p, op);
          if (op.empty()) fail(op_ptr, "expected an op name as key, found \"\"");
          known_op(op, op_ptr);
          cfg.fallback_ops[op] = policy(op_policy, op_ptr);
        }
      } else {
        unknown_key(key, p, {"policy", "ops"});
      }
    }
  }

  void amp(const Json& v, const std::string& ptr, Config& cfg) const {
    expect_object(v, ptr);
    for (const auto& [key, value] : v.items()) {
      std::string p = child(ptr, key);
      if (key == "lower_precision") {
        cfg.amp_lower_precision = names(value, p, "op", "matmul", /*unique=*/true, /*non_empty=*/false, /*ops=*/true);
      } else if (key == "fp32") {
        cfg.amp_fp32 = names(value, p, "op", "softmax", /*unique=*/true, /*non_empty=*/false, /*ops=*/true);
      } else if (key == "promote") {
        cfg.amp_promote = names(value, p, "op", "add", /*unique=*/true, /*non_empty=*/false, /*ops=*/true);
      } else {
        unknown_key(key, p, {"lower_precision", "fp32", "promote"});
      }
    }
  }

  CheckpointConfig checkpoint(const Json& v, const std::string& ptr) const {
    expect_object(v, ptr);
    CheckpointConfig c;
    // Which key each policy needs; a key another policy uses is an error,
    // so a typo in "policy" cannot silently drop a budget.
    std::string every_ptr, budget_ptr, save_ops_ptr;
    for (const auto& [key, value] : v.items()) {
      std::string p = child(ptr, key);
      if (key == "policy") {
        c.policy = enumeration(value, p, {"none", "every_n", "sqrt_n", "min_peak", "memory_budget", "selective"});
      } else if (key == "every") {
        auto n = whole_number(value);
        std::string expected = "expected a positive integer (stages per checkpointed segment)";
        if (!value.is_number()) fail(p, expected + ", found " + describe(value));
        if (!n || *n < 1 || *n > 1e9) fail(p, expected + ", found " + show(value));
        c.every = static_cast<int64_t>(*n);
        every_ptr = p;
      } else if (key == "budget") {
        c.budget = *byte_size(value, p, "memory budget", /*nullable=*/false);
        budget_ptr = p;
      } else if (key == "save_ops") {
        c.save_ops = names(value, p, "op", "matmul", /*unique=*/true, /*non_empty=*/false);
        save_ops_ptr = p;
      } else {
        unknown_key(key, p, {"policy", "every", "budget", "save_ops"});
      }
    }
    auto only_for = [&](const std::string& key_ptr, const char* policy) {
      if (!key_ptr.empty() && c.policy != policy) {
        fail(key_ptr, std::string("only used by policy \"") + policy + "\", but the policy is " + quote(c.policy));
      }
    };
    only_for(every_ptr, "every_n");
    only_for(budget_ptr, "memory_budget");
    only_for(save_ops_ptr, "selective");
    if (c.policy == "every_n" && every_ptr.empty()) fail(ptr, "policy \"every_n\" needs \"every\" (stages per segment)");
    if (c.policy == "memory_budget" && budget_ptr.empty()) {
      fail(ptr, "policy \"memory_budget\" needs \"budget\" (bytes, e.g. \"256MiB\")");
    }
    return c;
  }

  void logging(const Json& v, const std::string& ptr, Config& cfg) const {
    expect_object(v, ptr);
    for (const auto& [key, value] : v.items()) {
      std::string p = child(ptr, key);
      if (key == "level") {
        cfg.log_level = enumeration(value, p, {"trace", "debug", "info", "warn", "error", "off"});
      } else if (key == "sinks") {
        if (!value.is_array()) fail(p, "expected an array of sinks, found " + describe(value));
        cfg.log_sinks.clear();
        for (std::size_t i = 0; i < value.size(); ++i) {
          cfg.log_sinks.push_back(sink(value[i], child(p, i)));
        }
      } else {
        unknown_key(key, p, {"level", "sinks"});
      }
    }
  }

  LogSink sink(const Json& v, const std::string& ptr) const {
    expect_object(v, ptr);
    LogSink s;
    const Json* path_value = nullptr;
    std::string path_ptr;
    for (const auto& [key, value] : v.items()) {
      std::string p = child(ptr, key);
      if (key == "type") {
        s.type = enumeration(value, p, {"stderr", "stdout", "file"});
      } else if (key == "path") {
        path_value = &value;
        path_ptr = p;
      } else {
        unknown_key(key, p, {"type", "path"});
      }
    }
    if (s.type.empty()) {
      fail(ptr, "missing key \"type\" (expected one of \"stderr\", \"stdout\", \"file\")");
    }
    if (s.type == "file") {
      if (path_value == nullptr) {
        fail(ptr, "missing key \"path\" (a sink of type \"file\" needs the path of its log file)");
      }
      s.path = path(*path_value, path_ptr);
    } else if (path_value != nullptr) {
      fail(path_ptr, "unexpected key \"path\" for a sink of type " + quote(s.type) +
                         " (only \"file\" sinks have a path)");
    }
    return s;
  }

  std::string source_;
  std::string dir_;
  mutable std::optional<std::vector<std::string>> op_names_;  // read from the source on first use
  mutable std::unordered_set<std::string> op_set_;
};

std::atomic<OpNamesSource> g_op_names_source{nullptr};

}  // namespace

void set_op_names_source(OpNamesSource source) { g_op_names_source = source; }
OpNamesSource op_names_source() { return g_op_names_source; }

Config validate_document(const Json& doc, const std::string& source, const std::string& config_dir) {
  return Validator(source, config_dir).run(doc);
}

}  // namespace strata::detail::config
