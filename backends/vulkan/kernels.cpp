// kernels.cpp — helpers shared by the kernel sources and the kernel table.
#include "kernels.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace strata::vulkan {

std::string describe(const strata_tensor& t) {
  std::string s = tag(t.dtype);
  s += "[";
  for (int32_t d = 0; d < t.rank; ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(t.shape[d]);
  }
  return s + "]";
}

VkDeviceAddress address_of(const strata_tensor& t) {
  const auto* b = reinterpret_cast<const Buffer*>(t.buffer);
  return b->address() + static_cast<VkDeviceAddress>(t.offset) * plugin::dtype_size(t.dtype);
}

namespace {

/// Views of 2^31 elements or more are declined: the shaders count elements
/// in 32-bit unsigned integers and their grid-stride loops (i += step, step
/// < 2^31) must not wrap. Offsets within a view may reach 2^32 - 2.
constexpr uint64_t kMaxElements = uint64_t{1} << 31;
constexpr uint64_t kMaxSpan = (uint64_t{1} << 32) - 1;

/// Appends the call's operands to a message that came from the device layer
/// ("vulkan:0: vkQueueSubmit failed ..."), so that it names op, dtypes and shapes.
strata_status with_operands(const Call& call, strata_status status) {
  if (call.error == nullptr) return status;
  std::string operands;
  for (int32_t k = 0; k < call.n_in; ++k) operands += (k > 0 ? ", " : "") + describe(call.in[k]);
  operands += " -> " + describe(call.out);
  const size_t used = std::strlen(call.error->message);
  std::snprintf(call.error->message + used, sizeof(call.error->message) - used, " (%s: %s)", call.op, operands.c_str());
  return status;
}

}  // namespace

strata_status check_tensor(const Call& call, const strata_tensor& t, const char* role) {
  const auto* b = reinterpret_cast<const Buffer*>(t.buffer);
  const std::string dev = call.device.id();
  if (t.struct_size < sizeof(strata_tensor) || b == nullptr || b->magic != Buffer::kMagic) {
    return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s is not a tensor of this plugin's memory (%s)",
                call.op, role, dev.c_str());
  }
  if (t.rank < 0 || t.rank > MAX_RANK || t.offset < 0 || plugin::dtype_size(t.dtype) == 0) {
    return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s has a bad descriptor (rank %d, offset %lld) on %s",
                call.op, role, t.rank, static_cast<long long>(t.offset), dev.c_str());
  }
  // The furthest element must lie inside the buffer. Shapes and strides are
  // the caller's: every product is checked for overflow.
  uint64_t last = 0;
  uint64_t count = 1;
  bool span_overflow = false;
  bool count_overflow = false;
  for (int32_t d = 0; d < t.rank; ++d) {
    if (t.shape[d] <= 0 || t.strides[d] < 0) {
      return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s %s has a bad shape or stride on %s", call.op, role,
                  describe(t).c_str(), dev.c_str());
    }
    uint64_t reach = 0;
    span_overflow |=
        __builtin_mul_overflow(static_cast<uint64_t>(t.shape[d] - 1), static_cast<uint64_t>(t.strides[d]), &reach);
    span_overflow |= __builtin_add_overflow(last, reach, &last);
    count_overflow |= __builtin_mul_overflow(count, static_cast<uint64_t>(t.shape[d]), &count);
  }
  uint64_t end = 0;  // bytes from the buffer's start to the end of the furthest element
  span_overflow |= __builtin_add_overflow(static_cast<uint64_t>(t.offset), last, &end);
  span_overflow |= __builtin_add_overflow(end, uint64_t{1}, &end);
  span_overflow |= __builtin_mul_overflow(end, static_cast<uint64_t>(plugin::dtype_size(t.dtype)), &end);
  if (span_overflow || end > b->size) {
    return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT,
                "%s: %s %s at offset %lld exceeds its buffer (%llu bytes) on %s", call.op, role, describe(t).c_str(),
                static_cast<long long>(t.offset), static_cast<unsigned long long>(b->size), dev.c_str());
  }
  if (count_overflow || count >= kMaxElements || last >= kMaxSpan) {
    return fail(call.error, STRATA_ERROR_UNSUPPORTED,
                "%s: %s %s has 2^31 or more elements or spans 2^32 or more, beyond the shaders' 32-bit indexing on %s",
                call.op, role, describe(t).c_str(), dev.c_str());
  }
  return STRATA_OK;
}

