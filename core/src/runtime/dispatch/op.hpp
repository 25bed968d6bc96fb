// op.hpp — the op model: definitions, calls and dispatch.
//
// An op is defined once (core/src/ops/*.cpp) as an OpDef: its name (the
// kernel name backends register), kind, arity, and `prepare`, the shape and
// dtype rule that validates inputs, inserts casts and broadcasts, and fills
// in the output metadata. Composite ops add `decompose`, used when a device
// has no fused kernel. dispatch() then finds the kernel for (device, op,
// dtype signature), applies the fallback policy when there is none, allocates
// outputs and runs it.
#pragma once

#include "runtime/tensor/tensor_impl.hpp"

#include <strata/plugin/strata_plugin.h>
#include <strata/tensor.hpp>

#include <array>
#include <boost/container/static_vector.hpp>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata::detail {

enum class OpKind {
  primitive,  // every backend implements it (docs/ops.md)
  composite,  // has a decomposition; backends may fuse
  view,       // no kernel: a new geometry over the same storage
  join,       // no kernel: the core builds the result from other ops (cat,
              // pad) and records it as one node with its own derivatives
  transfer,   // no kernel: a copy between devices through the host (to_device)
};

/// A named attribute value owned by the caller of an op. `name` must outlive
/// every node that records the call (a literal, or an interned string).
struct Attr {
  const char* name;
  strata_attr_kind kind;
  int64_t i = 0;     // INT, BOOL, DTYPE; SCALAR when scalar_dtype is I64/BOOL
  double f = 0.0;    // FLOAT; SCALAR when scalar_dtype is F64
  std::vector<int64_t> ints{};   // INTS
  std::vector<double> floats{};  // FLOATS
  std::string text{};            // STRING
  strata_dtype scalar_dtype = STRATA_I64;  // SCALAR

  static Attr integer(const char* n, int64_t v) { return {n, STRATA_ATTR_INT, v}; }
  static Attr boolean(const char* n, bool v) { return {n, STRATA_ATTR_BOOL, v ? 1 : 0}; }
  static Attr real(const char* n, double v) { return {n, STRATA_ATTR_FLOAT, 0, v}; }
  static Attr list(const char* n, std::vector<int64_t> v) { return {n, STRATA_ATTR_INTS, 0, 0.0, std::move(v)}; }
  static Attr reals(const char* n, std::vector<double> v) { return {n, STRATA_ATTR_FLOATS, 0, 0.0, {}, std::move(v)}; }
  static Attr string(const char* n, std::string v) { return {n, STRATA_ATTR_STRING, 0, 0.0, {}, {}, std::move(v)}; }
  static Attr dtype(const char* n, DType v) { return {n, STRATA_ATTR_DTYPE, static_cast<int64_t>(v)}; }
  /// An exact scalar: integral (and bool) values travel as int64, others as double.
  static Attr scalar_int(const char* n, int64_t v) {
    return {n, STRATA_ATTR_SCALAR, v, 0.0, {}, {}, {}, STRATA_I64};
  }
  static Attr scalar_real(const char* n, double v) {
    return {n, STRATA_ATTR_SCALAR, 0, v, {}, {}, {}, STRATA_F64};
  }
  /// The value as a double, whatever the numeric kind.
  double as_double() const {
    if (kind == STRATA_ATTR_FLOAT || (kind == STRATA_ATTR_SCALAR && scalar_dtype == STRATA_F64)) return f;
    return static_cast<double>(i);
  }
};

using Attrs = std::vector<Attr>;

/// The most inputs and outputs one call has: fused_elementwise's backward
/// programs (forward inputs, saved values and cotangents; docs/ops.md,
/// "Fused elementwise programs") and its forward with saved values set
/// them; other ops have at most 4 inputs and 3 outputs (adam_step).
inline constexpr int kMaxInputs = 8;
inline constexpr int kMaxOutputs = 6;

struct OutputMeta {
  DType dtype = DType::f32;
  int32_t rank = 0;
  Dims shape;  // not value-initialised (kMaxOutputs of them per call): the first `rank` are read
  std::span<const int64_t> sizes() const { return {shape.data(), static_cast<size_t>(rank)}; }
  void set_shape(std::span<const int64_t> s);
};

