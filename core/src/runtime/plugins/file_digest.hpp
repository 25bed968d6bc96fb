// file_digest.hpp — the SHA-256 of a file, for plugin pins
// ("plugins.pins", docs/configuration.md). OpenSSL's libcrypto computes it.
#pragma once

#include <string>
#include <string_view>

namespace strata::detail {

/// The SHA-256 of the file at `path` as 64 lower-case hex digits. Throws
/// strata::Error naming the file when it cannot be read.
std::string file_sha256(const std::string& path);

/// The SHA-256 of `bytes` as 64 lower-case hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace strata::detail
