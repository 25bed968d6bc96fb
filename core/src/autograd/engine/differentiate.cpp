// differentiate.cpp — pullback and pushforward of functions of several
// tensors, recorded on the enclosing levels when grad mode is on.
#include "autograd/engine/differentiate.hpp"

#include "autograd/engine/nodes.hpp"
#include "autograd/engine/rule_scopes.hpp"

#include <strata/autograd.hpp>
#include <strata/ops.hpp>

namespace strata::detail {

Tensor tracked_alias(const Tensor& x);  // views.cpp

Tensor inner_product(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  Tensor total;
  for (size_t k = 0; k < a.size() && k < b.size(); ++k) {
    if (!a[k].defined() || !b[k].defined() || !is_differentiable(a[k].dtype()) || !is_differentiable(b[k].dtype())) {
      continue;
    }
    // Re Σ conj(a)·b: the real inner product of complex values seen as real
    // pairs, so that pullbacks follow PyTorch's convention (docs/complex.md);
    // conj and real are the identity on real tensors.
    Tensor term = real(sum(conj(a[k]) * b[k]));
    total = total.defined() ? total + term : term;
  }
  return total;
}

std::vector<Tensor> pullback(const TensorsFunction& f, const std::vector<Tensor>& primals,
                             const std::vector<bool>& wrt, const std::vector<Tensor>& cotangents) {
  // With grad mode on, the enclosing levels keep recording and the tape's
  // gradient is recorded on them; otherwise only the tape records.
  const bool record = autograd_state().grad_enabled;
  EnableGradGuard grad_on;
  RecordingScope recording(record);
  GradientTape tape({.persistent = false, .higher_order = record, .unconnected = Unconnected::zero});
  std::vector<Tensor> args;
  std::vector<Tensor> sources;
  std::vector<size_t> source_of;
  args.reserve(primals.size());
  for (size_t k = 0; k < primals.size(); ++k) {
    if (k < wrt.size() && wrt[k] && primals[k].defined() && is_differentiable(primals[k].dtype())) {
      Tensor a = tracked_alias(primals[k]);  // history kept for the enclosing levels
      tape.watch(a);
      sources.push_back(a);
      source_of.push_back(k);
      args.push_back(std::move(a));
    } else {
      args.push_back(primals[k]);
    }
  }
  std::vector<Tensor> grads(primals.size());
  if (sources.empty()) return grads;
  Tensor target = inner_product(f(args), cotangents);
  if (!target.defined()) {
    for (size_t j = 0; j < sources.size(); ++j) grads[source_of[j]] = zeros_like(primals[source_of[j]]);
    return grads;
  }
  std::vector<Tensor> found = tape.gradient(target, sources);
  for (size_t j = 0; j < found.size(); ++j) grads[source_of[j]] = found[j];
  return grads;
}

std::vector<Tensor> pushforward(const TensorsFunction& f, const std::vector<Tensor>& primals,
                                const std::vector<Tensor>& tangents, std::vector<Tensor>* outputs) {
  AutogradState& st = autograd_state();
  const uint64_t level = new_level_id();
  std::vector<Tensor> args;
  args.reserve(primals.size());
  for (size_t k = 0; k < primals.size(); ++k) {
    Tensor a = tracked_alias(primals[k]);
    if (k < tangents.size() && tangents[k].defined()) {
      meta_of(a).tangents.emplace_back(level, tangents[k].to(a.dtype()));
    }
    args.push_back(std::move(a));
  }
  st.forward.add(level);
  std::vector<Tensor> outs;
  try {
    outs = f(args);
  } catch (...) {
    st.forward.remove(level);
    throw;
  }
  st.forward.remove(level);
  std::vector<Tensor> result;
  result.reserve(outs.size());
  for (const Tensor& o : outs) {
    Tensor t = o.defined() ? o.tangent(level) : Tensor();
    result.push_back(t.defined() || !o.defined() ? t : zeros_like(o));
  }
  if (outputs != nullptr) *outputs = std::move(outs);
  return result;
}

}  // namespace strata::detail
