// reference.cpp — host reference ops, random operands, comparison.
#include "reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <sstream>

namespace strata_test {

namespace {

Shape normalized(Shape dims, int64_t rank) {
  int64_t bound = std::max<int64_t>(rank, 1);
  for (int64_t& d : dims) {
    if (d < 0) d += bound;
  }
  std::sort(dims.begin(), dims.end());
  return dims;
}

/// Element of `x` at an index of the broadcast shape `out` (right-aligned,
/// size-1 dims read index 0).
double broadcast_at(const HostTensor& x, const Shape& index) {
  size_t lead = index.size() - x.shape.size();
  int64_t flat = 0;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    int64_t i = x.shape[d] == 1 ? 0 : index[lead + d];
    flat = flat * x.shape[d] + i;
  }
  return x.data[static_cast<size_t>(flat)];
}

std::string format(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

}  // namespace

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d > 0 ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

Shape unravel(int64_t flat, const Shape& shape) {
  Shape index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return index;
}

int64_t ravel(const Shape& index, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

double HostTensor::at(const Shape& index) const { return data[static_cast<size_t>(ravel(index, shape))]; }

HostTensor generate(const Shape& shape, const std::function<double(int64_t)>& f) {
  HostTensor h{shape, std::vector<double>(static_cast<size_t>(numel_of(shape)))};
  for (int64_t i = 0; i < h.numel(); ++i) h.data[static_cast<size_t>(i)] = f(i);
  return h;
}

HostTensor host_values(const Shape& shape, std::vector<double> values) {
  EXPECT_EQ(static_cast<int64_t>(values.size()), numel_of(shape)) << "host_values: bad count for " << shape_str(shape);
  return HostTensor{shape, std::move(values)};
}

HostTensor to_host(const Tensor& t) { return HostTensor{t.sizes(), t.to_vector<double>()}; }

Tensor upload(const HostTensor& h, DType dtype, strata::Device device) {
  return strata::from_data(std::span<const double>(h.data), h.shape, {.dtype = dtype, .device = device});
}

std::vector<double> round_to(const std::vector<double>& values, DType dtype, strata::Device device) {
  Tensor t = strata::from_data(std::span<const double>(values), {static_cast<int64_t>(values.size())},
                               {.dtype = dtype, .device = device});
  return t.to_vector<double>();  // compact: a plain transfer, no kernel
}

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::contiguous:
      return "contiguous";
    case Layout::transposed:
      return "transposed";
    case Layout::strided:
      return "strided";
    case Layout::expanded:
      return "expanded";
  }
  return "?";
}

