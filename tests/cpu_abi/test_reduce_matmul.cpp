// Reductions and matmul through the C ABI, against naive reference loops.
#include "plugin_fixture.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace strata::cpu_abi {
namespace {

TEST_F(CpuAbiTest, SumOverTwoDims) {
  std::vector<float> xs(24);
  for (int i = 0; i < 24; ++i) xs[i] = static_cast<float>(i);
  DeviceTensor& x = tensor<float>(STRATA_F32, {2, 3, 4}, xs);
  DeviceTensor& y = output(STRATA_F32, {1, 3, 1});
  ASSERT_EQ(run(STRATA_OP_SUM, "f32->f32", {&x}, y, Attrs().ints("dims", {0, 2})), STRATA_OK) << last_error.message;
  const std::vector<float> out = y.download<float>();
  for (int j = 0; j < 3; ++j) {
    float expected = 0;
    for (int i = 0; i < 2; ++i) {
      for (int k = 0; k < 4; ++k) expected += xs[i * 12 + j * 4 + k];
    }
    EXPECT_EQ(out[j], expected);
  }
}

TEST_F(CpuAbiTest, IntegerAndBoolSumsAreI64) {
  DeviceTensor& x = tensor<int32_t>(STRATA_I32, {2, 2}, {INT32_MAX, INT32_MAX, 1, 2});
  DeviceTensor& y = output(STRATA_I64, {2, 1});
  ASSERT_EQ(run(STRATA_OP_SUM, "i32->i64", {&x}, y, Attrs().ints("dims", {1})), STRATA_OK);
  EXPECT_EQ(y.download<int64_t>(), (std::vector<int64_t>{2LL * INT32_MAX, 3}));
  DeviceTensor& b = tensor<uint8_t>(STRATA_BOOL, {5}, {1, 0, 1, 1, 0});
  DeviceTensor& count = output(STRATA_I64, {1});
  ASSERT_EQ(run(STRATA_OP_SUM, "bool->i64", {&b}, count, Attrs().ints("dims", {0})), STRATA_OK);
  EXPECT_EQ(count.download<int64_t>()[0], 3);
}

// Column schedule (reduced dim outer, contiguous kept dim) and a transposed
// input, multithreaded.
TEST_F(CpuAbiTest, SumOverLeadingDimAndTransposedInput) {
  const int64_t R = 700, C = 300;
  const std::vector<float> xs = random_values(R * C, 3);
  DeviceTensor& x = tensor<float>(STRATA_F32, {R, C}, xs);
  DeviceTensor& cols = output(STRATA_F32, {1, C});
  ASSERT_EQ(run(STRATA_OP_SUM, "f32->f32", {&x}, cols, Attrs().ints("dims", {0})), STRATA_OK);
  std::vector<float> out = cols.download<float>();
  for (int64_t c = 0; c < C; ++c) {
    double expected = 0;
    for (int64_t r = 0; r < R; ++r) expected += xs[r * C + c];
    EXPECT_NEAR(out[c], expected, 1e-3) << c;
  }
  x.view({C, R}, {1, C});  // transposed: the reduced dim 1 is strided
  DeviceTensor& rows = output(STRATA_F32, {C, 1});
  ASSERT_EQ(run(STRATA_OP_SUM, "f32->f32", {&x}, rows, Attrs().ints("dims", {1})), STRATA_OK);
  out = rows.download<float>();
  for (int64_t c = 0; c < C; ++c) {
    double expected = 0;
    for (int64_t r = 0; r < R; ++r) expected += xs[r * C + c];
    EXPECT_NEAR(out[c], expected, 1e-3) << c;
  }
}

// One output, a long reduction: split across threads.
TEST_F(CpuAbiTest, FullReductionsOfALongVector) {
  const int64_t n = 1 << 20;
  const std::vector<float> xs = random_values(n, 4);
  DeviceTensor& x = tensor<float>(STRATA_F32, {n}, xs);
  DeviceTensor& s = output(STRATA_F32, {1});
  ASSERT_EQ(run(STRATA_OP_SUM, "f32->f32", {&x}, s, Attrs().ints("dims", {0})), STRATA_OK);
  double expected = 0;
  for (float v : xs) expected += v;
  EXPECT_NEAR(s.download<float>()[0], expected, 1e-2);
  DeviceTensor& m = output(STRATA_F32, {1});
  ASSERT_EQ(run(STRATA_OP_MEAN, "f32->f32", {&x}, m, Attrs().ints("dims", {0})), STRATA_OK);
  EXPECT_NEAR(m.download<float>()[0], expected / n, 1e-7);
  DeviceTensor& mx = output(STRATA_F32, {1});
  ASSERT_EQ(run(STRATA_OP_MAX, "f32->f32", {&x}, mx, Attrs().ints("dims", {0})), STRATA_OK);
  EXPECT_EQ(mx.download<float>()[0], *std::max_element(xs.begin(), xs.end()));
  DeviceTensor& am = output(STRATA_I64, {1});
  ASSERT_EQ(run(STRATA_OP_ARGMAX, "f32->i64", {&x}, am, Attrs().ints("dims", {0})), STRATA_OK);
  EXPECT_EQ(am.download<int64_t>()[0], std::max_element(xs.begin(), xs.end()) - xs.begin());
}

TEST_F(CpuAbiTest, ArgmaxFirstOccurrenceAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  DeviceTensor& x = tensor<float>(STRATA_F32, {3, 4}, {1, 3, 3, 0,  //
                                                       nan, 2, nan, 9,  //
                                                       -1, -1, -2, -1});
  DeviceTensor& y = output(STRATA_I64, {3, 1});
  ASSERT_EQ(run(STRATA_OP_ARGMAX, "f32->i64", {&x}, y, Attrs().ints("dims", {1})), STRATA_OK);
  EXPECT_EQ(y.download<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
  DeviceTensor& z = output(STRATA_I64, {1, 4});
  ASSERT_EQ(run(STRATA_OP_ARGMIN, "f32->i64", {&x}, z, Attrs().ints("dims", {0})), STRATA_OK);
  EXPECT_EQ(z.download<int64_t>(), (std::vector<int64_t>{1, 2, 1, 2}));
}

/// Reference y[b] = a[b] @ b[b] over descriptors (any strides), in double.
std::vector<double> reference_matmul(const std::vector<float>& av, const strata_tensor& a,
                                     const std::vector<float>& bv, const strata_tensor& b) {
  const int r = a.rank;
  const int64_t batch = r == 3 ? a.shape[0] : 1, M = a.shape[r - 2], K = a.shape[r - 1], N = b.shape[r - 1];
  std::vector<double> y(batch * M * N, 0.0);
  for (int64_t t = 0; t < batch; ++t) {
    const int64_t ao = a.offset + (r == 3 ? t * a.strides[0] : 0), bo = b.offset + (r == 3 ? t * b.strides[0] : 0);
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          s += double(av[ao + i * a.strides[r - 2] + k * a.strides[r - 1]]) *
               bv[bo + k * b.strides[r - 2] + j * b.strides[r - 1]];
        }
        y[(t * M + i) * N + j] = s;
      }
    }
  }
  return y;
}

