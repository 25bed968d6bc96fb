// The SDK's attribute helpers (strata/plugin/strata_plugin.hpp), which every
// kernel uses to read its call's attributes: lookup by name (without
// measuring the names: attr_name_is) and the kinds each reader accepts.
#include "plugin_fixture.hpp"

#include <strata/plugin/strata_plugin.hpp>

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace strata::plugin;
using strata::cpu_abi::Attrs;

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
  Attrs attrs;
  attrs.real("lr", 0.5).boolean("first", true).integer("decay_mode", 2).scalar_i64("exact", 7).scalar_f64("big", 1.25);
  std::vector<const strata_attr*> list(attrs.data(), attrs.data() + attrs.size());
  list.insert(list.begin() + 1, nullptr);  // a null entry is skipped
  const strata_attr& lr = *list[0];
  const strata_attr& mode = *list[3];
  const strata_attr& exact = *list[4];
  strata_kernel_call call{};
  call.struct_size = sizeof(call);
  call.op = "strata::adam_step";
  call.attrs = list.data();
  call.n_attrs = static_cast<int32_t>(list.size());

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
