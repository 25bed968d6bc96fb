// trace_load_test.cpp — Graph::load refuses corrupted files with an Error that
// names the file, the JSON path and what was expected, and what it accepts
// replays (regressions of a fuzzing probe whose files corrupted the heap).
#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <strata/strata.hpp>
#include <vector>

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using strata_test::real_dtype;

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("strata_trace_load_test_" + std::to_string(::getpid()) + "_" + name);
}

/// The JSON text save() writes for `g`.
std::string saved_text(const Graph& g) {
  auto path = temp_file("saved.json");
  g.save(path);
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::filesystem::remove(path);
  return s.str();
}

/// `text` with the one occurrence of `from` replaced by `to` (fails the test
/// when `from` is not there exactly once: the corruption must be precise).
std::string corrupt(const std::string& text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' not in\n" << text;
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << "'" << from << "' more than once in\n" << text;
  if (at == std::string::npos) return text;
  std::string t = text;
  t.replace(at, from.size(), to);
  return t;
}

/// Loads `text` from a file named "bad.json"; the message of the Error it
/// throws, or "loaded".
std::string load_error(const std::string& text) {
  auto path = temp_file("bad.json");
  {
    std::ofstream out(path);
    out << text;
  }
  std::string result = "loaded";
  try {
    Graph::load(path);
  } catch (const Error& e) {
    result = e.what();
  }
  std::filesystem::remove(path);
  return result;
}

