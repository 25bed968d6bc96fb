// config_json.cpp — reads configuration text into an ordered JSON document.
//
// The document is parsed with a SAX handler of our own so that duplicate keys
// are caught and the key order of the file is kept (errors are reported in
// document order; plugin options are handed over as written). Syntax errors
// name the line and column. Parsing never logs, and it is linear in the size
// of the text: keys are checked for duplicates through a hash set, and
// objects are filled in order without nlohmann's (linear) key lookup.
#include "base/config_internal.hpp"

#include <strata/error.hpp>

#include <algorithm>
#include <cstring>
#include <unordered_set>
#include <utility>

namespace strata::detail::config {
namespace {

constexpr std::size_t kMaxDepth = 256;

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
    if (!top.keys.insert(k).second) {
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
    std::unordered_set<std::string> keys;  // of an object, for duplicates
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
    // key() has made sure the key is new: append without operator[]'s
    // linear search of the ordered map.
    auto& members = static_cast<Json::object_t::Container&>(top.node->get_ref<Json::object_t&>());
    members.emplace_back(std::move(key_), std::move(v));
    return {&members.back().second, std::move(ptr)};
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
    stack_.push_back({node, std::move(ptr), {}});
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

}  // namespace

Json parse_document(const std::string& text, const std::string& source) {
  if (text.size() > kMaxConfigBytes) {
    throw ConfigError(source + ": configuration too large: " + std::to_string(text.size()) +
                      " bytes (at most " + std::to_string(kMaxConfigBytes) + " bytes, 1 MiB)");
  }
  // nlohmann's lexer takes a NUL byte for the end of the input and would
  // silently ignore the rest of the text.
  if (const void* nul = std::memchr(text.data(), '\0', text.size())) {
    auto offset = static_cast<std::size_t>(static_cast<const char*>(nul) - text.data());
    auto [line, column] = line_column(text, offset + 1);
    throw ConfigError(source + ": byte offset " + std::to_string(offset) + " (line " + std::to_string(line) +
                      ", column " + std::to_string(column) +
                      "): expected UTF-8 text, found a NUL byte (a configuration holds no NUL bytes)");
  }
  Json root;
  DocumentBuilder builder(root, text, source);
  Json::sax_parse(text, &builder, Json::input_format_t::json, /*strict=*/true,
                  /*ignore_comments=*/false);
  return root;
}

}  // namespace strata::detail::config
