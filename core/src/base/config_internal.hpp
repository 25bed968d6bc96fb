// config_internal.hpp — what the parts of the configuration loader share:
//   config_json.cpp      reads JSON text into an ordered document
//   config_validate.cpp  checks a document and builds a Config from it
//   config_text.cpp      wording of error messages and "did you mean"
//   config_size.cpp      byte sizes like "512MiB"
//   config_paths.cpp     path variables, path resolution, library_directory()
//   config.cpp           the public Config API (loading and queries)
#pragma once

#include <strata/config.hpp>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::detail::config {

using Json = nlohmann::ordered_json;

/// The largest byte size a configuration may give.
constexpr uint64_t kMaxMemoryLimit = uint64_t{1} << 50;  // 1 PiB

/// The largest configuration text read (files and strings alike); a longer
/// one is refused before it is parsed (docs/configuration.md, "Limits").
constexpr std::size_t kMaxConfigBytes = std::size_t{1} << 20;  // 1 MiB

// ---------------------------------------------------------------------------
// JSON reading (config_json.cpp)
// ---------------------------------------------------------------------------

/// Parses `text` keeping the key order of the file. Throws ConfigError for
/// text over kMaxConfigBytes, a NUL byte (naming its offset), syntax errors
/// (naming line and column), duplicate keys and too deep nesting; `source`
/// names the text in those errors. Linear in the size of the text.
Json parse_document(const std::string& text, const std::string& source);

// ---------------------------------------------------------------------------
// Op names (the registry lives in a higher layer)
// ---------------------------------------------------------------------------

/// The op names "fallback.ops" and the "amp" lists may use. The op registry
/// is above this layer, so it installs the source (core/src/runtime/dispatch/op_registry.cpp, at
/// static initialisation); while none is installed, op names are not checked.
using OpNamesSource = std::vector<std::string> (*)();
void set_op_names_source(OpNamesSource source);
OpNamesSource op_names_source();

// ---------------------------------------------------------------------------
// Validation (config_validate.cpp)
// ---------------------------------------------------------------------------

/// Checks `doc` and builds the Config it describes; relative paths resolve
/// against `config_dir` (absolute). Throws ConfigError at the first problem.
Config validate_document(const Json& doc, const std::string& source, const std::string& config_dir);

// ---------------------------------------------------------------------------
// Message text (config_text.cpp)
// ---------------------------------------------------------------------------

/// `s` in JSON string syntax, so that control characters and quotes stay
/// readable.
std::string quote(std::string_view s);

/// `ptr` is an escaped JSON pointer ("" is the root).
std::string child(const std::string& ptr, std::string_view key);
std::string child(const std::string& ptr, std::size_t index);

/// The value itself, compact and short: -5, "gpu", [1,2], {"a":1}.
std::string show(const Json& v);

/// Type and value, for type mismatches: `number 3`, `string "x"`, `null`.
std::string describe(const Json& v);

std::string join(const std::vector<std::string>& items, std::string_view sep);

std::string quoted_list(std::initializer_list<std::string_view> items);

/// The candidate the user most likely meant, or "" if none is close: within
/// edit distance 2 (case-insensitively) with the same first letter, or one
/// edit away for words of 4 or more letters, or a truncation or extension of
/// at least 4 letters ("preferred" -> "prefer"). "gpu" suggests nothing.
std::string closest(std::string_view word, std::initializer_list<std::string_view> candidates);
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

// ---------------------------------------------------------------------------
// Sizes (config_size.cpp)
// ---------------------------------------------------------------------------

/// Whole-number value of a JSON number (integers, and floats like 8e9 with
/// no fractional part, as JSON Schema's "integer" does); nullopt otherwise.
/// Magnitudes beyond 2^53 lose precision, which only matters far past every
/// limit the configuration checks.
std::optional<double> whole_number(const Json& v);

struct SizeParse {
  enum Status { ok, malformed, negative, too_big } status = malformed;
  uint64_t bytes = 0;   // valid for ok (may be 0)
  std::string hint;     // for malformed
};

/// "<digits>[.<digits>][ ]<unit>"; fractions are rounded down to whole bytes.
SizeParse parse_size_string(std::string_view s);

// ---------------------------------------------------------------------------
// Paths (config_paths.cpp)
// ---------------------------------------------------------------------------

/// Expands variables; on failure returns nullopt and sets `error`.
std::optional<std::string> expand(const std::string& path, const std::string& config_dir, std::string& error);

/// Joins a relative path onto `base` and drops "." components (".." is kept:
/// collapsing it lexically would be wrong across symbolic links).
std::string resolve(const std::string& path, const std::string& base);

/// `dir` made absolute ("" is the working directory), without "." components
/// or a trailing slash.
std::string absolute_dir(const std::string& dir);

/// Why a log file sink at `path` could not be opened for appending, or ""
/// when it can. Nothing is created: an existing file is opened for
/// appending (without blocking, so a FIFO cannot hang it) and closed again;
/// for a new file, the nearest existing folder above it must be a folder we
/// may write in (spdlog creates the missing folders).
std::string log_file_problem(const std::string& path);

}  // namespace strata::detail::config
