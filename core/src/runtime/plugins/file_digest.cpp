// file_digest.cpp — see file_digest.hpp.
#include "runtime/plugins/file_digest.hpp"

#include <strata/error.hpp>

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

namespace strata::detail {

namespace {

using DigestContext = std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)>;

DigestContext sha256_context() {
  DigestContext ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw Error("libcrypto has no SHA-256");
  return ctx;
}

std::string finish_hex(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx, digest, &length) != 1) throw Error("the SHA-256 digest failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int k = 0; k < length; ++k) {
    hex += kHex[digest[k] >> 4];
    hex += kHex[digest[k] & 15];
  }
  return hex;
}

}  // namespace

std::string file_sha256(const std::string& path) {
  auto fail = [&](const std::string& why) { return Error("cannot compute the SHA-256 of \"" + path + "\": " + why); };
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw fail(std::strerror(errno));
  std::unique_ptr<int, void (*)(int*)> closer(new int(fd), [](int* f) {
    ::close(*f);
    delete f;
  });
  DigestContext ctx = sha256_context();
  std::vector<unsigned char> buffer(size_t{1} << 20);
  for (;;) {
    const ssize_t got = ::read(fd, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw fail(std::strerror(errno));
    if (got == 0) break;
    EVP_DigestUpdate(ctx.get(), buffer.data(), static_cast<size_t>(got));
  }
  return finish_hex(ctx.get());
}

std::string sha256_hex(std::string_view bytes) {
  DigestContext ctx = sha256_context();
  EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
  return finish_hex(ctx.get());
}

}  // namespace strata::detail
