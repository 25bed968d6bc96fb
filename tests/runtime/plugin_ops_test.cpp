// plugin_ops_test.cpp — ops a plugin defines through the host services of
// ABI 2.0, end to end, with the test plugin "opslib" (tests/plugins/opslib):
//
//   opslib::cube(x; a)             = a·x³        VJP/JVP through cube_backward
//   opslib::cube_backward(g, x; a) = 3a·x²·g     VJP/JVP through cube_backward,
//                                                strata::mul/add and scale
//   opslib::scale(x; s)            = s·x
//   opslib::scale_bad_rule(x; s)   = s·x         VJP passes call_op a short attribute
//
// What it proves: the plugin's registrations are recorded (and its two bad
// ones refused, as warnings); its kernels run on its own device (own memory
// space) and, registered through register_kernels, on the CPU plugin's
// device without any fallback; the derivatives it wrote with call_op give
// gradients of order 1, 2 and 3 that match finite differences on both
// devices, and forward mode agrees with reverse mode; a call that breaks the
// schema or the shape rule is an error naming the op.
//
// The ops are reached by name through the public strata::call_op, the
// twin of what host->call_op does for a plugin. (op.hpp only for checking
// that refused registrations left no op in the core's registry.)
#include "runtime/dispatch/op.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <ostream>
#include <random>
#include <strata/strata.hpp>
#include <string>
#include <vector>

namespace {

using namespace strata;
namespace d = strata::detail;

constexpr const char* kCube = "opslib::cube";
constexpr const char* kCubeBackward = "opslib::cube_backward";
constexpr const char* kScale = "opslib::scale";
constexpr double kA = 0.75;  // the attribute "a" of every call below

constexpr const char* kBadRule = "opslib::scale_bad_rule";
constexpr const char* kMisfit = "opslib::misfit";
constexpr const char* kScaleRuled = "opslib::scale_ruled";

Tensor call(const char* name, const std::vector<Tensor>& inputs, const std::vector<OpAttr>& attrs) {
  std::vector<Tensor> out = call_op(name, inputs, attrs);
  if (out.size() != 1) throw Error(std::string(name) + ": expected one output");
  return out[0];
}

Tensor cube(const Tensor& x, double a = kA) { return call(kCube, {x}, {{"a", a}}); }

Tensor cube_backward(const Tensor& g, const Tensor& x, double a = kA) { return call(kCubeBackward, {g, x}, {{"a", a}}); }

Tensor scale(const Tensor& x, double s) { return call(kScale, {x}, {{"s", s}}); }

/// The error `f` throws (strata::Error), or a failure.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected strata::Error";
  return {};
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// Uniform values in [lo, hi] from a fixed seed, f64, on `device` (drawn on
/// the host: no random kernel of any backend is involved).
Tensor values(const Shape& shape, Device device, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = u(rng);
  return from_data(v, shape, {.dtype = DType::f64, .device = device});
}

/// Fallbacks recorded for the opslib ops (there must be none: both devices
/// have kernels for them).
std::vector<std::string> opslib_fallbacks() {
  std::vector<std::string> out;
  for (const FallbackRecord& r : runtime().fallback_stats()) {
    if (contains(r.op, "opslib::")) out.push_back(r.device + " " + r.op + " " + r.signature);
  }
  return out;
}

class PluginOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { runtime().load_config(STRATA_PLUGIN_OPS_CONFIG); }

  static PluginInfo opslib() {
    for (const PluginInfo& p : runtime().plugins()) {
      if (p.name == "opslib") return p;
    }
    ADD_FAILURE() << "no outcome recorded for the opslib plugin";
    return {};
  }
};

// --- registration ----------------------------------------------------------------

