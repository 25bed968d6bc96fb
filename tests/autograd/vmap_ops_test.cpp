// vmap_ops_test.cpp — "vmap(op) equals the loop", generated for every core
// op: each op applied under vmap with each operand mapped alone and all of
// them at once (the batch dim first and last), against the op run lane by
// lane and stacked; differentiable ops also under grad (orders 1 and 2)
// and jvp, inside the vmap. Pointwise ops get their cases from the op
// registry (domain, arity); the others are written here, and the audit
// fails naming any core op without a case or without a batching rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <complex>
#include <functional>
#include <set>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "autograd_test_util.hpp"

using namespace strata;

namespace {

constexpr int64_t kLanes = 3;

/// One lane's operand, drawn from a seed.
using Make = std::function<Tensor(uint64_t seed)>;

struct Case {
  std::string op;  // the registry's name without "strata::"
  std::vector<Make> inputs;
  TensorsFn fn;
  bool differentiable = false;  // input 0 is a float the outputs' first depends on smoothly
  bool available = true;        // false where the test device lacks a dtype the case needs
};

DType real() { return strata_test::real_dtype(); }

Make uniform(Shape shape, double lo = -1.5, double hi = 1.5, double grid = 0.0) {
  return [=](uint64_t seed) {
    manual_seed(seed);
    Tensor t = rand(shape, {.dtype = real()}) * (hi - lo) + lo;
    return grid > 0.0 ? round(t / grid) * grid : t;
  };
}
Make nonzero(Shape shape) {
  return [=](uint64_t seed) {
    manual_seed(seed);
    Tensor m = rand(shape, {.dtype = real()}) * 1.5 + 0.5;
    return where(gt(rand(shape, {.dtype = real()}), full({}, 0.5, {.dtype = real()})), m, -m);
  };
}
Make indices(Shape shape, int64_t bound) {
  return [=](uint64_t seed) {
    manual_seed(seed);
    return cast(floor(rand(shape, {.dtype = DType::f32}) * static_cast<double>(bound)), DType::i64);
  };
}
Make booleans(Shape shape) {
  return [=](uint64_t seed) {
    manual_seed(seed);
    return gt(rand(shape, {.dtype = DType::f32}), full({}, 0.5));
  };
}
Make complexes(Shape shape) {
  return [=](uint64_t seed) { return complex(uniform(shape)(seed), uniform(shape)(seed + 1000)); };
}

TensorsFn by_name(std::string name, std::vector<OpAttr> attrs = {}) {
  return
      [name = "strata::" + std::move(name), attrs](const std::vector<Tensor>& in) { return call_op(name, in, attrs); };
}
TensorsFn one(std::function<Tensor(const std::vector<Tensor>&)> f) {
  return [f = std::move(f)](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; };
}

/// sin as a custom_vjp function (its own rule): the custom-function cases.
const CustomFunction& custom_sin() {
  static const CustomFunction f = custom_vjp(
      [](const std::vector<Tensor>& x) { return std::vector<Tensor>{sin(x[0])}; },
      [](const std::vector<Tensor>& x) {
        return std::pair{std::vector<Tensor>{sin(x[0])}, std::vector<Tensor>{x[0]}};
      },
      [](const std::vector<Tensor>& r, const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0] * cos(r[0])}; },
      {.name = "vmap_test_sin"});
  return f;
}

bool tagged(const OpInfo& op, const char* tag) { return std::ranges::find(op.tags, tag) != op.tags.end(); }

