// options.hpp — a plugin's options, read without a JSON library.
//
// init receives the plugin's "options" object of the configuration as JSON
// (strata_init_args::options_json, "{}" when there is none, plus per-device
// settings such as "threads"). A plugin should refuse a key it does not know,
// naming it and the keys it knows, and a value of the wrong type or range,
// naming the key: a typo in a configuration is then an error at load time,
// not a silently ignored setting.
//
//   const strata::plugin::Options options(a.options_json, {"arena_mb", "devices", "threads"});
//   const int64_t arena_mb = options.integer("arena_mb", 256, 1, 65536);
//
// Every problem throws Refusal(STRATA_ERROR_INVALID_ARGUMENT, ...), which
// make_api<Backend>() (backend.hpp) or guarded() turn into init's status and
// message. Values are read at the top level; a nested object or array is
// accepted as a value and can be read back as its JSON text (raw()). Header
// only, C++20, standard library only.
#pragma once

#include <strata/plugin/strata_plugin.hpp>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>

namespace strata::plugin {

class Options {
 public:
  /// The kind of a top-level value.
  enum class Kind { number, string, boolean, null, object, array };

  /// Parses `json` (nullptr or empty: no options) and checks every key
  /// against `known`.
  Options(const char* json, std::initializer_list<std::string_view> known) {
    const std::string_view text = json != nullptr ? std::string_view(json) : std::string_view();
    Parser p{text};
    p.space();
    if (p.at_end()) return;  // "" counts as {}
    if (!p.eat('{')) p.fail("options must be a JSON object");
    p.space();
    if (!p.eat('}')) {
      for (;;) {
        p.space();
        std::string key = p.string_value("a quoted key");
        p.space();
        if (!p.eat(':')) p.fail(cat({"expected ':' after \"", key, "\""}));
        p.space();
        Value v = p.value();
        if (!values_.emplace(key, std::move(v)).second) p.fail(cat({"option \"", key, "\" is given twice"}));
        p.space();
        if (p.eat('}')) break;
        if (!p.eat(',')) p.fail(cat({"expected ',' or '}' after the value of \"", key, "\""}));
      }
    }
    p.space();
    if (!p.at_end()) p.fail("trailing characters after the options object");
    for (const auto& [key, value] : values_) {
      bool listed = false;
      std::string names;
      for (std::string_view k : known) {
        listed = listed || k == key;
        if (!names.empty()) names += ", ";
        names += k;
      }
      if (!listed) {
        refuse(cat({"unknown option \"", key, "\" (", names.empty() ? "the plugin takes none" : "known: ", names,
                    ")"}));
      }
    }
  }

  bool has(std::string_view key) const { return find(key) != nullptr; }

  /// The kind of `key`'s value; `key` must be present.
  Kind kind(std::string_view key) const { return present(key).kind; }

  /// A whole number in [lo, hi] (256.0 is whole), or `fallback` when absent.
  int64_t integer(std::string_view key, int64_t fallback, int64_t lo, int64_t hi) const {
    const Value* v = find(key);
    if (v == nullptr) return fallback;
    const std::string range = cat({"[", std::to_string(lo), ", ", std::to_string(hi), "]"});
    double d = 0.0;
    if (v->kind != Kind::number || !to_double(v->text, d) || d != std::floor(d)) {
      refuse(cat({"option \"", key, "\" must be a whole number in ", range, ", got ", v->text}));
    }
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
      refuse(cat({"option \"", key, "\" must be in ", range, ", got ", v->text}));
    }
    return static_cast<int64_t>(d);
  }

  /// A number in [lo, hi], or `fallback` when absent.
  double number(std::string_view key, double fallback, double lo = -HUGE_VAL, double hi = HUGE_VAL) const {
    const Value* v = find(key);
    if (v == nullptr) return fallback;
    double d = 0.0;
    if (v->kind != Kind::number || !to_double(v->text, d)) {
      refuse(cat({"option \"", key, "\" must be a number, got ", v->text}));
    }
    if (d < lo || d > hi) {
      refuse(cat({"option \"", key, "\" must be in [", std::to_string(lo), ", ", std::to_string(hi), "], got ",
                  v->text}));
    }
    return d;
  }

  /// A string (escapes decoded), or `fallback` when absent.
  std::string string(std::string_view key, std::string fallback = {}) const {
    const Value* v = find(key);
    if (v == nullptr) return fallback;
    if (v->kind != Kind::string) refuse(cat({"option \"", key, "\" must be a string, got ", v->text}));
    return v->decoded;
  }

  /// true or false, or `fallback` when absent.
  bool boolean(std::string_view key, bool fallback) const {
    const Value* v = find(key);
    if (v == nullptr) return fallback;
    if (v->kind != Kind::boolean) refuse(cat({"option \"", key, "\" must be true or false, got ", v->text}));
    return v->text == "true";
  }

  /// The value's JSON text as written (an object or array for a parser of
  /// your own); `key` must be present.
  const std::string& raw(std::string_view key) const { return present(key).text; }

 private:
  struct Value {
    Kind kind = Kind::null;
    std::string text;     // as written
    std::string decoded;  // a string's characters
  };

