// fused_test.cpp — the CUDA/HIP fused_elementwise kernel's per-element code
// (backends/cuda/src/fused_eval.hpp, fused_program_args.hpp) on the CPU:
// programs parsed from text, encoded as the kernel's statements and run
// element by element through fused_element, against the chains written out
// with the same functions, bit for bit (f32, f64, and f16 rounded after
// every statement as the ops one by one store it); broadcast inputs,
// several outputs, constants and every op of the vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <strata/plugin/fused_program.hpp>
#include <string>
#include <vector>

#include "fused_program_args.hpp"

namespace {

using strata::gpu::FusedArgs;
using strata::gpu::half_t;
namespace fp = strata::plugin::fused;

/// The outputs of `text` on `inputs` (each n values, or one when its
/// `broadcast` bit is set), through the kernel's element function.
template <class T>
std::vector<std::vector<T>> run(const std::string& text, const std::vector<std::vector<T>>& inputs, int64_t n,
                                uint32_t broadcast = 0) {
  fp::Program p;
  std::string error;
  EXPECT_TRUE(fp::Program::parse(text, p, error)) << error;
  FusedArgs args;
  strata::gpu::encode_program<T>(p, args);
  args.n = n;
  args.broadcast = broadcast;
  for (size_t k = 0; k < inputs.size(); ++k) args.in[k] = inputs[k].data();
  std::vector<std::vector<T>> out(p.outputs.size(), std::vector<T>(static_cast<size_t>(n)));
  for (size_t m = 0; m < out.size(); ++m) args.out[m] = out[m].data();
  for (int64_t i = 0; i < n; ++i) strata::gpu::fused_element<T>(args, i);
  return out;
}

template <class T>
std::vector<T> values(int64_t n, float scale, float shift) {
  std::vector<T> v;
  for (int64_t i = 0; i < n; ++i) {
    const float x = std::sin(static_cast<float>(i) * 0.37f) * scale + shift;
    if constexpr (std::is_same_v<T, half_t>) {
      v.push_back(strata::gpu::from_float<half_t>(x));
    } else {
      v.push_back(static_cast<T>(x));
    }
  }
  return v;
}

template <class T>
uint64_t bits(T x) {
  uint64_t b = 0;
  std::memcpy(&b, &x, sizeof(T));
  return b;
}

/// issue 37's chain (x·y → sin → +0.75 → tanh → ·x → exp → −y → sigmoid →
/// square → +x), with the tanh's and the sigmoid's values as outputs too.
const char* const kChain =
    "in 2\n%2 = mul %0 %1\n%3 = sin %2\n%4 = add %3 0x1.8p-1\n%5 = tanh %4\n%6 = mul %5 %0\n"
    "%7 = exp %6\n%8 = sub %7 %1\n%9 = sigmoid %8\n%10 = mul %9 %9\n%11 = add %10 %0\nout %11 %5 %9";

/// The chain in C, each value rounded by `r` (to the storage type and back).
template <class C, class R>
void chain(C x, C y, R r, C out[3]) {
  const C t = r(::tanh(r(r(::sin(r(x * y))) + C(0.75))));
  const C s = r(C(1) / (C(1) + ::exp(-r(r(::exp(r(t * x))) - y))));
  out[0] = r(r(s * s) + x);
  out[1] = t;
  out[2] = s;
}

template <class T>
void expect_chain(int64_t n, uint32_t broadcast) {
  using C = strata::gpu::acc_t<T>;
  auto r = [](C v) { return strata::gpu::to_acc(strata::gpu::from_acc<T>(v)); };
  const std::vector<T> x = values<T>(n, 1.5f, 0.1f), y = values<T>(broadcast != 0 ? 1 : n, -0.8f, 0.3f);
  const std::vector<std::vector<T>> got = run<T>(kChain, {x, y}, n, broadcast);
  ASSERT_EQ(got.size(), 3u);
  for (int64_t i = 0; i < n; ++i) {
    C want[3];
    chain<C>(strata::gpu::to_acc(x[static_cast<size_t>(i)]),
             strata::gpu::to_acc(y[broadcast != 0 ? 0 : static_cast<size_t>(i)]), r, want);
    for (size_t m = 0; m < 3; ++m) {
      EXPECT_EQ(bits(got[m][static_cast<size_t>(i)]), bits(strata::gpu::from_acc<T>(want[m])))
          << "output " << m << ", element " << i;
    }
  }
}

TEST(FusedKernel, TheChainGivesTheBitsOfItsOpsInF32F64AndF16) {
  expect_chain<float>(257, 0);
  expect_chain<double>(257, 0);
  expect_chain<half_t>(257, 0);
}

TEST(FusedKernel, ABroadcastInputIsReadAtItsOneValue) {
  expect_chain<float>(100, 0b10);
  expect_chain<half_t>(100, 0b10);
}

// One statement per op of the vocabulary, against its meaning written out.
TEST(FusedKernel, EveryOpOfTheVocabularyMeansWhatItsOpMeans) {
  struct Case {
    const char* op;
    float (*want)(float, float);
  };
  const Case cases[] = {
      {"neg", [](float a, float) { return -a; }},
      {"abs", [](float a, float) { return std::fabs(a); }},
      {"sign", [](float a, float) { return a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : 0.0f); }},
      {"exp", [](float a, float) { return std::exp(a); }},
      {"log", [](float a, float) { return std::log(a); }},
      {"log1p", [](float a, float) { return std::log1p(a); }},
      {"expm1", [](float a, float) { return std::expm1(a); }},
      {"sqrt", [](float a, float) { return std::sqrt(a); }},
      {"reciprocal", [](float a, float) { return 1.0f / a; }},
      {"sin", [](float a, float) { return std::sin(a); }},
      {"cos", [](float a, float) { return std::cos(a); }},
      {"tanh", [](float a, float) { return std::tanh(a); }},
      {"sigmoid", [](float a, float) { return 1.0f / (1.0f + std::exp(-a)); }},
      {"relu", [](float a, float) { return a > 0.0f ? a : 0.0f; }},
      {"add", [](float a, float b) { return a + b; }},
      {"sub", [](float a, float b) { return a - b; }},
      {"mul", [](float a, float b) { return a * b; }},
      {"div", [](float a, float b) { return a / b; }},
      {"tanh_backward", [](float g, float y) { return g * (1.0f - y * y); }},
      {"sigmoid_backward", [](float g, float y) { return g * y * (1.0f - y); }},
      {"relu_backward", [](float g, float x) { return x > 0.0f ? g : 0.0f; }},
  };
  ASSERT_EQ(std::size(cases), static_cast<size_t>(fp::kOpCount));
  const std::vector<float> a = values<float>(64, 2.0f, 2.5f), b = values<float>(64, -1.5f, 0.25f);
  for (const Case& c : cases) {
    fp::Op op;
    ASSERT_TRUE(fp::op_named(c.op, op)) << c.op;
    const bool binary = fp::arity(op) == 2;
    const std::string text =
        std::string(binary ? "in 2\n%2 = " : "in 1\n%1 = ") + c.op + (binary ? " %0 %1\nout %2" : " %0\nout %1");
    const std::vector<std::vector<float>> got = binary ? run<float>(text, {a, b}, 64) : run<float>(text, {a}, 64);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(bits(got[0][i]), bits(c.want(a[i], b[i]))) << c.op << " at " << i;
  }
}

// A constant is a scalar of the inputs' dtype: rounded to f16 (through f32,
// as the other backends round it) before an f16 program reads it; exact in
// an f64 program.
TEST(FusedKernel, ConstantsAreRoundedToTheInputsDtype) {
  const std::string text = "in 1\n%1 = add %0 0x1.0040000001p+0\nout %1";  // between two f16 values
  const std::vector<half_t> x{strata::gpu::from_float<half_t>(0.0f)};
  const half_t got = run<half_t>(text, {x}, 1)[0][0];
  EXPECT_EQ(got.bits, strata::gpu::from_float<half_t>(static_cast<float>(0x1.0040000001p+0)).bits);
  const std::vector<double> z{0.0};
  EXPECT_EQ(run<double>(text, {z}, 1)[0][0], 0x1.0040000001p+0);
}

}  // namespace
