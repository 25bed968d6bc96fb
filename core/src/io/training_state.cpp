// training_state.cpp — save_training_state / load_training_state: a module, an
// optimizer and extra tensors in one safetensors file.
#include <set>
#include <strata/amp.hpp>
#include <strata/error.hpp>
#include <strata/serialize.hpp>
#include <string>

namespace strata {

namespace fs = std::filesystem;

namespace {
constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimizerPrefix = "optimizer.";
constexpr const char* kExtraPrefix = "extra.";

void add_prefixed(std::vector<std::pair<std::string, Tensor>>& out, const std::string& prefix,
                  const std::vector<std::pair<std::string, Tensor>>& tensors) {
  for (const auto& [n, t] : tensors) out.emplace_back(prefix + n, t);
}

bool strip(const std::string& name, const std::string& prefix, std::string* rest) {
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  *rest = name.substr(prefix.size());
  return true;
}
}  // namespace

void save_training_state(const fs::path& path, const nn::Module& model, const nn::Optimizer* optimizer,
                         const std::vector<std::pair<std::string, Tensor>>& extra,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> all;
  add_prefixed(all, kModelPrefix, model.state_dict());
  if (optimizer != nullptr) add_prefixed(all, kOptimizerPrefix, optimizer->state_dict());
  add_prefixed(all, kExtraPrefix, extra);
  save_tensors(path, all, metadata);
}

TrainingStateExtras load_training_state(const fs::path& path, nn::Module& model, nn::Optimizer* optimizer,
                                        GradScaler* scaler) {
  // Read onto the host, cpu:0: the model and the optimizer copy each tensor
  // to their parameters' devices, and the scalars (an f64 lr, a scale) stay
  // on the host, where any dtype can be stored.
  LoadedTensors loaded = load_tensors(path, Device("cpu:0"));
  nn::NamedTensors model_state;
  nn::NamedTensors optimizer_state;
  std::vector<std::pair<std::string, Tensor>> scaler_state;
  TrainingStateExtras extras;
  // The "extra." entries that are the scaler's: the names its state_dict() has.
  std::set<std::string> scaler_names;
  if (scaler != nullptr) {
    for (const auto& [n, t] : scaler->state_dict()) scaler_names.insert(n);
  }
  extras.metadata = std::move(loaded.metadata);
  for (auto& [n, t] : loaded.tensors) {
    std::string rest;
    if (strip(n, kModelPrefix, &rest)) {
      model_state.emplace_back(rest, t);
    } else if (strip(n, kOptimizerPrefix, &rest)) {
      optimizer_state.emplace_back(rest, t);
    } else if (strip(n, kExtraPrefix, &rest)) {
      if (scaler_names.contains(rest)) {
        scaler_state.emplace_back(rest, t);
      } else {
        extras.tensors.emplace_back(rest, t);
      }
    } else {
      throw SerializationError(
          path, "not a strata checkpoint: entry '" + n + "' has none of the prefixes 'model.', 'optimizer.', 'extra.'");
    }
  }
  // Check everything before changing anything.
  try {
    model.check_state_dict(model_state);
  } catch (const Error& e) {
    throw SerializationError(path, std::string("the checkpoint does not fit the model: ") + e.what());
  }
  if (optimizer != nullptr) {
    if (optimizer_state.empty()) throw SerializationError(path, "the checkpoint holds no optimizer state");
    try {
      optimizer->check_state_dict(optimizer_state, kOptimizerPrefix);
    } catch (const Error& e) {
      throw SerializationError(path, std::string("the checkpoint does not fit the optimizer: ") + e.what());
    }
  }
  if (scaler != nullptr) {
    try {
      scaler->check_state_dict(scaler_state, kExtraPrefix);
    } catch (const Error& e) {
      throw SerializationError(path, std::string("the checkpoint does not fit the GradScaler: ") + e.what());
    }
  }
  model.load_state_dict(model_state);
  if (optimizer != nullptr) optimizer->load_state_dict(optimizer_state);
  if (scaler != nullptr) scaler->load_state_dict(scaler_state);
  return extras;
}

}  // namespace strata
