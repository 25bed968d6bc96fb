// functional_optim_test.cpp — the functional optimizers (nn/functional_optim.hpp):
// the same updates as the stateful nn::SGD / nn::Adam / nn::AdamW to the last
// bit over several steps; purity (arguments keep their values, versions and
// storage); gradients through 1, 2 and 3 update steps against finite
// differences in f64; MAML: the second-order meta-gradient of the functional
// API equals the one from a hand-unrolled double backward and the closed
// form (I − αH)·∇L_query(θ'), and first-order MAML's is the query gradient
// at the adapted parameters; errors naming the function, list and index.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <functional>
#include <memory>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "nn_test_util.hpp"
#include "optim_cases.hpp"

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using namespace nn_test;
namespace F = strata::nn::functional;

// --- equality with the stateful optimizers -------------------------------------

constexpr int kSteps = 4;
const Shape kShapes[] = {{3, 5}, {5}, {1}};

/// Parameters of several shapes, and a gradient per step (random, with an
/// exact zero and a negative zero, whose signs an update must keep).
std::vector<Tensor> start_params(DType dtype) {
  std::vector<Tensor> out;
  uint32_t seed = 1;
  for (const Shape& s : kShapes) out.push_back(random_real(s, seed++).to(dtype));
  return out;
}
std::vector<Tensor> grads_of_step(int step, DType dtype) {
  std::vector<Tensor> out;
  uint32_t seed = 100 + 10 * static_cast<uint32_t>(step);
  for (const Shape& s : kShapes) {
    std::vector<double> v = random_values(count(s), seed++, -2.0, 2.0);
    v[0] = 0.0;
    if (v.size() > 1) v[1] = -0.0;
    out.push_back(make_real(v, s).to(dtype));
  }
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.to_bytes() == b.to_bytes(); }

/// The stateful optimizer's per-parameter buffer `name` of parameter i.
Tensor stateful_buffer(const nn::Optimizer& opt, size_t i, const std::string& name) {
  for (const auto& [n, t] : opt.state_dict()) {
    if (n == "param." + std::to_string(i) + "." + name) return t;
  }
  return {};
}

/// The learning rate of step s: changed between steps, as a schedule would.
double lr_of_step(double lr, int s) { return lr * (1.0 + 0.25 * s); }

TEST(FunctionalOptim, SgdEqualsTheStatefulSgdBitForBit) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  for (DType dtype : nn_test::kUpdateDtypes) {
    for (const nn::SGDOptions& o : nn_test::kSgdCases) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " momentum " + std::to_string(o.momentum) + " wd " +
                   std::to_string(o.weight_decay) + " nesterov " + std::to_string(o.nesterov));
      std::vector<Tensor> stateful = start_params(dtype);
      for (Tensor& p : stateful) p.set_requires_grad();
      nn::SGD opt(stateful, o);
      std::vector<Tensor> params = start_params(dtype);
      F::SGDState state = F::sgd_init(params, o);
      for (int s = 0; s < kSteps; ++s) {
        std::vector<Tensor> grads = grads_of_step(s, dtype);
        nn::SGDOptions step_options = o;
        step_options.lr = lr_of_step(o.lr, s);
        opt.set_lr(step_options.lr);
        for (size_t i = 0; i < stateful.size(); ++i) stateful[i].set_grad(grads[i]);
        opt.step();
        F::SGDStepResult r = F::sgd(params, grads, state, step_options);
        params = r.params;
        state = r.state;
        EXPECT_EQ(state.step, s + 1);
        for (size_t i = 0; i < params.size(); ++i) {
          EXPECT_TRUE(same_bits(params[i], stateful[i].detach())) << "step " << s << " params[" << i << "]";
          if (o.momentum != 0.0) {
            EXPECT_TRUE(same_bits(state.momentum_buffers[i], stateful_buffer(opt, i, "momentum_buffer")))
                << "step " << s << " momentum_buffers[" << i << "]";
          }
        }
      }
      EXPECT_EQ(state.momentum_buffers.empty(), o.momentum == 0.0);
    }
  }
}

