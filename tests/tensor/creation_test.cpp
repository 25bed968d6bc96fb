// creation_test.cpp — zeros/ones/full/arange/rand/randn/bernoulli/from_data, dtype
// names and the promotion table, on the default device.
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <numeric>
#include <strata/nn/functional.hpp>

#include "reference.hpp"

#include "../common/test_device.hpp"


namespace strata_test {
namespace {

namespace s = strata;
using s::DType;

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

TEST(Creation, ZerosOnesFull) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor z = s::zeros({2, 3});
  EXPECT_EQ(z.dtype(), s::f32);
  EXPECT_EQ(z.sizes(), (Shape{2, 3}));
  EXPECT_EQ(z.dim(), 2);
  EXPECT_EQ(z.numel(), 6);
  EXPECT_EQ(z.size(-1), 3);
  EXPECT_EQ(Shape(z.strides().begin(), z.strides().end()), (Shape{3, 1}));
  EXPECT_EQ(z.offset(), 0);
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_TRUE(z.device() == s::runtime().default_device());
  EXPECT_EQ(values(z), std::vector<double>(6, 0.0));

  Tensor o = s::ones({4}, {.dtype = s::i32, .device = {}});
  EXPECT_EQ(o.dtype(), s::i32);
  EXPECT_EQ(o.to_vector<int32_t>(), std::vector<int32_t>(4, 1));

  Tensor f = s::full({2, 2}, 3.5, {.dtype = s::f64, .device = {}});
  EXPECT_EQ(values(f), std::vector<double>(4, 3.5));
  Tensor b = s::full({3}, 2.0, {.dtype = s::boolean, .device = {}});
  EXPECT_EQ(b.to_vector<bool>(), std::vector<bool>(3, true));
  Tensor truncated = s::full({2}, -2.75, {.dtype = s::i64, .device = {}});
  EXPECT_EQ(truncated.to_vector<int64_t>(), (std::vector<int64_t>{-2, -2}));

  Tensor e = s::zeros({0, 4});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.sizes(), (Shape{0, 4}));
  EXPECT_TRUE(values(e).empty());
  Tensor scalar = s::scalar_tensor(2.5);
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(scalar.item<float>(), 2.5f);

  Tensor u = s::empty({3, 5}, {.dtype = s::bf16, .device = {}});
  EXPECT_EQ(u.dtype(), s::bf16);
  EXPECT_EQ(u.sizes(), (Shape{3, 5}));

  EXPECT_TRUE(throws<s::ShapeError>([] { s::zeros({2, -1}); }, {"negative", "[2, -1]"}));
}

TEST(Creation, LikeFunctionsKeepShapeDtypeDevice) {
  Tensor t = s::full({2, 3}, 7.0, {.dtype = s::i64, .device = {}}).mT();
  for (const Tensor& like : {s::zeros_like(t), s::ones_like(t), s::full_like(t, 4.0)}) {
    EXPECT_EQ(like.dtype(), s::i64);
    EXPECT_EQ(like.sizes(), (Shape{3, 2}));
    EXPECT_TRUE(like.device() == t.device());
    EXPECT_TRUE(like.is_contiguous());
  }
  EXPECT_EQ(s::full_like(t, 4.0).to_vector<int64_t>(), std::vector<int64_t>(6, 4));
  EXPECT_EQ(s::ones_like(t).to_vector<int64_t>(), std::vector<int64_t>(6, 1));
}

