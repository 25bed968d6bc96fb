// collectives.cpp — strata.collectives v1 on NCCL, opened at run time (see
// collectives.hpp). The HIP build (STRATA_GPU_HAS_NCCL 0: Debian 12 has no
// RCCL) compiles none of it, and its table has no collectives extension.
#include "collectives.hpp"

#if STRATA_GPU_HAS_NCCL

#include <dlfcn.h>
#include <nccl.h>  // types only: every function is reached through dlsym

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "state.hpp"

namespace strata::gpu {
namespace {

using plugin::describe;
using plugin::dtype_name;
using plugin::fail;

/// Named by STRATA_NCCL_LIBRARY, it replaces the default sonames.
constexpr const char* kLibraryVariable = "STRATA_NCCL_LIBRARY";
/// ncclAvg and ncclBfloat16 appeared in NCCL 2.10.
constexpr int kMinVersion = 21000;

struct Nccl {
  bool ok = false;
  std::string why;      // when !ok: "cannot load NCCL: ..."
  std::string library;  // the name that was opened
  int version = 0;      // NCCL_VERSION_CODE of the library
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  const char* (*error_string)(ncclResult_t) = nullptr;
  ncclResult_t (*get_version)(int*) = nullptr;

  std::string error(ncclResult_t r) const {
    const char* s = error_string != nullptr ? error_string(r) : nullptr;
    return (s != nullptr ? std::string(s) : "NCCL error") + " (ncclResult_t " + std::to_string(static_cast<int>(r)) +
           ")";
  }
};

template <class F>
bool bind(void* lib, const char* library, const char* name, F& out, std::string* why) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (out == nullptr) *why = std::string("cannot load NCCL: ") + library + " has no symbol " + name;
  return out != nullptr;
}

/// "2.28.3" from a NCCL_VERSION_CODE (the encoding changed at 2.9).
std::string version_string(int code) {
  const bool wide = code >= 10000;
  const int major = wide ? code / 10000 : code / 1000;
  const int minor = wide ? (code % 10000) / 100 : (code % 1000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

std::unique_ptr<Nccl> open_nccl(const std::string& override_name) {
  auto r = std::make_unique<Nccl>();
  const std::vector<std::string> names =
      override_name.empty() ? std::vector<std::string>{"libnccl.so.2", "libnccl.so"}
                            : std::vector<std::string>{override_name};
  void* lib = nullptr;
  std::string tried;
  for (const std::string& name : names) {
    dlerror();
    lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      r->library = name;
      break;
    }
    const char* e = dlerror();
    tried += (tried.empty() ? "" : "; ") + (e != nullptr ? std::string(e) : name + ": dlopen failed");
  }
  if (lib == nullptr) {
    r->why = "cannot load NCCL: " + tried;
    if (!override_name.empty()) r->why += std::string(" (the library named by ") + kLibraryVariable + ")";
    return r;
  }
  // The handle stays open for the process: communicators may outlive any caller.
  const char* n = r->library.c_str();
  const bool bound =
      bind(lib, n, "ncclGetUniqueId", r->get_unique_id, &r->why) &&
      bind(lib, n, "ncclCommInitRank", r->comm_init_rank, &r->why) &&
      bind(lib, n, "ncclCommDestroy", r->comm_destroy, &r->why) &&
      bind(lib, n, "ncclAllReduce", r->all_reduce, &r->why) && bind(lib, n, "ncclBroadcast", r->broadcast, &r->why) &&
      bind(lib, n, "ncclAllGather", r->all_gather, &r->why) &&
      bind(lib, n, "ncclGetErrorString", r->error_string, &r->why) &&
      bind(lib, n, "ncclGetVersion", r->get_version, &r->why);
  if (!bound) return r;
  if (ncclResult_t v = r->get_version(&r->version); v != ncclSuccess) {
    r->why = "cannot load NCCL: ncclGetVersion of " + r->library + ": " + r->error(v);
    return r;
  }
  if (r->version < kMinVersion) {
    r->why = "cannot load NCCL: " + r->library + " is NCCL " + version_string(r->version) + ", older than " +
             version_string(kMinVersion) + " (needed for ncclAvg and ncclBfloat16)";
    return r;
  }
  r->ok = true;
  return r;
}

/// NCCL as STRATA_NCCL_LIBRARY (or the default sonames) names it, opened once
/// per distinct name.
const Nccl& nccl() {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Nccl>> opened;
  const char* env = std::getenv(kLibraryVariable);
  const std::string key = env != nullptr ? env : "";
  std::lock_guard lock(mutex);
  auto it = opened.find(key);
  if (it == opened.end()) it = opened.emplace(key, open_nccl(key)).first;
  return *it->second;
}

/// A strata_comm.
struct Comm {
  ncclComm_t comm = nullptr;
  const Nccl* nccl = nullptr;  // the library that made it (kept open), used for all its calls
  Device* device = nullptr;
  int rank = 0;
  int world_size = 0;
};

Comm* as_comm(strata_comm c) { return reinterpret_cast<Comm*>(c); }

/// An NCCL failure as a status: argument and usage errors are the caller's,
/// the rest (CUDA, system, internal, remote) are the device's.
strata_status nccl_status(ncclResult_t r) {
  return r == ncclInvalidArgument || r == ncclInvalidUsage ? STRATA_ERROR_INVALID_ARGUMENT : STRATA_ERROR_DEVICE;
}

strata_status unavailable(const Nccl& n, const char* call, strata_error* error) {
  return fail(error, STRATA_ERROR_UNSUPPORTED, "%s; %s's %s needs it", n.why.c_str(), kPluginName, call);
}

std::optional<ncclDataType_t> nccl_dtype(strata_dtype t, bool reduce) {
  switch (t) {
    case STRATA_F32: return ncclFloat32;
    case STRATA_F64: return ncclFloat64;
    case STRATA_F16: return ncclFloat16;
    case STRATA_BF16: return ncclBfloat16;
    case STRATA_I32: return ncclInt32;
    case STRATA_I64: return ncclInt64;
    // bool is one byte, 0 or 1: moved as ncclUint8 by broadcast and
    // all_gather; NCCL has no boolean reduction.
    case STRATA_BOOL:
      if (!reduce) return ncclUint8;
      return std::nullopt;
    default: return std::nullopt;
  }
}

std::optional<ncclRedOp_t> nccl_op(strata_reduce_op op) {
  switch (op) {
    case STRATA_REDUCE_SUM: return ncclSum;
    case STRATA_REDUCE_PRODUCT: return ncclProd;
    case STRATA_REDUCE_MIN: return ncclMin;
    case STRATA_REDUCE_MAX: return ncclMax;
    case STRATA_REDUCE_AVERAGE: return ncclAvg;
    default: return std::nullopt;
  }
}

const char* op_name(strata_reduce_op op) {
  switch (op) {
    case STRATA_REDUCE_SUM: return "sum";
    case STRATA_REDUCE_PRODUCT: return "product";
    case STRATA_REDUCE_MIN: return "min";
    case STRATA_REDUCE_MAX: return "max";
    case STRATA_REDUCE_AVERAGE: return "average";
    default: return "?";
  }
}

/// "all_reduce on cuda:0 (rank 1 of 4)".
std::string where(const char* call, const Comm& c) {
  return std::string(call) + " on " + c.device->id + " (rank " + std::to_string(c.rank) + " of " +
         std::to_string(c.world_size) + ")";
}

/// The checks every data call shares: the args struct, NCCL, the
/// communicator and its device. nullptr with the status in *status.
Comm* comm_for(strata_collective_args* a, const char* call, const Nccl*& n, strata_status* status) {
  n = &nccl();
  if (!n->ok) {
    *status = unavailable(*n, call, a->error);
    return nullptr;
  }
  Device* d = device_of(a->state, a->device, a->error);
  if (d == nullptr) {
    *status = STRATA_ERROR_INVALID_ARGUMENT;
    return nullptr;
  }
  Comm* c = as_comm(a->comm);
  if (c == nullptr) {
    *status = fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s on %s: no communicator (comm is NULL; comm_create "
                   "makes one)", call, d->id.c_str());
    return nullptr;
  }
  if (c->device != d) {
    *status = fail(a->error, STRATA_ERROR_INVALID_ARGUMENT,
                   "%s: the communicator was created on %s but the call names %s", call, c->device->id.c_str(),
                   d->id.c_str());
    return nullptr;
  }
  if (cudaError_t e = make_current(*d); e != cudaSuccess) {
    *status = runtime_failure(e, d, "cudaSetDevice", a->error);
    return nullptr;
  }
  n = c->nccl;
  return c;
}

/// A contiguous descriptor's device address, or nullptr with the error set.
/// `role` is "send" or "recv".
void* address(const strata_tensor* t, const char* role, const std::string& at, strata_error* error,
              strata_status* status) {
  if (t == nullptr) {
    *status = fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", at.c_str(), role);
    return nullptr;
  }
  if (t->struct_size < STRATA_TENSOR_MIN_SIZE || t->rank < 0 || t->rank > STRATA_MAX_RANK) {
    *status = fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s is not a valid descriptor (struct_size %zu, rank %d)",
                   at.c_str(), role, t->struct_size, t->rank);
    return nullptr;
  }
  if (!plugin::is_contiguous(*t)) {
    *status = fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s %s is not contiguous", at.c_str(), role,
                   describe(*t).c_str());
    return nullptr;
  }
  const size_t bytes = plugin::dtype_size(t->dtype);
  if (bytes == 0) {
    *status = fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s has an unknown dtype %d", at.c_str(), role,
                   static_cast<int>(t->dtype));
    return nullptr;
  }
  if (t->buffer == nullptr) {
    // An empty tensor may have no buffer; NCCL reads nothing for count 0, but
    // a non-NULL address keeps "no descriptor" and "empty" apart here.
    static char empty;
    if (plugin::numel(*t) == 0) return &empty;
    *status = fail(error, STRATA_ERROR_INVALID_ARGUMENT, "%s: %s %s has no buffer", at.c_str(), role,
                   describe(*t).c_str());
    return nullptr;
  }
  return static_cast<char*>(static_cast<void*>(t->buffer)) + t->offset * static_cast<int64_t>(bytes);
}