TEST_F(PluginOps, PluginLoadsAndListsItsOps) {
  PluginInfo p = opslib();
  ASSERT_TRUE(p.loaded) << p.reason;
  EXPECT_TRUE(p.initialized);
  EXPECT_EQ(p.abi, std::to_string(STRATA_ABI_MAJOR) + "." + std::to_string(STRATA_ABI_MINOR));
  std::vector<std::string> ops = p.ops;
  std::sort(ops.begin(), ops.end());
  EXPECT_EQ(ops, (std::vector<std::string>{kCube, kCubeBackward, kMisfit, kScale, kBadRule, kScaleRuled}));
  ASSERT_EQ(p.devices.size(), 1u);
  EXPECT_EQ(p.devices[0].id, "opslib:0");
  EXPECT_EQ(p.devices[0].type, DeviceType::accelerator);
  // The registry knows them as the plugin's, differentiable both ways.
  int found = 0;
  for (const OpInfo& op : runtime().ops()) {
    EXPECT_NE(op.name, "cpu::evil");
    if (op.name == kCube || op.name == kCubeBackward || op.name == kScale || op.name == kBadRule ||
        op.name == kMisfit || op.name == kScaleRuled) {
      ++found;
      EXPECT_EQ(op.plugin, "opslib") << op.name;
      EXPECT_TRUE(op.differentiable) << op.name;
      EXPECT_EQ(op.forward_mode, op.name != kBadRule) << op.name;  // scale_bad_rule has no JVP
      EXPECT_EQ(op.version, 1u) << op.name;
      // ABI 2.3's test domain: cube declares [0.25, 2], the others none.
      EXPECT_EQ(op.domain.declared, op.name == kCube) << op.name;
      EXPECT_EQ(op.domain.lo, op.name == kCube ? 0.25 : -1.5) << op.name;
      EXPECT_EQ(op.domain.hi, op.name == kCube ? 2.0 : 1.5) << op.name;
    }
    if (op.plugin.empty()) {
      EXPECT_TRUE(op.domain.declared) << op.name;  // the core's ops
    }
  }
  EXPECT_EQ(found, 6);
}

TEST_F(PluginOps, RefusedRegistrationsAreWarnings) {
  PluginInfo p = opslib();
  ASSERT_TRUE(p.loaded) << p.reason;
  std::string all;
  for (const std::string& w : p.warnings) all += w + "\n";
  bool evil = false, twice = false, short_attr = false, attr_twice = false, alien_kind = false, domain = false,
       batching = false;
  for (const std::string& w : p.warnings) {
    evil = evil || (contains(w, "cpu::evil") && contains(w, "namespace"));
    twice = twice || (contains(w, kCube) && contains(w, "already registered"));
    short_attr = short_attr || (contains(w, "opslib::short_attr") && contains(w, "attribute schema 0") &&
                                contains(w, "struct_size below"));
    attr_twice = attr_twice || contains(w, "opslib::twice_attr: attribute 's' is declared twice");
    alien_kind = alien_kind || contains(w, "opslib::alien_kind: attribute 's' has an unknown kind 99");
    domain = domain || contains(w, "opslib::empty_domain: test domain [2, 1] is not an interval");
    batching = batching || contains(w, "opslib::alien_batching: batching 7 is not a strata_op_batching");
  }
  EXPECT_TRUE(evil) << "no warning naming cpu::evil and its namespace:\n" << all;
  EXPECT_TRUE(twice) << "no warning about the second registration of opslib::cube:\n" << all;
  EXPECT_TRUE(short_attr) << "no warning about the attribute schema below its minimum size:\n" << all;
  EXPECT_TRUE(attr_twice) << "no warning about an attribute declared twice:\n" << all;
  EXPECT_TRUE(alien_kind) << "no warning about an unknown attribute kind:\n" << all;
  EXPECT_TRUE(domain) << "no warning about a test domain that is no interval:\n" << all;
  EXPECT_TRUE(batching) << "no warning about an unknown batching property:\n" << all;
  EXPECT_EQ(p.warnings.size(), 7u) << all;
  EXPECT_EQ(d::find_kernel_op("opslib::alien_batching"), nullptr);
  EXPECT_EQ(d::find_kernel_op("opslib::empty_domain"), nullptr);
  EXPECT_EQ(d::find_kernel_op("opslib::twice_attr"), nullptr);
  EXPECT_EQ(d::find_kernel_op("opslib::alien_kind"), nullptr);
  EXPECT_EQ(d::find_kernel_op("cpu::evil"), nullptr);
  EXPECT_EQ(d::find_kernel_op("opslib::short_attr"), nullptr);
}

// --- forward -----------------------------------------------------------------------

struct DeviceDType {
  const char* device;
  DType dtype;
};
void PrintTo(const DeviceDType& p, std::ostream* os) { *os << p.device << " " << dtype_name(p.dtype); }

class PluginOpsForward : public PluginOps, public ::testing::WithParamInterface<DeviceDType> {};