/// Pointwise ops from the registry: no attributes, one or two operands
/// (the second broadcast from [1, 3] where the op broadcasts).
void add_registry_cases(std::vector<Case>& cases, std::set<std::string>& written) {
  for (const OpInfo& op : runtime().ops()) {
    const std::string bare = op.name.substr(op.name.find("::") + 2);
    if (!op.plugin.empty() || written.contains(bare) || !tagged(op, "pointwise") || !op.attrs.empty()) continue;
    if (op.n_inputs < 1 || op.n_inputs > 2) continue;
    Case c{bare, {}, by_name(bare), op.differentiable && op.domain.orders >= 1};
    for (int k = 0; k < op.n_inputs; ++k) {
      const Shape shape = k == 1 && tagged(op, "broadcasting") ? Shape{1, 3} : Shape{2, 3};
      c.inputs.push_back(op.domain.nonzero_input == k ? nonzero(shape)
                                                      : uniform(shape, op.domain.lo, op.domain.hi, op.domain.grid));
    }
    cases.push_back(std::move(c));
  }
}

std::vector<Case> all_cases() {
  const bool has_complex = strata_test::missing_dtypes({DType::c64}).empty();
  std::vector<Case> cases = {
      {"where", {booleans({2, 3}), uniform({2, 3}), uniform({1, 3})}, by_name("where")},
      {"cast", {uniform({2, 3})}, one([](auto& in) { return cast(in[0], DType::f32) * 2.0; }), true},
      {"sum", {uniform({2, 3, 2})}, by_name("sum", {{"dims", std::vector<int64_t>{0, 2}}}), true},
      {"prod", {uniform({2, 3})}, by_name("prod", {{"dims", std::vector<int64_t>{1}}}), true},
      {"max", {uniform({2, 3})}, by_name("max", {{"dims", std::vector<int64_t>{1}}}), true},
      {"min", {uniform({2, 3})}, by_name("min", {{"dims", std::vector<int64_t>{0}}}), true},
      {"argmax", {uniform({2, 3})}, by_name("argmax", {{"dims", std::vector<int64_t>{1}}})},
      {"argmin", {uniform({2, 3})}, by_name("argmin", {{"dims", std::vector<int64_t>{0}}})},
      {"mean", {uniform({2, 3})}, by_name("mean", {{"dims", std::vector<int64_t>{0, 1}}}), true},
      {"matmul", {uniform({2, 3}), uniform({3, 4})}, by_name("matmul"), true},
      {"linear", {uniform({2, 3}), uniform({4, 3}), uniform({4})}, one([](auto& in) {
         return linear(in[0], in[1], in[2], FusedActivation::relu);
       }), true},
      {"index_select", {uniform({3, 4}), indices({5}, 4)}, one([](auto& in) { return index_select(in[0], 1, in[1]); }),
       true},
      {"gather", {uniform({3, 4}), indices({3, 2}, 4)}, one([](auto& in) { return gather(in[0], 1, in[1]); }), true},
      {"scatter_add", {uniform({3, 4}), indices({2, 4}, 3), uniform({2, 4})},
       one([](auto& in) { return scatter_add(in[0], 0, in[1], in[2]); }), true},
      {"softmax", {uniform({2, 3})}, one([](auto& in) { return softmax(in[0], 1); }), true},
      {"fused_elementwise", {uniform({2, 3}), uniform({3})}, one([](auto& in) {
         return fused_elementwise({in[0], in[1]}, "in 2\n%2 = mul %0 %1\n%3 = sin %2\n%4 = add %3 0x1p-1\n"
                                                  "%5 = tanh %4\n%6 = mul %5 %0\nout %6");
       }),
       true},
      {"log_softmax", {uniform({2, 3})}, one([](auto& in) { return log_softmax(in[0], 0); }), true},
      {"softmax_backward", {uniform({2, 3}), uniform({2, 3}, 0.1, 0.9)},
       one([](auto& in) { return softmax_backward(in[0], in[1], 1); }), true},
      {"log_softmax_backward", {uniform({2, 3}), uniform({2, 3}, -2.0, -0.1)},
       one([](auto& in) { return log_softmax_backward(in[0], in[1], 1); }), true},
      {"fill", {uniform({2, 3})}, one([](auto& in) { return in[0] * full({3}, 2.0, {.dtype = real()}); }), true},
      {"to_device", {uniform({2, 3})}, one([](auto& in) { return sin(in[0].to(Device("cpu:0")).to(in[0].device())); }),
       true},
      {"cat", {uniform({2, 3}), uniform({1, 3})}, one([](auto& in) { return cat({in[0], in[1], in[0]}, 0); }), true},
      {"pad", {uniform({2, 3})}, one([](auto& in) { return pad(in[0], {1, 2, 0, 1}, 0.5); }), true},
      {"reshape", {uniform({2, 3})}, one([](auto& in) { return in[0].transpose(0, 1).reshape({6}) * 1.0; }), true},
      {"permute", {uniform({2, 3, 2})}, one([](auto& in) { return in[0].permute({2, 0, 1}) * 1.0; }), true},
      {"slice", {uniform({4, 3})}, one([](auto& in) { return in[0].slice(0, 1, 4, 2) * 1.0; }), true},
      {"select", {uniform({4, 3})}, one([](auto& in) { return in[0].select(1, -1) * 1.0; }), true},
      {"expand", {uniform({1, 3})}, one([](auto& in) { return in[0].expand({2, 4, 3}) * 1.0; }), true},
      {"detach", {uniform({2, 3})}, one([](auto& in) { return sin(in[0]) * in[0].detach(); }), true},
      {"random_uniform", {uniform({2, 3})}, one([](auto& in) { return in[0] * 0.0; })},
      {"random_normal", {uniform({2, 3})}, one([](auto& in) { return in[0] * 0.0; })},
      {"bernoulli", {uniform({2, 3})}, one([](auto& in) { return in[0] * 0.0; })},
      {"amp_unscale", {uniform({2, 3}), uniform({}, 0.5, 1.0)}, [](auto& in) {
         auto [g, found] = amp_unscale(in[0], in[1]);
         return std::vector<Tensor>{g, found};
       }},
      {"sgd_step", {uniform({2, 3}), uniform({2, 3})}, one([](auto& in) { return sgd_step(in[0], in[1], 0.1, 0.01); })},
      {"sgd_momentum_step", {uniform({2, 3}), uniform({2, 3}), uniform({2, 3})}, [](auto& in) {
         return call_op("strata::sgd_momentum_step", in,
                        {{"lr", 0.1}, {"weight_decay", 0.0}, {"momentum", 0.9}, {"dampening", 0.0},
                         {"nesterov", int64_t{0}}, {"first", int64_t{0}}});
       }},
      {"adam_step", {uniform({2, 3}), uniform({2, 3}), uniform({2, 3}), uniform({2, 3}, 0.1, 1.0)}, [](auto& in) {
         return call_op("strata::adam_step", in,
                        {{"decay_mode", int64_t{0}}, {"weight_decay", 0.0}, {"decay", 1.0}, {"beta1", 0.9},
                         {"beta2", 0.999}, {"step_size", 0.01}, {"inv_sqrt_bias2", 1.0}, {"eps", 1e-8},
                         {"first", int64_t{0}}});
       }},
      {"real", {complexes({2, 3})}, one([](auto& in) { return real(in[0]); }), false, has_complex},
      {"imag", {complexes({2, 3})}, one([](auto& in) { return imag(in[0]); }), false, has_complex},
      {"conj", {complexes({2, 3})}, one([](auto& in) { return real(conj(in[0]) * in[0]); }), false, has_complex},
      {"angle", {complexes({2, 3})}, one([](auto& in) { return angle(in[0]); }), false, has_complex},
      {"complex", {uniform({2, 3}), uniform({1, 3})}, one([](auto& in) { return abs(complex(in[0], in[1])); }), true,
       has_complex},
      {"polar", {uniform({2, 3}, 0.5, 1.5), uniform({1, 3})}, one([](auto& in) { return real(polar(in[0], in[1])); }),
       true, has_complex},
      {"checkpoint", {uniform({2, 3})}, one([](auto& in) {
         return checkpoint([](const Tensor& x) { return sin(x) * x; }, in[0]);
       }), true},
  };
  // Random draws under vmap are covered by Vmap.RandomnessErrorSameDifferent
  // (their cases above run no draw); the custom functions by the tests below.
  cases.push_back({"custom_function",
                   {uniform({2, 3})},
                   one([](auto& in) {
                     const CustomFunction& f = custom_sin();
                     return f(in[0]) * in[0];
                   }),
                   true});
  cases.push_back({"custom_function_first_order", {uniform({2, 3})}, one([](auto& in) {
                     static const CustomFunction f =
                         custom_vjp([](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0] * x[0]}; },
                                    [](const std::vector<Tensor>& x) {
                                      return std::pair{std::vector<Tensor>{x[0] * x[0]}, std::vector<Tensor>{x[0]}};
                                    },
                                    [](const std::vector<Tensor>& r, const std::vector<Tensor>& g) {
                                      return std::vector<Tensor>{g[0] * 2.0 * r[0]};
                                    },
                                    {.name = "vmap_test_square", .first_order_only = true});
                     return f(in[0]);
                   })});
  // A custom function inside an inner vmap differentiated from outside it
  // (grad of vmap): recorded for the outer level as its twin on the lanes.
  cases.push_back({"batched_function",
                   {uniform({2, 3})},
                   one([](auto& in) {
                     auto rows = [](const Tensor& z) {
                       return sum(vmap([](const Tensor& r) { return custom_sin()(r) * r; })(z));
                     };
                     return grad(rows)(in[0]);
                   }),
                   true});
  std::set<std::string> written;
  for (const Case& c : cases) written.insert(c.op);
  add_registry_cases(cases, written);
  return cases;
}

