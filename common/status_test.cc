// Status sub-codes (include/asymnvm/status.h): set by producers, kept through context and copies,
// shown by ToString, and absent from an OK Status.
#include "asymnvm/status.h"

#include <gtest/gtest.h>

#include <string>

namespace asymnvm {
namespace {

TEST(StatusSubCode, SurvivesContextAndCopiesAndIsShown) {
  const Status s = Status::Unavailable("shard 3 moved").WithSubCode(StatusSubCode::kNotPrimary);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.subcode(), StatusSubCode::kNotPrimary);
  EXPECT_TRUE(s.retryable());  // the factory's other fields are kept
  const Status wrapped = s.WithContext("kv put");
  EXPECT_EQ(wrapped.subcode(), StatusSubCode::kNotPrimary);
  EXPECT_EQ(wrapped.message(), "kv put: shard 3 moved");
  Status copy = wrapped;
  EXPECT_EQ(copy.subcode(), StatusSubCode::kNotPrimary);
  EXPECT_EQ(copy.ToString(), "Unavailable (NotPrimary): kv put: shard 3 moved");
  // Re-tagging replaces the sub-code; the code stays.
  const Status fenced = std::move(copy).WithSubCode(StatusSubCode::kFenced);
  EXPECT_EQ(fenced.subcode(), StatusSubCode::kFenced);
  EXPECT_EQ(fenced.code(), StatusCode::kUnavailable);
}

TEST(StatusSubCode, NoneByDefaultAndNotShown) {
  const Status s = Status::Corruption("bad magic");
  EXPECT_EQ(s.subcode(), StatusSubCode::kNone);
  EXPECT_EQ(s.ToString(), "Corruption: bad magic");
  // An OK Status has no sub-code and stays OK when one is given.
  EXPECT_EQ(Status::Ok().subcode(), StatusSubCode::kNone);
  const Status ok = Status::Ok().WithSubCode(StatusSubCode::kFenced);
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.subcode(), StatusSubCode::kNone);
  EXPECT_EQ(ok.ToString(), "OK");
}

TEST(StatusSubCode, EveryValueHasAName) {
  for (int v = 0; v <= static_cast<int>(kLastStatusSubCode); v++) {
    EXPECT_NE(StatusSubCodeName(static_cast<StatusSubCode>(v)), "Unknown") << v;
  }
  EXPECT_EQ(StatusSubCodeName(StatusSubCode::kChecksumMismatch), "ChecksumMismatch");
}

}  // namespace
}  // namespace asymnvm
