// checkpointer.cpp — numbered training-state files for restarts
// (checkpointer.hpp).
#include <strata/checkpointer.hpp>

#include <strata/distributed.hpp>
#include <strata/error.hpp>
#include <strata/serialize.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <system_error>

namespace strata::distributed {

namespace {

/// The step of "state-<digits>.st", -1 for any other name.
int64_t step_of(const std::filesystem::path& file) {
  const std::string name = file.filename().string();
  constexpr std::string_view kPrefix = "state-", kSuffix = ".st";
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) || !name.ends_with(kSuffix))
    return -1;
  const std::string digits = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

/// Every state file of `dir`, by step.
std::map<int64_t, std::filesystem::path> states_in(const std::filesystem::path& dir) {
  std::map<int64_t, std::filesystem::path> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const int64_t step = step_of(entry.path());
    if (step >= 0 && entry.is_regular_file(ec)) out[step] = entry.path();
  }
  if (ec) throw SerializationError(dir, "Checkpointer: cannot list the directory: " + ec.message());
  return out;
}

bool lead() { return !is_initialized() || rank() == 0; }

}  // namespace

Checkpointer::Checkpointer(std::filesystem::path dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  if (keep_ < 1) throw ValueError("Checkpointer: keep must be at least 1 (got " + std::to_string(keep_) + ")");
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw SerializationError(dir_, "Checkpointer: cannot create the directory: " + ec.message());
}

std::optional<std::filesystem::path> Checkpointer::latest() const {
  auto states = states_in(dir_);
  if (states.empty()) return std::nullopt;
  return states.rbegin()->second;
}

void Checkpointer::save(int64_t step, const nn::Module& model, const nn::Optimizer* optimizer,
                        const std::vector<std::pair<std::string, Tensor>>& extra) {
  if (step < 0) throw ValueError("Checkpointer::save: step " + std::to_string(step) + " is negative");
  if (lead()) {
    char name[40];
    std::snprintf(name, sizeof name, "state-%012lld.st", static_cast<long long>(step));
    save_training_state(dir_ / name, model, optimizer, extra, {{"step", std::to_string(step)}});
    // What writers killed mid-write left: ".state-<step>.st.tmp-<pid>-<hex>"
    // (save_training_state's temporary names).
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
      const std::string leftover = entry.path().filename().string();
      if (leftover.starts_with(".state-") && leftover.find(".st.tmp-") != std::string::npos) {
        std::error_code ignored;
        std::filesystem::remove(entry.path(), ignored);
      }
    }
    auto states = states_in(dir_);
    while (states.size() > static_cast<size_t>(keep_)) {
      std::filesystem::remove(states.begin()->second, ec);  // an old state: a failure only leaves it
      states.erase(states.begin());
    }
  }
  if (is_initialized()) group().barrier().wait();
}

int64_t Checkpointer::restore(nn::Module& model, nn::Optimizer* optimizer, GradScaler* scaler) {
  const std::optional<std::filesystem::path> file = latest();
  if (!file) return -1;
  TrainingStateExtras extras = load_training_state(*file, model, optimizer, scaler);
  auto it = extras.metadata.find("step");
  const int64_t step = step_of(*file);
  if (it == extras.metadata.end() || it->second != std::to_string(step)) {
    throw SerializationError(*file, "Checkpointer: no step " + std::to_string(step) +
                                        " in its metadata (not a file Checkpointer::save wrote)");
  }
  return step;
}

}  // namespace strata::distributed
