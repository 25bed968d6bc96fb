// vmap_test.cpp — the batching transform (docs/vmap.md): vmap equals the
// loop it replaces, alone and nested with tapes, forward mode and itself in
// every order; the batched jacobians and per-sample gradients; random ops
// under each randomness; the loop fallback counted; the errors. Device
// generic: runs on the default device (cpu:0, vulkan:0 in CI).
#include <gtest/gtest.h>

#include <cmath>
#include <strata/native_view.hpp>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "autograd_test_util.hpp"

using namespace strata;
using autograd_test::expect_error;

namespace {

Tensor draw(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  manual_seed(seed);
  return rand(shape, {.dtype = strata_test::real_dtype()}) * (hi - lo) + lo;
}

/// Every element of a within the dtype's tolerance of b (same shape).
void expect_close(const Tensor& a, const Tensor& b, double tol = 1e-10) {
  ASSERT_EQ(a.sizes(), b.sizes());
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(x[i], y[i], strata_test::bound_in(a.dtype(), tol, y[i])) << "element " << i;
  }
}

/// fn applied lane by lane along dim `in_dim` of x, stacked along `out_dim`.
Tensor loop(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x, int64_t in_dim = 0, int64_t out_dim = 0) {
  std::vector<Tensor> parts;
  for (int64_t b = 0; b < x.size(in_dim); ++b) parts.push_back(fn(x.select(in_dim, b)));
  return stack(parts, out_dim);
}

Tensor mlp_loss(const Tensor& w1, const Tensor& w2, const Tensor& x) {
  return sum(tanh(matmul(tanh(matmul(x, w1)), w2)) * tanh(matmul(tanh(matmul(x, w1)), w2)));
}

}  // namespace

TEST(Vmap, EqualsTheLoopForAChainOfOps) {
  auto f = [](const Tensor& x) {
    return sum(exp(sin(x) * 2.0) - x.transpose(0, 1).reshape({-1}).reshape({2, 3}), {1});
  };
  Tensor x = draw({4, 2, 3}, 1);
  expect_close(vmap(f)(x), loop(f, x));
  // Another mapped dim and another place for the batch dim.
  Tensor y = draw({2, 5, 3}, 2);
  expect_close(vmap(f, 1, 1)(y), loop(f, y, 1, 1));
}

TEST(Vmap, MatmulAgainstSharedWeightsIsOneGemmAndEqualsTheLoop) {
  Tensor w = draw({3, 4}, 3);
  auto f = [&](const Tensor& x) { return matmul(x, w); };
  Tensor x = draw({5, 3}, 4);  // vectors
  expect_close(vmap(f)(x), loop(f, x));
  Tensor m = draw({5, 2, 3}, 5);  // matrices
  expect_close(vmap(f)(m), loop(f, m));
  // Batched on the right, and both batched.
  auto g = [&](const Tensor& v) { return matmul(w.transpose(0, 1), v); };
  expect_close(vmap(g)(draw({5, 3, 2}, 6)), loop(g, draw({5, 3, 2}, 6)));
  auto both = vmap([](const std::vector<Tensor>& a) { return std::vector<Tensor>{matmul(a[0], a[1])}; });
  Tensor a = draw({5, 3}, 7), b = draw({5, 3}, 8);
  std::vector<Tensor> dots;
  for (int64_t i = 0; i < 5; ++i) dots.push_back(matmul(a.select(0, i), b.select(0, i)));
  expect_close(both({a, b})[0], stack(dots));
}

TEST(Vmap, PerSampleGradientsOfAnMlpEqualTheLoop) {
  Tensor w1 = draw({6, 5}, 10), w2 = draw({5, 3}, 11), x = draw({8, 6}, 12);
  // vmap(grad): the gradient of each example's loss wrt the shared weights.
  auto per_example = [&](const std::vector<Tensor>& in) {
    GradientTape tape;
    Tensor a = w1.detach(), b = w2.detach();
    tape.watch(a);
    tape.watch(b);
    return tape.gradient(mlp_loss(a, b, in[0]), {a, b});
  };
  std::vector<Tensor> grads = vmap(per_example)({x});
  for (int64_t i = 0; i < x.size(0); ++i) {
    std::vector<Tensor> one = per_example({x.select(0, i)});
    expect_close(grads[0].select(0, i), one[0]);
    expect_close(grads[1].select(0, i), one[1]);
  }
}

TEST(Vmap, GradOfVmapDifferentiatesTheBatch) {
  Tensor x = draw({4, 3}, 20);
  auto f = [](const Tensor& v) { return sum(sin(v) * v); };
  Tensor g = grad([&](const Tensor& z) { return sum(vmap(f)(z)); })(x);
  Tensor expected = grad([&](const Tensor& z) { return sum(loop(f, z)); })(x);
  expect_close(g, expected);
}

