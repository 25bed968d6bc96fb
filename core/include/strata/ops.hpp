// ops.hpp — the functional op API.
//
// Every function here dispatches one op of the op set (docs/ops.md) to the
// device of its inputs. Inputs must share a device (0-d tensors made from C++
// scalars aside); dtypes are promoted NumPy-style. Errors name the op, the
// shapes, the dtypes and the device.
#pragma once

#include <strata/tensor.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace strata {

// Elementwise unary. neg, abs, exp, log, sqrt and reciprocal also take
// complex tensors (principal branches: docs/complex.md); abs of a complex
// tensor is its modulus, of the real dtype of its parts.
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
/// The principal arctangent, in (-π/2, π/2).
Tensor atan(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor logical_not(const Tensor& x);
Tensor square(const Tensor& x);

// Elementwise binary, broadcasting. add, sub, mul, div, pow, eq, ne and
// where's branches also take complex tensors; the ordered comparisons,
// maximum and minimum do not.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor clamp(const Tensor& x, double lo, double hi);

// Operators. A C++ scalar becomes a 0-d tensor on the tensor's device whose
// dtype follows PyTorch's rule (it does not widen the tensor's category).
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// Reductions. Empty `dims` reduces every dimension; negative dims count
// from the end. sum, mean and prod also take complex tensors.
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);

// Linear algebra: NumPy matmul semantics (1-D promotion, batch broadcasting);
// floating and complex operands.
Tensor matmul(const Tensor& a, const Tensor& b);

// Complex numbers (docs/complex.md). Gradients follow PyTorch's convention:
// the gradient of a real loss L with respect to z = x + iy is dL/dx + i·dL/dy.
/// The real part of a complex tensor, as a new tensor of the real dtype of
/// its parts (not a view, unlike PyTorch's); a real tensor is returned as is.
Tensor real(const Tensor& x);
/// The imaginary part of a complex tensor (a new tensor); a real tensor is a
/// DTypeError, as in PyTorch.
Tensor imag(const Tensor& x);
/// The complex conjugate; a real tensor is returned as is.
Tensor conj(const Tensor& x);
/// The argument of each complex value, atan2(imag, real), in [-π, π];
/// complex tensors only. Its derivative at 0 is taken as 0.
Tensor angle(const Tensor& x);
/// re + i·im from two real tensors (broadcast): f64 parts give c128, other
/// real dtypes c64.
Tensor complex(const Tensor& re, const Tensor& im);
/// abs·(cos(angle) + i·sin(angle)) from two real tensors (broadcast), with
/// complex()'s dtypes.
Tensor polar(const Tensor& abs, const Tensor& angle);

// Indexing (index tensors are i64).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src);

// Joining.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
/// Constant padding, PyTorch's convention: `pads` holds (before, after)
/// pairs starting from the last dim — {left, right, top, bottom} pads the
/// last two dims of an NCHW tensor. Paddings must be >= 0. Differentiable:
/// the gradient is the interior slice.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value = 0.0);

// Neural-network composites (decomposed unless the backend fuses them).

/// An activation a composite applies to its result in the same pass.
enum class FusedActivation { none, relu };
/// y = activation(x @ weightᵀ + bias): x [..., in], weight [out, in], bias
/// [out] -> [..., out]. The layer nn::Linear runs, as one op: a backend may
/// fuse the GEMM, the bias and the activation (the CPU plugin does, through
/// oneDNN post-ops), and autocast lowers it whole (inputs cast to f16/bf16,
/// result in that dtype). Differentiable to any order like its decomposition,
/// matmul(x, weight.mT()) + bias then relu.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
              FusedActivation activation = FusedActivation::none);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor gelu(const Tensor& x);
Tensor silu(const Tensor& x);

// Backward ops (used by autograd; public so that backends can be tested).
Tensor relu_backward(const Tensor& grad, const Tensor& x);
Tensor sigmoid_backward(const Tensor& grad, const Tensor& y);
Tensor tanh_backward(const Tensor& grad, const Tensor& y);

/// A chain of elementwise ops as one op (docs/ops.md, "Fused elementwise
/// programs"; <strata/plugin/fused_program.hpp> has the program format):
/// `program` reads inputs %0.. (1 to 8, promoted to one float dtype and
/// broadcast to one shape) and names 1 to 6 outputs, returned in order. A
/// device with a kernel for it computes the chain in one pass (the CPU
/// plugin's gives the bits of the ops one by one); any other runs the ops
/// one by one. Differentiable to any order. Throws ValueError naming the
/// line of a malformed program.
std::vector<Tensor> fused_elementwise_outputs(const std::vector<Tensor>& inputs, const std::string& program);
/// fused_elementwise_outputs for a program of one output (ValueError for more).
Tensor fused_elementwise(const std::vector<Tensor>& inputs, const std::string& program);
Tensor gelu_backward(const Tensor& grad, const Tensor& x);
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim);

// Data movement. Casts go between real dtypes, from real to complex
// (imaginary part 0) and between complex dtypes; complex to real is a
// DTypeError (use real, imag or abs).
Tensor cast(const Tensor& x, DType dtype);

// --- Calling an op by name ------------------------------------------------------

// --- Optimizer updates (in place) ------------------------------------------------
// One op per update, which a backend may run as a single pass over memory
// (docs/ops.md, "Optimizer updates"; the CPU plugin does for f32 and f64);
// elsewhere the op decomposes into the unfused arithmetic, with the same
// result to the last bit. nn::SGD, nn::Adam and nn::AdamW use them; a custom
// optimizer may too. They update `param` and the state tensors in place
// (run them without recording: NoGradGuard), and need every operand of the
// parameter's dtype, shape and device.

