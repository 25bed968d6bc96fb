// config.cpp — loads, validates and queries the JSON configuration.
//
// The document is parsed with a SAX handler of our own so that duplicate keys
// are caught and the key order of the file is kept (errors are reported in
// document order; plugin options are handed over as written). The
// validator walks the document once and throws ConfigError at the first
// problem, as
//   <source>: <JSON pointer>: <what was expected>, found <what was found>
// Syntax errors name the line and column instead of a pointer. Parsing never
// logs.
#include <strata/config.hpp>
#include <strata/error.hpp>

#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string_view>
#include <system_error>
#include <utility>

namespace strata {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr std::string_view kBuiltinSource = "<built-in default>";
constexpr uint64_t kMaxMemoryLimit = uint64_t{1} << 50;  // 1 PiB
constexpr int kMaxThreads = 1024;
constexpr std::size_t kMaxDepth = 256;
constexpr std::size_t kFoundLimit = 40;

// ---------------------------------------------------------------------------
// Small string helpers
// ---------------------------------------------------------------------------

std::string quote(std::string_view s) {
  // JSON string syntax, so that control characters and quotes stay readable.
  return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

/// Cuts `s` to about `limit` bytes on a UTF-8 character boundary, adding
/// "..." when something was cut.
std::string truncate(std::string s, std::size_t limit = kFoundLimit) {
  if (s.size() <= limit) return s;
  std::size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  s.resize(cut);
  s += "...";
  return s;
}

/// RFC 6901 escaping of one reference token.
std::string escape_token(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

/// `ptr` is an escaped JSON pointer ("" is the root).
std::string child(const std::string& ptr, std::string_view key) {
  return ptr + "/" + escape_token(key);
}
std::string child(const std::string& ptr, std::size_t index) {
  return ptr + "/" + std::to_string(index);
}

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "number";
    case Json::value_t::string: return "string";
    case Json::value_t::array: return "array";
    case Json::value_t::object: return "object";
    default: return "value";
  }
}

/// The value itself, compact and short: -5, "gpu", [1,2], {"a":1}.
std::string show(const Json& v) {
  return truncate(v.dump(-1, ' ', false, Json::error_handler_t::replace));
}

/// Type and value, for type mismatches: `number 3`, `string "x"`, `null`.
std::string describe(const Json& v) {
  if (v.is_null()) return "null";
  return std::string(type_name(v)) + " " + show(v);
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

std::string quoted_list(std::initializer_list<std::string_view> items) {
  std::vector<std::string> q;
  for (auto s : items) q.push_back(quote(s));
  return join(q, ", ");
}

/// Optimal string alignment distance: Levenshtein plus transpositions of
/// adjacent characters ("wran" is one edit from "warn").
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

/// The candidate the user most likely meant, or "" if none is close: within
/// edit distance 2 (case-insensitively) with the same first letter, or one
/// edit away for words of 4 or more letters, or a truncation or extension of
/// at least 4 letters ("preferred" -> "prefer"). "gpu" suggests nothing.
std::string closest(std::string_view word, std::initializer_list<std::string_view> candidates) {
  std::string lw;
  for (char c : word) lw += lower(c);
  std::string best;
  std::size_t best_score = 4;
  for (auto c : candidates) {
    std::string lc;
    for (char ch : c) lc += lower(ch);
    std::size_t score = 4;
    std::size_t d = edit_distance(lw, lc);
    bool same_first = !lw.empty() && !lc.empty() && lw[0] == lc[0];
    if (d <= 2 && d < lw.size() && (same_first || (d == 1 && lw.size() >= 4))) {
      score = d;
    } else {
      std::string_view shorter = lw.size() < lc.size() ? std::string_view(lw) : std::string_view(lc);
      std::string_view longer = lw.size() < lc.size() ? std::string_view(lc) : std::string_view(lw);
      if (shorter.size() >= 4 && longer.substr(0, shorter.size()) == shorter) score = 3;
    }
    if (score < best_score) {
      best = std::string(c);
      best_score = score;
    }
  }
  return best;
}

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

/// Whole-number value of a JSON number (integers, and floats like 8e9 with
/// no fractional part, as JSON Schema's "integer" does); nullopt otherwise.
/// Magnitudes beyond 2^53 lose precision, which only matters far past every
/// limit checked here.
std::optional<double> whole_number(const Json& v) {
  if (v.is_number_integer()) return static_cast<double>(v.get<int64_t>());
  if (v.is_number_unsigned()) return static_cast<double>(v.get<uint64_t>());
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && std::trunc(d) == d) return d;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------

__extension__ typedef unsigned __int128 u128;

struct Unit {
  std::string_view name;
  uint64_t bytes;
};
constexpr Unit kUnits[] = {
    {"B", 1},
    {"KB", 1000ULL},
    {"MB", 1000ULL * 1000},
    {"GB", 1000ULL * 1000 * 1000},
    {"TB", 1000ULL * 1000 * 1000 * 1000},
    {"KiB", 1ULL << 10},
    {"MiB", 1ULL << 20},
    {"GiB", 1ULL << 30},
    {"TiB", 1ULL << 40},
};

struct SizeParse {
  enum Status { ok, malformed, negative, too_big } status = malformed;
  uint64_t bytes = 0;   // valid for ok (may be 0)
  std::string hint;     // for malformed
};

/// "<digits>[.<digits>][ ]<unit>"; fractions are rounded down to whole bytes.
SizeParse parse_size_string(std::string_view s) {
  SizeParse r;
  if (!s.empty() && s[0] == '-') {
    r.status = SizeParse::negative;
    return r;
  }
  std::size_t i = 0;
  auto digit = [&](std::size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '9'; };
  uint64_t whole = 0;
  bool overflow = false;
  if (!digit(0)) {
    r.hint = "it must start with a number";
    return r;
  }
  for (; digit(i); ++i) {
    if (whole > kMaxMemoryLimit) {
      overflow = true;
    } else {
      whole = whole * 10 + static_cast<uint64_t>(s[i] - '0');
    }
  }
  uint64_t frac = 0;
  uint64_t frac_scale = 1;
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digit(i)) {
      r.hint = "a decimal point must be followed by digits";
      return r;
    }
    for (; digit(i); ++i) {
      if (frac_scale < 1000000000000000000ULL) {  // keep 18 digits, drop the rest
        frac = frac * 10 + static_cast<uint64_t>(s[i] - '0');
        frac_scale *= 10;
      }
    }
  }
  if (i < s.size() && s[i] == ' ') ++i;
  std::string_view unit = s.substr(i);
  const Unit* found = nullptr;
  for (const Unit& u : kUnits) {
    if (u.name == unit) found = &u;
  }
  if (found == nullptr) {
    if (unit.empty()) {
      r.hint = "it has no unit";
    } else {
      for (const Unit& u : kUnits) {
        if (u.name.size() == unit.size() &&
            std::equal(u.name.begin(), u.name.end(), unit.begin(), [](char a, char b) {
              return std::tolower(static_cast<unsigned char>(a)) ==
                     std::tolower(static_cast<unsigned char>(b));
            })) {
          r.hint = "units are case-sensitive: did you mean " + quote(u.name) + "?";
        }
      }
      if (r.hint.empty()) r.hint = "unknown unit " + quote(unit);
    }
    return r;
  }
  if (overflow) {  // whole stays below 2^54 otherwise, so nothing below overflows
    r.status = SizeParse::too_big;
    return r;
  }
  u128 total = u128{whole} * found->bytes + u128{frac} * found->bytes / frac_scale;
  if (total > kMaxMemoryLimit) {
    r.status = SizeParse::too_big;
    return r;
  }
  r.status = SizeParse::ok;
  r.bytes = static_cast<uint64_t>(total);
  return r;
}

