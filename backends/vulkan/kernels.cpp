// kernels.cpp — helpers shared by the kernel sources and the kernel table.
#include "kernels.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace strata::vulkan {

// ---- Op specs ------------------------------------------------------------------

namespace {

/// Every OpSpec of the process, in id order; never shrinks (the kernel
/// tables point into it and live until the process exits).
struct SpecRegistry {
  std::mutex mutex;
  std::deque<OpSpec> specs;  // stable addresses
};

SpecRegistry& specs() {
  static auto* registry = new SpecRegistry;  // leaked: kernel tables outlive every static destructor
  return *registry;
}

}  // namespace

const OpSpec& op_spec(const char* op, int32_t code, std::span<const strata_dtype> ins,
                      std::span<const strata_dtype> outs) {
  if (outs.empty() || ins.size() + outs.size() > static_cast<size_t>(OpSpec::kMaxOperands))
    throw std::logic_error("op_spec: too many operands");
  OpSpec wanted{op, code, 0, static_cast<int32_t>(ins.size()), static_cast<int32_t>(outs.size()), {}};
  std::copy(ins.begin(), ins.end(), wanted.dtypes.begin());
  std::copy(outs.begin(), outs.end(), wanted.dtypes.begin() + static_cast<ptrdiff_t>(ins.size()));
  SpecRegistry& r = specs();
  std::lock_guard lock(r.mutex);
  for (const OpSpec& s : r.specs) {
    if (s.code == code && s.n_in == wanted.n_in && s.n_out == wanted.n_out && s.dtypes == wanted.dtypes &&
        std::strcmp(s.op, op) == 0)
      return s;
  }
  wanted.id = static_cast<uint32_t>(r.specs.size());
  r.specs.push_back(wanted);
  return r.specs.back();
}

const OpSpec* op_spec_by_id(uint32_t id) {
  SpecRegistry& r = specs();
  std::lock_guard lock(r.mutex);
  return id < r.specs.size() ? &r.specs[id] : nullptr;
}

void Registry::add_entry(const char* op, int32_t code, std::span<const strata_dtype> ins,
                         std::span<const strata_dtype> outs, uint32_t flags, strata_kernel_fn fn) {
  std::string sig;
  for (strata_dtype d : ins) {
    if (!stores(d)) return;
    sig += (sig.empty() ? "" : ",");
    sig += tag(d);
  }
  sig += "->";
  for (size_t m = 0; m < outs.size(); ++m) {
    if (!stores(outs[m])) return;
    sig += (m == 0 ? "" : ",");
    sig += tag(outs[m]);
  }
  const OpSpec& spec = op_spec(op, code, ins, outs);
  table_.add(op, std::move(sig), fn, flags, const_cast<OpSpec*>(&spec), STRATA_OP_VERSION);
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
  for (int32_t k = 0; k < call.n_in; ++k) operands += (k > 0 ? ", " : "") + describe(call.input(k));
  operands += " -> " + describe(call.out);
  const size_t used = std::strlen(call.error->message);
  std::snprintf(call.error->message + used, sizeof(call.error->message) - used, " (%s: %s)", call.op, operands.c_str());
  return status;
}

}  // namespace

namespace {

/// Checks a descriptor (its size, dtype and rank already checked against
/// the signature) against its buffer and the kernels' 32-bit indexing.
strata_status check_tensor(const strata_kernel_call& call, const OpSpec& spec, const Device& device,
                           const strata_tensor* tp, const char* role, int k) {
  const std::string& dev = device.id();
  const strata_tensor& t = *tp;
  const auto* b = reinterpret_cast<const Buffer*>(t.buffer);
  if (b == nullptr || b->magic != Buffer::kMagic) {
    return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s %d is not a tensor of this plugin's memory (%s)",
                spec.op, role, k, dev.c_str());
  }
  if (t.rank < 0 || t.rank > MAX_RANK || t.offset < 0 || plugin::dtype_size(t.dtype) == 0) {
    return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT,
                "%s: %s %d has a bad descriptor (rank %d, offset %lld) on %s", spec.op, role, k, t.rank,
                static_cast<long long>(t.offset), dev.c_str());
  }
  // The furthest element must lie inside the buffer. Shapes and strides are
  // the caller's: every product is checked for overflow.
  uint64_t last = 0;
  uint64_t count = 1;
  bool span_overflow = false;
  bool count_overflow = false;
  for (int32_t d = 0; d < t.rank; ++d) {
    if (t.shape[d] <= 0 || t.strides[d] < 0) {
      return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s %s has a bad shape or stride on %s", spec.op, role,
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
                "%s: %s %s at offset %lld exceeds its buffer (%llu bytes) on %s", spec.op, role, describe(t).c_str(),
                static_cast<long long>(t.offset), static_cast<unsigned long long>(b->size), dev.c_str());
  }
  if (count_overflow || count >= kMaxElements || last >= kMaxSpan) {
    return fail(call.error, STRATA_ERROR_UNSUPPORTED,
                "%s: %s %s has 2^31 or more elements or spans 2^32 or more, beyond the shaders' 32-bit indexing on %s",
                spec.op, role, describe(t).c_str(), dev.c_str());
  }
  return STRATA_OK;
}

}  // namespace

