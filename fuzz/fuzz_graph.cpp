// fuzz_graph.cpp — bytes → Graph::from_json (what Graph::load reads) → if
// the graph is accepted, replay it on cpu:0 with small random inputs of the
// dtypes and shapes it declares. An Error (strata::Error and its kinds) is
// the expected answer to a bad graph; anything else is a bug.
#include "fuzz_common.hpp"

#include <strata/strata.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace {

/// Inputs larger than this are not replayed: the fuzzer's budget, not a
/// limit of Graph (the runtime's memory_limit catches what ops blow up).
constexpr int64_t kMaxInputElements = 4096;

bool small_enough(const strata::Shape& shape) {
  if (shape.size() > 8) return false;
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxInputElements) return false;
    n *= d;
    if (n > kMaxInputElements) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  strata_fuzz::quiet_runtime();
  const std::string text(reinterpret_cast<const char*>(data), size);
  strata::Graph g;
  try {
    g = strata::Graph::from_json(text, "fuzz.json");
  } catch (const strata::Error&) {
    return 0;
  }
  // What `strata graph` prints of a loaded graph.
  (void)g.to_json();
  (void)g.to_dot();
  if (!g.traced || g.input_shapes.size() != g.input_dtypes.size() || g.input_shapes.size() > 16) return 0;
  for (const strata::Shape& s : g.input_shapes) {
    if (!small_enough(s)) return 0;
  }
  try {
    strata::manual_seed(size);
    std::vector<strata::Tensor> inputs;
    for (size_t k = 0; k < g.input_shapes.size(); ++k) {
      const strata::DType dt = g.input_dtypes[k];
      const strata::Shape& shape = g.input_shapes[k];
      strata::Tensor t = strata::is_floating(dt) ? strata::randn(shape).to(dt)
                         // small non-negative integers: valid indices for most gathers
                         : (strata::rand(shape) * 3.0).to(dt);
      inputs.push_back(t);
    }
    std::vector<strata::Tensor> out = g.run(inputs);
    for (const strata::Tensor& t : out) {
      if (t.defined() && t.numel() <= kMaxInputElements) (void)t.to_bytes();
    }
  } catch (const strata::Error&) {
  }
  return 0;
}