TEST(Creation, Arange) {
  Tensor a = s::arange(5);
  EXPECT_EQ(a.dtype(), s::i64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  Tensor f = s::arange(1.0, 2.0, 0.25, {.dtype = s::f32, .device = {}});
  EXPECT_EQ(f.dtype(), s::f32);
  EXPECT_EQ(values(f), (std::vector<double>{1.0, 1.25, 1.5, 1.75}));
  EXPECT_EQ(s::arange(5.0, 0.0, -2.0).to_vector<int64_t>(), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(s::arange(0.0, 0.0).numel(), 0);
  EXPECT_EQ(s::arange(3.0, 1.0).sizes(), (Shape{0}));
  EXPECT_TRUE(throws<s::Error>([] { s::arange(0.0, 1.0, 0.0); }, {"arange", "step"}));
}

TEST(Creation, RandAndRandnAreReproducibleWithManualSeed) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  s::manual_seed(42);
  std::vector<double> a = values(s::rand({1000}));
  std::vector<double> an = values(s::randn({1001}));
  s::manual_seed(42);
  std::vector<double> b = values(s::rand({1000}));
  std::vector<double> bn = values(s::randn({1001}));
  EXPECT_EQ(a, b);
  EXPECT_EQ(an, bn);
  std::vector<double> c = values(s::rand({1000}));
  EXPECT_NE(a, c) << "the generator did not advance";
  s::manual_seed(43);
  EXPECT_NE(values(s::rand({1000})), a) << "another seed gave the same numbers";

  // Same stream whatever the dtype: f64 values round to the f32 ones.
  s::manual_seed(7);
  std::vector<double> d64 = values(s::rand({64}, {.dtype = s::f64, .device = {}}));
  s::manual_seed(7);
  std::vector<double> d32 = values(s::rand({64}));
  for (size_t i = 0; i < d64.size(); ++i) EXPECT_EQ(static_cast<double>(static_cast<float>(d64[i])), d32[i]) << i;
}

TEST(Creation, RandAndRandnDistributions) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  s::manual_seed(123);
  std::vector<double> u = values(s::rand({20000}, {.dtype = s::f64, .device = {}}));
  double mean = std::accumulate(u.begin(), u.end(), 0.0) / static_cast<double>(u.size());
  EXPECT_NEAR(mean, 0.5, 0.01);
  for (double v : u) {
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
  }
  std::vector<double> n = values(s::randn({20001}, {.dtype = s::f64, .device = {}}));
  double m = std::accumulate(n.begin(), n.end(), 0.0) / static_cast<double>(n.size());
  double var = 0.0;
  for (double v : n) var += (v - m) * (v - m);
  var /= static_cast<double>(n.size());
  EXPECT_NEAR(m, 0.0, 0.03);
  EXPECT_NEAR(var, 1.0, 0.05);
  EXPECT_TRUE(throws<s::DTypeError>([] { s::randn({2}, {.dtype = s::i32, .device = {}}); }, {"randn"}));
}

TEST(Creation, BernoulliIsDropoutsMaskAndRefusesABadP) {
  s::manual_seed(5);
  std::vector<double> mask = values(s::bernoulli({1000}, 0.3));
  const double ones = std::accumulate(mask.begin(), mask.end(), 0.0);
  for (double v : mask) ASSERT_TRUE(v == 0.0 || v == 1.0) << v;
  EXPECT_NEAR(ones / 1000.0, 0.3, 0.05);
  // The same draw as dropout's: keep-probability 1 - p, scaled by 1/(1 - p).
  s::manual_seed(5);
  std::vector<double> dropped = values(s::nn::functional::dropout(s::ones({1000}), 0.7));
  for (size_t i = 0; i < mask.size(); ++i) EXPECT_NEAR(dropped[i], mask[i] / 0.3, 1e-5) << i;
  EXPECT_EQ(values(s::bernoulli({5}, 0.0)), std::vector<double>(5, 0.0));
  EXPECT_EQ(values(s::bernoulli({5}, 1.0)), std::vector<double>(5, 1.0));
  EXPECT_TRUE(throws<s::ValueError>([] { s::bernoulli({2}, 1.5); }, {"bernoulli", "p must be in [0, 1]"}));
  EXPECT_TRUE(throws<s::ValueError>([] { s::bernoulli({2}, std::nan("")); }, {"bernoulli", "p"}));
}