TEST_F(CpuAbiTest, MatmulF32PlainAndTransposed) {
  const int64_t M = 33, K = 70, N = 45;
  const std::vector<float> av = random_values(M * K, 5), bv = random_values(K * N, 6);
  DeviceTensor& a = tensor<float>(STRATA_F32, {M, K}, av);
  DeviceTensor& b = tensor<float>(STRATA_F32, {K, N}, bv);
  DeviceTensor& y = output(STRATA_F32, {M, N});
  ASSERT_EQ(run(STRATA_OP_MATMUL, "f32,f32->f32", {&a, &b}, y), STRATA_OK) << last_error.message;
  std::vector<float> out = y.download<float>();
  std::vector<double> ref = reference_matmul(av, a.desc(), bv, b.desc());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-4) << i;

  // b viewed as the transpose of an N x K matrix; a as every other column.
  const std::vector<float> wide = random_values(M * 2 * K, 7);
  DeviceTensor& a2 = tensor<float>(STRATA_F32, {M, 2 * K}, wide);
  a2.view({M, K}, {2 * K, 2}, 1);
  DeviceTensor& bt = tensor<float>(STRATA_F32, {N, K}, bv);
  bt.view({K, N}, {1, K});
  ASSERT_EQ(run(STRATA_OP_MATMUL, "f32,f32->f32", {&a2, &bt}, y), STRATA_OK) << last_error.message;
  out = y.download<float>();
  ref = reference_matmul(wide, a2.desc(), bv, bt.desc());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-4) << i;
}

TEST_F(CpuAbiTest, BatchedMatmulWithStrideZeroBatch) {
  const int64_t B = 4, M = 21, K = 37, N = 19;  // big enough for oneDNN
  const std::vector<float> av = random_values(B * M * K, 8), bv = random_values(K * N, 9);
  DeviceTensor& a = tensor<float>(STRATA_F32, {B, M, K}, av);
  DeviceTensor& b = tensor<float>(STRATA_F32, {K, N}, bv);
  b.view({B, K, N}, {0, N, 1});
  DeviceTensor& y = output(STRATA_F32, {B, M, N});
  ASSERT_EQ(run(STRATA_OP_MATMUL, "f32,f32->f32", {&a, &b}, y), STRATA_OK) << last_error.message;
  std::vector<float> out = y.download<float>();
  const std::vector<double> ref = reference_matmul(av, a.desc(), bv, b.desc());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-5) << i;

  // Both operands broadcast along the batch: oneDNN cannot, the copy path can.
  DeviceTensor& a1 = tensor<float>(STRATA_F32, {M, K}, std::vector<float>(av.begin(), av.begin() + M * K));
  a1.view({B, M, K}, {0, K, 1});
  ASSERT_EQ(run(STRATA_OP_MATMUL, "f32,f32->f32", {&a1, &b}, y), STRATA_OK) << last_error.message;
  out = y.download<float>();
  const std::vector<double> ref1 = reference_matmul(av, a1.desc(), bv, b.desc());
  for (size_t i = 0; i < ref1.size(); ++i) ASSERT_NEAR(out[i], ref1[i], 1e-5) << i;
}