TEST(Vmap, VmapOfGradAndSecondOrder) {
  Tensor x = draw({4, 3}, 21);
  auto f = [](const Tensor& v) { return sum(sin(v) * exp(v)); };
  expect_close(vmap(grad(f))(x), loop(grad(f), x));
  expect_close(vmap(grad([&](const Tensor& v) { return sum(grad(f)(v)); }))(x),
               loop(grad([&](const Tensor& v) { return sum(grad(f)(v)); }), x));
  expect_close(vmap(nth_grad([](const Tensor& v) { return sum(tanh(v)); }, 3))(x),
               loop(nth_grad([](const Tensor& v) { return sum(tanh(v)); }, 3), x));
}

TEST(Vmap, JvpOfVmapAndVmapOfJvp) {
  Tensor x = draw({4, 3}, 22), v = draw({4, 3}, 23);
  auto f = [](const Tensor& z) { return sin(z) * z; };
  auto [y1, t1] = jvp(vmap(f), x, v);
  std::vector<Tensor> lanes;
  for (int64_t i = 0; i < 4; ++i) lanes.push_back(jvp(f, x.select(0, i), v.select(0, i)).second);
  expect_close(t1, stack(lanes));
  auto tangent = vmap([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{jvp(f, a[0], a[1]).second}; });
  expect_close(tangent({x, v})[0], stack(lanes));
}

TEST(Vmap, NestedVmapsWithDifferentDims) {
  Tensor x = draw({3, 4, 5}, 30);
  auto f = [](const Tensor& v) { return sum(v * v); };
  // Inner over dim 0 of each [4, 5] lane (rows), outer over x's dim 1.
  // out[i][j] = f(x[i, j, :]): the inner lanes (i) stay at dim 0, the outer (j) go to dim 1.
  Tensor out = vmap(vmap(f, 0, 0), 1, 1)(x);
  ASSERT_EQ(out.sizes(), (Shape{3, 4}));
  expect_close(out, sum(x * x, {2}));
  // The outer lanes first instead.
  expect_close(vmap(vmap(f, 0, 0), 1, 0)(x), sum(x * x, {2}).transpose(0, 1));
}

TEST(Vmap, ClosingOverAnOuterBatchedTensor) {
  Tensor x = draw({3, 4}, 31), y = draw({5, 4}, 32);
  // out[i][j] = sum(x[i] * y[j]): the inner function closes over the outer lane.
  auto outer = vmap([&](const Tensor& xi) { return vmap([&](const Tensor& yj) { return sum(xi * yj); })(y); });
  expect_close(outer(x), matmul(x, y.transpose(0, 1)));
  // Two vmaps over one tensor: a lane of the outer against every lane of the inner.
  Tensor pairs = vmap([&](const Tensor& a) { return vmap([&](const Tensor& b) { return sum(a - b); })(x); })(x);
  expect_close(pairs, sum(x, {1}).unsqueeze(1) - sum(x, {1}).unsqueeze(0));
}

TEST(Vmap, RandomnessErrorSameDifferent) {
  Tensor x = zeros({4, 3}, {.dtype = strata_test::real_dtype()});
  auto noisy = [](const Tensor& v) { return v + rand({3}, {.dtype = v.dtype()}); };
  expect_error([&] { vmap(noisy)(x); }, {"random_uniform", "Randomness::different", "Randomness::same"});
  manual_seed(7);
  Tensor same = vmap(noisy, 0, 0, {.randomness = Randomness::same})(x);
  for (int64_t i = 1; i < 4; ++i) expect_close(same.select(0, i), same.select(0, 0), 0.0);
  manual_seed(7);
  Tensor different = vmap(noisy, 0, 0, {.randomness = Randomness::different})(x);
  manual_seed(7);
  Tensor reference = rand({4, 3}, {.dtype = x.dtype()});  // one draw of the lanes' shape
  expect_close(different, reference, 0.0);
}

TEST(Vmap, InPlaceIntoAnUnbatchedTensorIsAnError) {
  Tensor x = draw({4, 3}, 40);
  Tensor acc = zeros({3}, {.dtype = x.dtype()});
  expect_error(
      [&] {
        vmap([&](const Tensor& v) {
          acc.copy_(v);
          return v;
        })(x);
      },
      {"copy", "in place into an unbatched tensor", "batch_inplace_targets"});
  // Into a batched tensor it works.
  Tensor out = vmap([](const Tensor& v) {
    Tensor t = v * 1.0;
    t.copy_(v * 2.0);
    return t;
  })(x);
  expect_close(out, x * 2.0);
}

