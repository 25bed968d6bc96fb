// complex_test.cpp — the complex dtypes c64 and c128 (docs/complex.md): names,
// promotion, host round trips, printing, every op with a complex definition
// against std::complex references, the errors of ops without one, files and
// traced graphs, and the fallback policy on a device that stores complex
// tensors but has no kernel for them (the test plugin "minicomplex").
#include <strata/plugin/strata_plugin.h>
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <numbers>
#include <string>
#include <vector>

#include "../common/complex_values.hpp"

namespace strata_test {
namespace {

using namespace strata;

constexpr DType kComplex[] = {c64, c128};

class Complex : public ::testing::Test {
 protected:
  void SetUp() override {
    runtime().load_config(STRATA_COMPLEX_TEST_CONFIG);
    runtime().reset_fallback_stats();
  }
  Device cpu{"cpu:0"};
};

/// Runs `call` expecting a DTypeError whose message names every one of `words`.
::testing::AssertionResult refused(const std::function<void()>& call, std::initializer_list<std::string> words) {
  try {
    call();
  } catch (const DTypeError& e) {
    const std::string m = e.what();
    for (const std::string& w : words) {
      if (m.find(w) == std::string::npos) return ::testing::AssertionFailure() << "\"" << w << "\" not in: " << m;
    }
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "not a DTypeError: " << e.what();
  }
  return ::testing::AssertionFailure() << "no error";
}

CValues map_values(const CValues& v, const std::function<cd(cd)>& f) {
  CValues out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f(v[i]);
  return out;
}

// ---- dtypes -----------------------------------------------------------------------------

TEST_F(Complex, DTypesHaveNamesSizesAndTheAbiValues) {
  EXPECT_EQ(dtype_name(c64), "c64");
  EXPECT_EQ(dtype_name(c128), "c128");
  EXPECT_EQ(dtype_size(c64), 8u);
  EXPECT_EQ(dtype_size(c128), 16u);
  EXPECT_EQ(static_cast<int>(c64), STRATA_C64);
  EXPECT_EQ(static_cast<int>(c128), STRATA_C128);
  for (const char* name : {"c64", "complex64", "cfloat"}) EXPECT_EQ(dtype_from_name(name), c64) << name;
  for (const char* name : {"c128", "complex128", "cdouble"}) EXPECT_EQ(dtype_from_name(name), c128) << name;
  EXPECT_THROW(dtype_from_name("complex32"), DTypeError);
  EXPECT_TRUE(is_complex(c64) && is_complex(c128));
  EXPECT_FALSE(is_floating(c64) || is_floating(c128) || is_integral(c64));
  EXPECT_TRUE(is_differentiable(c64) && is_differentiable(f16) && !is_differentiable(i64));
  EXPECT_EQ(to_real(c64), f32);
  EXPECT_EQ(to_real(c128), f64);
  EXPECT_EQ(to_real(bf16), bf16);
  EXPECT_EQ(to_complex(f64), c128);
  EXPECT_EQ(to_complex(f16), c64);
  // The enum is sparse: 7 to 10 are reserved values of the ABI, not dtypes.
  for (int v = 0; v < kDTypeLimit; ++v) {
    EXPECT_EQ(is_dtype_value(v), v <= 6 || v == 11 || v == 12) << v;
  }
  EXPECT_EQ(kAllDTypes.back(), c128);
}

TEST_F(Complex, PromotionFollowsPyTorch) {
  struct Case {
    DType a, b, want;
  };
  const Case cases[] = {
      {c64, f32, c64},    {c64, f64, c128},   {c64, f16, c64},     {c64, bf16, c64},  {c64, i64, c64},
      {c64, i32, c64},    {c64, boolean, c64}, {c128, f32, c128},  {c64, c128, c128}, {c128, boolean, c128},
      {f64, c64, c128},   {c128, c128, c128},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(promote_types(c.a, c.b), c.want) << dtype_name(c.a) << " with " << dtype_name(c.b);
    EXPECT_EQ(promote_types(c.b, c.a), c.want) << dtype_name(c.b) << " with " << dtype_name(c.a);
  }
  Tensor z = ctensor({cd(1, 2)}, {1}, c64);
  EXPECT_EQ((z * from_data(std::vector<double>{2.0}, {1})).dtype(), c128);
  EXPECT_EQ((z + from_data(std::vector<int64_t>{2}, {1})).dtype(), c64);
  EXPECT_EQ((z * 2.5).dtype(), c64);  // a C++ scalar does not widen
  EXPECT_EQ((1.0 - z).dtype(), c64);
  EXPECT_TRUE(close(cvalues(1.0 - z * 2.5), {cd(-1.5, -5)}, 1e-7));
}

TEST_F(Complex, TheCpuDeviceStoresBoth) {
  DeviceInfo info = runtime().device_info(cpu);
  for (DType t : kComplex) {
    EXPECT_NE(std::find(info.dtypes.begin(), info.dtypes.end(), t), info.dtypes.end()) << dtype_name(t);
  }
}

// ---- host data ------------------------------------------------------------------------------

TEST_F(Complex, ValuesRoundTripThroughTheHost) {
  const std::vector<std::complex<float>> f{{1.5f, -2}, {0, 3.25f}, {-7, 0}};
  Tensor a = from_data(std::span<const std::complex<float>>(f), {3});
  EXPECT_EQ(a.dtype(), c64);
  EXPECT_EQ(a.to_vector<std::complex<float>>(), f);
  const CValues d{{1e300, -1e-300}, {0.1, 0.2}};
  Tensor b = from_data(std::span<const cd>(d), {2, 1});
  EXPECT_EQ(b.dtype(), c128);
  EXPECT_EQ(cvalues(b), d);  // exact
  EXPECT_EQ(b.slice(0, 1, 2).item<cd>(), d[1]);
  EXPECT_EQ(cvalues(ctensor(d, {2}, c64)), (CValues{cd(std::numeric_limits<float>::infinity(), -0.0),
                                                   cd(static_cast<float>(0.1), static_cast<float>(0.2))}));
  // Real tensors read as complex, and real values stored as complex: imaginary part 0.
  EXPECT_EQ(tensor({1, -2}).to_vector<cd>(), (CValues{cd(1, 0), cd(-2, 0)}));
  EXPECT_EQ(cvalues(from_data(std::vector<double>{4, 5}, {2}, {.dtype = c64})), (CValues{cd(4, 0), cd(5, 0)}));
  EXPECT_EQ(cvalues(full({2}, 3.5, {.dtype = c128})), (CValues{cd(3.5, 0), cd(3.5, 0)}));
  EXPECT_EQ(cvalues(zeros({1}, {.dtype = c64})), (CValues{cd(0, 0)}));
  EXPECT_EQ(b.to_bytes().size(), 32u);
}

TEST_F(Complex, ReadingComplexValuesAsRealIsRefused) {
  Tensor z = ctensor({cd(1, 2)}, {1}, c64);
  EXPECT_TRUE(refused([&] { z.to_vector<double>(); }, {"to_vector", "c64[1]", "complex"}));
  EXPECT_TRUE(refused([&] { z.item<float>(); }, {"c64[1]", "std::complex"}));
  const CValues v{cd(1, 1)};
  EXPECT_TRUE(refused([&] { from_data(std::span<const cd>(v), {1}, {.dtype = f32}); }, {"from_data", "f32"}));
}

TEST_F(Complex, PrintingShowsRealAndImaginaryParts) {
  Tensor z = ctensor({cd(1, 2), cd(-0.5, -1), cd(0, 1e-7)}, {3}, c64);
  EXPECT_EQ(z.to_string(),
            "tensor([1.0000+2.0000j, -0.5000-1.0000j, 0.0000+1.0000e-07j], shape=[3], dtype=c64, device=cpu:0)");
  EXPECT_EQ(ctensor({cd(std::nan(""), -INFINITY)}, {}, c128).to_string(),
            "tensor(nan-infj, shape=[], dtype=c128, device=cpu:0)");
}

// ---- elementwise ------------------------------------------------------------------------------

TEST_F(Complex, UnaryOpsMatchStdComplex) {
  struct Op {
    const char* name;
    std::function<Tensor(const Tensor&)> op;
    std::function<cd(cd)> ref;
  };
  const std::vector<Op> ops{
      {"neg", [](const Tensor& x) { return neg(x); }, [](cd z) { return -z; }},
      {"exp", [](const Tensor& x) { return exp(x); }, [](cd z) { return std::exp(z); }},
      {"log", [](const Tensor& x) { return log(x); }, [](cd z) { return std::log(z); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](cd z) { return std::sqrt(z); }},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, [](cd z) { return 1.0 / z; }},
      {"conj", [](const Tensor& x) { return conj(x); }, [](cd z) { return std::conj(z); }},
  };
  for (DType t : kComplex) {
    Tensor x = ctensor(away_from_cuts(6, 1), {2, 3}, t);
    const CValues xs = cvalues(x), xts = cvalues(x.mT().contiguous());
    for (const Op& op : ops) {
      SCOPED_TRACE(std::string(op.name) + " " + std::string(dtype_name(t)));
      Tensor y = op.op(x);
      EXPECT_EQ(y.dtype(), t);
      EXPECT_TRUE(close(cvalues(y), map_values(xs, op.ref), tolerance(t)));
      EXPECT_TRUE(close(cvalues(op.op(x.mT())), map_values(xts, op.ref), tolerance(t)));  // strided input
    }
  }
}

TEST_F(Complex, PartsAreRealTensors) {
  for (DType t : kComplex) {
    SCOPED_TRACE(dtype_name(t));
    Tensor x = ctensor({cd(3, -4), cd(-1, 0), cd(0, 2), cd(0, 0)}, {2, 2}, t);
    const std::vector<double> re{3, -1, 0, 0}, im{-4, 0, 2, 0}, mod{5, 1, 2, 0};
    const std::vector<double> arg{std::atan2(-4.0, 3.0), std::numbers::pi, std::numbers::pi / 2, 0};
    const std::vector<std::pair<Tensor, std::vector<double>>> parts{
        {real(x), re}, {imag(x), im}, {abs(x), mod}, {angle(x), arg}};
    for (const auto& [y, want] : parts) {
      EXPECT_EQ(y.dtype(), to_real(t));
      std::vector<double> got = y.to_vector<double>();
      for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
    }
    EXPECT_EQ(real(x.mT()).to_vector<double>(), (std::vector<double>{3, 0, -1, 0}));
  }
  // Real tensors: real and conj return them; imag and angle are complex-only.
  Tensor r = tensor({1, 2});
  EXPECT_EQ(real(r).impl(), r.impl());
  EXPECT_EQ(conj(r).impl(), r.impl());
  EXPECT_TRUE(refused([&] { imag(r); }, {"imag", "f32[2]", "complex"}));
  EXPECT_TRUE(refused([&] { angle(r); }, {"angle", "f32[2]", "complex"}));
}

TEST_F(Complex, BinaryOpsMatchStdComplexWithBroadcasting) {
  struct Op {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&)> op;
    std::function<cd(cd, cd)> ref;
    double ulps = 4;  // tolerance in units of the dtype's
  };
  const std::vector<Op> ops{
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, [](cd a, cd b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, [](cd a, cd b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, [](cd a, cd b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, [](cd a, cd b) { return a / b; }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](cd a, cd b) { return std::pow(a, b); }, 20},
  };
  for (DType t : kComplex) {
    Tensor a = ctensor(away_from_cuts(6, 2), {2, 3}, t);
    Tensor b = ctensor(random_complex(3, 3, -1.0, 1.0), {3}, t);  // broadcast along dim 0
    const CValues av = cvalues(a), bv = cvalues(b);
    for (const Op& op : ops) {
      SCOPED_TRACE(std::string(op.name) + " " + std::string(dtype_name(t)));
      CValues want(6);
      for (size_t i = 0; i < 6; ++i) want[i] = op.ref(av[i], bv[i % 3]);
      Tensor y = op.op(a, b);
      EXPECT_EQ(y.dtype(), t);
      EXPECT_TRUE(close(cvalues(y), want, op.ulps * tolerance(t)));
    }
  }
  // Mixed with real tensors: promoted, the real operand's imaginary part 0.
  Tensor z = ctensor({cd(1, 1), cd(2, -1)}, {2}, c64);
  EXPECT_TRUE(close(cvalues(z * tensor({2, 3})), {cd(2, 2), cd(6, -3)}, 1e-7));
  EXPECT_TRUE(close(cvalues(pow(z, 2.0)), {cd(0, 2), cd(3, -4)}, 1e-6));
}

TEST_F(Complex, EqualityAndWhere) {
  Tensor a = ctensor({cd(1, 2), cd(1, 2), cd(0, 1)}, {3}, c64);
  Tensor b = ctensor({cd(1, 2), cd(1, -2), cd(0, 1)}, {3}, c64);
  EXPECT_EQ(eq(a, b).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(ne(a, b).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(eq(a, tensor({1, 1, 0})).to_vector<bool>(), (std::vector<bool>{false, false, false}));
  Tensor cond = from_data(std::vector<int64_t>{1, 0, 1}, {3}).to(boolean);
  EXPECT_EQ(cvalues(where(cond, a, b)), (CValues{cd(1, 2), cd(1, -2), cd(0, 1)}));
  EXPECT_EQ(where(cond, a, tensor({7, 7, 7})).dtype(), c64);
  EXPECT_TRUE(refused([&] { where(a, a, b); }, {"where", "condition"}));
}

TEST_F(Complex, ComplexAndPolarBuildFromRealParts) {
  Tensor re = tensor({1, -2}), im = tensor({0.5, 3});
  Tensor z = complex(re, im);
  EXPECT_EQ(z.dtype(), c64);
  EXPECT_EQ(cvalues(z), (CValues{cd(1, 0.5), cd(-2, 3)}));
  EXPECT_EQ(complex(re.to(f64), im).dtype(), c128);
  EXPECT_EQ(complex(from_data(std::vector<int64_t>{1}, {1}), from_data(std::vector<int64_t>{2}, {1})).dtype(), c64);
  EXPECT_EQ(cvalues(complex(re.unsqueeze(1), im)), (CValues{cd(1, 0.5), cd(1, 3), cd(-2, 0.5), cd(-2, 3)}));
  Tensor p = polar(from_data(std::vector<double>{2, 1}, {2}), from_data(std::vector<double>{0.5, -3}, {2}));
  EXPECT_EQ(p.dtype(), c128);
  EXPECT_TRUE(close(cvalues(p), {std::polar(2.0, 0.5), std::polar(1.0, -3.0)}, 1e-15));
  EXPECT_TRUE(refused([&] { complex(z, re); }, {"complex", "c64", "real parts"}));
  EXPECT_TRUE(refused([&] { polar(re, z); }, {"polar", "c64"}));
}

// ---- reductions and matmul -------------------------------------------------------------------

TEST_F(Complex, SumMeanAndProd) {
  for (DType t : kComplex) {
    SCOPED_TRACE(dtype_name(t));
    Tensor x = ctensor(random_complex(6, 4, -1.0, 1.0), {2, 3}, t);
    const CValues v = cvalues(x);
    cd total = 0, product = 1;
    for (cd z : v) total += z, product *= z;
    EXPECT_TRUE(close({sum(x).item<cd>()}, {total}, tolerance(t)));
    EXPECT_TRUE(close({mean(x).item<cd>()}, {total / 6.0}, tolerance(t)));
    EXPECT_TRUE(close({prod(x).item<cd>()}, {product}, 4 * tolerance(t)));
    EXPECT_EQ(sum(x).dtype(), t);
    // Over one dim, kept, and through a transposed view.
    EXPECT_TRUE(close(cvalues(sum(x, {0}, true)), {v[0] + v[3], v[1] + v[4], v[2] + v[5]}, tolerance(t)));
    EXPECT_TRUE(close(cvalues(prod(x.mT(), {1})), {v[0] * v[3], v[1] * v[4], v[2] * v[5]}, 4 * tolerance(t)));
    EXPECT_TRUE(close(cvalues(mean(x, {1})), {(v[0] + v[1] + v[2]) / 3.0, (v[3] + v[4] + v[5]) / 3.0},
                      tolerance(t)));
    // Nothing to reduce: the identities.
    EXPECT_EQ(sum(zeros({0, 2}, {.dtype = t}), {0}).to_vector<cd>(), (CValues{0, 0}));
    EXPECT_EQ(prod(zeros({0}, {.dtype = t})).item<cd>(), cd(1, 0));
  }
}

/// y = a @ b on the host, for [M, K] @ [K, N].
CValues host_matmul(const CValues& a, const CValues& b, int64_t M, int64_t K, int64_t N) {
  CValues y(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      cd s = 0;
      for (int64_t k = 0; k < K; ++k) s += a[static_cast<size_t>(i * K + k)] * b[static_cast<size_t>(k * N + j)];
      y[static_cast<size_t>(i * N + j)] = s;
    }
  }
  return y;
}

TEST_F(Complex, MatmulMatchesTheHostProduct) {
  for (DType t : kComplex) {
    // Small, and wide enough (N > 256) for several column panels and threads.
    for (auto [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{2, 3, 4}, {37, 50, 300}}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + std::to_string(M) + "x" + std::to_string(K) + "x" +
                   std::to_string(N));
      Tensor a = ctensor(random_complex(static_cast<size_t>(M * K), 5), {M, K}, t);
      Tensor b = ctensor(random_complex(static_cast<size_t>(K * N), 6), {K, N}, t);
      const CValues want = host_matmul(cvalues(a), cvalues(b), M, K, N);
      const double tol = t == c64 ? 1e-5 * static_cast<double>(K) : 1e-13 * static_cast<double>(K);
      EXPECT_TRUE(close(cvalues(matmul(a, b)), want, tol, tol));
      // Transposed operands (column-major strides).
      Tensor at = a.mT().contiguous().mT(), bt = b.mT().contiguous().mT();
      EXPECT_TRUE(close(cvalues(matmul(at, bt)), want, tol, tol));
    }
  }
  // Batched with a broadcast batch dim, and vector operands.
  Tensor a = ctensor(random_complex(12, 7), {2, 2, 3}, c128);
  Tensor b = ctensor(random_complex(6, 8), {3, 2}, c128);
  Tensor y = matmul(a, b);
  ASSERT_EQ(y.sizes(), (Shape{2, 2, 2}));
  const CValues av = cvalues(a), bv = cvalues(b);
  for (int64_t n = 0; n < 2; ++n) {
    CValues an(av.begin() + n * 6, av.begin() + (n + 1) * 6);
    CValues got = cvalues(y.select(0, n));
    EXPECT_TRUE(close(got, host_matmul(an, bv, 2, 3, 2), 1e-13, 1e-13));
  }
  Tensor v = ctensor({cd(1, 1), cd(0, -1), cd(2, 0)}, {3}, c64);
  EXPECT_TRUE(close(cvalues(matmul(v, v)), {cd(1, 1) * cd(1, 1) + cd(0, -1) * cd(0, -1) + 4.0}, 1e-6));
  // Real with complex: promoted.
  EXPECT_EQ(matmul(tensor({1, 2}).reshape({1, 2}), ctensor({cd(1, 1), cd(2, 2)}, {2, 1}, c64)).dtype(), c64);
}

// ---- data movement ------------------------------------------------------------------------------

TEST_F(Complex, CastsGoIntoComplexNeverOutOfIt) {
  Tensor r = tensor({1.5, -2});
  for (DType from : {f32, f64, f16, bf16, i32, i64, boolean}) {
    for (DType to : kComplex) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
      Tensor x = (from == boolean ? tensor({1, 0}) : tensor({2, -3})).to(from);
      Tensor y = cast(x, to);
      EXPECT_EQ(y.dtype(), to);
      const CValues want = from == boolean ? CValues{1, 0} : CValues{2, -3};
      EXPECT_EQ(cvalues(y), want);
      EXPECT_EQ(cvalues(cast(x.reshape({2, 1}).expand({2, 2}), to)), (CValues{want[0], want[0], want[1], want[1]}));
    }
  }
  Tensor z = ctensor({cd(0.1, -0.2)}, {1}, c128);
  EXPECT_TRUE(close(cvalues(cast(z, c64)), {cd(0.1, -0.2)}, 1e-7));
  EXPECT_EQ(cvalues(cast(cast(z, c64), c128)), cvalues(cast(z, c64)));
  for (DType to : {f32, f64, f16, bf16, i32, i64, boolean}) {
    EXPECT_TRUE(refused([&] { cast(z, to); }, {"cast", "c128", std::string(dtype_name(to)), "imaginary", "real()"}))
        << dtype_name(to);
  }
  // copy_: into a complex tensor from a real one; never the other way.
  Tensor dst = zeros({2}, {.dtype = c64});
  dst.copy_(r);
  EXPECT_EQ(cvalues(dst), (CValues{1.5, -2}));
  EXPECT_TRUE(refused([&] { r.copy_(dst); }, {"cast", "c64"}));
}