using plugin::same_shape;

strata_status launched(const Nccl& n, ncclResult_t r, const char* fn, const std::string& at, const std::string& what,
                       strata_error* error) {
  if (r == ncclSuccess) return STRATA_OK;
  return fail(error, nccl_status(r), "%s: %s(%s): %s", at.c_str(), fn, what.c_str(), n.error(r).c_str());
}

/// The device addresses of send and recv, both required (address()).
strata_status operands(const strata_collective_args* a, const std::string& at, const void** send, void** recv) {
  strata_status st = STRATA_OK;
  *send = address(a->send, "send", at, a->error, &st);
  if (*send == nullptr) return st;
  *recv = address(a->recv, "recv", at, a->error, &st);
  return *recv == nullptr ? st : STRATA_OK;
}

/// The frame of every data call: the args struct's size, exceptions into
/// statuses, NCCL, the communicator and its device (comm_for); then
/// body(nccl, comm, at) with `at` naming the call ("all_reduce on cuda:0
/// (rank 1 of 4)").
template <class Body>
strata_status data_call(strata_collective_args* a, const char* name, Body&& body) noexcept {
  return plugin::entry_point(a, name, [&]() -> strata_status {
    const Nccl* n = nullptr;
    strata_status st = STRATA_OK;
    Comm* c = comm_for(a, name, n, &st);
    if (c == nullptr) return st;
    return body(*n, *c, where(name, *c));
  });
}