TEST_P(PluginOpsForward, KernelsComputeTheOpsWithoutFallback) {
  Device device(GetParam().device);
  DType dtype = GetParam().dtype;
  double tol = dtype == DType::f32 ? 1e-5 : 1e-13;
  std::vector<double> xs{-1.5, -0.5, 0.0, 0.25, 1.0, 2.0};
  std::vector<double> gs{0.5, -1.0, 2.0, 1.5, -0.25, 1.0};
  Tensor x = from_data(xs, {2, 3}, {.dtype = dtype, .device = device});
  Tensor g = from_data(gs, {2, 3}, {.dtype = dtype, .device = device});
  runtime().reset_fallback_stats();

  Tensor y = cube(x);
  EXPECT_EQ(y.device(), device);
  EXPECT_EQ(y.dtype(), dtype);
  EXPECT_EQ(y.sizes(), (Shape{2, 3}));
  std::vector<double> yv = y.to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(yv[i], kA * std::pow(xs[i], 3), tol * 10) << i;

  std::vector<double> zv = cube_backward(g, x).to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(zv[i], 3 * kA * xs[i] * xs[i] * gs[i], tol * 10) << i;

  std::vector<double> sv = scale(x, -2.5).to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(sv[i], -2.5 * xs[i], tol) << i;

  // A contiguous view at an offset, and a strided view (compacted by the
  // host: the kernels do not take strided inputs).
  Tensor wide = from_data(std::vector<double>{9, 9, -1.0, 0.5, 2.0, 9}, {6}, {.dtype = dtype, .device = device});
  EXPECT_EQ(cube(wide.slice(0, 2, 5), 2.0).to_vector<double>(), (std::vector<double>{-2.0, 0.25, 16.0}));
  EXPECT_EQ(cube(wide.slice(0, 1, 6, 2), 1.0).to_vector<double>(), (std::vector<double>{729.0, 0.125, 729.0}));
  EXPECT_EQ(cube(x.transpose(0, 1), 1.0).to_vector<double>()[1], std::pow(xs[3], 3));

  EXPECT_TRUE(opslib_fallbacks().empty()) << opslib_fallbacks().front();
}

INSTANTIATE_TEST_SUITE_P(Devices, PluginOpsForward,
                         ::testing::Values(DeviceDType{"opslib:0", DType::f32}, DeviceDType{"opslib:0", DType::f64},
                                           DeviceDType{"cpu:0", DType::f32}, DeviceDType{"cpu:0", DType::f64}),
                         [](const ::testing::TestParamInfo<DeviceDType>& p) {
                           std::string n = std::string(p.param.device) + "_" + std::string(dtype_name(p.param.dtype));
                           std::replace(n.begin(), n.end(), ':', '_');
                           return n;
                         });

// --- derivatives -------------------------------------------------------------------

class PluginOpsGrad : public PluginOps, public ::testing::WithParamInterface<const char*> {
 protected:
  Device device() const { return Device(GetParam()); }
};

/// x ↦ <∇g(x), w>: one order up from g, still a scalar function of x.
Fn order_up(const Fn& g, const Tensor& w) {
  Fn dg = grad(g);
  return [dg, w](const Tensor& x) { return sum(dg(x) * w); };
}

/// f and its first two order_ups: gradcheck of orders[k] checks the
/// (k+1)-th derivative of f.
void expect_gradcheck_to_third_order(const std::string& what, const Fn& f, const Tensor& x, const Tensor& w1,
                                     const Tensor& w2) {
  std::vector<Fn> orders{f, order_up(f, w1)};
  orders.push_back(order_up(orders[1], w2));
  for (int order = 1; order <= 3; ++order) {
    // Higher orders divide noise by eps^order: wider steps, four-point rule.
    GradcheckOptions options{.eps = order == 1 ? 1e-6 : 1e-4, .atol = 1e-5, .rtol = 1e-3, .four_point = true};
    GradcheckResult r = gradcheck(orders[static_cast<size_t>(order - 1)], x, options);
    EXPECT_TRUE(r.ok) << what << " on " << x.device().str() << ", derivative order " << order << ": " << r.message;
  }
}

