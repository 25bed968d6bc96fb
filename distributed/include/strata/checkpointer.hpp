// checkpointer.hpp — training state for restarts: the helper a training
// loop calls so that `strata launch --max-restarts N` (or a scheduler that
// requeues the job) resumes where the job was, not at the start
// (docs/distributed.md, "Restarts").
//
// ShardedCheckpointer does the same for a ZeRO job (nn::ShardedOptimizer):
// every rank writes its shard, and a restart on another world size reshards.
//
//   distributed::Checkpointer states("run/states");
//   int64_t done = states.restore(model, &opt, &scaler);   // -1: a fresh start
//   for (int64_t epoch = done + 1; epoch <= epochs; ++epoch) {
//     ... train one epoch ...
//     states.save(epoch, model, &opt, scaler.state_dict());
//   }
#pragma once

#include <strata/amp.hpp>
#include <strata/nn/module.hpp>
#include <strata/nn/optim.hpp>
#include <strata/tensor.hpp>
#include <strata/zero.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace strata::distributed {

/// Numbered training-state files in one directory: `state-<step>.st`,
/// written by save_training_state (the model, the optimizer, extra tensors
/// such as a GradScaler's, and the step in the metadata). A file is written
/// to a temporary name and renamed into place, so a process killed while
/// writing leaves the previous state complete and loadable; the newest
/// `keep` are kept. In a process group (init_process_group) rank 0 writes
/// and every rank reads; the directory must be one they all see (a shared
/// or local file system).
class Checkpointer {
 public:
  /// Creates the directory when missing (ValueError for keep < 1; a
  /// SerializationError naming it when it cannot be made).
  explicit Checkpointer(std::filesystem::path dir, int keep = 2);

  /// The newest state file, nullopt when there is none. Temporary files of
  /// an unfinished write and other names are ignored.
  std::optional<std::filesystem::path> latest() const;

  /// Rank 0 (or the only process) writes the state of `step` (>= 0), then
  /// removes the oldest files beyond `keep`; in a group, every rank then
  /// waits for the others (a barrier), so that the file a later restart
  /// reads is one that every rank had reached.
  void save(int64_t step, const nn::Module& model, const nn::Optimizer* optimizer = nullptr,
            const std::vector<std::pair<std::string, Tensor>>& extra = {});

  /// Loads the newest state into `model`, `optimizer` and `scaler` (those
  /// given) on every rank and returns its step; -1 when there is none (a
  /// fresh start: nothing is changed). A file that does not load (another
  /// model's, or corrupted) is a SerializationError naming it; it is not
  /// skipped for an older one, which would silently train twice.
  int64_t restore(nn::Module& model, nn::Optimizer* optimizer = nullptr, GradScaler* scaler = nullptr);

  const std::filesystem::path& directory() const { return dir_; }

 private:
  std::filesystem::path dir_;
  int keep_;
};

/// Training state of a job whose optimizer is sharded (nn::ShardedOptimizer,
/// ZeRO): one directory per step, `step-<n>/`, holding rank 0's model
/// (`model.st`), every rank's optimizer shard (`optimizer-<r>-of-<w>.st`,
/// its parameters under their global indices) and, written last by rank 0
/// once every shard is on disk, `manifest.json` (the world size, each
/// file's bytes, the save's random id, which every shard repeats). A step
/// without a manifest is incomplete (a rank was killed while saving) and is
/// passed over, so the previous step stays the one restored. Restoring on
/// another world size reshards: every rank reads every optimizer shard and
/// keeps the state of the parameters it owns now.
class ShardedCheckpointer {
 public:
  explicit ShardedCheckpointer(std::filesystem::path dir, int keep = 2);
  /// The newest complete step's directory, nullopt when there is none.
  std::optional<std::filesystem::path> latest() const;
  /// Every rank calls it (collectives: the save's id, two barriers).
  void save(int64_t step, const nn::Module& model, nn::ShardedOptimizer& optimizer);
  /// Loads the newest complete step into `model` and this rank's shard of
  /// `optimizer` (any world size) and returns its step; -1 when there is
  /// none. SerializationError naming the file for a listed file that is
  /// missing, of another size than the manifest says (truncated), or from
  /// another save (its id is not the manifest's), and for a manifest of
  /// another number of parameters or another format.
  int64_t restore(nn::Module& model, nn::ShardedOptimizer& optimizer);

 private:
  std::filesystem::path dir_;
  int keep_;
};

}  // namespace strata::distributed
