// safetensors_write.cpp — save_tensors: the safetensors layout with
// strata's checksum, written to a temporary file and renamed into place.
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

namespace {

// --- writing -----------------------------------------------------------------

/// A temporary file next to the target, removed unless committed.
class TempFile {
 public:
  TempFile(const fs::path& target) : target_(target) {
    fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
    std::random_device rd;
    std::uniform_int_distribution<uint64_t> dist;
    for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
      std::string name = ".";  // appended: GCC 12's -Wrestrict false positive on "." + string
      name.append(target.filename().string()).append(".tmp-").append(std::to_string(::getpid())).append("-");
      name.append(hex32(static_cast<uint32_t>(dist(rd))));
      path_ = dir / name;
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd_ < 0 && errno != EEXIST) break;
    }
    if (fd_ < 0) {
      int err = errno;
      std::string why = "cannot create a temporary file in directory '" + dir.string() + "': " + errno_text(err);
      if (err == ENOENT) why = "directory '" + dir.string() + "' does not exist";
      throw SerializationError(target_, why);
    }
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  /// Writes all of `data` at `offset`.
  void write_at(const void* data, size_t size, uint64_t offset) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
      ssize_t n = ::pwrite(fd_, p, size, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("cannot write", n < 0 ? errno : ENOSPC);
      p += n;
      size -= static_cast<size_t>(n);
      offset += static_cast<uint64_t>(n);
    }
  }

  /// fsync, close, rename over the target, sync the directory.
  void commit() {
    if (::fsync(fd_) != 0) fail("cannot flush to disk (fsync)", errno);
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close", errno);
    if (::rename(path_.c_str(), target_.c_str()) != 0) {
      int err = errno;
      std::string why = "cannot replace the file (rename from '" + path_.filename().string() + "'): " + errno_text(err);
      if (err == EISDIR || fs::is_directory(target_)) why = "the target is a directory";
      throw SerializationError(target_, why);
    }
    committed_ = true;
    // Make the rename itself durable. The new file is complete either way,
    // so a directory that cannot be opened or synced is not an error.
    fs::path dir = target_.parent_path().empty() ? fs::path(".") : target_.parent_path();
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what, int err) {
    throw SerializationError(target_, what + " temporary file '" + path_.filename().string() + "': " + errno_text(err));
  }

  fs::path target_;
  fs::path path_;
  int fd_ = -1;
  bool committed_ = false;
};

void check_names(const fs::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                 const std::map<std::string, std::string>& metadata) {
  std::set<std::string> names;
  for (const auto& [n, t] : tensors) {
    if (n.empty()) throw ValueError("save_tensors(" + path.string() + "): empty tensor name");
    if (n == "__metadata__") throw ValueError("save_tensors(" + path.string() + "): '__metadata__' is reserved");
    if (!names.insert(n).second) throw ValueError("save_tensors(" + path.string() + "): duplicate name '" + n + "'");
    if (!t.defined()) throw ValueError("save_tensors(" + path.string() + "): tensor '" + n + "' is undefined");
  }
  for (const char* key : {file_format::kFormatKey, file_format::kVersionKey, file_format::kChecksumKey}) {
    if (metadata.contains(key)) {
      throw ValueError("save_tensors(" + path.string() + "): metadata key '" + key + "' is reserved for strata");
    }
  }
  if (path.empty() || path.filename().empty()) {
    throw ValueError("save_tensors: '" + path.string() + "' does not name a file");
  }
}

/// The JSON header padded with spaces so that the data starts 8-aligned.
std::string make_header(const std::vector<std::pair<std::string, Tensor>>& tensors,
                        const std::map<std::string, std::string>& metadata, const std::string& checksum) {
  Json header = Json::object();
  Json meta = Json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  meta[file_format::kFormatKey] = file_format::kFormatName;
  meta[file_format::kVersionKey] = file_format::kVersion;
  meta[file_format::kChecksumKey] = checksum;
  header["__metadata__"] = std::move(meta);
  uint64_t offset = 0;
  for (const auto& [n, t] : tensors) {
    uint64_t bytes = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype());
    header[n] =
        Json{{"dtype", dtype_code(t.dtype())}, {"shape", t.sizes()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  return text;
}

}  // namespace

void save_tensors(const fs::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                  const std::map<std::string, std::string>& metadata) {
  check_names(path, tensors, metadata);
  // The checksum has a fixed width, so the header's length is known before
  // the data is read: write it with a placeholder, stream the tensors one at
  // a time, then rewrite the header with the real checksum.
  // The checksum covers the whole file as written with the placeholder
  // "00000000" in its place (format version 2), so it is computed in file
  // order: length, header with the placeholder, data.
  std::string header = make_header(tensors, metadata, hex32(0));
  TempFile file(path);
  const uint64_t length = header.size();
  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(length >> (8 * i));
  file.write_at(prefix, 8, 0);
  uint64_t offset = 8 + length;
  boost::crc_32_type crc;
  crc.process_bytes(prefix, sizeof(prefix));
  crc.process_bytes(header.data(), header.size());
  for (const auto& [n, t] : tensors) {
    std::vector<uint8_t> bytes = t.to_bytes();
    crc.process_bytes(bytes.data(), bytes.size());
    file.write_at(bytes.data(), bytes.size(), offset);
    offset += bytes.size();
  }
  header = make_header(tensors, metadata, hex32(crc.checksum()));
  file.write_at(header.data(), header.size(), 8);
  file.commit();
}

}  // namespace strata
