// ddp.hpp — data-parallel training: DistributedDataParallel keeps one
// replica of a model per process and averages the parameters' gradients
// over the process group during backward, so every rank takes the same
// optimizer step on the gradient of the global batch.
//
// Gradients are reduced in buckets of about `bucket_bytes`, filled in the
// reverse of the parameters' registration order (the order backward
// produces them). A parameter's gradient-ready hook
// (Tensor::register_grad_ready_hook) fires as soon as its gradient in the
// pass is complete; the hook that completes a bucket starts that bucket's
// all-reduce, which then runs while backward computes the earlier layers'
// gradients. When the pass ends, the parameters' tensor hooks wait for the
// buckets and hand the averaged gradients to the engine, which writes them
// into grad(). So backward() returns with the averaged gradients in place
// and there is nothing to call before the optimizer step.
//
// Unlike PyTorch's DDP this also works with
//   - a tape's gradient with explicit sources: ddp.gradient(tape, loss,
//     sources) reduces the gradients of exactly the parameters among the
//     sources (overlapped the same way) and returns them;
//   - activation checkpointing: the recomputation's private tape is not
//     reduced, only the outer pass's totals are;
//   - higher-order training: gradients computed by inner tapes (a gradient
//     penalty's d loss / d input or d loss / d parameters) stay local; only
//     the outermost pass — backward(), or the tape given to
//     ddp.gradient() — is reduced;
//   - gradients of the averaged gradients: when the reduced pass records
//     its own graph (backward with create_graph, or a higher-order tape
//     given to ddp.gradient()), each gradient is averaged by a
//     differentiable all-reduce whose VJP is again an all-reduce, so a
//     penalty on the averaged gradient or a Hessian-vector product of the
//     global loss differentiates through it, to any order (one blocking
//     all-reduce per parameter: no buckets, no overlap, in that pass).
//     Forward mode through it is refused (the rule has no JVP).
#pragma once

#include <strata/autograd.hpp>
#include <strata/distributed.hpp>
#include <strata/nn/module.hpp>
#include <strata/tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <vector>

namespace strata::nn {

/// What a gradient bucket goes through on its way through the all-reduce:
/// PyTorch's DDP communication hooks. `encode` gets the bucket's flat
/// gradient (this rank's sum) and the world size, and returns the tensor to
/// all-reduce (sum) in its place — a contiguous tensor the group can reduce;
/// `decode` gets the reduced tensor and the original flat gradient, and
/// returns the averaged gradient in the flat gradient's dtype and device.
/// Both run on the thread that runs backward. Not used by a pass that
/// records its graph (its average must be differentiable).
struct CommHook {
  std::string name;  // in messages
  std::function<Tensor(const Tensor& flat, int world)> encode;
  std::function<Tensor(const Tensor& reduced, const Tensor& flat, int world)> decode;
};

/// The gradient-compression hooks: each rank's bucket divided by the world
/// size, rounded to bf16 (f16), all-reduced in that dtype (half the bytes
/// of f32, a quarter of f64), and widened back. bf16 keeps f32's range
/// with 8 bits of mantissa; f16 has 11 bits but overflows above 65504.
CommHook bf16_compress_hook();
CommHook f16_compress_hook();

struct DDPOptions {
  /// Target size of one gradient bucket (one all-reduce). A parameter
  /// larger than this gets a bucket of its own.
  size_t bucket_bytes = 25u << 20;
  /// Parameters that get no gradient in a backward pass count as zero
  /// gradients (and still take part in the reduction, so ranks that did
  /// use them are averaged correctly). When false, such a pass is an Error
  /// naming the parameters.
  bool find_unused_parameters = false;
  /// Broadcast the module's buffers from rank 0 before every forward.
  bool broadcast_buffers = true;
  /// Set: every bucket goes through it (e.g. bf16_compress_hook()).
  std::optional<CommHook> comm_hook = std::nullopt;
};

/// Counters of one DistributedDataParallel, for tests and tuning.
struct DDPStats {
  /// Reduced backward passes (backward() and gradient() calls).
  uint64_t reduced_passes = 0;
  /// Bucket all-reduces started by a gradient-ready hook while the pass was
  /// still running (overlapped with the rest of backward).
  uint64_t buckets_overlapped = 0;
  /// Bucket all-reduces started only when the pass ended (a bucket with an
  /// unused parameter, or one completed by the last gradients).
  uint64_t buckets_at_end = 0;
  /// Of those, bucket all-reduces run on the parameters' own device through
  /// its plugin's strata.collectives (NCCL on CUDA); the others are reduced
  /// in host memory over Gloo, copied there and back when the device has no
  /// host memory and no collectives.
  uint64_t buckets_on_device = 0;
  /// Reduced passes whose gradients carried history (backward with
  /// create_graph, or a higher-order tape given to gradient()): each
  /// gradient averaged by a differentiable all-reduce, one per parameter,
  /// without buckets or overlap.
  uint64_t differentiable_passes = 0;
  /// Steps of other ranks this rank shadowed inside join() after its own
  /// loop had ended.
  uint64_t shadowed_steps = 0;
  /// Bytes of this rank's bucket tensors handed to the all-reduces (after
  /// a communication hook's encode).
  uint64_t bytes_reduced = 0;
  /// The last reduced pass's timeline, in microseconds from its first
  /// gradient: when each bucket's all-reduce was started (in bucket order),
  /// when backward had computed every gradient (the pass's end reached
  /// DDP), and when the averaged gradients were ready. A launch before
  /// `last_backward_end_us` overlapped the backward pass.
  std::vector<double> last_launch_us;
  double last_backward_end_us = 0;
  double last_end_us = 0;
};

namespace detail {
struct DDPState;  // internal
}

/// Wraps `module` for data-parallel training on a process group (by
/// default strata::distributed::group()).
///
///     distributed::init_process_group();
///     DigitsMlp model;
///     nn::DistributedDataParallel ddp(model);
///     nn::Adam opt(model.parameters(), {.lr = 1e-3});
///     for (...) {                      // each rank its own shard of the batch
///       opt.zero_grad();
///       nn::functional::cross_entropy(ddp(x), y).backward();   // averaged grads
///       opt.step();
///     }
///
/// The wrapper is not a Module: the wrapped module keeps its own parameter
/// names, so its state_dict() (and checkpoint files) read exactly as for a
/// single process. Every rank must construct the wrapper with the same
/// model and run the same sequence of reduced passes; all of a pass's
/// collectives are issued in bucket order, so the ranks' graphs may differ
/// in which parameters they use only when find_unused_parameters is set.
/// Not thread safe: one thread runs the forward and backward passes.
class DistributedDataParallel {
 public:
  /// Broadcasts the parameters and buffers from rank 0 (in place, so an
  /// optimizer built on them stays valid) and checks that every rank's
  /// model has the same parameters: DistributedError naming the ranks and
  /// the counts when they have different numbers of parameters, or the
  /// first parameter whose shape or dtype differs from rank 0's. Move the
  /// module to its device first (Module::to replaces the parameters).
  explicit DistributedDataParallel(Module& module, DDPOptions options = {},
                                   distributed::ProcessGroup* group = nullptr);
  /// The same for a model that is not an nn::Module (the Python module's
  /// strata.nn.Module, a hand-rolled set of weights): its parameters and
  /// buffers by name, in registration order (a tensor listed twice counts
  /// once, under its first name). There is no module to run: call
  /// before_forward() before each forward pass, then run the model
  /// yourself; operator() and module() throw. ValueError for an undefined
  /// tensor or a parameter that does not require grad, naming it.
  DistributedDataParallel(NamedTensors parameters, NamedTensors buffers, DDPOptions options = {},
                          distributed::ProcessGroup* group = nullptr);
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// Runs the module: before_forward(), then the module's forward.
  Tensor operator()(const Tensor& input);
  /// What a forward pass needs first: Error if a previous reduced pass is
  /// still open (a backward that failed half-way on this rank); inside
  /// join(), this rank's "still training" flag all-reduced; the buffers
  /// broadcast from rank 0 when broadcast_buffers.
  void before_forward();

