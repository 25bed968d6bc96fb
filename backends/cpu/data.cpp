// data.cpp — copy, cast and fill (docs/ops.md, "Data movement").
#include "data.hpp"

#include "complex.hpp"
#include "elementwise.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

namespace strata::cpu {
namespace {

/// 16 bytes (c128) as one trivially copyable word.
struct Word16 {
  uint64_t low, high;
};

/// Unsigned integer of a storage type's size: copies move bits, not values.
template <size_t Bytes>
using word_t = std::conditional_t<
    Bytes == 1, uint8_t,
    std::conditional_t<Bytes == 2, uint16_t,
                       std::conditional_t<Bytes == 4, uint32_t, std::conditional_t<Bytes == 8, uint64_t, Word16>>>>;

template <class W>
void copy_words(const strata_tensor& dst, const strata_tensor& src, int threads) {
  W* const y = data<W>(dst);
  const W* const x = data<const W>(src);
  const int64_t n = plugin::numel(dst);
  if (all_contiguous(dst, src)) {
    parallel_for(n, threads, [&](int64_t b, int64_t e) { std::memcpy(y + b, x + b, (e - b) * sizeof(W)); });
    return;
  }
  const Layout<2> l = make_layout<2>(dst.rank, dst.shape, {dst.strides, src.strides});
  parallel_runs(l, threads, 1, [&](const int64_t* off, int64_t count) {
    const int64_t ys = l.inner_stride(0);
    const int64_t xs = l.inner_stride(1);
    if (ys == 1 && xs == 1) {
      std::memcpy(y + off[0], x + off[1], count * sizeof(W));
    } else {
      for (int64_t i = 0; i < count; ++i) y[off[0] + i * ys] = x[off[1] + i * xs];
    }
  });
}

template <class W>
void fill_words(const strata_tensor& dst, W value, int threads) {
  W* const y = data<W>(dst);
  const int64_t n = plugin::numel(dst);
  if (plugin::is_contiguous(dst)) {
    parallel_for(n, threads, [&](int64_t b, int64_t e) { std::fill(y + b, y + e, value); });
    return;
  }
  const Layout<1> l = make_layout<1>(dst.rank, dst.shape, {dst.strides});
  parallel_runs(l, threads, 1, [&](const int64_t* off, int64_t count) {
    const int64_t s = l.inner_stride(0);
    for (int64_t i = 0; i < count; ++i) y[off[0] + i * s] = value;
  });
}

template <class T>
struct Copy {
  static constexpr const char* name = STRATA_OP_COPY;
  using signature = T(T);
  static constexpr uint32_t flags = kStrided;  // and the output may be strided too
  static strata_status run(const KernelCall& call) {
    if (!same_shape(call.in(0), call.out())) {
      return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: input %s and output %s shapes differ", name,
                  plugin::describe(call.in(0)).c_str(), plugin::describe(call.out()).c_str());
    }
    copy_words<word_t<sizeof(T)>>(call.out(), call.in(0), call.threads);
    return STRATA_OK;
  }
};

template <class To>
struct CastTo {
  static constexpr const char* name = STRATA_OP_CAST;
  static constexpr int64_t cost = 2;
  template <class C>
  compute_t<To> operator()(C v) const {
    return convert<compute_t<To>>(v);
  }

  /// The target dtype is the kernel's output; a "dtype" attribute (kind
  /// DTYPE), when the host sends one, must agree with it.
  template <class From>
  static strata_status validate(const KernelCall& call) {
    const int64_t dtype = plugin::attr_int(call.abi, "dtype", Scalar<To>::dtype);
    if (dtype == Scalar<To>::dtype) return STRATA_OK;
    return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: attribute 'dtype' is %s but the output is %s", name,
                dtype >= 0 && dtype < STRATA_DTYPE_COUNT ? plugin::dtype_name(static_cast<strata_dtype>(dtype)) : "?",
                Scalar<To>::name());
  }
};

/// The "value" of fill as storage type T: an exact SCALAR (I64 and BOOL in
/// `i`, F64 in `f`), or a FLOAT or INT attribute. Integers are converted from
/// `i` directly, so an i64 fill beyond 2^53 stays exact.
template <class T>
strata_status fill_value(const KernelCall& call, const char* op, T& value) {
  const strata_attr* a = plugin::find_attr(call.abi, "value");
  if (a == nullptr) return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: missing attribute 'value'", op);
  switch (a->kind) {
    case STRATA_ATTR_SCALAR:
      if (a->scalar_dtype == STRATA_F64) {
        value = store_from<T>(a->f);
      } else if (a->scalar_dtype == STRATA_I64 || a->scalar_dtype == STRATA_BOOL) {
        value = store_from<T>(a->i);
      } else {
        return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT,
                    "%s: attribute 'value' is a SCALAR of dtype %s (expected i64, f64 or bool)", op,
                    plugin::dtype_name(a->scalar_dtype));
      }
      return STRATA_OK;
    case STRATA_ATTR_FLOAT: value = store_from<T>(a->f); return STRATA_OK;
    case STRATA_ATTR_INT:
    case STRATA_ATTR_BOOL: value = store_from<T>(a->i); return STRATA_OK;
    default:  // throws std::invalid_argument naming op, attribute and kinds
      plugin::attr_of_kind(call.abi, "value", STRATA_ATTR_SCALAR);
      return STRATA_ERROR_INTERNAL;  // not reached
  }
}

template <class T>
struct Fill {
  static constexpr const char* name = STRATA_OP_FILL;
  using signature = T();
  static constexpr uint32_t flags = kStrided;
  static strata_status run(const KernelCall& call) {
    T value{};
    if (const strata_status s = fill_value<T>(call, name, value); s != STRATA_OK) return s;
    using W = word_t<sizeof(T)>;
    fill_words<W>(call.out(), std::bit_cast<W>(value), call.threads);
    return STRATA_OK;
  }
};

}  // namespace

void copy_tensor(const strata_tensor& dst, const strata_tensor& src, int threads) {
  switch (plugin::dtype_size(dst.dtype)) {
    case 1: copy_words<uint8_t>(dst, src, threads); break;
    case 2: copy_words<uint16_t>(dst, src, threads); break;
    case 4: copy_words<uint32_t>(dst, src, threads); break;
    case 8: copy_words<uint64_t>(dst, src, threads); break;
    default: copy_words<Word16>(dst, src, threads); break;
  }
}

strata_tensor compact_tensor(void* ptr, strata_dtype dtype, int rank, const int64_t* shape) {
  strata_tensor t{};
  t.struct_size = sizeof(strata_tensor);
  t.buffer = static_cast<strata_buffer>(ptr);
  t.dtype = dtype;
  t.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = stride;
    stride *= shape[d];
  }
  return t;
}

void register_data_kernels(plugin::KernelTable& table) {
  for_each_type(AllTypes{}, [&]<class T>() {
    add<Copy<T>>(table);
    add<Fill<T>>(table);
    for_each_type(AllTypes{}, [&]<class From>() { add<Elementwise<CastTo<T>, T, From>>(table); });
  });
  // Complex: from every dtype (a real value gets imaginary part 0); never to
  // a real one, which the core refuses (docs/complex.md).
  for_each_type(ComplexTypes{}, [&]<class T>() {
    add<Copy<T>>(table);
    add<Fill<T>>(table);
    for_each_type(AllTypes{}, [&]<class From>() { add<Elementwise<CastTo<T>, T, From>>(table); });
    for_each_type(ComplexTypes{}, [&]<class From>() { add<Elementwise<CastTo<T>, T, From>>(table); });
  });
}

}  // namespace strata::cpu
