// The autograd engine: tapes, levels, higher order, forward mode, the
// functional transforms, and the errors the issue lists.
#include <strata/strata.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using strata_test::real_dtype;

Tensor scalar(double v) { return full({}, v, {.dtype = real_dtype()}); }
double value(const Tensor& t) { return t.item<double>(); }

TEST(Tape, GradientOfAPolynomial) {
  Tensor x = scalar(3.0);
  GradientTape tape;
  tape.watch(x);
  Tensor y = x * x * x + x * 2.0;  // 3x^2 + 2 = 29
  EXPECT_REAL_EQ(value(tape.gradient(y, {x})[0]), 29.0);
}

TEST(Tape, BroadcastGradientsAreSummedToTheInputShape) {
  Tensor a = from_data(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = real_dtype()});
  Tensor b = from_data(std::vector<double>{10, 20, 30}, {3}, {.dtype = real_dtype()});
  GradientTape tape;
  tape.watch(a);
  tape.watch(b);
  Tensor y = sum(a * b);
  auto g = tape.gradient(y, {a, b});
  EXPECT_REALS_EQ(g[0].to_vector<double>(), (std::vector<double>{10, 20, 30, 10, 20, 30}));
  EXPECT_REALS_EQ(g[1].to_vector<double>(), (std::vector<double>{5, 7, 9}));
}

TEST(Tape, ViewsAndMatmulGradients) {
  manual_seed(3);
  Tensor w = randn({3, 4}, {.dtype = real_dtype()});
  Tensor x = randn({2, 3}, {.dtype = real_dtype()});
  GradientTape tape;
  tape.watch(w);
  Tensor y = sum(matmul(x, w).transpose(0, 1).slice(0, 1, 3));
  Tensor g = tape.gradient(y, {w})[0];
  // d/dw sum(x @ w[:, 1:3]) = column sums of x in columns 1..2, zero elsewhere
  std::vector<double> xs = x.to_vector<double>();
  std::vector<double> gw = g.to_vector<double>();
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      double expected = (j == 1 || j == 2) ? xs[static_cast<size_t>(i)] + xs[static_cast<size_t>(3 + i)] : 0.0;
      EXPECT_REAL_EQ(gw[static_cast<size_t>(i * 4 + j)], expected);
    }
  }
}

TEST(Tape, AnUndefinedTargetIsNamedByBothOverloads) {
  Tensor x = full({2}, 1.0, {.dtype = real_dtype()});
  for (bool temporary : {false, true}) {
    GradientTape tape;
    tape.watch(x);
    Tensor none;
    try {
      if (temporary) {
        tape.gradient(Tensor(), {x});
      } else {
        tape.gradient(none, {x});
      }
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("GradientTape::gradient: undefined target"), std::string::npos) << e.what();
    }
  }
}

TEST(Tape, NestedTapesGiveSecondOrder) {
  Tensor x = scalar(2.0);
  GradientTape outer;
  outer.watch(x);
  Tensor dy;
  {
    GradientTape inner({.higher_order = true});
    inner.watch(x);
    Tensor y = x * x * x;  // y' = 3x^2 = 12, y'' = 6x = 12
    dy = inner.gradient(y, {x})[0];
  }
  EXPECT_REAL_EQ(value(dy), 12.0);
  EXPECT_REAL_EQ(value(outer.gradient(dy, {x})[0]), 12.0);
}

TEST(Tape, ThirdOrderThroughThreeNestedTapes) {
  Tensor x = scalar(0.5);
  GradientTape t1;
  t1.watch(x);
  GradientTape t2({.higher_order = true});
  t2.watch(x);
  GradientTape t3({.higher_order = true});
  t3.watch(x);
  Tensor y = sin(x);
  Tensor d1 = t3.gradient(y, {x})[0];   // cos
  Tensor d2 = t2.gradient(d1, {x})[0];  // -sin
  Tensor d3 = t1.gradient(d2, {x})[0];  // -cos
  EXPECT_REAL_EQ(value(d1), std::cos(0.5));
  EXPECT_REAL_EQ(value(d2), -std::sin(0.5));
  EXPECT_REAL_EQ(value(d3), -std::cos(0.5));
}

TEST(Tape, WithoutHigherOrderTheGradientIsAConstant) {
  Tensor x = scalar(2.0);
  GradientTape outer;
  outer.watch(x);
  GradientTape inner;
  inner.watch(x);
  Tensor dy = inner.gradient(x * x, {x})[0];
  EXPECT_REAL_EQ(value(outer.gradient(dy, {x})[0]), 0.0);  // unconnected: zeros
}

TEST(Tape, SecondGradientOnNonPersistentTapeIsAnError) {
  Tensor x = scalar(1.0);
  GradientTape tape;
  tape.watch(x);
  Tensor y = x * x;
  tape.gradient(y, {x});
  try {
    tape.gradient(y, {x});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-persistent"), std::string::npos) << e.what();
  }
}

TEST(Tape, PersistentTapeAllowsSeveralGradients) {
  Tensor x = scalar(1.5);
  GradientTape tape({.persistent = true});
  tape.watch(x);
  Tensor y = x * x;
  Tensor z = exp(x);
  EXPECT_REAL_EQ(value(tape.gradient(y, {x})[0]), 3.0);
  EXPECT_REAL_EQ(value(tape.gradient(z, {x})[0]), std::exp(1.5));
}

