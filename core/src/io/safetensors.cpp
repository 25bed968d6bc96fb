// safetensors.cpp — load_tensors: a safetensors file checked before a byte
// of it is trusted (header size, depth and keys, every entry's dtype, shape
// and extent, strata's checksum when it claims strata's format).
#include "safetensors_format.hpp"

#include <strata/error.hpp>
#include <strata/serialize.hpp>

#include <boost/crc.hpp>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace strata {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using namespace safetensors;

SerializationError::SerializationError(fs::path path, const std::string& message)
    : Error(path.string() + ": " + message), path_(std::move(path)) {}

Tensor LoadedTensors::find(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  return Tensor();
}

namespace {

// --- reading -----------------------------------------------------------------

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

/// How deep a header may nest. A safetensors header is two levels deep
/// (tensor entries and __metadata__ in the top object, their fields one
/// below, shapes and offsets one more); nlohmann's parser keeps a stack, but
/// destroying a value nested a hundred thousand deep recurses until the
/// stack overflows, so deeper input is refused while it is parsed.
constexpr int kMaxHeaderDepth = 64;

/// Parses the header, refusing duplicate keys (nlohmann keeps the last) and
/// nesting deeper than kMaxHeaderDepth.
Json parse_header(const fs::path& path, const std::string& text) {
  std::vector<std::set<std::string>> keys;
  std::string duplicate;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kMaxHeaderDepth) {
      throw SerializationError(path, "malformed header: nested deeper than " + std::to_string(kMaxHeaderDepth) +
                                         " levels (a safetensors header has 3)");
    }
    if (event == Json::parse_event_t::object_start) keys.emplace_back();
    if (event == Json::parse_event_t::object_end) keys.pop_back();
    if (event == Json::parse_event_t::key && !keys.empty() && duplicate.empty()) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(k).second) duplicate = k;
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text, callback);
  } catch (const nlohmann::json::exception& e) {
    throw SerializationError(path, std::string("malformed header JSON: ") + e.what());
  }
  if (!duplicate.empty()) throw SerializationError(path, "malformed header: duplicate key '" + duplicate + "'");
  if (!header.is_object()) throw SerializationError(path, "malformed header: not a JSON object");
  return header;
}

uint64_t json_count(const fs::path& path, const Json& v, const std::string& what) {
  if (!v.is_number_unsigned()) {
    throw SerializationError(path, "malformed header: " + what + " must be a non-negative integer, got " + v.dump());
  }
  return v.get<uint64_t>();
}

Entry parse_entry(const fs::path& path, const std::string& name, const Json& v) {
  const std::string where = "tensor '" + name + "'";
  if (!v.is_object()) throw SerializationError(path, "malformed header: " + where + " is not an object");
  for (const auto& [k, x] : v.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets") {
      throw SerializationError(path, "malformed header: " + where + " has an unknown key '" + k + "'");
    }
  }
  for (const char* k : {"dtype", "shape", "data_offsets"}) {
    if (!v.contains(k)) throw SerializationError(path, "malformed header: " + where + " has no '" + k + "'");
  }
  Entry e{.name = name, .dtype = DType::f32, .shape = {}, .begin = 0, .end = 0};
  if (!v["dtype"].is_string())
    throw SerializationError(path, "malformed header: dtype of " + where + " is not a string");
  const std::string code = v["dtype"].get<std::string>();
  const auto* known = std::find_if(std::begin(kCodes), std::end(kCodes), [&](const auto& c) { return code == c.code; });
  if (known == std::end(kCodes)) {
    throw SerializationError(
        path, "unknown dtype '" + code + "' of " + where + " (strata reads F32, F64, F16, BF16, I32, I64, BOOL, C64, C128)");
  }
  e.dtype = known->dtype;
  const Json& shape = v["shape"];
  if (!shape.is_array()) throw SerializationError(path, "malformed header: shape of " + where + " is not an array");
  uint64_t numel = 1;
  bool overflow = false;
  for (const Json& d : shape) {
    uint64_t n = json_count(path, d, "a dim of " + where);
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
    if (n != 0 && numel > std::numeric_limits<uint64_t>::max() / n) overflow = true;
    numel *= n;
    e.shape.push_back(static_cast<int64_t>(n));
  }
  const Json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2) {
    throw SerializationError(path, "malformed header: data_offsets of " + where + " must be [begin, end]");
  }
  e.begin = json_count(path, offsets[0], "data_offsets of " + where);
  e.end = json_count(path, offsets[1], "data_offsets of " + where);
  const uint64_t element = dtype_size(e.dtype);
  if (overflow || numel > std::numeric_limits<uint64_t>::max() / element) {
    throw SerializationError(path, "malformed header: shape " + shape.dump() + " of " + where + " is too large");
  }
  if (e.end < e.begin) {
    throw SerializationError(path, "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] of " +
                                       where + " end before they begin");
  }
  if (e.end - e.begin != numel * element) {
    throw SerializationError(path, where + " (" + code + " " + shape_string(e.shape) + ") needs " +
                                       std::to_string(numel * element) + " bytes but its data_offsets [" +
                                       std::to_string(e.begin) + ", " + std::to_string(e.end) + "] span " +
                                       std::to_string(e.end - e.begin));
  }
  return e;
}

