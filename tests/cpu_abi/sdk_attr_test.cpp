// The SDK's attribute helpers (strata/plugin/strata_plugin.hpp), which every
// kernel uses to read its call's attributes: lookup by name (without
// measuring the names: attr_name_is) and the kinds each reader accepts.
#include <strata/plugin/strata_plugin.hpp>

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace strata::plugin;

strata_attr make(const char* name, strata_attr_kind kind, int64_t i, double f,
                 strata_dtype scalar = STRATA_F64) {
  strata_attr a{};
  a.struct_size = sizeof(strata_attr);
  a.name = name;
  a.kind = kind;
  a.scalar_dtype = scalar;
  a.i = i;
  a.f = f;
  return a;
}

TEST(SdkAttrs, NamesCompareWhole) {
  EXPECT_TRUE(attr_name_is("beta1", "beta1"));
  EXPECT_FALSE(attr_name_is("beta1", "beta"));    // the attribute's name is longer
  EXPECT_FALSE(attr_name_is("beta", "beta1"));    // shorter: stops at its end
  EXPECT_FALSE(attr_name_is("eps", "lr"));
  EXPECT_FALSE(attr_name_is("beta2", "beta1"));   // differs in the last character
  EXPECT_TRUE(attr_name_is("", ""));
  EXPECT_FALSE(attr_name_is("", "lr"));
  EXPECT_FALSE(attr_name_is("lr", ""));
  EXPECT_FALSE(attr_name_is("lr", std::string_view("lr\0x", 4)));  // never reads past the NUL
}

TEST(SdkAttrs, LookupAndKinds) {
  strata_attr lr = make("lr", STRATA_ATTR_FLOAT, 0, 0.5);
  strata_attr first = make("first", STRATA_ATTR_BOOL, 1, 0.0);
  strata_attr mode = make("decay_mode", STRATA_ATTR_INT, 2, 0.0);
  strata_attr exact = make("exact", STRATA_ATTR_SCALAR, 7, 0.0, STRATA_I64);
  strata_attr big = make("big", STRATA_ATTR_SCALAR, 0, 1.25, STRATA_F64);
  const strata_attr* list[] = {&lr, nullptr, &first, &mode, &exact, &big};
  strata_kernel_call call{};
  call.struct_size = sizeof(call);
  call.op = "strata::adam_step";
  call.attrs = list;
  call.n_attrs = 6;

  EXPECT_EQ(find_attr(call, "lr"), &lr);
  EXPECT_EQ(find_attr(call, "l"), nullptr);
  EXPECT_EQ(find_attr(call, "missing"), nullptr);
  EXPECT_EQ(attr_float(call, "lr", -1.0), 0.5);
  EXPECT_EQ(attr_float(call, "first", -1.0), 1.0);
  EXPECT_EQ(attr_float(call, "exact", -1.0), 7.0);
  EXPECT_EQ(attr_float(call, "big", -1.0), 1.25);
  EXPECT_EQ(attr_float(call, "missing", -1.0), -1.0);
  EXPECT_EQ(attr_int(call, "decay_mode", -1), 2);
  EXPECT_EQ(attr_int(call, "first", -1), 1);
  EXPECT_EQ(attr_int(call, "exact", -1), 7);
  EXPECT_EQ(attr_int(call, "missing", -1), -1);
  EXPECT_EQ(attr_float_value(call, mode), 2.0);
  EXPECT_EQ(attr_int_value(call, exact), 7);
  try {
    (void)attr_int(call, "lr", 0);
    FAIL() << "a FLOAT read as an integer";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("strata::adam_step"), std::string::npos) << what;
    EXPECT_NE(what.find("'lr'"), std::string::npos) << what;
  }
  EXPECT_THROW((void)attr_int(call, "big", 0), std::invalid_argument);  // 1.25 is not an integer
}

}  // namespace