// VmapOptions::batch_inplace_targets: a tensor the function made becomes
// batched on its first batched in-place write (values copied into every
// lane first); what it cannot do for is refused, naming why.
TEST(Vmap, BatchInplaceTargetsExpandsATensorTheFunctionMade) {
  Tensor x = draw({4, 3}, 42);
  const VmapOptions expand{.batch_inplace_targets = true};
  // An accumulator made inside, written in place twice, read after.
  auto accumulate = [](const Tensor& v) {
    Tensor acc = full({3}, 1.0, {.dtype = v.dtype()});
    acc.copy_(acc + v);  // the batched write: acc becomes batched (1 in every lane, then 1 + v)
    acc.copy_(acc + v * v);  // then an ordinary batched in-place write
    return acc * 2.0;    // and read like any batched tensor
  };
  Tensor got = vmap(accumulate, 0, 0, expand)(x);
  Tensor want = stack({accumulate(x.select(0, 0)), accumulate(x.select(0, 1)), accumulate(x.select(0, 2)),
                       accumulate(x.select(0, 3))},
                      0);
  expect_close(got, want, 0.0);
  // Differentiable through the write, at a level opened inside and outside.
  Tensor outside = [&] {
    GradientTape tape;
    Tensor w = x.detach();
    tape.watch(w);
    return tape.gradient(sum(vmap(accumulate, 0, 0, expand)(w)), {w})[0];
  }();
  expect_close(outside, (1.0 + 2.0 * x) * 2.0);
  Tensor inside = vmap(
      [&](const Tensor& v) {
        GradientTape tape;
        Tensor w = v * 1.0;
        tape.watch(w);
        return tape.gradient(sum(accumulate(w)), {w})[0];
      },
      0, 0, expand)(x);
  expect_close(inside, (1.0 + 2.0 * x) * 2.0);
  // Refused: a tensor made before the vmap (closed over), a view, a watched target.
  Tensor captured = zeros({3}, {.dtype = x.dtype()});
  expect_error(
      [&] {
        vmap(
            [&](const Tensor& v) {
              captured.copy_(v);
              return v;
            },
            0, 0, expand)(x);
      },
      {"copy", "made before the vmap"});
  expect_close(captured, zeros({3}, {.dtype = x.dtype()}), 0.0);  // untouched
  expect_error(
      [&] {
        vmap(
            [](const Tensor& v) {
              Tensor base = zeros({2, 3}, {.dtype = v.dtype()});
              base.select(0, 1).copy_(v);
              return base;
            },
            0, 0, expand)(x);
      },
      {"copy", "shares its storage", "make the base batched"});
  expect_error(
      [&] {
        vmap(
            [](const Tensor& v) {
              GradientTape tape;
              Tensor t = zeros({3}, {.dtype = v.dtype()});
              tape.watch(t);
              t.copy_(v);
              return t;
            },
            0, 0, expand)(x);
      },
      {"copy", "autograd state"});
}

TEST(Vmap, ReadingValuesInsideIsAnError) {
  Tensor x = draw({4, 3}, 41);
  expect_error(
      [&] {
        vmap([](const Tensor& v) {
          (void)v.to_vector<double>();
          return v;
        })(x);
      },
      {"batched tensor", "4 lanes", "control flow"});
  expect_error(
      [&] {
        vmap([](const Tensor& v) {
          (void)native_view(v);
          return v;
        })(x);
      },
      {"native_view", "batched by vmap", "[4, 3]"});
}

TEST(Vmap, BadArgumentsNameTheArgumentAndSizes) {
  Tensor a = draw({4, 3}, 50), b = draw({5, 3}, 51);
  auto add2 = [](const std::vector<Tensor>& v) { return std::vector<Tensor>{v[0] + v[1]}; };
  expect_error([&] { vmap(add2)({a, b}); }, {"input 0 has 4", "input 1 has 5", "[4, 3]", "[5, 3]"});
  expect_error([&] { vmap(add2, {0, 2})({a, a}); }, {"in_dims[1] = 2", "input 1", "[4, 3]"});
  expect_error([&] { vmap(add2, {0, 0})({a, Tensor()}); }, {"in_dims[1]", "not a tensor"});
  expect_error([&] { vmap([&](const Tensor&) { return b; })(a); }, {"output 0", "no batch dim", "expand_unbatched"});
  Tensor expanded = vmap([&](const Tensor&) { return b; }, 0, 0, {.expand_unbatched_outputs = true})(a);
  ASSERT_EQ(expanded.sizes(), (Shape{4, 5, 3}));
  expect_error([&] { vmap([](const Tensor& v) { return v; }, 0, 3)(a); }, {"out_dims[0] = 3", "[4, 3]"});
}