/// `args` lane `b` of each mapped input (in_dims[k] set), the others whole.
std::vector<Tensor> lane(const std::vector<Tensor>& args, const std::vector<std::optional<int64_t>>& dims, int64_t b) {
  std::vector<Tensor> out;
  for (size_t k = 0; k < args.size(); ++k) out.push_back(dims[k] ? args[k].select(*dims[k], b) : args[k]);
  return out;
}

/// fn lane by lane, each output stacked along dim 0.
std::vector<Tensor> loop(const TensorsFn& fn, const std::vector<Tensor>& args,
                         const std::vector<std::optional<int64_t>>& dims) {
  std::vector<std::vector<Tensor>> parts;
  for (int64_t b = 0; b < kLanes; ++b) {
    std::vector<Tensor> outs = fn(lane(args, dims, b));
    parts.resize(outs.size());
    for (size_t k = 0; k < outs.size(); ++k) parts[k].push_back(outs[k]);
  }
  std::vector<Tensor> out;
  for (auto& p : parts) out.push_back(stack(p, 0));
  return out;
}

void expect_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].sizes(), want[k].sizes()) << what << ", output " << k;
    ASSERT_EQ(got[k].dtype(), want[k].dtype()) << what << ", output " << k;
    Tensor a = is_complex(got[k].dtype()) ? abs(got[k] - want[k]) : got[k];
    Tensor b = is_complex(got[k].dtype()) ? zeros_like(a) : want[k];
    std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(x[i], y[i], strata_test::bound_in(got[k].dtype(), 1e-10, y[i]))
          << what << ", output " << k << ", element " << i;
    }
  }
}