TEST_F(Complex, ViewsCopiesAndJoins) {
  for (DType t : kComplex) {
    SCOPED_TRACE(dtype_name(t));
    const CValues v = random_complex(6, 9);
    Tensor x = ctensor(v, {2, 3}, t);
    const CValues xs = cvalues(x);
    CValues transposed{xs[0], xs[3], xs[1], xs[4], xs[2], xs[5]};
    EXPECT_EQ(cvalues(x.mT().contiguous()), transposed);
    EXPECT_EQ(cvalues(x.mT().clone()), transposed);
    EXPECT_EQ(cvalues(x.slice(1, 1, 3)), (CValues{xs[1], xs[2], xs[4], xs[5]}));
    EXPECT_EQ(cvalues(x.select(0, 1)), (CValues{xs[3], xs[4], xs[5]}));
    EXPECT_EQ(cvalues(x.reshape({3, 2})), xs);
    EXPECT_EQ(cvalues(cat({x, x.slice(0, 0, 1)}, 0)).size(), 9u);
    EXPECT_EQ(cvalues(stack({x, x}, 0)).size(), 12u);
    Tensor padded = pad(x, {1, 0}, 2.0);
    EXPECT_EQ(padded.dtype(), t);
    EXPECT_EQ(cvalues(padded.select(1, 0)), (CValues{2, 2}));
    Tensor index = from_data(std::vector<int64_t>{2, 0}, {2});
    EXPECT_EQ(cvalues(index_select(x, 1, index)), (CValues{xs[2], xs[0], xs[5], xs[3]}));
    Tensor rows = from_data(std::vector<int64_t>{1, 0, 1}, {1, 3});
    EXPECT_EQ(cvalues(gather(x, 0, rows)), (CValues{xs[3], xs[1], xs[5]}));
    EXPECT_EQ(cvalues(scatter_add(zeros({2, 3}, {.dtype = t}), 0, rows, x.slice(0, 0, 1))),
              (CValues{0, xs[1], 0, xs[0], 0, xs[2]}));
    Tensor y = zeros({3, 2}, {.dtype = t});
    y.copy_(x.mT());  // a strided copy into a complex tensor
    EXPECT_EQ(cvalues(y), transposed);
    y.mT().copy_(x);  // and into a strided destination
    EXPECT_EQ(cvalues(y), transposed);
  }
}