TEST(Vmap, EscapedBatchedTensorsAreRefused) {
  Tensor kept;
  vmap([&](const Tensor& v) {
    kept = v;
    return v;
  })(draw({4, 3}, 60));
  expect_error([&] { (void)(kept + 1.0); }, {"vmap that has returned"});
}

// Batch 6, and batch 1 (one example: per_sample_grad's direct path, which
// must give the same values, the same derivatives and the same refusals).
TEST(Vmap, PerSampleGradEqualsOneTapePerExample) {
  Tensor w = draw({5, 3}, 70), b = draw({3}, 71), x6 = draw({6, 5}, 72), y6 = draw({6, 3}, 73);
  auto loss = [](const std::vector<Tensor>& p, const std::vector<Tensor>& ex) {
    Tensor d = tanh(matmul(ex[0], p[0]) + p[1]) - ex[1];
    return sum(d * d);
  };
  for (const int64_t n : {6, 1}) {
    SCOPED_TRACE("batch " + std::to_string(n));
    Tensor x = x6.slice(0, 0, n), y = y6.slice(0, 0, n);
    std::vector<Tensor> g = per_sample_grad(loss, {w, b}, {x, y});
    ASSERT_EQ(g.size(), 2u);
    ASSERT_EQ(g[0].sizes(), (Shape{n, 5, 3}));
    ASSERT_EQ(g[1].sizes(), (Shape{n, 3}));
    for (int64_t i = 0; i < n; ++i) {
      GradientTape tape;
      Tensor wi = w.detach(), bi = b.detach();
      tape.watch(wi);
      tape.watch(bi);
      std::vector<Tensor> one = tape.gradient(loss({wi, bi}, {x.select(0, i), y.select(0, i)}), {wi, bi});
      expect_close(g[0].select(0, i), one[0]);
      expect_close(g[1].select(0, i), one[1]);
    }
    // Differentiable in the parameters: the gradient of the per-sample
    // gradients' squared norm (as DP-SGD's clipping would differentiate it).
    auto norms = [&](bool batched) {
      GradientTape outer;
      Tensor wo = w.detach();
      outer.watch(wo);
      Tensor total;
      if (batched) {
        Tensor gw = per_sample_grad(loss, {wo, b}, {x, y})[0];
        total = sum(gw * gw);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          GradientTape tape({.higher_order = true});
          Tensor wi = wo * 1.0;
          tape.watch(wi);
          Tensor gi = tape.gradient(loss({wi, b}, {x.select(0, i), y.select(0, i)}), {wi})[0];
          total = total.defined() ? total + sum(gi * gi) : sum(gi * gi);
        }
      }
      return outer.gradient(total, {wo})[0];
    };
    expect_close(norms(true), norms(false));
    // A random op under the default randomness is refused at any batch size.
    auto noisy = [&](const std::vector<Tensor>& p, const std::vector<Tensor>& ex) {
      return loss(p, ex) + sum(rand({3}));
    };
    expect_error([&] { per_sample_grad(noisy, {w, b}, {x, y}); }, {"rand", "randomness"});
    expect_error([&] { per_sample_grad([](auto&, auto& ex) { return ex[0]; }, {w}, {x}); }, {"must be a scalar"});
  }
  expect_error([&] { per_sample_grad(loss, {w, b}, {x6, draw({4, 3}, 74)}); }, {"input 2 has 6", "input 3 has 4"});
  expect_error([&] { per_sample_grad(loss, {w, b}, {x6.slice(0, 0, 1), y6}); }, {"input 2 has 1", "input 3 has 6"});
}

