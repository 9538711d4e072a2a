// --log-format, the same option in every daemon (common/log_format.h; doc/operations.md §Logs).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "common/log_format.h"

namespace asymnvm {

inline void AddLogFormatOption(CLI::App& app, std::string* format) {
  app.add_option("--log-format", *format,
                 "text (LEVEL time component: message) | json (one object per line: time, level, "
                 "component, pid, message) for log shippers")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
}

// After parsing: the format named (checked by the option).
inline void ApplyLogFormat(const std::string& format) {
  LogFormat f = LogFormat::kText;
  ParseLogFormat(format, &f);
  SetLogFormat(f);
}

}  // namespace asymnvm