  /// The wrapped module (its parameters, state_dict(), train()/eval()).
  /// Error for a wrapper made from parameter lists.
  Module& module();
  const Module& module() const;

  /// tape.gradient(target, sources, output_grad), with the gradients of the
  /// sources that are parameters of the module averaged over the group
  /// (reduced in buckets while the tape's pass runs); other sources' (an
  /// input's, say) are returned as computed locally. Every rank must pass
  /// the same parameters as sources. A parameter source the target does not
  /// reach contributes what the tape returns for it (zeros, or the tape's
  /// Unconnected::error). With a higher-order tape the averaged gradients
  /// carry history (a differentiable all-reduce; see the file comment);
  /// otherwise they are constants.
  /// Inside a no_sync() scope it is tape.gradient() unchanged.
  std::vector<Tensor> gradient(GradientTape& tape, const Tensor& target, const std::vector<Tensor>& sources,
                               const Tensor& output_grad = Tensor());

  /// RAII scope of gradient accumulation: backward passes inside it do not
  /// communicate and leave the local gradients in grad(); the first reduced
  /// backward after it averages the accumulated gradients (what grad()
  /// holds plus that pass's). Scopes nest.
  class NoSync {
   public:
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    friend class DistributedDataParallel;
    explicit NoSync(std::shared_ptr<detail::DDPState> state);
    std::shared_ptr<detail::DDPState> state_;
  };
  [[nodiscard]] NoSync no_sync();
  /// Whether a no_sync() scope is open.
  bool sync_enabled() const;

  /// Uneven inputs (PyTorch's Join context): runs `loop`, this rank's
  /// training steps — any number of them, each one call of the wrapper
  /// followed by one backward() — and returns once every rank's loop has
  /// ended. While some ranks still train, a rank whose loop ended shadows
  /// their steps: it takes part in each step's collectives with zero
  /// gradients, so a step's average is the active ranks' gradients summed
  /// and divided by the world size (PyTorch's default,
  /// divide_by_initial_world_size). Each step of the wrapper inside the loop
  /// first all-reduces one flag saying that this rank still trains. When
  /// every rank has joined, every rank takes the parameters and buffers of
  /// the rank that trained the most steps (the highest such rank), so the
  /// replicas end equal. Only backward() passes are shadowed (not
  /// gradient() with a tape, nor a pass that records its graph; a step
  /// inside no_sync() is an Error), and every rank must call join. An exception from `loop` propagates (the other
  /// ranks then wait until the group's timeout).
  void join(const std::function<void()>& loop);

  /// The buckets: each a list of parameter names, in the order they are
  /// reduced (bucket 0 holds the last-registered parameters).
  std::vector<std::vector<std::string>> bucket_layout() const;
  DDPStats stats() const;
  const DDPOptions& options() const { return options_; }
  distributed::ProcessGroup& process_group() const { return *group_; }

 private:
  std::vector<Tensor> buffers() const;
  void setup();

  Module* module_ = nullptr;  // null: made from parameter lists
  NamedTensors buffers_;      // the lists' buffers
  DDPOptions options_;
  distributed::ProcessGroup* group_;
  std::shared_ptr<detail::DDPState> state_;
};

}  // namespace strata::nn
