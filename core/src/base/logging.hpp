// logging.hpp — one spdlog logger per subsystem ("strata.core",
// "strata.plugin", "strata.<plugin name>", ...), all writing to the sinks the
// configuration names, at the level from the configuration or STRATA_LOG_LEVEL.
#pragma once

#include <strata/config.hpp>

#include <spdlog/logger.h>

#include <memory>
#include <string>

namespace strata::detail {

/// The logger "strata.<subsystem>", created on first use.
std::shared_ptr<spdlog::logger> logger(const std::string& subsystem);
/// Applies level and sinks; throws ConfigError when a sink cannot be opened.
void configure_logging(const Config& config);

}  // namespace strata::detail