// ---- ops without a complex definition ---------------------------------------------------------

TEST_F(Complex, OpsWithoutAComplexDefinitionNameTheOpAndTheDtype) {
  Tensor z = ctensor({cd(1, 2), cd(-1, 0)}, {1, 2}, c64);
  Tensor i = from_data(std::vector<int64_t>{0}, {1});  // class indices
  const std::vector<std::pair<std::string, std::function<void()>>> calls{
      {"relu", [&] { relu(z); }},
      {"sigmoid", [&] { sigmoid(z); }},
      {"tanh", [&] { tanh(z); }},
      {"floor", [&] { floor(z); }},
      {"sin", [&] { sin(z); }},
      {"sign", [&] { sign(z); }},
      {"lt", [&] { lt(z, z); }},
      {"ge", [&] { ge(z, z); }},
      {"maximum", [&] { maximum(z, z); }},
      {"max", [&] { amax(z); }},
      {"argmax", [&] { argmax(z, 1); }},
      {"softmax", [&] { softmax(z, 1); }},
      {"log_softmax", [&] { log_softmax(z, 1); }},
      {"logical_not", [&] { logical_not(z); }},
      {"mse_loss", [&] { nn::functional::mse_loss(z, z); }},
      {"cross_entropy", [&] { nn::functional::cross_entropy(z, i); }},
  };
  for (const auto& [op, call] : calls) EXPECT_TRUE(refused(call, {op, "c64"})) << op;
  // The message of the dispatch check, in full.
  try {
    relu(z);
  } catch (const DTypeError& e) {
    EXPECT_STREQ(e.what(),
                 "relu(c64[1, 2]) on cpu:0: relu has no complex definition (input 0 is c64); docs/complex.md lists "
                 "the ops that take complex tensors");
  }
  // Complex creation and training paths without a definition.
  EXPECT_TRUE(refused([&] { randn({2}, {.dtype = c64}); }, {"randn", "c64"}));
  Tensor w = ctensor({cd(1, 1)}, {1}, c64);
  w.set_requires_grad(true);
  EXPECT_TRUE(refused([&] { sum(w).backward(); }, {"backward", "complex", "c64[]"}));
  EXPECT_TRUE(refused([&] { nn::Adam({w}); }, {"Adam", "c64[1]"}));
  EXPECT_FALSE(w.grad().defined());
}