TEST(FunctionalOptim, AdamAndAdamWEqualTheStatefulOnesBitForBit) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  for (DType dtype : nn_test::kUpdateDtypes) {
    for (bool decoupled : {false, true}) {
      for (const nn::AdamOptions& o : nn_test::kAdamCases) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (decoupled ? " AdamW" : " Adam") + " wd " +
                     std::to_string(o.weight_decay));
        std::vector<Tensor> stateful = start_params(dtype);
        for (Tensor& p : stateful) p.set_requires_grad();
        std::unique_ptr<nn::Adam> opt =
            decoupled ? std::make_unique<nn::AdamW>(stateful, o) : std::make_unique<nn::Adam>(stateful, o);
        std::vector<Tensor> params = start_params(dtype);
        F::AdamState state = F::adam_init(params);
        for (int s = 0; s < kSteps; ++s) {
          std::vector<Tensor> grads = grads_of_step(s, dtype);
          nn::AdamOptions step_options = o;
          step_options.lr = lr_of_step(o.lr, s);
          opt->set_lr(step_options.lr);
          for (size_t i = 0; i < stateful.size(); ++i) stateful[i].set_grad(grads[i]);
          opt->step();
          F::AdamStepResult r = decoupled ? F::adamw(params, grads, state, step_options)
                                          : F::adam(params, grads, state, step_options);
          params = r.params;
          state = r.state;
          EXPECT_EQ(state.step, s + 1);
          for (size_t i = 0; i < params.size(); ++i) {
            EXPECT_TRUE(same_bits(params[i], stateful[i].detach())) << "step " << s << " params[" << i << "]";
            EXPECT_TRUE(same_bits(state.exp_avg[i], stateful_buffer(*opt, i, "exp_avg")))
                << "step " << s << " exp_avg[" << i << "]";
            EXPECT_TRUE(same_bits(state.exp_avg_sq[i], stateful_buffer(*opt, i, "exp_avg_sq")))
                << "step " << s << " exp_avg_sq[" << i << "]";
          }
        }
      }
    }
  }
}

TEST(FunctionalOptim, AdamWDefaultsToTheStatefulAdamWWeightDecay) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  std::vector<Tensor> stateful = start_params(DType::f64);
  for (Tensor& p : stateful) p.set_requires_grad();
  nn::AdamW opt(stateful);
  std::vector<Tensor> grads = grads_of_step(0, DType::f64);
  for (size_t i = 0; i < stateful.size(); ++i) stateful[i].set_grad(grads[i]);
  opt.step();
  std::vector<Tensor> params = start_params(DType::f64);
  F::AdamStepResult r = F::adamw(params, grads, F::adam_init(params));
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(same_bits(r.params[i], stateful[i].detach())) << i;
}

// --- purity ------------------------------------------------------------------

/// Runs `step` on arguments that a tape has saved for backward, and checks
/// that it changed none of them: the same bytes, and a gradient through the
/// saved tensors still works (a version bump would make it an error). Then
/// writes every result and checks the arguments still hold their bytes (no
/// result shares storage with an argument).
void expect_pure(const std::vector<Tensor>& arguments, const std::function<std::vector<Tensor>()>& step) {
  std::vector<std::vector<uint8_t>> before;
  for (const Tensor& t : arguments) before.push_back(t.to_bytes());
  GradientTape tape;
  for (const Tensor& t : arguments) tape.watch(t);
  Tensor saved_all = zeros({});
  for (const Tensor& t : arguments) saved_all = saved_all + sum(t * t);  // mul saves t
  std::vector<Tensor> results = step();
  for (size_t k = 0; k < arguments.size(); ++k) EXPECT_TRUE(arguments[k].to_bytes() == before[k]) << "argument " << k;
  EXPECT_NO_THROW(tape.gradient(saved_all, arguments)) << "an argument was written in place";
  NoGradGuard no_grad;
  for (Tensor& r : results) r.copy_(full(r.sizes(), 7.0, {.dtype = r.dtype(), .device = r.device()}));
  for (size_t k = 0; k < arguments.size(); ++k) {
    EXPECT_TRUE(arguments[k].to_bytes() == before[k]) << "argument " << k << " shares storage with a result";
  }
}