/// param ← param − lr·(grad + weight_decay·param)  (weight_decay 0: no term).
void sgd_step_(const Tensor& param, const Tensor& grad, double lr, double weight_decay = 0.0);

struct SgdMomentumUpdate {
  double lr = 0.0, weight_decay = 0.0, momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
  /// The buffer holds nothing yet: b ← g (its contents are not read).
  bool first = false;
};
/// g ← grad + wd·param; buffer ← g (first) or μ·buffer + (1−dampening)·g;
/// g ← g + μ·buffer (Nesterov) or buffer; param ← param − lr·g.
void sgd_momentum_step_(const Tensor& param, const Tensor& grad, const Tensor& buffer,
                        const SgdMomentumUpdate& update);

enum class WeightDecay : int64_t {
  none = 0,
  l2 = 1,         // Adam: g ← g + wd·param
  decoupled = 2,  // AdamW: param ← param·decay, decay = 1 − lr·wd
};

struct AdamUpdate {
  WeightDecay decay_mode = WeightDecay::none;
  double weight_decay = 0.0;
  double decay = 1.0;
  double beta1 = 0.9, beta2 = 0.999;
  double step_size = 0.0;       // lr / (1 − β1ᵗ)
  double inv_sqrt_bias2 = 1.0;  // 1 / √(1 − β2ᵗ)
  double eps = 1e-8;
  /// The moments hold nothing yet (their contents are not read).
  bool first = false;
};
/// After the weight decay of decay_mode: m ← β1·m + (1−β1)·g;
/// v ← β2·v + (1−β2)·g²; param ← param − m / (√v·inv_sqrt_bias2 + eps) ·
/// step_size.
void adam_step_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const AdamUpdate& update);

// The same updates for a group of parameters with one set of hyperparameters
// (PyTorch's foreach/fused optimizers): element i of each list belongs to
// parameter i, and every list has one entry per parameter. The result is
// exactly that of one call per parameter. A device whose kernel takes groups
// (STRATA_KERNEL_GROUPED, as the CPU plugin's f32 and f64 kernels do) runs
// the whole group in one kernel call, one pass over all of its elements;
// other devices, and parameters whose tensors overlap another's memory, are
// updated one at a time. Every parameter is checked before any is updated:
// an error (naming the parameter's index) leaves all of them unchanged.
// nn::SGD, nn::Adam and nn::AdamW update their parameters this way.

void sgd_step_(std::span<const Tensor> params, std::span<const Tensor> grads, double lr, double weight_decay = 0.0);
void sgd_momentum_step_(std::span<const Tensor> params, std::span<const Tensor> grads,
                        std::span<const Tensor> buffers, const SgdMomentumUpdate& update);
void adam_step_(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avgs,
                std::span<const Tensor> exp_avg_sqs, const AdamUpdate& update);

// --- Optimizer updates (out of place, differentiable) ------------------------------
// The same updates as new tensors: each runs its op's decomposition — the
// unfused arithmetic, the one formula both forms share — as recorded public
// ops (never the fused kernel), so its results carry gradient history and a
// tape differentiates through them, to any order; the inputs are never
// written. Where the fused kernel runs, the in-place form gives the same bits
// (docs/ops.md, "Optimizer updates"). Every operand needs the parameter's
// dtype, shape and device (ShapeError, DTypeError or DeviceError naming the
// function and the operand otherwise); nn::functional::sgd, adam and adamw
// (nn/functional_optim.hpp) build the functional optimizers on them.

/// param − lr·(grad + weight_decay·param)  (weight_decay 0: no term).
Tensor sgd_step(const Tensor& param, const Tensor& grad, double lr, double weight_decay = 0.0);

/// The new parameter and momentum buffer of sgd_momentum_step_.
struct SgdMomentumResult {
  Tensor param, buffer;
};
/// sgd_momentum_step_ out of place. With `update.first`, `buffer` is not
/// read (it may be undefined) and the new buffer is g = grad + wd·param —
/// `grad` itself when weight_decay is 0.
SgdMomentumResult sgd_momentum_step(const Tensor& param, const Tensor& grad, const Tensor& buffer,
                                    const SgdMomentumUpdate& update);

/// The new parameter and moments of adam_step_.
struct AdamResult {
  Tensor param, exp_avg, exp_avg_sq;
};
/// adam_step_ out of place. With `update.first`, the moments are not read
/// (they may be undefined).
AdamResult adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                     const AdamUpdate& update);

/// A named attribute of an op called by name. The value's C++ type picks the
/// attribute kind of the plugin ABI (docs/ops.md, "Attributes"): int64_t is
/// INT, bool BOOL, double FLOAT, std::vector<int64_t> INTS,
/// std::vector<double> FLOATS, std::string STRING, DType DTYPE, and
/// OpAttr::Scalar the exact SCALAR kind (an integer travels as int64, a real
/// as double).
struct OpAttr {
  struct Scalar {
    std::variant<int64_t, double> value;
  };
  using Value =
      std::variant<int64_t, bool, double, std::vector<int64_t>, std::vector<double>, std::string, DType, Scalar>;
  std::string name;
  Value value;
};

/// Runs the op `name` — a plugin's op ("acme::swiglu", registered through the
/// host services) or one of the core's ("strata::mul") — on `inputs`, the way
/// a plugin's derivative rule does through the call_op host service: the call
/// dispatches like every public op, so it is recorded for autograd and
/// differentiable to any order when the op has derivative rules. Returns the
/// op's outputs. Throws ValueError naming the op for an unknown name, for the
/// core's view and join ops (reach those through their functions: reshape,
/// cat, ...), and for attributes that are missing, unknown to a plugin op's
/// schema, or of the wrong kind.
std::vector<Tensor> call_op(std::string_view name, const std::vector<Tensor>& inputs,
                            const std::vector<OpAttr>& attrs = {});

}  // namespace strata
