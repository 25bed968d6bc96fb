// errors_test.cpp — every rejected call throws the documented exception type
// with a message that names the op and the offending shapes, dtypes, dims,
// indices or devices.
#include <limits>
#include <string>

#include "device_fixture.hpp"

namespace strata_test {
namespace {

namespace s = strata;
using s::DType;

class Errors : public DeviceTest {};
STRATA_INSTANTIATE_ON_DEVICES(Errors);

TEST_P(Errors, ShapeMismatchInAddNamesOpAndShapes) {
  Tensor a = make({2, 3}, {1, 2, 3, 4, 5, 6}, s::f32);
  Tensor b = make({4}, {1, 2, 3, 4}, s::f32);
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::add(a, b); }, {"add", "[2, 3]", "[4]", dev().str()}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { (void)(b * a); }, {"mul", "[2, 3]", "[4]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::where(s::gt(a, a), a, b); }, {"where", "[2, 3]", "[4]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::eq(make({3, 2}, {1, 2, 3, 4, 5, 6}, s::f32), a); }, {"eq", "[3, 2]"}));
}

TEST_P(Errors, MatmulShapes) {
  Tensor a = make({2, 3}, {1, 2, 3, 4, 5, 6}, s::f32);
  Tensor b = make({4, 5}, std::vector<double>(20, 1.0), s::f32);
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::matmul(a, b); }, {"matmul", "[2, 3]", "[4, 5]", "3 != 4"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::matmul(make({4}, {1, 2, 3, 4}, s::f32), a); }, {"matmul"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::matmul(make({}, {1}, s::f32), a); }, {"matmul", "[]"}));
  // Batch dims 2 and 3 do not broadcast.
  Tensor x = make({2, 3, 4}, std::vector<double>(24, 1.0), s::f32);
  Tensor y = make({3, 4, 5}, std::vector<double>(60, 1.0), s::f32);
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::matmul(x, y); }, {"matmul", "[2]", "[3]"}));
}

TEST_P(Errors, DtypesAnOpDoesNotAccept) {
  Tensor t = make({3}, {1, 0, 1}, s::boolean);
  EXPECT_TRUE(throws<s::DTypeError>([&] { s::add(t, t); }, {"add", "bool"}));
  EXPECT_TRUE(throws<s::DTypeError>([&] { s::sub(t, t); }, {"sub", "bool"}));
  EXPECT_TRUE(throws<s::DTypeError>([&] { s::lt(t, t); }, {"lt", "bool"}));
  EXPECT_TRUE(throws<s::DTypeError>([&] { s::neg(t); }, {"neg", "bool"}));
  EXPECT_TRUE(throws<s::DTypeError>([&] { s::amax(t); }, {"max", "bool"}));
  EXPECT_TRUE(throws<s::DTypeError>([&] { s::argmin(t, 0); }, {"argmin", "bool"}));
  if (runs(s::i32)) {
    Tensor i = make({2, 2}, {1, 2, 3, 4}, s::i32);
    EXPECT_TRUE(throws<s::DTypeError>([&] { s::matmul(i, i); }, {"matmul", "i32"}));
  }
  Tensor x = make({3}, {1, 2, 3}, s::f32);
  EXPECT_TRUE(throws<s::DTypeError>([&] { s::index_select(x, 0, make({1}, {0}, s::f32)); }, {"index_select", "f32"}));
  EXPECT_TRUE(throws<s::DTypeError>([&] { s::gather(x, 0, make({1}, {0}, s::boolean)); }, {"gather", "bool"}));
  EXPECT_TRUE(throws<s::DTypeError>([] { s::rand({2}, {.dtype = s::i64, .device = {}}); }, {"rand"}));
}