TEST(Tape, NonScalarTargetNeedsOutputGradients) {
  Tensor x = from_data(std::vector<double>{1, 2}, {2}, {.dtype = real_dtype()});
  GradientTape tape({.persistent = true});
  tape.watch(x);
  Tensor y = x * x;
  EXPECT_THROW(tape.gradient(y, {x}), ShapeError);
  EXPECT_THROW(tape.gradient(y, {x}, ones({3}, {.dtype = real_dtype()})), ShapeError);
  Tensor g = tape.gradient(y, {x}, ones({2}, {.dtype = real_dtype()}))[0];
  EXPECT_REALS_EQ(g.to_vector<double>(), (std::vector<double>{2, 4}));
}

TEST(Tape, UnconnectedSourcesAreZerosOrAnError) {
  Tensor x = scalar(1.0);
  Tensor unrelated = scalar(5.0);
  {
    GradientTape tape;
    tape.watch(x);
    tape.watch(unrelated);
    EXPECT_REAL_EQ(value(tape.gradient(x * x, {unrelated})[0]), 0.0);
  }
  GradientTape strict({.unconnected = Unconnected::error});
  strict.watch(x);
  strict.watch(unrelated);
  EXPECT_THROW(strict.gradient(x * x, {unrelated}), Error);
}

TEST(Tape, Jacobian) {
  Tensor x = from_data(std::vector<double>{1, 2, 3}, {3}, {.dtype = real_dtype()});
  GradientTape tape({.persistent = true});
  tape.watch(x);
  Tensor y = x * x;
  Tensor j = tape.jacobian(y, x);
  EXPECT_EQ(j.sizes(), (Shape{3, 3}));
  EXPECT_REALS_EQ(j.to_vector<double>(), (std::vector<double>{2, 0, 0, 0, 4, 0, 0, 0, 6}));
}

TEST(Backward, AccumulatesIntoLeaves) {
  Tensor w = full({2}, 3.0, {.dtype = real_dtype(), .requires_grad = true});
  Tensor loss = sum(w * w);
  loss.backward();
  EXPECT_REALS_EQ(w.grad().to_vector<double>(), (std::vector<double>{6, 6}));
  sum(w * w).backward();
  EXPECT_REALS_EQ(w.grad().to_vector<double>(), (std::vector<double>{12, 12}));
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST(Backward, RequiresGradWatchedByTapesToo) {
  Tensor w = full({}, 2.0, {.dtype = real_dtype(), .requires_grad = true});
  GradientTape tape;
  EXPECT_REAL_EQ(value(tape.gradient(w * w * w, {w})[0]), 12.0);
}

TEST(Backward, SecondBackwardThroughFreedGraphIsAnError) {
  Tensor w = full({}, 2.0, {.dtype = real_dtype(), .requires_grad = true});
  Tensor y = w * w;
  y.backward();
  EXPECT_THROW(y.backward(), Error);
  Tensor z = w * w;
  z.backward({}, {.retain_graph = true});
  EXPECT_NO_THROW(z.backward());
}

TEST(Backward, IntegerTensorsCannotRequireGrad) {
  Tensor i = zeros({2}, {.dtype = i64});
  EXPECT_THROW(i.set_requires_grad(true), DTypeError);
}

TEST(Backward, InPlaceChangeOfASavedTensorIsAnError) {
  Tensor w = full({2}, 2.0, {.dtype = real_dtype(), .requires_grad = true});
  Tensor a = w * 1.0;
  Tensor y = sum(a * a);  // saves a
  a.copy_(zeros({2}, {.dtype = real_dtype()}));
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified in place"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("mul"), std::string::npos) << e.what();
  }
}

TEST(Backward, InPlaceChangeOfAnOperandWhoseValuesAreNotKeptIsAllowed) {
  // add's VJP reads no operand's values (docs/autograd.md, "What a node
  // keeps"): changing a after the add does not change its gradient, as in
  // PyTorch. mul reads both operands, so the same change there is an error
  // (the test above).
  Tensor w = full({2}, 2.0, {.dtype = real_dtype(), .requires_grad = true});
  Tensor a = w * 3.0;
  Tensor y = sum((a + 1.0) * w);  // add keeps a's shape only; mul keeps a + 1 and w
  a.copy_(zeros({2}, {.dtype = real_dtype()}));
  y.backward();
  // dy/dw = (a + 1) + w · da/dw = (3w + 1) + 3w at w = 2, with a + 1 as mul kept it.
  EXPECT_REALS_EQ(w.grad().to_vector<double>(), (std::vector<double>{13.0, 13.0}));
}

// x.copy_(x + w): the copy's node reaches x's old value through the add;
// x's new value gets metadata of its own, so the history is no reference
// cycle (it used to leak every tensor and node of it), and the derivatives
// see the new value: reverse, forward, and the in-place target as an input.
TEST(Backward, AnInPlaceWriteThatReadsItsTargetKeepsNoCycle) {
  const Device dev = full({}, 0.0, {.dtype = real_dtype()}).device();
  auto step = [](const Tensor& w) {
    Tensor acc = w * 3.0;
    acc.copy_(acc + w);    // acc = 4w, its old value read by the write
    acc.copy_(acc + acc);  // 8w, the target both operands of the source
    return sum(acc * acc);
  };
  runtime().empty_cache();
  const uint64_t before = runtime().memory_stats(dev).allocated_bytes;
  {
    GradientTape tape;
    Tensor w = full({64}, 0.5, {.dtype = real_dtype()});
    tape.watch(w);
    Tensor g = tape.gradient(step(w), {w})[0];
    EXPECT_REALS_EQ(g.to_vector<double>(), std::vector<double>(64, 64.0));  // d/dw Σ64w² = 128w
    auto [y, t] = jvp([&](const Tensor& v) { return step(v); }, w, ones_like(w));
    EXPECT_NEAR(value(t), 64 * 64.0, 1e-9);
    // Second order through the writes: 128 per element.
    Tensor h = hvp([&](const Tensor& v) { return step(v); }, w, ones_like(w));
    EXPECT_REALS_EQ(h.to_vector<double>(), std::vector<double>(64, 128.0));
  }
  runtime().empty_cache();
  EXPECT_EQ(runtime().memory_stats(dev).allocated_bytes, before) << "tensors of the history outlived it";
}

