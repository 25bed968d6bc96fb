// serialize.hpp — tensor and checkpoint files.
//
// Files use the safetensors layout, so other tools read them: an 8-byte
// little-endian header length N, N bytes of JSON header
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...,
//    "__metadata__": {"key": "value", ...}}
// (padded with spaces to a multiple of 8), then the raw little-endian data
// buffer. dtypes: F32 F64 F16 BF16 I32 I64 BOOL.
//
// Strata adds to __metadata__: "format": "strata-checkpoint",
// "format_version": "2" and "crc32": 8 lower case hex digits, the CRC-32 of
// the whole file (length, header and data) with those 8 digits read as
// "00000000"; checked on load ("corrupted" on mismatch). Version 1 files
// (crc32 of the data buffer only, the header unchecked) still load, with
// that weaker check. A file without "format" (written by another safetensors
// tool) loads as plain safetensors, without a checksum check.
//
// Files are written atomically: to a temporary file in the target's
// directory, flushed to disk (fsync), then renamed over the target (and the
// directory synced). On any failure the temporary file is removed and a
// previous file at the target is left as it was.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <strata/amp.hpp>
#include <strata/device.hpp>
#include <strata/error.hpp>
#include <strata/nn/module.hpp>
#include <strata/nn/optim.hpp>
#include <strata/tensor.hpp>
#include <string>
#include <utility>
#include <vector>

namespace strata {

/// A file could not be written or read: I/O failure, truncated, foreign or
/// corrupted file, malformed header, or contents that do not fit the model.
/// what() starts with the file's path.
class SerializationError : public Error {
 public:
  SerializationError(std::filesystem::path path, const std::string& message);
  /// The file concerned.
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// The metadata strata writes itself; user metadata may not use these keys.
namespace file_format {
inline constexpr const char* kFormatKey = "format";
inline constexpr const char* kVersionKey = "format_version";
inline constexpr const char* kChecksumKey = "crc32";
inline constexpr const char* kFormatName = "strata-checkpoint";
/// The version save_tensors() writes: the checksum covers header and data.
inline constexpr const char* kVersion = "2";
/// The previous version, still read: the checksum covers the data only.
inline constexpr const char* kVersion1 = "1";
}  // namespace file_format

/// Writes `tensors` (any device, any layout; names unique and non-empty, not
/// "__metadata__") and `metadata` to `path` atomically. ValueError for bad
/// names, undefined tensors or reserved metadata keys (before touching the
/// disk); SerializationError for I/O failures (nonexistent or read-only
/// directory, target is a directory, disk full).
void save_tensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata = {});

/// What load_tensors() read: tensors in file order, and the __metadata__
/// (strata's own keys included).
struct LoadedTensors {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;
  /// The tensor named `name`, or an undefined tensor.
  Tensor find(const std::string& name) const;
};

/// Reads a file written by save_tensors() or any safetensors writer onto
/// `device` (default: the runtime's default device). Everything is checked
/// before a tensor is created. SerializationError naming the path for:
/// missing/unreadable file, truncated file, header length beyond the file,
/// not a safetensors file, malformed JSON or entries, unknown dtype, shape
/// and offsets that disagree, offsets out of range or overlapping, duplicate
/// names, trailing bytes, unsupported format_version, checksum mismatch.
LoadedTensors load_tensors(const std::filesystem::path& path, std::optional<Device> device = std::nullopt);

/// Writes a model's training state (a "checkpoint" in PyTorch's sense; in
/// Strata checkpoint() is activation recomputation): the module's state_dict() under "model.",
/// the optimizer's (if any) under "optimizer.", and `extra` tensors (e.g.
/// GradScaler::state_dict()) under "extra.", plus `metadata`. Atomic, as
/// save_tensors().
void save_training_state(const std::filesystem::path& path, const nn::Module& model,
                         const nn::Optimizer* optimizer = nullptr,
                         const std::vector<std::pair<std::string, Tensor>>& extra = {},
                         const std::map<std::string, std::string>& metadata = {});

/// What load_training_state() returns besides filling the model and optimizer.
struct TrainingStateExtras {
  /// The "extra." tensors, with the prefix removed.
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;
};

/// Reads a checkpoint from save_training_state() and loads it into `model`,
/// (if given) `optimizer` and (if given) `scaler` — only after the whole
/// file has been read and checked against all of them
/// (Module/Optimizer/GradScaler::check_state_dict: every entry each needs,
/// of the dtype and shape it needs, and no unknown entry), so a failure
/// changes none. The scaler's state is read from the "extra." entries its
/// state_dict() names ("extra.scale", "extra.growth_tracker",
/// "extra.skipped_steps": save it by passing scaler.state_dict() as
/// `extra`); they are then not among the returned tensors. SerializationError
/// naming the path and, for a mismatch, the entry with what was expected and
/// what was found, or the missing/unexpected names; also when the file has
/// no optimizer state but `optimizer` is given. The file is read onto cpu:0:
/// the model and optimizer copy their tensors to their parameters' devices,
/// and the returned "extra." tensors are on cpu:0 (move them with to()).
TrainingStateExtras load_training_state(const std::filesystem::path& path, nn::Module& model,
                                        nn::Optimizer* optimizer = nullptr, GradScaler* scaler = nullptr);

// Deprecated names (one release): "checkpoint" also names activation
// recomputation (strata/checkpoint.hpp).
using CheckpointExtras [[deprecated("renamed TrainingStateExtras")]] = TrainingStateExtras;
[[deprecated("renamed save_training_state")]] inline void save_checkpoint(
    const std::filesystem::path& path, const nn::Module& model, const nn::Optimizer* optimizer = nullptr,
    const std::vector<std::pair<std::string, Tensor>>& extra = {},
    const std::map<std::string, std::string>& metadata = {}) {
  save_training_state(path, model, optimizer, extra, metadata);
}
[[deprecated("renamed load_training_state")]] inline TrainingStateExtras load_checkpoint(
    const std::filesystem::path& path, nn::Module& model, nn::Optimizer* optimizer = nullptr) {
  return load_training_state(path, model, optimizer);
}

}  // namespace strata
