// checkpointer.cpp — numbered training-state files for restarts, whole
// (Checkpointer) or sharded (ShardedCheckpointer): checkpointer.hpp.
#include <strata/checkpointer.hpp>

#include <strata/distributed.hpp>
#include <strata/error.hpp>
#include <strata/serialize.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <string_view>
#include <system_error>

namespace strata::distributed {

namespace {

/// The number of `name` = prefix + 1 to 18 decimal digits + suffix (the
/// names both checkpointers give their files and entries), -1 for any other.
int64_t number_in(std::string_view name, std::string_view prefix, std::string_view suffix) {
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix)) return -1;
  const std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(std::string(digits));
}

/// The step of "state-<digits>.st", -1 for any other name.
int64_t step_of(const std::filesystem::path& file) { return number_in(file.filename().string(), "state-", ".st"); }

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

namespace detail {

/// Both checkpointers' constructor: `keep` checked, `dir` created.
void prepare_directory(const std::filesystem::path& dir, int keep, const char* who) {
  if (keep < 1) throw ValueError(std::string(who) + ": keep must be at least 1 (got " + std::to_string(keep) + ")");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw SerializationError(dir, std::string(who) + ": cannot create the directory: " + ec.message());
}

}  // namespace detail

Checkpointer::Checkpointer(std::filesystem::path dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  detail::prepare_directory(dir_, keep_, "Checkpointer");
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

// --- ShardedCheckpointer ----------------------------------------------------------

namespace strata::distributed {

namespace {

constexpr const char* kShardedFormat = "strata.sharded_state";
constexpr int kShardedVersion = 1;

std::string step_dir_name(int64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "step-%012lld", static_cast<long long>(step));
  return name;
}

/// The step of "step-<digits>", -1 for any other name.
int64_t step_of_dir(const std::filesystem::path& dir) { return number_in(dir.filename().string(), "step-", ""); }

/// Every step directory of `dir` by step, and whether it has a manifest.
std::map<int64_t, std::pair<std::filesystem::path, bool>> steps_in(const std::filesystem::path& dir) {
  std::map<int64_t, std::pair<std::filesystem::path, bool>> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const int64_t step = step_of_dir(entry.path());
    if (step >= 0 && entry.is_directory(ec))
      out[step] = {entry.path(), std::filesystem::exists(entry.path() / "manifest.json", ec)};
  }
  if (ec) throw SerializationError(dir, "ShardedCheckpointer: cannot list the directory: " + ec.message());
  return out;
}

std::string shard_name(int rank, int world) {
  return "optimizer-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".st";
}

/// "param.<i>.<rest>" -> (i, rest); (-1, "") for other names.
std::pair<int64_t, std::string> param_entry(const std::string& name) {
  const size_t dot = name.starts_with("param.") ? name.find('.', 6) : std::string::npos;
  const int64_t index = dot == std::string::npos ? -1 : number_in(std::string_view(name).substr(0, dot), "param.", "");
  return index < 0 ? std::pair<int64_t, std::string>{-1, ""} : std::pair{index, name.substr(dot + 1)};
}

}  // namespace

ShardedCheckpointer::ShardedCheckpointer(std::filesystem::path dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  detail::prepare_directory(dir_, keep_, "ShardedCheckpointer");
}

std::optional<std::filesystem::path> ShardedCheckpointer::latest() const {
  auto steps = steps_in(dir_);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (it->second.second) return it->second.first;
  }
  return std::nullopt;
}

void ShardedCheckpointer::save(int64_t step, const nn::Module& model, nn::ShardedOptimizer& optimizer) {
  if (step < 0) throw ValueError("ShardedCheckpointer::save: step " + std::to_string(step) + " is negative");
  ProcessGroup& pg = optimizer.process_group();
  const int r = pg.rank(), w = pg.size();
  // The save's id: rank 0's random draw, which every file repeats.
  Tensor id = full({1}, 0.0, {.dtype = DType::i64, .device = Device("cpu:0")});
  if (r == 0) {
    std::random_device rd;
    const uint64_t draw = (static_cast<uint64_t>(rd()) << 32 | rd()) >> 1;
    id = full({1}, static_cast<double>(draw >> 11), {.dtype = DType::i64, .device = Device("cpu:0")});
  }
  if (w > 1) pg.broadcast(id, 0).wait();
  const std::string save_id = std::to_string(id.item<int64_t>());
  const std::filesystem::path here = dir_ / step_dir_name(step);
  std::error_code ec;
  std::filesystem::create_directories(here, ec);
  if (ec) throw SerializationError(here, "ShardedCheckpointer: cannot create the step's directory: " + ec.message());
  const std::map<std::string, std::string> meta{{"save_id", save_id},
                                                {"step", std::to_string(step)},
                                                {"world_size", std::to_string(w)},
                                                {"parameters", std::to_string(optimizer.params().size())}};
  // This rank's shard, its parameters under their global indices.
  std::vector<std::pair<std::string, Tensor>> shard;
  if (nn::Optimizer* local = optimizer.local_optimizer()) {
    const std::vector<size_t>& owned = optimizer.shard();
    for (auto& [name, t] : local->state_dict()) {
      auto [k, rest] = param_entry(name);
      shard.emplace_back(k < 0 ? name : "param." + std::to_string(owned.at(static_cast<size_t>(k))) + "." + rest, t);
    }
  }
  save_tensors(here / shard_name(r, w), shard, meta);
  if (r == 0) save_tensors(here / "model.st", model.state_dict(), meta);
  if (w > 1) pg.barrier().wait();  // every shard is on disk
  if (r == 0) {
    nlohmann::json manifest{{"format", kShardedFormat}, {"version", kShardedVersion},  {"step", step},
                            {"world_size", w},          {"save_id", save_id},        {"parameters", optimizer.params().size()},
                            {"files", nlohmann::json::array()}};
    std::vector<std::string> files{"model.st"};
    for (int k = 0; k < w; ++k) files.push_back(shard_name(k, w));
    for (const std::string& f : files) {
      manifest["files"].push_back({{"name", f}, {"bytes", std::filesystem::file_size(here / f)}});
    }
    // Written whole to a temporary name and renamed: the step's commit.
    const std::filesystem::path tmp = here / ".manifest.json.tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << manifest.dump(2) << "\n";
      out.flush();
      if (!out) throw SerializationError(tmp, "ShardedCheckpointer: cannot write the manifest");
    }
    std::filesystem::rename(tmp, here / "manifest.json", ec);
    if (ec) throw SerializationError(here / "manifest.json", "ShardedCheckpointer: cannot commit: " + ec.message());
    // The oldest complete steps beyond `keep`, and incomplete ones older than this.
    auto steps = steps_in(dir_);
    int complete = 0;
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      const bool drop = it->second.second ? ++complete > keep_ : it->first < step;
      if (drop) std::filesystem::remove_all(it->second.first, ec);
    }
  }
  if (w > 1) pg.barrier().wait();  // committed before any rank goes on
}