// ---- files and traced graphs ----------------------------------------------------------------------

TEST_F(Complex, SafetensorsFilesHoldC64AndC128) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "strata_complex_test.safetensors";
  Tensor a = ctensor(random_complex(4, 10), {2, 2}, c64);
  Tensor b = ctensor(random_complex(3, 11), {3}, c128);
  save_tensors(path, {{"a", a}, {"b", b}});
  LoadedTensors loaded = load_tensors(path);
  std::filesystem::remove(path);
  ASSERT_EQ(loaded.tensors.size(), 2u);
  for (const auto& [name, t] : loaded.tensors) {
    const Tensor& original = name == "a" ? a : b;
    EXPECT_EQ(t.dtype(), original.dtype()) << name;
    EXPECT_EQ(t.sizes(), original.sizes()) << name;
    EXPECT_EQ(cvalues(t), cvalues(original)) << name;
  }
}

TEST_F(Complex, TracedGraphsKeepComplexConstants) {
  Tensor w = ctensor({cd(0.5, -1.5), cd(2, 0.25)}, {2}, c128);
  Graph g = trace([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{abs(in[0] * w)}; },
                  {ctensor({cd(1, 1), cd(1, -1)}, {2}, c128)});
  Graph loaded = Graph::from_json(g.to_json());
  Tensor x = ctensor({cd(3, 0), cd(0, -2)}, {2}, c128);
  const std::vector<double> want{std::abs(cd(3, 0) * cd(0.5, -1.5)), std::abs(cd(0, -2) * cd(2, 0.25))};
  EXPECT_EQ(loaded.run({x})[0].to_vector<double>(), want);
  EXPECT_EQ(g.run({x})[0].to_vector<double>(), want);
}

