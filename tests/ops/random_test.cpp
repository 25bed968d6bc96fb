// random_test.cpp — the random primitives (random_uniform, random_normal,
// bernoulli) through rand, randn and dropout, on every device: bit for bit
// equal to the reference strata/plugin/philox.h computed here on the host,
// identical across devices, f16/bf16/f64 equal to the reference rounded,
// plus statistics, seeding, generator state, and empty and 0-d shapes.
//
// This file is compiled with -ffp-contract=off (CMakeLists.txt), as philox.h
// requires, so the host reference is the exact binary32 computation.
#include <strata/plugin/half.hpp>
#include <strata/plugin/philox.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <span>

#include "device_fixture.hpp"

namespace strata::detail {
// The dropout mask's entry point (core/src/ops/random.cpp): the only way to
// reach bernoulli in integer and bool dtypes, which dropout never asks for.
Tensor bernoulli_tensor(std::span<const int64_t> shape, double p, DType dtype, Device device);
}  // namespace strata::detail

namespace strata_test {
namespace {

namespace s = strata;

// --- the reference ------------------------------------------------------------

enum class Dist { uniform, normal };

/// Reference values (binary32) of element i for i < n.
std::vector<float> reference(Dist dist, int64_t n, uint64_t seed, uint64_t offset) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto idx = static_cast<uint64_t>(i);
    out[static_cast<size_t>(i)] = dist == Dist::uniform
                                      ? strata_philox_uniform(strata_philox_word(idx, offset, seed))
                                      : strata_philox_normal(idx, offset, seed);
  }
  return out;
}

/// Reference bernoulli draws (0/1) for probability p.
std::vector<int> reference_bernoulli(int64_t n, double p, uint64_t seed, uint64_t offset) {
  const uint32_t threshold = strata_philox_threshold(p);
  std::vector<int> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    out[static_cast<size_t>(i)] = (strata_philox_word(static_cast<uint64_t>(i), offset, seed) >> 8) < threshold;
  }
  return out;
}

/// The reference value as `dtype` stores it, widened to double (exact).
double rounded(float v, DType dtype) {
  switch (dtype) {
    case s::f16: return s::f16_to_float(s::float_to_f16(v));
    case s::bf16: return s::bf16_to_float(s::float_to_bf16(v));
    default: return v;  // f32 and f64 hold a binary32 value exactly
  }
}

/// f32 values of a tensor as bit patterns (so -0.0 and NaN compare exactly).
std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<uint32_t> out;
  for (float v : t.contiguous().to_vector<float>()) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

std::vector<uint32_t> bits_of(const std::vector<float>& values) {
  std::vector<uint32_t> out;
  for (float v : values) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

/// Positions where the two differ, for a readable failure.
template <class A, class B>
::testing::AssertionResult same_values(const std::vector<A>& got, const std::vector<B>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " values, expected " << want.size();
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == static_cast<A>(want[i]))) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " values differ; first at " << first
                                       << ": got " << got[first] << ", expected " << want[first];
}

/// The (seed, offset) the next random call will use, from the generator's state.
std::pair<uint64_t, uint64_t> next_counter() {
  const std::string state = s::get_rng_state().data;
  const size_t a = state.find(' ');
  const size_t b = state.find(' ', a + 1);
  return {std::stoull(state.substr(a + 1, b - a - 1)), std::stoull(state.substr(b + 1))};
}

void set_counter(uint64_t seed, uint64_t offset) {
  s::set_rng_state({"philox4x32-10 " + std::to_string(seed) + " " + std::to_string(offset)});
}

/// Seeds and offsets that exercise both 32-bit halves of key and counter.
struct Counter {
  uint64_t seed, offset;
};
constexpr Counter kCounters[] = {
    {0, 0},
    {1234, 7},
    {0xFFFFFFFFFFFFFFFFull, 0xFFFFFFFFFFFFFFFEull},
    {0x0123456789ABCDEFull, 0x0000000500000003ull},
};

