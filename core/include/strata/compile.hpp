// compile.hpp — strata::compile: trace a function once per input signature,
// fuse its elementwise chains into single ops, and replay the result
// (docs/compile.md).
//
//   auto step = strata::compile([&](const std::vector<Tensor>& x) {
//     return std::vector<Tensor>{tanh(sin(x[0]) * w + 1.0)};
//   });
//   Tensor y = step({x})[0];     // first call: traced (and run) eagerly
//   y = step({x2})[0];           // same signature: the fused graph replays
//
// The replay is recorded by autograd like any other ops, so gradients of
// every order, forward mode, checkpointing and custom functions keep their
// meaning; the fused op's derivatives are its own rules (docs/ops.md).
#pragma once

#include <cstdint>
#include <memory>
#include <strata/graph.hpp>
#include <strata/tensor.hpp>
#include <string>
#include <vector>

namespace strata {

/// One fused region: a chain of elementwise ops that became one
/// fused_elementwise node.
struct FusionRegion {
  uint64_t node = 0;             // the fused node's id (its last op's)
  std::vector<uint64_t> nodes;   // the ops it replaced, in order
  std::vector<std::string> ops;  // their names
  int inputs = 0;                // the fused op's tensor inputs
  int outputs = 1;               // its outputs: the last op's value, then values read outside,
                                 // then the saved values
  int saved = 0;                 // of those, values saved for the backward pass (FuseOptions)
  DType dtype = DType::f32;
  Shape shape;          // every value of the region has it
  std::string program;  // the fused op's "program" attribute
};

/// Why an elementwise op was left out of a region, or where a chain split.
struct FusionNote {
  uint64_t node = 0;
  std::string op;
  std::string reason;
};

/// What fuse() did, for `strata trace --explain-fusion` and for tests.
struct FusionReport {
  std::vector<FusionRegion> regions;
  std::vector<FusionNote> notes;
  /// Plain text, one region or note per line (what --explain-fusion prints).
  std::string text() const;
};

struct FuseOptions {
  /// Also write, as more outputs of each fused op (nothing in the graph
  /// reads them), the values of its costly statements (transcendental
  /// functions, division, square root) that the op's backward program
  /// would otherwise recompute: its VJP reads them (docs/compile.md,
  /// "Saved values"). For graphs whose replay is differentiated; a
  /// forward-only replay pays a write per saved value for nothing.
  bool save_for_backward = false;
};

/// The fusion pass over a traced graph: every maximal chain of ops of the
/// fused vocabulary (<strata/plugin/fused_program.hpp>) of one real
/// floating dtype (f32 or f64) and one shape, reading at most 4 tensors,
/// becomes one fused_elementwise node (0-d constants of the chain's dtype
/// become program constants). Besides the chain's last value, up to two
/// inner values read outside it (or outputs of the graph) become outputs of
/// the fused op, unless a reader leads back into the chain; with
/// `options.save_for_backward`, saved values follow them (up to 6 outputs
/// in all). A chain of one op is left alone. The result replays to the
/// same values (the CPU plugin's fused kernel gives the same bits; a device
/// without a kernel for the op runs its decomposition into the original
/// ops). Throws Error when `g` is not a traced graph.
Graph fuse(const Graph& g, FusionReport* report = nullptr, FuseOptions options = {});

struct CompileOptions {
  /// Run the fusion pass (off: replay the trace as recorded).
  bool fuse = true;
  /// Signatures kept; beyond it the least recently used trace is dropped.
  size_t max_signatures = 64;
};

/// What a compiled function did so far.
struct CompileStats {
  uint64_t calls = 0;
  uint64_t traces = 0;       // first calls of a signature (traced and run eagerly)
  uint64_t replays = 0;      // calls answered by a cached graph
  uint64_t eager_calls = 0;  // calls run eagerly because their signature fell back
  /// Calls whose every trace stopped at a guard: a value the function read
  /// on the host (item(), to_vector()) when traced reads otherwise now.
  /// Each such call takes one more trace of its signature (up to 4, each
  /// replayed while its guards hold; then the signature runs eagerly, the
  /// last failure in `fallbacks`).
  uint64_t guard_failures = 0;
  /// Traces that serve inputs of any shape of their ranks (elementwise
  /// graphs: a new batch size is no new trace).
  uint64_t shape_free_traces = 0;
  /// Per signature that could not be traced: the signature and the reason.
  struct Fallback {
    std::string signature;
    std::string reason;
  };
  std::vector<Fallback> fallbacks;
  uint64_t fused_regions = 0;  // over every cached graph
  uint64_t fused_ops = 0;      // ops those regions replaced
  /// The cached signatures, most recently used first: each input's dtype,
  /// shape (or "[rank N]" for a shape-free trace) and device, then
  /// " grad" when derivatives were taken or " no_grad" under grad mode off,
  /// e.g. "f32[64]@cpu:0 f32[rank 1]@cpu:0 grad"; a fallen-back one ends
  /// in " (eager)".
  std::vector<std::string> signatures;
};

/// A function compiled by compile(): call it like the function. Copies
/// share one cache; calls from several threads are safe.
class CompiledFunction {
 public:
  /// Runs the function: the first call for an input signature (each
  /// input's dtype, shape and device, the thread's autocast state, and
  /// whether derivatives are taken: an input autograd records or that
  /// carries a forward-mode tangent, or grad mode off) traces it and
  /// returns the traced run's results; later calls replay
  /// the fused graph. A trace of elementwise ops only, whose inputs of rank
  /// above 0 share one shape and which captured no such tensor, serves
  /// every shape of those ranks (shapes are then symbolic). A host read of
  /// a value the function computed or of a tensor made before the call
  /// (item(), to_vector(), printing: a branch or a number taken from it)
  /// becomes a guard: a replay reads the value again and, where it
  /// differs, the call takes another trace (see CompileStats::
  /// guard_failures). A function that cannot be traced (an in-place write,
  /// a random draw, a device move: the reason is in stats().fallbacks)
  /// runs eagerly for that signature from then on. Called while another
  /// trace records (inside trace() or another compiled function's first
  /// call), it runs the function eagerly, so the outer trace sees its ops.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs) const;

  CompileStats stats() const;
  /// The graph replayed for `inputs`' signature (after fusion), or null
  /// when that signature has not been traced or fell back.
  std::shared_ptr<const Graph> graph_for(const std::vector<Tensor>& inputs) const;
  /// What the fusion pass did for `inputs`' signature (empty when not traced).
  FusionReport report_for(const std::vector<Tensor>& inputs) const;

  struct State;

 private:
  friend CompiledFunction compile(TraceFn fn, CompileOptions options);
  std::shared_ptr<State> state_;
};

/// Compiles `fn` (see CompiledFunction). What the function reads on the
/// host of a value it computed or of a tensor made before the call (item,
/// to_vector: a branch or a number) is guarded: a replay checks it and
/// takes another trace where it changed. Other control flow (a global
/// flag, a counter) is frozen to the path the first call takes, as with
/// trace() (docs/compile.md).
CompiledFunction compile(TraceFn fn, CompileOptions options = {});

/// Whether this thread is inside a compiled function's trace (the first
/// call of a signature), in the function itself rather than inside an op:
/// the counterpart of torch.compiler.is_compiling(). Code that reads
/// values on the host only to check them (nn::functional's label range)
/// leaves the check to the kernels there, since a host read would become a
/// guard that every replay reads back (a device synchronisation) and that
/// fails whenever the values change.
bool is_compiling();

}  // namespace strata