TEST_P(PluginOpsGrad, CubeGradcheckToThirdOrder) {
  Tensor x = values({2, 3}, device(), -1.5, 1.5, 1);
  Tensor w = values({2, 3}, device(), 0.5, 1.5, 2);
  Tensor w1 = values({2, 3}, device(), -1.0, 1.0, 3);
  Tensor w2 = values({2, 3}, device(), -1.0, 1.0, 4);
  runtime().reset_fallback_stats();
  expect_gradcheck_to_third_order("sum(cube(x) * w)", [w](const Tensor& t) { return sum(cube(t) * w); }, x, w1, w2);
  // The rules ran on the device itself: the plugin's ops on its kernels, the
  // core ops they call (strata::mul) falling back from opslib:0, counted.
  EXPECT_TRUE(opslib_fallbacks().empty()) << opslib_fallbacks().front();
  if (device().str() == "opslib:0") {
    bool mul = false;
    for (const FallbackRecord& r : runtime().fallback_stats()) mul = mul || (r.device == "opslib:0" && r.op == "mul");
    EXPECT_TRUE(mul) << "the VJP of cube_backward calls strata::mul on opslib:0, which has no kernel for it";
  }
}

// cube_backward differentiated in both operands at once (g = x², x): its
// VJP's gradient of g and of x, and their own derivatives.
TEST_P(PluginOpsGrad, CubeBackwardGradcheckToThirdOrder) {
  Tensor x = values({2, 3}, device(), -1.5, 1.5, 5);
  Tensor w = values({2, 3}, device(), 0.5, 1.5, 6);
  Tensor w1 = values({2, 3}, device(), -1.0, 1.0, 7);
  Tensor w2 = values({2, 3}, device(), -1.0, 1.0, 8);
  Tensor c = values({2, 3}, device(), -1.0, 1.0, 9);
  expect_gradcheck_to_third_order("sum(cube_backward(x * x, x) * w)",
                                  [w](const Tensor& t) { return sum(cube_backward(t * t, t) * w); }, x, w1, w2);
  // Only g moving: the VJP is asked for g's gradient alone (needed = {1, 0}).
  expect_gradcheck_to_third_order("sum(cube_backward(sin(x), c) * w)",
                                  [w, c](const Tensor& t) { return sum(cube_backward(sin(t), c) * w); }, x, w1, w2);
}

// The exact derivatives: d/dx a·x³ = 3a·x², then 6a·x, then 6a.
TEST_P(PluginOpsGrad, NthGradIsExact) {
  std::vector<double> xs{-1.5, -0.5, 0.25, 1.0, 2.0};
  Tensor x = from_data(xs, {5}, {.dtype = DType::f64, .device = device()});
  Fn f = [](const Tensor& t) { return sum(cube(t)); };
  std::vector<double> g1 = nth_grad(f, 1)(x).to_vector<double>();
  std::vector<double> g2 = nth_grad(f, 2)(x).to_vector<double>();
  Tensor third = nth_grad(f, 3)(x);
  EXPECT_EQ(third.device(), device());
  std::vector<double> g3 = third.to_vector<double>();
  ASSERT_EQ(g3.size(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_NEAR(g1[i], 3 * kA * xs[i] * xs[i], 1e-12) << i;
    EXPECT_NEAR(g2[i], 6 * kA * xs[i], 1e-12) << i;
    EXPECT_NEAR(g3[i], 6 * kA, 1e-12) << i;
  }
}

// Forward mode (the plugin's JVPs) against reverse mode (its VJPs).
TEST_P(PluginOpsGrad, ForwardModeAgreesWithReverseMode) {
  Tensor x = values({2, 3}, device(), -1.5, 1.5, 10);
  Tensor v = values({2, 3}, device(), -1.0, 1.0, 11);
  Tensor w = values({2, 3}, device(), 0.5, 1.5, 12);
  // cube: J is diagonal, so J·v (forward) equals vᵀ·J (reverse).
  Fn f = [](const Tensor& t) { return cube(t); };
  auto [y_fwd, jv] = jvp(f, x, v);
  auto [y_rev, vj] = vjp(f, x, v);
  std::vector<double> a = jv.to_vector<double>(), b = vj.to_vector<double>(), xv = x.to_vector<double>(),
                      vv = v.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-12) << i;
    EXPECT_NEAR(a[i], 3 * kA * xv[i] * xv[i] * vv[i], 1e-12) << i;
  }
  // cube_backward with both operands moving (both tangents, then the add):
  // the Jacobian by columns (JVP) equals the Jacobian by rows (VJP).
  Fn h = [](const Tensor& t) { return cube_backward(t * t, t); };
  std::vector<double> jf = jacfwd(h, x).to_vector<double>(), jr = jacrev(h, x).to_vector<double>();
  ASSERT_EQ(jf.size(), jr.size());
  for (size_t i = 0; i < jf.size(); ++i) EXPECT_NEAR(jf[i], jr[i], 1e-12) << i;
  // Second order: forward-over-reverse (JVP of cube_backward) equals
  // reverse-over-reverse (its VJP).
  Fn s = [w](const Tensor& t) { return sum(cube(t) * w); };
  std::vector<double> fo = hvp(s, x, v, HvpMode::forward_over_reverse).to_vector<double>();
  std::vector<double> ro = hvp(s, x, v, HvpMode::reverse_over_reverse).to_vector<double>();
  std::vector<double> wv = w.to_vector<double>();
  for (size_t i = 0; i < fo.size(); ++i) {
    EXPECT_NEAR(fo[i], ro[i], 1e-12) << i;
    EXPECT_NEAR(fo[i], 6 * kA * xv[i] * wv[i] * vv[i], 1e-12) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, PluginOpsGrad, ::testing::Values("cpu:0", "opslib:0"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string n = p.param;
                           std::replace(n.begin(), n.end(), ':', '_');
                           return n;
                         });