struct OpDef;

/// The outputs of one op call, without a heap allocation. Only the
/// outputs it holds are constructed, moved and destroyed (a static_vector),
/// so the cost of a call does not grow with kMaxOutputs.
struct OpResult {
  boost::container::static_vector<Tensor, kMaxOutputs> tensors;

  int size() const { return static_cast<int>(tensors.size()); }
  void push_back(Tensor t) { tensors.push_back(std::move(t)); }
  Tensor& operator[](int k) { return tensors[static_cast<size_t>(k)]; }
  const Tensor& operator[](int k) const { return tensors[static_cast<size_t>(k)]; }
  Tensor* begin() { return tensors.data(); }
  Tensor* end() { return tensors.data() + tensors.size(); }
  std::span<const Tensor> span() const { return {tensors.data(), tensors.size()}; }
  std::vector<Tensor> to_vector() const { return {tensors.begin(), tensors.end()}; }
};

/// One invocation of an op, as it flows through prepare and dispatch.
struct OpCall {
  const OpDef* op = nullptr;
  Device device;  // where it runs: the inputs' device (set for input-less ops)
  std::array<Tensor, kMaxInputs> inputs{};
  int n_inputs = 0;
  const Attrs* attrs = nullptr;
  std::array<OutputMeta, kMaxOutputs> outputs;
  int n_outputs = 1;
  /// Set by dispatch once the call ran: whether a decomposition into other
  /// ops made its outputs (no kernel of its own ran; its primitives recorded
  /// themselves). Read by the trace layer around the call (output reuse).
  bool decomposed = false;
  /// Preallocated outputs, written in place: copy's destination (any
  /// strides), and the optimizer updates' parameter and state (compact;
  /// ops/optim.cpp). Undefined entries are allocated by dispatch; a
  /// composite that decomposes has its results copied into them.
  std::array<Tensor, kMaxOutputs> preset{};

  const Tensor& in(int k) const { return inputs[static_cast<size_t>(k)]; }
  OutputMeta& out(int k = 0) { return outputs[static_cast<size_t>(k)]; }
  const Attr* attr(std::string_view name) const;
  int64_t attr_int(std::string_view name) const;
  const std::vector<int64_t>& attr_ints(std::string_view name) const;
  /// A normalised dimension of a rank-`rank` input (0 to rank - 1; 0 for a
  /// scalar); an error naming the op otherwise. Shape rules read dims
  /// through these: an op called by name (call_op) gets raw attributes.
  int64_t attr_dim(std::string_view name, int64_t rank) const;
  /// Normalised dimensions: each in range, strictly increasing.
  const std::vector<int64_t>& attr_dims(std::string_view name, int64_t rank) const;
  /// A dtype of the op set.
  DType attr_dtype(std::string_view name) const;
  /// "op 'add' (f32[2, 3], f32[4]) on cpu:0" — the prefix of every error.
  std::string describe() const;
};

/// What a derivative rule sees. For a VJP, `grads` are the gradients of the
/// outputs (an undefined entry means zero); for a JVP, the tangents of the
/// inputs (undefined = zero). Inputs are as prepared (promoted, broadcast).
struct GradContext {
  std::span<const Tensor> inputs;
  std::span<const Tensor> outputs;
  std::span<const Tensor> grads;
  const Attrs* attrs = nullptr;
  /// VJP only: which input gradients the pass will use (empty = all). A rule
  /// may skip the others (return undefined), e.g. the gradient of a constant.
  std::span<const uint8_t> needed{};
  /// State a recorded node carries beyond tensors and attributes (the
  /// function a checkpoint recomputes); null for ordinary ops.
  const void* closure = nullptr;
  /// The op being differentiated (plugin-defined ops find their rules here).
  const OpDef* op = nullptr;

