// backend.hpp — one C++ class is a plugin: make_api<Backend>() builds the C
// table (strata_plugin.h) from a class whose members are found by name.
//
// Optional, header only, C++20; the C ABI does not depend on it (a plugin in C
// fills strata_plugin_api itself). What it does once, for every backend:
// checks each argument struct against its ABI minimum (with a message naming
// the entry point and both sizes), finds the plugin state and the device an
// argument names ("no device 3 (the plugin has 1)"), turns exceptions into
// statuses with "<plugin>: <entry>: " messages, asks for deferred errors at
// each synchronisation point, and detects the optional members (memory
// queries, streams and events, extensions) at compile time.
//
// The class is the plugin's state: init() makes one, shutdown deletes it.
//
//   class Acme {
//    public:
//     static constexpr const char* kName = "acme";          // the manifest
//     static constexpr const char* kVendor = "ACME Corp.";
//     static constexpr const char* kVersion = "1.0.0";
//     using Device = AcmeDevice;
//
//     static strata_status probe(strata_probe_args& a);      // sets a.score
//     static std::unique_ptr<Acme> init(strata_init_args& a); // throws Refusal
//     int32_t device_count() const;
//     Device& device(int32_t index);                         // index is checked
//     strata_device_props props(Device& d);
//     const plugin::KernelTable& kernels(Device& d);
//     strata_status alloc(Device& d, strata_alloc_args& a);
//     void free(Device& d, strata_alloc_args& a);            // or a status
//     strata_status copy(Device& d, strata_copy_args& a);
//   };
//   STRATA_PLUGIN_BACKEND(Acme)
//
// Optional members, used when declared (the names and the argument struct
// are those of the C table):
//   static constexpr uint32_t kMinHostMinor;                 // default 0
//   static constexpr const char* const* kProbeEnvironment;  // ABI 2.1
//   static const strata_extension* extensions();            // e.g. native_handles<Acme>()
//   strata_status memory_info / memory_trim / memory_stats(Device&, strata_memory_args&);
//   the nine stream and event functions, all or none, and event_elapsed
//     (Device&, strata_stream_args&; the two destroys may return void);
//   STRATA_BACKEND_MEMBERS(Class, Device), STRATA_BACKEND_MEMORY_MEMBERS(Device)
//     and STRATA_BACKEND_STREAM_MEMBERS(Device) declare these with the right
//     signatures, and DeviceList<Device> is a base with device_count/device;
//   strata_status deferred(Device&, strata_error*);  // errors of earlier
//     asynchronous work: asked after a successful stream_synchronize,
//     event_synchronize, event_elapsed and synchronous device-to-host copy.
//
// Members report failure by returning a status with fail() (the message is
// theirs), by throwing Refusal (status and message; the SDK adds
// "<plugin>: <entry>: "), check() (a status whose message is written), or any
// exception (see guarded()).
#pragma once

#include <strata/plugin/strata_plugin.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

/// Declares, inside backend class `Class`, the members every backend has
/// besides its devices' properties: probe, init and the kernel table.
#define STRATA_BACKEND_MEMBERS(Class, Device)                  \
  static strata_status probe(strata_probe_args& args);         \
  static std::unique_ptr<Class> init(strata_init_args& args);  \
  const ::strata::plugin::KernelTable& kernels(Device& device) const

/// Declares, inside a backend class, the six memory members with the
/// signatures make_api looks for (define them where you like):
///   class Acme { ... STRATA_BACKEND_MEMORY_MEMBERS(Device); ... };
/// free's status, which the C function cannot return, goes to the log.
#define STRATA_BACKEND_MEMORY_MEMBERS(Device)                      \
  strata_status alloc(Device& device, strata_alloc_args& args);    \
  strata_status free(Device& device, strata_alloc_args& args);     \
  strata_status copy(Device& device, strata_copy_args& args);      \
  strata_status memory_info(Device& device, strata_memory_args& args); \
  strata_status memory_trim(Device& device, strata_memory_args& args); \
  strata_status memory_stats(Device& device, strata_memory_args& args)

