// log.hpp — writing through Strata's loggers from code beside the core: a
// library such as libstrata_distributed, a program that wants its messages
// where Strata's go. Every subsystem has a logger "strata.<subsystem>"
// writing to the sinks the configuration names ("logging.sinks"), at the
// level it sets ("logging.level", or STRATA_LOG_LEVEL); docs/configuration.md.
#pragma once

#include <string_view>

namespace strata {

enum class LogLevel { trace, debug, info, warn, error };

/// Writes `message` through the logger "strata.<subsystem>" (created on first
/// use) at `level`. Never throws: a message that cannot be written is lost.
void log_message(std::string_view subsystem, LogLevel level, std::string_view message) noexcept;

}  // namespace strata