// --- errors --------------------------------------------------------------------------

TEST_F(PluginOps, MissingAttributeNamesOpAndAttribute) {
  Tensor x = from_data(std::vector<double>{1.0, 2.0}, {2});
  std::string e = error_of([&] { call(kCube, {x}, {}); });
  EXPECT_TRUE(contains(e, kCube)) << e;
  EXPECT_TRUE(contains(e, "missing")) << e;
  EXPECT_TRUE(contains(e, "'a'")) << e;
}

TEST_F(PluginOps, AttributeOfTheWrongKindNamesBothKinds) {
  Tensor x = from_data(std::vector<double>{1.0, 2.0}, {2});
  std::string e = error_of([&] { call(kCube, {x}, {{"a", int64_t{2}}}); });
  EXPECT_TRUE(contains(e, kCube)) << e;
  EXPECT_TRUE(contains(e, "'a'")) << e;
  EXPECT_TRUE(contains(e, "FLOAT")) << e;
  EXPECT_TRUE(contains(e, "INT")) << e;
}

TEST_F(PluginOps, UnknownAttributeIsAnError) {
  Tensor x = from_data(std::vector<double>{1.0, 2.0}, {2});
  std::string e = error_of([&] { call(kCube, {x}, {{"a", 1.0}, {"b", 1.0}}); });
  EXPECT_TRUE(contains(e, kCube)) << e;
  EXPECT_TRUE(contains(e, "'b'")) << e;
}

TEST_F(PluginOps, IntegerInputIsRefusedByTheShapeRule) {
  for (const char* device : {"cpu:0", "opslib:0"}) {
    Tensor x = from_data(std::vector<int64_t>{1, 2, 3}, {3}).to(Device(device));
    std::string e = error_of([&] { cube(x); });
    EXPECT_TRUE(contains(e, kCube)) << e;
    EXPECT_TRUE(contains(e, "floating dtypes only")) << e;
    EXPECT_TRUE(contains(e, "i64")) << e;
  }
}

TEST_F(PluginOps, CubeBackwardRefusesMismatchedOperands) {
  Tensor g = from_data(std::vector<double>{1.0, 2.0}, {2});
  Tensor x = from_data(std::vector<double>{1.0, 2.0, 3.0}, {3});
  std::string e = error_of([&] { cube_backward(g, x); });
  EXPECT_TRUE(contains(e, kCubeBackward)) << e;
  EXPECT_TRUE(contains(e, "one dtype and shape")) << e;
  Tensor g32 = from_data(std::vector<float>{1.0f, 2.0f}, {2});
  Tensor x64 = from_data(std::vector<double>{1.0, 2.0}, {2});
  e = error_of([&] { cube_backward(g32, x64); });
  EXPECT_TRUE(contains(e, "f32")) << e;
  EXPECT_TRUE(contains(e, "f64")) << e;
}

// --- calling by name: the public call_op -----------------------------------------------

TEST_F(PluginOps, CallOpReachesTheCoreOpsByName) {
  Tensor a = from_data(std::vector<double>{1.0, 2.0, 3.0}, {3});
  Tensor b = from_data(std::vector<double>{4.0, 5.0, 6.0}, {3});
  std::vector<Tensor> out = call_op("strata::mul", {a, b});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to_vector<double>(), (std::vector<double>{4.0, 10.0, 18.0}));
  // Recorded like the public function: its gradient is b.
  Tensor x = a.detach().set_requires_grad();
  sum(call_op("strata::mul", {x, b})[0]).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), b.to_vector<double>());
  // An integer attribute of a core op.
  Tensor m = from_data(std::vector<double>{1.0, 5.0, 2.0, 4.0}, {2, 2});
  std::vector<Tensor> s = call_op("strata::sum", {m}, {{"dims", std::vector<int64_t>{1}}});
  EXPECT_EQ(s.at(0).to_vector<double>(), (std::vector<double>{6.0, 6.0}));
}