/// Declares the ten stream and event members (the nine a device with
/// STRATA_DEVICE_HAS_STREAMS needs, and event_elapsed); the two destroys'
/// statuses go to the log.
#define STRATA_BACKEND_STREAM_MEMBERS(Device)                               \
  strata_status stream_create(Device& device, strata_stream_args& args);    \
  strata_status stream_destroy(Device& device, strata_stream_args& args);   \
  strata_status stream_synchronize(Device& device, strata_stream_args& args); \
  strata_status event_create(Device& device, strata_stream_args& args);     \
  strata_status event_destroy(Device& device, strata_stream_args& args);    \
  strata_status event_record(Device& device, strata_stream_args& args);     \
  strata_status stream_wait_event(Device& device, strata_stream_args& args); \
  strata_status event_synchronize(Device& device, strata_stream_args& args); \
  strata_status event_query(Device& device, strata_stream_args& args);      \
  strata_status event_elapsed(Device& device, strata_stream_args& args)

namespace strata::plugin {

/// A base for a backend whose devices are made at init and live until
/// shutdown: device_count() and device(index) over `devices` (make_api has
/// checked the index).
template <class Device>
struct DeviceList {
  std::vector<std::unique_ptr<Device>> devices;
  int32_t device_count() const { return static_cast<int32_t>(devices.size()); }
  Device& device(int32_t index) { return *devices[static_cast<size_t>(index)]; }
};

/// What make_api requires of a backend class (see the top of this file).
template <class B>
concept Backend = requires(B& b, const B& cb, typename B::Device& d, int32_t index, strata_probe_args& probe,
                           strata_init_args& init, strata_alloc_args& alloc, strata_copy_args& copy) {
  { B::kName } -> std::convertible_to<const char*>;
  { B::kVendor } -> std::convertible_to<const char*>;
  { B::kVersion } -> std::convertible_to<const char*>;
  { B::probe(probe) } -> std::same_as<strata_status>;
  { B::init(init) } -> std::same_as<std::unique_ptr<B>>;
  { cb.device_count() } -> std::convertible_to<int32_t>;
  { b.device(index) } -> std::same_as<typename B::Device&>;
  { b.props(d) } -> std::convertible_to<strata_device_props>;
  { b.kernels(d) } -> std::convertible_to<const KernelTable&>;
  { b.alloc(d, alloc) } -> std::same_as<strata_status>;
  b.free(d, alloc);
  { b.copy(d, copy) } -> std::same_as<strata_status>;
};

namespace backend_detail {

#define STRATA_SDK_HAS(member, Args)                                                                   \
  template <class B>                                                                                   \
  concept has_##member = requires(B& b, typename B::Device& d, Args& a) { b.member(d, a); };
STRATA_SDK_HAS(memory_info, strata_memory_args)
STRATA_SDK_HAS(memory_trim, strata_memory_args)
STRATA_SDK_HAS(memory_stats, strata_memory_args)
STRATA_SDK_HAS(stream_create, strata_stream_args)
STRATA_SDK_HAS(stream_destroy, strata_stream_args)
STRATA_SDK_HAS(stream_synchronize, strata_stream_args)
STRATA_SDK_HAS(event_create, strata_stream_args)
STRATA_SDK_HAS(event_destroy, strata_stream_args)
STRATA_SDK_HAS(event_record, strata_stream_args)
STRATA_SDK_HAS(stream_wait_event, strata_stream_args)
STRATA_SDK_HAS(event_synchronize, strata_stream_args)
STRATA_SDK_HAS(event_query, strata_stream_args)
STRATA_SDK_HAS(event_elapsed, strata_stream_args)
STRATA_SDK_HAS(buffer_pointer, strata_native_args)
STRATA_SDK_HAS(stream_handle, strata_native_args)
STRATA_SDK_HAS(create_view, strata_view_args)
STRATA_SDK_HAS(destroy_view, strata_view_args)
#undef STRATA_SDK_HAS

template <class B>
concept has_deferred = requires(B& b, typename B::Device& d, strata_error* e) {
  { b.deferred(d, e) } -> std::same_as<strata_status>;
};

/// How many of the nine required stream and event members B declares.
template <class B>
constexpr int stream_members = has_stream_create<B> + has_stream_destroy<B> + has_stream_synchronize<B> +
                               has_event_create<B> + has_event_destroy<B> + has_event_record<B> +
                               has_stream_wait_event<B> + has_event_synchronize<B> + has_event_query<B>;

/// An argument struct below its ABI minimum. `error` is each struct's last
/// required field, so a struct this small does not officially carry it; a
/// host that got struct_size wrong still almost always passed a whole
/// struct, so the message is written through it when there is one.
template <class Args>
[[gnu::cold, gnu::noinline]] strata_status too_small(const Args* a, const char* plugin, const char* what) noexcept {
  if (a == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
  return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT,
              "%s: %s: argument struct_size %zu is below the ABI %d.%d minimum of %zu bytes", plugin, what,
              a->struct_size, STRATA_ABI_MAJOR, STRATA_ABI_MINOR, kArgsMinSize<Args>);
}

/// The frame of every entry point: size check, then body() under
/// guarded_at, messages prefixed "<plugin>: <what>: ".
template <class B, class Args, class Body>
strata_status framed(Args* a, const char* what, Body&& body) noexcept {
  static_assert(kArgsMinSize<Args> > 0, "not an argument struct of the plugin table");
  if (!large_enough(a, kArgsMinSize<Args>)) [[unlikely]] {
    return too_small(a, B::kName, what);
  }
  return guarded_at(a->error, B::kName, what, static_cast<Body&&>(body));
}

/// framed() for an entry point that names a device: body(backend, device)
/// once the state and the device index have been checked.
template <class B, class Args, class Body>
strata_status on_device(Args* a, const char* what, Body&& body) noexcept {
  return framed<B>(a, what, [&]() -> strata_status {
    B* b = reinterpret_cast<B*>(a->state);
    if (b == nullptr) [[unlikely]] {
      return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: no plugin state (init has not succeeded)",
                  B::kName, what);
    }
    const int32_t n = static_cast<int32_t>(b->device_count());
    if (a->device < 0 || a->device >= n) [[unlikely]] {
      return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s: no device %d (the plugin has %d)", B::kName,
                  what, a->device, n);
    }
    return body(*b, b->device(a->device));
  });
}