  bool needs(int k) const { return needed.empty() || needed[static_cast<size_t>(k)] != 0; }
  const Tensor& in(int k) const { return inputs[static_cast<size_t>(k)]; }
  const Tensor& out(int k = 0) const { return outputs[static_cast<size_t>(k)]; }
  const Tensor& grad(int k = 0) const { return grads[static_cast<size_t>(k)]; }
  int64_t attr_int(std::string_view name) const;
  const std::vector<int64_t>& attr_ints(std::string_view name) const;
};

/// A derivative rule: returns one tensor per input (VJP: input gradients,
/// undefined where the input is not differentiable) or per output (JVP:
/// output tangents). Rules are written with public ops, so they are
/// themselves differentiable to any order.
using DerivativeRule = std::vector<Tensor> (*)(const GradContext& ctx);

/// What autocast does with an op's floating inputs (docs/mixed-precision-and-checkpointing.md, "Autocast"): cast them
/// to the autocast dtype, to f32, or leave them to the op's own promotion.
/// The default policy is read off the op table; the configuration's "amp"
/// lists override it.
enum class AutocastCategory : uint8_t { none, lower_precision, fp32, promote };
/// "none", "lower_precision", "fp32", "promote".
const char* autocast_category_name(AutocastCategory category);

/// What an op is, as the consumers that work on families of ops read it:
/// vmap's batching rules, fusion, the generated op tables and the test
/// cases derived from the registry (bits of OpDef::tags, docs/ops.md).
using OpTags = uint32_t;
namespace op_tag {
/// Each output element reads only the input elements at its own index
/// (after broadcasting): a chain of such ops fuses into one kernel.
inline constexpr OpTags pointwise = 1u << 0;
/// The inputs broadcast to the output's shape (binary arithmetic, where).
inline constexpr OpTags broadcasting = 1u << 1;
/// Reduces over the dimensions its "dims" or "dim" attribute names.
inline constexpr OpTags reduction = 1u << 2;
/// Its result shares its input's storage (no kernel).
inline constexpr OpTags view = 1u << 3;
/// Moves data without computing on it: copies, casts, transfers, joins.
inline constexpr OpTags data_movement = 1u << 4;
/// Matrix products.
inline constexpr OpTags linalg = 1u << 5;
/// Reads or writes elements at positions an i64 index operand gives.
inline constexpr OpTags indexing = 1u << 6;
/// Draws random numbers (a Philox stream named by "seed" and "offset").
inline constexpr OpTags random = 1u << 7;
/// Makes its output from a shape and attributes: no tensor input.
inline constexpr OpTags creation = 1u << 8;
/// An optimizer's update: writes its preset outputs (parameter, state) in place.
inline constexpr OpTags optimizer = 1u << 9;
/// Works along one dimension of its input ("dim": softmax, cat, gather).
inline constexpr OpTags along_dim = 1u << 10;
/// A rule's helper: the gradient of another op (relu_backward, ...).
inline constexpr OpTags backward = 1u << 11;
/// A boolean result that compares or combines (not differentiable).
inline constexpr OpTags predicate = 1u << 12;
/// Complex numbers are its subject (real, imag, conj, angle, complex, polar).
inline constexpr OpTags complex = 1u << 13;
/// A node of the autograd layer rather than a computation (checkpoint,
/// custom functions, detach): no kernel, its rules are closures.
inline constexpr OpTags autograd = 1u << 14;
}  // namespace op_tag
/// The tags' names, bit by bit ("pointwise", "broadcasting", ...).
std::vector<std::string> op_tag_names(OpTags tags);

struct BatchCall;
/// A batching rule (vmap, docs/vmap.md): runs a call some of whose operands
/// are batched on their lanes (BatchCall, ops/batching.hpp) and returns the
/// outputs with the lanes in dim 0.
using BatchRule = OpResult (*)(const BatchCall& call);

/// Both derivative rules of an op: reverse mode (VJP) and forward mode
/// (JVP). nullptr where the op has none (a comparison has neither; an op
/// with only one mode refuses the other, naming the op).
struct Derivative {
  DerivativeRule vjp = nullptr;
  DerivativeRule jvp = nullptr;
};

