// plugin_fixture.hpp — drives libstrata_plugin_cpu.so through the C ABI only,
// exactly as the host would: dlopen, entry symbol, table, probe, init,
// kernels.
#pragma once

#include <strata/plugin/half.hpp>
#include <strata/plugin/strata_ops.h>
#include <strata/plugin/strata_plugin.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef STRATA_CPU_PLUGIN_PATH
#error "STRATA_CPU_PLUGIN_PATH must name libstrata_plugin_cpu.so"
#endif

namespace strata::cpu_abi {

/// The plugin's table, loaded once per process (plugins are never unloaded).
inline const strata_plugin_api& plugin_api() {
  static const strata_plugin_api* api = [] {
    void* handle = dlopen(STRATA_CPU_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) throw std::runtime_error(std::string("dlopen: ") + dlerror());
    auto entry = reinterpret_cast<strata_plugin_entry_fn>(dlsym(handle, STRATA_PLUGIN_ENTRY_SYMBOL));
    if (entry == nullptr) throw std::runtime_error("no entry symbol");
    const strata_plugin_api* table = entry(STRATA_ABI_MAJOR, STRATA_ABI_MINOR);
    if (table == nullptr) throw std::runtime_error("the entry returned no table");
    return table;
  }();
  return *api;
}

inline strata_error make_error() {
  strata_error e{};
  e.struct_size = sizeof(e);
  return e;
}

/// Argument structs of the table's calls, zeroed, sized and pointed at `err`.
template <class Args>
Args make_args(strata_error& err, strata_plugin_state state = nullptr) {
  Args a{};
  a.struct_size = sizeof(a);
  if constexpr (requires { a.state; }) a.state = state;
  a.error = &err;
  return a;
}

/// init through the table; throws with the plugin's message on failure.
inline strata_plugin_state init_plugin(const strata_host_api* host, const char* options) {
  strata_error err = make_error();
  strata_init_args args = make_args<strata_init_args>(err);
  args.host = host;
  args.options_json = options;
  args.score = 50;
  if (plugin_api().init(&args) != STRATA_OK) throw std::runtime_error(err.message);
  if (args.device_count != 1 || args.score != 50 || args.state == nullptr) {
    throw std::runtime_error("init: unexpected device_count, score or state");
  }
  return args.state;
}

/// A host API without services (no logger).
inline const strata_host_api* quiet_host() {
  static strata_host_api host = [] {
    strata_host_api h{};
    h.struct_size = sizeof(h);
    h.abi_major = STRATA_ABI_MAJOR;
    h.abi_minor = STRATA_ABI_MINOR;
    return h;
  }();
  return &host;
}

/// Calls f(index vector) for every position of shape, row-major.
inline void for_each_index(const std::vector<int64_t>& shape,
                           const std::function<void(const std::vector<int64_t>&)>& f) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(idx);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0 && ++idx[d] == shape[d]; --d) idx[d] = 0;
  }
}

/// Element offset of position idx in a descriptor.
inline int64_t offset_of(const strata_tensor& t, const std::vector<int64_t>& idx) {
  int64_t off = t.offset;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides[d];
  return off;
}