TEST(Creation, FromData) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  const std::vector<float> f{1.5f, -2.0f, 3.25f, 4.0f, 5.0f, 6.0f};
  Tensor t = s::from_data(f, {2, 3});
  EXPECT_EQ(t.dtype(), s::f32);
  EXPECT_EQ(t.sizes(), (Shape{2, 3}));
  EXPECT_EQ(t.to_vector<float>(), f);
  const std::vector<double> d{0.1, 0.2};
  EXPECT_EQ(s::from_data(d, {2}).dtype(), s::f64);
  EXPECT_EQ(s::from_data(d, {2}).to_vector<double>(), d);
  const std::vector<int64_t> i64{1, -2, 3};
  EXPECT_EQ(s::from_data(i64, {3}).to_vector<int64_t>(), i64);
  const std::vector<int32_t> i32{7, 8, 9, 10};
  Tensor it = s::from_data(i32, {2, 2});
  EXPECT_EQ(it.dtype(), s::i32);
  EXPECT_EQ(it.to_vector<int32_t>(), i32);
  // Converted to options.dtype.
  Tensor conv = s::from_data(f, {6}, {.dtype = s::i64, .device = {}});
  EXPECT_EQ(conv.to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3, 4, 5, 6}));
  Tensor lit = s::tensor({1, 2, 3});
  EXPECT_EQ(lit.sizes(), (Shape{3}));
  EXPECT_EQ(lit.dtype(), s::f32);
  EXPECT_EQ(values(lit), (std::vector<double>{1, 2, 3}));
  // 0-d from one value, empty from none.
  EXPECT_EQ(s::from_data(std::vector<double>{4.0}, {}).item<double>(), 4.0);
  EXPECT_EQ(s::from_data(std::vector<float>{}, {0, 3}).sizes(), (Shape{0, 3}));

  EXPECT_TRUE(throws<s::ShapeError>([&] { s::from_data(f, {4, 2}); }, {"from_data", "6", "[4, 2]", "8"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::from_data(i64, {}); }, {"from_data", "3"}));
}

// Shapes whose element count or size in bytes does not fit in int64 are
// ShapeErrors naming the function and the shape. They used to wrap round:
// zeros({2^62, 4}) had 0 elements, zeros({2^62 + 1, 4}) a 16-byte block that
// kernels overran, zeros({INT64_MAX}) wrote past its block.
TEST(Creation, ShapesThatOverflowAreShapeErrors) {
  const int64_t big = int64_t{1} << 62;
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::zeros({big, 4}); }, {"zeros", "[4611686018427387904, 4]", "overflows"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::zeros({big + 1, 4}); }, {"zeros", "[4611686018427387905, 4]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::zeros({max}); }, {"zeros", "[9223372036854775807]", "bytes"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::ones({4, big + 1}); }, {"ones", "[4, 4611686018427387905]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::full({big, 2, 2}, 1.0); }, {"full", "[4611686018427387904, 2, 2]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::empty({max, max}); }, {"empty", "overflows"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::rand({big + 1, 4}); }, {"rand", "[4611686018427387905, 4]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::randn({big + 1, 4}); }, {"randn", "[4611686018427387905, 4]"}));
  // 16 values "fill" a shape whose element count wraps round to 16.
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::from_data(std::vector<float>(16, 1.0f), {big + 1, 4, 4}); },
                                    {"from_data", "[4611686018427387905, 4, 4]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::from_bytes(std::vector<uint8_t>(16, 0), {big + 1, 4}); },
                                    {"from_bytes", "[4611686018427387905, 4]"}));
  // Zero-size dims do not excuse the others: their strides must still fit.
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::zeros({0, big, 4}); }, {"zeros", "[0, 4611686018427387904, 4]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::zeros({-4, 2}); }, {"zeros", "negative", "[-4, 2]"}));
  // The runtime still works.
  EXPECT_EQ(values(s::add(s::ones({2, 2}), s::full({2}, 2.0))), std::vector<double>(4, 3.0));
}

TEST(Creation, RankAboveTheMaximumIsAShapeError) {
  const Shape nine{1, 1, 1, 1, 1, 1, 1, 2, 3};
  for (auto [name, make] : std::initializer_list<std::pair<const char*, Tensor (*)(const Shape&)>>{
           {"zeros", [](const Shape& sh) { return s::zeros(sh); }},
           {"ones", [](const Shape& sh) { return s::ones(sh); }},
           {"full", [](const Shape& sh) { return s::full(sh, 2.0); }},
           {"empty", [](const Shape& sh) { return s::empty(sh); }},
           {"rand", [](const Shape& sh) { return s::rand(sh); }},
           {"randn", [](const Shape& sh) { return s::randn(sh); }},
           {"from_data", [](const Shape& sh) { return s::from_data(std::vector<float>(6, 1.0f), sh); }}}) {
    EXPECT_TRUE(throws<s::ShapeError>([&, make = make] { make(nine); },
                                      {name, "rank 9 exceeds the maximum rank 8", "[1, 1, 1, 1, 1, 1, 1, 2, 3]"}))
        << name;
  }
  EXPECT_EQ(s::zeros({1, 1, 1, 1, 1, 1, 2, 3}).dim(), 8);
}

