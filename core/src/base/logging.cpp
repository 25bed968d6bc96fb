// logging.cpp — shared sinks and per-subsystem loggers.
#include "base/logging.hpp"

#include "base/config_internal.hpp"

#include <strata/error.hpp>
#include <strata/log.hpp>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

namespace strata::detail {

namespace {

struct LoggingState {
  std::mutex mutex;
  std::shared_ptr<spdlog::sinks::dist_sink_mt> sink = std::make_shared<spdlog::sinks::dist_sink_mt>();
  std::map<std::string, std::shared_ptr<spdlog::logger>> loggers;
  spdlog::level::level_enum level = spdlog::level::warn;

  LoggingState() { sink->add_sink(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()); }
};

LoggingState& state() {
  static auto* s = new LoggingState();  // outlives static destructors of users
  return *s;
}

spdlog::level::level_enum level_from_env(spdlog::level::level_enum fallback) {
  const char* env = std::getenv("STRATA_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return fallback;
  std::string v(env);
  for (auto [name, level] : {std::pair{"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
                             {"info", spdlog::level::info}, {"warn", spdlog::level::warn},
                             {"error", spdlog::level::err}, {"off", spdlog::level::off}}) {
    if (v == name) return level;
  }
  // Said once per process, not once per logger that reads it.
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    std::fprintf(stderr, "strata: ignoring STRATA_LOG_LEVEL=\"%s\" (expected trace, debug, info, warn, error or off)\n",
                 env);
  }
  return fallback;
}

}  // namespace

std::shared_ptr<spdlog::logger> logger(const std::string& subsystem) {
  LoggingState& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.loggers.find(subsystem);
  if (it != s.loggers.end()) return it->second;
  auto log = std::make_shared<spdlog::logger>("strata." + subsystem, s.sink);
  log->set_level(level_from_env(s.level));
  log->set_pattern("[%n] %^%l%$: %v");
  s.loggers.emplace(subsystem, log);
  return log;
}

void configure_logging(const Config& config) {
  std::vector<spdlog::sink_ptr> sinks;
  for (std::size_t i = 0; i < config.log_sinks.size(); ++i) {
    const LogSink& sink = config.log_sinks[i];
    if (sink.type == "stderr") {
      sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    } else if (sink.type == "stdout") {
      sinks.push_back(std::make_shared<spdlog::sinks::stdout_color_sink_mt>());
    } else {
      const std::string where = config.source + ": /logging/sinks/" + std::to_string(i) + "/path: ";
      // Checked first: it never blocks (a FIFO) and words the reason better.
      if (std::string why = config::log_file_problem(sink.path); !why.empty()) throw ConfigError(where + why);
      try {
        sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(sink.path));
      } catch (const spdlog::spdlog_ex& e) {
        throw ConfigError(where + "cannot open log file \"" + sink.path + "\": " + e.what());
      }
    }
  }
  auto level = spdlog::level::from_str(config.log_level == "warn" ? "warning" : config.log_level);
  LoggingState& s = state();
  std::lock_guard lock(s.mutex);
  s.sink->set_sinks(sinks);
  s.level = level_from_env(level);
  for (auto& [name, log] : s.loggers) log->set_level(s.level);
}

}  // namespace strata::detail

namespace strata {

void log_message(std::string_view subsystem, LogLevel level, std::string_view message) noexcept {
  static constexpr spdlog::level::level_enum kLevels[] = {spdlog::level::trace, spdlog::level::debug,
                                                          spdlog::level::info, spdlog::level::warn,
                                                          spdlog::level::err};
  try {
    detail::logger(std::string(subsystem))->log(kLevels[static_cast<int>(level)], "{}", message);
  } catch (...) {  // logging never throws into its caller
  }
}

}  // namespace strata