int64_t random_int(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

namespace {
HostTensor random_host(std::mt19937& rng, const Shape& shape, DType dtype, strata::Device device, double lo, double hi,
                       bool integers) {
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (double& x : v) {
    if (dtype == DType::boolean) {
      x = static_cast<double>(random_int(rng, 0, 1));
    } else if (integers || strata::is_integral(dtype)) {
      x = static_cast<double>(
          random_int(rng, static_cast<int64_t>(std::ceil(lo)), static_cast<int64_t>(std::floor(hi))));
    } else {
      x = std::uniform_real_distribution<double>(lo, hi)(rng);
    }
  }
  return HostTensor{shape, round_to(v, dtype, device)};
}
}  // namespace

Operand random_operand(std::mt19937& rng, const Shape& shape, DType dtype, strata::Device device, Layout layout,
                       double lo, double hi, bool integers) {
  const auto rank = static_cast<int64_t>(shape.size());
  if (layout == Layout::transposed && rank < 2) layout = Layout::strided;
  if (rank == 0) layout = Layout::contiguous;
  switch (layout) {
    case Layout::contiguous: {
      HostTensor h = random_host(rng, shape, dtype, device, lo, hi, integers);
      return {h, upload(h, dtype, device)};
    }
    case Layout::transposed: {  // stored with all dims reversed, viewed back
      HostTensor h = random_host(rng, shape, dtype, device, lo, hi, integers);
      Shape rev(shape.size());
      for (int64_t d = 0; d < rank; ++d) rev[static_cast<size_t>(d)] = rank - 1 - d;
      return {h, upload(permute(h, rev), dtype, device).permute(rev)};
    }
    case Layout::strided: {  // every other element of the last dim, offset 1
      HostTensor h = random_host(rng, shape, dtype, device, lo, hi, integers);
      Shape big = shape;
      int64_t n = shape.back();
      big.back() = 2 * n + 1;
      HostTensor storage = generate(big, [](int64_t) { return 97.0; });  // sentinel: must never be read
      for (int64_t i = 0; i < h.numel(); ++i) {
        Shape idx = unravel(i, shape);
        idx.back() = 2 * idx.back() + 1;
        storage.data[static_cast<size_t>(ravel(idx, big))] = h.data[static_cast<size_t>(i)];
      }
      return {h, upload(storage, dtype, device).slice(-1, 1, 2 * n + 1, 2)};
    }
    case Layout::expanded: {  // a smaller tensor broadcast with stride-0 dims
      Shape small = rank == 1 ? Shape{1} : Shape(shape.begin() + 1, shape.end());
      if (rank >= 3) small[0] = 1;
      HostTensor s = random_host(rng, small, dtype, device, lo, hi, integers);
      return {broadcast_to(s, shape), upload(s, dtype, device).expand(shape)};
    }
  }
  return {};
}

Shape random_shape(std::mt19937& rng, int min_rank, int max_rank, int64_t max_dim, bool allow_empty) {
  Shape s(static_cast<size_t>(random_int(rng, min_rank, max_rank)));
  for (int64_t& d : s) d = random_int(rng, allow_empty ? 0 : 1, max_dim);
  return s;
}

std::vector<Shape> test_shapes(std::mt19937& rng, int n_random) {
  std::vector<Shape> shapes{{}, {1}, {0}, {3, 0, 2}, {2, 3}};
  for (int i = 0; i < n_random; ++i) shapes.push_back(random_shape(rng, 1, 4, 5));
  return shapes;
}

HostTensor map(const HostTensor& x, const std::function<double(double)>& f) {
  HostTensor y = x;
  for (double& v : y.data) v = f(v);
  return y;
}

Shape broadcast_shape(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t k = 0; k < rank; ++k) {
    int64_t da = k < rank - a.size() ? 1 : a[k - (rank - a.size())];
    int64_t db = k < rank - b.size() ? 1 : b[k - (rank - b.size())];
    EXPECT_TRUE(da == db || da == 1 || db == 1) << "reference: shapes do not broadcast";
    out[k] = da == 1 ? db : da;
  }
  return out;
}

HostTensor broadcast_to(const HostTensor& x, const Shape& shape) {
  return generate(shape, [&](int64_t i) { return broadcast_at(x, unravel(i, shape)); });
}

HostTensor zip(const HostTensor& a, const HostTensor& b, const std::function<double(double, double)>& f) {
  Shape shape = broadcast_shape(a.shape, b.shape);
  return generate(shape, [&](int64_t i) {
    Shape idx = unravel(i, shape);
    return f(broadcast_at(a, idx), broadcast_at(b, idx));
  });
}

HostTensor where(const HostTensor& cond, const HostTensor& a, const HostTensor& b) {
  Shape shape = broadcast_shape(broadcast_shape(cond.shape, a.shape), b.shape);
  return generate(shape, [&](int64_t i) {
    Shape idx = unravel(i, shape);
    return broadcast_at(cond, idx) != 0.0 ? broadcast_at(a, idx) : broadcast_at(b, idx);
  });
}

HostTensor permute(const HostTensor& x, const Shape& dims) {
  Shape shape(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) shape[d] = x.shape[static_cast<size_t>(dims[d])];
  return generate(shape, [&](int64_t i) {
    Shape idx = unravel(i, shape);
    Shape src(dims.size());
    for (size_t d = 0; d < dims.size(); ++d) src[static_cast<size_t>(dims[d])] = idx[d];
    return x.at(src);
  });
}