// ---- other devices: the fallback policy ------------------------------------------------------------

TEST_F(Complex, ADeviceThatStoresComplexButHasNoKernelsFallsBackToTheCpu) {
  const Device dev("minicomplex:0");
  Tensor a = ctensor({cd(1, 2), cd(-3, 0.5)}, {2}, c64, dev);
  Tensor b = ctensor({cd(0, 1), cd(2, 2)}, {2}, c64, dev);
  Tensor y = exp(a * b) + conj(a);
  EXPECT_EQ(y.device(), dev);
  const CValues want{std::exp(cd(1, 2) * cd(0, 1)) + cd(1, -2), std::exp(cd(-3, 0.5) * cd(2, 2)) + cd(-3, -0.5)};
  EXPECT_TRUE(close(cvalues(y), want, 1e-6));
  bool saw_mul = false;
  for (const FallbackRecord& r : runtime().fallback_stats()) {
    EXPECT_EQ(r.device, "minicomplex:0");
    if (r.op == "mul") {
      saw_mul = true;
      EXPECT_EQ(r.signature, "c64,c64->c64");
    }
  }
  EXPECT_TRUE(saw_mul);
  // Gradients too: the same as on the CPU.
  Tensor z = ctensor({cd(0.5, -1)}, {1}, c64, dev);  // c64: mini stores f32, not f64
  z.set_requires_grad(true);
  Tensor loss = sum(abs(z * z));
  loss.backward();
  EXPECT_EQ(z.grad().device(), dev);
  // |z^2| = |z|^2: PyTorch's gradient is 2z.
  EXPECT_TRUE(close(cvalues(z.grad()), {cd(1, -2)}, 1e-6));
}

