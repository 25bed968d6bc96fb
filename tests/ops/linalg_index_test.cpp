// linalg_index_test.cpp — matmul, index_select, gather, scatter_add, cat
// and stack.
#include "device_fixture.hpp"

namespace strata_test {
namespace {

namespace s = strata;
using s::DType;

class Matmul : public DeviceTest {
 protected:
  void check(const Shape& a_shape, const Shape& b_shape, Layout la, Layout lb) {
    for (DType dtype : dtypes({s::f32, s::f64})) {
      STRATA_TRACE(s::dtype_name(dtype) << " " << shape_str(a_shape) << " " << layout_name(la) << " @ "
                                        << shape_str(b_shape) << " " << layout_name(lb));
      Operand a = operand(a_shape, dtype, la, -1, 1);
      Operand b = operand(b_shape, dtype, lb, -1, 1);
      Tolerance tol = tolerance(dtype);
      tol.atol *= static_cast<double>(std::max<int64_t>(a_shape.back(), 1));
      EXPECT_CLOSE(s::matmul(a.dev, b.dev), matmul(a.host, b.host), dtype, tol);
    }
  }
};
STRATA_INSTANTIATE_ON_DEVICES(Matmul);

struct MatmulCase {
  Shape a, b;
};

TEST_P(Matmul, TwoDimensional) {
  std::vector<MatmulCase> cases{{{3, 4}, {4, 5}}, {{1, 1}, {1, 1}}, {{5, 7}, {7, 1}}, {{1, 9}, {9, 6}}};
  for (int i = 0; i < 3; ++i) {
    int64_t m = random_int(rng_, 1, 40), k = random_int(rng_, 1, 40), n = random_int(rng_, 1, 40);
    cases.push_back({{m, k}, {k, n}});
  }
  for (const MatmulCase& c : cases) {
    for (Layout la : {Layout::contiguous, Layout::transposed, Layout::strided}) {
      for (Layout lb : {Layout::contiguous, Layout::transposed, Layout::strided}) check(c.a, c.b, la, lb);
    }
  }
}

/// Runs f, which must throw E with a message containing `text`.
template <class E, class F>
void expect_error(F&& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one containing: " << text;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

// linear: y = act(x @ wᵀ + b), fused on backends that register it (the CPU
// plugin for f32 and bf16), decomposed elsewhere; both against the host.
class Linear : public DeviceTest {
 protected:
  void check(const Shape& x_shape, int64_t out, Layout lx, s::FusedActivation act) {
    for (DType dtype : dtypes({s::f32, s::f64, s::bf16})) {
      const int64_t in = x_shape.back();
      STRATA_TRACE(s::dtype_name(dtype) << " x " << shape_str(x_shape) << " " << layout_name(lx) << ", out " << out
                                        << (act == s::FusedActivation::relu ? ", relu" : ""));
      Operand x = operand(x_shape, dtype, lx, -1, 1);
      Operand w = operand({out, in}, dtype, Layout::contiguous, -1, 1);
      Operand b = operand({out}, dtype, Layout::contiguous, -1, 1);
      HostTensor y = matmul(x.host, permute(w.host, {1, 0}));
      y = zip(y, broadcast_to(b.host, y.shape), [](double p, double q) { return p + q; });
      if (act == s::FusedActivation::relu) y = map(y, [](double v) { return v > 0 ? v : 0.0; });
      Tolerance tol = tolerance(dtype);
      tol.atol *= static_cast<double>(in + 1);
      EXPECT_CLOSE(s::linear(x.dev, w.dev, b.dev, act), y, dtype, tol);
    }
  }
};
STRATA_INSTANTIATE_ON_DEVICES(Linear);

TEST_P(Linear, MatchesMatmulPlusBias) {
  for (auto act : {s::FusedActivation::none, s::FusedActivation::relu}) {
    check({5, 7}, 3, Layout::contiguous, act);
    check({7, 5}, 9, Layout::transposed, act);  // a non-contiguous input is made compact first
    check({2, 3, 4}, 6, Layout::contiguous, act);
    check({4}, 2, Layout::contiguous, act);
    check({64, 256}, 130, Layout::contiguous, act);  // oneDNN's blocked kernels on the CPU
  }
}

TEST_P(Linear, BadOperandsAndActivationsAreNamed) {
  Tensor x = s::zeros({2, 3}, {.device = device_});
  Tensor w = s::zeros({4, 3}, {.device = device_});
  Tensor b = s::zeros({4}, {.device = device_});
  expect_error<s::ShapeError>([&] { s::linear(x, s::zeros({4, 2}, {.device = device_}), b); },
                              "expected input [..., in], weight [out, in] and bias [out], found [2, 3], [4, 2] and [4]");
  expect_error<s::ShapeError>([&] { s::linear(x, w, s::zeros({3}, {.device = device_})); }, "linear(f32[2, 3]");
  expect_error<s::ValueError>(
      [&] { s::call_op("strata::linear", {x, w, b}, {{"activation", std::string("gelu")}}); },
      "attribute 'activation' = \"gelu\" is not one of \"none\", \"relu\"");
  expect_error<s::DTypeError>(
      [&] {
        s::linear(s::zeros({2, 3}, {.dtype = s::i64, .device = device_}),
                  s::zeros({4, 3}, {.dtype = s::i64, .device = device_}),
                  s::zeros({4}, {.dtype = s::i64, .device = device_}));
      },
      "floating-point operands");
}

TEST_P(Matmul, LargerThanOneBlock) { check({70, 130}, {130, 90}, Layout::contiguous, Layout::transposed); }

// With two threads (the test machines' count) and from 2^21 multiply-adds,
// the CPU plugin cuts a GEMM into column blocks (N >= M) or row blocks
// claimed by its threads (split_gemm): multiples of 16 but the last, at
// least 256 wide unless a thread would get none; batched and strided
// operands too.
TEST_P(Matmul, LargeEnoughToBeSplitAcrossThreads) {
  check({130, 90}, {90, 200}, Layout::contiguous, Layout::transposed);  // two column blocks, 96 and 104 wide
  check({600, 64}, {64, 100}, Layout::transposed, Layout::contiguous);  // two row blocks
  check({64, 32}, {32, 1000}, Layout::contiguous, Layout::contiguous);  // three column blocks: 320, 336, 344
  check({3, 100, 64}, {3, 64, 120}, Layout::contiguous, Layout::strided);
}

TEST_P(Matmul, OneDimensionalOperands) {
  // Past the CPU plugin's small-GEMM sizes too: a column vector is a
  // row-major [K, 1] (read as a transposed operand it found no kernel).
  const MatmulCase cases[] = {{{4}, {4}},         {{4}, {4, 3}},       {{3, 4}, {4}},      {{1}, {1}},
                              {{4}, {2, 4, 5}},   {{2, 3, 4}, {4}},    {{256, 256}, {256}}, {{256}, {256, 256}},
                              {{128, 300}, {300}}};
  for (const MatmulCase& c : cases) {
    check(c.a, c.b, Layout::contiguous, Layout::contiguous);
    check(c.a, c.b, Layout::strided, Layout::transposed);
  }
}

TEST_P(Matmul, BatchedWithBroadcasting) {
  std::vector<MatmulCase> cases{{{2, 3, 4}, {2, 4, 5}},    {{2, 3, 4}, {4, 5}},    {{3, 4}, {2, 4, 5}},
                                {{2, 1, 3, 4}, {3, 4, 2}}, {{1, 3, 4}, {5, 4, 2}}, {{2, 2, 1, 3}, {2, 1, 3, 2}}};
  for (int i = 0; i < 2; ++i) {
    int64_t m = random_int(rng_, 1, 9), k = random_int(rng_, 1, 9), n = random_int(rng_, 1, 9);
    int64_t b = random_int(rng_, 1, 4);
    cases.push_back({{b, 1, m, k}, {3, k, n}});
  }
  for (const MatmulCase& c : cases) {
    for (Layout la : kAllLayouts) check(c.a, c.b, la, Layout::contiguous);
    check(c.a, c.b, Layout::contiguous, Layout::transposed);
    check(c.a, c.b, Layout::strided, Layout::expanded);
  }
}

TEST_P(Matmul, TransposedViews) {
  for (DType dtype : dtypes({s::f32, s::f64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    Operand a = operand({6, 4}, dtype);  // used as a.mT(): [4, 6]
    Operand b = operand({5, 6}, dtype);  // used as b.mT(): [6, 5]
    EXPECT_CLOSE(s::matmul(a.dev.mT(), b.dev.mT()), matmul(permute(a.host, {1, 0}), permute(b.host, {1, 0})), dtype);
    Operand c = operand({3, 6, 4}, dtype);
    EXPECT_CLOSE(s::matmul(c.dev.mT(), c.dev), matmul(permute(c.host, {0, 2, 1}), c.host), dtype);
  }
}

TEST_P(Matmul, EmptyOperands) {
  for (DType dtype : dtypes({s::f32, s::f64})) {
    STRATA_TRACE(s::dtype_name(dtype));
    EXPECT_CLOSE(s::matmul(make({0, 4}, {}, dtype), operand({4, 5}, dtype).dev), host_values({0, 5}, {}), dtype);
    // Inner dim 0: a [3, 5] matrix of zeros.
    EXPECT_CLOSE(s::matmul(make({3, 0}, {}, dtype), make({0, 5}, {}, dtype)),
                 host_values({3, 5}, std::vector<double>(15, 0.0)), dtype);
    EXPECT_CLOSE(s::matmul(make({2, 0, 3, 4}, {}, dtype), operand({4, 5}, dtype).dev), host_values({2, 0, 3, 5}, {}),
                 dtype);
    EXPECT_CLOSE(s::matmul(make({0}, {}, dtype), make({0}, {}, dtype)), host_values({}, {0}), dtype);
  }
}

TEST_P(Matmul, IntegerOperandPromotesWithFloat) {
  STRATA_NEEDS_DTYPES(s::i32);
  Operand a = int_operand({3, 4}, s::i32, Layout::contiguous, -3, 3);
  Operand b = operand({4, 2}, s::f32);
  EXPECT_CLOSE(s::matmul(a.dev, b.dev), matmul(a.host, b.host), s::f32);
}

// --- indexing ------------------------------------------------------------------------

class Indexing : public DeviceTest {
 protected:
  /// A random index host tensor of `shape` with values in [0, limit).
  HostTensor random_index(const Shape& shape, int64_t limit) {
    return generate(shape, [&](int64_t) { return static_cast<double>(random_int(rng_, 0, limit - 1)); });
  }

  /// A random gather/scatter problem: input shape, dim, and an index that
  /// fits the input off `dim` and has up to `max_along_dim` entries along it.
  struct IndexCase {
    Shape shape;
    int64_t dim;
    Shape index_shape;
    HostTensor index;
  };
  IndexCase random_index_case(int64_t max_along_dim) {
    IndexCase c;
    c.shape = random_shape(rng_, 1, 4, 5);
    auto rank = static_cast<int64_t>(c.shape.size());
    c.dim = random_int(rng_, -rank, rank - 1);
    auto d = static_cast<size_t>(c.dim < 0 ? c.dim + rank : c.dim);
    c.index_shape = c.shape;
    for (size_t k = 0; k < c.shape.size(); ++k) {
      c.index_shape[k] = k == d ? random_int(rng_, 0, max_along_dim) : random_int(rng_, 1, c.shape[k]);
    }
    c.index = random_index(c.index_shape, c.shape[d]);
    return c;
  }
};
STRATA_INSTANTIATE_ON_DEVICES(Indexing);

TEST_P(Indexing, IndexSelect) {
  for (DType dtype : dtypes({s::f32, s::f64, s::i32, s::i64})) {
    for (int i = 0; i < 6; ++i) {
      Shape shape = random_shape(rng_, 1, 4, 5);
      auto rank = static_cast<int64_t>(shape.size());
      int64_t dim = random_int(rng_, -rank, rank - 1);
      int64_t size = shape[static_cast<size_t>(dim < 0 ? dim + rank : dim)];
      HostTensor index = random_index({random_int(rng_, 0, 7)}, size);
      std::vector<int64_t> idx(index.data.begin(), index.data.end());
      for (Layout layout : kAllLayouts) {
        for (DType index_dtype : dtypes({s::i64, s::i32})) {
          STRATA_TRACE(s::dtype_name(dtype) << shape_str(shape) << " " << layout_name(layout) << " dim " << dim
                                            << " index " << s::dtype_name(index_dtype) << shape_str(index.shape));
          Operand x = operand(shape, dtype, layout, -9, 9);
          Tensor ix = make(index, index_dtype);
          EXPECT_CLOSE(s::index_select(x.dev, dim, ix), index_select(x.host, dim, idx), dtype);
        }
      }
    }
  }
}

TEST_P(Indexing, IndexSelectWithRepeatsAndStridedIndex) {
  Operand x = operand({4, 3}, s::f32, Layout::transposed);
  // Index [3, 3, 0, 1] stored every other element.
  Tensor storage = make({8}, {3, 9, 3, 9, 0, 9, 1, 9}, s::i64);
  Tensor index = storage.slice(0, 0, 8, 2);
  EXPECT_CLOSE(s::index_select(x.dev, 0, index), index_select(x.host, 0, {3, 3, 0, 1}), s::f32);
  EXPECT_CLOSE(s::index_select(x.dev, -1, index.slice(0, 2, 4)), index_select(x.host, 1, {0, 1}), s::f32);
}

TEST_P(Indexing, Gather) {
  for (DType dtype : dtypes({s::f32, s::f64, s::i32, s::i64})) {
    for (int i = 0; i < 8; ++i) {
      IndexCase c = random_index_case(6);
      for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
        STRATA_TRACE(s::dtype_name(dtype) << shape_str(c.shape) << " " << layout_name(layout) << " dim " << c.dim
                                          << " index " << shape_str(c.index_shape));
        Operand x = operand(c.shape, dtype, layout, -9, 9);
        EXPECT_CLOSE(s::gather(x.dev, c.dim, make(c.index, s::i64)), gather(x.host, c.dim, c.index), dtype);
      }
    }
  }
}

TEST_P(Indexing, ScatterAdd) {
  for (DType dtype : dtypes({s::f32, s::f64, s::i32, s::i64})) {
    for (int i = 0; i < 8; ++i) {
      IndexCase c = random_index_case(8);  // duplicate indices accumulate
      for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
        STRATA_TRACE(s::dtype_name(dtype) << shape_str(c.shape) << " " << layout_name(layout) << " dim " << c.dim
                                          << " index " << shape_str(c.index_shape));
        Operand base = operand(c.shape, dtype, layout, -9, 9);
        Operand src = operand(c.index_shape, dtype, layout, -9, 9);
        HostTensor before = to_host(base.dev);
        EXPECT_CLOSE(s::scatter_add(base.dev, c.dim, make(c.index, s::i64), src.dev),
                     scatter_add(base.host, c.dim, c.index, src.host), dtype);
        EXPECT_CLOSE(base.dev, before, dtype);  // the base is not modified
      }
    }
  }
}

TEST_P(Indexing, ScatterAddKnownValues) {
  Tensor base = make({5}, {1, 1, 1, 1, 1}, s::f32);
  Tensor index = make({6}, {0, 4, 0, 2, 0, 4}, s::i64);
  Tensor src = make({6}, {1, 2, 3, 4, 5, 6}, s::f32);
  EXPECT_CLOSE(s::scatter_add(base, 0, index, src), host_values({5}, {10, 1, 5, 1, 9}), s::f32);
}

TEST_P(Indexing, ScatterAddWithEmptyIndexReturnsTheBase) {
  Tensor base = make({2, 3}, {1, 2, 3, 4, 5, 6}, s::f32);
  EXPECT_CLOSE(s::scatter_add(base, 0, make({0, 3}, {}, s::i64), make({0, 3}, {}, s::f32)),
               host_values({2, 3}, {1, 2, 3, 4, 5, 6}), s::f32);
  EXPECT_CLOSE(s::scatter_add(base, 1, make({2, 0}, {}, s::i64), make({2, 0}, {}, s::f32)),
               host_values({2, 3}, {1, 2, 3, 4, 5, 6}), s::f32);
}

// --- joining --------------------------------------------------------------------------

TEST_P(Indexing, Cat) {
  for (DType dtype : dtypes({s::f32, s::f64, s::i32, s::i64})) {
    for (int i = 0; i < 6; ++i) {
      Shape shape = random_shape(rng_, 1, 4, 4);
      auto rank = static_cast<int64_t>(shape.size());
      int64_t dim = random_int(rng_, -rank, rank - 1);
      auto d = static_cast<size_t>(dim < 0 ? dim + rank : dim);
      std::vector<Tensor> parts;
      std::vector<HostTensor> hosts;
      auto n = static_cast<size_t>(random_int(rng_, 1, 4));
      for (size_t k = 0; k < n; ++k) {
        Shape part = shape;
        part[d] = random_int(rng_, 0, 3);  // empty parts included
        Operand o = operand(part, dtype, kAllLayouts[k % 4], -9, 9);
        parts.push_back(o.dev);
        hosts.push_back(o.host);
      }
      STRATA_TRACE(s::dtype_name(dtype) << shape_str(shape) << " dim " << dim << " parts " << n);
      EXPECT_CLOSE(s::cat(parts, dim), cat(hosts, dim), dtype);
    }
  }
}

TEST_P(Indexing, CatPromotesDtypes) {
  STRATA_NEEDS_DTYPES(s::i32);
  Operand a = int_operand({2, 3}, s::i32, Layout::contiguous, -9, 9);
  Operand b = operand({1, 3}, s::f32);
  Operand c = int_operand({2, 3}, s::boolean, Layout::transposed);
  EXPECT_CLOSE(s::cat({a.dev, b.dev, c.dev}, 0), cat({a.host, b.host, c.host}, 0), s::f32);
  EXPECT_CLOSE(s::cat({a.dev, c.dev}, 1), cat({a.host, c.host}, 1), s::i32);
}

TEST_P(Indexing, Stack) {
  for (DType dtype : dtypes({s::f32, s::f64, s::i32, s::i64})) {
    for (int i = 0; i < 5; ++i) {
      Shape shape = random_shape(rng_, 0, 3, 4, true);
      auto rank = static_cast<int64_t>(shape.size());
      int64_t dim = random_int(rng_, -rank - 1, rank);
      std::vector<Tensor> parts;
      std::vector<HostTensor> hosts;
      for (size_t k = 0; k < 3; ++k) {
        Operand o = operand(shape, dtype, kAllLayouts[(k + static_cast<size_t>(i)) % 4], -9, 9);
        parts.push_back(o.dev);
        hosts.push_back(o.host);
      }
      STRATA_TRACE(s::dtype_name(dtype) << shape_str(shape) << " dim " << dim);
      EXPECT_CLOSE(s::stack(parts, dim), stack(hosts, dim), dtype);
    }
  }
}

}  // namespace
}  // namespace strata_test
