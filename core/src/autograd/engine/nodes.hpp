// nodes.hpp — the recorded graph: autograd metadata on tensors, nodes,
// saved tensors, and the thread-local recording state.
//
// Ownership runs one way only, from outputs to inputs: a tensor owns its
// producer node, a node owns the nodes (or leaf metadata) of its inputs and
// the data it saved. A node never owns a tensor that owns it: saved outputs
// are kept as storage aliases without metadata and re-linked to the node
// only while it runs backward, so there is no reference cycle.
#pragma once

#include "runtime/dispatch/op.hpp"

#include <strata/tensor.hpp>

#include <boost/container/small_vector.hpp>

#include <array>
#include <atomic>
#include <cmath>
#include <complex>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace strata::detail {

/// Ids of the tapes (derivative levels) a tensor or node belongs to. Id 0 is
/// the implicit level of requires_grad / backward().
struct LevelSet {
  static constexpr int kCapacity = 8;
  std::array<uint64_t, kCapacity> ids{};
  uint8_t count = 0;

  bool empty() const { return count == 0; }
  bool contains(uint64_t id) const {
    for (uint8_t k = 0; k < count; ++k)
      if (ids[k] == id) return true;
    return false;
  }
  void add(uint64_t id);  // throws Error past kCapacity
  void remove(uint64_t id);
};

struct Node;

/// Autograd state of one tensor (absent for plain tensors).
struct AutogradMeta {
  bool requires_grad = false;      // a leaf of the implicit level
  Tensor grad;                     // accumulated by backward()
  std::shared_ptr<Node> grad_fn;   // producer, for non-leaves
  int output_nr = 0;
  LevelSet levels;                 // tapes recording this tensor
  /// Forward-mode tangents, by forward level id.
  std::vector<std::pair<uint64_t, Tensor>> tangents;
  /// Tensor hooks: called with the gradient of this tensor; may replace it.
  std::vector<std::function<Tensor(const Tensor&)>> hooks;
  /// Gradient-ready hooks (Tensor::register_grad_ready_hook).
  std::vector<Tensor::GradReadyHook> ready_hooks;
  /// Tensor::retain_grad(): backward() keeps this non-leaf's gradient.
  bool retains_grad = false;

  const Tensor* tangent(uint64_t level) const {
    for (const auto& [l, t] : tangents)
      if (l == level) return &t;
    return nullptr;
  }
};

/// A tensor a node needs for its derivative, with the storage version it had
/// (an in-place change before backward is an error naming the op). An
/// operand whose values the op's VJP does not read (OpDef::vjp_reads_inputs,
/// vjp_reads_outputs) is kept as a placeholder: its shape, strides, dtype and
/// device without storage, so that it holds no memory and no version.
struct SavedTensor {
  Tensor data;  // for outputs: an alias without autograd metadata
  uint32_t version = 0;
  bool is_output = false;
  int output_nr = 0;
  /// Outputs under forward mode: their tangents (plain aliases, so the node
  /// never owns history that could lead back to it), re-attached when the
  /// node runs backward so that rules using the output carry its tangent
  /// (forward-over-reverse).
  std::vector<std::pair<uint64_t, Tensor>> tangents;
  bool shape_only = false;  // data is a placeholder
};

/// Where a node sends the gradient of one of its inputs.
struct Edge {
  std::shared_ptr<Node> node;          // producer of the input, or
  std::shared_ptr<AutogradMeta> leaf;  // the input itself when it is a leaf
  int output_nr = 0;
  bool valid() const { return node != nullptr || leaf != nullptr; }
};

/// A recorded op. Nodes come from a per-thread pool (make_node) and keep up
/// to two inputs and edges and one output inline, so recording a typical op
/// costs one pooled allocation.
struct Node {
  const OpDef* op = nullptr;
  Attrs attrs;
  boost::container::small_vector<SavedTensor, 2> inputs;
  boost::container::small_vector<SavedTensor, 1> outputs;
  boost::container::small_vector<Edge, 2> next;  // one per input
  size_t n_outputs = 0;    // kept when the saved data is released
  size_t accounted_bytes = 0;  // saved bytes counted against its levels
  std::shared_ptr<const void> closure;  // see GradContext::closure
  LevelSet levels;
  uint64_t sequence = 0;   // creation order, for a deterministic traversal
  bool released = false;   // saved data freed after a non-persistent pass
  /// The outputs' metadata, not owned (a node never owns the tensors that
  /// own it): where a retained intermediate gradient goes.
  boost::container::small_vector<std::weak_ptr<AutogradMeta>, 1> output_metas;
  /// Some output was marked with retain_grad() or GradientTape::retain().
  bool retain_hint = false;
  /// The backward pass (by pass id) that keeps this node's scratch in its
  /// slot `pass_slot`, or 0; see backward_pass.cpp.
  std::atomic<uint64_t> pass{0};
  uint32_t pass_slot = 0;
  /// Node hooks: see (and may change) the gradients of the outputs.
  std::vector<std::function<void(std::vector<Tensor>&)>> hooks;
  /// Tensor::register_node_hook: see (and may change) the input gradients
  /// the rule computed, with the output gradients.
  std::vector<Tensor::NodeHook> post_hooks;

