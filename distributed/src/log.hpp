// log.hpp — the library's messages, through the core's logger
// "strata.distributed" (strata/log.hpp, public API), so that the store's
// warnings (a refused connection) go to the sinks and level of the
// configuration or STRATA_LOG_LEVEL like every other subsystem's.
#pragma once

#include <strata/log.hpp>

#include <fmt/format.h>

#include <utility>

namespace strata::distributed::detail {

/// A warning on "strata.distributed", formatted as fmt::format does.
template <class... Args>
void log_warn(fmt::format_string<Args...> format, Args&&... args) {
  strata::log_message("distributed", LogLevel::warn, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace strata::distributed::detail
