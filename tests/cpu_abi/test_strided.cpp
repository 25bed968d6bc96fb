// Random strided views (permuted, padded, broadcast, offset) through the
// elementwise, copy and reduction kernels, against reference loops. Sizes
// range from a few elements to ~200k, so the multithreaded splits (which may
// cut rows in the middle) and the tiled transpose walk are exercised too.
#include "plugin_fixture.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>

namespace strata::cpu_abi {
namespace {

class StridedTest : public CpuAbiTest {
 protected:
  std::mt19937 rng{2024};

  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

  std::vector<int64_t> random_shape(bool large) {
    const int rank = static_cast<int>(uniform(1, 4));
    std::vector<int64_t> shape(rank);
    for (int64_t& s : shape) s = uniform(1, 6);
    if (large) {  // two big dims, one odd: rows get cut by the thread split
      shape[uniform(0, rank - 1)] = 37 + uniform(0, 60);
      shape[uniform(0, rank - 1)] = 41 + uniform(0, 60);
    }
    return shape;
  }

  /// A view of `shape` over fresh random storage: dims permuted in memory,
  /// padded, sometimes broadcast (stride 0), at a random offset.
  DeviceTensor& random_view(const std::vector<int64_t>& shape, std::vector<float>& storage, bool allow_broadcast) {
    const int rank = static_cast<int>(shape.size());
    std::vector<int> order(rank);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> strides(rank);
    int64_t extent = 1;
    for (int i = rank - 1; i >= 0; --i) {  // order[rank-1] is the innermost in memory
      const int d = order[i];
      if (allow_broadcast && shape[d] > 1 && uniform(0, 4) == 0) {
        strides[d] = 0;
        continue;
      }
      strides[d] = extent;
      extent *= shape[d] + uniform(0, 1);  // sometimes a gap
    }
    const int64_t offset = uniform(0, 3);
    storage.resize(static_cast<size_t>(extent + offset));
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    for (float& v : storage) v = dist(rng);
    DeviceTensor& t = tensor<float>(STRATA_F32, {static_cast<int64_t>(storage.size())}, storage);
    t.view(shape, strides, offset);
    return t;
  }
};

TEST_F(StridedTest, AddCopyAndSumOnRandomViews) {
  for (int c = 0; c < 60; ++c) {
    const std::vector<int64_t> shape = random_shape(c % 4 == 3);
    SCOPED_TRACE("case " + std::to_string(c));
    std::vector<float> as, bs, ds;
    DeviceTensor& a = random_view(shape, as, true);
    DeviceTensor& b = random_view(shape, bs, true);

    DeviceTensor& sum = output(STRATA_F32, shape);
    ASSERT_EQ(run(STRATA_OP_ADD, "f32,f32->f32", {&a, &b}, sum), STRATA_OK) << last_error.message;
    std::vector<float> out = sum.download<float>();
    int64_t i = 0;
    for_each_index(shape, [&](const std::vector<int64_t>& p) {
      ASSERT_EQ(out[i++], as[offset_of(a.desc(), p)] + bs[offset_of(b.desc(), p)]);
    });

    DeviceTensor& dst = random_view(shape, ds, false);  // a strided output
    ASSERT_EQ(run(STRATA_OP_COPY, "f32->f32", {&a}, dst), STRATA_OK) << last_error.message;
    const std::vector<float> copied = dst.download<float>();
    for_each_index(shape, [&](const std::vector<int64_t>& p) {
      ASSERT_EQ(copied[offset_of(dst.desc(), p)], as[offset_of(a.desc(), p)]);
    });

    // sum over a random non-empty subset of dims.
    std::vector<int64_t> dims, out_shape = shape;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (uniform(0, 1) == 1) dims.push_back(static_cast<int64_t>(d));
    }
    if (dims.empty()) dims.push_back(uniform(0, static_cast<int64_t>(shape.size()) - 1));
    for (int64_t d : dims) out_shape[d] = 1;
    DeviceTensor& red = output(STRATA_F32, out_shape);
    ASSERT_EQ(run(STRATA_OP_SUM, "f32->f32", {&a}, red, Attrs().ints("dims", dims)), STRATA_OK) << last_error.message;
    std::vector<double> expected(out.size(), 0.0), magnitude(out.size(), 0.0);
    std::vector<int64_t> out_strides(shape.size());
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1, s = 1; d >= 0; --d) {
      out_strides[d] = s;
      s *= out_shape[d];
    }
    for_each_index(shape, [&](const std::vector<int64_t>& p) {
      int64_t o = 0;
      for (size_t d = 0; d < p.size(); ++d) o += (out_shape[d] == 1 ? 0 : p[d]) * out_strides[d];
      expected[o] += as[offset_of(a.desc(), p)];
      magnitude[o] += std::fabs(as[offset_of(a.desc(), p)]);
    });
    out = red.download<float>();
    for (size_t k = 0; k < out.size(); ++k) {
      ASSERT_NEAR(out[k], expected[k], 1e-5 * magnitude[k] + 1e-5) << k;  // f32 accumulation
    }
  }
}

TEST_F(StridedTest, ArgmaxAndMaxOnRandomViews) {
  for (int c = 0; c < 30; ++c) {
    const std::vector<int64_t> shape = random_shape(c % 3 == 2);
    SCOPED_TRACE("case " + std::to_string(c));
    std::vector<float> xs;
    DeviceTensor& x = random_view(shape, xs, false);
    const int64_t dim = uniform(0, static_cast<int64_t>(shape.size()) - 1);
    std::vector<int64_t> out_shape = shape;
    out_shape[dim] = 1;
    DeviceTensor& am = output(STRATA_I64, out_shape);
    DeviceTensor& mx = output(STRATA_F32, out_shape);
    ASSERT_EQ(run(STRATA_OP_ARGMAX, "f32->i64", {&x}, am, Attrs().ints("dims", {dim})), STRATA_OK)
        << last_error.message;
    ASSERT_EQ(run(STRATA_OP_MAX, "f32->f32", {&x}, mx, Attrs().ints("dims", {dim})), STRATA_OK) << last_error.message;
    const std::vector<int64_t> arg = am.download<int64_t>();
    const std::vector<float> best = mx.download<float>();
    int64_t o = 0;
    for_each_index(out_shape, [&](const std::vector<int64_t>& p) {
      std::vector<int64_t> q = p;
      int64_t expected = 0;
      for (q[dim] = 0; q[dim] < shape[dim]; ++q[dim]) {
        std::vector<int64_t> e = p;
        e[dim] = expected;
        if (xs[offset_of(x.desc(), q)] > xs[offset_of(x.desc(), e)]) expected = q[dim];
      }
      q[dim] = expected;
      ASSERT_EQ(arg[o], expected) << o;
      ASSERT_EQ(best[o], xs[offset_of(x.desc(), q)]) << o;
      ++o;
    });
  }
}

}  // namespace
}  // namespace strata::cpu_abi