/// The derivatives of a case's first output, in one lane: the gradient of
/// sum(sin(out)) wrt input 0, its own gradient (second order, through a
/// nested transform) and the jvp along ones.
TensorsFn derivatives_of(const TensorsFn& fn) {
  return [fn](const std::vector<Tensor>& in) {
    auto scalar = [fn, in](const Tensor& x) {
      std::vector<Tensor> args = in;
      args[0] = x;
      return sum(sin(cast(fn(args)[0], x.dtype())));
    };
    Tensor g1 = grad(scalar)(in[0]);
    Tensor g2 = grad([&](const Tensor& x) { return sum(grad(scalar)(x) * grad(scalar)(x)); })(in[0]);
    Tensor t = jvp(scalar, in[0], ones_like(in[0])).second;
    return std::vector<Tensor>{g1, g2, t};
  };
}

std::string pattern_name(const std::vector<std::optional<int64_t>>& dims) {
  std::string s = "in_dims (";
  for (size_t k = 0; k < dims.size(); ++k) s += (k ? ", " : "") + (dims[k] ? std::to_string(*dims[k]) : "none");
  return s + ")";
}

}  // namespace

TEST(VmapOps, EveryCoreOpHasACaseAndARule) {
  std::set<std::string> covered;
  for (const Case& c : all_cases()) covered.insert(c.op);
  std::vector<std::string> missing, looping;
  for (const OpInfo& op : runtime().ops()) {
    if (!op.plugin.empty()) continue;
    const std::string bare = op.name.substr(op.name.find("::") + 2);
    if (!covered.contains(bare)) missing.push_back(bare);
    if (op.batching == "loop" || op.batching.empty()) looping.push_back(bare + " (" + op.batching + ")");
  }
  EXPECT_TRUE(missing.empty()) << "core ops without a vmap case: " << ::testing::PrintToString(missing);
  EXPECT_TRUE(looping.empty()) << "core ops without a batching rule: " << ::testing::PrintToString(looping);
}