  size_t saved_bytes() const;
  /// Frees the saved tensors (after a non-persistent pass).
  void release_saved();
  ~Node();  // iterative: freeing a long chain never recurses deeply
};

/// Thread-local recording state.
struct AutogradState {
  bool grad_enabled = true;
  LevelSet recording;     // tapes currently recording (0 = implicit level)
  LevelSet forward;       // forward-mode levels active
  bool anomaly = false;
};
AutogradState& autograd_state();
/// Threads with anomaly mode on, anywhere in the process (set_anomaly_mode
/// keeps it): while zero, dispatch skips the per-thread check.
extern std::atomic<int> g_anomaly_threads;

/// Turns recording and forward mode off for a scope (internal work such as
/// running a fallback on the CPU, whose op is recorded once by the caller).
class AutogradOff {
 public:
  AutogradOff() : st_(autograd_state()), grad_(st_.grad_enabled), forward_(st_.forward) {
    st_.grad_enabled = false;
    st_.forward = {};
  }
  ~AutogradOff() {
    st_.grad_enabled = grad_;
    st_.forward = forward_;
  }
  AutogradOff(const AutogradOff&) = delete;
  AutogradOff& operator=(const AutogradOff&) = delete;

 private:
  AutogradState& st_;
  bool grad_;
  LevelSet forward_;
};

/// vmap's levels among the tapes' (docs/vmap.md): while open, recording and
/// forward mode keep only the levels opened before vmap `level` (`below`:
/// a batching rule's own ops on the lanes, which levels opened outside the
/// vmap record) or only those opened after it (`above`: the node of an op on
/// batched tensors, which only levels opened inside the vmapped function
/// record, on the batched tensors themselves).
class LevelWindow {
 public:
  enum class Keep : uint8_t { below, above };
  LevelWindow(uint64_t level, Keep keep);
  ~LevelWindow();
  LevelWindow(const LevelWindow&) = delete;
  LevelWindow& operator=(const LevelWindow&) = delete;

 private:
  AutogradState& st_;
  LevelSet recording_, forward_;
};

/// Meta of a tensor, created on demand.
AutogradMeta& meta_of(const Tensor& t);
inline AutogradMeta* meta_if(const Tensor& t) { return t.defined() ? t.impl()->autograd.get() : nullptr; }

/// Called by dispatch after an op ran: records a node and propagates
/// forward-mode tangents when any input asks for it. Cheap when nothing does.
void record_op(const OpCall& call, OpResult& outputs);
/// Records any op given its (prepared) inputs and outputs.
void record_node(const OpDef& op, std::span<const Tensor> inputs, std::span<Tensor> outputs, const Attrs* attrs,
                 std::shared_ptr<const void> closure = nullptr);
/// The same for view functions (no kernel): `view` of `base`.
void record_view(const OpDef& op, const Tensor& base, Tensor& view, Attrs attrs);

uint64_t new_level_id();

/// A new node from the calling thread's node pool.
std::shared_ptr<Node> make_node();
/// Bytes of saved tensors held by live nodes of a level (see
/// GradientTape::saved_bytes).
uint64_t level_saved_bytes(uint64_t level);

/// Anomaly mode: the first NaN or infinite value among the elements of a
/// floating or complex tensor (either part of a complex one), or nullopt.
/// Reads the tensor to the host.
inline std::optional<double> first_non_finite(const Tensor& t) {
  if (is_complex(t.dtype())) {
    for (std::complex<double> v : t.to_vector<std::complex<double>>()) {
      if (!std::isfinite(v.real())) return v.real();
      if (!std::isfinite(v.imag())) return v.imag();
    }
    return std::nullopt;
  }
  for (double v : t.to_vector<double>()) {
    if (!std::isfinite(v)) return v;
  }
  return std::nullopt;
}

}  // namespace strata::detail
