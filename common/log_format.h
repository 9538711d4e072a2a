// The format of log lines (common/logging.h writes them, one per message, to stderr):
//
//   text (default)  LEVEL HH:MM:SS.micros component: message
//   json            {"time":"2026-11-29T10:50:01.123456Z","level":"warn","component":"fabric.soft",
//                    "pid":1234,"message":"..."}   one object per line, for log shippers
//
// Process-wide, like the level: SetLogFormat, or ASYMNVM_LOG_FORMAT=text|json in the environment.
// The daemons take --log-format text|json (doc/operations.md §Logs). A separate header from
// logging.h so the few callers that choose a format do not make every file depend on it.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/logging.h"

namespace asymnvm {

enum class LogFormat : int { kText = 0, kJson = 1 };

LogFormat GetLogFormat();
void SetLogFormat(LogFormat format);
// "text" | "json"; false on an unknown name.
bool ParseLogFormat(std::string_view name, LogFormat* out);

// One line as LogLine writes it, without the newline. Text uses local time of day; JSON an
// RFC 3339 UTC timestamp, and every byte of component and message is kept (invalid UTF-8 is
// replaced by U+FFFD, so each line is valid JSON).
std::string FormatLogLine(LogFormat format, LogLevel level, std::string_view component,
                          std::string_view message, std::chrono::system_clock::time_point now);

}  // namespace asymnvm