// Large f32 matrices take dnnl_sgemm: transposed b, stride-0 batch of b.
TEST_F(CpuAbiTest, LargeMatmulF32WithStrides) {
  const int64_t B = 2, M = 130, K = 129, N = 131;
  const std::vector<float> av = random_values(B * M * K, 14), bv = random_values(N * K, 15);
  DeviceTensor& a = tensor<float>(STRATA_F32, {B, M, K}, av);
  DeviceTensor& b = tensor<float>(STRATA_F32, {N, K}, bv);
  b.view({B, K, N}, {0, 1, K});
  DeviceTensor& y = output(STRATA_F32, {B, M, N});
  ASSERT_EQ(run(STRATA_OP_MATMUL, "f32,f32->f32", {&a, &b}, y), STRATA_OK) << last_error.message;
  const std::vector<float> out = y.download<float>();
  const std::vector<double> ref = reference_matmul(av, a.desc(), bv, b.desc());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-4) << i;
}

// Tiny problems take a plain loop: transposed a, stride-0 batch of b.
TEST_F(CpuAbiTest, TinyMatmulWithStrides) {
  const int64_t B = 2, M = 3, K = 4, N = 5;
  const std::vector<float> av = random_values(B * K * M, 12), bv = random_values(K * N, 13);
  DeviceTensor& a = tensor<float>(STRATA_F32, {B, K, M}, av);
  a.view({B, M, K}, {K * M, 1, M});
  DeviceTensor& b = tensor<float>(STRATA_F32, {K, N}, bv);
  b.view({B, K, N}, {0, N, 1});
  DeviceTensor& y = output(STRATA_F32, {B, M, N});
  ASSERT_EQ(run(STRATA_OP_MATMUL, "f32,f32->f32", {&a, &b}, y), STRATA_OK) << last_error.message;
  const std::vector<float> out = y.download<float>();
  const std::vector<double> ref = reference_matmul(av, a.desc(), bv, b.desc());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-5) << i;
}

TEST_F(CpuAbiTest, MatmulF64AndSixteenBitTypes) {
  const int64_t B = 2, M = 9, K = 130, N = 11;
  const std::vector<float> av = random_values(B * M * K, 10), bv = random_values(B * K * N, 11);
  const std::vector<double> ref = reference_matmul(av, tensor<float>(STRATA_F32, {B, M, K}, av).desc(), bv,
                                                   tensor<float>(STRATA_F32, {B, K, N}, bv).desc());
  std::vector<double> ad(av.begin(), av.end()), bd(bv.begin(), bv.end());
  DeviceTensor& y64 = output(STRATA_F64, {B, M, N});
  ASSERT_EQ(run(STRATA_OP_MATMUL, "f64,f64->f64", {&tensor<double>(STRATA_F64, {B, M, K}, ad),
                                            &tensor<double>(STRATA_F64, {B, K, N}, bd)}, y64), STRATA_OK);
  const std::vector<double> out64 = y64.download<double>();
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(out64[i], ref[i], 1e-9) << i;

  struct Half {
    strata_dtype dtype;
    const char* signature;
    uint16_t (*from)(float);
    float (*to)(uint16_t);
  };
  for (const Half& h : {Half{STRATA_BF16, "bf16,bf16->bf16", float_to_bf16, bf16_to_float},
                        Half{STRATA_F16, "f16,f16->f16", float_to_f16, f16_to_float}}) {
    std::vector<uint16_t> ah(av.size()), bh(bv.size());
    for (size_t i = 0; i < av.size(); ++i) ah[i] = h.from(av[i]);
    for (size_t i = 0; i < bv.size(); ++i) bh[i] = h.from(bv[i]);
    DeviceTensor& y = output(h.dtype, {B, M, N});
    ASSERT_EQ(run(STRATA_OP_MATMUL, h.signature, {&tensor<uint16_t>(h.dtype, {B, M, K}, ah),
                                          &tensor<uint16_t>(h.dtype, {B, K, N}, bh)}, y), STRATA_OK)
        << h.signature << ": " << last_error.message;
    const std::vector<uint16_t> out = y.download<uint16_t>();
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(h.to(out[i]), ref[i], 0.15) << h.signature << " " << i;
  }
}

}  // namespace
}  // namespace strata::cpu_abi