HostTensor reduce(const HostTensor& x, Shape dims, bool keepdim, Reduce kind) {
  const auto rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0) {  // a scalar reduces to itself (argmax: index 0)
    double v = x.data[0];
    if (kind == Reduce::argmax || kind == Reduce::argmin) v = 0.0;
    return HostTensor{{}, {v}};
  }
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  }
  dims = normalized(dims, rank);
  Shape kept = x.shape;
  int64_t count = 1;
  for (int64_t d : dims) {
    count *= kept[static_cast<size_t>(d)];
    kept[static_cast<size_t>(d)] = 1;
  }
  double init = 0.0;
  if (kind == Reduce::prod) init = 1.0;
  if (kind == Reduce::max || kind == Reduce::argmax) init = -std::numeric_limits<double>::infinity();
  if (kind == Reduce::min || kind == Reduce::argmin) init = std::numeric_limits<double>::infinity();
  HostTensor acc{kept, std::vector<double>(static_cast<size_t>(numel_of(kept)), init)};
  std::vector<double> arg(acc.data.size(), 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    Shape idx = unravel(i, x.shape);
    int64_t along = idx[static_cast<size_t>(dims[0])];
    for (int64_t d : dims) idx[static_cast<size_t>(d)] = 0;
    auto o = static_cast<size_t>(ravel(idx, kept));
    double v = x.data[static_cast<size_t>(i)];
    switch (kind) {
      case Reduce::sum:
      case Reduce::mean:
        acc.data[o] += v;
        break;
      case Reduce::prod:
        acc.data[o] *= v;
        break;
      case Reduce::max:
        acc.data[o] = std::max(acc.data[o], v);
        break;
      case Reduce::min:
        acc.data[o] = std::min(acc.data[o], v);
        break;
      case Reduce::argmax:
        if (v > acc.data[o]) acc.data[o] = v, arg[o] = static_cast<double>(along);
        break;
      case Reduce::argmin:
        if (v < acc.data[o]) acc.data[o] = v, arg[o] = static_cast<double>(along);
        break;
    }
  }
  if (kind == Reduce::mean) {
    for (double& v : acc.data) v /= static_cast<double>(count);
  }
  if (kind == Reduce::argmax || kind == Reduce::argmin) acc.data = arg;
  if (!keepdim) {
    Shape dropped;
    for (int64_t d = 0; d < rank; ++d) {
      if (!std::binary_search(dims.begin(), dims.end(), d)) dropped.push_back(x.shape[static_cast<size_t>(d)]);
    }
    acc.shape = dropped;
  }
  return acc;
}

HostTensor matmul(const HostTensor& a0, const HostTensor& b0) {
  HostTensor a = a0;
  HostTensor b = b0;
  if (a.shape.size() == 1) a.shape.insert(a.shape.begin(), 1);
  if (b.shape.size() == 1) b.shape.push_back(1);
  int64_t m = a.shape[a.shape.size() - 2];
  int64_t k = a.shape.back();
  int64_t n = b.shape.back();
  Shape batch_a(a.shape.begin(), a.shape.end() - 2);
  Shape batch_b(b.shape.begin(), b.shape.end() - 2);
  Shape batch = broadcast_shape(batch_a, batch_b);
  HostTensor ba = broadcast_to(a, [&] {
    Shape s = batch;
    s.insert(s.end(), {m, k});
    return s;
  }());
  HostTensor bb = broadcast_to(b, [&] {
    Shape s = batch;
    s.insert(s.end(), {k, n});
    return s;
  }());
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {m, n});
  HostTensor out = generate(out_shape, [&](int64_t i) {
    int64_t bi = i / std::max<int64_t>(m * n, 1);
    int64_t r = (i / std::max<int64_t>(n, 1)) % std::max<int64_t>(m, 1);
    int64_t c = i % std::max<int64_t>(n, 1);
    double s = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      s += ba.data[static_cast<size_t>((bi * m + r) * k + j)] * bb.data[static_cast<size_t>((bi * k + j) * n + c)];
    }
    return s;
  });
  if (a0.shape.size() == 1) out.shape.erase(out.shape.end() - 2);
  if (b0.shape.size() == 1) out.shape.pop_back();
  return out;
}