TEST_F(PluginOps, CallOpErrorsNameTheOpAndTheAttribute) {
  Tensor x = from_data(std::vector<double>{1.0, 2.0}, {2});
  std::string e = error_of([&] { call_op("acme::nope", {x}); });
  EXPECT_TRUE(contains(e, "call_op(acme::nope)")) << e;
  EXPECT_TRUE(contains(e, "unknown op")) << e;
  e = error_of([&] { call_op("mul", {x, x}); });
  EXPECT_TRUE(contains(e, "unknown op")) << e;  // names are namespaced
  e = error_of([&] { call_op("strata::reshape", {x}); });
  EXPECT_TRUE(contains(e, "view or join")) << e;
  e = error_of([&] { call_op("strata::mul", {x}); });
  EXPECT_TRUE(contains(e, "expected 2 inputs, got 1")) << e;
  // A creation op takes no tensor: said so, not "expected 0 inputs, got 0".
  for (const std::vector<Tensor>& inputs : {std::vector<Tensor>{}, std::vector<Tensor>{x}}) {
    e = error_of([&] { call_op("strata::fill", inputs); });
    EXPECT_TRUE(contains(e, "fill: creates its output from a shape and attributes and takes no input tensor")) << e;
    EXPECT_FALSE(contains(e, "expected 0 inputs")) << e;
  }
  // A core op's integer attribute given as a real: named, with both kinds.
  e = error_of([&] { call_op("strata::sum", {x}, {{"dims", 1.5}}); });
  EXPECT_TRUE(contains(e, "'dims'")) << e;
  EXPECT_TRUE(contains(e, "INTS")) << e;
  EXPECT_TRUE(contains(e, "FLOAT")) << e;
  // An attribute a core op does not declare (sum keeps its reduced dims;
  // keepdim is the public function's): refused, naming what it takes,
  // rather than ignored.
  e = error_of([&] { call_op("strata::sum", {x}, {{"dims", std::vector<int64_t>{0}}, {"keepdim", true}}); });
  EXPECT_TRUE(contains(e, "sum(f64[2]) on cpu:0: attribute 'keepdim' is not one the op takes (it takes: dims INTS)"))
      << e;
  // A required attribute missing: named with its declared kind.
  e = error_of([&] { call_op("strata::sum", {x}); });
  EXPECT_TRUE(contains(e, "missing attribute 'dims' (INTS)")) << e;
  e = error_of([&] { call_op(kCube, {x}, {{"a", 1.0}, {"a", 2.0}}); });
  EXPECT_TRUE(contains(e, "'a' given twice")) << e;
}

// opslib::scale_bad_rule computes s·x, but its VJP hands call_op an
// attribute whose struct_size is below STRATA_ATTR_MIN_SIZE: the backward
// pass fails naming the call and the size, and the device carries on.
TEST_F(PluginOps, ShortAttributeFromARuleIsRefused) {
  for (const char* device : {"opslib:0"}) {
    Tensor x = from_data(std::vector<double>{1.0, 2.0}, {2}).to(Device(device)).set_requires_grad();
    Tensor y = call(kBadRule, {x}, {{"s", 2.0}});
    EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{2.0, 4.0}));
    std::string e = error_of([&] { sum(y).backward(); });
    EXPECT_TRUE(contains(e, "call_op(opslib::scale)")) << e;
    EXPECT_TRUE(contains(e, "struct_size 8 below the minimum")) << e;
    // Nothing broke: the good ops still differentiate on the device.
    Tensor z = x.detach().set_requires_grad();
    sum(scale(z, 3.0)).backward();
    EXPECT_EQ(z.grad().to_vector<double>(), (std::vector<double>{3.0, 3.0}));
  }
}

