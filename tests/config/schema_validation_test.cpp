// schema_validation_test.cpp — configs/strata-config.schema.json against the
// loader, with a real JSON Schema validator (valijson): every configuration
// the tests use — the shipped configs/*.json, data/full.json and each
// document of data/cases.json, valid or not — is validated by both, and they
// must agree on accept or reject. A disagreement fails, naming the case.
//
// valijson implements draft 7; the schema declares 2020-12 but uses only
// keywords whose meaning is the same in both (SchemaKeywords below keeps it
// that way), "$ref"s into "$defs" being plain JSON pointers.
#include <strata/config.hpp>
#include <strata/error.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <valijson/adapters/nlohmann_json_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kDataDir = STRATA_TEST_CONFIG_DATA_DIR;
const std::string kShippedDir = STRATA_TEST_SHIPPED_CONFIG_DIR;

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

class SchemaValidator : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    schema_doc_ = new json(read_json(kShippedDir + "/strata-config.schema.json"));
    schema_ = new valijson::Schema;
    valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
    valijson::adapters::NlohmannJsonAdapter adapter(*schema_doc_);
    parser.populateSchema(adapter, *schema_);
  }
  static void TearDownTestSuite() {
    delete schema_;
    delete schema_doc_;
    schema_ = nullptr;
    schema_doc_ = nullptr;
  }

  /// JSON Schema (draft 6 on) calls "integer" any number with a zero
  /// fractional part, 8e9 included; valijson asks the parser, which read
  /// 8e9 as a float. Such floats become integers before validation.
  static json with_whole_floats_as_integers(json doc) {
    if (doc.is_number_float()) {
      double v = doc.get<double>();
      if (std::trunc(v) == v && std::fabs(v) < 9.2e18) return json(static_cast<int64_t>(v));
    } else if (doc.is_structured()) {
      for (auto& item : doc) item = with_whole_floats_as_integers(item);
    }
    return doc;
  }

  /// Empty when the schema accepts `doc`; else its first errors.
  static std::string schema_errors(const json& doc) {
    valijson::Validator validator;
    valijson::ValidationResults results;
    const json normalized = with_whole_floats_as_integers(doc);
    valijson::adapters::NlohmannJsonAdapter target(normalized);
    if (validator.validate(*schema_, target, &results)) return "";
    std::string out;
    valijson::ValidationResults::Error error;
    for (int shown = 0; shown < 3 && results.popError(error); ++shown) {
      std::string where;
      for (const std::string& part : error.context) where += part;
      out += (out.empty() ? "" : "; ") + where + ": " + error.description;
    }
    return out.empty() ? "rejected" : out;
  }

  /// Empty when the loader accepts `doc`; else its message.
  static std::string loader_error(const json& doc, const std::string& source) {
    try {
      strata::Config::from_string(doc.dump(), source, "/etc/strata");
    } catch (const strata::ConfigError& e) {
      return e.what();
    }
    return "";
  }

  static json* schema_doc_;
  static valijson::Schema* schema_;
};
json* SchemaValidator::schema_doc_ = nullptr;
valijson::Schema* SchemaValidator::schema_ = nullptr;

/// The keywords the schema may use: those valijson's draft 7 reads with the
/// meaning 2020-12 gives them. A 2020-12-only keyword (prefixItems,
/// unevaluatedProperties, dependentSchemas, $dynamicRef, ...) would be
/// ignored by the validator, so it fails here instead.
TEST_F(SchemaValidator, SchemaKeywordsMeanTheSameInDraft7) {
  const std::set<std::string> allowed = {
      "$schema", "$defs", "$ref", "title", "description", "default", "examples", "type", "enum", "const",
      "properties", "additionalProperties", "propertyNames", "required", "items", "minItems", "maxItems",
      "uniqueItems", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength",
      "maxLength", "pattern", "oneOf", "anyOf", "allOf", "not", "if", "then", "else", "minProperties",
      "maxProperties"};
  // Walks the schema; below "properties", "$defs" (and patternProperties)
  // the keys are names, not keywords.
  std::vector<std::pair<std::string, const json*>> todo{{"", schema_doc_}};
  while (!todo.empty()) {
    auto [where, node] = todo.back();
    todo.pop_back();
    if (node->is_array()) {
      for (size_t i = 0; i < node->size(); ++i) todo.emplace_back(where + "/" + std::to_string(i), &(*node)[i]);
      continue;
    }
    if (!node->is_object()) continue;
    for (const auto& [key, value] : node->items()) {
      EXPECT_EQ(allowed.count(key), 1u) << where << ": keyword \"" << key << "\" is not read the same by draft 7";
      if (key == "properties" || key == "$defs") {
        for (const auto& [name, sub] : value.items()) todo.emplace_back(where + "/" + key + "/" + name, &sub);
      } else if (key != "enum" && key != "const" && key != "examples" && key != "default") {
        todo.emplace_back(where + "/" + key, &value);
      }
    }
  }
}

