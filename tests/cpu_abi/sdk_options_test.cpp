// The SDK's options reader (strata/plugin/options.hpp): what a plugin's init
// gets from the configuration, read without a JSON library — typed values
// with ranges, unknown keys and malformed JSON refused with a message that
// names the key or the byte, and nesting that cannot exhaust the stack.
#include <strata/plugin/options.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace {

using strata::plugin::Options;
using strata::plugin::Refusal;

/// The message of the Refusal `f` throws ("" when it throws none).
std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const Refusal& r) {
    EXPECT_EQ(r.status(), STRATA_ERROR_INVALID_ARGUMENT);
    return r.what();
  }
  return "";
}

TEST(SdkOptions, ReadsTypedValuesAndFallsBackWhenAbsent) {
  const Options o(R"({"arena_mb": 512, "ratio": 0.25, "loader": "a\"b\u00e9", "validate": true,
                      "whole": 256.0, "nested": {"x": [1, "]"]}, "none": null})",
                  {"arena_mb", "ratio", "loader", "validate", "whole", "nested", "none", "devices"});
  EXPECT_EQ(o.integer("arena_mb", 1, 1, 65536), 512);
  EXPECT_EQ(o.integer("whole", 1, 1, 1000), 256);
  EXPECT_EQ(o.integer("devices", 3, 1, 8), 3);
  EXPECT_DOUBLE_EQ(o.number("ratio", 1.0, 0.0, 1.0), 0.25);
  EXPECT_EQ(o.string("loader"), "a\"b\xc3\xa9");
  EXPECT_TRUE(o.boolean("validate", false));
  EXPECT_EQ(o.kind("nested"), Options::Kind::object);
  EXPECT_EQ(o.raw("nested"), R"({"x": [1, "]"]})");
  EXPECT_EQ(o.kind("none"), Options::Kind::null);
  EXPECT_FALSE(o.has("devices"));
  for (const char* empty : {"", "{}", " { } ", static_cast<const char*>(nullptr)}) {
    EXPECT_FALSE(Options(empty, {}).has("x"));
  }
}

TEST(SdkOptions, UnknownKeysAreRefusedNamingTheKnownOnes) {
  EXPECT_EQ(refusal([] { Options(R"({"arena": 1})", {"arena_mb", "threads"}); }),
            "unknown option \"arena\" (known: arena_mb, threads)");
  EXPECT_EQ(refusal([] { Options(R"({"threads": 4})", {}); }), "unknown option \"threads\" (the plugin takes none)");
  EXPECT_EQ(refusal([] { Options(R"({"a": 1, "a": 2})", {"a"}); }), "options: option \"a\" is given twice (at byte 15)");
}

TEST(SdkOptions, AWrongTypeOrRangeNamesTheKey) {
  const Options o(R"({"n": 2.5, "s": "x", "big": 1e9, "b": 1})", {"n", "s", "big", "b"});
  EXPECT_EQ(refusal([&] { o.integer("n", 0, 0, 10); }), "option \"n\" must be a whole number in [0, 10], got 2.5");
  EXPECT_EQ(refusal([&] { o.integer("s", 0, 0, 10); }), "option \"s\" must be a whole number in [0, 10], got \"x\"");
  EXPECT_EQ(refusal([&] { o.integer("big", 0, 0, 65536); }), "option \"big\" must be in [0, 65536], got 1e9");
  EXPECT_EQ(refusal([&] { o.string("n"); }), "option \"n\" must be a string, got 2.5");
  EXPECT_EQ(refusal([&] { o.boolean("b", false); }), "option \"b\" must be true or false, got 1");
  EXPECT_EQ(refusal([&] { o.raw("missing"); }), "option \"missing\" is not set");
}

TEST(SdkOptions, MalformedJsonIsRefusedWithTheByteOffset) {
  EXPECT_EQ(refusal([] { Options("[1]", {}); }), "options: options must be a JSON object (at byte 0)");
  EXPECT_EQ(refusal([] { Options(R"({"a" 1})", {"a"}); }), "options: expected ':' after \"a\" (at byte 5)");
  EXPECT_EQ(refusal([] { Options(R"({"a": 1} x)", {"a"}); }),
            "options: trailing characters after the options object (at byte 9)");
  EXPECT_EQ(refusal([] { Options(R"({"a": "x)", {"a"}); }), "options: unterminated string (at byte 8)");
  EXPECT_EQ(refusal([] { Options(R"({"a": tru})", {"a"}); }), "options: expected a value (at byte 6)");
  EXPECT_EQ(refusal([] { Options(R"({"a": 1.2.3})", {"a"}); }), "options: malformed number (at byte 11)");
  EXPECT_EQ(refusal([] { Options(R"({"a": 1,})", {"a"}); }), "options: expected a quoted key (at byte 8)");
  EXPECT_FALSE(refusal([] { Options(R"({"a": "\q"})", {"a"}); }).empty());
}

TEST(SdkOptions, DeepNestingIsRefusedNotRecursedInto) {
  const std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_EQ(refusal([&] { Options(deep.c_str(), {"a"}); }),
            "options: values nested deeper than 64 levels (at byte 70)");
  const std::string ok = "{\"a\": " + std::string(64, '[') + std::string(64, ']') + "}";
  EXPECT_EQ(Options(ok.c_str(), {"a"}).kind("a"), Options::Kind::array);
}

}  // namespace