strata_status prepare(const strata_kernel_call& call, const OpSpec& spec, Device** device, Stream** stream) {
  // Counts, arrays and each descriptor's size, dtype and rank against the
  // entry's signature.
  if (!plugin::operands_match(call, spec.in(), spec.n_in, spec.out(), spec.n_out)) {
    return plugin::refuse_call(&call, spec.op, spec.in(), spec.n_in, spec.out(), spec.n_out);
  }
  Device* d = device_of(call.state, call.device, call.error);
  if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  if (call.n_attrs > 0 && call.attrs == nullptr) {
    return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %d attributes in a NULL array on %s", spec.op,
                call.n_attrs, d->id().c_str());
  }
  if (strata_status s = d->check_lost(call.error); s != STRATA_OK) return s;
  for (int32_t m = 0; m < call.n_outputs; ++m) {
    if (strata_status s = check_tensor(call, spec, *d, call.outputs[m], "output", m); s != STRATA_OK) return s;
  }
  for (int32_t k = 0; k < call.n_inputs; ++k) {
    if (strata_status s = check_tensor(call, spec, *d, call.inputs[k], "input", k); s != STRATA_OK) return s;
  }
  *device = d;
  *stream = &stream_of(*d, call.stream);
  return STRATA_OK;
}

strata_status expect_inputs(const Call& c, int n) {
  if (c.n_in == n) return STRATA_OK;
  return fail(c.error, STRATA_ERROR_INVALID_ARGUMENT, "%s: expected %d inputs, got %d (%s)", c.op, n, c.n_in,
              c.device.id().c_str());
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

strata_status launch_op(Call& call, const char* shader, int32_t op, const void* push, uint32_t push_bytes, uint32_t gx,
                        uint32_t gy, uint32_t gz) {
  VkPipeline pipeline = VK_NULL_HANDLE;
  if (strata_status s = call.device.pipelines->get(shader, op, call.op, &pipeline, call.error); s != STRATA_OK)
    return with_operands(call, s);
  if (strata_status s = call.stream.dispatch(pipeline, push, push_bytes, gx, gy, gz, call.error); s != STRATA_OK)
    return with_operands(call, s);
  return STRATA_OK;
}

strata_status launch(Call& call, const char* shader, const void* push, uint32_t push_bytes, uint32_t gx, uint32_t gy,
                     uint32_t gz) {
  return launch_op(call, shader, call.spec.code, push, push_bytes, gx, gy, gz);
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
  VkDeviceAddress err;  // the device's deferred-error record
  uint32_t site;        // the OpSpec id it names the op by
};

}  // namespace

strata_status launch_eltwise(Call& call, const char* shader, int32_t op, const strata_tensor& y,
                             const strata_tensor* const* inputs, int n_inputs, uint64_t fill_bits) {
  for (int k = 0; k < n_inputs; ++k) {
    const strata_tensor& x = *inputs[k];
    bool same = x.rank == y.rank;
    for (int32_t d = 0; same && d < y.rank; ++d) same = x.shape[d] == y.shape[d];
    if (!same) {
      return fail(call.error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: input %d %s does not have the output's shape %s on %s", call.op, k, describe(x).c_str(),
                  describe(y).c_str(), call.device.id().c_str());
    }
  }
  const int64_t* strides[4] = {y.strides, nullptr, nullptr, nullptr};
  for (int k = 0; k < n_inputs; ++k) strides[k + 1] = inputs[k]->strides;
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
  for (int k = 0; k < n_inputs; ++k) *in_addr[k] = address_of(*inputs[k]);
  // Unused operands alias the output: a valid address the shader never reads.
  for (int k = n_inputs; k < 3; ++k) *in_addr[k] = push.y;
  push.err = call.device.deferred->address();
  push.site = call.spec.id;
  if (strata_status s = params(call, &p, sizeof(p), &push.p); s != STRATA_OK) return s;
  return launch_op(call, shader, op, &push, sizeof(push), groups_for(p.n, ELTWISE_GROUP));
}

int dim_attr(const Call& call, int rank) {
  const strata_attr* a = plugin::attr_of_kind(call.abi, "dim", STRATA_ATTR_INT);
  if (a == nullptr) return -1;
  const int64_t dim = a->i < 0 ? a->i + rank : a->i;
  return dim >= 0 && dim < std::max(rank, 1) ? static_cast<int>(dim) : -1;
}

const plugin::KernelTable& kernel_table(const Device& device) {
  // Built once per set of stored dtypes (all a table depends on) and leaked
  // on purpose: the ABI promises the array stays valid until the process
  // exits, also past a shutdown and a later init whose Device may reuse an
  // old one's address.
  static std::mutex mutex;
  static auto* tables = new std::unordered_map<uint64_t, plugin::KernelTable*>();
  std::lock_guard lock(mutex);
  plugin::KernelTable*& t = (*tables)[device.props.dtype_mask];
  if (t == nullptr) {
    auto* table = new plugin::KernelTable;
    Registry reg(*table, device.props.dtype_mask);
    register_elementwise_kernels(reg);
    register_reduce_kernels(reg);
    register_matmul_kernels(reg);
    register_index_kernels(reg);
    register_random_kernels(reg);
    register_fused_kernels(reg);
    t = table;
  }
  return *t;
}

}  // namespace strata::vulkan