TEST(FunctionalOptim, StepsNeverWriteTheirArguments) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  std::vector<Tensor> params = start_params(DType::f64);
  std::vector<Tensor> grads = grads_of_step(0, DType::f64);
  auto concat = [](std::vector<Tensor> a, const std::vector<Tensor>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  // SGD with momentum, first step without weight decay: the new buffer
  // would be the gradient itself (it is copied).
  const nn::SGDOptions momentum{.lr = 0.1, .momentum = 0.9};
  F::SGDState fresh = F::sgd_init(params, momentum);
  expect_pure(concat(concat(params, grads), fresh.momentum_buffers), [&] {
    F::SGDStepResult r = F::sgd(params, grads, fresh, momentum);
    return concat(r.params, r.state.momentum_buffers);
  });
  // A later step, Nesterov with weight decay.
  const nn::SGDOptions nesterov{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1, .nesterov = true};
  F::SGDState later = F::sgd(params, grads, F::sgd_init(params, nesterov), nesterov).state;
  expect_pure(concat(concat(params, grads), later.momentum_buffers), [&] {
    F::SGDStepResult r = F::sgd(params, grads, later, nesterov);
    return concat(r.params, r.state.momentum_buffers);
  });
  // Plain SGD.
  expect_pure(concat(params, grads), [&] { return F::sgd(params, grads, {}, {.lr = 0.1}).params; });
  // Adam and AdamW, first and second step.
  for (bool decoupled : {false, true}) {
    F::AdamState state = F::adam_init(params);
    for (int s = 0; s < 2; ++s) {
      SCOPED_TRACE(std::string(decoupled ? "AdamW" : "Adam") + " step " + std::to_string(s));
      const nn::AdamOptions o{.lr = 0.01, .weight_decay = 0.1};
      auto run = [&] { return decoupled ? F::adamw(params, grads, state, o) : F::adam(params, grads, state, o); };
      expect_pure(concat(concat(concat(params, grads), state.exp_avg), state.exp_avg_sq), [&] {
        F::AdamStepResult r = run();
        return concat(concat(r.params, r.state.exp_avg), r.state.exp_avg_sq);
      });
      state = run().state;
    }
  }
}

TEST(FunctionalOptim, ResultsCarryGradientHistory) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor p = make_real({1.0, -2.0}, {2}).set_requires_grad();
  Tensor g = make_real({0.5, 0.25}, {2}).set_requires_grad();
  F::SGDStepResult r = F::sgd({p}, {g}, {}, {.lr = 0.1});
  ASSERT_TRUE(r.params[0].requires_grad());
  sum(r.params[0]).backward();
  expect_values(p.grad(), {1.0, 1.0}, 0.0, "d(p - 0.1 g)/dp");
  expect_values(g.grad(), {-0.1, -0.1}, 1e-16, "d(p - 0.1 g)/dg");
}

// --- gradients through update steps against finite differences ---------------

/// A small smooth regression net (tanh, so that finite differences are
/// exact to their truncation error): 2 -> 3 -> 1, its 13 parameters packed in
/// one f64 vector.
struct TinyNet {
  static constexpr int64_t kParams = 3 * 2 + 3 + 1 * 3 + 1;
  Tensor x_support = random_real({6, 2}, 21, -1.5, 1.5), y_support = random_real({6, 1}, 22);
  Tensor x_query = random_real({5, 2}, 23, -1.5, 1.5), y_query = random_real({5, 1}, 24);

  static std::vector<Tensor> unpack(const Tensor& flat) {
    return {flat.slice(0, 0, 6).reshape({3, 2}), flat.slice(0, 6, 9), flat.slice(0, 9, 12).reshape({1, 3}),
            flat.slice(0, 12, 13)};
  }
  static Tensor loss(const std::vector<Tensor>& p, const Tensor& x, const Tensor& y) {
    Tensor h = tanh(nn::functional::linear(x, p[0], p[1]));
    return mean(square(nn::functional::linear(h, p[2], p[3]) - y));
  }
};