std::map<std::string, std::string> parse_metadata(const fs::path& path, const Json& v) {
  if (!v.is_object()) throw SerializationError(path, "malformed header: __metadata__ is not an object");
  std::map<std::string, std::string> out;
  for (const auto& [k, x] : v.items()) {
    if (!x.is_string()) {
      throw SerializationError(path, "malformed header: __metadata__ value of '" + k + "' is not a string");
    }
    out[k] = x.get<std::string>();
  }
  return out;
}

/// Offsets inside the buffer, without overlaps; the buffer ends at the last
/// tensor.
void check_layout(const fs::path& path, std::vector<const Entry*> entries, uint64_t buffer_size) {
  std::sort(entries.begin(), entries.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry* e : entries) {
    if (e->end > buffer_size) {
      throw SerializationError(path, "data_offsets [" + std::to_string(e->begin) + ", " + std::to_string(e->end) +
                                         "] of tensor '" + e->name + "' lie beyond the data buffer (" +
                                         std::to_string(buffer_size) + " bytes): the file is truncated or corrupted");
    }
    if (e->begin == e->end) continue;
    if (previous != nullptr && e->begin < covered) {
      throw SerializationError(path,
                               "tensors '" + previous->name + "' and '" + e->name + "' overlap in the data buffer");
    }
    covered = e->end;
    previous = e;
  }
  if (covered < buffer_size) {
    throw SerializationError(path, std::to_string(buffer_size - covered) +
                                       " unexpected bytes after the last tensor's data (corrupted file?)");
  }
}

void read_exact(std::ifstream& in, const fs::path& path, void* dst, uint64_t size, uint64_t offset, const char* what) {
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(size));
  if (static_cast<uint64_t>(in.gcount()) != size) {
    throw SerializationError(path, std::string("cannot read ") + what + " (read " + std::to_string(in.gcount()) +
                                       " of " + std::to_string(size) + " bytes)");
  }
}

/// Whether the metadata is a strata checkpoint's: two of its three marks —
/// the format tag, the version key, the checksum key — present. A file
/// strata wrote carries all three, and one flipped bit removes at most one,
/// so a damaged file is still checked (and refused) rather than taken for a
/// foreign one and loaded unchecked; a foreign file carries at most the
/// common "format" key (Hugging Face writes "format": "pt").
bool claims_strata_format(const std::map<std::string, std::string>& metadata) {
  auto format = metadata.find(file_format::kFormatKey);
  const int marks = (format != metadata.end() && format->second == file_format::kFormatName ? 1 : 0) +
                    (metadata.count(file_format::kVersionKey) > 0 ? 1 : 0) +
                    (metadata.count(file_format::kChecksumKey) > 0 ? 1 : 0);
  return marks >= 2;
}