// ---- The extension's functions ------------------------------------------------

strata_status comm_unique_id(strata_collective_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_COLLECTIVE_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "comm_unique_id", [&]() -> strata_status {
    if (a->unique_id == nullptr) {
      return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: comm_unique_id: unique_id is NULL", kPluginName);
    }
    if (a->id_bytes < sizeof(ncclUniqueId)) {
      return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: comm_unique_id: id_bytes is %zu, but an NCCL unique id (ncclUniqueId) takes %zu bytes",
                  kPluginName, a->id_bytes, sizeof(ncclUniqueId));
    }
    const Nccl& n = nccl();
    if (!n.ok) return unavailable(n, "comm_unique_id", a->error);
    ncclUniqueId id{};
    if (ncclResult_t r = n.get_unique_id(&id); r != ncclSuccess) {
      return fail(a->error, nccl_status(r), "%s: comm_unique_id: ncclGetUniqueId: %s", kPluginName,
                  n.error(r).c_str());
    }
    std::memcpy(a->unique_id, &id, sizeof(id));
    a->id_bytes = sizeof(id);  // what to send to the other ranks
    return STRATA_OK;
  });
}

strata_status comm_create(strata_collective_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_COLLECTIVE_ARGS_MIN_SIZE)) return STRATA_ERROR_INVALID_ARGUMENT;
  return plugin::guarded(a->error, "comm_create", [&]() -> strata_status {
    a->comm = nullptr;
    const Nccl& n = nccl();
    if (!n.ok) return unavailable(n, "comm_create", a->error);
    Device* d = device_of(a->state, a->device, a->error);
    if (d == nullptr) return STRATA_ERROR_INVALID_ARGUMENT;
    const std::string at = "comm_create on " + d->id;
    if (a->world_size < 1 || a->rank < 0 || a->rank >= a->world_size) {
      return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: rank %d is not in a world of size %d", at.c_str(),
                  a->rank, a->world_size);
    }
    if (a->unique_id == nullptr || a->id_bytes != sizeof(ncclUniqueId)) {
      return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: the unique id must be the %zu bytes of comm_unique_id, got %s%zu bytes", at.c_str(),
                  sizeof(ncclUniqueId), a->unique_id == nullptr ? "NULL and " : "", a->id_bytes);
    }
    if (cudaError_t e = make_current(*d); e != cudaSuccess) return runtime_failure(e, d, "cudaSetDevice", a->error);
    ncclUniqueId id{};
    std::memcpy(&id, a->unique_id, sizeof(id));
    auto c = std::make_unique<Comm>();
    c->device = d;
    c->nccl = &n;
    c->rank = a->rank;
    c->world_size = a->world_size;
    if (ncclResult_t r = n.comm_init_rank(&c->comm, a->world_size, id, a->rank); r != ncclSuccess) {
      return fail(a->error, nccl_status(r), "%s: ncclCommInitRank (rank %d of %d, %s %s): %s", at.c_str(), a->rank,
                  a->world_size, n.library.c_str(), version_string(n.version).c_str(), n.error(r).c_str());
    }
    a->comm = reinterpret_cast<strata_comm>(c.release());
    return STRATA_OK;
  });
}