/// The dtypes an op computes in, as its shape rule enforces them
/// (docs/ops.md, "Dtype families"; OpManifest tests hold every pointwise
/// op's rule to its family). Complex dtypes are a separate flag
/// (OpDef::takes_complex): a family names the real dtypes.
enum class DTypeFamily : uint8_t {
  unspecified,  // plugin-defined ops: their own shape rule decides
  any,          // every dtype, kept as it is (copies, views, joins, indexing's data)
  numeric,      // integers and floats keep their dtype; bool is refused (neg, add, max)
  floating,     // float math: integer and bool inputs compute in f32 (exp, div, mean)
  accumulate,   // floats keep their dtype; integers and bool accumulate in i64 (sum, prod)
  compare,      // operands promote to a common dtype; the result is bool (eq, lt)
  logical,      // operands read as bool; the result is bool (logical_and)
  float_only,   // float dtypes only, others refused (softmax, gelu, matmul, optimizer updates)
  index,        // the result is i64 positions (argmax, argmin)
};
/// "numeric", "floating", ... (the names docs/ops.md and `strata ops` print).
const char* dtype_family_name(DTypeFamily family);

/// Where an op's checks draw its inputs (the conformance cases of `strata
/// plugin check` and the gradient checks derived from the registry): the
/// range where the op is defined and, for differentiable ops, smooth.
struct TestDomain {
  double lo = -1.5, hi = 1.5;  // every float input drawn uniformly from [lo, hi]
  /// > 0: values on multiples of `grid` (the ties of floor, round and the
  /// comparisons included).
  double grid = 0.0;
  /// Derivative orders the derived gradient checks compare: 3 for smooth
  /// ops, 1 for ops with kinks (abs, relu, maximum), 0 for none (ops that are
  /// not differentiable, and flat ops such as floor, whose checks compose
  /// them with a smooth op by hand: tests/autograd/op_cases.hpp). Read only
  /// for ops with a VJP.
  int orders = 3;
  /// An input drawn away from zero instead (|v| in [0.5, 2], either sign):
  /// div's divisor, reciprocal's input; -1 for none.
  int nonzero_input = -1;
  /// Bit k: the op is flat in input k (relu_backward in its saved input:
  /// the mask's derivative is 0), so derived checks differentiate the others.
  uint8_t flat_inputs = 0;
};

/// One attribute an op takes: its name, its ABI kind and whether every call
/// carries it. Dispatch checks each call's attributes against these (docs/ops.md).
struct AttrDecl {
  const char* name;
  strata_attr_kind kind;
  bool required = true;
};