TEST(Vmap, AnEnsembleOfModulesRunsAsOneBatchedCall) {
  manual_seed(80);
  std::vector<std::shared_ptr<nn::Sequential>> models;
  for (int m = 0; m < 3; ++m) {
    auto s = std::make_shared<nn::Sequential>();
    s->push_back(std::make_shared<nn::Linear>(4, 5));
    s->push_back(std::make_shared<nn::Tanh>());
    s->push_back(std::make_shared<nn::Linear>(5, 2));
    s->to(strata_test::test_device());
    s->to(strata_test::real_dtype());
    models.push_back(s);
  }
  std::vector<Tensor> weights = nn::stack_modules({models[0].get(), models[1].get(), models[2].get()});
  ASSERT_EQ(weights.size(), 4u);
  ASSERT_EQ(weights[0].sizes(), (Shape{3, 5, 4}));
  Tensor x = draw({7, 4}, 81);
  std::vector<std::optional<int64_t>> in_dims(weights.size(), 0);
  in_dims.push_back(std::nullopt);  // every member sees the whole batch
  std::vector<Tensor> args = weights;
  args.push_back(x);
  Tensor out = vmap(
      [&](const std::vector<Tensor>& in) {
        std::vector<Tensor> params(in.begin(), in.end() - 1);
        return std::vector<Tensor>{nn::functional_call(*models[0], params, in.back())};
      },
      in_dims)(args)[0];
  ASSERT_EQ(out.sizes(), (Shape{3, 7, 2}));
  for (int m = 0; m < 3; ++m) expect_close(out.select(0, m), models[static_cast<size_t>(m)]->forward(x));
  nn::Linear other(4, 6);
  expect_error([&] { nn::stack_modules({models[0].get(), &other}); }, {"modules[1]"});
}

// MAML's meta-gradient (grad of vmap over tasks of a second-order inner
// step) equals the loop over tasks: the inner tape is opened inside the
// vmap (one task), the outer backward() differentiates the batch.
TEST(Vmap, MamlMetaGradientOverBatchedTasksEqualsTheLoop) {
  Tensor w = draw({1, 8}, 90), v = draw({8, 1}, 91);
  Tensor xs = draw({5, 6, 1}, 92, -2.0, 2.0), ys = draw({5, 6, 1}, 93);
  auto task_loss = [&](const Tensor& x, const Tensor& y, const Tensor& a, const Tensor& b) {
    Tensor d = matmul(tanh(matmul(x, a)), b) - y;
    return mean(d * d);
  };
  auto adapted_loss = [&](const Tensor& x, const Tensor& y) {
    GradientTape tape({.higher_order = true});
    tape.watch(w);
    tape.watch(v);
    std::vector<Tensor> g = tape.gradient(task_loss(x, y, w, v), {w, v});
    return task_loss(x, y, w - g[0] * 0.1, v - g[1] * 0.1);
  };
  auto meta_gradient = [&](bool batched) {
    GradientTape outer;
    outer.watch(w);
    outer.watch(v);
    Tensor meta;
    if (batched) {
      meta = mean(vmap([&](const std::vector<Tensor>& t) { return std::vector<Tensor>{adapted_loss(t[0], t[1])}; })(
          {xs, ys})[0]);
    } else {
      std::vector<Tensor> losses;
      for (int64_t i = 0; i < xs.size(0); ++i) losses.push_back(adapted_loss(xs.select(0, i), ys.select(0, i)));
      meta = mean(stack(losses));
    }
    return outer.gradient(meta, {w, v});
  };
  std::vector<Tensor> batched = meta_gradient(true), looped = meta_gradient(false);
  expect_close(batched[0], looped[0]);
  expect_close(batched[1], looped[1]);
}

// --- the transforms over lists of tensors ------------------------------------------

// grad, jvp, vjp and hvp over a list of parameters equal the same products
// of the single-tensor transforms over the parameters flattened into one
// vector (whose slices' gradients are pads: one pass each).
TEST(ListTransforms, EqualTheFlatVectorForms) {
  Tensor a = draw({3, 4}, 100), b = draw({4}, 101), x = draw({5, 3}, 102);
  Tensor va = draw({3, 4}, 103), vb = draw({4}, 104);
  auto loss = [&](const std::vector<Tensor>& p) { return sum(tanh(matmul(x, p[0]) + p[1]) * sin(p[1])); };
  auto unflat = [](const Tensor& f) {
    return std::vector<Tensor>{f.slice(0, 0, 12).reshape({3, 4}), f.slice(0, 12, 16)};
  };
  auto flat_loss = [&](const Tensor& f) { return loss(unflat(f)); };
  Tensor flat = cat({a.reshape({-1}), b}, 0), vflat = cat({va.reshape({-1}), vb}, 0);
  std::vector<Tensor> g = grad(loss, {a, b});
  Tensor gf = grad(flat_loss)(flat);
  expect_close(g[0], unflat(gf)[0]);
  expect_close(g[1], unflat(gf)[1]);
  for (HvpMode mode : {HvpMode::forward_over_reverse, HvpMode::reverse_over_reverse}) {
    std::vector<Tensor> h = hvp(loss, {a, b}, {va, vb}, mode);
    Tensor hf = hvp(flat_loss, flat, vflat, mode);
    expect_close(h[0], unflat(hf)[0], 1e-9);
    expect_close(h[1], unflat(hf)[1], 1e-9);
  }
  auto both = [&](const std::vector<Tensor>& p) { return std::vector<Tensor>{loss(p), p[1] * 2.0}; };
  auto [outs, tangents] = jvp(both, {a, b}, {va, vb});
  expect_close(tangents[0], sum(g[0] * va) + sum(g[1] * vb));
  expect_close(tangents[1], vb * 2.0);
  auto [vals, cot] = vjp(both, {a, b}, {ones_like(outs[0]), ones_like(b)});
  expect_close(cot[0], g[0]);
  expect_close(cot[1], g[1] + 2.0);
  expect_error([&] { hvp(loss, {a, b}, {va}); }, {"hvp", "1 directions for 2 inputs"});
  expect_error([&] { hvp(loss, {a, b}, {va, va}); }, {"direction 1", "[3, 4]", "[4]"});
}

