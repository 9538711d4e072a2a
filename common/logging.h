// Leveled logging to stderr: one line per message, "LEVEL time component: message".
//
// The level is process-wide (SetLogLevel, or ASYMNVM_LOG_LEVEL=debug|info|warn|error in the
// environment). ASYMNVM_LOG(level, fmt-free stream args...) costs one comparison when disabled.
// Thread safety: lines from different threads never interleave.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace asymnvm {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

LogLevel GetLogLevel();
void SetLogLevel(LogLevel level);
// "debug" | "info" | "warn" | "error" | "off"; returns false on an unknown name.
bool ParseLogLevel(std::string_view name, LogLevel* out);
void LogLine(LogLevel level, std::string_view component, const std::string& message);

}  // namespace asymnvm

#define ASYMNVM_LOG(level, component, ...)                                       \
  do {                                                                           \
    if (static_cast<int>(level) >= static_cast<int>(::asymnvm::GetLogLevel())) { \
      std::ostringstream _os;                                                    \
      _os << __VA_ARGS__;                                                        \
      ::asymnvm::LogLine(level, component, _os.str());                           \
    }                                                                            \
  } while (0)

#define LOG_DEBUG(component, ...) ASYMNVM_LOG(::asymnvm::LogLevel::kDebug, component, __VA_ARGS__)
#define LOG_INFO(component, ...) ASYMNVM_LOG(::asymnvm::LogLevel::kInfo, component, __VA_ARGS__)
#define LOG_WARN(component, ...) ASYMNVM_LOG(::asymnvm::LogLevel::kWarn, component, __VA_ARGS__)
#define LOG_ERROR(component, ...) ASYMNVM_LOG(::asymnvm::LogLevel::kError, component, __VA_ARGS__)

// Always-on check for states that must stop the process (not for input validation).
#define ASYMNVM_CHECK(cond)                                         \
  do {                                                              \
    if (!(cond)) ::asymnvm::CheckFailed(__FILE__, __LINE__, #cond); \
  } while (0)

namespace asymnvm {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond);
}
