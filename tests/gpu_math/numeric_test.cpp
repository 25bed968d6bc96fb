// numeric_test.cpp — numeric.hpp's 16-bit conversions on the host path: every
// f16 and bf16 pattern to float and back, and float -> f16/bf16 rounding on
// millions of random and edge floats, each against half.hpp (the core's
// reference) and against an independent round-to-nearest-even written with
// double arithmetic here. The bf16 bit code of the device path
// (detail::bf16_bits_from_float_bits) is host-device and checked the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include <strata/plugin/half.hpp>

#include "numeric.hpp"

namespace gpu_math_test {
namespace {

namespace g = strata::gpu;

static_assert(std::is_same_v<g::acc_t<g::half_t>, float>);
static_assert(std::is_same_v<g::acc_t<g::bfloat16_t>, float>);
static_assert(std::is_same_v<g::acc_t<float>, float>);
static_assert(std::is_same_v<g::acc_t<double>, double>);
static_assert(std::is_same_v<g::acc_t<int32_t>, int64_t>);
static_assert(std::is_same_v<g::acc_t<int64_t>, int64_t>);
static_assert(std::is_same_v<g::acc_t<bool>, int64_t>);
static_assert(sizeof(g::half_t) == 2 && sizeof(g::bfloat16_t) == 2);

bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

/// f16 bits -> value, from the definition of binary16.
double f16_value(uint16_t h) {
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  if (e == 0) return sign * std::ldexp(m, -24);
  if (e == 31) return m ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + m, e - 25);
}

/// Nearest f16 of x, ties to the even pattern, by search over the values.
uint16_t reference_f16(float x) {
  static const std::vector<double> values = [] {
    std::vector<double> v;
    for (uint32_t p = 0; p < 0x7c00u; ++p) v.push_back(f16_value(static_cast<uint16_t>(p)));
    v.push_back(65536.0);  // the next binade's first value: rounding up to it overflows to inf (0x7c00)
    return v;
  }();
  if (std::isnan(x)) return 0x7e00u;
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  const double a = std::fabs(static_cast<double>(x));
  if (a >= 65536.0) return sign | 0x7c00u;
  const size_t p = static_cast<size_t>(std::upper_bound(values.begin(), values.end(), a) - values.begin()) - 1;
  const double below = a - values[p], above = values[p + 1] - a;
  size_t pick = below < above ? p : above < below ? p + 1 : (p % 2 == 0 ? p : p + 1);
  return static_cast<uint16_t>(sign | pick);
}

/// Nearest bf16 of x, ties to the even pattern.
uint16_t reference_bf16(float x) {
  if (std::isnan(x)) return 0x7fc0u;
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
  if (mag >= 0x7f800000u) return static_cast<uint16_t>((sign | mag) >> 16);  // inf
  const uint32_t lo = mag & 0xffff0000u, hi = lo + 0x10000u;
  const double a = std::bit_cast<float>(mag);
  const double lo_v = std::bit_cast<float>(lo);
  const double hi_v = hi == 0x7f800000u ? std::ldexp(1.0, 128) : static_cast<double>(std::bit_cast<float>(hi));
  const double below = a - lo_v, above = hi_v - a;
  const uint32_t pick = below < above ? lo : above < below ? hi : ((lo >> 16) % 2 == 0 ? lo : hi);
  return static_cast<uint16_t>((sign | pick) >> 16);
}

TEST(Numeric, EveryF16PatternConvertsAndRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = g::to_acc(g::half_t{h});
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(strata::f16_to_float(h))) << std::hex << b;
    ASSERT_EQ(std::bit_cast<uint32_t>(g::to_float(g::half_t{h})), std::bit_cast<uint32_t>(f));
    const uint16_t back = g::from_float<g::half_t>(f).bits;
    if (f16_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_TRUE(f16_is_nan(back)) << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(f), f16_value(h)) << std::hex << b;
      ASSERT_EQ(back, h) << std::hex << b;
      ASSERT_EQ(g::from_acc<g::half_t>(f).bits, h);
    }
  }
}

TEST(Numeric, EveryBF16PatternConvertsAndRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = g::to_acc(g::bfloat16_t{h});
    ASSERT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(strata::bf16_to_float(h)));
    const uint16_t back = g::from_float<g::bfloat16_t>(f).bits;
    const uint16_t back_device = g::detail::bf16_bits_from_float_bits(b << 16);
    if (bf16_is_nan(h)) {
      ASSERT_TRUE(bf16_is_nan(back)) << std::hex << b;
      ASSERT_TRUE(bf16_is_nan(back_device)) << std::hex << b;
    } else {
      ASSERT_EQ(back, h) << std::hex << b;
      ASSERT_EQ(back_device, h) << std::hex << b;
      ASSERT_EQ(g::from_acc<g::bfloat16_t>(f).bits, h);
    }
  }
}