/// A status entry point: on_device() calling `Member`, then, for a
/// synchronisation point, the backend's deferred errors.
template <class B, class Args, auto Call>
strata_status call(Args* a, const char* what) noexcept {
  return on_device<B>(a, what, [&](B& b, typename B::Device& d) -> strata_status { return Call(b, d, *a); });
}

/// A void entry point (free, stream_destroy, event_destroy): the same
/// checks; the member returns void or a status, and a failure, which the C
/// function cannot return, goes to the host's log as a warning (when the
/// backend has a `host` member, the strata_host_api* init received).
template <class B, class Args, auto Call>
void call_void(Args* a, const char* what) noexcept {
  const strata_status status = on_device<B>(a, what, [&](B& b, typename B::Device& d) -> strata_status {
    if constexpr (std::is_void_v<decltype(Call(b, d, *a))>) {
      Call(b, d, *a);
      return STRATA_OK;
    } else {
      return Call(b, d, *a);
    }
  });
  if constexpr (requires(B& b) { log(b.host, STRATA_LOG_WARN, B::kName, ""); }) {
    if (status != STRATA_OK && a != nullptr && a->state != nullptr && large_enough(a, kArgsMinSize<Args>) &&
        a->error != nullptr) {
      log(reinterpret_cast<B*>(a->state)->host, STRATA_LOG_WARN, B::kName, a->error->message);
    }
  }
}

template <class B>
strata_status then_deferred(B& b, typename B::Device& d, strata_status status, strata_error* error) {
  if constexpr (has_deferred<B>) {
    if (status == STRATA_OK) return b.deferred(d, error);
  }
  return status;
}