/// The support loss's gradient at `params`, differentiable (higher_order).
std::vector<Tensor> inner_gradient(const TinyNet& net, const std::vector<Tensor>& params) {
  GradientTape tape({.higher_order = true});
  for (const Tensor& p : params) tape.watch(p);
  return tape.gradient(TinyNet::loss(params, net.x_support, net.y_support), params);
}

using Stepper = std::function<std::vector<Tensor>(const std::vector<Tensor>& params, const std::vector<Tensor>& grads)>;

TEST(FunctionalOptim, GradientsThroughOneTwoAndThreeStepsMatchFiniteDifferences) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  TinyNet net;
  const Tensor start = random_real({TinyNet::kParams}, 25);
  struct Case {
    std::string name;
    std::function<Stepper()> make;  // a fresh stepper (with its own state) per evaluation
  };
  auto sgd_case = [](nn::SGDOptions o) {
    return [o]() -> Stepper {
      auto state = std::make_shared<F::SGDState>();
      bool initialised = false;
      return [o, state, initialised](const std::vector<Tensor>& p, const std::vector<Tensor>& g) mutable {
        if (!initialised) *state = F::sgd_init(p, o), initialised = true;
        F::SGDStepResult r = F::sgd(p, g, *state, o);
        *state = r.state;
        return r.params;
      };
    };
  };
  auto adam_case = [](nn::AdamOptions o, bool decoupled) {
    return [o, decoupled]() -> Stepper {
      auto state = std::make_shared<F::AdamState>();
      bool initialised = false;
      return [o, decoupled, state, initialised](const std::vector<Tensor>& p, const std::vector<Tensor>& g) mutable {
        if (!initialised) *state = F::adam_init(p), initialised = true;
        F::AdamStepResult r = decoupled ? F::adamw(p, g, *state, o) : F::adam(p, g, *state, o);
        *state = r.state;
        return r.params;
      };
    };
  };
  const Case cases[] = {
      {"sgd", sgd_case({.lr = 0.3})},
      {"sgd momentum dampening wd", sgd_case({.lr = 0.2, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.05})},
      {"sgd nesterov", sgd_case({.lr = 0.2, .momentum = 0.8, .weight_decay = 0.05, .nesterov = true})},
      {"adam", adam_case({.lr = 0.05, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-3, .weight_decay = 0.01}, false)},
      {"adamw", adam_case({.lr = 0.05, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-3, .weight_decay = 0.1}, true)},
  };
  for (const Case& c : cases) {
    for (int steps = 1; steps <= 3; ++steps) {
      SCOPED_TRACE(c.name + ", " + std::to_string(steps) + " steps");
      Fn query_loss_after_steps = [&](const Tensor& flat) {
        std::vector<Tensor> params = TinyNet::unpack(flat);
        Stepper step = c.make();
        for (int k = 0; k < steps; ++k) params = step(params, inner_gradient(net, params));
        return TinyNet::loss(params, net.x_query, net.y_query);
      };
      GradcheckResult r = gradcheck(query_loss_after_steps, start, {.eps = 1e-6, .atol = 1e-8, .rtol = 1e-5});
      EXPECT_TRUE(r.ok) << r.message;
      // The steps matter: the gradient is not the one at the start.
      Tensor after = grad(query_loss_after_steps)(start);
      Tensor before = grad([&](const Tensor& flat) { return TinyNet::loss(TinyNet::unpack(flat), net.x_query,
                                                                          net.y_query); })(start);
      EXPECT_GT(amax(abs(after - before)).item<double>(), 1e-4);
    }
  }
}

// --- MAML ----------------------------------------------------------------------

constexpr double kInnerLr = 0.1;