HostTensor index_select(const HostTensor& x, int64_t dim, const std::vector<int64_t>& index) {
  if (dim < 0) dim += static_cast<int64_t>(x.shape.size());
  Shape shape = x.shape;
  shape[static_cast<size_t>(dim)] = static_cast<int64_t>(index.size());
  return generate(shape, [&](int64_t i) {
    Shape idx = unravel(i, shape);
    idx[static_cast<size_t>(dim)] = index[static_cast<size_t>(idx[static_cast<size_t>(dim)])];
    return x.at(idx);
  });
}

HostTensor gather(const HostTensor& x, int64_t dim, const HostTensor& index) {
  if (dim < 0) dim += static_cast<int64_t>(x.shape.size());
  return generate(index.shape, [&](int64_t i) {
    Shape idx = unravel(i, index.shape);
    idx[static_cast<size_t>(dim)] = static_cast<int64_t>(index.data[static_cast<size_t>(i)]);
    return x.at(idx);
  });
}

HostTensor scatter_add(const HostTensor& base, int64_t dim, const HostTensor& index, const HostTensor& src) {
  if (dim < 0) dim += static_cast<int64_t>(base.shape.size());
  HostTensor out = base;
  for (int64_t i = 0; i < index.numel(); ++i) {
    Shape idx = unravel(i, index.shape);
    idx[static_cast<size_t>(dim)] = static_cast<int64_t>(index.data[static_cast<size_t>(i)]);
    out.data[static_cast<size_t>(ravel(idx, base.shape))] += src.data[static_cast<size_t>(i)];
  }
  return out;
}

HostTensor cat(const std::vector<HostTensor>& parts, int64_t dim) {
  if (dim < 0) dim += static_cast<int64_t>(parts[0].shape.size());
  auto d = static_cast<size_t>(dim);
  Shape shape = parts[0].shape;
  shape[d] = 0;
  for (const HostTensor& p : parts) shape[d] += p.shape[d];
  return generate(shape, [&](int64_t i) {
    Shape idx = unravel(i, shape);
    for (const HostTensor& p : parts) {
      if (idx[d] < p.shape[d]) return p.at(idx);
      idx[d] -= p.shape[d];
    }
    return std::numeric_limits<double>::quiet_NaN();
  });
}

HostTensor stack(const std::vector<HostTensor>& parts, int64_t dim) {
  if (dim < 0) dim += static_cast<int64_t>(parts[0].shape.size()) + 1;
  std::vector<HostTensor> unsqueezed = parts;
  for (HostTensor& p : unsqueezed) p.shape.insert(p.shape.begin() + dim, 1);
  return cat(unsqueezed, dim);
}

HostTensor along(const std::vector<HostTensor>& xs, int64_t dim,
                 const std::function<std::vector<double>(const std::vector<std::vector<double>>&)>& f) {
  const Shape& shape = xs[0].shape;
  HostTensor out{shape, std::vector<double>(xs[0].data.size())};
  if (shape.empty()) {  // a scalar is one lane of length 1
    std::vector<std::vector<double>> lanes;
    for (const HostTensor& x : xs) lanes.push_back({x.data[0]});
    out.data[0] = f(lanes)[0];
    return out;
  }
  if (dim < 0) dim += static_cast<int64_t>(shape.size());
  auto d = static_cast<size_t>(dim);
  for (int64_t i = 0; i < out.numel(); ++i) {
    Shape idx = unravel(i, shape);
    if (idx[d] != 0) continue;  // one visit per lane
    std::vector<std::vector<double>> lanes(xs.size());
    for (size_t k = 0; k < xs.size(); ++k) {
      for (int64_t j = 0; j < shape[d]; ++j) {
        idx[d] = j;
        lanes[k].push_back(xs[k].at(idx));
      }
    }
    std::vector<double> r = f(lanes);
    for (int64_t j = 0; j < shape[d]; ++j) {
      idx[d] = j;
      out.data[static_cast<size_t>(ravel(idx, shape))] = r[static_cast<size_t>(j)];
    }
  }
  return out;
}