  /// Concatenation by appending (GCC 12's -Wrestrict misfires on
  /// "literal" + std::string at -O3, PR 105329).
  static std::string cat(std::initializer_list<std::string_view> parts) {
    std::string out;
    for (std::string_view part : parts) out += part;
    return out;
  }

  [[noreturn]] static void refuse(const std::string& message) {
    throw Refusal(STRATA_ERROR_INVALID_ARGUMENT, message);
  }

  static bool to_double(const std::string& text, double& out) {
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, out);
    return ec == std::errc() && ptr == end;
  }

  const Value* find(std::string_view key) const {
    auto it = values_.find(key);
    return it == values_.end() ? nullptr : &it->second;
  }
  const Value& present(std::string_view key) const {
    const Value* v = find(key);
    if (v == nullptr) refuse(cat({"option \"", key, "\" is not set"}));
    return *v;
  }

  /// A small JSON reader: RFC 8259 values; errors name the byte offset.
  struct Parser {
    static constexpr int kMaxDepth = 64;  // nested objects and arrays: no stack exhaustion
    std::string_view s;
    size_t pos = 0;
    int depth = 0;

    [[noreturn]] void fail(const std::string& what) const {
      refuse(cat({"options: ", what, " (at byte ", std::to_string(pos), ")"}));
    }
    bool at_end() const { return pos >= s.size(); }
    void space() {
      while (pos < s.size() && (s[pos] == ' ' || s[pos] == '\t' || s[pos] == '\n' || s[pos] == '\r')) ++pos;
    }
    bool eat(char c) {
      if (pos < s.size() && s[pos] == c) {
        ++pos;
        return true;
      }
      return false;
    }
    bool literal(std::string_view word) {
      if (s.substr(pos, word.size()) != word) return false;
      pos += word.size();
      return true;
    }
    std::string string_value(const char* what) {
      if (!eat('"')) fail(cat({"expected ", what}));
      std::string out;
      while (pos < s.size() && s[pos] != '"') {
        char c = s[pos++];
        if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
        if (c == '\\') {
          if (pos >= s.size()) break;
          const char e = s[pos++];
          switch (e) {
            case '"': case '\\': case '/': out += e; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'n': out += '\n'; break;
            case 'r': out += '\r'; break;
            case 't': out += '\t'; break;
            case 'u': {
              if (pos + 4 > s.size()) fail("short \\u escape");
              unsigned code = 0;
              auto [ptr, ec] = std::from_chars(s.data() + pos, s.data() + pos + 4, code, 16);
              if (ec != std::errc() || ptr != s.data() + pos + 4) fail("bad \\u escape");
              pos += 4;
              if (code < 0x80) {
                out += static_cast<char>(code);
              } else if (code < 0x800) {
                out += static_cast<char>(0xC0 | (code >> 6));
                out += static_cast<char>(0x80 | (code & 0x3F));
              } else {  // a lone surrogate stays as its 3-byte form: options are names and paths
                out += static_cast<char>(0xE0 | (code >> 12));
                out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
                out += static_cast<char>(0x80 | (code & 0x3F));
              }
              break;
            }
            default: fail(cat({"unknown escape \\", std::string_view(&e, 1)}));
          }
        } else {
          out += c;
        }
      }
      if (!eat('"')) fail("unterminated string");
      return out;
    }
    Value value() {
      Value v;
      const size_t start = pos;
      if (pos >= s.size()) fail("expected a value");
      const char c = s[pos];
      if (c == '"') {
        v.kind = Kind::string;
        v.decoded = string_value("a string");
      } else if (c == '{' || c == '[') {
        v.kind = c == '{' ? Kind::object : Kind::array;
        nested();
      } else if (literal("true") || literal("false")) {
        v.kind = Kind::boolean;
      } else if (literal("null")) {
        v.kind = Kind::null;
      } else if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
        v.kind = Kind::number;
        ++pos;
        while (pos < s.size() && (std::isdigit(static_cast<unsigned char>(s[pos])) || s[pos] == '.' ||
                                  s[pos] == 'e' || s[pos] == 'E' || s[pos] == '+' || s[pos] == '-')) {
          ++pos;
        }
        double ignored = 0.0;
        if (!to_double(std::string(s.substr(start, pos - start)), ignored)) fail("malformed number");
      } else {
        fail("expected a value");
      }
      v.text = std::string(s.substr(start, pos - start));
      return v;
    }
    /// Skips an object or array (strings inside may hold brackets).
    void nested() {
      if (++depth > kMaxDepth) fail(cat({"values nested deeper than ", std::to_string(kMaxDepth), " levels"}));
      const char open = s[pos++];
      const char close = open == '{' ? '}' : ']';
      space();
      if (eat(close)) {
        --depth;
        return;
      }
      for (;;) {
        space();
        if (open == '{') {
          (void)string_value("a quoted key");
          space();
          if (!eat(':')) fail("expected ':' in a nested object");
          space();
        }
        (void)value();
        space();
        if (eat(close)) {
          --depth;
          return;
        }
        if (!eat(',')) fail(cat({"expected ',' or '", std::string_view(&close, 1), "'"}));
      }
    }
  };

  std::map<std::string, Value, std::less<>> values_;
};

}  // namespace strata::plugin
