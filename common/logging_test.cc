// The log line formats (common/log_format.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/log_format.h"

namespace asymnvm {
namespace {

// 2026-11-29T10:50:01.000123Z
std::chrono::system_clock::time_point Instant() {
  return std::chrono::system_clock::time_point(std::chrono::seconds(1795949401)) +
         std::chrono::microseconds(123);
}

TEST(LogFormat, ParsesNames) {
  LogFormat f = LogFormat::kText;
  EXPECT_TRUE(ParseLogFormat("json", &f));
  EXPECT_EQ(f, LogFormat::kJson);
  EXPECT_TRUE(ParseLogFormat("text", &f));
  EXPECT_EQ(f, LogFormat::kText);
  EXPECT_FALSE(ParseLogFormat("JSON", &f));
  EXPECT_FALSE(ParseLogFormat("", &f));
  EXPECT_EQ(f, LogFormat::kText);
}

TEST(LogFormat, TextLineHasLevelTimeComponentMessage) {
  std::string line =
      FormatLogLine(LogFormat::kText, LogLevel::kWarn, "fabric.soft", "peer gone", Instant());
  // "WARN  HH:MM:SS.000123 fabric.soft: peer gone" (local time of day)
  ASSERT_EQ(line.size(), std::string("WARN  10:50:01.000123 fabric.soft: peer gone").size());
  EXPECT_EQ(line.substr(0, 6), "WARN  ");
  EXPECT_EQ(line.substr(14, 8), ".000123 ");
  EXPECT_EQ(line.substr(22), "fabric.soft: peer gone");
}

TEST(LogFormat, JsonLineIsOneObjectWithEveryField) {
  const std::string message = "a \"quoted\" word,\na newline, a tab\t, \x01 and \xff\xfe bytes";
  std::string line =
      FormatLogLine(LogFormat::kJson, LogLevel::kError, "kv.server", message, Instant());
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  auto j = nlohmann::json::parse(line);  // throws (fails the test) unless valid JSON
  EXPECT_EQ(j["time"], "2026-11-29T10:50:01.000123Z");
  EXPECT_EQ(j["level"], "error");
  EXPECT_EQ(j["component"], "kv.server");
  EXPECT_EQ(j["pid"], static_cast<int64_t>(::getpid()));
  const std::string got = j["message"];
  // Everything up to the invalid bytes survives exactly; those become U+FFFD.
  const std::string valid_prefix = message.substr(0, message.find('\xff'));
  EXPECT_EQ(got.substr(0, valid_prefix.size()), valid_prefix);
  EXPECT_NE(got.find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_EQ(line.substr(0, 9), "{\"time\":\"");  // field order kept for readers of raw lines
}

TEST(LogFormat, EveryLevelHasALowerCaseName) {
  for (auto [level, name] : {std::pair{LogLevel::kDebug, "debug"},
                             {LogLevel::kInfo, "info"},
                             {LogLevel::kWarn, "warn"},
                             {LogLevel::kError, "error"}}) {
    auto j = nlohmann::json::parse(FormatLogLine(LogFormat::kJson, level, "c", "m", Instant()));
    EXPECT_EQ(j["level"], name);
  }
}

}  // namespace
}  // namespace asymnvm
