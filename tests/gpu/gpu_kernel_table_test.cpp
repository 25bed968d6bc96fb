// The CUDA plugin's kernel table and its kernels' argument checks, with the
// plugin's objects linked in: none of this needs a GPU, so CI checks it on
// every build. Coverage is checked against the op contract (docs/ops.md):
// every primitive, fused composite and backward op for every dtype the
// device stores (f32 f64 f16 bf16 i32 i64 bool), as the contract allows it.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels.hpp"

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
  for (const std::string& t : kFloat) {
    for (const char* u : {"neg", "abs", "sign", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh",
                          "sigmoid", "relu", "erf", "floor", "ceil", "round", "reciprocal", "gelu", "silu"}) {
      e.insert({op(u), t + "->" + t});
    }
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
  }
  for (const std::string& t : kInt) {
    for (const char* u : {"neg", "abs", "sign", "relu"}) e.insert({op(u), t + "->" + t});
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
    EXPECT_NE(c.message().find("below the ABI 2.0 minimum"), std::string::npos) << c.message();
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
    EXPECT_EQ(c.message(), "strata::add (f32,f32->f32): input 1 is f64");
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
  EXPECT_EQ(c.message(), "strata::fill (->bf16): output 0 is f32");
}

}  // namespace