class Random : public DeviceTest {
 protected:
  s::TensorOptions on(DType dtype) const { return {.dtype = dtype, .device = dev()}; }
};
STRATA_INSTANTIATE_ON_DEVICES(Random);

// --- bit identity -----------------------------------------------------------------

TEST_P(Random, PhiloxMatchesRandom123KnownAnswers) {
  // The reference itself (kat_vectors of Random123 for philox4x32-10); the
  // host computation every other check here relies on.
  strata_philox_block b = strata_philox4x32_10(0, 0, 0);
  EXPECT_EQ(b.v[0], 0x6627e8d5u);
  EXPECT_EQ(b.v[1], 0xe169c58du);
  EXPECT_EQ(b.v[2], 0xbc57ac4cu);
  EXPECT_EQ(b.v[3], 0x9b00dbd8u);
  b = strata_philox4x32_10(0xffffffffffffffffull, 0xffffffffffffffffull, 0xffffffffffffffffull);
  EXPECT_EQ(b.v[0], 0x408f276du);
  EXPECT_EQ(b.v[1], 0x41c83b0eu);
  EXPECT_EQ(b.v[2], 0xa20bc7c6u);
  EXPECT_EQ(b.v[3], 0x6d5451fdu);
}

TEST_P(Random, RandAndRandnEqualTheReferenceBitForBitInF32) {
  for (const Counter& c : kCounters) {
    for (const Shape& shape : {Shape{1000}, Shape{3, 5, 7}, Shape{1}, Shape{2, 3}}) {
      STRATA_TRACE("seed " << c.seed << " offset " << c.offset << " shape " << shape_str(shape));
      const int64_t n = numel_of(shape);
      set_counter(c.seed, c.offset);
      Tensor u = s::rand(shape, on(s::f32));
      Tensor z = s::randn(shape, on(s::f32));
      ASSERT_EQ(u.device(), dev());
      EXPECT_EQ(u.sizes(), shape);
      EXPECT_EQ(z.sizes(), shape);
      EXPECT_TRUE(same_values(bits_of(u), bits_of(reference(Dist::uniform, n, c.seed, c.offset))));
      EXPECT_TRUE(same_values(bits_of(z), bits_of(reference(Dist::normal, n, c.seed, c.offset + 1))));
    }
  }
}

TEST_P(Random, BernoulliEqualsTheReferenceInEveryDtype) {
  const Shape shape{7, 9};
  const int64_t n = numel_of(shape);
  for (DType dtype : dtypes({s::f32, s::f64, s::f16, s::bf16, s::i32, s::i64, s::boolean})) {
    for (double p : {0.0, 0.3, 0.5, 0.9, 1.0}) {
      STRATA_TRACE(s::dtype_name(dtype) << " p " << p);
      const auto [seed, offset] = next_counter();
      Tensor m = s::detail::bernoulli_tensor(shape, p, dtype, dev());
      ASSERT_EQ(m.dtype(), dtype);
      ASSERT_EQ(m.device(), dev());
      EXPECT_TRUE(same_values(m.to_vector<double>(), reference_bernoulli(n, p, seed, offset)));
    }
  }
}

TEST_P(Random, OtherDtypesAreTheReferenceRounded) {
  const Shape shape{4, 129};
  const int64_t n = numel_of(shape);
  for (DType dtype : dtypes({s::f64, s::f16, s::bf16})) {
    STRATA_TRACE(s::dtype_name(dtype));
    s::manual_seed(99);
    Tensor u = s::rand(shape, on(dtype));
    Tensor z = s::randn(shape, on(dtype));
    ASSERT_EQ(u.dtype(), dtype);
    std::vector<double> ue, ze;
    for (float v : reference(Dist::uniform, n, 99, 0)) ue.push_back(rounded(v, dtype));
    for (float v : reference(Dist::normal, n, 99, 1)) ze.push_back(rounded(v, dtype));
    EXPECT_TRUE(same_values(u.to_vector<double>(), ue));
    EXPECT_TRUE(same_values(z.to_vector<double>(), ze));
  }
}

