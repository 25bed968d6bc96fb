// The CUDA plugin's kernel table and its kernels' argument checks, with the
// plugin's objects linked in: none of this needs a GPU, so CI checks it on
// every build. Coverage is checked against the op contract (docs/ops.md):
// every primitive, fused composite and backward op for every dtype the
// device stores (f32 f64 f16 bf16 i32 i64 bool), as the contract allows it
// (the unary pointwise ops read off the core's registry).
// The strata.collectives functions (collectives.cpp) are called directly too:
// their argument checks, NCCL's absence (STRATA_NCCL_LIBRARY pointing at no
// library) and, where libnccl.so.2 is installed, ncclGetUniqueId — which
// needs no GPU.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>  // NCCL_UNIQUE_ID_BYTES

#include <strata/strata.hpp>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "collectives.hpp"
#include "kernels.hpp"
#include "state.hpp"

namespace {

using Entry = std::pair<std::string, std::string>;  // (op, signature)

std::set<Entry> table_entries() {
  std::set<Entry> out;
  const auto& t = strata::gpu::kernel_table();
  for (size_t k = 0; k < t.size(); ++k) {
    const strata_kernel_entry* e = t.data()[k];
    out.insert({e->op, e->signature});
  }
  return out;
}

const std::vector<std::string> kFloat = {"f32", "f64", "f16", "bf16"};
const std::vector<std::string> kInt = {"i32", "i64"};
const std::vector<std::string> kAll = {"f32", "f64", "f16", "bf16", "i32", "i64", "bool"};

std::vector<std::string> numeric() {
  std::vector<std::string> v = kFloat;
  v.insert(v.end(), kInt.begin(), kInt.end());
  return v;
}

/// What docs/ops.md asks of a device that stores all seven dtypes.
std::set<Entry> expected_entries() {
  std::set<Entry> e;
  auto op = [](const char* name) { return std::string("strata::") + name; };
  for (const std::string& t : kAll) {
    e.insert({op("copy"), t + "->" + t});
    e.insert({op("fill"), "->" + t});
    e.insert({op("where"), "bool," + t + "," + t + "->" + t});
    e.insert({op("index_select"), t + ",i64->" + t});
    e.insert({op("gather"), t + ",i64->" + t});
    e.insert({op("bernoulli"), "->" + t});
    for (const std::string& to : kAll) {
      if (to != t) e.insert({op("cast"), t + "->" + to});
    }
  }
  // Unary pointwise ops, read off the registry by their dtype family
  // (docs/ops.md, "Dtype families"): floats for every numeric, floating and
  // float_only one, integers too for the numeric ones.
  for (const strata::OpInfo& info : strata::runtime().ops()) {
    const bool pointwise = std::find(info.tags.begin(), info.tags.end(), "pointwise") != info.tags.end();
    const bool moves = std::find(info.tags.begin(), info.tags.end(), "data_movement") != info.tags.end();
    const bool complex = std::find(info.tags.begin(), info.tags.end(), "complex") != info.tags.end();
    if (!info.plugin.empty() || !pointwise || moves || complex || info.n_inputs != 1 || !info.attrs.empty()) continue;
    if (info.dtypes != "numeric" && info.dtypes != "floating" && info.dtypes != "float_only") continue;
    for (const std::string& t : kFloat) e.insert({info.name, t + "->" + t});
    if (info.dtypes == "numeric") {
      for (const std::string& t : kInt) e.insert({info.name, t + "->" + t});
    }
  }
  for (const std::string& t : kFloat) {
    for (const char* b : {"relu_backward", "sigmoid_backward", "tanh_backward", "gelu_backward", "pow"}) {
      e.insert({op(b), t + "," + t + "->" + t});
    }
    for (const char* r : {"softmax", "log_softmax", "sum", "mean", "random_uniform", "random_normal"}) {
      if (std::string(r).rfind("random", 0) == 0) {
        e.insert({op(r), "->" + t});
      } else {
        e.insert({op(r), t + "->" + t});
      }
    }
    e.insert({op("softmax_backward"), t + "," + t + "->" + t});
    e.insert({op("log_softmax_backward"), t + "," + t + "->" + t});
    e.insert({op("matmul"), t + "," + t + "->" + t});
    e.insert({op("amp_unscale"), t + ",f32->" + t + ",f32"});
    // fused_elementwise: every signature, 1 to 8 inputs and 1 to 6 outputs
    // of one dtype (docs/ops.md).
    for (int n = 1; n <= 8; ++n) {
      for (int m = 1; m <= 6; ++m) {
        std::string sig;
        for (int k = 0; k < n; ++k) sig += (k == 0 ? "" : ",") + t;
        sig += "->";
        for (int k = 0; k < m; ++k) sig += (k == 0 ? "" : ",") + t;
        e.insert({op("fused_elementwise"), sig});
      }
    }
  }
  for (const std::string& t : kInt) {
    e.insert({op("sum"), t + "->i64"});
  }
  e.insert({op("sum"), "bool->i64"});
  for (const std::string& t : numeric()) {
    for (const char* b : {"add", "sub", "mul", "div", "maximum", "minimum"}) e.insert({op(b), t + "," + t + "->" + t});
    for (const char* c : {"eq", "ne", "lt", "le", "gt", "ge"}) e.insert({op(c), t + "," + t + "->bool"});
    for (const char* r : {"prod", "max", "min"}) e.insert({op(r), t + "->" + t});
    e.insert({op("argmax"), t + "->i64"});
    e.insert({op("argmin"), t + "->i64"});
    e.insert({op("scatter_add"), t + ",i64," + t + "->" + t});
  }
  e.insert({op("eq"), "bool,bool->bool"});
  e.insert({op("ne"), "bool,bool->bool"});
  e.insert({op("logical_and"), "bool,bool->bool"});
  e.insert({op("logical_or"), "bool,bool->bool"});
  e.insert({op("logical_not"), "bool->bool"});
  return e;
}

TEST(GpuKernelTable, CoversTheOpContractForEveryStoredDtype) {
  const std::set<Entry> have = table_entries();
  std::string missing;
  for (const Entry& want : expected_entries()) {
    if (have.count(want) == 0) missing += "  " + want.first + " " + want.second + "\n";
  }
  EXPECT_TRUE(missing.empty()) << "kernels the contract asks for and the table lacks:\n" << missing;
}

TEST(GpuKernelTable, HasNoEntryOutsideTheContract) {
  const std::set<Entry> expected = expected_entries();
  std::string extra;
  for (const Entry& e : table_entries()) {
    if (expected.count(e) == 0) extra += "  " + e.first + " " + e.second + "\n";
  }
  EXPECT_TRUE(extra.empty()) << "entries no op contract describes:\n" << extra;
}

TEST(GpuKernelTable, EntriesAreWellFormedAndUnique) {
  const auto& t = strata::gpu::kernel_table();
  ASSERT_GT(t.size(), 300u);
  std::set<Entry> seen;
  for (size_t k = 0; k < t.size(); ++k) {
    const strata_kernel_entry* e = t.data()[k];
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->struct_size, sizeof(strata_kernel_entry));
    EXPECT_EQ(e->op_version, STRATA_OP_VERSION) << e->op;
    EXPECT_NE(e->fn, nullptr) << e->op;
    EXPECT_EQ(e->flags & ~STRATA_KERNEL_STRIDED_INPUTS, 0u) << e->op;
    EXPECT_TRUE(seen.insert({e->op, e->signature}).second) << "duplicate " << e->op << " " << e->signature;
  }
}

