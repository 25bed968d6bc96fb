// views_test.cpp — views share storage and have the right shape, strides and
// offset; writes through copy_ into a view reach the base; contiguous, clone,
// to(dtype), to(Device), item and slice bounds.
#include <algorithm>

#include "reference.hpp"

#include "../common/test_device.hpp"


namespace strata_test {
namespace {

namespace s = strata;
using s::DType;

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
Shape strides(const Tensor& t) { return Shape(t.strides().begin(), t.strides().end()); }
/// 0, 1, ..., n-1 as f32 of `shape`.
Tensor iota(const Shape& shape) {
  return s::arange(0.0, static_cast<double>(numel_of(shape)), 1.0, {.dtype = s::f32, .device = {}}).reshape(shape);
}
std::vector<double> iota_values(int64_t n, double start = 0.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i);
  return v;
}

/// Writes through `view` and checks that exactly its elements changed in
/// `base` (storage is shared), then restores `base` (contiguous).
void expect_shares_storage(Tensor base, Tensor view) {
  std::vector<double> before = values(base);
  view.copy_(s::full_like(view, -100.0));
  std::vector<double> after = values(base);
  EXPECT_EQ(std::count(after.begin(), after.end(), -100.0), view.numel())
      << "writing through the view did not reach the base";
  base.copy_(s::from_data(std::span<const double>(before), base.sizes(), {.dtype = base.dtype(), .device = {}}));
  EXPECT_EQ(values(base), before);
}

TEST(Views, ReshapeAndViewShareStorage) {
  Tensor a = iota({2, 3});
  Tensor r = a.reshape({3, 2});
  EXPECT_EQ(strides(r), (Shape{2, 1}));
  EXPECT_EQ(values(r), iota_values(6));
  Tensor v = a.view({-1});
  EXPECT_EQ(v.sizes(), (Shape{6}));
  EXPECT_EQ(strides(v), (Shape{1}));
  Tensor v3 = a.view({1, 2, 1, 3});
  EXPECT_EQ(v3.sizes(), (Shape{1, 2, 1, 3}));
  v.slice(0, 4, 5).copy_(s::scalar_tensor(42.0));
  EXPECT_EQ(values(a)[4], 42.0);
  EXPECT_EQ(values(r)[4], 42.0);
  EXPECT_EQ(values(v3)[4], 42.0);
  expect_shares_storage(a, r);
  EXPECT_TRUE(throws<s::ShapeError>([&] { a.reshape({4, 2}); }, {"reshape", "[2, 3]", "[4, 2]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { a.view({-1, -1}); }, {"view", "-1"}));
}

TEST(Views, ViewRefusesNonViewableStridesAndReshapeCopies) {
  Tensor a = iota({2, 3});
  Tensor t = a.mT();  // [3, 2], strides [1, 3]
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(throws<s::ShapeError>([&] { t.view({6}); }, {"view", "[6]", "[3, 2]", "reshape"}));
  Tensor r = t.reshape({6});  // a copy, in the transposed order
  EXPECT_EQ(values(r), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(r.is_contiguous());
  r.copy_(s::zeros_like(r));
  EXPECT_EQ(values(a), iota_values(6)) << "reshape of a non-viewable tensor must copy";
  // Splitting a dim of a transposed tensor is still a view.
  Tensor b = iota({4, 3}).mT();  // [3, 4], strides [1, 3]
  Tensor split = b.view({3, 2, 2});
  EXPECT_EQ(strides(split), (Shape{1, 6, 3}));
}

TEST(Views, ScalarsReshape) {
  // A 0-d tensor has one element: it views as any all-ones shape and back.
  Tensor x = s::scalar_tensor(3.0);
  EXPECT_CLOSE(x.reshape({1}), host_values({1}, {3.0}), s::f32);
  EXPECT_CLOSE(x.view({1, 1}), host_values({1, 1}, {3.0}), s::f32);
  EXPECT_CLOSE(x.reshape({-1}), host_values({1}, {3.0}), s::f32);
  EXPECT_CLOSE(x.flatten(), host_values({1}, {3.0}), s::f32);
  EXPECT_CLOSE(x.view({}), host_values({}, {3.0}), s::f32);
  EXPECT_CLOSE(x.unsqueeze(0), host_values({1}, {3.0}), s::f32);
  EXPECT_CLOSE(x.unsqueeze(0).reshape({}), host_values({}, {3.0}), s::f32);
  EXPECT_CLOSE(s::tensor({3}).reshape({1, 1, 1}).view({}), host_values({}, {3.0}), s::f32);
}

TEST(Views, PermuteTransposeMT) {
  Tensor a = iota({2, 3, 4});
  Tensor p = a.permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(strides(p), (Shape{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  // p[i, j, k] = a[j, k, i]
  EXPECT_EQ(values(p.select(0, 1).select(0, 1)), (std::vector<double>{13, 17, 21}));
  Tensor t = a.transpose(0, 2);
  EXPECT_EQ(t.sizes(), (Shape{4, 3, 2}));
  EXPECT_EQ(strides(t), (Shape{1, 4, 12}));
  Tensor m = a.mT();
  EXPECT_EQ(m.sizes(), (Shape{2, 4, 3}));
  EXPECT_EQ(strides(m), (Shape{12, 1, 4}));
  EXPECT_EQ(values(a.permute({-1, 0, 1})), values(p));
  expect_shares_storage(a, p);
  EXPECT_TRUE(throws<s::ShapeError>([&] { a.permute({0, 1}); }, {"permute", "[2, 3, 4]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { a.permute({0, 0, 1}); }, {"permute", "repeat"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { a.transpose(0, 3); }, {"dimension 3"}));
  EXPECT_TRUE(throws<s::ShapeError>([] { s::arange(3).mT(); }, {"mT", "[3]"}));
}

TEST(Views, SliceWithStep) {
  Tensor x = iota({10});
  Tensor s1 = x.slice(0, 1, 8, 3);
  EXPECT_EQ(s1.sizes(), (Shape{3}));
  EXPECT_EQ(strides(s1), (Shape{3}));
  EXPECT_EQ(s1.offset(), 1);
  EXPECT_EQ(values(s1), (std::vector<double>{1, 4, 7}));
  EXPECT_EQ(values(x.slice(0, -3, 10)), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(values(x.slice(0, 0, -8)), (std::vector<double>{0, 1}));
  EXPECT_EQ(values(x.slice(0, -10, 10, 4)), (std::vector<double>{0, 4, 8}));
  EXPECT_EQ(x.slice(0, 2, 2).numel(), 0);
  EXPECT_EQ(x.slice(0, 10, 10).numel(), 0);
  Tensor m = iota({4, 6});
  Tensor c = m.slice(1, 1, 6, 2).slice(0, 1, 4, 2);  // rows 1, 3; cols 1, 3, 5
  EXPECT_EQ(c.sizes(), (Shape{2, 3}));
  EXPECT_EQ(strides(c), (Shape{12, 2}));
  EXPECT_EQ(c.offset(), 7);
  EXPECT_EQ(values(c), (std::vector<double>{7, 9, 11, 19, 21, 23}));
  expect_shares_storage(m, c);
}

TEST(Views, OutOfRangeSlicesAreIndexErrors) {
  Tensor x = iota({10});
  EXPECT_TRUE(throws<s::IndexError>([&] { x.slice(0, 11, 12); }, {"slice", "start 11", "size 10"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { x.slice(0, 0, 11); }, {"slice", "end 11"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { x.slice(0, -11, 3); }, {"slice", "start -11"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { x.slice(0, 5, 2); }, {"slice", "end 2", "start 5"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { x.slice(0, -2, -5); }, {"slice", "precedes"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { x.slice(0, 0, 5, 0); }, {"slice", "step", "0"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { x.slice(0, 0, 5, -1); }, {"slice", "step", "-1"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { x.slice(1, 0, 1); }, {"dimension 1"}));
  EXPECT_EQ(values(x), iota_values(10)) << "a failed slice changed the tensor";
}

TEST(Views, Select) {
  Tensor m = iota({3, 4});
  Tensor col = m.select(1, 2);
  EXPECT_EQ(col.sizes(), (Shape{3}));
  EXPECT_EQ(strides(col), (Shape{4}));
  EXPECT_EQ(col.offset(), 2);
  EXPECT_EQ(values(col), (std::vector<double>{2, 6, 10}));
  EXPECT_EQ(values(m.select(0, -1)), (std::vector<double>{8, 9, 10, 11}));
  EXPECT_EQ(m.select(0, 1).select(0, 3).dim(), 0);
  EXPECT_EQ(m.select(0, 1).select(0, 3).item<double>(), 7.0);
  expect_shares_storage(m, col);
  EXPECT_TRUE(throws<s::IndexError>([&] { m.select(0, 3); }, {"select", "index 3", "size 3"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { m.select(1, -5); }, {"select", "-5"}));
}

TEST(Views, Expand) {
  Tensor c = iota({3, 1});
  Tensor e = c.expand({3, 4});
  EXPECT_EQ(e.sizes(), (Shape{3, 4}));
  EXPECT_EQ(strides(e), (Shape{1, 0}));
  EXPECT_FALSE(e.is_contiguous());
  EXPECT_EQ(values(e), (std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  Tensor lead = c.expand({2, -1, 2});
  EXPECT_EQ(lead.sizes(), (Shape{2, 3, 2}));
  EXPECT_EQ(strides(lead), (Shape{0, 1, 0}));
  EXPECT_EQ(s::scalar_tensor(5.0).expand({2, 2}).to_vector<double>(), std::vector<double>(4, 5.0));
  EXPECT_EQ(c.expand({3, 0}).numel(), 0);
  // The expanded view aliases the base: a write into the base shows in every copy.
  c.select(0, 1).copy_(s::scalar_tensor(9.0));
  EXPECT_EQ(values(e)[4], 9.0);
  EXPECT_EQ(values(e)[7], 9.0);
  EXPECT_TRUE(throws<s::ShapeError>([&] { c.expand({2, 4}); }, {"expand", "[3, 1]", "[2, 4]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { c.expand({4}); }, {"expand"}));
}

TEST(Views, SqueezeUnsqueezeFlatten) {
  Tensor a = iota({2, 1, 3, 1});
  EXPECT_EQ(a.squeeze().sizes(), (Shape{2, 3}));
  EXPECT_EQ(strides(a.squeeze()), (Shape{3, 1}));
  EXPECT_EQ(a.squeeze(1).sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(a.squeeze(-1).sizes(), (Shape{2, 1, 3}));
  EXPECT_EQ(a.squeeze(0).sizes(), (Shape{2, 1, 3, 1})) << "squeeze of a dim that is not 1 is a no-op";
  Tensor b = iota({2, 3});
  EXPECT_EQ(b.unsqueeze(0).sizes(), (Shape{1, 2, 3}));
  EXPECT_EQ(b.unsqueeze(1).sizes(), (Shape{2, 1, 3}));
  EXPECT_EQ(strides(b.unsqueeze(1)), (Shape{3, 3, 1}));
  EXPECT_EQ(b.unsqueeze(-1).sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(b.unsqueeze(2).sizes(), (Shape{2, 3, 1}));
  EXPECT_TRUE(throws<s::IndexError>([&] { b.unsqueeze(4); }, {"dimension 4"}));
  expect_shares_storage(b, b.unsqueeze(1));

  Tensor f = b.flatten();  // contiguous: a view
  EXPECT_EQ(f.sizes(), (Shape{6}));
  expect_shares_storage(b, f);
  Tensor ft = b.mT().flatten();  // transposed: a copy
  EXPECT_EQ(values(ft), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  ft.copy_(s::zeros_like(ft));
  EXPECT_EQ(values(b), iota_values(6));
}

TEST(Views, CopyIntoViewsIsVisibleInTheBase) {
  Tensor base = s::zeros({3, 4});
  base.slice(1, 0, 4, 2).copy_(s::ones({3, 2}));  // columns 0 and 2
  EXPECT_EQ(values(base), (std::vector<double>{1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0}));
  base.select(0, 1).copy_(s::tensor({5, 6, 7, 8}));  // row 1
  EXPECT_EQ(values(base), (std::vector<double>{1, 0, 1, 0, 5, 6, 7, 8, 1, 0, 1, 0}));
  base.mT().select(0, 3).copy_(s::full({3}, 9.0, {.dtype = s::i64, .device = {}}));  // column 3, cast from i64
  EXPECT_EQ(values(base), (std::vector<double>{1, 0, 1, 9, 5, 6, 7, 9, 1, 0, 1, 9}));
  base.slice(0, 2, 3).copy_(s::scalar_tensor(-1.0));  // broadcast a scalar into row 2
  EXPECT_EQ(values(base), (std::vector<double>{1, 0, 1, 9, 5, 6, 7, 9, -1, -1, -1, -1}));
  base.mT().copy_(s::tensor({0, 1, 2}).expand({4, 3}));  // strided output, broadcast input
  EXPECT_EQ(values(base), (std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { base.copy_(s::ones({2, 4})); }, {"expand", "[2, 4]", "[3, 4]"}));
  EXPECT_EQ(values(base), (std::vector<double>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2})) << "a failed copy_ wrote";
}

TEST(Views, ContiguousCopiesOnlyWhenNeeded) {
  Tensor a = iota({3, 4});
  EXPECT_EQ(a.contiguous().impl(), a.impl());
  EXPECT_EQ(a.slice(0, 1, 3).contiguous().offset(), 4) << "a contiguous slice needs no copy";
  Tensor t = a.mT();
  Tensor c = t.contiguous();
  EXPECT_NE(c.impl(), t.impl());
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(strides(c), (Shape{3, 1}));
  EXPECT_EQ(c.offset(), 0);
  EXPECT_EQ(values(c), values(t));
  c.copy_(s::zeros_like(c));
  EXPECT_EQ(values(a), iota_values(12)) << "contiguous() of a view must not alias it";
  Tensor stepped = a.slice(1, 0, 4, 2).contiguous();
  EXPECT_EQ(values(stepped), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  EXPECT_TRUE(iota({1, 5}).expand({3, 5}).contiguous().is_contiguous());
}

TEST(Views, CloneIsIndependent) {
  Tensor a = iota({2, 3});
  Tensor c = a.clone();
  EXPECT_NE(c.impl(), a.impl());
  EXPECT_EQ(values(c), values(a));
  EXPECT_EQ(c.dtype(), a.dtype());
  c.copy_(s::zeros_like(c));
  EXPECT_EQ(values(a), iota_values(6));
  Tensor ct = a.mT().clone();
  EXPECT_EQ(ct.sizes(), (Shape{3, 2}));
  EXPECT_EQ(values(ct), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Tensor copy = a;  // a handle copy shares
  copy.copy_(s::ones_like(copy));
  EXPECT_EQ(values(a), std::vector<double>(6, 1.0));
}

TEST(Views, ToDtypeAndDevice) {
  STRATA_REQUIRE_DTYPES(strata::DType::f64);
  Tensor a = s::tensor({1.5f, -2.5f, 0.0f, 3.0f});
  EXPECT_EQ(a.to(s::f32).impl(), a.impl());
  Tensor i = a.to(s::i32);
  EXPECT_EQ(i.dtype(), s::i32);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 0, 3}));
  EXPECT_EQ(a.to(s::boolean).to_vector<bool>(), (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(a.to(s::f64).to(s::f32).to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(a.to(s::f16).to_vector<double>(), (std::vector<double>{1.5, -2.5, 0.0, 3.0}));

  s::Device here = a.device();
  EXPECT_EQ(a.to(here).impl(), a.impl()) << "to() the same device must be a no-op";
  for (const s::DeviceInfo& d : s::runtime().devices()) {
    Tensor t = a.reshape({1, 4}).expand({2, 4}).to(d.device);  // strided source
    EXPECT_TRUE(t.device() == d.device);
    Tensor back = t.to(here);
    EXPECT_TRUE(back.device() == here);
    EXPECT_EQ(back.sizes(), (Shape{2, 4}));
    EXPECT_EQ(back.to_vector<float>(), (std::vector<float>{1.5f, -2.5f, 0, 3, 1.5f, -2.5f, 0, 3})) << d.id;
  }
  EXPECT_TRUE(s::Device("cpu") == s::Device("cpu:0"));
  EXPECT_EQ(s::Device("cpu:0").str(), "cpu:0");
  EXPECT_EQ(s::Device("cpu:0").backend(), "cpu");
  EXPECT_TRUE(throws<s::DeviceError>([] { s::Device("nosuchdevice:3"); }, {"nosuchdevice:3", "cpu:0"}));
}

TEST(Views, Item) {
  EXPECT_EQ(s::tensor({2.5f}).item<float>(), 2.5f);
  EXPECT_EQ(s::tensor({2.5f}).reshape({1, 1}).item<double>(), 2.5);
  EXPECT_EQ(s::tensor({-7.9f}).item<int64_t>(), -7);
  EXPECT_EQ(s::full({}, 1.0, {.dtype = s::boolean, .device = {}}).item<bool>(), true);
  EXPECT_EQ(iota({3, 4}).select(0, 2).select(0, 1).item<int32_t>(), 9);
  EXPECT_TRUE(throws<s::ShapeError>([] { s::tensor({1, 2, 3}).item<float>(); }, {"item", "[3]"}));
  EXPECT_TRUE(throws<s::ShapeError>([] { s::zeros({0}).item<float>(); }, {"item", "[0]"}));
  EXPECT_TRUE(throws<s::ShapeError>([] { s::zeros({2, 2}).item<double>(); }, {"item", "[2, 2]", "4"}));
}

// The descriptor of a tensor holds at most STRATA_MAX_RANK (8) dims: views
// that would make more are ShapeErrors naming the view and the shape.
TEST(Views, RankAboveTheMaximumIsAShapeError) {
  Tensor x = iota({6});
  Tensor eight = iota({1, 1, 1, 1, 1, 1, 2, 3});
  const char* nine = "[1, 1, 1, 1, 1, 1, 1, 2, 3]";
  const char* limit = "rank 9 exceeds the maximum rank 8";
  EXPECT_TRUE(throws<s::ShapeError>([&] { x.reshape({1, 1, 1, 1, 1, 1, 1, 2, 3}); }, {"reshape", limit, nine}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { x.view({1, 1, 1, 1, 1, 1, 1, 2, -1}); }, {"view", limit}));
  Tensor strided = iota({3, 2}).mT();  // reshape copies it: the check comes first all the same
  EXPECT_TRUE(throws<s::ShapeError>([&] { strided.reshape({1, 1, 1, 1, 1, 1, 1, 2, 3}); }, {"reshape", limit}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { eight.unsqueeze(0); }, {"unsqueeze", limit, nine}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { eight.expand({1, 1, 1, 1, 1, 1, 1, 2, 3}); }, {"expand", limit, nine}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::stack({eight, eight}); }, {"stack", limit}));
  // Nothing changed, and rank 8 is fine.
  EXPECT_EQ(x.sizes(), (Shape{6}));
  EXPECT_EQ(values(x), iota_values(6));
  EXPECT_EQ(eight.select(0, 0).unsqueeze(-1).dim(), 8);
  EXPECT_EQ(values(s::sum(x.reshape({1, 1, 1, 1, 1, 1, 2, 3}))), (std::vector<double>{15.0}));
}

// Element counts that overflow int64 are ShapeErrors, not wrapped-round
// geometry: reshape of 4 elements into [2^62 + 1, 4, -1] used to succeed
// (the product wraps round to 4) and read far past the storage.
TEST(Views, ShapesThatOverflowAreShapeErrors) {
  const int64_t big = int64_t{1} << 62;
  Tensor x = iota({4});
  EXPECT_TRUE(throws<s::ShapeError>([&] { x.reshape({big + 1, 4, -1}); },
                                    {"reshape", "[4611686018427387905, 4, -1]", "overflows"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { x.reshape({big + 1, 4}); }, {"reshape", "[4611686018427387905, 4]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { x.view({-1, big, 4}); }, {"view", "[-1, 4611686018427387904, 4]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::zeros({0}).reshape({big, 8, 0}); }, {"reshape", "overflows"}));
  Tensor one = iota({1, 1});
  EXPECT_TRUE(throws<s::ShapeError>([&] { one.expand({big + 1, 4}); },
                                    {"expand", "[4611686018427387905, 4]", "overflows"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { one.expand({big, 4}); }, {"expand", "[4611686018427387904, 4]"}));
  // Its size in bytes (f32) overflows: 2^62 elements fit, 2^64 bytes do not.
  EXPECT_TRUE(throws<s::ShapeError>([&] { one.expand({big, 1}); }, {"expand", "[4611686018427387904, 1]", "bytes"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { one.expand({-2, 1}); }, {"expand", "[-2, 1]"}));
  // Nothing changed; a large expand that fits is still a view.
  EXPECT_EQ(values(x), iota_values(4));
  Tensor wide = one.expand({int64_t{1} << 40, 2});
  EXPECT_EQ(wide.numel(), int64_t{1} << 41);
  EXPECT_EQ(strides(wide), (Shape{0, 0}));
  EXPECT_EQ(values(x.reshape({2, -1})), iota_values(4));
}

TEST(Views, UndefinedTensor) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_EQ(u.to_string(), "tensor(undefined)");
  EXPECT_THROW(u.dim(), s::Error);
  EXPECT_THROW(s::add(u, s::ones({1})), s::Error);
}

}  // namespace
}  // namespace strata_test