TEST_P(Random, EveryDeviceGivesTheCpusNumbers) {
  const s::Device cpu("cpu:0");
  for (DType dtype : dtypes({s::f32, s::f16, s::bf16, s::f64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    s::manual_seed(2024);
    Tensor u = s::rand({33, 17}, on(dtype));
    Tensor z = s::randn({33, 17}, on(dtype));
    Tensor d = s::nn::functional::dropout(s::ones({33, 17}, on(dtype)), 0.4);
    s::manual_seed(2024);
    Tensor uc = s::rand({33, 17}, {.dtype = dtype, .device = cpu});
    Tensor zc = s::randn({33, 17}, {.dtype = dtype, .device = cpu});
    Tensor dc = s::nn::functional::dropout(s::ones({33, 17}, {.dtype = dtype, .device = cpu}), 0.4);
    EXPECT_TRUE(same_values(u.to_vector<double>(), uc.to_vector<double>()));
    EXPECT_TRUE(same_values(z.to_vector<double>(), zc.to_vector<double>()));
    EXPECT_TRUE(same_values(d.to_vector<double>(), dc.to_vector<double>()));
  }
}

TEST_P(Random, DeviceKernelsRunThereAndMissingOnesFallBack) {
  // A device with the kernels generates on the device (no fallback); one
  // without (the "mini" test plugin) falls back to the CPU, counted, and the
  // checks above show the numbers are the same either way.
  s::runtime().reset_fallback_stats();
  (void)s::rand({10}, on(s::f32));
  (void)s::randn({10}, on(s::f32));
  (void)s::nn::functional::dropout(s::ones({10}, on(s::f32)), 0.5);
  const std::vector<std::string>& missing = info_.missing_primitives;
  for (const char* op : {"random_uniform", "random_normal", "bernoulli"}) {
    const bool has_kernel = std::find(missing.begin(), missing.end(), op) == missing.end();
    bool fell_back = false;
    for (const s::FallbackRecord& r : s::runtime().fallback_stats()) {
      fell_back = fell_back || (r.op == op && r.device == dev().str());
    }
    EXPECT_NE(has_kernel, fell_back) << op << (has_kernel ? " has a kernel but fell back" : " did not fall back");
  }
}

// --- statistics -------------------------------------------------------------------

TEST_P(Random, MomentsAreWithinFiveSigma) {
  constexpr int64_t n = 100000;
  s::manual_seed(31337);
  std::vector<double> u = s::rand({n}, on(s::f32)).to_vector<double>();
  std::vector<double> z = s::randn({n}, on(s::f32)).to_vector<double>();
  auto moments = [](const std::vector<double>& v) {
    double m = 0.0;
    for (double x : v) m += x;
    m /= static_cast<double>(v.size());
    double var = 0.0;
    for (double x : v) var += (x - m) * (x - m);
    return std::pair{m, var / static_cast<double>(v.size())};
  };
  const double sn = std::sqrt(static_cast<double>(n));
  auto [um, uv] = moments(u);
  EXPECT_NEAR(um, 0.5, 5.0 * std::sqrt(1.0 / 12.0) / sn);
  EXPECT_NEAR(uv, 1.0 / 12.0, 5.0 * std::sqrt(1.0 / 180.0) / sn);  // var of U(0,1)^2 terms: 1/180
  for (double x : u) {
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
  }
  auto [zm, zv] = moments(z);
  EXPECT_NEAR(zm, 0.0, 5.0 / sn);
  EXPECT_NEAR(zv, 1.0, 5.0 * std::sqrt(2.0) / sn);
  for (double x : z) ASSERT_TRUE(std::isfinite(x));
  // Both tails are reached, and not absurdly far.
  EXPECT_LT(*std::min_element(z.begin(), z.end()), -3.5);
  EXPECT_GT(*std::max_element(z.begin(), z.end()), 3.5);
  EXPECT_LT(*std::max_element(z.begin(), z.end()), 6.5);
}

// --- the generator ------------------------------------------------------------------

TEST_P(Random, ManualSeedReproducesAndCallsDiffer) {
  s::manual_seed(5);
  std::vector<float> a = s::rand({64}, on(s::f32)).to_vector<float>();
  std::vector<float> b = s::rand({64}, on(s::f32)).to_vector<float>();
  std::vector<float> an = s::randn({64}, on(s::f32)).to_vector<float>();
  EXPECT_NE(a, b) << "consecutive calls gave the same numbers";
  s::manual_seed(5);
  EXPECT_EQ(s::rand({64}, on(s::f32)).to_vector<float>(), a);
  EXPECT_EQ(s::rand({64}, on(s::f32)).to_vector<float>(), b);
  EXPECT_EQ(s::randn({64}, on(s::f32)).to_vector<float>(), an);
  s::manual_seed(6);
  EXPECT_NE(s::rand({64}, on(s::f32)).to_vector<float>(), a) << "another seed gave the same numbers";
  // A call's numbers do not depend on its shape: the first 8 elements of a
  // [2, 4] draw are those of a [100] draw with the same counter.
  s::manual_seed(5);
  std::vector<float> small = s::rand({2, 4}, on(s::f32)).to_vector<float>();
  EXPECT_EQ(small, std::vector<float>(a.begin(), a.begin() + 8));
}

TEST_P(Random, RngStateRoundTripsAndRefusesAnythingElse) {
  s::manual_seed(77);
  (void)s::rand({3}, on(s::f32));
  const s::RngState state = s::get_rng_state();
  std::vector<float> a = s::rand({50}, on(s::f32)).to_vector<float>();
  std::vector<float> an = s::randn({50}, on(s::f32)).to_vector<float>();
  s::set_rng_state(state);
  EXPECT_EQ(s::get_rng_state().data, state.data);
  EXPECT_EQ(s::rand({50}, on(s::f32)).to_vector<float>(), a);
  EXPECT_EQ(s::randn({50}, on(s::f32)).to_vector<float>(), an);
  const std::string advanced = s::get_rng_state().data;
  EXPECT_NE(advanced, state.data) << "the generator did not advance";

  for (const char* bad : {"", "garbage", "philox4x32-10", "philox4x32-10 1", "philox4x32-10 1 2 3",
                          "philox4x32-10 -1 2", "philox4x32-10 1 2 ", "philox4x32-10 18446744073709551616 0",
                          "1 2", "5489 1 2 3 4 5 6 7 8"}) {
    STRATA_TRACE("state \"" << bad << "\"");
    EXPECT_TRUE(throws<s::ValueError>([&] { s::set_rng_state({bad}); }, {"set_rng_state"}));
  }
  EXPECT_EQ(s::get_rng_state().data, advanced) << "a refused state changed the generator";
}

// --- shapes -------------------------------------------------------------------------

TEST_P(Random, EmptyAndZeroDimensionalShapes) {
  for (const Shape& shape : {Shape{0}, Shape{3, 0, 2}}) {
    Tensor u = s::rand(shape, on(s::f32));
    Tensor z = s::randn(shape, on(s::f32));
    EXPECT_EQ(u.sizes(), shape);
    EXPECT_EQ(z.sizes(), shape);
    EXPECT_EQ(u.numel(), 0);
    EXPECT_EQ(u.device(), dev());
    Tensor d = s::nn::functional::dropout(s::ones(shape, on(s::f32)), 0.5);
    EXPECT_EQ(d.sizes(), shape);
  }
  s::manual_seed(11);
  Tensor u = s::rand({}, on(s::f32));
  Tensor z = s::randn({}, on(s::f32));
  EXPECT_EQ(u.dim(), 0);
  EXPECT_EQ(z.dim(), 0);
  EXPECT_EQ(std::bit_cast<uint32_t>(u.item<float>()), bits_of(reference(Dist::uniform, 1, 11, 0))[0]);
  EXPECT_EQ(std::bit_cast<uint32_t>(z.item<float>()), bits_of(reference(Dist::normal, 1, 11, 1))[0]);
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::rand({2, -1}, on(s::f32)); }, {"rand"}));
  EXPECT_TRUE(throws<s::DTypeError>([&] { s::rand({2}, on(s::i32)); }, {"rand"}));
  EXPECT_TRUE(throws<s::DTypeError>([&] { s::randn({2}, on(s::boolean)); }, {"randn"}));
}