/// A 1-8-8-1 ReLU regression net in f64 as a Module (what the functional API
/// runs through functional_call), and two regression tasks.
struct MamlSetup {
  nn::Sequential model;
  struct Task {
    Tensor x_support, y_support, x_query, y_query;
  };
  std::vector<Task> tasks;
  MamlSetup() {
    manual_seed(31);
    model.emplace_back<nn::Linear>(1, 8);
    model.emplace_back<nn::ReLU>();
    model.emplace_back<nn::Linear>(8, 8);
    model.emplace_back<nn::ReLU>();
    model.emplace_back<nn::Linear>(8, 1);
    model.to(DType::f64);
    for (uint32_t t = 0; t < 2; ++t) {
      Tensor xs = random_real({10, 1}, 40 + t, -5.0, 5.0), xq = random_real({10, 1}, 50 + t, -5.0, 5.0);
      const double amplitude = 1.0 + t, phase = 0.5 * t;
      auto wave = [&](const Tensor& x) { return sin(x + phase) * amplitude; };
      tasks.push_back({xs, wave(xs), xq, wave(xq)});
    }
  }
};

/// The meta-loss of `steps` inner SGD steps per task through the functional
/// API: functional_call + functional::sgd; `second_order` keeps the inner
/// gradients differentiable. Returns the meta-gradient (from backward()).
std::vector<Tensor> functional_meta_gradient(MamlSetup& s, int steps, bool second_order) {
  std::vector<Tensor> theta = s.model.parameters();
  s.model.zero_grad();
  Tensor meta_loss = zeros({}, {.dtype = DType::f64});
  for (const MamlSetup::Task& task : s.tasks) {
    std::vector<Tensor> fast = theta;
    F::SGDState state = F::sgd_init(fast, {.lr = kInnerLr});
    for (int k = 0; k < steps; ++k) {
      GradientTape tape({.higher_order = second_order});
      for (const Tensor& p : fast) tape.watch(p);
      Tensor loss = nn::functional::mse_loss(nn::functional_call(s.model, fast, task.x_support), task.y_support);
      F::SGDStepResult r = F::sgd(fast, tape.gradient(loss, fast), state, {.lr = kInnerLr});
      fast = r.params;
      state = r.state;
    }
    meta_loss = meta_loss + nn::functional::mse_loss(nn::functional_call(s.model, fast, task.x_query), task.y_query);
  }
  meta_loss.backward();
  std::vector<Tensor> out;
  for (const Tensor& p : theta) out.push_back(p.grad());
  return out;
}

/// The same network written out as a function of explicit tensors (no
/// Module, no functional optimizer).
Tensor mlp(const std::vector<Tensor>& w, const Tensor& x) {
  Tensor h = relu(matmul(x, w[0].transpose(0, 1)) + w[1]);
  h = relu(matmul(h, w[2].transpose(0, 1)) + w[3]);
  return matmul(h, w[4].transpose(0, 1)) + w[5];
}
Tensor mse(const Tensor& a, const Tensor& b) { return mean(square(a - b)); }

/// The reference: the inner steps unrolled by hand, each inner gradient
/// taken on its own higher-order tape, θ ← θ − α·g written out, and the
/// meta-gradient taken by an outer tape — a double backward through every
/// step, independent of functional::sgd and functional_call.
std::vector<Tensor> unrolled_meta_gradient(const MamlSetup& s, int steps) {
  std::vector<Tensor> theta;
  for (const Tensor& p : s.model.parameters()) theta.push_back(p.detach().clone());
  GradientTape outer;
  for (const Tensor& p : theta) outer.watch(p);
  Tensor meta_loss = zeros({}, {.dtype = DType::f64});
  for (const MamlSetup::Task& task : s.tasks) {
    std::vector<Tensor> fast = theta;
    for (int k = 0; k < steps; ++k) {
      GradientTape inner({.higher_order = true});
      for (const Tensor& p : fast) inner.watch(p);
      std::vector<Tensor> g = inner.gradient(mse(mlp(fast, task.x_support), task.y_support), fast);
      for (size_t i = 0; i < fast.size(); ++i) fast[i] = fast[i] - kInnerLr * g[i];
    }
    meta_loss = meta_loss + mse(mlp(fast, task.x_query), task.y_query);
  }
  return outer.gradient(meta_loss, theta);
}

