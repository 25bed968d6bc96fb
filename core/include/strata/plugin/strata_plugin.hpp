// strata_plugin.hpp — header-only C++20 helpers for plugin authors.
//
// Nothing here is required: a plugin written in C (or Rust) uses the C header
// alone. These helpers hold what every C++ backend would otherwise write
// itself: error messages, turning exceptions into statuses, struct-size
// checks, typed attribute lookup, descriptor formatting, type lists, the cold
// paths that refuse a call, and the kernel table with its
// get_kernels/device_props bodies. Depends on the C++ standard
// library only.
#pragma once

#include <strata/plugin/strata_ops.h>
#include <strata/plugin/strata_plugin.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::plugin {

/// printf-style message into a strata_error; returns `status` for chaining:
///   return fail(err, STRATA_ERROR_INVALID_ARGUMENT, "dim %d out of range", d);
[[gnu::format(printf, 3, 4)]] inline strata_status fail(strata_error* error, strata_status status,
                                                        const char* format, ...) {
  if (error != nullptr) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(error->message, sizeof(error->message), format, args);
    va_end(args);
  }
  return status;
}

/// Thrown from plugin code to end the current entry point with `status` and
/// a message (guarded() prefixes it with the entry point's name):
///   throw plugin::Refusal(STRATA_ERROR_NO_DEVICE, "no GPU on this machine");
class Refusal : public std::runtime_error {
 public:
  Refusal(strata_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  strata_status status() const noexcept { return status_; }

 private:
  strata_status status_;
};

/// Thrown by check(): a status whose message a helper has already written
/// into the entry point's strata_error; guarded() returns it unchanged.
struct Reported {
  strata_status status;
};

/// Turns the status of a helper that writes its own message (the fail()
/// style) into an exception, for code whose failures throw:
///   check(open_devices(*state, a.error));
inline void check(strata_status status) {
  if (status != STRATA_OK) throw Reported{status};
}

/// guarded() with a two-part name: messages read "<plugin>: <what>: ..."
/// (`plugin` may be nullptr: "<what>: ...").
template <class Body>
strata_status guarded_at(strata_error* error, const char* plugin, const char* what, Body&& body) noexcept {
  const char* sep = plugin != nullptr ? ": " : "";
  if (plugin == nullptr) plugin = "";
  try {
    return body();
  } catch (const Reported& r) {
    return r.status;
  } catch (const Refusal& r) {
    return fail(error, r.status(), "%s%s%s: %s", plugin, sep, what, r.what());
  } catch (const std::bad_alloc&) {
    return fail(error, STRATA_ERROR_OUT_OF_MEMORY, "%s%s%s: out of host memory", plugin, sep, what);
  } catch (const std::invalid_argument& e) {  // bad operands or attributes (attr_of_kind)
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s%s%s: %s", plugin, sep, what, e.what());
  } catch (const std::exception& e) {
    return fail(error, STRATA_ERROR_INTERNAL, "%s%s%s: %s", plugin, sep, what, e.what());
  } catch (...) {
    return fail(error, STRATA_ERROR_INTERNAL, "%s%s%s: unknown exception", plugin, sep, what);
  }
}

/// Runs `body` (returning strata_status) and turns every exception into a
/// status with a message prefixed by `what` (an op or entry point name):
/// Refusal carries its own status, Reported returns its status with the
/// message already written, std::invalid_argument is INVALID_ARGUMENT,
/// std::bad_alloc OUT_OF_MEMORY, anything else INTERNAL. Nothing ever throws
/// across the ABI.
template <class Body>
strata_status guarded(strata_error* error, const char* what, Body&& body) noexcept {
  return guarded_at(error, nullptr, what, static_cast<Body&&>(body));
}

/// Whether an argument struct from the host is at least `min_size` bytes
/// (its ABI 2.0 size); use with the STRATA_*_MIN_SIZE macros.
template <class T>
bool large_enough(const T* args, size_t min_size) {
  return args != nullptr && args->struct_size >= min_size;
}

/// Short lower-case name, as used in kernel signatures ("f32", "bool").
inline const char* dtype_name(strata_dtype dtype) {
  switch (dtype) {
    case STRATA_F32: return "f32";
    case STRATA_F64: return "f64";
    case STRATA_F16: return "f16";
    case STRATA_BF16: return "bf16";
    case STRATA_I32: return "i32";
    case STRATA_I64: return "i64";
    case STRATA_BOOL: return "bool";
    case STRATA_I8: return "i8";
    case STRATA_U8: return "u8";
    case STRATA_F8_E4M3: return "f8e4m3";
    case STRATA_F8_E5M2: return "f8e5m2";
    case STRATA_C64: return "c64";
    case STRATA_C128: return "c128";
    default: return "?";
  }
}

/// Bytes per element (0 for an unknown value).
inline size_t dtype_size(strata_dtype dtype) {
  switch (dtype) {
    case STRATA_C128: return 16;
    case STRATA_F64:
    case STRATA_I64:
    case STRATA_C64: return 8;
    case STRATA_F32:
    case STRATA_I32: return 4;
    case STRATA_F16:
    case STRATA_BF16: return 2;
    case STRATA_BOOL:
    case STRATA_I8:
    case STRATA_U8:
    case STRATA_F8_E4M3:
    case STRATA_F8_E5M2: return 1;
    default: return 0;
  }
}

inline const char* attr_kind_name(strata_attr_kind kind) {
  switch (kind) {
    case STRATA_ATTR_INT: return "INT";
    case STRATA_ATTR_FLOAT: return "FLOAT";
    case STRATA_ATTR_INTS: return "INTS";
    case STRATA_ATTR_BOOL: return "BOOL";
    case STRATA_ATTR_STRING: return "STRING";
    case STRATA_ATTR_FLOATS: return "FLOATS";
    case STRATA_ATTR_DTYPE: return "DTYPE";
    case STRATA_ATTR_SCALAR: return "SCALAR";
    default: return "?";
  }
}

/// "f32[2, 3]" for messages.
inline std::string describe(const strata_tensor& t) {
  std::string s = dtype_name(t.dtype);
  s += "[";
  for (int32_t d = 0; d < t.rank && d < STRATA_MAX_RANK; ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(t.shape[d]);
  }
  return s + "]";
}

/// Number of elements of a descriptor (1 for rank 0).
inline int64_t numel(const strata_tensor& t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t.rank; ++d) n *= t.shape[d];
  return n;
}

