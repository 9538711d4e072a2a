#include "common/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace asymnvm {
namespace {

LogLevel InitialLevel() {
  const char* env = std::getenv("ASYMNVM_LOG_LEVEL");
  LogLevel level = LogLevel::kInfo;
  if (env != nullptr) ParseLogLevel(env, &level);
  return level;
}

std::atomic<int>& LevelVar() {
  static std::atomic<int> level{static_cast<int>(InitialLevel())};
  return level;
}

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
    default:
      return "OFF";
  }
}

}  // namespace

LogLevel GetLogLevel() { return static_cast<LogLevel>(LevelVar().load(std::memory_order_relaxed)); }
void SetLogLevel(LogLevel level) { LevelVar().store(static_cast<int>(level)); }

bool ParseLogLevel(std::string_view name, LogLevel* out) {
  if (name == "debug")
    *out = LogLevel::kDebug;
  else if (name == "info")
    *out = LogLevel::kInfo;
  else if (name == "warn" || name == "warning")
    *out = LogLevel::kWarn;
  else if (name == "error")
    *out = LogLevel::kError;
  else if (name == "off")
    *out = LogLevel::kOff;
  else
    return false;
  return true;
}

void LogLine(LogLevel level, std::string_view component, const std::string& message) {
  static std::mutex mu;
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
            1000000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  char ts[32];
  std::strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "%-5s %s.%06ld %.*s: %s\n", LevelName(level), ts, static_cast<long>(us),
               static_cast<int>(component.size()), component.data(), message.c_str());
}

void CheckFailed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "FATAL %s:%d: check failed: %s\n", file, line, cond);
  std::abort();
}

}  // namespace asymnvm