// ---- The checks every kernel runs before touching a device ---------------------------

strata_kernel_fn kernel(const std::string& op, const std::string& signature) {
  const auto& t = strata::gpu::kernel_table();
  for (size_t k = 0; k < t.size(); ++k) {
    const strata_kernel_entry* e = t.data()[k];
    if (op == e->op && signature == e->signature) return e->fn;
  }
  return nullptr;
}

strata_tensor descriptor(strata_dtype dtype, std::vector<int64_t> shape) {
  strata_tensor t{};
  t.struct_size = sizeof(t);
  t.dtype = dtype;
  t.rank = static_cast<int32_t>(shape.size());
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = shape[static_cast<size_t>(d)];
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

struct AddCall {
  strata_tensor a = descriptor(STRATA_F32, {2, 3});
  strata_tensor b = descriptor(STRATA_F32, {2, 3});
  strata_tensor y = descriptor(STRATA_F32, {2, 3});
  const strata_tensor* inputs[2] = {&a, &b};
  const strata_tensor* outputs[1] = {&y};
  strata_error error{sizeof(strata_error), ""};
  strata_kernel_call call{};
  AddCall() {
    call.struct_size = sizeof(call);
    call.op = STRATA_OP_ADD;
    call.op_version = STRATA_OP_VERSION;
    call.inputs = inputs;
    call.n_inputs = 2;
    call.outputs = outputs;
    call.n_outputs = 1;
    call.error = &error;
  }
  std::string message() const { return error.message; }
};

TEST(GpuKernelChecks, RefuseBadCallsNamingTheOpAndOperand) {
  const strata_kernel_fn add = kernel(STRATA_OP_ADD, "f32,f32->f32");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add(nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  {
    AddCall c;
    c.call.struct_size = 16;
    EXPECT_EQ(add(&c.call), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(c.message().find("kernel call struct_size 16 is below the ABI"), std::string::npos) << c.message();
  }
  {
    AddCall c;
    c.call.n_inputs = 1;
    EXPECT_EQ(add(&c.call), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(c.message(), "strata::add (f32,f32->f32): expected 2 inputs and 1 outputs, got 1 and 1");
  }
  {
    AddCall c;
    c.b.dtype = STRATA_F64;
    EXPECT_EQ(add(&c.call), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(c.message(), "strata::add (f32,f32->f32): input 1 is f64, the kernel takes f32");
  }
  {
    AddCall c;
    c.y.rank = 9;
    EXPECT_EQ(add(&c.call), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(c.message(), "strata::add (f32,f32->f32): output 0 has rank 9, outside [0, 8]");
  }
  {
    AddCall c;
    c.outputs[0] = nullptr;
    EXPECT_EQ(add(&c.call), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(c.message(), "strata::add (f32,f32->f32): output 0 is NULL");
  }
  {
    AddCall c;  // well formed, but no plugin state: refused before any device call
    EXPECT_EQ(add(&c.call), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(c.message(), "cuda: no plugin state");
  }
}

TEST(GpuKernelChecks, NoInputKernelsNameTheirSignature) {
  const strata_kernel_fn fill = kernel(STRATA_OP_FILL, "->bf16");
  ASSERT_NE(fill, nullptr);
  AddCall c;
  c.call.op = STRATA_OP_FILL;
  c.call.n_inputs = 0;
  c.call.inputs = nullptr;
  c.y.dtype = STRATA_F32;
  EXPECT_EQ(fill(&c.call), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c.message(), "strata::fill (->bf16): output 0 is f32, the kernel takes bf16");
}

// ---- strata.collectives (NCCL opened at run time) -------------------------------

}  // namespace

// The plugin's one exported symbol (plugin.cpp), linked in with its objects.
extern "C" const strata_plugin_api* strata_plugin_entry(uint32_t host_abi_major, uint32_t host_abi_minor);

namespace {

const strata_ext_collectives& collectives() { return strata::gpu::kCollectives; }

struct CollectiveCall {
  strata_error error{};
  strata_collective_args args{};
  std::vector<uint8_t> id;
  explicit CollectiveCall(size_t id_bytes = NCCL_UNIQUE_ID_BYTES) : id(id_bytes, 0) {
    args.struct_size = sizeof(args);
    args.unique_id = id.data();
    args.id_bytes = id.size();
    args.error = &error;
  }
  std::string message() const { return error.message; }
};

/// Sets an environment variable for one scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

/// Why libnccl.so.2 cannot be opened here, or "" when it can.
std::string nccl_missing() {
  if (void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(lib);
    return {};
  }
  const char* e = dlerror();
  return e != nullptr ? e : "dlopen(libnccl.so.2) failed";
}

TEST(GpuCollectives, IsChainedAfterNativeHandles) {
  const strata_plugin_api* api = strata_plugin_entry(STRATA_ABI_MAJOR, STRATA_ABI_MINOR);
  ASSERT_NE(api, nullptr);
  const strata_extension* first = api->extensions;
  ASSERT_NE(first, nullptr);
  EXPECT_STREQ(first->name, STRATA_EXT_NATIVE_HANDLES);
  EXPECT_EQ(first->next, &strata::gpu::kCollectives.base);
  const strata_ext_collectives& c = collectives();
  EXPECT_STREQ(c.base.name, STRATA_EXT_COLLECTIVES);
  EXPECT_EQ(c.base.version, STRATA_EXT_COLLECTIVES_VERSION);
  EXPECT_EQ(c.base.struct_size, sizeof(strata_ext_collectives));
  EXPECT_EQ(c.base.next, nullptr);
  for (const void* fn : {reinterpret_cast<const void*>(c.comm_unique_id), reinterpret_cast<const void*>(c.comm_create),
                         reinterpret_cast<const void*>(c.comm_destroy), reinterpret_cast<const void*>(c.all_reduce),
                         reinterpret_cast<const void*>(c.broadcast), reinterpret_cast<const void*>(c.all_gather)}) {
    EXPECT_NE(fn, nullptr);
  }
}

TEST(GpuCollectives, RefuseNullAndShortArgs) {
  const strata_ext_collectives& c = collectives();
  EXPECT_EQ(c.comm_unique_id(nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c.comm_create(nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c.all_reduce(nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c.broadcast(nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c.all_gather(nullptr), STRATA_ERROR_INVALID_ARGUMENT);
  c.comm_destroy(nullptr);  // nothing to destroy, and no crash
  CollectiveCall call;
  call.args.struct_size = 16;  // below STRATA_COLLECTIVE_ARGS_MIN_SIZE
  EXPECT_EQ(c.comm_unique_id(&call.args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c.comm_create(&call.args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c.all_reduce(&call.args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c.broadcast(&call.args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(c.all_gather(&call.args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(call.message(), "");  // the error field is not trusted in a short struct
}

TEST(GpuCollectives, UniqueIdRefusesASmallBufferNamingBothSizes) {
  CollectiveCall call(16);
  EXPECT_EQ(collectives().comm_unique_id(&call.args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(call.message(), "cuda: comm_unique_id: id_bytes is 16, but an NCCL unique id (ncclUniqueId) takes " +
                                std::to_string(NCCL_UNIQUE_ID_BYTES) + " bytes");
  CollectiveCall none;
  none.args.unique_id = nullptr;
  EXPECT_EQ(collectives().comm_unique_id(&none.args), STRATA_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(none.message(), "cuda: comm_unique_id: unique_id is NULL");
}

TEST(GpuCollectives, WithoutNcclEveryCallIsUnsupportedNamingTheLibrary) {
  const char* path = "/nonexistent/libnccl.so";
  ScopedEnv env("STRATA_NCCL_LIBRARY", path);
  const strata_ext_collectives& c = collectives();
  const std::vector<std::pair<const char*, strata_status (*)(strata_collective_args*)>> calls = {
      {"comm_unique_id", c.comm_unique_id}, {"comm_create", c.comm_create}, {"all_reduce", c.all_reduce},
      {"broadcast", c.broadcast},           {"all_gather", c.all_gather}};
  for (const auto& [name, fn] : calls) {
    CollectiveCall call;
    EXPECT_EQ(fn(&call.args), STRATA_ERROR_UNSUPPORTED) << name;
    const std::string m = call.message();
    EXPECT_EQ(m.rfind("cannot load NCCL: ", 0), 0u) << name << ": " << m;
    EXPECT_NE(m.find(path), std::string::npos) << name << ": " << m;
    EXPECT_NE(m.find("STRATA_NCCL_LIBRARY"), std::string::npos) << name << ": " << m;
    EXPECT_NE(m.find(std::string("cuda's ") + name + " needs it"), std::string::npos) << name << ": " << m;
  }
}

TEST(GpuCollectives, UniqueIdWithoutAGpu) {
  if (const std::string why = nccl_missing(); !why.empty()) GTEST_SKIP() << "NCCL is not installed here: " << why;
  ScopedEnv env("STRATA_NCCL_LIBRARY", "libnccl.so.2");  // the library nccl_missing() opened
  // ncclGetUniqueId opens a bootstrap socket and needs no device.
  CollectiveCall a(256), b;
  ASSERT_EQ(collectives().comm_unique_id(&a.args), STRATA_OK) << a.message();
  ASSERT_EQ(collectives().comm_unique_id(&b.args), STRATA_OK) << b.message();
  EXPECT_EQ(a.args.id_bytes, size_t{NCCL_UNIQUE_ID_BYTES});  // set to what the id takes
  EXPECT_EQ(b.args.id_bytes, size_t{NCCL_UNIQUE_ID_BYTES});
  auto nonzero = [](const std::vector<uint8_t>& id) {
    size_t n = 0;
    for (size_t k = 0; k < NCCL_UNIQUE_ID_BYTES; ++k) n += id[k] != 0;
    return n;
  };
  EXPECT_GT(nonzero(a.id), 0u);
  EXPECT_EQ(std::vector<uint8_t>(a.id.begin() + NCCL_UNIQUE_ID_BYTES, a.id.end()),
            std::vector<uint8_t>(256 - NCCL_UNIQUE_ID_BYTES, 0));  // nothing written past the id
  EXPECT_NE(std::vector<uint8_t>(a.id.begin(), a.id.begin() + NCCL_UNIQUE_ID_BYTES), b.id);  // a fresh id each call
}

/// A plugin state with one device record and no runtime behind it: enough
/// for the checks that come before any CUDA or NCCL call.
struct FakeState {
  strata::gpu::State state;
  FakeState() {
    auto d = std::make_unique<strata::gpu::Device>();
    d->id = "cuda:0";
    state.devices.push_back(std::move(d));
  }
  strata_plugin_state handle() { return reinterpret_cast<strata_plugin_state>(&state); }
};

TEST(GpuCollectives, RefuseBadCallsBeforeTouchingTheDevice) {
  if (const std::string why = nccl_missing(); !why.empty()) GTEST_SKIP() << "NCCL is not installed here: " << why;
  ScopedEnv env("STRATA_NCCL_LIBRARY", "libnccl.so.2");  // the library nccl_missing() opened
  const strata_ext_collectives& c = collectives();
  FakeState fake;
  {
    CollectiveCall call;  // no plugin state
    EXPECT_EQ(c.comm_create(&call.args), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(call.message(), "cuda: no plugin state");
  }
  {
    CollectiveCall call;
    call.args.state = fake.handle();
    call.args.device = 3;
    EXPECT_EQ(c.all_reduce(&call.args), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(call.message(), "cuda: no device 3 (the plugin has 1)");
  }
  {
    CollectiveCall call;
    call.args.state = fake.handle();
    call.args.rank = 4;
    call.args.world_size = 4;
    EXPECT_EQ(c.comm_create(&call.args), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(call.message(), "comm_create on cuda:0: rank 4 is not in a world of size 4");
    EXPECT_EQ(call.args.comm, nullptr);
  }
  {
    CollectiveCall call(64);
    call.args.state = fake.handle();
    call.args.world_size = 2;
    EXPECT_EQ(c.comm_create(&call.args), STRATA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(call.message(), "comm_create on cuda:0: the unique id must be the " +
                                  std::to_string(NCCL_UNIQUE_ID_BYTES) + " bytes of comm_unique_id, got 64 bytes");
  }
  for (const auto& [name, fn] : std::vector<std::pair<std::string, strata_status (*)(strata_collective_args*)>>{
           {"all_reduce", c.all_reduce}, {"broadcast", c.broadcast}, {"all_gather", c.all_gather}}) {
    CollectiveCall call;
    call.args.state = fake.handle();
    EXPECT_EQ(fn(&call.args), STRATA_ERROR_INVALID_ARGUMENT) << name;
    EXPECT_EQ(call.message(), name + " on cuda:0: no communicator (comm is NULL; comm_create makes one)");
  }
}

}  // namespace
