// config_text.cpp — the wording of configuration error messages: quoting,
// JSON pointers, short descriptions of values, and "did you mean"
// suggestions for misspelt keys, values and variables.
#include "base/config_internal.hpp"

#include <algorithm>
#include <cctype>

namespace strata::detail::config {
namespace {

constexpr std::size_t kFoundLimit = 40;

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

}  // namespace

std::string quote(std::string_view s) {
  return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string child(const std::string& ptr, std::string_view key) {
  return ptr + "/" + escape_token(key);
}
std::string child(const std::string& ptr, std::size_t index) {
  return ptr + "/" + std::to_string(index);
}

std::string show(const Json& v) {
  return truncate(v.dump(-1, ' ', false, Json::error_handler_t::replace));
}

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

namespace {

template <class Range>
std::string closest_in(std::string_view word, const Range& candidates) {
  std::string lw;
  for (char c : word) lw += lower(c);
  std::string best;
  std::size_t best_score = 4;
  for (std::string_view c : candidates) {
    std::string lc;
    for (char ch : c) lc += lower(ch);
    std::size_t score = 4;
    // The distance is at least the difference in length: skip the table
    // (quadratic in the lengths) when it cannot be 2 or less.
    std::size_t gap = lw.size() > lc.size() ? lw.size() - lc.size() : lc.size() - lw.size();
    std::size_t d = gap <= 2 ? edit_distance(lw, lc) : gap;
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

}  // namespace

std::string closest(std::string_view word, std::initializer_list<std::string_view> candidates) {
  return closest_in(word, candidates);
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  return closest_in(word, candidates);
}

}  // namespace strata::detail::config