TEST(Backward, ABroadcastGradientIsStoredCompact) {
  // mean's and sum's gradients are expanded views of one value; grad() holds
  // its own memory, so writing into it in place writes every element.
  Tensor x = full({4, 3}, 1.0, {.dtype = real_dtype(), .requires_grad = true});
  mean(x).backward();
  Tensor g = x.grad();
  EXPECT_TRUE(g.is_contiguous());
  EXPECT_REALS_EQ(g.to_vector<double>(), std::vector<double>(12, 1.0 / 12.0));
  std::vector<double> ramp(12);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<double>(i);
  g.copy_(from_data(ramp, {4, 3}, {.dtype = real_dtype()}));
  EXPECT_EQ(x.grad().to_vector<double>(), ramp);
}

TEST(Backward, NoGradRecordsNothing) {
  Tensor w = full({}, 2.0, {.dtype = real_dtype(), .requires_grad = true});
  Tensor y;
  {
    NoGradGuard guard;
    y = w * w;
    {
      EnableGradGuard enable;
      EXPECT_TRUE((w * w).requires_grad());
    }
  }
  EXPECT_FALSE(y.requires_grad());
}

TEST(Backward, HooksSeeAndReplaceGradients) {
  Tensor w = full({}, 1.0, {.dtype = real_dtype(), .requires_grad = true});
  double seen = 0;
  w.register_hook([&](const Tensor& g) {
    seen = g.item<double>();
    return g * 10.0;
  });
  (w * 3.0).backward();
  EXPECT_REAL_EQ(seen, 3.0);
  EXPECT_REAL_EQ(value(w.grad()), 30.0);
}

// A tensor hook's replacement must fit the gradient it replaces: a leaf
// hook that changed the shape or dtype would have put a misfit into grad().
// Each is an error naming what changed, and grad() stays as it was.
TEST(Backward, HooksThatChangeShapeOrDtypeAreErrors) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);  // an f64 gradient that a hook makes f32
  struct Case {
    const char* what;
    std::function<Tensor(const Tensor&)> hook;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"shape", [](const Tensor& g) { return sum(g); },
       "a tensor hook (register_hook) returned a gradient of shape [] for a gradient of shape [2]"},
      {"dtype", [](const Tensor& g) { return g.to(f32); },
       "a tensor hook (register_hook) returned a gradient of dtype f32 for a gradient of dtype f64"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    for (bool leaf : {true, false}) {
      Tensor w = full({2}, 1.0, {.dtype = real_dtype(), .requires_grad = true});
      Tensor hooked = leaf ? w : w * 2.0;
      hooked.register_hook(c.hook);
      try {
        sum(hooked * 3.0).backward();
        ADD_FAILURE() << "expected an error, " << (leaf ? "leaf" : "non-leaf");
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
      }
      EXPECT_FALSE(w.grad().defined()) << (leaf ? "leaf" : "non-leaf");
    }
  }
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

TEST(NodeHooks, SeeAndReplaceTheGradientsANodeSendsToItsInputs) {
  Tensor a = from_data(std::vector<double>{1, 2}, {2}, {.dtype = real_dtype()}).set_requires_grad();
  Tensor b = from_data(std::vector<double>{3, 4}, {2}, {.dtype = real_dtype()}).set_requires_grad();
  Tensor y = a * b;
  std::vector<double> seen_out;
  size_t seen_inputs = 0;
  y.register_node_hook([&](std::vector<Tensor>& grad_inputs, const std::vector<Tensor>& grad_outputs) {
    seen_out = values(grad_outputs[0]);
    seen_inputs = grad_inputs.size();
    grad_inputs[0] = grad_inputs[0] * 10.0;  // only a's gradient changes
  });
  sum(y * 2.0).backward();
  EXPECT_EQ(seen_out, (std::vector<double>{2, 2}));
  EXPECT_EQ(seen_inputs, 2u);
  EXPECT_EQ(values(a.grad()), (std::vector<double>{60, 80}));
  EXPECT_EQ(values(b.grad()), (std::vector<double>{2, 4}));
}

TEST(NodeHooks, FireOnTapesToo) {
  Tensor x = from_data(std::vector<double>{1, 2}, {2}, {.dtype = real_dtype()});
  GradientTape tape;
  tape.watch(x);
  Tensor y = x * x;
  int calls = 0;
  y.register_node_hook([&](std::vector<Tensor>&, const std::vector<Tensor>&) { ++calls; });
  EXPECT_EQ(values(tape.gradient(sum(y), {x})[0]), (std::vector<double>{2, 4}));
  EXPECT_EQ(calls, 1);
}

