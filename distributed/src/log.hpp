// log.hpp — the library's logger, "strata.distributed": the core's logger
// for that subsystem, so that the store's warnings (a refused connection)
// go to the sinks and level of the configuration or STRATA_LOG_LEVEL like
// every other subsystem's. strata::detail::logger is the core's own
// (core/src/logging.hpp), exported from libstrata.so; it is the one
// function of the core outside its public API that this library uses.
#pragma once

#include <spdlog/logger.h>

#include <memory>
#include <string>

namespace strata::detail {
std::shared_ptr<spdlog::logger> logger(const std::string& subsystem);
}  // namespace strata::detail

namespace strata::distributed::detail {
inline spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = strata::detail::logger("distributed");
  return *logger;
}
}  // namespace strata::distributed::detail