TEST_P(Random, DrawsAreLeavesWithoutHistory) {
  Tensor u = s::rand({4}, on(s::f32));
  EXPECT_FALSE(u.requires_grad());
  EXPECT_TRUE(u.is_leaf());
  Tensor w = s::randn({4}, {.dtype = s::f32, .device = dev(), .requires_grad = true});
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
}

// --- dropout --------------------------------------------------------------------------

TEST_P(Random, DropoutKeepsAboutOneMinusPAndScales) {
  constexpr int64_t n = 200000;
  for (DType dtype : dtypes({s::f32, s::f16, s::bf16, s::f64})) {
    for (double p : {0.1, 0.5, 0.8}) {
      STRATA_TRACE(s::dtype_name(dtype) << " p " << p);
      const auto [seed, offset] = next_counter();
      Tensor y = s::nn::functional::dropout(s::ones({n}, on(dtype)), p);
      ASSERT_EQ(y.dtype(), dtype);
      ASSERT_EQ(y.device(), dev());
      // The scale as the dtype stores it: ones * mask * (1 / (1 - p)).
      const double scale = s::full({}, 1.0 / (1.0 - p), {.dtype = dtype, .device = s::Device("cpu:0")}).item<double>();
      std::vector<double> v = y.to_vector<double>();
      std::vector<int> mask = reference_bernoulli(n, 1.0 - p, seed, offset);
      int64_t kept = 0;
      size_t wrong = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        kept += v[i] != 0.0;
        wrong += v[i] != (mask[i] != 0 ? scale : 0.0);
      }
      EXPECT_EQ(wrong, 0u) << "elements differ from the reference mask times 1/(1-p)";
      const double keep = 1.0 - p;
      EXPECT_NEAR(static_cast<double>(kept) / n, keep, 5.0 * std::sqrt(keep * p / n));
    }
  }
}