TEST(NodeHooks, BadUseIsAClearError) {
  Tensor leaf = full({2}, 1.0, {.dtype = real_dtype(), .requires_grad = true});
  try {
    leaf.register_node_hook([](std::vector<Tensor>&, const std::vector<Tensor>&) {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a leaf"), std::string::npos) << e.what();
  }
  Tensor y = leaf * 3.0;
  y.register_node_hook([](std::vector<Tensor>& grad_inputs, const std::vector<Tensor>&) {
    grad_inputs[0] = zeros({3}, {.dtype = real_dtype()});  // wrong shape
  });
  try {
    sum(y).backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a node hook on op 'mul' gave a gradient of shape [3] for input 0 of shape [2]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(leaf.grad().defined());  // nothing was accumulated
}

TEST(Retention, RetainGradKeepsTheMarkedIntermediatesOnly) {
  Tensor w = from_data(std::vector<double>{1, 2}, {2}, {.dtype = real_dtype()}).set_requires_grad();
  Tensor h = w * w;
  Tensor u = h * 3.0;
  h.retain_grad();
  sum(u).backward({}, {.retain_graph = true});
  EXPECT_EQ(values(h.grad()), (std::vector<double>{3, 3}));
  EXPECT_FALSE(u.grad().defined());
  EXPECT_EQ(values(w.grad()), (std::vector<double>{6, 12}));
  sum(u).backward();  // accumulates, like a leaf
  EXPECT_EQ(values(h.grad()), (std::vector<double>{6, 6}));
}

TEST(Retention, KeepRetainsEveryIntermediateAndDiscardNone) {
  Tensor w = from_data(std::vector<double>{1, 2}, {2}, {.dtype = real_dtype()}).set_requires_grad();
  Tensor h = w * w;
  Tensor u = h * 3.0;
  Tensor y = sum(u);
  y.backward({}, {.retain_graph = true, .retention = GradRetention::keep});
  EXPECT_EQ(values(u.grad()), (std::vector<double>{1, 1}));
  EXPECT_EQ(values(h.grad()), (std::vector<double>{3, 3}));
  EXPECT_REAL_EQ(value(y.grad()), 1.0);

  Tensor h2 = w * w;
  h2.retain_grad();
  sum(h2).backward({}, {.retention = GradRetention::discard});
  EXPECT_FALSE(h2.grad().defined());
}

TEST(Retention, RetainGradNeedsGradientHistory) {
  Tensor plain = full({2}, 1.0, {.dtype = real_dtype()});
  try {
    (plain * 2.0).retain_grad();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string expected =
        "retain_grad: the tensor (" + std::string(dtype_name(real_dtype())) + "[2]) has no gradient history";
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
        << e.what();
  }
  Tensor leaf = full({2}, 1.0, {.dtype = real_dtype(), .requires_grad = true});
  EXPECT_NO_THROW(leaf.retain_grad());
}

TEST(Retention, TapesKeepTheirIntermediatesApartFromGrad) {
  Tensor x = from_data(std::vector<double>{0.5, 1.0}, {2}, {.dtype = real_dtype()});
  for (GradRetention policy : {GradRetention::discard, GradRetention::selective, GradRetention::keep}) {
    GradientTape tape({.retention = policy});
    tape.watch(x);
    Tensor a = sin(x);
    Tensor b = a * a;
    tape.retain(a);
    Tensor dx = tape.gradient(sum(b), {x})[0];
    Tensor da = tape.retained_gradient(a);
    Tensor db = tape.retained_gradient(b);
    EXPECT_EQ(da.defined(), policy != GradRetention::discard);
    EXPECT_EQ(db.defined(), policy == GradRetention::keep);
    if (da.defined()) {
      std::vector<double> want{2 * std::sin(0.5), 2 * std::sin(1.0)};
      EXPECT_REAL_EQ(values(da)[0], want[0]);
      EXPECT_REAL_EQ(values(da)[1], want[1]);
    }
    if (db.defined()) {
      EXPECT_EQ(values(db), (std::vector<double>{1, 1}));
    }
    EXPECT_FALSE(a.grad().defined());  // a tape's gradients never land in grad()
    EXPECT_FALSE(tape.retained_gradient(x).defined());
  }
}

TEST(Retention, ATapeRetainsOnlyWhatItRecorded) {
  Tensor x = full({2}, 1.0, {.dtype = real_dtype()});
  Tensor before = x * 2.0;
  GradientTape tape;
  tape.watch(x);
  try {
    tape.retain(before);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not the result of an op this tape recorded"), std::string::npos)
        << e.what();
  }
  Tensor after = x * 2.0;
  EXPECT_NO_THROW(tape.retain(after));
}

// A hook that runs a backward of its own over nodes the outer pass is still
// walking: both passes keep separate scratch for the shared node.
TEST(Backward, ABackwardInsideAHookSharesNodesWithTheOuterPass) {
  Tensor w = full({}, 1.5, {.dtype = real_dtype(), .requires_grad = true});
  Tensor y = w * w;  // the node both passes run
  Tensor z = y * 3.0;
  int calls = 0;
  y.register_hook([&](const Tensor& g) {
    EnableGradGuard enable;  // a pass without create_graph runs hooks with recording off
    if (calls++ == 0) (y * 2.0).backward({}, {.retain_graph = true});  // adds 2 * 2w
    return g;
  });
  z.backward({}, {.retain_graph = true});  // adds 3 * 2w
  EXPECT_REAL_EQ(value(w.grad()), 10 * 1.5);
  w.zero_grad();
  z.backward({}, {.retain_graph = true});  // the node's scratch was handed back: a plain pass again
  EXPECT_REAL_EQ(value(w.grad()), 6 * 1.5);
}

TEST(Backward, AHookThatFreesItsNodeGivesAnErrorNotACrash) {
  Tensor w = full({}, 1.5, {.dtype = real_dtype(), .requires_grad = true});
  Tensor y = w * w;
  Tensor z = y * 3.0;
  bool inner = false;
  y.register_hook([&](const Tensor& g) {
    EnableGradGuard enable;
    if (!std::exchange(inner, true)) (y * 2.0).backward();  // frees y's node before the outer pass runs it
    return g;
  });
  try {
    z.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already freed (op 'mul')"), std::string::npos) << e.what();
  }
}

TEST(ForwardMode, JvpOfAFunction) {
  Tensor x = from_data(std::vector<double>{0.1, 0.2}, {2}, {.dtype = real_dtype()});
  Tensor v = from_data(std::vector<double>{1.0, -2.0}, {2}, {.dtype = real_dtype()});
  auto [y, t] = jvp([](const Tensor& a) { return sin(a) * a; }, x, v);
  for (int i = 0; i < 2; ++i) {
    double xi = i == 0 ? 0.1 : 0.2;
    double vi = i == 0 ? 1.0 : -2.0;
    EXPECT_REAL_EQ(t.to_vector<double>()[static_cast<size_t>(i)], (std::cos(xi) * xi + std::sin(xi)) * vi);
  }
}

// D(x ↦ x · D(y ↦ x + y)(1))(1) = 1, not 2.
TEST(PerturbationConfusion, ForwardOverForward) {
  Tensor one = scalar(1.0);
  auto outer = [&](const Tensor& x) {
    Tensor inner = jvp([&](const Tensor& y) { return x + y; }, one, one).second;
    return x * inner;
  };
  EXPECT_REAL_EQ(value(jvp(outer, one, one).second), 1.0);
}

TEST(PerturbationConfusion, ReverseOverReverse) {
  Tensor one = scalar(1.0);
  auto outer = [&](const Tensor& x) { return x * grad([&](const Tensor& y) { return x + y; })(one); };
  EXPECT_REAL_EQ(value(grad(outer)(one)), 1.0);
}

TEST(PerturbationConfusion, Mixed) {
  Tensor one = scalar(1.0);
  auto rev_inner = [&](const Tensor& x) { return x * grad([&](const Tensor& y) { return x + y; })(one); };
  EXPECT_REAL_EQ(value(jvp(rev_inner, one, one).second), 1.0);
  auto fwd_inner = [&](const Tensor& x) { return x * jvp([&](const Tensor& y) { return x + y; }, one, one).second; };
  EXPECT_REAL_EQ(value(grad(fwd_inner)(one)), 1.0);
}

TEST(Transforms, NthDerivativesClosedForms) {
  Tensor x = scalar(0.7);
  auto pow5 = [](const Tensor& a) { return a * a * a * a * a; };
  double xv = 0.7;
  EXPECT_REAL_EQ(value(nth_grad(pow5, 1)(x)), 5 * std::pow(xv, 4));
  EXPECT_REAL_EQ(value(nth_grad(pow5, 2)(x)), 20 * std::pow(xv, 3));
  EXPECT_REAL_EQ(value(nth_grad(pow5, 3)(x)), 60 * xv * xv);
  EXPECT_REAL_EQ(value(nth_grad(pow5, 4)(x)), 120 * xv);
  for (int n = 1; n <= 4; ++n) {
    EXPECT_REAL_NEAR(value(nth_grad([](const Tensor& a) { return exp(a); }, n)(x)), std::exp(xv), 1e-10) << n;
  }
  double expected_sin[] = {std::cos(xv), -std::sin(xv), -std::cos(xv), std::sin(xv)};
  double expected_log[] = {1 / xv, -1 / (xv * xv), 2 / std::pow(xv, 3), -6 / std::pow(xv, 4)};
  for (int n = 1; n <= 4; ++n) {
    EXPECT_REAL_NEAR(value(nth_grad([](const Tensor& a) { return sin(a); }, n)(x)), expected_sin[n - 1], 1e-10) << n;
    EXPECT_REAL_NEAR(value(nth_grad([](const Tensor& a) { return log(a); }, n)(x)), expected_log[n - 1], 1e-9) << n;
  }
}

Tensor rosenbrock(const Tensor& v) {
  Tensor x = v.slice(0, 0, 1);
  Tensor y = v.slice(0, 1, 2);
  return sum((1.0 - x) * (1.0 - x) + 100.0 * (y - x * x) * (y - x * x));
}

TEST(Transforms, RosenbrockHessianMatchesItsClosedForm) {
  double x = 0.3, y = -0.4;
  Tensor v = from_data(std::vector<double>{x, y}, {2}, {.dtype = real_dtype()});
  Tensor h = hessian(rosenbrock, v);
  std::vector<double> expected{2 - 400 * (y - 3 * x * x), -400 * x, -400 * x, 200};
  std::vector<double> got = h.to_vector<double>();
  for (size_t i = 0; i < 4; ++i) EXPECT_REAL_NEAR(got[i], expected[i], 1e-9) << i;
}

TEST(Transforms, HvpEqualsHessianTimesVectorInBothModes) {
  Tensor x = from_data(std::vector<double>{0.3, -0.4}, {2}, {.dtype = real_dtype()});
  Tensor v = from_data(std::vector<double>{0.5, 2.0}, {2}, {.dtype = real_dtype()});
  Tensor hv = matmul(hessian(rosenbrock, x), v);
  for (HvpMode mode : {HvpMode::forward_over_reverse, HvpMode::reverse_over_reverse}) {
    std::vector<double> got = hvp(rosenbrock, x, v, mode).to_vector<double>();
    std::vector<double> want = hv.to_vector<double>();
    for (size_t i = 0; i < 2; ++i) EXPECT_REAL_NEAR(got[i], want[i], 1e-9);
  }
  EXPECT_REAL_NEAR(value(vhv(rosenbrock, x, v)), value(sum(v * hv)), 1e-9);
}

TEST(Transforms, JacfwdEqualsJacrevAndLaplacianIsTraceOfHessian) {
  manual_seed(11);
  Tensor x = randn({3}, {.dtype = real_dtype()});
  auto f = [](const Tensor& a) { return tanh(a) * sum(a * a); };
  Tensor jf = jacfwd(f, x);
  Tensor jr = jacrev(f, x);
  std::vector<double> a = jf.to_vector<double>(), b = jr.to_vector<double>();
  ASSERT_EQ(a.size(), 9u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_REAL_EQ(a[i], b[i]);
  auto g = [](const Tensor& a2) { return sum(exp(a2) * sin(a2)); };
  Tensor h = hessian(g, x);
  double trace = 0;
  std::vector<double> hv = h.to_vector<double>();
  for (int i = 0; i < 3; ++i) trace += hv[static_cast<size_t>(i * 4)];
  EXPECT_REAL_EQ(value(laplacian(g, x)), trace);
}

TEST(Transforms, GradcheckReportsTheWorstElement) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  manual_seed(5);
  Tensor x = randn({4}, {.dtype = f64});
  GradcheckResult ok = gradcheck([](const Tensor& a) { return sum(tanh(a) * exp(a)); }, x);
  EXPECT_TRUE(ok.ok) << ok.message;
  GradcheckResult four = gradcheck([](const Tensor& a) { return sum(sigmoid(a)); }, x, {.four_point = true});
  EXPECT_TRUE(four.ok) << four.message;
}

TEST(Threads, IndependentTapesGiveTheSameResults) {
  auto work = [](double seed) {
    Tensor x = full({8}, seed, {.dtype = real_dtype()});
    double total = 0;
    for (int i = 0; i < 50; ++i) {
      GradientTape tape;
      tape.watch(x);
      Tensor y = sum(sin(x) * x);
      total += sum(tape.gradient(y, {x})[0]).item<double>();
    }
    return total;
  };
  std::vector<double> single;
  for (int t = 0; t < 8; ++t) single.push_back(work(0.1 * t));
  std::vector<double> multi(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&, t] { multi[static_cast<size_t>(t)] = work(0.1 * t); });
  for (auto& th : threads) th.join();
  EXPECT_EQ(single, multi);
}

// Several threads run backward(retain_graph) over one shared graph: their
// passes claim the shared nodes in turn (or look them up apart) and
// accumulate into the same leaf without losing an addition.
TEST(Threads, BackwardOverASharedGraphAccumulatesEveryPass) {
  Tensor w = from_data(std::vector<double>{1, 2, 3}, {3}, {.dtype = real_dtype()}).set_requires_grad();
  Tensor shared = tanh(w) * w;  // nodes every thread's pass walks
  constexpr int kThreads = 4, kPasses = 400;
  std::vector<Tensor> tops;
  for (int t = 0; t < kThreads; ++t) tops.push_back(sum(shared * static_cast<double>(t + 1)));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPasses; ++i) tops[static_cast<size_t>(t)].backward({}, {.retain_graph = true});
    });
  }
  for (auto& th : threads) th.join();
  // d/dw (tanh(w) w) = tanh(w) + w (1 - tanh(w)^2); the weights sum to 1+2+3+4.
  std::vector<double> got = values(w.grad());
  for (size_t k = 0; k < got.size(); ++k) {
    double x = static_cast<double>(k + 1);
    double d = std::tanh(x) + x * (1 - std::tanh(x) * std::tanh(x));
    // In f32, 1600 additions of one size may each round by half an ulp.
    const double rel = real_dtype() == DType::f64 ? 1e-9 : 2e-4;
    EXPECT_NEAR(got[k], d * 10 * kPasses, rel * d * 10 * kPasses) << k;
  }
}