uint32_t groups_for(uint64_t n, uint32_t group) {
  const uint64_t g = (n + group - 1) / group;
  return static_cast<uint32_t>(std::clamp<uint64_t>(g, 1, kMaxGroups));
}

strata_status params(Call& call, const void* data, size_t bytes, VkDeviceAddress* address) {
  if (strata_status s = call.stream.upload_params(data, bytes, address, call.error); s != STRATA_OK)
    return with_operands(call, s);
  return STRATA_OK;
}

strata_status launch(Call& call, const char* shader, int32_t op, const void* push, uint32_t push_bytes, uint32_t gx,
                     uint32_t gy, uint32_t gz) {
  VkPipeline pipeline = VK_NULL_HANDLE;
  if (strata_status s = call.device.pipelines->get(shader, op, call.op, &pipeline, call.error); s != STRATA_OK)
    return with_operands(call, s);
  if (strata_status s = call.stream.dispatch(pipeline, push, push_bytes, gx, gy, gz, call.error); s != STRATA_OK)
    return with_operands(call, s);
  return STRATA_OK;
}

Merged merge_dims(int rank, const int64_t* shape, const int64_t* const* strides, int operands) {
  Merged m;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 1) continue;
    bool mergeable = m.rank > 0;
    for (int k = 0; k < operands && mergeable; ++k) {
      mergeable = m.strides[k][m.rank - 1] == strides[k][d] * shape[d];
    }
    if (mergeable) {
      m.shape[m.rank - 1] *= shape[d];
      for (int k = 0; k < operands; ++k) m.strides[k][m.rank - 1] = strides[k][d];
    } else {
      m.shape[m.rank] = shape[d];
      for (int k = 0; k < operands; ++k) m.strides[k][m.rank] = strides[k][d];
      ++m.rank;
    }
  }
  if (m.rank == 0) {  // a scalar, or all dims of size 1
    m.rank = 1;
    m.shape[0] = 1;
    for (int k = 0; k < operands; ++k) m.strides[k][0] = 0;
  }
  return m;
}

strata_status read_elements(Call& call, const strata_tensor& t, std::vector<int64_t>& values) {
  Device& d = call.device;
  int64_t last = 0;
  int64_t count = 1;
  for (int32_t k = 0; k < t.rank; ++k) {
    last += (t.shape[k] - 1) * t.strides[k];
    count *= t.shape[k];
  }
  const size_t element = plugin::dtype_size(t.dtype);
  const size_t bytes = static_cast<size_t>(last + 1) * element;
  const auto* b = reinterpret_cast<const Buffer*>(t.buffer);
  const size_t offset = static_cast<size_t>(t.offset) * element;
  std::vector<char> span(bytes);
  if (strata_status s = call.stream.synchronize(call.error); s != STRATA_OK) return with_operands(call, s);
  if (d.direct) {
    std::memcpy(span.data(), b->host() + offset, bytes);
  } else {
    Buffer* staging = nullptr;
    if (strata_status s = d.staging->allocate(bytes, &staging, call.error); s != STRATA_OK) return s;
    strata_status s =
        call.stream.copy(b->vk_buffer(), b->offset + offset, staging->vk_buffer(), staging->offset, bytes, call.error);
    if (s == STRATA_OK) s = call.stream.synchronize(call.error);
    if (s == STRATA_OK) std::memcpy(span.data(), staging->host(), bytes);
    if (s == STRATA_OK) {
      d.staging->release(staging);
    } else {
      call.stream.retire_with_batch(staging);
      return with_operands(call, s);
    }
  }
  values.resize(static_cast<size_t>(count));
  std::array<int64_t, MAX_RANK> pos{};
  for (int64_t i = 0; i < count; ++i) {
    int64_t at = 0;
    for (int32_t k = 0; k < t.rank; ++k) at += pos[static_cast<size_t>(k)] * t.strides[k];
    const char* p = span.data() + static_cast<size_t>(at) * element;
    int64_t v = 0;
    switch (t.dtype) {
      case STRATA_I64:
        std::memcpy(&v, p, 8);
        break;
      case STRATA_I32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        v = x;
        break;
      }
      case STRATA_BOOL:
        v = *p != 0;
        break;
      default:
        return fail(call.error, STRATA_ERROR_INTERNAL, "%s: cannot read %s back as integers", call.op, tag(t.dtype));
    }
    values[static_cast<size_t>(i)] = v;
    for (int32_t k = t.rank - 1; k >= 0; --k) {
      if (++pos[static_cast<size_t>(k)] < t.shape[k]) break;
      pos[static_cast<size_t>(k)] = 0;
    }
  }
  return STRATA_OK;
}