TEST_P(Errors, TensorsOnTwoDevices) {
  s::Device other;
  for (const s::DeviceInfo& d : s::runtime().devices()) {
    if (!(d.device == dev())) {
      other = d.device;
      break;
    }
  }
  if (!other.valid()) GTEST_SKIP() << "only one device (" << dev().str() << ") is loaded; need a second one";
  Tensor a = make({2}, {1, 2}, s::f32);
  Tensor b = upload(host_values({2}, {3, 4}), s::f32, other);
  EXPECT_TRUE(throws<s::DeviceError>([&] { s::add(a, b); }, {"add", dev().str(), other.str()}));
  EXPECT_TRUE(throws<s::DeviceError>([&] { s::matmul(b, a); }, {"matmul", dev().str(), other.str()}));
  EXPECT_TRUE(throws<s::DeviceError>([&] { s::cat({a, b}); }, {"cat", dev().str(), other.str()}));
  EXPECT_TRUE(throws<s::DeviceError>([&] { a.copy_(b); }, {dev().str(), other.str()}));
  // Explicit moves work.
  EXPECT_CLOSE(s::add(a, b.to(dev())), host_values({2}, {4, 6}), s::f32);
}

TEST_P(Errors, IndexOutOfRangeIsAnErrorNamingTheIndex) {
  Tensor x = make({3, 2}, {1, 2, 3, 4, 5, 6}, s::f32);
  EXPECT_TRUE(data_error([&] { s::index_select(x, 0, make({3}, {0, 5, 1}, s::i64)); }, dev(),
                         {"index_select", "5", "out of range"}));
  EXPECT_TRUE(data_error([&] { s::index_select(x, 1, make({2}, {-1, 0}, s::i64)); }, dev(), {"index_select", "-1"}));
  EXPECT_TRUE(data_error([&] { s::gather(x, 1, make({3, 1}, {0, 1, 7}, s::i64)); }, dev(), {"gather", "7"}));
  EXPECT_TRUE(data_error(
      [&] { s::scatter_add(x, 0, make({1, 2}, {3, 0}, s::i64), make({1, 2}, {1, 1}, s::f32)); }, dev(),
      {"scatter_add", "3"}));
  // The device carries on after the error.
  EXPECT_CLOSE(s::index_select(x, 0, make({1}, {2}, s::i64)), host_values({1, 2}, {5, 6}), s::f32);
}

