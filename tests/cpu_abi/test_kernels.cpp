// Kernels called through the C ABI and compared with naive reference loops.
#include "plugin_fixture.hpp"

#include <cmath>
#include <limits>

namespace strata::cpu_abi {
namespace {

std::vector<float> iota_values(size_t n, float start = 0.0f, float step = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

TEST_F(CpuAbiTest, AddWithBroadcastStrides) {
  DeviceTensor& a = tensor<float>(STRATA_F32, {3, 4}, iota_values(12));
  DeviceTensor& row = tensor<float>(STRATA_F32, {4}, {10, 20, 30, 40});
  row.view({3, 4}, {0, 1});
  DeviceTensor& scalar = tensor<float>(STRATA_F32, {}, {0.5f});
  scalar.view({3, 4}, {0, 0});
  DeviceTensor& y = output(STRATA_F32, {3, 4});
  ASSERT_EQ(run(STRATA_OP_ADD, "f32,f32->f32", {&a, &row}, y), STRATA_OK) << last_error.message;
  std::vector<float> out = y.download<float>();
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) EXPECT_EQ(out[i * 4 + j], static_cast<float>(i * 4 + j + 10 * (j + 1)));
  }
  ASSERT_EQ(run(STRATA_OP_ADD, "f32,f32->f32", {&a, &scalar}, y), STRATA_OK);
  out = y.download<float>();
  for (int i = 0; i < 12; ++i) EXPECT_EQ(out[i], static_cast<float>(i) + 0.5f);
}

TEST_F(CpuAbiTest, RankZeroOperands) {
  DeviceTensor& a = tensor<int64_t>(STRATA_I64, {}, {-7});
  DeviceTensor& b = tensor<int64_t>(STRATA_I64, {}, {2});
  DeviceTensor& y = output(STRATA_I64, {});
  ASSERT_EQ(run(STRATA_OP_DIV, "i64,i64->i64", {&a, &b}, y), STRATA_OK);
  EXPECT_EQ(y.download<int64_t>()[0], -3);  // truncating
}

// Permuted, broadcast and offset views, large enough to run multithreaded.
TEST_F(CpuAbiTest, MulOnPermutedViewsMatchesReference) {
  const std::vector<float> xs = random_values(40 * 30 * 50, 1);
  DeviceTensor& x = tensor<float>(STRATA_F32, {40, 30, 50}, xs);
  x.view({50, 40, 30}, {1, 1500, 50});  // permute(2, 0, 1)
  const std::vector<float> bs = random_values(31, 2);
  DeviceTensor& b = tensor<float>(STRATA_F32, {31}, bs);
  b.view({50, 40, 30}, {0, 0, 1}, 1);  // b[1:] broadcast along the last dim
  DeviceTensor& y = output(STRATA_F32, {50, 40, 30});
  ASSERT_EQ(run(STRATA_OP_MUL, "f32,f32->f32", {&x, &b}, y), STRATA_OK);
  const std::vector<float> out = y.download<float>();
  int64_t i = 0;
  for_each_index({50, 40, 30}, [&](const std::vector<int64_t>& p) {
    ASSERT_EQ(out[i++], xs[offset_of(x.desc(), p)] * bs[offset_of(b.desc(), p)]);
  });
}

TEST_F(CpuAbiTest, CopyStridedInputAndOutput) {
  DeviceTensor& x = tensor<float>(STRATA_F32, {3, 4}, iota_values(12));
  x.view({4, 3}, {1, 4});  // transpose
  DeviceTensor& y = output(STRATA_F32, {4, 3});
  ASSERT_EQ(run(STRATA_OP_COPY, "f32->f32", {&x}, y), STRATA_OK);
  std::vector<float> out = y.download<float>();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(out[i * 3 + j], static_cast<float>(j * 4 + i));
  }
  // Into every other element of a 2 x 8 buffer, starting at element 1.
  DeviceTensor& src = tensor<float>(STRATA_F32, {2, 4}, iota_values(8, 100));
  DeviceTensor& dst = tensor<float>(STRATA_F32, {16}, std::vector<float>(16, -1.0f));
  dst.view({2, 4}, {8, 2}, 1);
  ASSERT_EQ(run(STRATA_OP_COPY, "f32->f32", {&src}, dst), STRATA_OK);
  out = dst.download<float>();
  for (int k = 0; k < 16; ++k) {
    const float expected = k % 2 == 1 ? 100.0f + static_cast<float>(k / 8 * 4 + k % 8 / 2) : -1.0f;
    EXPECT_EQ(out[k], expected) << k;
  }
}