namespace {

/// eltwise.comp's parameter block (std430).
struct EltwiseParams {
  uint32_t rank;
  uint32_t n;
  uint32_t fill_lo;
  uint32_t fill_hi;
  uint32_t shape[MAX_RANK];
  uint32_t strides[4 * MAX_RANK];
};

struct EltwisePush {
  VkDeviceAddress y, a, b, c, p;
};

}  // namespace

strata_status launch_eltwise(Call& call, const char* shader, int32_t op, const strata_tensor& y,
                             const strata_tensor* inputs, int n_inputs, uint64_t fill_bits) {
  for (int k = 0; k < n_inputs; ++k) {
    bool same = inputs[k].rank == y.rank;
    for (int32_t d = 0; same && d < y.rank; ++d) same = inputs[k].shape[d] == y.shape[d];
    if (!same) {
      return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: input %d %s does not have the output's shape %s on %s", call.op, k, describe(inputs[k]).c_str(),
                  describe(y).c_str(), call.device.id().c_str());
    }
  }
  const int64_t* strides[4] = {y.strides, nullptr, nullptr, nullptr};
  for (int k = 0; k < n_inputs; ++k) strides[k + 1] = inputs[k].strides;
  const Merged m = merge_dims(y.rank, y.shape, strides, n_inputs + 1);
  EltwiseParams p{};
  p.rank = static_cast<uint32_t>(m.rank);
  p.n = static_cast<uint32_t>(plugin::numel(y));
  p.fill_lo = static_cast<uint32_t>(fill_bits);
  p.fill_hi = static_cast<uint32_t>(fill_bits >> 32);
  for (int d = 0; d < m.rank; ++d) {
    p.shape[d] = static_cast<uint32_t>(m.shape[static_cast<size_t>(d)]);
    for (int k = 0; k <= n_inputs; ++k) {
      p.strides[k * MAX_RANK + d] = static_cast<uint32_t>(m.strides[static_cast<size_t>(k)][static_cast<size_t>(d)]);
    }
  }
  EltwisePush push{};
  push.y = address_of(y);
  VkDeviceAddress* in_addr[3] = {&push.a, &push.b, &push.c};
  for (int k = 0; k < n_inputs; ++k) *in_addr[k] = address_of(inputs[k]);
  // Unused operands alias the output: a valid address the shader never reads.
  for (int k = n_inputs; k < 3; ++k) *in_addr[k] = push.y;
  if (strata_status s = params(call, &p, sizeof(p), &push.p); s != STRATA_OK) return s;
  return launch(call, shader, op, &push, sizeof(push), groups_for(p.n, ELTWISE_GROUP));
}

int dim_attr(const strata_attrs* attrs, int rank) {
  const strata_attr* a = plugin::find_attr(attrs, "dim");
  if (a == nullptr || a->kind != STRATA_ATTR_INT) return -1;
  const int64_t dim = a->i < 0 ? a->i + rank : a->i;
  return dim >= 0 && dim < std::max(rank, 1) ? static_cast<int>(dim) : -1;
}

const std::vector<strata_kernel_entry>& kernel_table(Device& device) {
  // Built once per set of stored dtypes (all a table depends on) and leaked
  // on purpose: the ABI promises the array stays valid until the process
  // exits, also past a shutdown and a later init whose Device may reuse an
  // old one's address.
  static std::mutex mutex;
  static auto* tables = new std::unordered_map<uint32_t, KernelTable*>();
  std::lock_guard lock(mutex);
  KernelTable*& t = (*tables)[device.props.dtype_mask];
  if (t == nullptr) {
    t = new KernelTable(device.props.dtype_mask);
    register_elementwise_kernels(*t);
    register_reduce_kernels(*t);
    register_matmul_kernels(*t);
    register_index_kernels(*t);
  }
  return t->entries();
}

}  // namespace strata::vulkan
