// tensor.hpp — the n-dimensional array.
//
// A Tensor is a reference-counted handle: copies share storage, like
// torch::Tensor. Views (reshape, permute, slice, expand, ...) share storage
// and differ only in shape, strides and offset. Ops never move data between
// devices implicitly; use to(Device).
#pragma once

#include <strata/device.hpp>
#include <strata/dtype.hpp>

#include <complex>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace strata {

using Shape = std::vector<int64_t>;

/// Options for creating tensors. Missing device = the runtime's default.
struct TensorOptions {
  DType dtype = DType::f32;
  std::optional<Device> device = std::nullopt;
  /// A leaf whose gradient backward() accumulates (floating and complex
  /// dtypes only).
  bool requires_grad = false;
};

/// Which gradients of intermediate (non-leaf) tensors a backward pass keeps.
/// Leaves and sources always get theirs.
enum class GradRetention {
  /// None: the cheapest.
  discard,
  /// Those marked: by Tensor::retain_grad() for backward(), by
  /// GradientTape::retain() for a tape.
  selective,
  /// Every intermediate the pass computes a gradient for (those on a path
  /// from the target to a leaf or source).
  keep,
};

struct BackwardOptions {
  /// Keep the graph so that backward can run through it again.
  bool retain_graph = false;
  /// Record the backward pass itself, so that .grad is differentiable.
  bool create_graph = false;
  /// Intermediate gradients to accumulate into the tensors' grad().
  GradRetention retention = GradRetention::selective;
};

/// Which pass a gradient-ready hook fires in (Tensor::register_grad_ready_hook).
struct GradReadyInfo {
  /// The derivative level of the pass: 0 for backward(), a tape's id() for
  /// its gradient().
  uint64_t level = 0;
  /// Whether the pass adds the gradient into grad() when it ends (backward());
  /// false for a tape's gradient(), which returns it.
  bool accumulates = false;
};

struct TensorImpl;  // internal

class Tensor {
 public:
  /// An undefined tensor (defined() is false).
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }

  DType dtype() const;
  Device device() const;
  int64_t dim() const;
  std::span<const int64_t> shape() const;
  std::span<const int64_t> strides() const;
  /// Size of dimension `d`; negative `d` counts from the end.
  int64_t size(int64_t d) const;
  int64_t offset() const;
  int64_t numel() const;
  bool is_contiguous() const;
  /// Shape as a vector, for convenience ("[2, 3]" when printed).
  Shape sizes() const;

  // --- conversion ---------------------------------------------------------
  /// Copy to another device (a no-op returning *this when already there).
  Tensor to(Device device) const;
  /// Value conversion to another dtype (no-op when equal); complex to real
  /// is a DTypeError (take real(), imag() or abs()).
  Tensor to(DType dtype) const;
  /// Compact row-major copy, or *this when already contiguous.
  Tensor contiguous() const;
  /// A fresh copy with its own storage.
  Tensor clone() const;

  /// The value of a one-element tensor, converted to T.
  template <typename T>
  T item() const;
  /// All elements, row-major, converted to T (copies to the host). T is
  /// float, double, int64_t, int32_t, bool, std::complex<float> or
  /// std::complex<double>. Complex tensors are read only as a std::complex
  /// T (a real T would drop the imaginary parts: a DTypeError that says
  /// so); real tensors read as std::complex get imaginary parts 0.
  template <typename T>
  std::vector<T> to_vector() const;

  // --- views (share storage) ---------------------------------------------
  /// One dimension may be -1. Copies when the strides do not allow a view.
  Tensor reshape(const Shape& shape) const;
  /// Alias of reshape that never copies; throws ShapeError when impossible.
  Tensor view(const Shape& shape) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  /// Matrix transpose of the last two dims.
  Tensor mT() const;
  /// Elements start, start+step, ... < end along `dim`. Negative start/end
  /// count from the end; values outside [-size, size], end before start, or
  /// step <= 0 throw IndexError (no silent clamping).
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  /// Index `i` of `dim`, removing that dim.
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten() const;

  /// Copies `src` (broadcast, cast, same device) into this tensor's elements.
  /// A source overlapping this tensor in the same storage is read whole
  /// before anything is written (x[1:].copy_(x[:-1]) shifts x), on every
  /// backend. An in-place write: tensors saved for a backward pass that alias
  /// this storage can no longer be used (the pass then raises an error).
  void copy_(const Tensor& src);

  // --- autograd (PyTorch style; the same engine as GradientTape) ---------
  /// Marks a floating leaf tensor as needing a gradient; DTypeError for
  /// integer and bool tensors. Returns *this.
  Tensor& set_requires_grad(bool requires_grad = true);
  /// True for leaves marked so and for results of ops on them.
  bool requires_grad() const;
  bool is_leaf() const;
  /// The gradient accumulated by backward(); undefined before. For a
  /// non-leaf, only when backward() retained it (see retain_grad()).
  Tensor grad() const;
  /// Asks backward() to keep this non-leaf's gradient in grad() (under
  /// GradRetention::selective, the default; ::keep keeps every one). Error
  /// when the tensor has no gradient history; a no-op on a leaf.
  void retain_grad();
  void zero_grad();
  /// Replaces the gradient held in grad() (an undefined tensor clears it).
  /// `grad` must have this tensor's shape, dtype and device (ShapeError,
  /// DTypeError, DeviceError otherwise); Error on a tensor without autograd
  /// metadata or that is not a leaf requiring grad. For code that computes
  /// a leaf's gradient outside backward() (data-parallel reduction).
  void set_grad(const Tensor& grad);
  /// Gradient of this tensor with respect to every leaf that requires grad,
  /// accumulated into their grad(). A non-scalar tensor needs `gradient`.
  void backward(const Tensor& gradient = Tensor(), BackwardOptions options = {}) const;
  /// The same data, without gradient history.
  Tensor detach() const;
  /// The forward-mode tangent of this tensor at `level` (undefined if none).
  Tensor tangent(uint64_t level) const;
  /// Calls `hook` with this tensor's gradient during backward (leaves: the
  /// total; the hook may return a replacement or an undefined tensor).
  void register_hook(std::function<Tensor(const Tensor&)> hook);
  /// A hook on the node that produced this (non-leaf) tensor, called after
  /// the node's derivative rule ran in a backward pass: `grad_inputs` holds
  /// one gradient per input of the op (undefined where none flows) and may
  /// be changed in place, keeping each shape; `grad_outputs` are the
  /// gradients of the op's outputs. Fires in every pass that runs the node
  /// (backward() and tapes). Error on a leaf (use register_hook).
  /// A hook that observes this tensor's gradient in a pass as soon as it is
  /// complete — once every node of the pass that sends it a gradient has
  /// run, while the rest of the pass still runs — rather than at the end.
  /// Fires in backward() for a leaf that requires grad, and in a tape's
  /// gradient() for a tensor among the sources, with the pass's total (before
  /// the tensor hooks of register_hook, which in backward() run when the
  /// whole pass ended). It observes; it cannot change the gradient. A pass
  /// in which no gradient reaches the tensor does not fire it. Used to start
  /// communication early (data-parallel gradient buckets).
  using GradReadyHook = std::function<void(const Tensor& grad, const GradReadyInfo& pass)>;
  void register_grad_ready_hook(GradReadyHook hook);
  using NodeHook = std::function<void(std::vector<Tensor>& grad_inputs, const std::vector<Tensor>& grad_outputs)>;
  void register_node_hook(NodeHook hook);

  /// PyTorch-like text with values, dtype and device.
  std::string to_string() const;

  /// The elements as raw bytes, row-major, in the dtype's own encoding
  /// (f16/bf16 as their 16-bit patterns, bool one byte each, little-endian
  /// hosts): for serialisation and interop. Reads the device (a
  /// synchronisation point).
  std::vector<uint8_t> to_bytes() const;

  /// Internal.
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