void expect_refused(const std::string& text, const std::vector<std::string>& parts) {
  std::string msg = load_error(text);
  EXPECT_NE(msg, "loaded") << text;
  EXPECT_NE(msg.find("bad.json"), std::string::npos) << msg;
  for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

Graph traced(const std::vector<Tensor>& examples, const TraceFn& f) { return trace(f, examples); }

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

TEST(TraceLoad, NegativeSumDimsWrapLikeThePublicApi) {
  Tensor x = arange(0.0, 6.0).reshape({2, 3});
  std::string text = saved_text(traced({x}, [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{sum(in[0], {1}, true)};
  }));
  // sum(x, {-1}) through the public API is sum over the last dim; a file
  // that says [-1] replays the same.
  Graph g = Graph::from_json(corrupt(text, "\"value\": [\n      1\n     ]", "\"value\": [\n      -1\n     ]"), "g.json");
  EXPECT_EQ(values(g.run({x})[0]), values(sum(x, {-1}, true)));
  EXPECT_EQ(values(sum(x, {-1}, true)), (std::vector<double>{3, 12}));
}

TEST(TraceLoad, BadSumDimsAreRefusedNamingThePath) {
  Tensor x = ones({2, 3});
  std::string text = saved_text(traced({x}, [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{sum(in[0], {1}, true)};
  }));
  const std::string dims = "\"value\": [\n      1\n     ]";
  expect_refused(corrupt(text, dims, "\"value\": [\n      -1, -1\n     ]"),
                 {"/nodes/0/attrs/0/value/1", "node 0 (sum)", "dimension 1 repeated"});
  expect_refused(corrupt(text, dims, "\"value\": [\n      1000000\n     ]"),
                 {"/nodes/0/attrs/0/value/0", "expected a dimension of the rank-2 input (-2 to 1)", "1000000"});
  expect_refused(corrupt(text, dims, "\"value\": [\n      -3\n     ]"), {"/nodes/0/attrs/0/value/0"});
  expect_refused(corrupt(text, dims, "\"value\": 1"), {"/nodes/0/attrs/0/value", "expected an array of integers"});
  expect_refused(corrupt(text, "\"kind\": \"ints\"", "\"kind\": \"int\""), {"/nodes/0/attrs/0"});
  expect_refused(corrupt(text, "\"name\": \"dims\"", "\"name\": \"dimz\""), {"/nodes/0/attrs/0/name", "dimz"});
  // The recorded output shape must be what sum's shape rule gives.
  expect_refused(corrupt(text, "\"output_shapes\": [\n    [\n     2,\n     1", "\"output_shapes\": [\n    [\n     2,\n     3"),
                 {"/nodes/0/output_shapes/0", "expected [2, 1]", "found [2, 3]"});
}

TEST(TraceLoad, IndexSelectDimIsWrappedOrRefused) {
  Tensor x = arange(0.0, 6.0).reshape({2, 3});
  Tensor idx = from_data(std::vector<int64_t>{2, 0}, {2});
  std::string text = saved_text(traced({x, idx}, [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{index_select(in[0], 1, in[1])};
  }));
  const std::string dim = "\"name\": \"dim\",\n     \"value\": 1";
  Graph g = Graph::from_json(corrupt(text, dim, "\"name\": \"dim\",\n     \"value\": -1"));
  EXPECT_EQ(values(g.run({x, idx})[0]), values(index_select(x, -1, idx)));
  expect_refused(corrupt(text, dim, "\"name\": \"dim\",\n     \"value\": -3"),
                 {"/nodes/0/attrs/0/value", "node 0 (index_select)", "-2 to 1", "found -3"});
  expect_refused(corrupt(text, dim, "\"name\": \"dim\",\n     \"value\": 7"), {"/nodes/0/attrs/0/value"});
  // The op called by name checks its raw attributes too (no wrapping there).
  EXPECT_THROW(call_op("strata::index_select", {x, idx}, {{"dim", int64_t{-1}}}), Error);
  EXPECT_THROW(call_op("strata::sum", {x}, {{"dims", std::vector<int64_t>{-1}}}), Error);
  EXPECT_THROW(call_op("strata::sum", {x}, {{"dims", std::vector<int64_t>{1, 1}}}), Error);
  EXPECT_THROW(call_op("strata::sum", {x}, {{"dims", std::vector<int64_t>{1000000}}}), Error);
  // A scalar has no dimension for index_select to replace.
  EXPECT_THROW(index_select(full({}, 1.0), 0, from_data(std::vector<int64_t>{0}, {1})), Error);
  EXPECT_THROW(call_op("strata::matmul", {ones({3}), ones({3})}), Error);  // the rule needs rank >= 2
}

TEST(TraceLoad, ShapesOverTheMaximumRankAreRefused) {
  Tensor x = ones({2, 3});
  std::string text = saved_text(traced({x}, [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].reshape({6})};
  }));
  std::string nine = "\"output_shapes\": [\n    [\n     6,1,1,1,1,1,1,1,1\n    ]";
  expect_refused(corrupt(text, "\"output_shapes\": [\n    [\n     6\n    ]", nine),
                 {"/nodes/0/output_shapes/0", "at most 8 dimensions, found 9"});
  expect_refused(corrupt(text, "\"shape\": [\n    2,\n    3\n   ]", "\"shape\": [\n    2,\n    -3\n   ]"),
                 {"/inputs/0/shape/1", "expected a size >= 0"});
  expect_refused(corrupt(text, "\"shape\": [\n    2,\n    3\n   ]",
                         "\"shape\": [\n    4294967296,\n    4294967296\n   ]"),
                 {"/inputs/0/shape", "overflows int64"});
  // A reshape to another element count.
  expect_refused(corrupt(text, "\"output_shapes\": [\n    [\n     6\n    ]", "\"output_shapes\": [\n    [\n     7\n    ]"),
                 {"/nodes/0", "node 0 (reshape)", "cannot reshape"});
}

TEST(TraceLoad, SliceOutsideTheRankAndNodesWithoutInputsAreStrataErrors) {
  Tensor x = arange(0.0, 6.0).reshape({2, 3});
  std::string text = saved_text(traced({x}, [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].slice(1, 1, 3)};
  }));
  expect_refused(corrupt(text, "\"name\": \"dim\",\n     \"value\": 1", "\"name\": \"dim\",\n     \"value\": 7"),
                 {"/nodes/0/attrs/0/value", "node 0 (slice)", "found 7"});
  expect_refused(corrupt(text, "\"inputs\": [\n    0\n   ]", "\"inputs\": []"),
                 {"/nodes/0/inputs", "expected 1 input(s), found 0"});
  expect_refused(corrupt(text, "\"inputs\": [\n    0\n   ]", "\"inputs\": [0, 0]"), {"/nodes/0/inputs"});
  expect_refused(corrupt(text, "\"step\",\n     \"value\": 1", "\"step\",\n     \"value\": 0"),
                 {"/nodes/0", "step must be positive"});
  // A graph built by hand (not loaded) still fails with a strata::Error.
  Graph g = Graph::from_json(text);
  g.nodes[0].attrs[0].i = 7;
  EXPECT_THROW(g.run({x}), Error);
  g = Graph::from_json(text);
  g.nodes[0].inputs.clear();
  EXPECT_THROW(g.run({x}), Error);
  g = Graph::from_json(text);
  g.nodes[0].output_shapes.clear();
  EXPECT_THROW(g.run({x}), Error);
  EXPECT_EQ(values(Graph::from_json(text).run({x})[0]), values(x.slice(1, 1, 3)));
}