TEST(Anomaly, NamesTheOpWhoseBackwardMadeANaN) {
  set_anomaly_mode(true);
  Tensor x = full({}, 0.0, {.dtype = real_dtype(), .requires_grad = true});
  Tensor y = sqrt(x);  // d/dx sqrt(0) = inf
  try {
    y.backward();
    set_anomaly_mode(false);
    FAIL() << "expected an anomaly error";
  } catch (const Error& e) {
    set_anomaly_mode(false);
    // The forward op the failing backward belongs to, and the op inside it.
    EXPECT_NE(std::string(e.what()).find("backward of op 'sqrt'"), std::string::npos) << e.what();
  }
}

TEST(Anomaly, NamesTheForwardOpThatFirstMadeANaN) {
  set_anomaly_mode(true);
  Tensor x = full({2}, -1.0, {.dtype = real_dtype(), .requires_grad = true});
  Tensor y = exp(x);  // finite: no error
  try {
    Tensor z = log(x) * y;  // log(-1) is the first NaN
    set_anomaly_mode(false);
    FAIL() << "expected an anomaly error";
  } catch (const Error& e) {
    set_anomaly_mode(false);
    std::string what = e.what();
    EXPECT_NE(what.find("op log(" + std::string(dtype_name(real_dtype())) + "[2])"), std::string::npos) << what;
    EXPECT_NE(what.find("NaN"), std::string::npos) << what;
  }
  Tensor ok = log(x);  // anomaly mode off again: NaN allowed, no error
  EXPECT_TRUE(std::isnan(ok.to_vector<double>()[0]));
}