/// "[2, 3]" — how error messages write shapes.
std::string shape_string(std::span<const int64_t> shape);
/// "f32[2, 3]" — dtype and shape, as error messages write a tensor
/// ("undefined" for an undefined tensor).
std::string type_string(const Tensor& t);

// --- creation (creation.cpp) ----------------------------------------------
Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, double value, const TensorOptions& options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
/// 0-d tensor holding `value`.
Tensor scalar_tensor(double value, const TensorOptions& options = {});
/// [start, end) in steps of `step`; dtype i64 unless options say otherwise.
Tensor arange(double start, double end, double step = 1.0,
              const TensorOptions& options = {.dtype = DType::i64, .device = std::nullopt});
Tensor arange(int64_t end, const TensorOptions& options = {.dtype = DType::i64, .device = std::nullopt});
/// Uniform [0, 1) and standard normal, from the seeded global generator:
/// the same seed gives the same numbers on every device.
Tensor rand(const Shape& shape, const TensorOptions& options = {});
Tensor randn(const Shape& shape, const TensorOptions& options = {});
/// 1 with probability p, else 0 (p in [0, 1]; any dtype the device stores),
/// from the same generator: the mask dropout draws. ValueError for a p
/// outside [0, 1] or NaN.
Tensor bernoulli(const Shape& shape, double p, const TensorOptions& options = {});
/// Seeds the global generator.
void manual_seed(uint64_t seed);
/// The global generator's complete state (opaque text), so that random
/// draws can be replayed exactly (activation checkpointing does).
struct RngState {
  std::string data;
};
RngState get_rng_state();
/// Restores a state from get_rng_state(); throws ValueError for anything else.
void set_rng_state(const RngState& state);
/// From host values (converted to options.dtype). data.size() must equal
/// the shape's element count.
Tensor from_data(std::span<const float> data, const Shape& shape, const TensorOptions& options = {});
Tensor from_data(std::span<const double> data, const Shape& shape,
                 const TensorOptions& options = {.dtype = DType::f64, .device = std::nullopt});
Tensor from_data(std::span<const int64_t> data, const Shape& shape,
                 const TensorOptions& options = {.dtype = DType::i64, .device = std::nullopt});
Tensor from_data(std::span<const int32_t> data, const Shape& shape,
                 const TensorOptions& options = {.dtype = DType::i32, .device = std::nullopt});
/// Complex values, into a complex dtype (c64 by default for
/// std::complex<float>, c128 for std::complex<double>); a real
/// options.dtype is a DTypeError (it would drop the imaginary parts).
Tensor from_data(std::span<const std::complex<float>> data, const Shape& shape,
                 const TensorOptions& options = {.dtype = DType::c64, .device = std::nullopt});
Tensor from_data(std::span<const std::complex<double>> data, const Shape& shape,
                 const TensorOptions& options = {.dtype = DType::c128, .device = std::nullopt});
/// From raw bytes in the encoding of options.dtype (see Tensor::to_bytes);
/// bytes.size() must be the shape's element count times the dtype's size.
Tensor from_bytes(std::span<const uint8_t> bytes, const Shape& shape, const TensorOptions& options = {});
/// Convenience: tensor({1, 2, 3}) is a 1-D f32 tensor.
Tensor tensor(std::initializer_list<float> values, const TensorOptions& options = {});

}  // namespace strata