TEST(TraceLoad, ReferencesKeysAndArityAreChecked) {
  Tensor a = ones({2});
  Tensor b = ones({2});
  std::string text = saved_text(traced({a, b}, [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{exp(in[0] * in[1])};
  }));
  // Duplicate keys: the strict reader of configurations refuses them.
  expect_refused(corrupt(text, "\"op\": \"mul\"", "\"op\": \"mul\", \"op\": \"add\""),
                 {"/nodes/0/op", "duplicate key"});
  // Inputs must be values defined earlier.
  expect_refused(corrupt(text, "\"inputs\": [\n    2\n   ]", "\"inputs\": [\n    3\n   ]"),
                 {"/nodes/1/inputs/0", "used before it is defined"});
  expect_refused(corrupt(text, "\"outputs\": [\n    3\n   ]", "\"outputs\": [\n    1000000000\n   ]"),
                 {"/nodes/1/outputs/0", "out of range"});
  // Arity against the op's schema.
  expect_refused(corrupt(text, "\"inputs\": [\n    0,\n    1\n   ]", "\"inputs\": [\n    0\n   ]"),
                 {"/nodes/0/inputs", "node 0 (mul)", "expected 2 input(s), found 1"});
  // Creation ops never appear in a trace.
  expect_refused(corrupt(text, "\"op\": \"exp\"", "\"op\": \"random_uniform\""), {"/nodes/1/op"});
  // Dtypes must be of the op set.
  expect_refused(corrupt(text, "\"dtype\": \"f32\",\n   \"shape\": [\n    2\n   ]\n  },\n  {",
                         "\"dtype\": \"f99\",\n   \"shape\": [\n    2\n   ]\n  },\n  {"),
                 {"/inputs/0/dtype"});
  expect_refused(corrupt(text, "\"version\": 1", "\"version\": 18446744073709551615"), {"/version"});
  expect_refused(corrupt(text, "\"traced\": true", "\"traced\": \"yes\""), {"/traced"});
}

TEST(TraceLoad, CastDtypeAttributeIsChecked) {
  Tensor x = ones({2});
  std::string text = saved_text(traced({x}, [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{cast(in[0], DType::f16) + 1.0};
  }));
  size_t at = text.find("\"kind\": \"dtype\"");
  ASSERT_NE(at, std::string::npos) << text;
  size_t value = text.find("\"value\": ", at);
  size_t end = text.find_first_of(",\n}", value + 9);
  std::string bad = text.substr(0, value + 9) + "99" + text.substr(end);
  expect_refused(bad, {"/nodes/0/attrs/0/value", "expected a dtype"});
}

/// An attribute an op declares itself (linear's fused "activation", a
/// string) loads and replays; the wrong kind for it is refused. (An MLP's
/// traced step did not load: the check knew only the public functions'
/// attributes.)
TEST(TraceLoad, AnAttributeTheOpDeclaresLoadsAndItsKindIsChecked) {
  manual_seed(5);
  Tensor x = randn({3, 4}), w = randn({2, 4}), b = randn({2});
  Graph g = traced({x}, [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{linear(in[0], w, b, FusedActivation::relu)};
  });
  const std::string text = saved_text(g);
  ASSERT_NE(text.find("\"activation\""), std::string::npos) << text;
  Graph loaded = Graph::from_json(text);
  Tensor y = loaded.run({x})[0];
  const std::vector<float> got = y.to_vector<float>(), want = linear(x, w, b, FusedActivation::relu).to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "element " << i;
  EXPECT_GE(amin(y).item<double>(), 0.0);
  const std::string as_int = corrupt(corrupt(text, "\"kind\": \"string\"", "\"kind\": \"int\""),
                                     "\"value\": \"relu\"", "\"value\": 1");
  expect_refused(as_int, {"/nodes/0/attrs/0/kind", "attribute \"activation\" has the wrong kind"});
}