// opslib::misfit computes s·x, but its VJP returns the seed summed over
// dim 0 and its JVP the tangent cast to f64: the host refuses both results,
// naming the op, its plugin, the rule and what does not fit, on its own
// device and on the CPU's; grad() stays as it was.
TEST_F(PluginOps, DerivativesThatDoNotFitAreRefused) {
  for (const char* device : {"opslib:0", "cpu:0"}) {
    SCOPED_TRACE(device);
    Tensor x = from_data(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).to(Device(device)).set_requires_grad();
    Tensor y = call(kMisfit, {x}, {{"s", 2.0}});
    std::string e = error_of([&] { sum(y).backward(); });
    EXPECT_TRUE(contains(e, "opslib::misfit VJP (plugin opslib): returned a gradient of shape [1, 3] for input 0 of "
                            "shape [2, 3]"))
        << e;
    EXPECT_FALSE(x.grad().defined());
    Tensor x0 = x.detach();
    e = error_of([&] {
      jvp([&](const Tensor& t) { return call(kMisfit, {t}, {{"s", 2.0}}); }, x0, ones_like(x0));
    });
    EXPECT_TRUE(contains(e, "opslib::misfit JVP (plugin opslib): returned a tangent of dtype f64 for output 0 of "
                            "dtype f32"))
        << e;
  }
}

// --- errors keep their type through a plugin's rule ------------------------------------

// The same ops with the "error" fallback policy for strata::mul.
class PluginOpsErrorPolicy : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { runtime().load_config(STRATA_PLUGIN_OPS_ERROR_CONFIG); }
  static void TearDownTestSuite() { runtime().load_config(STRATA_PLUGIN_OPS_CONFIG); }
};

// cube_backward's VJP calls strata::mul on opslib:0, which has no kernel for
// it; under the "error" policy that refusal is a DeviceError, and it stays
// one through the plugin's rule, naming the plugin op, its rule and the
// inner op (it was a plain strata::Error, which a caller catching
// DeviceError for a missing kernel would miss). grad() stays as it was.
TEST_F(PluginOpsErrorPolicy, ARefusalInsideAPluginRuleKeepsItsType) {
  Tensor x = from_data(std::vector<float>{1, 2}, {2}).to(Device("opslib:0")).set_requires_grad();
  Tensor y = cube_backward(ones_like(x), x);
  try {
    sum(y).backward();
    FAIL() << "expected a DeviceError";
  } catch (const DeviceError& e) {
    const std::string m = e.what();
    EXPECT_TRUE(contains(m, "opslib::cube_backward VJP (plugin opslib)")) << m;
    EXPECT_TRUE(contains(m, "call_op(strata::mul)")) << m;
    EXPECT_TRUE(contains(m, "fallback policy \"error\"")) << m;
  }
  EXPECT_FALSE(x.grad().defined());
  // The same graph on cpu:0, which has the kernel, differentiates.
  Tensor xc = x.detach().to(Device("cpu:0")).set_requires_grad();
  sum(cube_backward(ones_like(xc), xc)).backward();
  EXPECT_TRUE(xc.grad().defined());
}

}  // namespace

// --- vmap over a plugin op (docs/vmap.md, "The loop fallback") ------------------

// opslib::scale declares no batching property: vmap runs it once per lane,
// counts the loop, and a strict vmap refuses it; values and gradients equal
// the loop's. opslib::cube and its backward op declare their leading dims
// independent (ABI 2.5): one call on the lanes, nothing counted.
/// vmap_fallback_stats() holds one loop: one call of `op` over `lanes` lanes.
void expect_one_vmap_loop(const char* op, const char* reason, uint64_t lanes) {
  std::vector<VmapFallback> stats = vmap_fallback_stats();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].op, op);
  EXPECT_EQ(stats[0].reason, reason);
  EXPECT_EQ(stats[0].calls, 1u);
  EXPECT_EQ(stats[0].lanes, lanes);
}