// Autocast applies inside vmap as outside: matmul and linear in bf16 on the
// lanes, the results equal the loop's under the same autocast.
TEST(Vmap, AutocastAppliesToTheBatchedOps) {
  if (!strata_test::missing_dtypes({DType::bf16}).empty()) {
    // A device without bf16 refuses the autocast scope itself (amp.hpp).
    expect_error([] { Autocast amp({.dtype = DType::bf16}); }, {"bf16"});
    return;
  }
  Tensor w = draw({6, 4}, 110).to(DType::f32), x = draw({5, 6}, 111).to(DType::f32);
  auto f = [&](const Tensor& v) { return tanh(matmul(v, w)); };
  Autocast amp({.dtype = DType::bf16});
  Tensor batched = vmap(f)(x);
  EXPECT_EQ(batched.dtype(), DType::bf16);
  expect_close(batched.to(DType::f32), loop(f, x).to(DType::f32), 0.0);
}

// The implicit solvers under vmap iterate lane by lane, each lane until it
// converges (the slowest lane's count reported): the solutions and their
// derivatives (implicit, through batched Krylov solves) equal the loop's.
TEST(Vmap, ImplicitSolversConvergeLaneByLaneAndDifferentiate) {
  Tensor a = draw({4, 3}, 112, 0.5, 9.0);
  auto heron = [](const Tensor& x, const std::vector<Tensor>& p) { return (x + p[0] / x) * 0.5; };
  auto sqrt_of = [&](const Tensor& ai) { return fixed_point(heron, ones_like(ai), {ai}).x; };
  expect_close(vmap(sqrt_of)(a), sqrt(a), 1e-9);
  // fixed_point iterates the lanes together, a finished lane masked: each
  // lane's iterate, iterations and residual are those of its own solve (the
  // residual up to the order of its sum), and the reported iterations are
  // the slowest lane's.
  std::vector<ImplicitSolution> alone;
  int64_t most = 0;
  for (int64_t i = 0; i < 4; ++i) {
    alone.push_back(fixed_point(heron, ones({3}, {.dtype = a.dtype()}), {a.select(0, i)}));
    most = std::max(most, alone.back().iterations);
  }
  ImplicitSolution reported;
  Tensor together = vmap([&](const Tensor& ai) {
    reported = fixed_point(heron, ones_like(ai), {ai});
    return reported.x;
  })(a);
  EXPECT_TRUE(reported.converged);
  EXPECT_EQ(reported.iterations, most);
  ASSERT_EQ(reported.lanes.size(), 4u);
  bool counts_differ = false;
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE("lane " + std::to_string(i));
    expect_close(together.select(0, static_cast<int64_t>(i)), alone[i].x, 0.0);
    EXPECT_EQ(reported.lanes[i].iterations, alone[i].iterations);
    EXPECT_NEAR(reported.lanes[i].residual, alone[i].residual, 1e-5 * (1.0 + alone[i].residual));
    EXPECT_TRUE(reported.lanes[i].converged);
    counts_differ = counts_differ || alone[i].iterations != most;
  }
  EXPECT_TRUE(counts_differ) << "the lanes should need different iteration counts for the mask to matter";
  // Nested vmaps (lane by lane inside the outer one) report every lane.
  Tensor a2 = draw({2, 4, 3}, 113, 0.5, 9.0);
  ImplicitSolution nested;
  Tensor roots = vmap([&](const Tensor& row) {
    return vmap([&](const Tensor& ai) {
      nested = fixed_point(heron, ones_like(ai), {ai});
      return nested.x;
    })(row);
  })(a2);
  expect_close(roots, sqrt(a2), 1e-9);
  EXPECT_EQ(nested.lanes.size(), 8u);
  // vmap of grad (implicit derivative per lane) and grad of vmap: 1 / (2 sqrt a).
  auto loss = [&](const Tensor& ai) { return sum(sqrt_of(ai) * sin(ai)); };
  {
    SCOPED_TRACE("vmap(grad)");
    expect_close(vmap(grad(loss))(a), loop(grad(loss), a), 1e-8);
  }
  {
    SCOPED_TRACE("grad(vmap)");
    expect_close(grad([&](const Tensor& z) { return sum(vmap(sqrt_of)(z)); })(a), 0.5 / sqrt(a), 1e-8);
  }
  // root: x^3 = a by Newton, each lane its own.
  auto cube_root = [](const Tensor& ai) {
    return root([](const Tensor& x, const std::vector<Tensor>& p) { return x * x * x - p[0]; }, ones_like(ai), {ai}).x;
  };
  expect_close(vmap(cube_root)(a), loop(cube_root, a), 1e-9);
  vmap([&](const Tensor& ai) {
    ImplicitSolution s = root([](const Tensor& x, const std::vector<Tensor>& p) { return x * x * x - p[0]; },
                              ones_like(ai), {ai});
    EXPECT_EQ(s.lanes.size(), 4u);
    EXPECT_TRUE(std::ranges::all_of(s.lanes, [](const ImplicitLane& l) { return l.converged; }));
    return s.x;
  })(a);
  expect_close(vmap(grad([&](const Tensor& ai) { return sum(cube_root(ai)); }))(a),
               loop(grad([&](const Tensor& ai) { return sum(cube_root(ai)); }), a), 1e-8);
  // A lane that does not converge is named.
  Tensor bad = a.clone();
  bad.select(0, 2).copy_(-a.select(0, 2));  // sqrt of a negative: Heron's map never settles
  expect_error([&] { vmap(sqrt_of)(bad); }, {"fixed_point (vmap lane 2)", "did not converge"});
  // Accepted, the report says which lane failed; the others converged.
  vmap([&](const Tensor& ai) {
    ImplicitSolution s = fixed_point(heron, ones_like(ai), {ai},
                                     {.max_iterations = 200, .on_nonconvergence = OnNonconvergence::accept});
    EXPECT_FALSE(s.converged);
    EXPECT_EQ(s.iterations, 200);
    EXPECT_EQ(s.lanes.size(), 4u);
    if (s.lanes.size() == 4) {
      for (size_t i = 0; i < 4; ++i) EXPECT_EQ(s.lanes[i].converged, i != 2) << "lane " << i;
      EXPECT_EQ(s.lanes[2].iterations, 200);
      EXPECT_LT(s.lanes[0].iterations, 200);
    }
    return s.x;
  })(bad);
}