TEST_F(Complex, TheErrorPolicyNamesTheOpTheSignatureAndTheDevice) {
  Tensor a = ctensor({cd(1, 2)}, {1}, c64, Device("minicomplex:0"));
  try {
    angle(a);  // "angle": "error" in the suite's configuration
    FAIL() << "expected DeviceError";
  } catch (const DeviceError& e) {
    const std::string m = e.what();
    for (const char* w : {"angle", "c64->f32", "minicomplex:0", "fallback policy \"error\""}) {
      EXPECT_NE(m.find(w), std::string::npos) << w << " not in " << m;
    }
  }
  EXPECT_EQ(runtime().fallback_count(), 0u);
}

TEST_F(Complex, ADeviceThatCannotStoreComplexRefusesIt) {
  EXPECT_TRUE(refused([] { zeros({2}, {.dtype = c64, .device = Device("mini:0")}); },
                      {"zeros", "mini:0 cannot store c64", "it stores f32, i64, bool"}));
  Tensor z = ctensor({cd(1, 2)}, {1}, c128);
  EXPECT_TRUE(refused([&] { z.to(Device("mini:0")); }, {"mini:0 cannot store c128"}));
}

TEST_F(Complex, ComplexOnlyPrimitivesAreMissingOnlyWhereComplexIsStored) {
  // minicomplex stores c64 and c128 without kernels for them: the
  // complex-only primitives fall back there, so they are listed. mini stores
  // neither: no tensor could reach them, so they are not (a GPU plugin
  // without complex storage is judged complete by the same list).
  auto missing = [](const char* dev) { return runtime().device_info(Device(dev)).missing_primitives; };
  const std::vector<std::string> with = missing("minicomplex:0"), without = missing("mini:0");
  for (const char* op : {"real", "imag", "conj", "angle", "complex"}) {
    EXPECT_NE(std::find(with.begin(), with.end(), op), with.end()) << op;
    EXPECT_EQ(std::find(without.begin(), without.end(), op), without.end()) << op;
  }
}

}  // namespace
}  // namespace strata_test