// ---------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------

/// Expands variables; on failure returns nullopt and sets `error`.
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

/// Joins a relative path onto `base` and drops "." components (".." is kept:
/// collapsing it lexically would be wrong across symbolic links).
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

// ---------------------------------------------------------------------------
// Parsing: a SAX handler building an ordered document
// ---------------------------------------------------------------------------

/// (line, column) of a byte position as nlohmann reports it (1-based index
/// of the last character read; size + 1 at the end of the input). Lines
/// start at 1; columns count characters (UTF-8 code points) from 1.
std::pair<std::size_t, std::size_t> line_column(std::string_view text, std::size_t byte) {
  std::size_t p = byte == 0 ? 0 : byte - 1;
  p = std::min(p, text.size());
  std::size_t line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < p; ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  if (line == 1 && text.substr(0, 3) == "\xEF\xBB\xBF" && p >= 3) line_start = 3;  // BOM
  auto is_lead = [&](std::size_t k) { return (static_cast<unsigned char>(text[k]) & 0xC0) != 0x80; };
  std::size_t column = 0;
  for (std::size_t i = line_start; i < p; ++i) column += is_lead(i) ? 1 : 0;
  // The character at p itself: counted unless it continues one already counted.
  if (p >= text.size() || is_lead(p)) ++column;
  return {line, std::max<std::size_t>(column, 1)};
}