void comm_destroy(strata_collective_args* a) noexcept {
  if (!plugin::large_enough(a, STRATA_COLLECTIVE_ARGS_MIN_SIZE) || a->comm == nullptr) return;
  std::unique_ptr<Comm> c(as_comm(a->comm));
  a->comm = nullptr;
  const Nccl& n = *c->nccl;
  if (c->comm == nullptr) return;
  if (make_current(*c->device) != cudaSuccess) return;  // a lost context: nothing to release
  if (ncclResult_t r = n.comm_destroy(c->comm); r != ncclSuccess) {
    if (State* st = as_state(a->state); st != nullptr) {
      st->log(STRATA_LOG_WARN, "comm_destroy on " + c->device->id + ": ncclCommDestroy: " + n.error(r));
    }
  }
}

strata_status all_reduce(strata_collective_args* a) noexcept {
  return data_call(a, "all_reduce", [&](const Nccl& n, Comm& c, const std::string& at) -> strata_status {
    const void* send = nullptr;
    void* recv = nullptr;
    if (strata_status st = operands(a, at, &send, &recv); st != STRATA_OK) return st;
    const strata_tensor& s = *a->send;
    const strata_tensor& r = *a->recv;
    if (s.dtype != r.dtype || !same_shape(s, r)) {
      return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: send %s and recv %s differ", at.c_str(),
                  describe(s).c_str(), describe(r).c_str());
    }
    const std::optional<ncclRedOp_t> op = nccl_op(a->reduce);
    if (!op) {
      return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: unknown reduce op %d", at.c_str(),
                  static_cast<int>(a->reduce));
    }
    const std::optional<ncclDataType_t> type = nccl_dtype(s.dtype, true);
    if (!type) {
      return fail(a->error, STRATA_ERROR_UNSUPPORTED, "%s: NCCL cannot reduce %s (%s)", at.c_str(),
                  dtype_name(s.dtype), describe(s).c_str());
    }
    const std::string what = describe(s) + ", " + op_name(a->reduce);
    return launched(n,
                    n.all_reduce(send, recv, static_cast<size_t>(plugin::numel(s)), *type, *op, c.comm,
                                 native_stream(*c.device, a->stream)),
                    "ncclAllReduce", at, what, a->error);
  });
}

