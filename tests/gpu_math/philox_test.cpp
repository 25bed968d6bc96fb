// philox_test.cpp — strata/plugin/philox.h, now callable from device code
// (STRATA_PHILOX_FN), still gives the bits it gave before: Random123's known
// answers, values recorded from the header before the change (compiled as
// C99 with -ffp-contract=off), and the same bits from a C99 and a C++
// translation unit.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include <strata/plugin/philox.h>

extern "C" void gpu_math_test_philox_c(uint64_t first, uint64_t n, uint64_t offset, uint64_t seed, uint32_t* words,
                                       uint32_t* uniform_bits, uint32_t* normal_bits);

namespace gpu_math_test {
namespace {

TEST(Philox, Random123KnownAnswers) {
  strata_philox_block b = strata_philox4x32_10(0, 0, 0);
  EXPECT_EQ(b.v[0], 0x6627e8d5u);
  EXPECT_EQ(b.v[1], 0xe169c58du);
  EXPECT_EQ(b.v[2], 0xbc57ac4cu);
  EXPECT_EQ(b.v[3], 0x9b00dbd8u);
  b = strata_philox4x32_10(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(b.v[0], 0x408f276du);
  EXPECT_EQ(b.v[1], 0x41c83b0eu);
  EXPECT_EQ(b.v[2], 0xa20bc7c6u);
  EXPECT_EQ(b.v[3], 0x6d5451fdu);
  // Counter (243f6a88 85a308d3 13198a2e 03707344), key (a4093822 299f31d0).
  b = strata_philox4x32_10(0x85a308d3243f6a88ull, 0x0370734413198a2eull, 0x299f31d0a4093822ull);
  EXPECT_EQ(b.v[0], 0xd16cfe09u);
  EXPECT_EQ(b.v[1], 0x94fdccebu);
  EXPECT_EQ(b.v[2], 0x5001e420u);
  EXPECT_EQ(b.v[3], 0x24126ea1u);
}

struct Recorded {
  uint64_t index, offset, seed;
  uint32_t word, uniform_bits, normal_bits;
};

// From the header as it was before STRATA_PHILOX_FN (gcc -std=c99 -ffp-contract=off).
constexpr Recorded kRecorded[] = {
    {0ull, 0ull, 0ull, 0x6627e8d5u, 0x3ecc4fd0u, 0x3f7dbb31u},
    {1ull, 0ull, 0ull, 0xe169c58du, 0x3f6169c5u, 0xbf6cb6b4u},
    {2ull, 0ull, 0ull, 0xbc57ac4cu, 0x3f3c57acu, 0xbf1e1ba1u},
    {3ull, 0ull, 0ull, 0x9b00dbd8u, 0x3f1b00dbu, 0xbef6d1a9u},
    {1000003ull, 0ull, 0ull, 0xad59679eu, 0x3f2d5967u, 0xbf33168fu},
    {0ull, 7ull, 42ull, 0x67ee6f2cu, 0x3ecfdcdeu, 0x3f8856dbu},
    {1ull, 7ull, 42ull, 0xe55410ccu, 0x3f655410u, 0xbf514952u},
    {2ull, 7ull, 42ull, 0x6c7eca35u, 0x3ed8fd94u, 0xbf28902fu},
    {3ull, 7ull, 42ull, 0x557398d3u, 0x3eaae730u, 0x3f9101c0u},
    {1000003ull, 7ull, 42ull, 0xd752bebau, 0x3f5752beu, 0xbff8b1f3u},
    {0ull, 18364758544493064720ull, 1311768467463790320ull, 0x90aafdc4u, 0x3f10aafdu, 0x3ef27897u},
    {1ull, 18364758544493064720ull, 1311768467463790320ull, 0x2d4a0d93u, 0x3e352834u, 0x3f752c22u},
    {2ull, 18364758544493064720ull, 1311768467463790320ull, 0x13f86edcu, 0x3d9fc370u, 0xbfed91d7u},
    {3ull, 18364758544493064720ull, 1311768467463790320ull, 0x98b4ef2au, 0x3f18b4efu, 0xbfa4c53fu},
    {1000003ull, 18364758544493064720ull, 1311768467463790320ull, 0xe861c6ddu, 0x3f6861c6u, 0xbfb10692u},
};

TEST(Philox, BitsAreTheRecordedOnesInCAndCpp) {
  for (const Recorded& r : kRecorded) {
    SCOPED_TRACE("index " + std::to_string(r.index) + " offset " + std::to_string(r.offset) + " seed " +
                 std::to_string(r.seed));
    EXPECT_EQ(strata_philox_word(r.index, r.offset, r.seed), r.word);
    EXPECT_EQ(strata_philox_float_to_bits(strata_philox_uniform(r.word)), r.uniform_bits);
    EXPECT_EQ(strata_philox_float_to_bits(strata_philox_normal(r.index, r.offset, r.seed)), r.normal_bits);
    uint32_t word = 0, uniform_bits = 0, normal_bits = 0;
    gpu_math_test_philox_c(r.index, 1, r.offset, r.seed, &word, &uniform_bits, &normal_bits);
    EXPECT_EQ(word, r.word);
    EXPECT_EQ(uniform_bits, r.uniform_bits);
    EXPECT_EQ(normal_bits, r.normal_bits);
  }
  EXPECT_EQ(strata_philox_threshold(0.3), 5033165u);
  EXPECT_EQ(strata_philox_threshold(1e-9), 1u);
  EXPECT_EQ(strata_philox_threshold(0.999999), 16777200u);
}

TEST(Philox, CAndCppTranslationUnitsAgreeOnEveryBit) {
  const uint64_t n = 1 << 16, first = 123456789, offset = 99, seed = 0xdeadbeefcafef00dull;
  std::vector<uint32_t> words(n), uniforms(n), normals(n);
  gpu_math_test_philox_c(first, n, offset, seed, words.data(), uniforms.data(), normals.data());
  for (uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(words[i], strata_philox_word(first + i, offset, seed)) << i;
    ASSERT_EQ(uniforms[i], strata_philox_float_to_bits(strata_philox_uniform(words[i]))) << i;
    ASSERT_EQ(normals[i], strata_philox_float_to_bits(strata_philox_normal(first + i, offset, seed))) << i;
  }
}

}  // namespace
}  // namespace gpu_math_test
