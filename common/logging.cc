#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>

#include "common/log_format.h"

namespace asymnvm {
namespace {

LogLevel InitialLevel() {
  const char* env = std::getenv("ASYMNVM_LOG_LEVEL");
  LogLevel level = LogLevel::kInfo;
  if (env != nullptr) ParseLogLevel(env, &level);
  return level;
}

LogFormat InitialFormat() {
  const char* env = std::getenv("ASYMNVM_LOG_FORMAT");
  LogFormat format = LogFormat::kText;
  if (env != nullptr) ParseLogFormat(env, &format);
  return format;
}

std::atomic<int>& FormatVar() {
  static std::atomic<int> format{static_cast<int>(InitialFormat())};
  return format;
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

LogFormat GetLogFormat() {
  return static_cast<LogFormat>(FormatVar().load(std::memory_order_relaxed));
}
void SetLogFormat(LogFormat format) { FormatVar().store(static_cast<int>(format)); }

bool ParseLogFormat(std::string_view name, LogFormat* out) {
  if (name == "text")
    *out = LogFormat::kText;
  else if (name == "json")
    *out = LogFormat::kJson;
  else
    return false;
  return true;
}

std::string FormatLogLine(LogFormat format, LogLevel level, std::string_view component,
                          std::string_view message, std::chrono::system_clock::time_point now) {
  const auto secs = std::chrono::system_clock::to_time_t(now);
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  std::tm tm{};
  char ts[64];
  if (format == LogFormat::kJson) {
    gmtime_r(&secs, &tm);
    size_t n = std::strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(ts + n, sizeof(ts) - n, ".%06ldZ", static_cast<long>(us));
    std::string level_name = LevelName(level);
    for (char& c : level_name) c = static_cast<char>(c - 'A' + 'a');
    nlohmann::ordered_json j;
    j["time"] = ts;
    j["level"] = level_name;
    j["component"] = std::string(component);
    j["pid"] = static_cast<int64_t>(::getpid());
    j["message"] = std::string(message);
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  localtime_r(&secs, &tm);
  std::strftime(ts, sizeof(ts), "%H:%M:%S", &tm);
  char head[96];
  std::snprintf(head, sizeof(head), "%-5s %s.%06ld ", LevelName(level), ts, static_cast<long>(us));
  std::string line = head;
  line.append(component);
  line += ": ";
  line.append(message);
  return line;
}

void LogLine(LogLevel level, std::string_view component, const std::string& message) {
  std::string line =
      FormatLogLine(GetLogFormat(), level, component, message, std::chrono::system_clock::now());
  line += '\n';
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

void CheckFailed(const char* file, int line, const char* cond) {
  std::fprintf(stderr, "FATAL %s:%d: check failed: %s\n", file, line, cond);
  std::abort();
}

}  // namespace asymnvm