strata_status broadcast(strata_collective_args* a) noexcept {
  return data_call(a, "broadcast", [&](const Nccl& n, Comm& c, const std::string& at) -> strata_status {
    if (a->root < 0 || a->root >= c.world_size) {
      return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: root %d is not a rank", at.c_str(), a->root);
    }
    strata_status st = STRATA_OK;
    void* recv = address(a->recv, "recv", at, a->error, &st);
    if (recv == nullptr) return st;
    const strata_tensor& r = *a->recv;
    // send is read on the root only; other ranks may pass NULL.
    const void* send = recv;
    if (a->send != nullptr || c.rank == a->root) {
      send = address(a->send, "send", at, a->error, &st);
      if (send == nullptr) return st;
      if (a->send->dtype != r.dtype || !same_shape(*a->send, r)) {
        return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, "%s: send %s and recv %s differ", at.c_str(),
                    describe(*a->send).c_str(), describe(r).c_str());
      }
    }
    const std::optional<ncclDataType_t> type = nccl_dtype(r.dtype, false);
    if (!type) {
      return fail(a->error, STRATA_ERROR_UNSUPPORTED, "%s: NCCL has no type for %s (%s)", at.c_str(),
                  dtype_name(r.dtype), describe(r).c_str());
    }
    const std::string what = describe(r) + ", root " + std::to_string(a->root);
    return launched(n,
                    n.broadcast(send, recv, static_cast<size_t>(plugin::numel(r)), *type, a->root, c.comm,
                                native_stream(*c.device, a->stream)),
                    "ncclBroadcast", at, what, a->error);
  });
}

strata_status all_gather(strata_collective_args* a) noexcept {
  return data_call(a, "all_gather", [&](const Nccl& n, Comm& c, const std::string& at) -> strata_status {
    const void* send = nullptr;
    void* recv = nullptr;
    if (strata_status st = operands(a, at, &send, &recv); st != STRATA_OK) return st;
    const strata_tensor& s = *a->send;
    const strata_tensor& r = *a->recv;
    // recv: world_size slices of send's shape along a new dim 0.
    bool fits = s.dtype == r.dtype && s.rank < STRATA_MAX_RANK && r.rank == s.rank + 1 && r.shape[0] == c.world_size;
    for (int32_t k = 0; fits && k < s.rank; ++k) fits = r.shape[k + 1] == s.shape[k];
    if (!fits) {
      strata_tensor want = s;
      if (s.rank < STRATA_MAX_RANK) {
        want.rank = s.rank + 1;
        want.shape[0] = c.world_size;
        for (int32_t k = 0; k < s.rank; ++k) want.shape[k + 1] = s.shape[k];
      }
      return fail(a->error, STRATA_ERROR_INVALID_ARGUMENT,
                  "%s: recv must be %s (world_size %d slices of send's %s), got %s", at.c_str(),
                  s.rank < STRATA_MAX_RANK ? describe(want).c_str() : "of rank above the maximum", c.world_size,
                  describe(s).c_str(), describe(r).c_str());
    }
    const std::optional<ncclDataType_t> type = nccl_dtype(s.dtype, false);
    if (!type) {
      return fail(a->error, STRATA_ERROR_UNSUPPORTED, "%s: NCCL has no type for %s (%s)", at.c_str(),
                  dtype_name(s.dtype), describe(s).c_str());
    }
    const std::string what = describe(s) + " -> " + describe(r);
    return launched(n,
                    n.all_gather(send, recv, static_cast<size_t>(plugin::numel(s)), *type, c.comm,
                                 native_stream(*c.device, a->stream)),
                    "ncclAllGather", at, what, a->error);
  });
}

}  // namespace

const strata_ext_collectives kCollectives = {
    .base = {.struct_size = sizeof(strata_ext_collectives),
             .name = STRATA_EXT_COLLECTIVES,
             .version = STRATA_EXT_COLLECTIVES_VERSION,
             .next = nullptr},
    .comm_unique_id = comm_unique_id,
    .comm_create = comm_create,
    .comm_destroy = comm_destroy,
    .all_reduce = all_reduce,
    .broadcast = broadcast,
    .all_gather = all_gather,
};

}  // namespace strata::gpu

#endif  // STRATA_GPU_HAS_NCCL