/// The largest |a − b| / (1 + |b|) over all elements of all tensors.
double max_relative_difference(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<double> x = a[i].to_vector<double>(), y = b[i].to_vector<double>();
    for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, std::abs(x[k] - y[k]) / (1.0 + std::abs(y[k])));
  }
  return worst;
}

double max_abs(const std::vector<Tensor>& a) {
  double worst = 0.0;
  for (const Tensor& t : a) worst = std::max(worst, amax(abs(t)).item<double>());
  return worst;
}

TEST(FunctionalOptimMaml, SecondOrderMetaGradientEqualsTheUnrolledDoubleBackward) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  MamlSetup s;
  for (int steps : {1, 2, 3}) {
    SCOPED_TRACE(std::to_string(steps) + " inner steps");
    std::vector<Tensor> functional = functional_meta_gradient(s, steps, true);
    std::vector<Tensor> unrolled = unrolled_meta_gradient(s, steps);
    EXPECT_GT(max_abs(unrolled), 1e-3);  // a meta-gradient worth comparing
    EXPECT_LE(max_relative_difference(functional, unrolled), 1e-8);
  }
}

TEST(FunctionalOptimMaml, OneStepMetaGradientEqualsTheClosedForm) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  // One inner step θ' = θ − α∇Ls(θ): dLq(θ')/dθ = (I − α·H_Ls(θ))·∇Lq(θ'),
  // with the Hessian-vector product from forward over reverse mode — a
  // different route through the autograd than the double backward.
  MamlSetup s;
  std::vector<Tensor> theta;
  for (const Tensor& p : s.model.parameters()) theta.push_back(p.detach());
  std::vector<Tensor> flat_parts;
  for (const Tensor& p : theta) flat_parts.push_back(p.reshape({-1}));
  const Tensor theta_flat = cat(flat_parts);
  auto unflatten = [&](const Tensor& flat) {
    std::vector<Tensor> out;
    int64_t at = 0;
    for (const Tensor& p : theta) {
      out.push_back(flat.slice(0, at, at + p.numel()).reshape(p.sizes()));
      at += p.numel();
    }
    return out;
  };
  Tensor closed = zeros_like(theta_flat);
  for (const MamlSetup::Task& task : s.tasks) {
    Fn support = [&](const Tensor& flat) { return mse(mlp(unflatten(flat), task.x_support), task.y_support); };
    Fn query = [&](const Tensor& flat) { return mse(mlp(unflatten(flat), task.x_query), task.y_query); };
    Tensor adapted = theta_flat - kInnerLr * grad(support)(theta_flat);
    Tensor v = grad(query)(adapted);
    closed = closed + v - kInnerLr * hvp(support, theta_flat, v);
  }
  std::vector<Tensor> functional = functional_meta_gradient(s, 1, true);
  std::vector<Tensor> functional_flat_parts;
  for (const Tensor& g : functional) functional_flat_parts.push_back(g.reshape({-1}));
  EXPECT_LE(max_relative_difference({cat(functional_flat_parts)}, {closed}), 1e-8);
}

TEST(FunctionalOptimMaml, FirstOrderMetaGradientIsTheQueryGradientAtTheAdaptedParameters) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  MamlSetup s;
  for (int steps : {1, 3}) {
    SCOPED_TRACE(std::to_string(steps) + " inner steps");
    std::vector<Tensor> first_order = functional_meta_gradient(s, steps, false);
    std::vector<Tensor> second_order = unrolled_meta_gradient(s, steps);
    // FOMAML: the sum over tasks of ∇Lq at θ'_task, the adapted parameters
    // taken as a new leaf (no path back to θ).
    std::vector<Tensor> expected;
    for (const Tensor& p : s.model.parameters()) expected.push_back(zeros_like(p.detach()));
    for (const MamlSetup::Task& task : s.tasks) {
      std::vector<Tensor> fast;
      for (const Tensor& p : s.model.parameters()) fast.push_back(p.detach().clone());
      for (int k = 0; k < steps; ++k) {
        GradientTape tape;
        for (const Tensor& p : fast) tape.watch(p);
        std::vector<Tensor> g = tape.gradient(mse(mlp(fast, task.x_support), task.y_support), fast);
        for (size_t i = 0; i < fast.size(); ++i) fast[i] = (fast[i] - kInnerLr * g[i]).detach();
      }
      GradientTape tape;
      for (const Tensor& p : fast) tape.watch(p);
      std::vector<Tensor> g = tape.gradient(mse(mlp(fast, task.x_query), task.y_query), fast);
      for (size_t i = 0; i < g.size(); ++i) expected[i] = expected[i] + g[i];
    }
    EXPECT_LE(max_relative_difference(first_order, expected), 1e-12);
    // The second-order term −α·H·∇Lq is really there in full MAML.
    EXPECT_GT(max_relative_difference(first_order, second_order), 1e-3);
  }
}