TEST_F(CpuAbiTest, CastF32ToBf16AndBack) {
  const std::vector<float> values = {1.0f, 3.14159265f, -2.5e-3f, 65504.0f, 1.0e30f, -0.0f, 1.00390625f};
  const int64_t n = static_cast<int64_t>(values.size());
  DeviceTensor& x = tensor<float>(STRATA_F32, {n}, values);
  DeviceTensor& h = output(STRATA_BF16, {n});
  DeviceTensor& back = output(STRATA_F32, {n});
  ASSERT_EQ(run(STRATA_OP_CAST, "f32->bf16", {&x}, h), STRATA_OK);
  ASSERT_EQ(run(STRATA_OP_CAST, "bf16->f32", {&h}, back), STRATA_OK);
  const std::vector<uint16_t> bits = h.download<uint16_t>();
  const std::vector<float> out = back.download<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(bits[i], float_to_bf16(values[i])) << values[i];
    EXPECT_EQ(out[i], bf16_to_float(float_to_bf16(values[i])));
    EXPECT_NEAR(out[i], values[i], std::fabs(values[i]) / 128);
  }
}

// The host names the target of a cast as a DTYPE attribute; it must agree
// with the kernel's output.
TEST_F(CpuAbiTest, CastChecksItsDtypeAttribute) {
  DeviceTensor& x = tensor<float>(STRATA_F32, {2}, {1.5f, -2.5f});
  DeviceTensor& y = output(STRATA_I64, {2});
  ASSERT_EQ(run(STRATA_OP_CAST, "f32->i64", {&x}, y, Attrs().dtype("dtype", STRATA_I64)), STRATA_OK) << message();
  EXPECT_EQ(y.download<int64_t>(), (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(run(STRATA_OP_CAST, "f32->i64", {&x}, y, Attrs().dtype("dtype", STRATA_F16)),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(message().find("f16"), std::string::npos) << message();
  EXPECT_EQ(run(STRATA_OP_CAST, "f32->i64", {&x}, y, Attrs().real("dtype", 5.0)), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(message().find("'dtype'"), std::string::npos) << message();
}

TEST_F(CpuAbiTest, CastToIntegerTruncatesAndSaturates) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  DeviceTensor& x = tensor<float>(STRATA_F32, {6}, {2.7f, -2.7f, nan, 1e20f, -1e20f, 0.0f});
  DeviceTensor& y = output(STRATA_I32, {6});
  DeviceTensor& b = output(STRATA_BOOL, {6});
  ASSERT_EQ(run(STRATA_OP_CAST, "f32->i32", {&x}, y), STRATA_OK);
  ASSERT_EQ(run(STRATA_OP_CAST, "f32->bool", {&x}, b), STRATA_OK);
  EXPECT_EQ(y.download<int32_t>(), (std::vector<int32_t>{2, -2, 0, INT32_MAX, INT32_MIN, 0}));
  EXPECT_EQ(b.download<uint8_t>(), (std::vector<uint8_t>{1, 1, 1, 1, 1, 0}));
}

TEST_F(CpuAbiTest, FillEveryDtype) {
  // The host sends "value" as an exact SCALAR: F64 in `f`, I64 and BOOL in `i`.
  DeviceTensor& f = output(STRATA_F32, {5});
  ASSERT_EQ(run(STRATA_OP_FILL, "->f32", {}, f, Attrs().scalar_f64("value", 2.5)), STRATA_OK) << message();
  EXPECT_EQ(f.download<float>(), std::vector<float>(5, 2.5f));
  DeviceTensor& h = output(STRATA_BF16, {3});
  ASSERT_EQ(run(STRATA_OP_FILL, "->bf16", {}, h, Attrs().scalar_f64("value", -1.5)), STRATA_OK);
  EXPECT_EQ(h.download<uint16_t>(), std::vector<uint16_t>(3, float_to_bf16(-1.5f)));
  DeviceTensor& i = output(STRATA_I64, {2});
  ASSERT_EQ(run(STRATA_OP_FILL, "->i64", {}, i, Attrs().scalar_f64("value", -3.9)), STRATA_OK);
  EXPECT_EQ(i.download<int64_t>(), std::vector<int64_t>(2, -3));  // truncated, as cast does
  DeviceTensor& n = output(STRATA_I32, {3});
  ASSERT_EQ(run(STRATA_OP_FILL, "->i32", {}, n, Attrs().scalar_i64("value", -7)), STRATA_OK);
  EXPECT_EQ(n.download<int32_t>(), std::vector<int32_t>(3, -7));
  DeviceTensor& b = output(STRATA_BOOL, {4});
  ASSERT_EQ(run(STRATA_OP_FILL, "->bool", {}, b, Attrs().scalar_bool("value", true)), STRATA_OK);
  EXPECT_EQ(b.download<uint8_t>(), std::vector<uint8_t>(4, 1));
  DeviceTensor& fb = output(STRATA_F32, {2});
  ASSERT_EQ(run(STRATA_OP_FILL, "->f32", {}, fb, Attrs().scalar_bool("value", true)), STRATA_OK);
  EXPECT_EQ(fb.download<float>(), std::vector<float>(2, 1.0f));
  // Plain FLOAT and INT attributes are still understood.
  ASSERT_EQ(run(STRATA_OP_FILL, "->f32", {}, f, Attrs().real("value", 0.25)), STRATA_OK);
  EXPECT_EQ(f.download<float>(), std::vector<float>(5, 0.25f));
  ASSERT_EQ(run(STRATA_OP_FILL, "->i64", {}, i, Attrs().integer("value", 11)), STRATA_OK);
  EXPECT_EQ(i.download<int64_t>(), std::vector<int64_t>(2, 11));

  EXPECT_EQ(run(STRATA_OP_FILL, "->i64", {}, i), STRATA_ERROR_INVALID_ARGUMENT);  // no value
  EXPECT_NE(message().find("value"), std::string::npos) << message();
  EXPECT_EQ(run(STRATA_OP_FILL, "->i64", {}, i, Attrs().ints("value", {1})), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(message().find(STRATA_OP_FILL), std::string::npos) << message();
  EXPECT_NE(message().find("'value'"), std::string::npos) << message();
}

// 2^53 + 1 has no double: an i64 fill must come from the exact integer.
TEST_F(CpuAbiTest, IntegerFillIsExactBeyondTwoToThe53) {
  constexpr int64_t kValue = 9007199254740993;  // 2^53 + 1
  static_assert(static_cast<int64_t>(static_cast<double>(kValue)) != kValue);
  DeviceTensor& y = output(STRATA_I64, {3});
  ASSERT_EQ(run(STRATA_OP_FILL, "->i64", {}, y, Attrs().scalar_i64("value", kValue)), STRATA_OK) << message();
  EXPECT_EQ(y.download<int64_t>(), std::vector<int64_t>(3, kValue));
  ASSERT_EQ(run(STRATA_OP_FILL, "->i64", {}, y, Attrs().scalar_i64("value", INT64_MIN)), STRATA_OK);
  EXPECT_EQ(y.download<int64_t>(), std::vector<int64_t>(3, INT64_MIN));
}

TEST_F(CpuAbiTest, IntegerDivisionByZeroIsAnError) {
  DeviceTensor& a = tensor<int32_t>(STRATA_I32, {4}, {7, -7, 8, 9});
  DeviceTensor& b = tensor<int32_t>(STRATA_I32, {4}, {2, 2, 0, 3});
  DeviceTensor& y = output(STRATA_I32, {4});
  EXPECT_EQ(run(STRATA_OP_DIV, "i32,i32->i32", {&a, &b}, y), STRATA_ERROR_INVALID_ARGUMENT);
  const std::string message = last_error.message;
  EXPECT_NE(message.find("div"), std::string::npos) << message;
  EXPECT_NE(message.find("2"), std::string::npos) << message;  // the flat index
  DeviceTensor& f = tensor<float>(STRATA_F32, {1}, {1.0f});
  DeviceTensor& z = tensor<float>(STRATA_F32, {1}, {0.0f});
  DeviceTensor& fy = output(STRATA_F32, {1});
  ASSERT_EQ(run(STRATA_OP_DIV, "f32,f32->f32", {&f, &z}, fy), STRATA_OK);  // IEEE: inf
  EXPECT_TRUE(std::isinf(fy.download<float>()[0]));
}

TEST_F(CpuAbiTest, WhereAndComparisons) {
  DeviceTensor& a = tensor<float>(STRATA_F32, {4}, {1, 5, 3, 7});
  DeviceTensor& b = tensor<float>(STRATA_F32, {4}, {4, 4, 4, 4});
  DeviceTensor& cond = output(STRATA_BOOL, {4});
  ASSERT_EQ(run(STRATA_OP_GT, "f32,f32->bool", {&a, &b}, cond), STRATA_OK);
  EXPECT_EQ(cond.download<uint8_t>(), (std::vector<uint8_t>{0, 1, 0, 1}));
  DeviceTensor& y = output(STRATA_F32, {4});
  ASSERT_EQ(run(STRATA_OP_WHERE, "bool,f32,f32->f32", {&cond, &a, &b}, y), STRATA_OK);
  EXPECT_EQ(y.download<float>(), (std::vector<float>{4, 5, 4, 7}));
}

TEST_F(CpuAbiTest, MaximumPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  DeviceTensor& a = tensor<float>(STRATA_F32, {3}, {nan, 1, 2});
  DeviceTensor& b = tensor<float>(STRATA_F32, {3}, {0, nan, 1});
  DeviceTensor& y = output(STRATA_F32, {3});
  ASSERT_EQ(run(STRATA_OP_MAXIMUM, "f32,f32->f32", {&a, &b}, y), STRATA_OK);
  const std::vector<float> out = y.download<float>();
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], 2.0f);
}

}  // namespace
}  // namespace strata::cpu_abi

