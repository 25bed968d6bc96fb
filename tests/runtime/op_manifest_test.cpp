// op_manifest_test.cpp — every op of the core says what it is (its tags) and
// which attributes it takes (docs/ops.md, "Tags and attributes"), the two
// agree with its kind and arity, and a call is held to the attributes its op
// declares: another name or another kind is refused, naming the declared
// kind, rather than ignored. Each op's dtype family is what its shape rule
// does, and its test domain is one the checks can draw from.
#include <gtest/gtest.h>

#include <strata/strata.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace {

using namespace strata;

bool has(const std::vector<std::string>& v, const std::string& x) { return std::ranges::find(v, x) != v.end(); }

const OpAttrInfo* attr(const OpInfo& op, const std::string& name) {
  auto it = std::ranges::find_if(op.attrs, [&](const OpAttrInfo& a) { return a.name == name; });
  return it == op.attrs.end() ? nullptr : &*it;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(OpManifest, EveryCoreOpSaysWhatItIs) {
  int core_ops = 0;
  for (const OpInfo& op : runtime().ops()) {
    if (!op.plugin.empty()) continue;
    ++core_ops;
    SCOPED_TRACE(op.name);
    EXPECT_FALSE(op.tags.empty());
    EXPECT_EQ(op.kind == "view", has(op.tags, "view"));
    if (has(op.tags, "reduction")) {
      const OpAttrInfo* dims = attr(op, "dims");
      ASSERT_NE(dims, nullptr);
      EXPECT_EQ(dims->kind, "INTS");
      EXPECT_TRUE(dims->required);
    }
    if (has(op.tags, "along_dim")) {
      const OpAttrInfo* dim = attr(op, "dim");
      ASSERT_NE(dim, nullptr);
      EXPECT_EQ(dim->kind, "INT");
    }
    if (has(op.tags, "creation")) {
      EXPECT_EQ(op.n_inputs, 0);
    }
    if (has(op.tags, "random")) {
      ASSERT_NE(attr(op, "seed"), nullptr);
      ASSERT_NE(attr(op, "offset"), nullptr);
    }
    // -1: 1 to 4 inputs, 1 to 3 outputs (fused_elementwise).
    if (has(op.tags, "pointwise")) {
      EXPECT_TRUE(op.n_inputs >= 1 || op.n_inputs == -1) << op.n_inputs;
      EXPECT_TRUE(op.n_outputs == 1 || op.n_outputs == -1) << op.n_outputs;
    }
    if (has(op.tags, "broadcasting")) {
      EXPECT_TRUE(op.n_inputs >= 2 || op.n_inputs == -1) << op.n_inputs;
    }
    if (has(op.tags, "predicate") || has(op.tags, "optimizer")) {
      EXPECT_FALSE(op.differentiable);
    }
    if (has(op.tags, "backward")) {
      EXPECT_TRUE(op.name.ends_with("_backward"));
    }
  }
  EXPECT_GE(core_ops, 80);
}

TEST(OpManifest, ACallIsHeldToTheAttributesItsOpDeclares) {
  Tensor x = from_data(std::vector<float>{1.0f, 2.0f}, {2});
  // Another kind than declared: the declared one is named.
  std::string e = error_of([&] { call_op("strata::cast", {x}, {{"dtype", int64_t{1}}}); });
  EXPECT_NE(e.find("cast(f32[2]) on cpu:0: attribute 'dtype' must be DTYPE (its declared kind), got INT"),
            std::string::npos)
      << e;
  // A name the op does not take.
  e = error_of([&] { call_op("strata::softmax", {x}, {{"dim", int64_t{0}}, {"axis", int64_t{0}}}); });
  EXPECT_NE(e.find("attribute 'axis' is not one the op takes (it takes: dim INT)"), std::string::npos) << e;
  // A required one missing.
  e = error_of([&] { call_op("strata::softmax", {x}); });
  EXPECT_NE(e.find("missing attribute 'dim' (INT)"), std::string::npos) << e;
  // An op without attributes given one.
  e = error_of([&] { call_op("strata::exp", {x}, {{"alpha", 1.0}}); });
  EXPECT_NE(e.find("attribute 'alpha' is not one the op takes (it takes: none)"), std::string::npos) << e;
  // The declared ones run.
  Tensor y = call_op("strata::cast", {x}, {{"dtype", DType::i64}})[0];
  EXPECT_EQ(y.dtype(), DType::i64);
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
}

TEST(OpManifest, EveryCoreOpNamesItsDtypeFamilyAndADomain) {
  for (const OpInfo& op : runtime().ops()) {
    if (!op.plugin.empty()) continue;
    SCOPED_TRACE(op.name);
    EXPECT_NE(op.dtypes, "unspecified");
    EXPECT_LT(op.domain.lo, op.domain.hi);
    EXPECT_GE(op.domain.orders, 0);
    EXPECT_LE(op.domain.orders, 3);
    EXPECT_LT(op.domain.nonzero_input, std::max(op.n_inputs, 0));
    if (op.dtypes == "index") {
      EXPECT_FALSE(op.differentiable);
    }
  }
}

/// The dtype of op(inputs of `dtype`), or "refused".
std::string result_dtype(const OpInfo& op, DType dtype) {
  std::vector<Tensor> inputs;
  for (int k = 0; k < op.n_inputs; ++k) inputs.push_back(ones({2}, {.dtype = dtype}));
  try {
    return std::string(dtype_name(call_op(op.name, inputs)[0].dtype()));
  } catch (const DTypeError&) {
    return "refused";
  }
}

// A family is a claim about the shape rule: held to it for every pointwise
// op that takes no attributes, on an integer, a bool and a float input.
TEST(OpManifest, APointwiseOpsRuleKeepsToItsDtypeFamily) {
  struct Expect {
    std::string i32, boolean, f64;
  };
  const std::map<std::string, Expect> families{
      {"any", {"i32", "bool", "f64"}},          {"numeric", {"i32", "refused", "f64"}},
      {"floating", {"f32", "f32", "f64"}},      {"float_only", {"refused", "refused", "f64"}},
      {"logical", {"bool", "bool", "bool"}},    {"compare", {"bool", "", "bool"}},  // eq takes bool, lt not
  };
  int checked = 0;
  for (const OpInfo& op : runtime().ops()) {
    // complex, polar: the family is their real parts'; the result is complex.
    if (!op.plugin.empty() || !has(op.tags, "pointwise") || has(op.tags, "complex") || !op.attrs.empty()) continue;
    SCOPED_TRACE(op.name + " (" + op.dtypes + ")");
    auto it = families.find(op.dtypes);
    ASSERT_NE(it, families.end()) << "a pointwise op of a family this test does not know";
    EXPECT_EQ(result_dtype(op, DType::i32), it->second.i32);
    if (!it->second.boolean.empty()) {
      EXPECT_EQ(result_dtype(op, DType::boolean), it->second.boolean);
    }
    EXPECT_EQ(result_dtype(op, DType::f64), it->second.f64);
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

}  // namespace