// --- errors ------------------------------------------------------------------

TEST(FunctionalOptim, BadInputNamesTheFunctionTheListAndTheIndex) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  std::vector<Tensor> params = start_params(DType::f64);
  std::vector<Tensor> grads = grads_of_step(0, DType::f64);
  const nn::SGDOptions sgd{.lr = 0.1};
  expect_error<ValueError>([&] { F::sgd(params, {grads[0], grads[1]}, {}, sgd); },
                           {"functional::sgd", "grads has 2 tensors for 3 params"});
  std::vector<Tensor> bad = grads;
  bad[1] = zeros({4}, {.dtype = DType::f64});
  expect_error<ShapeError>([&] { F::sgd(params, bad, {}, sgd); },
                           {"functional::sgd: grads[1]", "expected f64[5]", "like params[1]", "got f64[4]"});
  bad = grads;
  bad[2] = grads[2].to(DType::f32);
  expect_error<DTypeError>([&] { F::adam(params, bad, F::adam_init(params)); },
                           {"functional::adam: grads[2]", "expected f64[1]", "got f32[1]"});
  bad = grads;
  bad[0] = Tensor();
  expect_error<ValueError>([&] { F::adamw(params, bad, F::adam_init(params)); },
                           {"functional::adamw: grads[0] is undefined", "expected f64[3, 5]"});
  expect_error<ValueError>([&] { F::sgd(params, grads, {}, {.lr = -0.1}); },
                           {"functional::sgd: lr must be finite and >= 0, got -0.1"});
  expect_error<ValueError>([&] { F::adam(params, grads, F::adam_init(params), {.lr = -1.0}); },
                           {"functional::adam: lr must be finite and >= 0"});
  expect_error<ValueError>([&] { F::adam(params, grads, F::adam_init(params), {.beta1 = 1.0}); },
                           {"functional::adam: beta1 must be in [0, 1)"});
  expect_error<ValueError>([&] { F::sgd(params, grads, {}, {.lr = 0.1, .dampening = 0.5, .nesterov = true}); },
                           {"functional::sgd: Nesterov momentum needs momentum > 0"});
  // State that does not fit.
  F::AdamState state = F::adam_init(params);
  state.exp_avg_sq[1] = zeros({5, 1}, {.dtype = DType::f64});
  expect_error<ShapeError>([&] { F::adam(params, grads, state); },
                           {"functional::adam: state.exp_avg_sq[1]", "expected f64[5]", "got f64[5, 1]"});
  state = F::adam_init(params);
  state.exp_avg.pop_back();
  expect_error<ValueError>([&] { F::adam(params, grads, state); },
                           {"functional::adam: state.exp_avg has 2 tensors for 3 params"});
  state = F::adam_init(params);
  state.step = -1;
  expect_error<ValueError>([&] { F::adam(params, grads, state); }, {"functional::adam: state.step must be >= 0"});
  const nn::SGDOptions momentum{.lr = 0.1, .momentum = 0.9};
  expect_error<ValueError>([&] { F::sgd(params, grads, {}, momentum); },
                           {"functional::sgd", "no momentum buffers", "sgd_init"});
  expect_error<ValueError>([&] { F::sgd(params, grads, F::sgd_init(params, momentum), sgd); },
                           {"functional::sgd", "momentum is 0 but the state has momentum buffers"});
  // A parameter that cannot have a gradient.
  std::vector<Tensor> ints = {from_data(std::vector<int64_t>{1, 2}, {2}, {.dtype = DType::i64})};
  expect_error<DTypeError>([&] { F::sgd(ints, ints, {}, sgd); }, {"functional::sgd: params[0] must be floating"});
}