namespace strata::cpu_abi {
namespace {

// Two outputs: the unscaled gradient and the found-inf flag.
TEST_F(CpuAbiTest, AmpUnscaleFlagsNonFiniteValues) {
  const float inf = std::numeric_limits<float>::infinity();
  DeviceTensor& g = tensor<float>(STRATA_F32, {4}, {1, -2, 4, 8});
  DeviceTensor& scale = tensor<float>(STRATA_F32, {}, {0.5f});
  DeviceTensor& y = output(STRATA_F32, {4});
  DeviceTensor& found = output(STRATA_F32, {});
  Attrs none;
  const strata_tensor* outs[] = {&y.desc(), &found.desc()};
  ASSERT_EQ(run_raw(STRATA_OP_AMP_UNSCALE, "f32,f32->f32,f32", {&g.desc(), &scale.desc()}, outs, 2, none), STRATA_OK)
      << message();
  EXPECT_EQ(y.download<float>(), (std::vector<float>{0.5f, -1, 2, 4}));
  EXPECT_EQ(found.download<float>()[0], 0.0f);
  g.upload(std::vector<float>{1, inf, 4, 8});
  ASSERT_EQ(run_raw(STRATA_OP_AMP_UNSCALE, "f32,f32->f32,f32", {&g.desc(), &scale.desc()}, outs, 2, none), STRATA_OK);
  EXPECT_EQ(found.download<float>()[0], 1.0f);
  // One output only: refused, naming the op.
  EXPECT_EQ(run_raw(STRATA_OP_AMP_UNSCALE, "f32,f32->f32,f32", {&g.desc(), &scale.desc()}, outs, 1, none),
            STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(message().find(STRATA_OP_AMP_UNSCALE), std::string::npos) << message();
}

}  // namespace
}  // namespace strata::cpu_abi