// ABI 2.6: a plugin op's own batching rule (strata_op_schema::batch).
// opslib::scale_ruled's rule scales the lanes in one call; it declines for
// s < 0 (the host loops, counted) and misfits for s == 7 (refused, named).
TEST_F(PluginOps, VmapRunsAPluginOpsOwnBatchingRule) {
  reset_vmap_fallback_stats();
  Tensor x = values({4, 3}, Device("cpu:0"), -1.0, 1.0, 32);
  std::vector<double> in = x.to_vector<double>();
  auto ruled = [](double s) {
    return [s](const Tensor& v) { return call(kScaleRuled, {v}, {{"s", s}}); };
  };
  std::vector<double> y = vmap(ruled(kA))(x).to_vector<double>();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_DOUBLE_EQ(y[i], kA * in[i]);
  EXPECT_TRUE(vmap_fallback_stats().empty()) << vmap_fallback_stats().front().reason;
  // Derivatives inside (the op's node on the batched tensors) and outside
  // (the rule's own call on the lanes).
  std::vector<double> inside = vmap(grad([&](const Tensor& v) { return sum(ruled(kA)(v) * v); }))(x).to_vector<double>();
  for (size_t i = 0; i < inside.size(); ++i) EXPECT_NEAR(inside[i], 2.0 * kA * in[i], 1e-12);
  Tensor outside = grad([&](const Tensor& w) { return sum(vmap(ruled(kA))(w) * w); })(x);
  std::vector<double> ov = outside.to_vector<double>();
  for (size_t i = 0; i < ov.size(); ++i) EXPECT_NEAR(ov[i], 2.0 * kA * in[i], 1e-12);
  EXPECT_TRUE(vmap_fallback_stats().empty());
  // strict is no obstacle to a rule.
  EXPECT_NO_THROW(vmap(ruled(kA), 0, 0, {.strict = true})(x));
  // Declined: the loop, counted with the reason.
  std::vector<double> neg = vmap(ruled(-kA))(x).to_vector<double>();
  for (size_t i = 0; i < neg.size(); ++i) EXPECT_DOUBLE_EQ(neg[i], -kA * in[i]);
  expect_one_vmap_loop(kScaleRuled, "batching rule declined", 4);
  // A misfit result is the plugin's error, named, with both shapes.
  const std::string misfit = error_of([&] { vmap(ruled(7.0))(x); });
  EXPECT_TRUE(contains(misfit, "opslib::scale_ruled")) << misfit;
  EXPECT_TRUE(contains(misfit, "for 4 lanes, expected f64[4, 3]")) << misfit;
  EXPECT_TRUE(contains(misfit, "plugin rule")) << misfit;
  EXPECT_FALSE(contains(misfit, "internal")) << misfit;
  // The op table names the kind.
  for (const OpInfo& op : runtime().ops()) {
    if (op.name == kScaleRuled) {
      EXPECT_EQ(op.batching, "plugin rule");
    }
  }
}

TEST_F(PluginOps, VmapRunsAnOpWithoutABatchingRuleLaneByLaneAndCountsIt) {
  reset_vmap_fallback_stats();
  Tensor x = values({4, 3}, Device("cpu:0"), -1.0, 1.0, 31);
  std::vector<double> in = x.to_vector<double>();
  auto cube = [](const Tensor& v) { return call(kCube, {v}, {{"a", kA}}); };
  auto scale = [](const Tensor& v) { return call(kScale, {v}, {{"s", kA}}); };
  std::vector<double> cubed = vmap(cube)(x).to_vector<double>();
  for (size_t i = 0; i < cubed.size(); ++i) EXPECT_DOUBLE_EQ(cubed[i], kA * in[i] * in[i] * in[i]);
  Tensor g = vmap(grad([&](const Tensor& v) { return sum(cube(v)); }))(x);
  std::vector<double> gv = g.to_vector<double>();
  for (size_t i = 0; i < gv.size(); ++i) EXPECT_NEAR(gv[i], 3.0 * kA * in[i] * in[i], 1e-12);
  EXPECT_TRUE(vmap_fallback_stats().empty()) << vmap_fallback_stats().front().op;
  std::vector<double> scaled = vmap(scale)(x).to_vector<double>();
  for (size_t i = 0; i < scaled.size(); ++i) EXPECT_DOUBLE_EQ(scaled[i], kA * in[i]);
  expect_one_vmap_loop(kScale, "no batching rule", 4);
  // Per-lane gradients through the loop (the rule's scale loops too).
  std::vector<double> gs = vmap(grad([&](const Tensor& v) { return sum(scale(v) * v); }))(x).to_vector<double>();
  for (size_t i = 0; i < gs.size(); ++i) EXPECT_NEAR(gs[i], 2.0 * kA * in[i], 1e-12);
  const std::string strict = error_of([&] { vmap(scale, 0, 0, {.strict = true})(x); });
  EXPECT_TRUE(contains(strict, "opslib::scale")) << strict;
  EXPECT_TRUE(contains(strict, "no batching rule applies")) << strict;
  EXPECT_TRUE(contains(strict, "VmapOptions::strict")) << strict;
}