/// n uniform values in [-1, 1), reproducible from seed.
inline std::vector<float> random_values(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// Buffer alloc/free and copies through the table.
inline strata_buffer alloc_buffer(strata_plugin_state state, size_t bytes,
                                  strata_memory_kind kind = STRATA_MEMORY_DEVICE, void** host_pointer = nullptr) {
  strata_error err = make_error();
  strata_alloc_args args = make_args<strata_alloc_args>(err, state);
  args.kind = kind;
  args.bytes = bytes;
  if (plugin_api().alloc(&args) != STRATA_OK) throw std::runtime_error(err.message);
  if (host_pointer != nullptr) *host_pointer = args.host_pointer;
  return args.buffer;
}

inline void free_buffer(strata_plugin_state state, strata_buffer buffer) {
  strata_error err = make_error();
  strata_alloc_args args = make_args<strata_alloc_args>(err, state);
  args.buffer = buffer;
  plugin_api().free(&args);
}

inline strata_status copy_h2d(strata_plugin_state state, strata_buffer dst, size_t dst_offset, const void* src,
                              size_t bytes, strata_error* err) {
  strata_copy_args args = make_args<strata_copy_args>(*err, state);
  args.kind = STRATA_COPY_HOST_TO_DEVICE;
  args.dst = dst;
  args.dst_offset = dst_offset;
  args.src_host = src;
  args.bytes = bytes;
  return plugin_api().copy(&args);
}

inline strata_status copy_d2h(strata_plugin_state state, void* dst, strata_buffer src, size_t src_offset, size_t bytes,
                              strata_error* err) {
  strata_copy_args args = make_args<strata_copy_args>(*err, state);
  args.kind = STRATA_COPY_DEVICE_TO_HOST;
  args.dst_host = dst;
  args.src = src;
  args.src_offset = src_offset;
  args.bytes = bytes;
  return plugin_api().copy(&args);
}

inline strata_status copy_d2d(strata_plugin_state state, strata_buffer dst, size_t dst_offset, strata_buffer src,
                              size_t src_offset, size_t bytes, strata_error* err) {
  strata_copy_args args = make_args<strata_copy_args>(*err, state);
  args.kind = STRATA_COPY_DEVICE_TO_DEVICE;
  args.dst = dst;
  args.dst_offset = dst_offset;
  args.src = src;
  args.src_offset = src_offset;
  args.bytes = bytes;
  return plugin_api().copy(&args);
}

/// A tensor in device memory; owns its buffer.
class DeviceTensor {
 public:
  DeviceTensor(strata_plugin_state state, strata_dtype dtype, size_t storage_elements) : state_(state) {
    bytes_ = storage_elements * plugin::dtype_size(dtype);
    desc_.buffer = alloc_buffer(state, bytes_);
    desc_.struct_size = sizeof(desc_);
    desc_.dtype = dtype;
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() { free_buffer(state_, desc_.buffer); }

  /// Sets the view: shape, strides (empty: compact row-major) and offset.
  DeviceTensor& view(std::vector<int64_t> shape, std::vector<int64_t> strides = {}, int64_t offset = 0) {
    desc_.rank = static_cast<int32_t>(shape.size());
    desc_.offset = offset;
    int64_t stride = 1;
    for (int d = desc_.rank - 1; d >= 0; --d) {
      desc_.shape[d] = shape[d];
      desc_.strides[d] = strides.empty() ? stride : strides[d];
      stride *= shape[d];
    }
    return *this;
  }

  template <class T>
  void upload(const std::vector<T>& values) {
    strata_error err = make_error();
    ASSERT_EQ(values.size() * sizeof(T), bytes_);
    ASSERT_EQ(copy_h2d(state_, desc_.buffer, 0, values.data(), bytes_, &err), STRATA_OK) << err.message;
  }

  /// The whole buffer, as storage elements of T.
  template <class T>
  std::vector<T> download() const {
    std::vector<T> values(bytes_ / sizeof(T));
    strata_error err = make_error();
    EXPECT_EQ(copy_d2h(state_, values.data(), desc_.buffer, 0, bytes_, &err), STRATA_OK) << err.message;
    return values;
  }

  const strata_tensor& desc() const { return desc_; }
  strata_tensor& mutable_desc() { return desc_; }

 private:
  strata_plugin_state state_;
  size_t bytes_ = 0;
  strata_tensor desc_{};
};

/// Attribute list builder: the attributes plus the pointer array a kernel
/// call takes.
class Attrs {
 public:
  Attrs() = default;
  Attrs(const Attrs& other) : items_(other.items_), lists_(other.lists_) {}
  Attrs& operator=(const Attrs&) = delete;

  Attrs& integer(const char* name, int64_t v) { return push(name, STRATA_ATTR_INT, v, 0.0); }
  Attrs& real(const char* name, double v) { return push(name, STRATA_ATTR_FLOAT, 0, v); }
  Attrs& boolean(const char* name, bool v) { return push(name, STRATA_ATTR_BOOL, v ? 1 : 0, 0.0); }
  Attrs& dtype(const char* name, strata_dtype v) { return push(name, STRATA_ATTR_DTYPE, v, 0.0); }
  /// Exact scalars: I64 and BOOL carry `i`, F64 carries `f`.
  Attrs& scalar_i64(const char* name, int64_t v) { return push(name, STRATA_ATTR_SCALAR, v, 0.0, STRATA_I64); }
  Attrs& scalar_f64(const char* name, double v) { return push(name, STRATA_ATTR_SCALAR, 0, v, STRATA_F64); }
  Attrs& scalar_bool(const char* name, bool v) {
    return push(name, STRATA_ATTR_SCALAR, v ? 1 : 0, 0.0, STRATA_BOOL);
  }
  Attrs& ints(const char* name, std::vector<int64_t> v) {
    lists_.push_back(std::move(v));
    return push(name, STRATA_ATTR_INTS, 0, 0.0);
  }

  /// The pointer array (valid while this object lives and is not changed).
  const strata_attr* const* data() {
    // INTS pointers are bound late: lists_ may have moved.
    for (size_t i = 0, l = 0; i < items_.size(); ++i) {
      if (items_[i].kind == STRATA_ATTR_INTS) {
        items_[i].ints = lists_[l].data();
        items_[i].count = static_cast<int64_t>(lists_[l++].size());
      }
    }
    pointers_.clear();
    for (const strata_attr& a : items_) pointers_.push_back(&a);
    return pointers_.data();
  }
  int32_t size() const { return static_cast<int32_t>(items_.size()); }

 private:
  Attrs& push(const char* name, strata_attr_kind kind, int64_t i, double f, strata_dtype scalar = STRATA_F32) {
    strata_attr a{};
    a.struct_size = sizeof(a);
    a.name = name;
    a.kind = kind;
    a.scalar_dtype = scalar;
    a.i = i;
    a.f = f;
    items_.push_back(a);
    return *this;
  }
  std::deque<strata_attr> items_;  // stable addresses for pointers_
  std::vector<std::vector<int64_t>> lists_;
  std::vector<const strata_attr*> pointers_;
};

/// Fixture: one initialised plugin state with `threads` from the suite.
class CpuAbiTest : public ::testing::Test {
 protected:
  static strata_plugin_state state() {
    static strata_plugin_state s = init_plugin(quiet_host(), R"({"threads": 2})");
    return s;
  }

  /// The kernel table of cpu:0.
  static std::vector<const strata_kernel_entry*> kernel_entries() {
    strata_error err = make_error();
    strata_device_args args = make_args<strata_device_args>(err, state());
    if (plugin_api().get_kernels(&args) != STRATA_OK) throw std::runtime_error(err.message);
    return {args.entries, args.entries + args.n_entries};
  }

  static strata_kernel_fn kernel(const char* op, const char* signature) {
    for (const strata_kernel_entry* e : kernel_entries()) {
      if (std::strcmp(e->op, op) == 0 && std::strcmp(e->signature, signature) == 0) return e->fn;
    }
    return nullptr;
  }

  /// Runs op/signature; the message of a failure lands in last_error.
  /// `edit` may change the call struct before it is made (to break it).
  strata_status run(const char* op, const char* signature, std::initializer_list<const DeviceTensor*> inputs,
                    const DeviceTensor& output, Attrs attrs = {},
                    const std::function<void(strata_kernel_call&)>& edit = {}) {
    std::vector<const strata_tensor*> in;
    for (const DeviceTensor* t : inputs) in.push_back(&t->desc());
    const strata_tensor* out[] = {&output.desc()};
    return run_raw(op, signature, in, out, 1, attrs, edit);
  }

  /// As run, with descriptors given directly (any number of outputs).
  strata_status run_raw(const char* op, const char* signature, const std::vector<const strata_tensor*>& inputs,
                        const strata_tensor* const* outputs, int32_t n_outputs, Attrs& attrs,
                        const std::function<void(strata_kernel_call&)>& edit = {}) {
    const strata_kernel_fn fn = kernel(op, signature);
    EXPECT_NE(fn, nullptr) << op << " " << signature;
    if (fn == nullptr) return STRATA_ERROR_UNSUPPORTED;
    last_error = make_error();
    strata_kernel_call call{};
    call.struct_size = sizeof(call);
    call.op = op;
    call.op_version = STRATA_OP_VERSION;
    call.state = state();
    call.device = 0;
    call.inputs = inputs.data();
    call.n_inputs = static_cast<int32_t>(inputs.size());
    call.outputs = outputs;
    call.n_outputs = n_outputs;
    call.attrs = attrs.data();
    call.n_attrs = attrs.size();
    call.host = quiet_host();
    call.error = &last_error;
    if (edit) edit(call);
    return fn(&call);
  }

  /// A compact tensor holding `values`.
  template <class T>
  DeviceTensor& tensor(strata_dtype dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
    owned_.emplace_back(std::make_unique<DeviceTensor>(state(), dtype, values.size()));
    owned_.back()->view(std::move(shape));
    owned_.back()->upload(values);
    return *owned_.back();
  }

  /// An uninitialised compact tensor.
  DeviceTensor& output(strata_dtype dtype, std::vector<int64_t> shape) {
    size_t n = 1;
    for (int64_t s : shape) n *= static_cast<size_t>(s);
    owned_.emplace_back(std::make_unique<DeviceTensor>(state(), dtype, n));
    owned_.back()->view(std::move(shape));
    return *owned_.back();
  }

  std::string message() const { return last_error.message; }
  strata_error last_error = make_error();

 private:
  std::vector<std::unique_ptr<DeviceTensor>> owned_;
};

}  // namespace strata::cpu_abi