TEST(VmapOps, EveryOpEqualsTheLoopForEveryMapping) {
  reset_vmap_fallback_stats();
  int ran = 0;
  for (const Case& c : all_cases()) {
    if (!c.available) continue;
    SCOPED_TRACE(c.op);
    const size_t n = c.inputs.size();
    // Each operand mapped alone, then all of them; all of them once more with the batch dim last.
    std::vector<std::vector<std::optional<int64_t>>> patterns;
    for (size_t k = 0; k < n && n > 1; ++k) {
      std::vector<std::optional<int64_t>> p(n, std::nullopt);
      p[k] = 0;
      patterns.push_back(p);
    }
    patterns.push_back(std::vector<std::optional<int64_t>>(n, 0));
    patterns.push_back(std::vector<std::optional<int64_t>>(n, -1));
    for (const auto& dims : patterns) {
      std::vector<Tensor> args;
      for (size_t k = 0; k < n; ++k) {
        if (!dims[k]) {
          args.push_back(c.inputs[k](7 + k));
          continue;
        }
        std::vector<Tensor> lanes;
        for (int64_t b = 0; b < kLanes; ++b) lanes.push_back(c.inputs[k](100 * (k + 1) + static_cast<uint64_t>(b)));
        args.push_back(stack(lanes, *dims[k] < 0 ? lanes[0].dim() : 0));
      }
      std::vector<std::optional<int64_t>> in_dims = dims;
      for (size_t k = 0; k < n; ++k) {
        if (dims[k] && *dims[k] < 0) in_dims[k] = args[k].dim() - 1;
      }
      const std::string what = c.op + ", " + pattern_name(dims);
      try {
        // Outputs that no mapped operand reaches (an optimizer's moments when
        // only the parameter is mapped) are repeated, as the loop stacks them.
        const VmapOptions options{.expand_unbatched_outputs = true};
        expect_same(vmap(c.fn, in_dims, {}, options)(args), loop(c.fn, args, in_dims), what);
        if (c.differentiable && in_dims[0]) {
          expect_same(vmap(derivatives_of(c.fn), in_dims, {}, options)(args), loop(derivatives_of(c.fn), args, in_dims),
                      what + ", derivatives");
        }
      } catch (const Error& e) {
        ADD_FAILURE() << what << ": " << e.what();
      }
      ++ran;
    }
  }
  EXPECT_GT(ran, 100);
  EXPECT_TRUE(vmap_fallback_stats().empty()) << "a core op ran lane by lane: " << vmap_fallback_stats().front().op
                                             << " (" << vmap_fallback_stats().front().reason << ")";
}