/// The strata checkpoint's checksum (format_version 2: the whole file with
/// the checksum's digits as "00000000"; version 1: the data buffer only).
void check_checksum(const fs::path& path, const std::map<std::string, std::string>& metadata,
                    const uint8_t (&prefix)[8], const std::string& header, const std::vector<uint8_t>& buffer) {
  auto version = metadata.find(file_format::kVersionKey);
  const bool v2 = version != metadata.end() && version->second == file_format::kVersion;
  const bool v1 = version != metadata.end() && version->second == file_format::kVersion1;
  if (!v1 && !v2) {
    throw SerializationError(path, "unsupported strata-checkpoint format_version '" +
                                       (version == metadata.end() ? std::string("<missing>") : version->second) +
                                       "' (this build writes version " + file_format::kVersion +
                                       " and reads versions " + file_format::kVersion + " and " +
                                       file_format::kVersion1 + ")");
  }
  auto recorded = metadata.find(file_format::kChecksumKey);
  if (recorded == metadata.end()) {
    throw SerializationError(path, "corrupted: a strata checkpoint without its 'crc32' checksum");
  }
  boost::crc_32_type crc;
  if (v1) {
    crc.process_bytes(buffer.data(), buffer.size());
    if (hex32(crc.checksum()) != recorded->second) {
      throw SerializationError(path, "corrupted: the CRC-32 of the data buffer is " + hex32(crc.checksum()) +
                                         ", the header's checksum (crc32, format_version 1) records " +
                                         recorded->second);
    }
    return;
  }
  // The digits sit in the header exactly as save_tensors() writes them;
  // they are read as the placeholder.
  const std::string field = std::string("\"") + file_format::kChecksumKey + "\":\"";
  const size_t at = header.find(field);
  if (recorded->second.size() != 8 || at == std::string::npos || header.find(field, at + 1) != std::string::npos ||
      header.compare(at + field.size(), 9, recorded->second + "\"") != 0) {
    throw SerializationError(path, "corrupted: the header's checksum (crc32) is not written as " + field +
                                       "<8 hex digits>\" once");
  }
  std::string zeroed = header;
  zeroed.replace(at + field.size(), 8, hex32(0));
  crc.process_bytes(prefix, sizeof(prefix));
  crc.process_bytes(zeroed.data(), zeroed.size());
  crc.process_bytes(buffer.data(), buffer.size());
  if (hex32(crc.checksum()) != recorded->second) {
    throw SerializationError(path, "corrupted: the CRC-32 of the file (header and data) is " + hex32(crc.checksum()) +
                                       ", the header's checksum (crc32) records " + recorded->second);
  }
}

}  // namespace

LoadedTensors load_tensors(const fs::path& path, std::optional<Device> device) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw SerializationError(path, "is a directory, not a tensor file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SerializationError(path, "cannot open: " + errno_text(errno));
  const uint64_t file_size = fs::file_size(path, ec);
  if (ec) throw SerializationError(path, "cannot read the file size: " + ec.message());
  if (file_size < 8) {
    throw SerializationError(path, "truncated or not a safetensors file: " + std::to_string(file_size) +
                                       " bytes, fewer than the 8-byte header length");
  }
  uint8_t prefix[8];
  read_exact(in, path, prefix, 8, 0, "the header length");
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | prefix[i];
  if (length > file_size - 8) {
    throw SerializationError(path, "header length " + std::to_string(length) + " exceeds the file size (" +
                                       std::to_string(file_size) + " bytes): truncated or not a safetensors file");
  }
  if (length > kMaxHeaderBytes) {
    throw SerializationError(path, "header length " + std::to_string(length) + " exceeds the limit of " +
                                       std::to_string(kMaxHeaderBytes) + " bytes: not a safetensors file?");
  }
  std::string text(length, '\0');
  read_exact(in, path, text.data(), length, 8, "the header");
  if (length == 0 || text[0] != '{') {
    throw SerializationError(path, "not a safetensors file: the header does not start with '{'");
  }
  Json header = parse_header(path, text);

  LoadedTensors out;
  std::vector<Entry> entries;
  for (const auto& [k, v] : header.items()) {
    if (k == "__metadata__") {
      out.metadata = parse_metadata(path, v);
    } else {
      entries.push_back(parse_entry(path, k, v));
    }
  }
  const uint64_t buffer_size = file_size - 8 - length;
  std::vector<const Entry*> ptrs;
  for (const Entry& e : entries) ptrs.push_back(&e);
  check_layout(path, ptrs, buffer_size);

  std::vector<uint8_t> buffer(buffer_size);
  read_exact(in, path, buffer.data(), buffer_size, 8 + length, "the data buffer");
  if (claims_strata_format(out.metadata)) check_checksum(path, out.metadata, prefix, text, buffer);

  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    uint8_t* data = buffer.data() + e.begin;
    if (e.dtype == DType::boolean) {
      for (uint64_t i = e.begin; i < e.end; ++i) buffer[i] = buffer[i] != 0 ? 1 : 0;
    }
    std::span<const uint8_t> bytes(data, static_cast<size_t>(e.end - e.begin));
    const std::optional<Device> where = device && device->valid() ? device : std::nullopt;
    out.tensors.emplace_back(e.name, from_bytes(bytes, e.shape, {.dtype = e.dtype, .device = where}));
  }
  return out;
}

}  // namespace strata