// An allocation that fits int64 but no device: OutOfMemoryError naming the
// function, the bytes and the device (randn and rand used to throw
// std::bad_alloc).
TEST(Creation, AllocationsNoDeviceCanHoldAreOutOfMemoryErrors) {
  const std::string device = s::runtime().default_device().str();
  // 2^60 f32 elements, 4 EiB: more than any address space.
  const Shape huge{int64_t{1} << 30, int64_t{1} << 30};
  EXPECT_TRUE(throws<s::OutOfMemoryError>([&] { s::randn(huge); }, {"randn", "4611686018427387904 bytes", device}));
  EXPECT_TRUE(throws<s::OutOfMemoryError>([&] { s::rand(huge); }, {"rand", "4611686018427387904 bytes", device}));
  EXPECT_TRUE(throws<s::OutOfMemoryError>([&] { s::zeros(huge); }, {"zeros", "4611686018427387904 bytes", device}));
  EXPECT_TRUE(throws<s::OutOfMemoryError>([&] { s::ones(huge); }, {"ones", "bytes", device}));
  EXPECT_TRUE(throws<s::OutOfMemoryError>([&] { s::full(huge, 3.0); }, {"full", "bytes", device}));
  EXPECT_TRUE(throws<s::OutOfMemoryError>([&] { s::empty(huge); }, {"empty", "bytes", device}));
  // Reading a huge (expanded) view to the host needs 4 EiB of host memory.
  Tensor wide = s::ones({1}).expand({int64_t{1} << 60});
#ifndef __SANITIZE_ADDRESS__
  // (Host memory comes from operator new, which AddressSanitizer never lets
  // throw std::bad_alloc: it reports "out of memory" and ends the process.)
  EXPECT_TRUE(throws<s::OutOfMemoryError>([&] { wide.to_vector<float>(); }, {"f32[1152921504606846976]", "bytes"}));
#endif
  EXPECT_TRUE(throws<s::OutOfMemoryError>([&] { wide.contiguous(); }, {"bytes", device}));
  // The probe's case, 4 TB: beyond this machine unless the kernel overcommits
  // without limit (vm.overcommit_memory = 1), where writing it would kill us.
  std::ifstream overcommit("/proc/sys/vm/overcommit_memory");
  int mode = 0;
  if (!(overcommit >> mode) || mode != 1) {
    EXPECT_TRUE(throws<s::OutOfMemoryError>([] { s::randn({1000000, 1000000}); },
                                            {"randn", "4000000000000 bytes", device}));
    EXPECT_TRUE(throws<s::OutOfMemoryError>([] { s::rand({1000000, 1000000}); }, {"rand", "bytes", device}));
  }
  // The runtime still works.
  EXPECT_EQ(values(s::mul(s::full({3}, 2.0), s::full({3}, 4.0))), std::vector<double>(3, 8.0));
  EXPECT_EQ(s::randn({4}).numel(), 4);
}

TEST(DTypes, NamesAndSizes) {
  const std::pair<DType, const char*> names[] = {{s::f32, "f32"},   {s::f64, "f64"},     {s::f16, "f16"},
                                                 {s::bf16, "bf16"}, {s::i32, "i32"},     {s::i64, "i64"},
                                                 {s::boolean, "bool"}, {s::c64, "c64"}, {s::c128, "c128"}};
  for (auto [t, name] : names) {
    EXPECT_EQ(s::dtype_name(t), name);
    EXPECT_EQ(s::dtype_from_name(name), t);
  }
  EXPECT_EQ(s::dtype_from_name("float32"), s::f32);
  EXPECT_EQ(s::dtype_from_name("int64"), s::i64);
  EXPECT_TRUE(throws<s::DTypeError>([] { s::dtype_from_name("complex32"); }, {"complex32"}));
  EXPECT_EQ(s::dtype_size(s::f64), 8u);
  EXPECT_EQ(s::dtype_size(s::bf16), 2u);
  EXPECT_EQ(s::dtype_size(s::boolean), 1u);
}

