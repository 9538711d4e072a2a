// ParseSize, persist-mode names and UUID text.
#include "asymnvm/pm.h"
#include "pm/pm_test_util.h"

namespace asymnvm::pm {
namespace {

TEST(ParseSize, ValidInputs_ParseToBytes) {
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"0", 0},
      {"4096", 4096},
      {"64K", 64ull << 10},
      {"64k", 64ull << 10},
      {"16M", 16ull << 20},
      {"16m", 16ull << 20},
      {"2G", 2ull << 30},
      {"1T", 1ull << 40},
      {"64KiB", 64ull << 10},
      {"16MB", 16ull << 20},
      {"512B", 512},
      {"18446744073709551615", UINT64_MAX},
      {"16777215T", 16777215ull << 40},
  };
  for (const auto& [text, expected] : cases) {
    auto r = ParseSize(text);
    ASSERT_TRUE(r.ok()) << text << ": " << r.status().ToString();
    EXPECT_EQ(*r, expected) << text;
  }
}

TEST(ParseSize, InvalidInputs_AreInvalidArgument) {
  for (std::string text : {"", "-1", "-64K", "+5", "K", "abc", "12x", "1.5G", "64 K", " 64", "64K ",
                           "64KK", "1P", "18446744073709551616", "99999999999999999999",
                           "16777216T", "17179869184G", "0x10", "64iB"}) {
    auto r = ParseSize(text);
    EXPECT_FALSE(r.ok()) << "'" << text << "' parsed as " << (r.ok() ? *r : 0);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
      EXPECT_NE(r.status().message().find("'" + text + "'"), std::string::npos)
          << r.status().message();
    }
  }
}

TEST(PersistMode, NamesRoundTrip_UnknownIsInvalidArgument) {
  for (PersistMode m : {PersistMode::kAuto, PersistMode::kMsync, PersistMode::kFlushOnly}) {
    auto r = ParsePersistMode(PersistModeName(m));
    ASSERT_TRUE(r.ok()) << PersistModeName(m);
    EXPECT_EQ(*r, m);
  }
  EXPECT_EQ(ParsePersistMode("fsync").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePersistMode("").status().code(), StatusCode::kInvalidArgument);
}

TEST(UuidToString, Bytes_FormatAsCanonicalText) {
  std::array<uint8_t, 16> uuid{};
  for (size_t i = 0; i < uuid.size(); ++i) uuid[i] = static_cast<uint8_t>(i * 17);
  EXPECT_EQ(UuidToString(uuid), "00112233-4455-6677-8899-aabbccddeeff");
  EXPECT_EQ(UuidToString({}), "00000000-0000-0000-0000-000000000000");
}

TEST(UuidFromString, RoundTripsAndRefusesMalformedText) {
  std::array<uint8_t, 16> uuid{};
  for (size_t i = 0; i < uuid.size(); ++i) uuid[i] = static_cast<uint8_t>(i * 37 + 5);
  auto back = UuidFromString(UuidToString(uuid));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, uuid);
  auto upper = UuidFromString("00112233-4455-6677-8899-AABBCCDDEEFF");
  ASSERT_TRUE(upper.ok());
  EXPECT_EQ(UuidToString(*upper), "00112233-4455-6677-8899-aabbccddeeff");
  for (const char* bad :
       {"", "00112233-4455-6677-8899-aabbccddeef", "00112233x4455-6677-8899-aabbccddeeff",
        "00112233-4455-6677-8899-aabbccddeefg", "00112233-4455-6677-8899-aabbccddeeff0"}) {
    EXPECT_EQ(UuidFromString(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace asymnvm::pm