/// True when the descriptor is compact row-major (size-1 dims ignored).
inline bool is_contiguous(const strata_tensor& t) {
  int64_t expected = 1;
  for (int32_t d = t.rank - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

/// True when two descriptors have the same rank and shape.
inline bool same_shape(const strata_tensor& a, const strata_tensor& b) {
  if (a.rank != b.rank) return false;
  for (int32_t d = 0; d < a.rank; ++d) {
    if (a.shape[d] != b.shape[d]) return false;
  }
  return true;
}

/// True when the descriptor shows one value at every element: each dim of
/// size above one has stride 0 (how the core passes a broadcast operand,
/// expanded to the output's shape), or it has one element.
inline bool is_one_value(const strata_tensor& t) {
  for (int32_t d = 0; d < t.rank; ++d)
    if (t.shape[d] != 1 && t.strides[d] != 0) return false;
  return true;
}

/// The number of applications k in a call of a kernel registered with
/// STRATA_KERNEL_GROUPED for a signature of `n_in` inputs and `n_out`
/// outputs: n_inputs = k * n_in and n_outputs = k * n_out with k >= 1, and
/// both operand arrays present. 0 for any other call (refuse it).
inline int32_t group_count(const strata_kernel_call& call, int32_t n_in, int32_t n_out) {
  if (n_in <= 0 || n_out <= 0 || call.inputs == nullptr || call.outputs == nullptr) return 0;
  if (call.n_inputs <= 0 || call.n_inputs % n_in != 0) return 0;
  const int32_t k = call.n_inputs / n_in;
  return static_cast<int64_t>(call.n_outputs) == static_cast<int64_t>(k) * n_out ? k : 0;
}

// ---- Entry points ----------------------------------------------------------------

/// The ABI 2.0 size (2.7 for strata_view_args, which 2.7 added) of each
/// argument struct the plugin table's and the extensions' functions take
/// (the STRATA_*_ARGS_MIN_SIZE macros), for entry_point().
template <class Args>
inline constexpr size_t kArgsMinSize = 0;
#define STRATA_SDK_ARGS_MIN_SIZE(name, NAME) \
  template <>                               \
  inline constexpr size_t kArgsMinSize<strata_##name##_args> = STRATA_##NAME##_ARGS_MIN_SIZE;
STRATA_SDK_ARGS_MIN_SIZE(probe, PROBE)
STRATA_SDK_ARGS_MIN_SIZE(init, INIT)
STRATA_SDK_ARGS_MIN_SIZE(device, DEVICE)
STRATA_SDK_ARGS_MIN_SIZE(alloc, ALLOC)
STRATA_SDK_ARGS_MIN_SIZE(copy, COPY)
STRATA_SDK_ARGS_MIN_SIZE(memory, MEMORY)
STRATA_SDK_ARGS_MIN_SIZE(stream, STREAM)
STRATA_SDK_ARGS_MIN_SIZE(native, NATIVE)
STRATA_SDK_ARGS_MIN_SIZE(collective, COLLECTIVE)
STRATA_SDK_ARGS_MIN_SIZE(graph, GRAPH)
STRATA_SDK_ARGS_MIN_SIZE(view, VIEW)  // ABI 2.7
#undef STRATA_SDK_ARGS_MIN_SIZE

/// The frame of a table function: an argument struct below its ABI minimum
/// (or NULL) is INVALID_ARGUMENT without a message (a struct that small does
/// not carry `error`); otherwise body() runs under guarded(), so that no
/// exception crosses the ABI:
///   strata_status memory_trim(strata_memory_args* a) noexcept {
///     return entry_point(a, "acme: memory_trim", [&] { ...; return STRATA_OK; });
///   }
template <class Args, class Body>
strata_status entry_point(Args* a, const char* what, Body&& body) noexcept {
  static_assert(kArgsMinSize<Args> > 0, "entry_point: not an argument struct of the plugin table");
  if (!large_enough(a, kArgsMinSize<Args>)) return STRATA_ERROR_INVALID_ARGUMENT;
  return guarded(a->error, what, static_cast<Body&&>(body));
}

// ---- Refusing a call -------------------------------------------------------------

/// A kernel call struct below the ABI minimum (or NULL): a message naming the
/// op and both sizes. Returns INVALID_ARGUMENT.
[[gnu::cold, gnu::noinline]] inline strata_status refuse_small_call(const strata_kernel_call* call,
                                                                   const char* op) noexcept {
  if (call == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;  // nowhere to write a message
  // `error` is the struct's last required field, so a struct this small does
  // not officially carry it; a host that got struct_size wrong still almost
  // always passed a whole struct, and the message is worth the attempt.
  return fail(call->error, STRATA_ERROR_INVALID_ARGUMENT,
              "%s: kernel call struct_size %zu is below the ABI %d.%d minimum of %zu bytes", op, call->struct_size,
              STRATA_ABI_MAJOR, STRATA_ABI_MINOR, static_cast<size_t>(STRATA_KERNEL_CALL_MIN_SIZE));
}

/// Why the operands of `call` do not fit a kernel of signature in -> out: a
/// message naming the op, the signature ("f32,f32->f32") and the first
/// operand at fault (the counts, a NULL array or descriptor, a descriptor
/// below the ABI minimum, its rank, its dtype). The cold path of a kernel's
/// operand check; returns INVALID_ARGUMENT.
[[gnu::cold, gnu::noinline]] inline strata_status refuse_operands(const strata_kernel_call& call, const char* op,
                                                                 const strata_dtype* in, int n_in,
                                                                 const strata_dtype* out, int n_out) noexcept {
  std::string sig;
  for (int k = 0; k < n_in + n_out; ++k) {
    sig += k == n_in ? "->" : (k == 0 ? "" : ",");
    sig += dtype_name(k < n_in ? in[k] : out[k - n_in]);
  }
  const char* s = sig.c_str();
  strata_error* error = call.error;
  if (call.n_inputs != n_in || call.n_outputs != n_out) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): expected %d inputs and %d outputs, got %d and %d", op,
                s, n_in, n_out, call.n_inputs, call.n_outputs);
  }
  if ((n_in > 0 && call.inputs == nullptr) || call.outputs == nullptr) {
    return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): the %s array is NULL", op, s,
                call.outputs == nullptr ? "outputs" : "inputs");
  }
  for (int k = 0; k < n_in + n_out; ++k) {
    const bool input = k < n_in;
    const int i = input ? k : k - n_in;
    const strata_tensor* t = input ? call.inputs[i] : call.outputs[i];
    const strata_dtype wanted = input ? in[i] : out[i];
    const char* role = input ? "input" : "output";
    if (t == nullptr) return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): %s %d is NULL", op, s, role, i);
    if (t->struct_size < STRATA_TENSOR_MIN_SIZE) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s (%s): %s %d has descriptor struct_size %zu, below the minimum %zu", op, s, role, i,
                  t->struct_size, static_cast<size_t>(STRATA_TENSOR_MIN_SIZE));
    }
    if (static_cast<uint32_t>(t->rank) > STRATA_MAX_RANK) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): %s %d has rank %d, outside [0, %d]", op, s, role, i,
                  t->rank, STRATA_MAX_RANK);
    }
    if (t->dtype != wanted) {
      return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): %s %d is %s, the kernel takes %s", op, s, role, i,
                  dtype_name(t->dtype), dtype_name(wanted));
    }
  }
  return fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s (%s): operands do not match the kernel signature", op, s);
}