TEST_P(Errors, DimensionsOutOfRangeAreIndexErrors) {
  Tensor x = make({2, 3}, {1, 2, 3, 4, 5, 6}, s::f32);
  // Errors name the op (error.hpp), so the message should say "sum".
  EXPECT_TRUE(throws<s::IndexError>([&] { s::sum(x, {5}); }, {"sum", "dimension 5", "out of range", "rank 2"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { s::sum(x, {-3}); }, {"-3", "out of range"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { s::mean(x, {0, -2}); }, {"repeat"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { s::argmax(x, 2); }, {"dimension 2"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { s::softmax(x, -3); }, {"dimension -3"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { s::index_select(x, 2, make({1}, {0}, s::i64)); }, {"dimension 2"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { s::cat({x, x}, 2); }, {"dimension 2"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { s::stack({x, x}, 3); }, {"dimension 3"}));
  EXPECT_TRUE(throws<s::IndexError>([&] { s::sum(make({}, {1}, s::f32), {1}); }, {"dimension 1"}));
}

TEST_P(Errors, IndexingAndJoiningShapes) {
  Tensor x = make({2, 3}, {1, 2, 3, 4, 5, 6}, s::f32);
  EXPECT_TRUE(throws<s::ShapeError>(
      [&] {
        s::index_select(x, 0, make({1, 1}, {0}, s::i64));
      },
      {"index_select", "1-D", "[1, 1]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::gather(x, 0, make({2}, {0, 1}, s::i64)); }, {"gather", "rank"}));
  EXPECT_TRUE(throws<s::ShapeError>(
      [&] {
        s::gather(x, 0, make({1, 4}, {0, 0, 0, 0}, s::i64));
      },
      {"gather", "[1, 4]", "[2, 3]"}));
  EXPECT_TRUE(throws<s::ShapeError>(
      [&] {
        s::scatter_add(x, 0, make({1, 2}, {0, 1}, s::i64), make({1, 3}, {1, 1, 1}, s::f32));
      },
      {"scatter_add", "[1, 2]", "[1, 3]"}));
  Tensor y = make({3, 2}, {1, 2, 3, 4, 5, 6}, s::f32);
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::cat({x, y}, 0); }, {"cat", "[3, 2]", "[2, 3]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::cat({x, make({3}, {1, 2, 3}, s::f32)}); }, {"cat", "[3]"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::stack({x, y}); }, {"stack", "[2, 3]", "[3, 2]"}));
  EXPECT_TRUE(throws<s::ShapeError>([] { s::cat({}); }, {"cat"}));
}

// Results whose element count or size in bytes would overflow int64 are
// ShapeErrors naming the op and the shapes (they used to wrap round into
// tiny or empty blocks), and results that need more than the device has are
// OutOfMemoryErrors naming the op, the bytes and the device.
TEST_P(Errors, ResultShapesThatOverflowAreShapeErrors) {
  // Broadcasting [2^60, 1] against [1, 16] (the first an expanded view of one element).
  const DType narrow = stores(s::i32) ? s::i32 : s::f32;  // 4 bytes either way
  Tensor tall = make({1, 1}, {2}, narrow).expand({int64_t{1} << 60, 1});
  Tensor row = make({1, 16}, std::vector<double>(16, 1.0), narrow);
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::add(tall, row); },
                                    {"add", "[1152921504606846976, 1]", "[1, 16]", "overflows", dev().str()}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::where(s::gt(row, row), tall, row); }, {"where", "overflows"}));
  // matmul of two empty operands whose output is [2^32, 2^32].
  Tensor a = s::zeros({int64_t{1} << 32, 0}, {.dtype = s::f32, .device = dev()});
  Tensor b = s::zeros({0, int64_t{1} << 32}, {.dtype = s::f32, .device = dev()});
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::matmul(a, b); },
                                    {"matmul", "[4294967296, 0]", "[4294967296, 4294967296]", "overflows"}));
  // cat and pad: the joined size along a dim overflows.
  Tensor half = make({1}, {1}, s::f32).expand({int64_t{1} << 60});
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::cat({half, half, half, half, half, half, half, half}); },
                                    {"cat", "[1152921504606846976]", "overflows"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::cat({half, half}); }, {"cat", "[2305843009213693952]", "bytes"}));
  EXPECT_TRUE(throws<s::ShapeError>([&] { s::pad(half, {0, std::numeric_limits<int64_t>::max()}); },
                                    {"pad", "[1152921504606846976]", "overflows"}));
  // Fits int64 but no device: 2^60 f32 elements, 4 EiB.
  Tensor c = s::zeros({int64_t{1} << 30, 0}, {.dtype = s::f32, .device = dev()});
  Tensor d = s::zeros({0, int64_t{1} << 30}, {.dtype = s::f32, .device = dev()});
  EXPECT_TRUE(
      throws<s::OutOfMemoryError>([&] { s::matmul(c, d); }, {"matmul", "4611686018427387904 bytes", dev().str()}));
  // Inputs unchanged; the runtime still works.
  EXPECT_EQ(tall.sizes(), (Shape{int64_t{1} << 60, 1}));
  EXPECT_CLOSE(s::add(row, row), host_values({1, 16}, std::vector<double>(16, 2.0)), narrow);
}

TEST_P(Errors, FailedOpsLeaveInputsUnchanged) {
  Operand a = operand({2, 3}, s::f32, Layout::transposed);
  Operand b = operand({4}, s::f32);
  Tensor idx = make({2}, {0, 9}, s::i64);
  Tensor base = make({3}, {1, 2, 3}, s::f32);
  EXPECT_THROW(s::add(a.dev, b.dev), s::ShapeError);
  EXPECT_THROW(s::matmul(a.dev, b.dev), s::ShapeError);
  EXPECT_TRUE(data_error([&] { s::scatter_add(base, 0, idx, make({2}, {5, 5}, s::f32)); }, dev(), {"scatter_add", "9"}));
  EXPECT_CLOSE(a.dev, a.host, s::f32, {0.0, 0.0});
  EXPECT_CLOSE(b.dev, b.host, s::f32, {0.0, 0.0});
  EXPECT_CLOSE(base, host_values({3}, {1, 2, 3}), s::f32, {0.0, 0.0});
  EXPECT_EQ(a.dev.sizes(), (Shape{2, 3}));
  EXPECT_FALSE(a.dev.is_contiguous());
  // The runtime still works after the failures.
  EXPECT_CLOSE(s::add(a.dev, a.dev), map(a.host, [](double v) { return 2 * v; }), s::f32);
}

}  // namespace
}  // namespace strata_test