TEST(Memory, TapeReportsTheBytesItsGraphHolds) {
  Tensor x = full({256}, 0.5, {.dtype = real_dtype()});
  GradientTape tape;
  tape.watch(x);
  EXPECT_EQ(tape.saved_bytes(), 0u);
  const uint64_t bytes = 256u * dtype_size(real_dtype());  // 2 KiB in f64
  Tensor y = exp(x);  // keeps y (its VJP is g·y: x's values are not kept)
  EXPECT_EQ(tape.saved_bytes(), bytes);
  Tensor z = sum(y * y);  // mul keeps both operands (y twice), not the product; sum no values
  const uint64_t held = tape.saved_bytes();
  EXPECT_GE(held, 3u * bytes);
  EXPECT_LT(held, 4u * bytes);  // (0-d views of the sum keep a few bytes)
  {
    GradientTape inner;  // a tape that records nothing holds nothing
    EXPECT_EQ(inner.saved_bytes(), 0u);
  }
  tape.gradient(z, {x});  // non-persistent: the pass frees the saved tensors
  EXPECT_EQ(tape.saved_bytes(), 0u);
}

TEST(Memory, ANodeKeepsOnlyTheValuesItsRuleReads) {
  // mean(y * y): mul keeps y (twice), not the product, and mean keeps only
  // the product's shape, so the product is freed as soon as mean has run;
  // exp keeps its output, not its input.
  Tensor x = full({64, 256}, 0.25, {.dtype = f32, .requires_grad = true});
  const int64_t bytes = 64 * 256 * 4;
  MemoryScope mem(x.device());
  Tensor loss;
  {
    Tensor h = x * 2.0;  // kept by nobody once exp ran: exp reads its output only
    Tensor y = exp(h);
    loss = mean(y * y);
  }
  // Left allocated: y (kept by mul and exp) and the 0-d loss; not h, not y * y.
  EXPECT_GE(mem.current_bytes(), bytes);
  EXPECT_LT(mem.current_bytes(), 2 * bytes);
  EXPECT_LT(mem.peak_bytes(), static_cast<uint64_t>(3 * bytes + 4096));  // h, y and y * y at most
  loss.backward();
  // d/dx mean(exp(2x)^2) = 4 exp(4x) / n.
  const double want = 4.0 * std::exp(1.0) / (64.0 * 256.0);
  for (float v : x.grad().to_vector<float>()) ASSERT_NEAR(v, want, 1e-9);
}