/// nlohmann's reason without its prefixes and its "last read" part (which
/// can hold earlier tokens too): "[json.exception.parse_error.101] parse error
/// at line 1, column 2: syntax error while parsing value - invalid literal;
/// last read: 'x'" becomes "invalid literal (while parsing value)".
std::string short_reason(const std::string& what, const std::string& last_token) {
  std::string s = what;
  if (!s.empty() && s[0] == '[') {
    auto end = s.find("] ");
    if (end != std::string::npos) s.erase(0, end + 2);
  }
  if (s.rfind("parse error", 0) == 0) {
    auto colon = s.find(": ");
    if (colon != std::string::npos) s.erase(0, colon + 2);
  }
  const std::string last_read = "; last read: '" + last_token + "'";
  if (auto at = s.find(last_read); at != std::string::npos) s.erase(at, last_read.size());
  if (s.rfind("syntax error ", 0) == 0) s.erase(0, 13);
  if (s.rfind("- ", 0) == 0) return s.substr(2);
  if (s.rfind("while parsing ", 0) == 0) {
    auto dash = s.find(" - ");
    if (dash != std::string::npos) return s.substr(dash + 3) + " (" + s.substr(0, dash) + ")";
  }
  return s;
}

/// When a whole token was read but was not allowed there ("unexpected string
/// literal"), nlohmann's position is its last character; the error is better
/// shown at its first. Returns how many bytes to step back.
std::size_t token_length_before(const std::string& reason, const std::string& last_token) {
  // Strings and numbers: the lexer's token text is exactly the raw token.
  if (reason.rfind("unexpected string literal", 0) == 0 ||
      reason.rfind("unexpected number literal", 0) == 0 ||
      reason.rfind("number overflow", 0) == 0) {
    return last_token.empty() ? 0 : last_token.size() - 1;
  }
  if (reason.rfind("unexpected true literal", 0) == 0) return 3;
  if (reason.rfind("unexpected false literal", 0) == 0) return 4;
  if (reason.rfind("unexpected null literal", 0) == 0) return 3;
  return 0;
}

class DocumentBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  DocumentBuilder(Json& root, const std::string& text, const std::string& source)
      : root_(root), text_(text), source_(source) {}

  bool null() { return put(Json(nullptr)); }
  bool boolean(bool v) { return put(Json(v)); }
  bool number_integer(number_integer_t v) { return put(Json(v)); }
  bool number_unsigned(number_unsigned_t v) { return put(Json(v)); }
  bool number_float(number_float_t v, const string_t&) { return put(Json(v)); }
  bool string(string_t& v) { return put(Json(std::move(v))); }
  bool binary(binary_t& v) { return put(Json::binary(std::move(v))); }

  bool start_object(std::size_t) { return open(Json::object()); }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(string_t& k) {
    Frame& top = stack_.back();
    if (top.node->contains(k)) {
      throw ConfigError(source_ + ": " + child(top.pointer, k) + ": duplicate key " + quote(k) +
                        " (each key may appear only once in an object)");
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t position, const std::string& last_token,
                   const Json::exception& ex) {
    std::string reason = short_reason(ex.what(), last_token);
    std::size_t back = token_length_before(reason, last_token);
    if (position > back) position -= back;
    if (position >= 1 && position <= text_.size() && text_[position - 1] == '/' &&
        reason.rfind("invalid literal", 0) == 0) {
      reason += "; comments are not allowed in JSON";
    }
    auto [line, column] = line_column(text_, position);
    throw ConfigError(source_ + ": line " + std::to_string(line) + ", column " +
                      std::to_string(column) + ": syntax error: " + reason);
  }

 private:
  struct Frame {
    Json* node;
    std::string pointer;
  };

  // Places a value into the container on top of the stack (or as the root)
  // and returns it with its pointer.
  std::pair<Json*, std::string> place(Json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return {&root_, ""};
    }
    Frame& top = stack_.back();
    if (top.node->is_array()) {
      std::string ptr = child(top.pointer, top.node->size());
      top.node->push_back(std::move(v));
      return {&top.node->back(), std::move(ptr)};
    }
    std::string ptr = child(top.pointer, key_);
    Json& slot = (*top.node)[key_];
    slot = std::move(v);
    return {&slot, std::move(ptr)};
  }

  bool put(Json&& v) {
    place(std::move(v));
    return true;
  }

  bool open(Json&& container) {
    auto [node, ptr] = place(std::move(container));
    if (stack_.size() >= kMaxDepth) {
      throw ConfigError(source_ + ": " + (ptr.empty() ? "/" : ptr) + ": expected at most " +
                        std::to_string(kMaxDepth) + " levels of nesting, found more");
    }
    stack_.push_back({node, std::move(ptr)});
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  Json& root_;
  const std::string& text_;
  const std::string& source_;
  std::vector<Frame> stack_;
  std::string key_;
};