TEST(DTypes, PromotionTable) {
  // Rows and columns: f32 f64 f16 bf16 i32 i64 bool.
  constexpr DType F32 = s::f32, F64 = s::f64, F16 = s::f16, B16 = s::bf16, I32 = s::i32, I64 = s::i64, BOO = s::boolean;
  const DType order[] = {F32, F64, F16, B16, I32, I64, BOO};
  const DType table[7][7] = {
      /* f32  */ {F32, F64, F32, F32, F32, F32, F32},
      /* f64  */ {F64, F64, F64, F64, F64, F64, F64},
      /* f16  */ {F32, F64, F16, F32, F16, F16, F16},
      /* bf16 */ {F32, F64, F32, B16, B16, B16, B16},
      /* i32  */ {F32, F64, F16, B16, I32, I64, I32},
      /* i64  */ {F32, F64, F16, B16, I64, I64, I64},
      /* bool */ {F32, F64, F16, B16, I32, I64, BOO},
  };
  for (int r = 0; r < 7; ++r) {
    for (int c = 0; c < 7; ++c) {
      EXPECT_EQ(s::promote_types(order[r], order[c]), table[r][c])
          << s::dtype_name(order[r]) << " with " << s::dtype_name(order[c]) << " gave "
          << s::dtype_name(s::promote_types(order[r], order[c]));
    }
  }
}


using namespace strata;  // for the tests below

// --- raw bytes, and how messages write tensors -----------------------------------------------

TEST(Creation, BytesRoundTripInEveryDtype) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean}) {
    Tensor t = cast(from_data(std::vector<double>{0, 1, -2, 3.5, 0, 1}, {2, 3}), dt);
    std::vector<uint8_t> bytes = t.to_bytes();
    ASSERT_EQ(bytes.size(), 6 * dtype_size(dt)) << dtype_name(dt);
    Tensor back = from_bytes(bytes, {2, 3}, {.dtype = dt});
    EXPECT_EQ(back.dtype(), dt);
    EXPECT_EQ(back.sizes(), (Shape{2, 3}));
    EXPECT_EQ(back.to_bytes(), bytes) << dtype_name(dt);
    EXPECT_EQ(back.to_vector<double>(), t.to_vector<double>()) << dtype_name(dt);
  }
  // A strided view gives its elements in row-major order.
  Tensor m = from_data(std::vector<float>{1, 2, 3, 4}, {2, 2});
  std::vector<uint8_t> tb = m.transpose(0, 1).to_bytes();
  std::vector<float> f(4);
  std::memcpy(f.data(), tb.data(), tb.size());
  EXPECT_EQ(f, (std::vector<float>{1, 3, 2, 4}));
}

TEST(Creation, FromBytesNamesWhatDoesNotFit) {
  std::vector<uint8_t> five(5, 0);
  try {
    from_bytes(five, {2}, {.dtype = DType::f32});
    ADD_FAILURE() << "5 bytes for f32[2] were accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("5 bytes do not fill f32[2] (8 bytes)"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> bad_bool{0, 1, 7};
  EXPECT_THROW(from_bytes(bad_bool, {3}, {.dtype = DType::boolean}), ValueError);
  EXPECT_THROW(from_bytes(five, {-5}, {.dtype = DType::boolean}), Error);
}

TEST(Creation, TypeShapeAndByteStrings) {
  EXPECT_EQ(type_string(zeros({2, 3})), "f32[2, 3]");
  EXPECT_EQ(type_string(scalar_tensor(1.0, {.dtype = DType::i64})), "i64[]");
  EXPECT_EQ(type_string(Tensor()), "undefined");
  EXPECT_EQ(shape_string(Shape{4, 0, 1}), "[4, 0, 1]");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(uint64_t{3} << 30), "3.0 GiB");
}

}  // namespace
}  // namespace strata_test
