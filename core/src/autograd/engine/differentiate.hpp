// differentiate.hpp — reverse and forward products of a function of several
// tensors, for code that differentiates inside a derivative rule (custom
// functions' derived rules, implicit differentiation). Both run in the
// caller's recording state: when grad mode is on, their results are
// recorded on the enclosing levels (so they can be differentiated again);
// forward-mode levels that are active stay active.
#pragma once

#include <strata/tensor.hpp>

#include <functional>
#include <span>
#include <vector>

namespace strata::detail {

using TensorsFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Σ_j Re sum(conj(a_j) · b_j) over the pairs where both are defined and
/// floating or complex (the real inner product, complex values as real
/// pairs); undefined when there is none.
Tensor inner_product(const std::vector<Tensor>& a, const std::vector<Tensor>& b);

/// The gradient of Σ_j <f(primals)_j, cotangents_j> with respect to each
/// primals[k] with wrt[k] set (zeros where f does not depend on it);
/// undefined entries elsewhere and for non-floating primals.
std::vector<Tensor> pullback(const TensorsFunction& f, const std::vector<Tensor>& primals,
                             const std::vector<bool>& wrt, const std::vector<Tensor>& cotangents);

/// The tangents of f's outputs at `primals` along `tangents` (undefined =
/// zero), computed under a fresh forward level. Zeros for outputs that do
/// not depend on a tangent. With `outputs`, f's outputs are stored there.
std::vector<Tensor> pushforward(const TensorsFunction& f, const std::vector<Tensor>& primals,
                                const std::vector<Tensor>& tangents, std::vector<Tensor>* outputs = nullptr);

/// The basis of the tensors shaped like `shape`: [numel] + shape, entry i
/// the i-th unit tensor (the tangents or cotangents a batched jacobian maps over).
Tensor unit_basis(std::span<const int64_t> shape, DType dtype, Device device);

}  // namespace strata::detail