// A custom_jvp function batches by running its rule under vmap: vmap(jvp)
// and vmap(grad) through the rule equal the loop.
TEST(Vmap, CustomJvpRulesRunOnBatchedTensors) {
  CustomFunction softplus =
      custom_jvp([](const std::vector<Tensor>& x) { return std::vector<Tensor>{log(exp(x[0]) + 1.0)}; },
                 [](const std::vector<Tensor>& x, const std::vector<Tensor>&, const std::vector<Tensor>& t) {
                   return std::vector<Tensor>{t[0] * sigmoid(x[0])};
                 },
                 {.name = "vmap_test_softplus"});
  auto f = [&](const Tensor& v) { return sum(softplus(v) * v); };
  Tensor x = draw({4, 3}, 120), t = draw({4, 3}, 121);
  expect_close(vmap(grad(f))(x), loop(grad(f), x));
  auto tangent = [&](const std::vector<Tensor>& a) { return std::vector<Tensor>{jvp(f, a[0], a[1]).second}; };
  std::vector<Tensor> lanes;
  for (int64_t i = 0; i < 4; ++i) lanes.push_back(tangent({x.select(0, i), t.select(0, i)})[0]);
  expect_close(vmap(tangent)({x, t})[0], stack(lanes));
}

// trace() of a vmapped function records the ops the batching rules ran on
// the lanes: the graph replays the batched computation without vmap.
// cross_entropy reads the label range on the host to name a bad label;
// batched labels (each lane its own) are left to the gather kernel, which
// checks every index, so a classifier's per-sample gradients work and a bad
// label is still an error naming it.
TEST(Vmap, PerSampleGradientsOfACrossEntropyLossLeaveTheLabelCheckToTheKernel) {
  Tensor w = draw({4, 3}, 80), x = draw({5, 4}, 81);
  Tensor y = from_data(std::vector<int64_t>{0, 2, 1, 1, 0}, {5}, {.dtype = DType::i64});
  auto loss = [](const std::vector<Tensor>& p, const std::vector<Tensor>& ex) {
    return nn::functional::cross_entropy(matmul(ex[0].unsqueeze(0), p[0]), ex[1].unsqueeze(0));
  };
  Tensor g = per_sample_grad(loss, {w}, {x, y})[0];
  for (int64_t i = 0; i < 5; ++i) {
    GradientTape tape;
    Tensor wi = w.detach();
    tape.watch(wi);
    expect_close(g.select(0, i), tape.gradient(loss({wi}, {x.select(0, i), y.select(0, i)}), {wi})[0]);
  }
  Tensor bad = from_data(std::vector<int64_t>{0, 2, 7, 1, 0}, {5}, {.dtype = DType::i64});
  expect_error([&] { (void)per_sample_grad(loss, {w}, {x, bad})[0].to_vector<double>(); }, {"out of range"});
}

