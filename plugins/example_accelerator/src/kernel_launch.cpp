// kernel_launch.cpp — checking and resolving kernel calls (kernel_launch.hpp),
// and the kernel table all devices share.
#include "kernel_launch.hpp"

#include <stdexcept>

namespace example {

using strata::plugin::dtype_name;

void Launch::reject(const std::string& why) const {
  throw std::invalid_argument("on " + device->name + ": " + why + " (" + operands() + ")");
}

std::string Launch::operands() const {
  auto describe = [](const View& v) {
    std::string s = std::string(dtype_name(v.dtype)) + "[";
    for (int d = 0; d < v.rank; ++d) s += (d > 0 ? ", " : "") + std::to_string(v.shape[d]);
    return s + "]";
  };
  std::string s;
  for (size_t k = 0; k < in.size(); ++k) s += (k > 0 ? ", " : "") + describe(in[k]);
  s += " -> ";
  for (size_t k = 0; k < out.size(); ++k) s += (k > 0 ? ", " : "") + describe(out[k]);
  return s;
}

namespace {

/// One descriptor (its size, dtype and rank already checked against the
/// signature) checked against its buffer and resolved into a View; throws
/// naming `role`.
View resolve(PluginState& state, const Device& d, const strata_tensor* t, const std::string& role) {
  auto bad = [&](const std::string& why) { throw std::invalid_argument("on " + d.name + ": " + role + " " + why); };
  if (t->offset < 0) bad("has negative offset " + std::to_string(t->offset));
  View v;
  v.dtype = t->dtype;
  v.rank = t->rank;
  // The last element the view reaches, overflow-checked.
  int64_t last = t->offset;
  bool empty = false;
  for (int k = 0; k < t->rank; ++k) {
    v.shape[k] = t->shape[k];
    v.strides[k] = t->strides[k];
    if (t->shape[k] < 0 || t->strides[k] < 0) {
      bad("has a negative size or stride in dim " + std::to_string(k));
    }
    if (t->shape[k] == 0) empty = true;
    int64_t reach = 0;
    if (t->shape[k] > 0 && (__builtin_mul_overflow(t->shape[k] - 1, t->strides[k], &reach) ||
                            __builtin_add_overflow(last, reach, &last))) {
      bad("addresses beyond 2^63 elements");
    }
  }
  const int64_t size = static_cast<int64_t>(strata::plugin::dtype_size(t->dtype));
  std::shared_ptr<Buffer> b = find_buffer(state, d, t->buffer, nullptr, "kernel");
  if (b == nullptr) bad("names " + describe_handle(t->buffer) + ", not a live buffer of this device");
  if (b->kind != STRATA_MEMORY_DEVICE) bad("names " + describe_handle(t->buffer) + ", pinned host memory");
  int64_t end_byte = 0;
  if (!empty && (__builtin_mul_overflow(last + 1, size, &end_byte) || static_cast<uint64_t>(end_byte) > b->bytes)) {
    bad("reaches element " + std::to_string(last) + " (byte " + std::to_string(end_byte) + ") of " +
        describe_handle(t->buffer) + ", which holds " + std::to_string(b->bytes) + " bytes");
  }
  v.base = d.arena.base() + b->offset + t->offset * size;
  return v;
}

}  // namespace

Launch prepare(const strata_kernel_call* call, std::initializer_list<strata_dtype> in,
               std::initializer_list<strata_dtype> out) {
  Launch l;
  l.call = call;
  l.op = call->op != nullptr ? call->op : "kernel";
  // Counts, arrays and every descriptor's size, dtype and rank against the
  // kernel's signature (the SDK's check and message).
  if (!strata::plugin::operands_match(*call, in.begin(), static_cast<int>(in.size()), out.begin(),
                                      static_cast<int>(out.size()))) {
    throw strata::plugin::Reported{strata::plugin::refuse_call(call, l.op, in.begin(), static_cast<int>(in.size()),
                                                               out.begin(), static_cast<int>(out.size()))};
  }
  l.state = as_state(call->state);
  if (l.state == nullptr) throw std::invalid_argument("the call carries no plugin state");
  l.device = l.state->device(call->device, call->error, l.op);
  if (l.device == nullptr) throw std::invalid_argument("device " + std::to_string(call->device) + " does not exist");
  l.stream = l.state->stream(*l.device, call->stream, call->error, l.op);
  if (l.stream == nullptr) throw std::invalid_argument("on " + l.device->name + ": bad stream " + describe_handle(call->stream));
  for (int k = 0; k < call->n_inputs; ++k) {
    l.in.push_back(resolve(*l.state, *l.device, call->inputs[k], "input " + std::to_string(k)));
  }
  for (int k = 0; k < call->n_outputs; ++k) {
    l.out.push_back(resolve(*l.state, *l.device, call->outputs[k], "output " + std::to_string(k)));
  }
  return l;
}

std::vector<int> reduced_dims(const Launch& l) {
  const View &x = l.in[0], &y = l.out[0];
  if (x.rank != y.rank) l.reject("the output must keep the input's rank");
  std::vector<int> dims;
  if (const strata_attr* a = strata::plugin::attr_of_kind(*l.call, "dims", STRATA_ATTR_INTS)) {
    for (int64_t k = 0; k < a->count; ++k) {
      const int64_t d = a->ints[k];
      if (d < 0 || d >= x.rank || (!dims.empty() && d <= dims.back())) {
        l.reject("attribute 'dims' must be sorted, unique and in [0, " + std::to_string(x.rank) + ")");
      }
      dims.push_back(static_cast<int>(d));
    }
  } else {
    for (int d = 0; d < x.rank; ++d) {
      if (y.shape[d] == 1 && x.shape[d] != 1) dims.push_back(d);
    }
  }
  for (int d = 0, k = 0; d < x.rank; ++d) {
    const bool reduced = k < static_cast<int>(dims.size()) && dims[static_cast<size_t>(k)] == d;
    if (reduced) ++k;
    if (reduced ? y.shape[d] != 1 : y.shape[d] != x.shape[d]) l.reject("output shape does not match 'dims'");
  }
  return dims;
}

int dim_attr(const Launch& l, int rank) {
  const strata_attr* a = strata::plugin::attr_of_kind(*l.call, "dim", STRATA_ATTR_INT);
  if (a == nullptr) l.reject("missing attribute 'dim'");
  const int64_t dim = a->i < 0 ? a->i + rank : a->i;
  if (dim < 0 || dim >= rank) l.reject("attribute 'dim' " + std::to_string(a->i) + " out of range for rank " + std::to_string(rank));
  return static_cast<int>(dim);
}

const strata::plugin::KernelTable& kernel_table() {
  return strata::plugin::static_kernel_table<register_elementwise_kernels, register_reduce_kernels,
                                             register_index_kernels, register_random_kernels>();
}

}  // namespace example