/// A graph with reductions, index ops, views and joins, saved; then 2,000
/// single-token mutations of its text, each either refused with a
/// strata::Error or loaded and replayed (replay may throw strata::Error
/// only). A crash or another exception fails the test.
TEST(TraceLoad, SingleTokenMutationsLoadAndReplayOrAreRefused) {
  manual_seed(11);
  Tensor x = randn({3, 4}, {.dtype = real_dtype()});
  Tensor idx = from_data(std::vector<int64_t>{2, 0, 1}, {3});
  Tensor w = randn({4, 2}, {.dtype = real_dtype()});
  std::string text = saved_text(traced({x, idx}, [&](const std::vector<Tensor>& in) {
    Tensor h = matmul(in[0], w);
    Tensor s = sum(softmax(h, 1), {0}, true);
    Tensor p = pad(index_select(in[0], 1, in[1]), {1, 0}, 0.5);
    Tensor c = cat({p.slice(0, 1, 3), p.select(0, 0).reshape({1, 4})}, 0);
    return std::vector<Tensor>{s + 1.0, c.permute({1, 0}).expand({2, 4, 3}), mean(in[0], {1}, false)};
  }));
  // Tokens: runs of digits (with a sign), quoted strings, and single
  // structural characters.
  struct Token {
    size_t at, len;
  };
  std::vector<Token> tokens;
  for (size_t i = 0; i < text.size();) {
    char ch = text[i];
    size_t j = i + 1;
    if (ch == '"') {
      while (j < text.size() && text[j] != '"') ++j;
      ++j;
    } else if (ch == '-' || (ch >= '0' && ch <= '9')) {
      while (j < text.size() && ((text[j] >= '0' && text[j] <= '9') || text[j] == '.' || text[j] == 'e')) ++j;
    } else if (ch == ' ' || ch == '\n') {
      ++i;
      continue;
    }
    tokens.push_back({i, j - i});
    i = j;
  }
  const std::vector<std::string> replacements = {
      "-1", "0", "1", "2", "3", "7", "8", "9", "-3", "1000000", "-9223372036854775808", "9223372036854775807",
      "1e308", "0.5", "\"sum\"", "\"index_select\"", "\"slice\"", "\"reshape\"", "\"cat\"", "\"pad\"", "\"matmul\"",
      "\"dim\"", "\"dims\"", "\"int\"", "\"ints\"", "\"float\"", "\"dtype\"", "\"i64\"", "\"bool\"", "[]", "[-1]",
      "[1,1]", "[0,0,0,0,0,0,0,0,0]", "{}", "null", "true", "", ",", "]", "[", "\"outputs\"", "\"inputs\""};
  std::mt19937_64 rng(20240611);
  int loaded = 0, refused = 0, replayed = 0, replay_refused = 0, other_inputs = 0;
  for (int k = 0; k < 2000; ++k) {
    const Token& t = tokens[rng() % tokens.size()];
    std::string r = rng() % 4 == 0 ? std::to_string(static_cast<int64_t>(rng() % 41) - 20) : replacements[rng() % replacements.size()];
    std::string mutated = text.substr(0, t.at) + r + text.substr(t.at + t.len);
    Graph g;
    try {
      g = Graph::from_json(mutated, "mutation.json");
      ++loaded;
    } catch (const Error&) {
      ++refused;
      continue;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "mutation " << k << " (" << r << " at " << t.at << "): load threw a non-strata "
                    << e.what();
      continue;
    }
    if (g.input_dtypes != std::vector<DType>{x.dtype(), idx.dtype()} ||
        g.input_shapes != std::vector<Shape>{x.sizes(), idx.sizes()}) {
      ++other_inputs;  // the mutation changed what the graph takes: run() refuses our inputs, rightly
      EXPECT_THROW(g.run({x, idx}), Error);
      continue;
    }
    try {
      std::vector<Tensor> out = g.run({x, idx});
      ++replayed;
    } catch (const Error&) {
      ++replay_refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "mutation " << k << " (" << r << " at " << t.at << "): replay threw a non-strata "
                    << e.what();
    }
  }
  EXPECT_EQ(loaded + refused, 2000);
  EXPECT_GT(refused, 0);
  EXPECT_GT(replayed, 0);
  // What load accepts, runs: a replay refused after a load is a check load misses.
  EXPECT_EQ(replay_refused, 0);
  std::printf("mutations: %d refused by load, %d loaded (%d replayed, %d with other inputs, %d refused at replay)\n",
              refused, loaded, replayed, other_inputs, replay_refused);
}

}  // namespace
