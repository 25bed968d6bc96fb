// trace_test.cpp — trace(): record a function as a Graph, save it, load it,
// replay it on every available device, and differentiate the replay.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <strata/strata.hpp>

#include "../common/test_device.hpp"

namespace {

using namespace strata;
using strata_test::real_dtype;

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("strata_trace_test_" + std::to_string(::getpid()) + "_" + name);
}

void expect_near(const Tensor& a, const Tensor& b, double tol) {
  ASSERT_EQ(a.sizes(), b.sizes());
  std::vector<double> x = a.to(Device("cpu:0")).to_vector<double>();
  std::vector<double> y = b.to(Device("cpu:0")).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol) << "element " << i;
}

/// A small network with captured weights, joins, views and a composite.
struct Model {
  /// On `device` (default: the default device), in `dtype` (default: the
  /// widest float the default device stores).
  explicit Model(std::optional<Device> device = std::nullopt, std::optional<DType> dtype = std::nullopt)
      : w1(randn({4, 6}, {.dtype = dtype.value_or(real_dtype()), .device = device})),
        w2(randn({7, 3}, {.dtype = dtype.value_or(real_dtype()), .device = device})) {}
  Model(Tensor a, Tensor b) : w1(std::move(a)), w2(std::move(b)) {}
  Tensor w1, w2;
  std::vector<Tensor> operator()(const std::vector<Tensor>& in) const {
    Tensor h = tanh(matmul(in[0], w1));
    h = pad(h, {0, 1}, 1.0);  // a bias column
    Tensor logits = matmul(h, w2);
    Tensor both = cat({softmax(logits, 1), logits.transpose(0, 1).transpose(0, 1)}, 1);
    return {sum(log_softmax(logits, 1) * 0.5) + sum(both.slice(1, 0, 3) * 0.0), both.reshape({-1})};
  }
};

TEST(Trace, ReplayMatchesTheFunctionAfterSaveAndLoad) {
  manual_seed(3);
  Model model;
  Tensor x = randn({5, 4}, {.dtype = real_dtype()});
  Graph g = trace([&](const std::vector<Tensor>& in) { return model(in); }, {x});
  EXPECT_TRUE(g.traced);
  EXPECT_EQ(g.outputs.size(), 2u);
  EXPECT_GE(g.constants.size(), 2u);  // the weights
  auto path = temp_file("model.json");
  g.save(path);
  Graph loaded = Graph::load(path);
  std::filesystem::remove(path);
  Tensor x2 = randn({5, 4}, {.dtype = real_dtype()});
  std::vector<Tensor> want = model({x2});
  std::vector<Tensor> got = loaded.run({x2});
  ASSERT_EQ(got.size(), 2u);
  expect_near(got[0], want[0], strata_test::tolerance(real_dtype()).rtol);  // 1e-12 in f64
  expect_near(got[1], want[1], strata_test::tolerance(real_dtype()).rtol);
}

// What eager ran with grad mode off (a NoGradGuard, a backward pass without
// create_graph) the replay runs so too: the same results have history as in
// eager, and no others; the flag survives save and load.
TEST(Trace, OpsRunWithGradModeOffReplayWithoutHistory) {
  manual_seed(4);
  Tensor w = randn({3, 2}, {.dtype = real_dtype(), .requires_grad = true});
  auto f = [&w](const std::vector<Tensor>& in) {
    Tensor h = tanh(matmul(in[0], w));  // recorded: depends on w
    Tensor plain;
    {
      NoGradGuard off;
      plain = h * 2.0;  // not recorded in eager
    }
    return std::vector<Tensor>{h, plain};
  };
  Tensor x = randn({4, 3}, {.dtype = real_dtype()});
  const std::vector<Tensor> eager = f({x});
  ASSERT_TRUE(eager[0].requires_grad());
  ASSERT_FALSE(eager[1].requires_grad());
  Graph g = trace(f, {x});
  ASSERT_EQ(g.nodes.size(), 3u);  // matmul, tanh, mul
  EXPECT_FALSE(g.nodes[0].no_grad);
  EXPECT_FALSE(g.nodes[1].no_grad);
  EXPECT_TRUE(g.nodes[2].no_grad);
  auto path = temp_file("no_grad.json");
  g.save(path);
  Graph loaded = Graph::load(path);
  std::filesystem::remove(path);
  ASSERT_EQ(loaded.nodes.size(), 3u);
  EXPECT_TRUE(loaded.nodes[2].no_grad);
  EXPECT_FALSE(loaded.nodes[1].no_grad);
  // The trace made the weight a constant; as an input it takes gradients.
  Graph as_input = trace([&](const std::vector<Tensor>& in) {
    Tensor h = tanh(matmul(in[0], in[1]));
    NoGradGuard off;
    return std::vector<Tensor>{h, h * 2.0};
  }, {x, w.detach()});
  Tensor wi = w.detach();
  wi.set_requires_grad();
  const std::vector<Tensor> got = as_input.run({x, wi});
  EXPECT_TRUE(got[0].requires_grad());
  EXPECT_FALSE(got[1].requires_grad()) << "an op eager ran with grad mode off was recorded by the replay";
  expect_near(got[1], eager[1], strata_test::tolerance(real_dtype()).rtol);
  // A file that says something else than true or false is refused by path.
  std::string text = as_input.to_json();
  const std::string key = "\"no_grad\": true";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, key.size(), "\"no_grad\": 1");
  try {
    Graph::from_json(text, "bad.json");
    ADD_FAILURE() << "a non-boolean no_grad loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/no_grad"), std::string::npos) << e.what();
  }
}