TEST(Memory, ATapeTakingItsTargetFreesItDuringThePass) {
  // z = exp(x) * 2: mul keeps exp's output and the scalar, not z. A target
  // the caller still holds stays allocated through the pass; one handed over
  // (a temporary) goes once its node is seeded, so the pass peaks lower by z.
  Tensor x = full({64, 256}, 0.25, {.dtype = f32});
  Tensor seed = full({64, 256}, 1.0, {.dtype = f32});
  const uint64_t bytes = 64 * 256 * 4;
  auto peak_of_pass = [&](bool hand_over) {
    GradientTape tape;
    tape.watch(x);
    Tensor z = exp(x) * 2.0;
    MemoryScope mem(x.device());
    Tensor g = hand_over ? tape.gradient(std::move(z), {x}, seed)[0] : tape.gradient(z, {x}, seed)[0];
    EXPECT_NEAR(g.to_vector<float>()[0], 2.0 * std::exp(0.25), 1e-5);
    return mem.peak_bytes();
  };
  const uint64_t held = peak_of_pass(false);
  const uint64_t taken = peak_of_pass(true);
  EXPECT_LE(taken + bytes, held) << taken << " vs " << held;
}

/// The message of the ShapeError `f` throws ("" and a test failure otherwise).
template <class F>
std::string shape_error(F&& f) {
  try {
    f();
  } catch (const ShapeError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a ShapeError, got: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected a ShapeError";
  return "";
}

bool names(const std::string& msg, std::initializer_list<const char*> parts) {
  for (const char* p : parts) {
    if (msg.find(p) == std::string::npos) return false;
  }
  return true;
}

// A view of rank 9 on a tensor autograd tracks (requires_grad, or watched by
// a tape) used to overrun the 8 dims of the tensor's geometry and crash in
// record_reverse. It is a ShapeError naming the view and the shape, before
// anything is recorded: the tape and the inputs are unchanged.
TEST(Memory, RankAboveTheMaximumIsAShapeErrorWithGradAndTapes) {
  const char* nine = "[1, 1, 1, 1, 1, 1, 1, 2, 3]";
  const char* limit = "rank 9 exceeds the maximum rank 8";
  Tensor x = full({6}, 2.0, {.dtype = real_dtype(), .requires_grad = true});
  Tensor x8 = full({1, 1, 1, 1, 1, 1, 2, 3}, 2.0, {.dtype = real_dtype(), .requires_grad = true});
  uint64_t implicit = implicit_graph_saved_bytes();
  std::string m = shape_error([&] { x.reshape({1, 1, 1, 1, 1, 1, 1, 2, 3}); });
  EXPECT_TRUE(names(m, {"reshape", limit, nine})) << m;
  m = shape_error([&] { x.reshape({1, 1, 1, 1, 1, 1, 1, -1, 3}); });
  EXPECT_TRUE(names(m, {"reshape", limit, "[1, 1, 1, 1, 1, 1, 1, -1, 3]"})) << m;
  m = shape_error([&] { x8.unsqueeze(-1); });
  EXPECT_TRUE(names(m, {"unsqueeze", limit, "[1, 1, 1, 1, 1, 1, 2, 3, 1]"})) << m;
  m = shape_error([&] { x8.expand({1, 1, 1, 1, 1, 1, 1, 2, 3}); });
  EXPECT_TRUE(names(m, {"expand", limit, nine})) << m;
  m = shape_error([&] { stack({x8, x8}, 0); });
  EXPECT_TRUE(names(m, {"stack", limit})) << m;
  EXPECT_EQ(implicit_graph_saved_bytes(), implicit);
  EXPECT_TRUE(x.is_leaf());
  sum(x * x).backward();
  EXPECT_REALS_EQ(x.grad().to_vector<double>(), std::vector<double>(6, 4.0));

  GradientTape tape;
  Tensor w = full({6}, 3.0, {.dtype = real_dtype()});
  Tensor w8 = full({1, 1, 1, 1, 1, 1, 2, 3}, 3.0, {.dtype = real_dtype()});
  tape.watch(w);
  tape.watch(w8);
  Tensor y = w * w;  // something recorded before the failures
  uint64_t held = tape.saved_bytes();
  m = shape_error([&] { y.reshape({1, 1, 1, 1, 1, 1, 1, 2, 3}); });
  EXPECT_TRUE(names(m, {"reshape", limit, nine})) << m;
  m = shape_error([&] { w.view({1, 1, 1, 1, 1, 1, 1, 2, 3}); });
  EXPECT_TRUE(names(m, {"view", limit, nine})) << m;
  m = shape_error([&] { w8.unsqueeze(3); });
  EXPECT_TRUE(names(m, {"unsqueeze", limit})) << m;
  m = shape_error([&] { w8.expand({1, 1, 1, 1, 1, 1, 1, 2, 3}); });
  EXPECT_TRUE(names(m, {"expand", limit, nine})) << m;
  m = shape_error([&] { w8.expand({int64_t{1} << 62, 1, 1, 1, 1, 1, 1, 2, 3}); });
  EXPECT_TRUE(names(m, {"expand", limit})) << m;
  m = shape_error([&] { w.reshape({(int64_t{1} << 62) + 1, 2, -1}); });  // wraps round to 6 elements
  EXPECT_TRUE(names(m, {"reshape", "[4611686018427387905, 2, -1]", "overflows"})) << m;
  EXPECT_EQ(tape.saved_bytes(), held);
  // The tape still differentiates what it recorded.
  Tensor g = tape.gradient(sum(y * w8.reshape({6})), {w})[0];
  EXPECT_REALS_EQ(g.to_vector<double>(), std::vector<double>(6, 18.0));  // d/dw (w^2 * 3) = 6w
}

TEST(Memory, ImplicitGraphBytesDropWhenTheGraphDies) {
  uint64_t before = implicit_graph_saved_bytes();
  {
    Tensor x = full({128}, 1.0, {.dtype = f32, .requires_grad = true});
    Tensor y = sin(x);
    EXPECT_GE(implicit_graph_saved_bytes(), before + 128u * 4u);
  }
  EXPECT_EQ(implicit_graph_saved_bytes(), before);
}

TEST(Memory, LongChainsAreFreedWithoutRecursion) {
  Tensor x = full({}, 1.0, {.dtype = real_dtype(), .requires_grad = true});
  Tensor y = x;
  // Views record a node each and run no kernel, so the chain costs the same
  // on every device (a multiply per node took 18 s on vulkan:0).
  for (int i = 0; i < 100000; ++i) y = y.reshape({1}).reshape({});
  ASSERT_TRUE(y.requires_grad());
  y = Tensor();  // frees a 200k-node chain: must not overflow the stack
  SUCCEED();
}

}  // namespace

namespace {

TEST(Graph, InspectPruneAndExport) {
  Tensor w = full({2}, 1.0, {.dtype = real_dtype(), .requires_grad = true});
  Tensor a = w * 2.0;
  Tensor unused = exp(w);  // does not reach `loss`: pruned
  Tensor loss = sum(a * a);
  Graph g = recorded_graph({loss});
  std::vector<std::string> ops;
  for (const GraphNode& n : g.nodes) ops.push_back(n.op);
  // sum keeps the reduced dim for its kernel, then a reshape view drops it.
  EXPECT_EQ(ops, (std::vector<std::string>{"mul", "mul", "sum", "reshape"})) << g.to_json();
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "exp"), 0);
  EXPECT_GT(g.saved_bytes, 0u);
  EXPECT_EQ(g.saved_bytes_per_level.at(0), g.saved_bytes);
  EXPECT_NE(g.to_json().find("\"op\": \"sum\""), std::string::npos);
  std::string dot = g.to_dot();
  EXPECT_EQ(dot.rfind("digraph strata {", 0), 0u);
  EXPECT_NE(dot.find("leaf -> n"), std::string::npos) << dot;
  (void)unused;
}

}  // namespace
