// checkpoint.hpp — activation checkpointing: trade compute for memory by
// not keeping a function's intermediate tensors for backward and running the
// function again when its gradient is needed.
#pragma once

#include <strata/tensor.hpp>

#include <functional>
#include <vector>

namespace strata {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Runs `fn(inputs)` keeping only `inputs` (not its intermediates) for
/// backward; the backward pass runs `fn` again with the random-number state
/// and autocast state of the first run, so dropout and mixed precision
/// inside give the gradients an unchecheckpointed run would (bitwise on CPU).
///
/// Tensors `fn` reads without receiving them as inputs (captured weights)
/// are found during the first run and get their gradients too, so
/// `tape.gradient(loss, {weights})` works. Composes with tapes and
/// `backward()`, higher-order gradients (the recomputation is recorded when
/// the gradient is), nested checkpoints, and forward mode (where `fn` simply
/// runs, since tangents need no saved activations). If `fn` throws, nothing
/// is recorded and no state is left behind. `fn` must be deterministic given
/// its inputs, the generator state and the autocast state.
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);
/// Single-tensor form.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

}  // namespace strata