// Every device replays the graph traced in the widest dtype it stores — f64,
// or f32 where it has no f64 (lavapipe) — against cpu:0's f64 reference, to
// that dtype's tolerance: no device is passed over.
TEST(Trace, ReplayOnEveryDeviceIsDifferentiableToSecondOrder) {
  manual_seed(4);
  const Device cpu("cpu:0");  // the reference, in f64, whatever the default device
  Model model(cpu, DType::f64);
  const Model model32{model.w1.to(DType::f32), model.w2.to(DType::f32)};
  Tensor x = randn({5, 4}, {.dtype = DType::f64, .device = cpu});
  auto traced = [](const Model& m, const Tensor& input) {
    return Graph::from_json(trace([&](const std::vector<Tensor>& in) { return m(in); }, {input}).to_json());
  };
  const Graph g64 = traced(model, x), g32 = traced(model32, x.to(DType::f32));
  Fn direct = [&](const Tensor& t) { return model({t})[0]; };
  const Tensor v = ones({5, 4}, {.dtype = DType::f64, .device = cpu});
  const Tensor want_grad = grad(direct)(x), want_hvp = hvp(direct, x, v);
  int replayed_in_f32 = 0;
  for (const DeviceInfo& info : runtime().devices()) {
    const bool f64 = std::find(info.dtypes.begin(), info.dtypes.end(), DType::f64) != info.dtypes.end();
    SCOPED_TRACE(info.id + (f64 ? " in f64" : " in f32"));
    const Graph& g = f64 ? g64 : g32;
    const DType dtype = f64 ? DType::f64 : DType::f32;
    Fn replayed = [&](const Tensor& t) { return g.run({t})[0]; };
    Tensor xd = x.to(dtype).to(info.device);
    expect_near(grad(replayed)(xd), want_grad, f64 ? 1e-10 : 1e-4);
    expect_near(hvp(replayed, xd, v.to(dtype).to(info.device)), want_hvp, f64 ? 1e-9 : 1e-3);
    replayed_in_f32 += f64 ? 0 : 1;
  }
  std::printf("replayed in f32 on %d device(s) without f64\n", replayed_in_f32);
}

TEST(Trace, BadInputsAndUnsupportedOpsAreClearErrors) {
  Tensor x = ones({2, 3});
  Graph g = trace([](const std::vector<Tensor>& in) { return std::vector<Tensor>{exp(in[0])}; }, {x});
  try {
    g.run({ones({3, 2})});
    FAIL() << "wrong shape accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("traced with f32[2, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(g.run({}), Error);
  // In-place writes to traced values and device moves cannot be replayed.
  EXPECT_THROW(trace(
                   [](const std::vector<Tensor>& in) {
                     Tensor y = exp(in[0]);
                     y.copy_(in[0]);
                     return std::vector<Tensor>{y};
                   },
                   {x}),
               Error);
  // An inspection graph does not replay.
  Tensor r = full({}, 2.0, {.requires_grad = true});
  Graph inspected = recorded_graph({exp(r)});
  EXPECT_THROW(inspected.run({r}), Error);
  EXPECT_THROW(inspected.save(temp_file("x.json")), Error);
}

TEST(Trace, LoadNamesTheFileAndJsonPathOfAProblem) {
  Tensor x = ones({2});
  std::string text = trace([](const std::vector<Tensor>& in) { return std::vector<Tensor>{sin(in[0])}; }, {x}).to_json();
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  auto message = [](const std::string& json) {
    try {
      Graph::from_json(json, "g.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(replace("\"sin\"", "\"frobnicate\"")).find("/nodes/0/op: unknown op \"frobnicate\""),
            std::string::npos);
  EXPECT_NE(message("{").find("g.json"), std::string::npos);
  EXPECT_NE(message("{\"format\": \"other\"}").find("not a strata-graph file"), std::string::npos);
  EXPECT_NE(message(replace("\"outputs\": [\n  1", "\"outputs\": [\n  7")).find("never defined"), std::string::npos)
      << text;
  EXPECT_THROW(Graph::load(temp_file("does-not-exist.json")), Error);
}

}  // namespace