TEST(Vmap, TracingAVmappedFunctionRecordsTheBatchedOps) {
  Tensor w = draw({3, 2}, 130), x = draw({5, 3}, 131);
  auto f = [&](const Tensor& v) { return tanh(matmul(v, w)) * 2.0; };
  Graph g = trace([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{vmap(f)(in[0])}; }, {x});
  Tensor y = draw({5, 3}, 132);
  expect_close(g.run({y})[0], loop(f, y));
}

// Anomaly mode checks the ops a batching rule runs on the lanes (a batched
// value cannot be read): a NaN in one lane names the op, the lanes' shapes.
TEST(Vmap, AnomalyModeChecksTheLanes) {
  Tensor x = draw({4, 3}, 140, 0.5, 1.5);
  set_anomaly_mode(true);
  struct Off {
    ~Off() { set_anomaly_mode(false); }
  } off;
  Tensor fine = vmap([](const Tensor& v) { return log(v); })(x);
  expect_close(fine, log(x));
  Tensor bad = x.clone();
  bad.select(0, 2).copy_(-x.select(0, 2));  // lane 2 negative: log gives NaN there
  expect_error([&] { vmap([](const Tensor& v) { return log(v); })(bad); }, {"anomaly", "log", "NaN"});
}

// Custom functions and checkpoints inside vmap, differentiated from outside
// it (grad of vmap, jvp of vmap): the levels opened outside get the node's
// twin on the lanes, whose rules run the function's under a fresh vmap.
TEST(Vmap, CustomFunctionsAndCheckpointsDifferentiateFromOutside) {
  CustomFunction softplus =
      custom_vjp([](const std::vector<Tensor>& x) { return std::vector<Tensor>{log(exp(x[0]) + 1.0)}; },
                 [](const std::vector<Tensor>& x) {
                   return std::pair{std::vector<Tensor>{log(exp(x[0]) + 1.0)}, std::vector<Tensor>{x[0]}};
                 },
                 [](const std::vector<Tensor>& r, const std::vector<Tensor>& g) {
                   return std::vector<Tensor>{g[0] * sigmoid(r[0])};
                 },
                 {.name = "vmap_test_outer_softplus"});
  Tensor x = draw({4, 3}, 150), w = draw({3}, 151);
  auto with_custom = [&](const Tensor& v) { return sum(softplus(v * w) * v); };
  auto with_checkpoint = [&](const Tensor& v) {
    return sum(checkpoint([&](const Tensor& u) { return tanh(u * w); }, v));
  };
  for (const auto& f :
       {std::function<Tensor(const Tensor&)>(with_custom), std::function<Tensor(const Tensor&)>(with_checkpoint)}) {
    // grad of vmap, with respect to the mapped input and to a shared one.
    expect_close(grad([&](const Tensor& z) { return sum(vmap(f)(z)); })(x), loop(grad(f), x));
    GradientTape outer;
    Tensor wo = w.detach();
    outer.watch(wo);
    w = wo;
    Tensor gw = outer.gradient(sum(vmap(f)(x)), {wo})[0];
    GradientTape reference;
    reference.watch(wo);
    Tensor want = reference.gradient(sum(loop(f, x)), {wo})[0];
    expect_close(gw, want);
    // jvp of vmap, and second order (grad of grad of vmap).
    Tensor v = draw({4, 3}, 152);
    expect_close(jvp([&](const Tensor& z) { return vmap(f)(z); }, x, v).second,
                 jvp([&](const Tensor& z) { return loop(f, z); }, x, v).second);
    expect_close(
        grad([&](const Tensor& z) { return sum(grad([&](const Tensor& u) { return sum(vmap(f)(u)); })(z)); })(x),
        grad([&](const Tensor& z) { return sum(grad([&](const Tensor& u) { return sum(loop(f, u)); })(z)); })(x));
  }
}
