#include "common/checksum.h"

#include <gtest/gtest.h>

#include <string>

#include "asymnvm/status.h"
#include "common/crash_point.h"

namespace asymnvm {
namespace {

TEST(Crc32c, StandardCheckValue) {
  const std::string s = "123456789";
  EXPECT_EQ(Crc32c(s.data(), s.size()), 0xE3069283u);
}

TEST(Crc32c, IncrementalEqualsOneShot) {
  const std::string s = "the quick brown fox jumps over the lazy dog";
  uint32_t part = Crc32c(s.data(), 10);
  EXPECT_EQ(Crc32c(s.data() + 10, s.size() - 10, part), Crc32c(s.data(), s.size()));
}

TEST(Hash64, SeedChangesHash) {
  const std::string s = "key";
  EXPECT_NE(Hash64(s.data(), s.size(), 1), Hash64(s.data(), s.size(), 2));
  EXPECT_EQ(Hash64(s.data(), s.size(), 1), Hash64(s.data(), s.size(), 1));
}

TEST(Status, CarriesCodeMessageAndContext) {
  Status s = Status::IoError("open /x", 2).WithContext("pool");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_EQ(s.message(), "pool: open /x");
  EXPECT_NE(s.ToString().find("errno 2"), std::string::npos);
  Status copy = s;
  EXPECT_EQ(copy.ToString(), s.ToString());
  EXPECT_TRUE(Status::Ok().ok());
}

TEST(Result, HoldsValueOrError) {
  Result<int> good(5);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 5);
  Result<int> bad(Status::NotFound("x"));
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
}

// value() on an error and a Result built from an OK Status abort with a message in every build
// type (this test runs in the RelWithDebInfo build, where assert() is compiled out).
TEST(Result, MisuseFailsLoudlyInEveryBuild) {
  EXPECT_DEATH(
      {
        Result<int> bad(Status::NotFound("no such key"));
        std::fprintf(stderr, "%d\n", bad.value());
      },
      "value\\(\\) called on an error: NotFound: no such key");
  EXPECT_DEATH(
      {
        Result<std::string> bad(Status::IoError("disk"));
        std::string v = std::move(bad).value();
        std::fprintf(stderr, "%s\n", v.c_str());
      },
      "called on an error: IoError: disk");
  EXPECT_DEATH({ Result<int> r{Status::Ok()}; }, "from an OK Status");
}

TEST(CrashPoint, KillsProcessOnNthReach) {
  EXPECT_EXIT(
      {
        ArmCrashPoint("unit.test.point", 3);
        ASYMNVM_CRASH_POINT("unit.test.point");
        ASYMNVM_CRASH_POINT("other.point");
        ASYMNVM_CRASH_POINT("unit.test.point");
        std::fprintf(stderr, "survived two\n");
        ASYMNVM_CRASH_POINT("unit.test.point");
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "survived two");
}

}  // namespace
}  // namespace asymnvm