// ---- Type lists ------------------------------------------------------------------

/// A list of element types, for registering one kernel template per dtype.
template <class... T>
struct TypeList {
  static constexpr int size = sizeof...(T);
};

template <class T, class Indices>
struct RepeatedTypeList;
template <class T, size_t... I>
struct RepeatedTypeList<T, std::index_sequence<I...>> {
  template <size_t>
  using Same = T;
  using type = TypeList<Same<I>...>;
};

/// TypeList<T, ..., T> of N entries: the operands of a signature of N
/// tensors of one type (the fused op's kernels, one per operand count):
///   Signature<RepeatedTypes<float, 3>, RepeatedTypes<float, 2>>
template <class T, size_t N>
using RepeatedTypes = typename RepeatedTypeList<T, std::make_index_sequence<N>>::type;

/// Calls `body.template operator()<T>()` for each T of the list, in order:
///   for_each_type(TypeList<float, double>{}, [&]<class T>() { add<Relu<T>>(table); });
template <class... T, class Body>
void for_each_type(TypeList<T...>, Body&& body) {
  (body.template operator()<T>(), ...);
}

// ---- Attributes ---------------------------------------------------------------

/// Whether the NUL-terminated `s` equals `name`. Stops at the first
/// character that differs (usually the first), where `name == s` would
/// first measure `s` (an adam_step kernel spent about 6,000 instructions,
/// half of its call's overhead, finding its nine attributes that way).
inline bool attr_name_is(const char* s, std::string_view name) {
  for (char c : name) {
    if (*s == '\0' || *s != c) return false;
    ++s;
  }
  return *s == '\0';
}