HostTensor softmax(const HostTensor& x, int64_t dim) {
  return along({x}, dim, [](const std::vector<std::vector<double>>& l) {
    double m = *std::max_element(l[0].begin(), l[0].end());
    double s = 0.0;
    for (double v : l[0]) s += std::exp(v - m);
    std::vector<double> r;
    for (double v : l[0]) r.push_back(std::exp(v - m) / s);
    return r;
  });
}

HostTensor log_softmax(const HostTensor& x, int64_t dim) {
  return along({x}, dim, [](const std::vector<std::vector<double>>& l) {
    double m = *std::max_element(l[0].begin(), l[0].end());
    double s = 0.0;
    for (double v : l[0]) s += std::exp(v - m);
    std::vector<double> r;
    for (double v : l[0]) r.push_back(v - m - std::log(s));
    return r;
  });
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double normal_cdf(double x) { return 0.5 * (1.0 + std::erf(x / std::numbers::sqrt2)); }
double normal_pdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi); }
double gelu(double x) { return x * normal_cdf(x); }
double round_half_even(double x) {
  double r = std::round(x);  // half away from zero
  if (std::fabs(x - std::trunc(x)) == 0.5) r = 2.0 * std::round(x / 2.0);
  return r;
}

::testing::AssertionResult close(const Tensor& actual, const HostTensor& expected, DType dtype) {
  return close(actual, expected, dtype, tolerance(dtype));
}

::testing::AssertionResult close(const Tensor& actual, const HostTensor& expected, DType dtype, Tolerance tol) {
  if (!actual.defined()) return ::testing::AssertionFailure() << "result is an undefined tensor";
  if (actual.dtype() != dtype) {
    return ::testing::AssertionFailure() << "dtype " << strata::dtype_name(actual.dtype()) << ", expected "
                                         << strata::dtype_name(dtype);
  }
  if (actual.sizes() != expected.shape) {
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.sizes()) << ", expected "
                                         << shape_str(expected.shape);
  }
  std::vector<double> got = actual.to_vector<double>();
  int64_t bad = 0;
  int64_t worst = -1;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = expected.data[i];
    double a = got[i];
    bool ok;
    double ratio = 0.0;
    if (std::isnan(e)) {
      ok = std::isnan(a);
    } else if (std::isinf(e)) {
      ok = a == e;
    } else {
      double allowed = tol.atol + tol.rtol * std::fabs(e);
      double diff = std::fabs(a - e);
      ok = diff <= allowed;  // false for NaN
      ratio = allowed > 0.0 ? diff / allowed : diff;
    }
    if (!ok) {
      ++bad;
      if (std::isnan(ratio) || std::isinf(ratio)) ratio = std::numeric_limits<double>::max();
      if (worst < 0 || ratio > worst_ratio) worst = static_cast<int64_t>(i), worst_ratio = ratio;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  auto w = static_cast<size_t>(worst);
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements of a " << strata::dtype_name(dtype)
                                       << shape_str(expected.shape) << " result differ (rtol " << tol.rtol << ", atol "
                                       << tol.atol << "); worst at " << shape_str(unravel(worst, expected.shape))
                                       << ": got " << format(got[w]) << ", expected " << format(expected.data[w])
                                       << " (diff " << format(std::fabs(got[w] - expected.data[w])) << ")";
}

}  // namespace strata_test