struct OpDef {
  std::string_view name;
  OpKind kind = OpKind::primitive;
  /// What the op is (op_tag::*): at least one bit for every core op.
  OpTags tags = 0;
  /// The attributes a call may carry; a call with another name, or a kind
  /// other than declared, is refused naming both. Empty for ops without
  /// attributes; a plugin-defined op's is the schema it registered.
  std::span<const AttrDecl> attrs{};
  /// The dtypes it computes in; every core op names its family.
  DTypeFamily dtypes = DTypeFamily::unspecified;
  AutocastCategory autocast = AutocastCategory::none;
  int n_inputs = 1;  // -1: any number (join ops such as cat)
  int n_outputs = 1;
  /// Whether the op has a complex definition (docs/complex.md). Dispatch
  /// refuses a complex input to any other op with a DTypeError naming the op
  /// and the dtype, before its shape rule and any kernel run. Plugin-defined
  /// ops set it: their own shape rule decides.
  bool takes_complex = false;
  /// Whether the op exists only for complex tensors (real, imag, conj,
  /// angle, complex: a complex input or output in every signature). A
  /// device that stores no complex dtype never needs its kernel, so it is
  /// not listed among the device's missing primitives.
  bool complex_only = false;
  /// Whether a kernel may run several calls of the op at once
  /// (STRATA_KERNEL_GROUPED, dispatch_group): the in-place optimizer
  /// updates, whose calls are independent of one another.
  bool groupable = false;
  /// Validates, promotes and broadcasts call.inputs; fills call.outputs.
  void (*prepare)(OpCall& call) = nullptr;
  /// Composites: the same result from primitives (inputs as prepared).
  std::vector<Tensor> (*decompose)(const OpCall& call) = nullptr;
  /// How it runs under vmap. Null: derived from its tags where the family
  /// fixes it (pointwise ops align the lanes, reductions and ops along one
  /// dim shift their dims; ops/batching.cpp), a composite's decomposition
  /// otherwise, and as a last resort a loop over the lanes, counted
  /// (vmap_fallback_stats). Views and joins batch in their functions.
  BatchRule batch = nullptr;
  /// A plugin op that declared STRATA_OP_BATCH_LEADING_DIMS (ABI 2.5): its
  /// leading dims are independent, so vmap runs it once on the lanes.
  bool batch_leading_dims = false;
  /// A plugin op's own batching rule (strata_op_schema::batch, ABI 2.6),
  /// tried first by ops/batching.cpp: `inputs` with the lanes in dim 0 where
  /// `batched`; returns the outputs with the lanes in dim 0, or nothing when
  /// the plugin declined (then batch_leading_dims, else the loop).
  std::vector<Tensor> (*plugin_batch)(const OpDef& op, std::span<const Tensor> inputs,
                                      std::span<const uint8_t> batched, int64_t lanes,
                                      const Attrs* attrs) = nullptr;
  /// Value of the outputs when an input is empty but outputs are not (sum
  /// of nothing is 0, mean of nothing NaN); nullopt makes such a call an
  /// error (max of nothing).
  std::optional<double> empty_fill = std::nullopt;
  /// Instead of empty_fill: the (single) output is a copy of this input when
  /// another input is empty (scatter_add of nothing is its base).
  int empty_passthrough = -1;
  /// Its derivative rules (none: the op is not differentiable, e.g.
  /// comparisons).
  Derivative derivative{};
  /// Which operands' values the VJP reads: bit k for input k (inputs past
  /// the eighth always count as read) and for output k. A recorded node
  /// keeps those; of the others it keeps a placeholder with their shape,
  /// dtype and device but no storage, so their memory goes as soon as
  /// nothing else holds it (add keeps neither operand, mul not its product,
  /// exp not its input — as PyTorch saves only what a formula names). A rule
  /// must not read the values of an operand whose bit is clear; the tests
  /// of docs/autograd.md, "What a node keeps", hold every marked op to it.
  /// The JVP runs while the op runs and sees every operand.
  uint8_t vjp_reads_inputs = 0xff;
  uint8_t vjp_reads_outputs = 0xff;
  /// Where checks draw its inputs (conformance, gradient checks).
  TestDomain domain{};
  /// Contract version: kernels declare the version they implement, and the
  /// loader refuses entries for another one (docs/ops.md, "Versions").
  uint32_t version = 1;
  /// Set for ops a plugin defined through the host services (its schema
  /// and callbacks, see plugins/plugin_ops.cpp); null for the core's own ops.
  const void* plugin_op = nullptr;
  int id = -1;  // assigned at registration
  /// The name kernels are registered under: "strata::<name>" for the core's
  /// ops, the name itself for plugin ops ("acme::swiglu"). Set at registration.
  std::string_view kernel_name{};
  std::string kernel_name_storage{};  // what kernel_name views (a registered OpDef never moves)
};

/// The most ops the registry holds (core ops plus plugin-defined ones); fixed
/// so that readers on the dispatch path never see a vector reallocate.
inline constexpr size_t kMaxOps = 1024;

/// Registers an op at static-initialisation time; returns the stored def.
const OpDef& define_op(OpDef def);
/// Every registered op, by id.
const std::vector<const OpDef*>& all_ops();
/// nullptr when unknown.
const OpDef* find_op(std::string_view name);
/// The op a kernel entry names ("strata::add" -> add, "acme::swiglu" ->
/// that plugin op); nullptr when unknown or not namespaced.
const OpDef* find_kernel_op(std::string_view qualified);
/// find_kernel_op as the device records take it (device_record.hpp,
/// KernelOpLookup): id, version and name, or id -1 with a hint for a name
/// that misses its namespace.
struct KernelOpRef;
KernelOpRef kernel_op_ref(const char* qualified);