template <Backend B>
strata_plugin_api build_api() {
  static_assert(stream_members<B> == 0 || stream_members<B> == 9,
                "a backend declares all nine stream and event members (stream_create, stream_destroy, "
                "stream_synchronize, event_create, event_destroy, event_record, stream_wait_event, "
                "event_synchronize, event_query) or none");
  using Device = typename B::Device;
  strata_plugin_api api{};
  api.struct_size = sizeof(api);
  api.abi_major = STRATA_ABI_MAJOR;
  api.abi_minor = STRATA_ABI_MINOR;
  if constexpr (requires { B::kMinHostMinor; }) api.min_host_minor = B::kMinHostMinor;
  api.name = B::kName;
  api.vendor = B::kVendor;
  api.version = B::kVersion;
  if constexpr (requires { B::kProbeEnvironment; }) api.probe_environment = B::kProbeEnvironment;
  if constexpr (requires { B::extensions(); }) api.extensions = B::extensions();

  api.probe = [](strata_probe_args* a) noexcept {
    return framed<B>(a, "probe", [&] { return B::probe(*a); });
  };
  api.init = [](strata_init_args* a) noexcept {
    return framed<B>(a, "init", [&]() -> strata_status {
      std::unique_ptr<B> b = B::init(*a);
      if (b == nullptr) throw Refusal(STRATA_ERROR_INTERNAL, "init returned no state");
      a->device_count = static_cast<int32_t>(b->device_count());
      a->state = reinterpret_cast<strata_plugin_state>(b.release());
      return STRATA_OK;
    });
  };
  api.shutdown = [](strata_plugin_state state) noexcept { delete reinterpret_cast<B*>(state); };
  api.device_props = [](strata_device_args* a) noexcept {
    return on_device<B>(a, "device_props", [&](B& b, Device& d) { return publish_props(a, b.props(d), B::kName); });
  };
  api.get_kernels = [](strata_device_args* a) noexcept {
    return on_device<B>(a, "get_kernels", [&](B& b, Device& d) -> strata_status {
      const KernelTable& table = b.kernels(d);
      return table.publish(a);
    });
  };
  api.alloc = [](strata_alloc_args* a) noexcept {
    return call<B, strata_alloc_args, [](B& b, Device& d, strata_alloc_args& x) { return b.alloc(d, x); }>(a, "alloc");
  };
  api.free = [](strata_alloc_args* a) noexcept {
    call_void<B, strata_alloc_args, [](B& b, Device& d, strata_alloc_args& x) { return b.free(d, x); }>(a, "free");
  };
  api.copy = [](strata_copy_args* a) noexcept {
    return on_device<B>(a, "memory copy", [&](B& b, Device& d) {
      const bool synchronous_read = a->kind == STRATA_COPY_DEVICE_TO_HOST && (a->flags & STRATA_COPY_ASYNC) == 0;
      const strata_status status = b.copy(d, *a);
      return synchronous_read ? then_deferred(b, d, status, a->error) : status;
    });
  };

#define STRATA_SDK_ENTRY(member, Args)                                                                          \
  if constexpr (has_##member<B>) {                                                                              \
    api.member = [](Args* a) noexcept {                                                                         \
      return call<B, Args, [](B& b, Device& d, Args& x) -> strata_status { return b.member(d, x); }>(a, #member); \
    };                                                                                                          \
  }
  STRATA_SDK_ENTRY(memory_info, strata_memory_args)
  STRATA_SDK_ENTRY(memory_trim, strata_memory_args)
  STRATA_SDK_ENTRY(memory_stats, strata_memory_args)
  STRATA_SDK_ENTRY(stream_create, strata_stream_args)
  STRATA_SDK_ENTRY(event_create, strata_stream_args)
  STRATA_SDK_ENTRY(event_record, strata_stream_args)
  STRATA_SDK_ENTRY(stream_wait_event, strata_stream_args)
  STRATA_SDK_ENTRY(event_query, strata_stream_args)
#undef STRATA_SDK_ENTRY
  if constexpr (has_event_elapsed<B>) {
    api.event_elapsed = [](strata_stream_args* a) noexcept {
      return on_device<B>(a, "event_elapsed", [&](B& b, Device& d) {
        return then_deferred(b, d, b.event_elapsed(d, *a), a->error);
      });
    };
  }
  if constexpr (stream_members<B> == 9) {
    api.stream_destroy = [](strata_stream_args* a) noexcept {
      call_void<B, strata_stream_args, [](B& b, Device& d, strata_stream_args& x) { return b.stream_destroy(d, x); }>(
          a, "stream_destroy");
    };
    api.event_destroy = [](strata_stream_args* a) noexcept {
      call_void<B, strata_stream_args, [](B& b, Device& d, strata_stream_args& x) { return b.event_destroy(d, x); }>(
          a, "event_destroy");
    };
    api.stream_synchronize = [](strata_stream_args* a) noexcept {
      return on_device<B>(a, "stream_synchronize", [&](B& b, Device& d) {
        return then_deferred(b, d, b.stream_synchronize(d, *a), a->error);
      });
    };
    api.event_synchronize = [](strata_stream_args* a) noexcept {
      return on_device<B>(a, "event_synchronize", [&](B& b, Device& d) {
        return then_deferred(b, d, b.event_synchronize(d, *a), a->error);
      });
    };
  }
  return api;
}

}  // namespace backend_detail

