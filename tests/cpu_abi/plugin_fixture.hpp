// plugin_fixture.hpp — drives libstrata_plugin_cpu.so through the C ABI only,
// exactly as the core would: dlopen, entry symbol, table, init, kernels.
#pragma once

#include <strata/plugin/half.hpp>
#include <strata/plugin/strata_plugin.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstring>
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
    return entry(STRATA_ABI_MAJOR, STRATA_ABI_MINOR);
  }();
  return *api;
}

inline strata_error make_error() {
  strata_error e{};
  e.struct_size = sizeof(e);
  return e;
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

/// A tensor in device memory; owns its buffer.
class DeviceTensor {
 public:
  DeviceTensor(strata_plugin_state state, strata_dtype dtype, size_t storage_elements) : state_(state) {
    bytes_ = storage_elements * plugin::dtype_size(dtype);
    strata_error err = make_error();
    if (plugin_api().alloc(state, 0, bytes_, &desc_.buffer, &err) != STRATA_OK) throw std::runtime_error(err.message);
    desc_.struct_size = sizeof(desc_);
    desc_.dtype = dtype;
  }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  ~DeviceTensor() { plugin_api().free(state_, 0, desc_.buffer); }

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
    ASSERT_EQ(plugin_api().copy_h2d(state_, 0, desc_.buffer, 0, values.data(), bytes_, nullptr, &err), STRATA_OK);
  }

  /// The whole buffer, as storage elements of T.
  template <class T>
  std::vector<T> download() const {
    std::vector<T> values(bytes_ / sizeof(T));
    strata_error err = make_error();
    EXPECT_EQ(plugin_api().copy_d2h(state_, 0, values.data(), desc_.buffer, 0, bytes_, nullptr, &err), STRATA_OK);
    return values;
  }

  const strata_tensor& desc() const { return desc_; }

 private:
  strata_plugin_state state_;
  size_t bytes_ = 0;
  strata_tensor desc_{};
};

/// Attribute list builder.
class Attrs {
 public:
  Attrs& integer(const char* name, int64_t v) { return push({name, STRATA_ATTR_INT, v, 0.0, nullptr, 0}); }
  Attrs& real(const char* name, double v) { return push({name, STRATA_ATTR_FLOAT, 0, v, nullptr, 0}); }
  Attrs& ints(const char* name, std::vector<int64_t> v) {
    lists_.push_back(std::move(v));
    return push({name, STRATA_ATTR_INTS, 0, 0.0, nullptr, 0});
  }
  const strata_attrs* get() {
    // INTS pointers are bound late: lists_ may have reallocated.
    for (size_t i = 0, l = 0; i < items_.size(); ++i) {
      if (items_[i].kind == STRATA_ATTR_INTS) {
        items_[i].ints = lists_[l].data();
        items_[i].n_ints = static_cast<int32_t>(lists_[l++].size());
      }
    }
    attrs_ = {sizeof(strata_attrs), items_.data(), static_cast<int32_t>(items_.size())};
    return &attrs_;
  }

 private:
  Attrs& push(strata_attr a) {
    items_.push_back(a);
    return *this;
  }
  std::vector<strata_attr> items_;
  std::vector<std::vector<int64_t>> lists_;
  strata_attrs attrs_{};
};

/// Fixture: one initialised plugin state with `threads` from the suite.
class CpuAbiTest : public ::testing::Test {
 protected:
  static strata_plugin_state init_state(const char* options) {
    strata_host_api host{sizeof(strata_host_api), STRATA_ABI_MAJOR, STRATA_ABI_MINOR, nullptr};
    static strata_host_api persistent_host = host;  // the plugin may keep the pointer
    strata_plugin_state state = nullptr;
    strata_error err = make_error();
    if (plugin_api().init(&persistent_host, options, &state, &err) != STRATA_OK) {
      throw std::runtime_error(err.message);
    }
    return state;
  }

  static strata_plugin_state state() {
    static strata_plugin_state s = init_state(R"({"threads": 2})");
    return s;
  }

  static strata_kernel_fn kernel(const char* op, const char* signature) {
    const strata_kernel_entry* entries = nullptr;
    int32_t count = 0;
    strata_error err = make_error();
    if (plugin_api().get_kernels(state(), 0, &entries, &count, &err) != STRATA_OK) return nullptr;
    for (int32_t i = 0; i < count; ++i) {
      if (std::strcmp(entries[i].op, op) == 0 && std::strcmp(entries[i].signature, signature) == 0) {
        return entries[i].fn;
      }
    }
    return nullptr;
  }

  /// Runs op/signature; the message of a failure lands in last_error.
  strata_status run(const char* op, const char* signature, std::initializer_list<const DeviceTensor*> inputs,
                    const DeviceTensor& output, Attrs attrs = {}, strata_plugin_state st = nullptr) {
    const strata_kernel_fn fn = kernel(op, signature);
    EXPECT_NE(fn, nullptr) << op << " " << signature;
    if (fn == nullptr) return STRATA_ERROR_UNSUPPORTED;
    std::vector<strata_tensor> in;
    for (const DeviceTensor* t : inputs) in.push_back(t->desc());
    const strata_kernel_context ctx{sizeof(strata_kernel_context), st != nullptr ? st : state(), 0, nullptr};
    last_error = make_error();
    return fn(&ctx, in.data(), static_cast<int32_t>(in.size()), &output.desc(), 1, attrs.get(), &last_error);
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

  strata_error last_error = make_error();

 private:
  std::vector<std::unique_ptr<DeviceTensor>> owned_;
};

}  // namespace strata::cpu_abi