/// Reports a name find_attr did not find to the host (strata_kernel_call::
/// attr_missing, ABI 2.2), which tells a declared optional attribute from a
/// name the op does not declare. Cold: only misses reach it.
[[gnu::cold, gnu::noinline]] inline void report_missing_attr(const strata_kernel_call& call, std::string_view name) {
  if (STRATA_HAS_FIELD(&call, strata_kernel_call, attr_missing) && call.attr_missing != nullptr) {
    call.attr_missing(&call, std::string(name).c_str());
  }
}

/// Looks up an attribute of a call by name; nullptr when absent (then
/// reported to the host: report_missing_attr).
inline const strata_attr* find_attr(const strata_kernel_call& call, std::string_view name) {
  for (int32_t k = 0; call.attrs != nullptr && k < call.n_attrs; ++k) {
    const strata_attr* a = call.attrs[k];
    if (a != nullptr && a->struct_size >= STRATA_ATTR_MIN_SIZE && a->name != nullptr && attr_name_is(a->name, name)) {
      return a;
    }
  }
  report_missing_attr(call, name);
  return nullptr;
}

/// The attribute `name` when it has `kind`; nullptr when absent. A present
/// attribute of another kind is a caller bug: throws std::invalid_argument
/// naming op, attribute and both kinds (guarded() turns it into a status).
inline const strata_attr* attr_of_kind(const strata_kernel_call& call, std::string_view name,
                                       strata_attr_kind kind) {
  const strata_attr* a = find_attr(call, name);
  if (a == nullptr || a->kind == kind) return a;
  throw std::invalid_argument(std::string(call.op != nullptr ? call.op : "?") + ": attribute '" +
                              std::string(name) + "' must be " + attr_kind_name(kind) + ", got " +
                              attr_kind_name(a->kind));
}

/// The value of `a`, an attribute of `call`, as an integer: INT, BOOL,
/// DTYPE or an integral SCALAR; another kind throws as attr_of_kind does.
inline int64_t attr_int_value(const strata_kernel_call& call, const strata_attr& a) {
  if (a.kind == STRATA_ATTR_INT || a.kind == STRATA_ATTR_BOOL || a.kind == STRATA_ATTR_DTYPE) return a.i;
  if (a.kind == STRATA_ATTR_SCALAR && a.scalar_dtype != STRATA_F64) return a.i;
  return attr_of_kind(call, a.name, STRATA_ATTR_INT)->i;
}