/// The C table of backend B, built once and kept for the life of the
/// process (the entry point returns it; building it allocates nothing).
template <Backend B>
const strata_plugin_api* make_api() {
  static const strata_plugin_api api = backend_detail::build_api<B>();
  return &api;
}

/// The strata.native_handles extension (v1) of a backend that declares
///   strata_status buffer_pointer(Device&, strata_native_args&);
///   strata_status stream_handle(Device&, strata_native_args&);
/// with the same checks as the table's entry points; `next` chains another
/// extension (the first call's `next` is kept). For B::extensions().
template <Backend B>
const strata_extension* native_handles(const strata_extension* next = nullptr) {
  static_assert(backend_detail::has_buffer_pointer<B> && backend_detail::has_stream_handle<B>,
                "native_handles<B>: B declares buffer_pointer and stream_handle (Device&, strata_native_args&)");
  using namespace backend_detail;
  using Device = typename B::Device;
  static const strata_ext_native_handles ext = {
      .base = {.struct_size = sizeof(strata_ext_native_handles),
               .name = STRATA_EXT_NATIVE_HANDLES,
               .version = STRATA_EXT_NATIVE_HANDLES_VERSION,
               .next = next},
      .buffer_pointer =
          [](strata_native_args* a) noexcept {
            return call<B, strata_native_args,
                        [](B& b, Device& d, strata_native_args& x) -> strata_status { return b.buffer_pointer(d, x); }>(
                a, "native_handles.buffer_pointer");
          },
      .stream_handle =
          [](strata_native_args* a) noexcept {
            return call<B, strata_native_args,
                        [](B& b, Device& d, strata_native_args& x) -> strata_status { return b.stream_handle(d, x); }>(
                a, "native_handles.stream_handle");
          },
  };
  return &ext.base;
}

/// The strata.buffer_views extension (v1) of a backend that declares
///   strata_status create_view(Device&, strata_view_args&);
///   strata_status destroy_view(Device&, strata_view_args&);
/// with the same checks as the table's entry points; `next` chains another
/// extension (the first call's `next` is kept). For B::extensions(), e.g.
/// `buffer_views<Acme>(native_handles<Acme>())`.
template <Backend B>
const strata_extension* buffer_views(const strata_extension* next = nullptr) {
  static_assert(backend_detail::has_create_view<B> && backend_detail::has_destroy_view<B>,
                "buffer_views<B>: B declares create_view and destroy_view (Device&, strata_view_args&)");
  using namespace backend_detail;
  using Device = typename B::Device;
  static const strata_ext_buffer_views ext = {
      .base = {.struct_size = sizeof(strata_ext_buffer_views),
               .name = STRATA_EXT_BUFFER_VIEWS,
               .version = STRATA_EXT_BUFFER_VIEWS_VERSION,
               .next = next},
      .create_view =
          [](strata_view_args* a) noexcept {
            return call<B, strata_view_args,
                        [](B& b, Device& d, strata_view_args& x) -> strata_status { return b.create_view(d, x); }>(
                a, "buffer_views.create_view");
          },
      .destroy_view =
          [](strata_view_args* a) noexcept {
            call_void<B, strata_view_args,
                      [](B& b, Device& d, strata_view_args& x) -> strata_status { return b.destroy_view(d, x); }>(
                a, "buffer_views.destroy_view");
          },
  };
  return &ext.base;
}

}  // namespace strata::plugin

/// Defines the plugin's entry point for backend class B (at file scope, no
/// `;`): STRATA_PLUGIN_BACKEND(acme::Acme)
#define STRATA_PLUGIN_BACKEND(B) STRATA_PLUGIN_DEFINE_ENTRY(::strata::plugin::make_api<B>())