TEST_P(Random, DropoutGradientFlowsThroughTheMask) {
  s::manual_seed(8);
  Tensor x = s::ones({500}, on(s::f32));
  x.set_requires_grad(true);
  s::GradientTape tape;
  Tensor y = s::nn::functional::dropout(x, 0.25);
  std::vector<Tensor> g = tape.gradient(s::sum(y), {x});
  ASSERT_EQ(g.size(), 1u);
  // d sum(x * mask * s) / dx = mask * s = y for x = 1.
  EXPECT_EQ(g[0].to_vector<float>(), y.to_vector<float>());
  // Argument checks are kept; p = 0, eval mode and p = 1 draw nothing.
  EXPECT_TRUE(throws<s::ValueError>([&] { s::nn::functional::dropout(x, 1.5); }, {"dropout"}));
  EXPECT_TRUE(throws<s::DTypeError>([&] { s::nn::functional::dropout(s::ones({2}, on(s::i64)), 0.5); },
                                    {"dropout"}));
  const std::string before = s::get_rng_state().data;
  EXPECT_EQ(s::nn::functional::dropout(x, 0.0).impl(), x.impl());
  EXPECT_EQ(s::nn::functional::dropout(x, 0.5, false).impl(), x.impl());
  EXPECT_EQ(s::nn::functional::dropout(x, 1.0).to_vector<float>(), std::vector<float>(500, 0.0f));
  EXPECT_EQ(s::get_rng_state().data, before);
}

}  // namespace
}  // namespace strata_test