int64_t ShardedCheckpointer::restore(nn::Module& model, nn::ShardedOptimizer& optimizer) {
  const std::optional<std::filesystem::path> here = latest();
  if (!here) return -1;
  const std::filesystem::path manifest_path = *here / "manifest.json";
  nlohmann::json manifest;
  {
    std::ifstream in(manifest_path);
    manifest = nlohmann::json::parse(in, nullptr, false);
  }
  auto bad = [&](const std::filesystem::path& file, const std::string& why) {
    return SerializationError(file, "ShardedCheckpointer: " + why);
  };
  if (!manifest.is_object() || manifest.value("format", "") != kShardedFormat ||
      manifest.value("version", 0) != kShardedVersion || !manifest.contains("files") ||
      !manifest["files"].is_array() || !manifest.contains("save_id") || !manifest.contains("step"))
    throw bad(manifest_path, "not a manifest of format " + std::string(kShardedFormat) + " version " +
                                 std::to_string(kShardedVersion));
  const std::string save_id = manifest["save_id"].get<std::string>();
  const auto parameters = manifest.value("parameters", int64_t{-1});
  if (parameters != static_cast<int64_t>(optimizer.params().size()))
    throw bad(manifest_path, "saved with " + std::to_string(parameters) + " parameters; the optimizer has " +
                                 std::to_string(optimizer.params().size()));
  std::vector<std::string> shards;
  for (const auto& f : manifest["files"]) {
    const std::string name = f.value("name", "");
    const std::filesystem::path file = *here / name;
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) throw bad(file, "listed in " + manifest_path.string() + " but missing");
    const auto bytes = std::filesystem::file_size(file, ec);
    if (bytes != f.value("bytes", uint64_t{0}))
      throw bad(file, std::to_string(bytes) + " bytes, the manifest says " + f["bytes"].dump() + " (truncated?)");
    if (name != "model.st") shards.push_back(name);
  }
  auto checked = [&](const std::filesystem::path& file) {
    LoadedTensors t = load_tensors(file, Device("cpu:0"));
    auto it = t.metadata.find("save_id");
    if (it == t.metadata.end() || it->second != save_id)
      throw bad(file, "from another save (save id " + (it == t.metadata.end() ? std::string("none") : it->second) +
                          ", the manifest's " + save_id + ")");
    return t;
  };
  LoadedTensors model_state = checked(*here / "model.st");
  // This rank's optimizer state: its parameters' entries from whichever
  // shard holds them, under their indices in its own shard.
  std::vector<std::pair<std::string, Tensor>> state;
  std::map<size_t, size_t> local_of;
  for (size_t k = 0; k < optimizer.shard().size(); ++k) local_of[optimizer.shard()[k]] = k;
  bool common_taken = false;
  for (const std::string& name : shards) {
    LoadedTensors t = checked(*here / name);
    bool has_common = false;
    for (auto& [entry, tensor] : t.tensors) {
      auto [i, rest] = param_entry(entry);
      if (i < 0) {
        has_common = true;
        if (!common_taken) state.emplace_back(entry, tensor);
      } else if (auto it = local_of.find(static_cast<size_t>(i)); it != local_of.end()) {
        state.emplace_back("param." + std::to_string(it->second) + "." + rest, tensor);
      }
    }
    common_taken = common_taken || has_common;
  }
  model.load_state_dict(model_state.tensors);
  if (nn::Optimizer* local = optimizer.local_optimizer()) local->load_state_dict(state);
  return manifest["step"].get<int64_t>();
}

}  // namespace strata::distributed