Json parse_document(const std::string& text, const std::string& source) {
  Json root;
  DocumentBuilder builder(root, text, source);
  Json::sax_parse(text, &builder, Json::input_format_t::json, /*strict=*/true,
                  /*ignore_comments=*/false);
  return root;
}

// ---------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------

constexpr std::string_view kSizeExpected =
    "a positive size (integer bytes or a string like \"512MiB\")";

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

  /// An array of lower-case names ("cuda", "hip").
  std::vector<std::string> names(const Json& v, const std::string& ptr, std::string_view what,
                                 std::string_view example, bool unique, bool non_empty) const {
    if (!v.is_array()) fail(ptr, "expected an array of " + std::string(what) + " names, found " + describe(v));
    if (non_empty && v.empty()) {
      fail(ptr, "expected at least one " + std::string(what) + " name, found []");
    }
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const Json& item = v[i];
      std::string item_ptr = child(ptr, i);
      if (!item.is_string()) fail(item_ptr, "expected a string, found " + describe(item));
      const auto& s = item.get_ref<const std::string&>();
      if (!is_lower_name(s)) {
        fail(item_ptr, "expected a " + std::string(what) + " name (lower case letters, digits, "
                       "'_' or '-', like " + quote(example) + "), found " + show(item));
      }
      if (unique) {
        auto it = std::find(out.begin(), out.end(), s);
        if (it != out.end()) {
          fail(item_ptr, "expected each " + std::string(what) + " once, found " + show(item) +
                             " again (first at " +
                             child(ptr, static_cast<std::size_t>(it - out.begin())) + ")");
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
        for (std::size_t i = 0; i < value.size(); ++i) {
          cfg.plugin_paths.push_back(path(value[i], child(p, i)));
        }
      } else if (key == "disabled") {
        cfg.disabled_plugins = names(value, p, "plugin", "hip", /*unique=*/false, /*non_empty=*/false);
      } else if (key == "allow_insecure_permissions") {
        cfg.allow_insecure_permissions = boolean(value, p);
      } else {
        unknown_key(key, p, {"paths", "disabled", "allow_insecure_permissions"});
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
      } else {
        unknown_key(key, p, {"memory_limit", "allocator_cache", "threads", "options"});
      }
    }
    return d;
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
        cfg.amp_lower_precision = names(value, p, "op", "matmul", /*unique=*/true, /*non_empty=*/false);
      } else if (key == "fp32") {
        cfg.amp_fp32 = names(value, p, "op", "softmax", /*unique=*/true, /*non_empty=*/false);
      } else if (key == "promote") {
        cfg.amp_promote = names(value, p, "op", "add", /*unique=*/true, /*non_empty=*/false);
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
        c.policy = enumeration(value, p, {"none", "every_n", "sqrt_n", "memory_budget", "selective"});
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
};

char anchor;  // an object inside libstrata.so, for dladdr

}  // namespace

// ---------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------

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
  Json doc = parse_document(text, source);
  return Validator(source, absolute_dir(base_dir)).run(doc);
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

std::string expand_path_variables(const std::string& path, const std::string& config_dir) {
  std::string error;
  auto expanded = expand(path, config_dir, error);
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
    std::string parent = resolve(lib.parent_path().string(), "/");
    while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
    return parent;
  }();
  return dir;
}

}  // namespace strata