TEST(FunctionalOptim, ArgumentsOnAnotherDeviceAreRefused) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  std::vector<Tensor> params = start_params(DType::f32);
  Device here = params[0].device();
  Device other;
  for (const DeviceInfo& info : runtime().devices()) {
    if (!(info.device == here)) other = info.device;
  }
  if (!other.valid()) GTEST_SKIP() << "only one device (" << here.str() << ") is loaded; need a second one";
  std::vector<Tensor> grads = grads_of_step(0, DType::f32);
  grads[1] = grads[1].to(other);
  expect_error<DeviceError>([&] { F::sgd(params, grads, {}, {.lr = 0.1}); },
                            {"functional::sgd: grads[1]", "on " + here.str(), "on " + other.str()});
  F::AdamState state = F::adam_init(params);
  state.exp_avg[0] = state.exp_avg[0].to(other);
  expect_error<DeviceError>([&] { F::adam(params, grads_of_step(0, DType::f32), state); },
                            {"functional::adam: state.exp_avg[0]", "on " + other.str()});
}

TEST(FunctionalOptim, OutOfPlaceUpdateOpsCheckTheirOperands) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor p = make_real({1.0, 2.0}, {2});
  expect_error<ShapeError>([&] { sgd_step(p, make_real({1.0}, {1}), 0.1); },
                           {"sgd_step: grad must be", "f64[2]", "got f64[1]"});
  expect_error<DTypeError>([&] { sgd_momentum_step(p, p, p.to(DType::f32), {.lr = 0.1, .momentum = 0.9}); },
                           {"sgd_momentum_step: buffer must be", "got f32[2]"});
  expect_error<ValueError>([&] { adam_step(p, p, Tensor(), p, {.step_size = 0.1}); },
                           {"adam_step: exp_avg is undefined"});
  // With `first`, the state is not read and may be undefined.
  EXPECT_NO_THROW(adam_step(p, p, Tensor(), Tensor(), {.step_size = 0.1, .first = true}));
  EXPECT_NO_THROW(sgd_momentum_step(p, p, Tensor(), {.lr = 0.1, .momentum = 0.9, .first = true}));
}

}  // namespace

namespace {

// The SGD updates are linear in the gradient, so they take complex
// parameters (docs/complex.md), functional and stateful alike; Adam squares
// the gradient, which is not |g|² for complex values, and refuses them.
TEST(FunctionalSgd, TakesComplexParametersLikeTheStatefulSgd) {
  STRATA_REQUIRE_DTYPES(strata::DType::c128);
  using C = std::complex<double>;
  const std::vector<C> pv{{1.0, 2.0}, {-0.5, 0.25}}, gv{{0.5, -1.0}, {2.0, 0.0}};
  auto complex_tensor = [](const std::vector<C>& v) { return strata::from_data(std::span<const C>(v), {2}); };
  const strata::nn::SGDOptions options{.lr = 0.1, .momentum = 0.9};
  strata::Tensor p = complex_tensor(pv), g = complex_tensor(gv);
  strata::nn::functional::SGDStepResult r =
      strata::nn::functional::sgd({p}, {g}, strata::nn::functional::sgd_init({p}, options), options);
  strata::Tensor stateful = complex_tensor(pv).set_requires_grad();
  stateful.set_grad(complex_tensor(gv));
  strata::nn::SGD opt({stateful}, options);
  opt.step();
  EXPECT_EQ(r.params[0].to_vector<C>(), stateful.detach().to_vector<C>());
  EXPECT_EQ(r.params[0].to_vector<C>()[0], pv[0] - 0.1 * gv[0]);  // first step: the buffer is the gradient
  EXPECT_THROW(strata::nn::functional::adam({p}, {g}, strata::nn::functional::adam_init({p}), {}), strata::DTypeError);
}

}  // namespace
