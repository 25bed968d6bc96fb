// version.hpp — the library's version and the plugin ABI version it speaks.
#pragma once

#include <string>

namespace strata {

/// Library version ("0.1.0") and plugin ABI version ("2.0").
std::string version();
std::string abi_version();

}  // namespace strata