TEST_F(SchemaValidator, ShippedConfigurationsAndFullJsonConform) {
  std::vector<std::string> files{kDataDir + "/full.json"};
  for (const auto& entry : fs::directory_iterator(kShippedDir)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".json" && name != "strata-config.schema.json") files.push_back(entry.path());
  }
  ASSERT_GE(files.size(), 4u);  // default, cpu-only, vulkan, full
  for (const std::string& file : files) {
    json doc = read_json(file);
    EXPECT_EQ(schema_errors(doc), "") << file << ": the schema rejects it";
    EXPECT_EQ(loader_error(doc, file), "") << file << ": the loader rejects it";
  }
}

/// The table of documents: the loader and the schema agree on each.
/// "loader_only" cases are rules a schema cannot state (op names of the
/// registry, sizes past 1024 TiB): the schema must accept them, the loader
/// reject them, so the list of exceptions cannot grow in silence.
TEST_F(SchemaValidator, SchemaAndLoaderAgreeOnEveryCase) {
  const char* old_home = std::getenv("HOME");
  std::string saved = old_home ? old_home : "";
  setenv("HOME", "/home/tester", 1);
  json table = read_json(kDataDir + "/cases.json");
  ASSERT_GT(table.at("cases").size(), 40u);
  int valid = 0, invalid = 0;
  for (const json& c : table.at("cases")) {
    const std::string name = c.at("name");
    const bool expected = c.at("valid").get<bool>();
    const bool loader_only = c.value("loader_only", false);
    const std::string by_schema = schema_errors(c.at("doc"));
    const std::string by_loader = loader_error(c.at("doc"), "case.json");
    (expected ? valid : invalid)++;
    EXPECT_EQ(by_loader.empty(), expected)
        << "case \"" << name << "\": the loader " << (by_loader.empty() ? "accepts it" : "rejects it: " + by_loader)
        << ", the table says " << (expected ? "valid" : "invalid");
    if (loader_only) {
      EXPECT_FALSE(expected) << "case \"" << name << "\": loader_only cases are ones the loader rejects";
      EXPECT_EQ(by_schema, "") << "case \"" << name << "\" (loader_only): the schema rejects it too; drop loader_only";
      continue;
    }
    EXPECT_EQ(by_schema.empty(), by_loader.empty())
        << "case \"" << name << "\": the schema " << (by_schema.empty() ? "accepts it" : "rejects it (" + by_schema + ")")
        << " but the loader " << (by_loader.empty() ? "accepts it" : "rejects it (" + by_loader + ")");
  }
  EXPECT_GT(valid, 5);
  EXPECT_GT(invalid, 20);
  if (old_home) {
    setenv("HOME", saved.c_str(), 1);
  } else {
    unsetenv("HOME");
  }
}

/// The validator is real: it rejects what the schema forbids.
TEST_F(SchemaValidator, RejectsUnknownKeysAndWrongTypes) {
  EXPECT_EQ(schema_errors(json::parse(R"({"devices": {"cpu": {"threads": 2.0}}})")), "");  // a whole number
  EXPECT_NE(schema_errors(json::parse(R"({"devices": {"cpu": {"threads": 2.5}}})")), "");
  EXPECT_NE(schema_errors(json::parse(R"({"nonsense": 1})")), "");
  EXPECT_NE(schema_errors(json::parse(R"({"prefer": "cpu"})")), "");
  EXPECT_NE(schema_errors(json::parse(R"({"version": 2})")), "");
  EXPECT_EQ(schema_errors(json::parse(R"({})")), "");
}

}  // namespace
