// fused.hpp — what the fusion pass (autograd/compile/fusion.cpp) asks of
// fused_elementwise's derivative (ops/fused.cpp): which of a program's
// values its backward program would read rather than recompute, when the
// forward writes them as extra outputs (docs/compile.md, "Saved values").
#pragma once

#include <cstdint>
#include <strata/plugin/fused_program.hpp>
#include <vector>

namespace strata::detail {

/// Values of `p` (statement value ids, costliest first) worth writing as
/// extra outputs of the forward so that its backward program reads them
/// instead of recomputing them: the costly statements (transcendental
/// functions, division, square root) whose values the backward program of
/// every output's cotangent needs. At most `max_saved`, and only as many
/// as leave the forward within kMaxOutputs and the backward program
/// (forward inputs, saved values and cotangents) within kMaxInputs.
std::vector<int32_t> fused_saved_values(const plugin::fused::Program& p, int max_saved);

}  // namespace strata::detail
