// config_size.cpp — reads byte sizes written as strings ("512MiB", "1.5 GB")
// for memory limits and budgets, and whole numbers written as JSON numbers.
#include "base/config_internal.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace strata::detail::config {
namespace {

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

}  // namespace

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

std::optional<double> whole_number(const Json& v) {
  if (v.is_number_integer()) return static_cast<double>(v.get<int64_t>());
  if (v.is_number_unsigned()) return static_cast<double>(v.get<uint64_t>());
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && std::trunc(d) == d) return d;
  }
  return std::nullopt;
}

}  // namespace strata::detail::config