/// Floats that decide rounding: every 16-bit value, the midpoints between
/// neighbours, and the floats one ulp either side of each.
std::vector<float> edge_floats() {
  std::vector<float> out;
  const auto around = [&](float x) {
    out.push_back(x);
    out.push_back(std::nextafter(x, INFINITY));
    out.push_back(std::nextafter(x, -INFINITY));
  };
  for (uint32_t p = 0; p < 0x7c00u; ++p) {  // f16 values and midpoints (exact in float)
    const double v = f16_value(static_cast<uint16_t>(p));
    const double next = p + 1 < 0x7c00u ? f16_value(static_cast<uint16_t>(p + 1)) : 65536.0;
    for (double x : {v, (v + next) / 2}) {
      around(static_cast<float>(x));
      around(static_cast<float>(-x));
    }
  }
  for (uint32_t p = 0; p < 0x7f80u; ++p) {  // bf16 values and midpoints: low half 0 and 0x8000
    for (uint32_t low : {0x0000u, 0x8000u}) {
      const float x = std::bit_cast<float>((p << 16) | low);
      around(x);
      around(-x);
    }
  }
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65519.996f, 65520.0f, 3.4028235e38f,
                  1e-45f, 5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f})
    around(x);
  return out;
}

std::vector<float> random_floats(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<float> out;
  out.reserve(n);
  for (size_t i = 0; i < n / 2; ++i) out.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  // Half of them with exponents around the f16 range (2^-26 .. 2^17).
  std::uniform_int_distribution<uint32_t> exponent(127 - 26, 127 + 17);
  while (out.size() < n) {
    const uint32_t u = static_cast<uint32_t>(rng());
    out.push_back(std::bit_cast<float>((u & 0x807fffffu) | (exponent(rng) << 23)));
  }
  return out;
}

void check_rounding(const std::vector<float>& xs) {
  int64_t nans = 0;
  for (float x : xs) {
    const uint16_t h = g::from_float<g::half_t>(x).bits;
    const uint16_t b = g::from_float<g::bfloat16_t>(x).bits;
    const uint16_t bd = g::detail::bf16_bits_from_float_bits(std::bit_cast<uint32_t>(x));
    if (std::isnan(x)) {
      ++nans;
      ASSERT_TRUE(f16_is_nan(h));
      ASSERT_TRUE(bf16_is_nan(b));
      ASSERT_TRUE(bf16_is_nan(bd));
      continue;
    }
    ASSERT_EQ(h, strata::float_to_f16(x)) << x;
    ASSERT_EQ(h, reference_f16(x)) << std::hexfloat << x;
    ASSERT_EQ(b, strata::float_to_bf16(x)) << x;
    ASSERT_EQ(b, reference_bf16(x)) << std::hexfloat << x;
    ASSERT_EQ(bd, b) << std::hexfloat << x;
  }
  EXPECT_GT(nans, 0);
}

TEST(Numeric, RoundingOfEdgeFloatsIsNearestEven) {
  const std::vector<float> xs = edge_floats();
  EXPECT_GT(xs.size(), 500000u);
  check_rounding(xs);
}

TEST(Numeric, RoundingOfRandomFloatsIsNearestEven) { check_rounding(random_floats(40, 4000000)); }

TEST(Numeric, OtherTypesConvertPlainly) {
  EXPECT_EQ(g::to_acc(int32_t{-7}), int64_t{-7});
  EXPECT_EQ(g::to_acc(true), int64_t{1});
  EXPECT_EQ(g::to_acc(2.5f), 2.5f);
  EXPECT_EQ(g::to_acc(2.5), 2.5);
  EXPECT_EQ(g::from_acc<int32_t>(int64_t{-7}), -7);
  EXPECT_EQ(g::from_acc<bool>(int64_t{2}), true);
  EXPECT_EQ(g::from_acc<bool>(int64_t{0}), false);
  EXPECT_EQ(g::from_acc<double>(0.1), 0.1);
  EXPECT_EQ(g::from_float<float>(0.1f), 0.1f);
  EXPECT_EQ(g::FromAcc<g::half_t>{}(1.0f).bits, 0x3c00u);
  EXPECT_EQ(g::FromAcc<g::bfloat16_t>{}(-2.0f).bits, 0xc000u);
  EXPECT_EQ(g::to_float(g::half_t{0x3c00u}), 1.0f);
  EXPECT_EQ(g::to_float(int64_t{3}), 3.0f);
}

}  // namespace
}  // namespace gpu_math_test
