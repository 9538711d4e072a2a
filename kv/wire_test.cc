// The KV server's refusals as the client sees them: an error Status crosses the Ordered Queue
// wire (fabric/oq/wire.h, the one codec of an error response) with its code and sub-code, and the
// client decides to re-read the shard map and resend on those alone (wire::RefusedBeforeApply),
// whatever the message says.
#include "kv/wire.h"

#include <gtest/gtest.h>

#include <span>
#include <string>
#include <vector>

#include "fabric/oq/oq.h"
#include "fabric/oq/wire.h"

namespace asymnvm::kv {
namespace {

// What the client holds after the server answered `sent`: encoded by the server's codec, validated
// and decoded by the client's.
Status OverTheWire(const Status& sent) {
  std::vector<uint8_t> bytes;
  oq::wire::EncodeErrorResponse(sent, 12, 0, &bytes);
  auto h = oq::wire::ValidateResponse(bytes);
  if (!h.ok()) return h.status();
  return oq::wire::DecodeErrorStatus(
      *h, std::span<const uint8_t>(bytes).subspan(oq::kResponseHeaderSize,
                                                  h->size - oq::kResponseHeaderSize));
}

TEST(KvWire, NotPrimaryAndFencedRefusalsAreRecognisedByTheirSubCode) {
  // Reworded messages that name neither "not primary" nor "fenced": the sub-code decides.
  const Status moved = OverTheWire(Status::Unavailable("shard 7 is led by another server")
                                       .WithSubCode(StatusSubCode::kNotPrimary));
  EXPECT_EQ(moved.code(), StatusCode::kUnavailable);
  EXPECT_EQ(moved.subcode(), StatusSubCode::kNotPrimary);
  EXPECT_EQ(moved.message().find("not primary"), std::string::npos);
  EXPECT_TRUE(wire::RefusedBeforeApply(moved)) << moved.ToString();
  const Status lapsed = OverTheWire(
      Status::Unavailable("lease lapsed 900 ms ago").WithSubCode(StatusSubCode::kFenced));
  EXPECT_EQ(lapsed.message().find("fenced"), std::string::npos);
  EXPECT_TRUE(wire::RefusedBeforeApply(lapsed)) << lapsed.ToString();
}

TEST(KvWire, MessageTextAloneIsNoRefusal) {
  // The old words without the sub-code: an unavailable server whose outcome is unknown (e.g. a
  // replication failure after the local apply) must not be resent as if nothing was applied.
  const Status text_only = OverTheWire(Status::Unavailable("kv: not primary for shard 3"));
  EXPECT_EQ(text_only.subcode(), StatusSubCode::kNone);
  EXPECT_FALSE(wire::RefusedBeforeApply(text_only));
  EXPECT_FALSE(wire::RefusedBeforeApply(OverTheWire(Status::Unavailable("kv: fenced: x"))));
  // The sub-code with another code is no refusal either.
  EXPECT_FALSE(wire::RefusedBeforeApply(
      OverTheWire(Status::TimedOut("slow").WithSubCode(StatusSubCode::kNotPrimary))));
  EXPECT_FALSE(wire::RefusedBeforeApply(Status::Ok()));
}

}  // namespace
}  // namespace asymnvm::kv