/// The op `qualified` names, for a call by name (the public call_op and the
/// call_op host service): a primitive or composite op. Throws ValueError
/// (without the name: callers prefix it) for an unknown name and for the
/// core's views and joins.
const OpDef& callable_op(std::string_view qualified);

/// Runs an op and returns its outputs.
std::vector<Tensor> dispatch(const OpDef& op, std::initializer_list<Tensor> inputs, const Attrs* attrs = nullptr);
/// Single-output shortcut.
Tensor dispatch1(const OpDef& op, std::initializer_list<Tensor> inputs, const Attrs* attrs = nullptr);
/// Runs a call whose inputs and device are set (prepare is applied here).
OpResult dispatch_call(OpCall& call);
/// Runs calls of one groupable op (OpDef::groupable) whose inputs, device,
/// attributes and preset outputs are set, with the results dispatch_call
/// would give each in turn: every call is validated (its shape rule) before
/// any runs, then calls whose kernel takes groups (STRATA_KERNEL_GROUPED)
/// run as one kernel call per device, the others one by one. Calls whose
/// operands overlap another call's memory, calls with empty or non-preset
/// outputs, and calls inside a trace or on recorded inputs run one by one.
void dispatch_group(std::span<OpCall> calls);
/// Runs `op` on `inputs` (any count up to kMaxInputs), as traced graphs replay it.
OpResult dispatch_span(const OpDef& op, std::span<const Tensor> inputs, const Attrs* attrs);
/// The random draws of ops/random.cpp, each with a fresh generator offset:
/// uniform in [0, 1) or standard normal (float dtypes), and Bernoulli(p).
enum class RandomDraw { uniform, normal };
Tensor random_tensor(RandomDraw kind, std::span<const int64_t> shape, DType dtype, Device device);
Tensor bernoulli_tensor(std::span<const int64_t> shape, double p, DType dtype, Device device);

/// Runs an op without inputs (fill, the random draws) on `device`, making one
/// output of `dtype` and `shape`.
Tensor dispatch_creation(const OpDef& op, Device device, DType dtype, std::span<const int64_t> shape,
                         const Attrs& attrs);

// --- shape and dtype helpers shared by op definitions ----------------------

/// Broadcast shape of two shapes; throws ShapeError naming the op.
Shape broadcast_shapes(std::span<const int64_t> a, std::span<const int64_t> b, const OpCall& call);
/// Throws DeviceError unless every defined input lives on one device.
void check_same_device(const OpCall& call);
/// Throws ValueError unless `call`'s attributes are the ones its op declares
/// (OpDef::attrs), each of its declared kind, the required ones present.
void check_declared_attrs(const OpCall& call);
/// "dim INT, keepdim BOOL (optional)", or "none": an op's attribute schema
/// as errors name it.
std::string declared_list(std::span<const AttrDecl> decls);

/// An attribute a kernel looked for that its op does not declare
/// (strata_kernel_call::attr_missing), with how often (Runtime::attr_misreads).
struct AttrMisread {
  std::string device, op, attribute, declared;
  uint64_t count = 0;
};
std::vector<AttrMisread> attr_misreads();
/// Casts input k to dtype (no-op when equal).
void cast_input(OpCall& call, int k, DType dtype);
/// Expands input k to shape (no-op when equal).
void expand_input(OpCall& call, int k, std::span<const int64_t> shape);

/// While open on a thread, shape rules compute metadata only: cast_input and
/// expand_input give storage-less tensors instead of running ops. Graph::load
/// checks a file's shapes by running each op's prepare this way on
/// meta_tensor()s; a rule must touch its inputs only through those two.
class ShapeOnlyScope {
 public:
  ShapeOnlyScope();
  ~ShapeOnlyScope();
  ShapeOnlyScope(const ShapeOnlyScope&) = delete;
  ShapeOnlyScope& operator=(const ShapeOnlyScope&) = delete;

 private:
  bool outer_;
};

}  // namespace strata::detail