/// The value of `a`, an attribute of `call`, as a double: FLOAT, or an INT,
/// BOOL or exact SCALAR read as a double; another kind throws as
/// attr_of_kind does.
inline double attr_float_value(const strata_kernel_call& call, const strata_attr& a) {
  if (a.kind == STRATA_ATTR_FLOAT) return a.f;
  if (a.kind == STRATA_ATTR_INT || a.kind == STRATA_ATTR_BOOL) return static_cast<double>(a.i);
  if (a.kind == STRATA_ATTR_SCALAR) return a.scalar_dtype == STRATA_F64 ? a.f : static_cast<double>(a.i);
  return attr_of_kind(call, a.name, STRATA_ATTR_FLOAT)->f;
}

inline int64_t attr_int(const strata_kernel_call& call, std::string_view name, int64_t fallback) {
  const strata_attr* a = find_attr(call, name);
  return a == nullptr ? fallback : attr_int_value(call, *a);
}

/// FLOAT, or an INT, BOOL or exact SCALAR read as a double.
inline double attr_float(const strata_kernel_call& call, std::string_view name, double fallback) {
  const strata_attr* a = find_attr(call, name);
  return a == nullptr ? fallback : attr_float_value(call, *a);
}

// ---- The kernel table -------------------------------------------------------------

/// A device's kernel table: entries plus the storage their strings point at,
/// exposed as the pointer array get_kernels returns. Build it once and keep it
/// until the process exits (the ABI promises the array stays valid).
class KernelTable {
 public:
  void add(const char* op, std::string signature, strata_kernel_fn fn, uint32_t flags = 0,
           void* user_data = nullptr, uint32_t op_version = STRATA_OP_VERSION) {
    signatures_.push_back(std::move(signature));
    entries_.push_back(strata_kernel_entry{sizeof(strata_kernel_entry), op, op_version,
                                           signatures_.back().c_str(), flags, fn, user_data});
    pointers_.push_back(&entries_.back());
  }
  size_t size() const { return pointers_.size(); }
  const strata_kernel_entry* const* data() const { return pointers_.data(); }

  /// The body of get_kernels: hands the table to the host.
  strata_status publish(strata_device_args* args) const {
    args->entries = pointers_.data();
    args->n_entries = static_cast<int32_t>(pointers_.size());
    return STRATA_OK;
  }

 private:
  std::deque<std::string> signatures_;        // stable c_str() pointers
  std::deque<strata_kernel_entry> entries_;   // stable addresses
  std::vector<const strata_kernel_entry*> pointers_;
};

/// The kernel table a plugin hands every device: built on first use by
/// calling each registration function (`void(KernelTable&)`) in order, and
/// never destroyed: the ABI promises the array stays valid until the process
/// exits, which static destruction of the library would break.
///   const KernelTable& kernel_table() {
///     return static_kernel_table<register_unary_kernels, register_binary_kernels>();
///   }
template <auto... Register>
const KernelTable& static_kernel_table() {
  static const KernelTable* const table = [] {
    auto* t = new KernelTable;
    (Register(*t), ...);
    return t;
  }();
  return *table;
}

/// The body of device_props: copies `props` into the host's struct, no more
/// than the host's capacity (its struct_size on entry; an older host knows a
/// shorter struct), and sets struct_size to the bytes written.
/// Messages name `plugin` first when given ("acme: device_props: ...").
inline strata_status publish_props(strata_device_args* args, const strata_device_props& props,
                                   const char* plugin = nullptr) {
  const char* sep = plugin != nullptr ? ": " : "";
  if (plugin == nullptr) plugin = "";
  if (args->props == nullptr) {
    return fail(args->error, STRATA_ERROR_INVALID_ARGUMENT, "%s%sdevice_props: no props struct", plugin, sep);
  }
  if (args->props->struct_size < STRATA_DEVICE_PROPS_MIN_SIZE) {
    return fail(args->error, STRATA_ERROR_INVALID_ARGUMENT,
                "%s%sdevice_props: the host's props capacity (struct_size %zu) is below the minimum of %zu bytes",
                plugin, sep, args->props->struct_size, static_cast<size_t>(STRATA_DEVICE_PROPS_MIN_SIZE));
  }
  size_t bytes = sizeof(props);
  if (args->props->struct_size < bytes) bytes = args->props->struct_size;
  std::memcpy(args->props, &props, bytes);
  args->props->struct_size = bytes;
  return STRATA_OK;
}

/// Writes a message through the host's logger, when the host offers one.
inline void log(const strata_host_api* host, strata_log_level level, const char* plugin_name, const char* message) {
  if (host != nullptr && STRATA_HAS_FIELD(host, strata_host_api, log) && host->log != nullptr) {
    host->log(level, plugin_name, message);
  }
}

}  // namespace strata::plugin
