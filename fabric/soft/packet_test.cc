#include "fabric/soft/packet.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace asymnvm::fabric::soft {
namespace {

std::vector<uint8_t> Request(uint8_t op, uint32_t len, bool with_payload) {
  std::vector<uint8_t> v(kRequestHeaderSize + (with_payload ? len : 0), 0x5A);
  EncodeRequestHeader(v.data(), op, kFlagSignaled | kFlagNeedsAck, 7, len, 99, 0x1000, 1, 2);
  return v;
}

std::vector<uint8_t> Response(uint8_t op, uint8_t reason, uint32_t len) {
  std::vector<uint8_t> v(kResponseHeaderSize + len, 0x33);
  EncodeResponseHeader(v.data(), op, reason, 7, len);
  return v;
}

std::vector<std::vector<uint8_t>> ValidPackets() {
  return {Request(kWireWrite, 100, true),   Request(kWireSend, 0, true),
          Request(kWireRead, 4096, false),  Request(kWireCompareSwap, 8, false),
          Request(kWireFetchAdd, 8, false), Request(kWireFlush, 0, false),
          Response(kWireAck, 0, 0),         Response(kWireReadResp, 0, 33),
          Response(kWireAtomicResp, 0, 8),  Response(kWireNak, kNakAccess, 0),
          Response(kWireRnrNotice, 0, 0)};
}

TEST(ParsePacket, ValidPackets_ParseCompletely) {
  for (const auto& pkt : ValidPackets()) {
    size_t consumed = 0;
    auto r = ParsePacket(pkt.data(), pkt.size(), &consumed);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->complete);
    EXPECT_EQ(consumed, pkt.size());
    EXPECT_EQ(r->seq, 7u);
  }
}

TEST(ParsePacket, RequestFields_RoundTrip) {
  auto pkt = Request(kWireWrite, 5, true);
  size_t consumed = 0;
  auto r = ParsePacket(pkt.data(), pkt.size(), &consumed);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->opcode, kWireWrite);
  EXPECT_EQ(r->rkey, 99u);
  EXPECT_EQ(r->remote_addr, 0x1000u);
  EXPECT_EQ(r->compare_add, 1u);
  EXPECT_EQ(r->swap, 2u);
  EXPECT_EQ(r->payload_len, 5u);
  EXPECT_EQ(r->payload, pkt.data() + kRequestHeaderSize);
}

TEST(ParsePacket, EveryTruncatedPrefix_IncompleteNotError) {
  for (const auto& pkt : ValidPackets()) {
    for (size_t n = 0; n < pkt.size(); n++) {
      // A heap copy of exactly n bytes so ASan catches any read past the prefix.
      std::vector<uint8_t> prefix(pkt.begin(), pkt.begin() + static_cast<long>(n));
      size_t consumed = 99;
      auto r = ParsePacket(prefix.data(), prefix.size(), &consumed);
      ASSERT_TRUE(r.ok()) << "prefix " << n << ": " << r.status().ToString();
      EXPECT_FALSE(r->complete);
      EXPECT_GT(r->needed, n);
      EXPECT_EQ(consumed, 0u);
    }
  }
}

TEST(ParsePacket, BadMagic_ProtocolError) {
  auto pkt = Request(kWireWrite, 4, true);
  pkt[0] = 0x00;
  size_t consumed;
  auto r = ParsePacket(pkt.data(), pkt.size(), &consumed);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kProtocolError);
  auto r1 = ParsePacket(pkt.data(), 1, &consumed);
  EXPECT_FALSE(r1.ok());
}

TEST(ParsePacket, BadVersion_ProtocolError) {
  auto pkt = Request(kWireRead, 4, false);
  pkt[1] = 0x02;
  size_t consumed;
  EXPECT_FALSE(ParsePacket(pkt.data(), pkt.size(), &consumed).ok());
}

TEST(ParsePacket, UnknownOpcode_ProtocolError) {
  for (uint8_t op : {uint8_t{0}, uint8_t{7}, uint8_t{0x80}, uint8_t{0x86}, uint8_t{0xFF}}) {
    auto pkt = Request(kWireWrite, 0, true);
    pkt[2] = op;
    size_t consumed;
    auto r = ParsePacket(pkt.data(), pkt.size(), &consumed);
    ASSERT_FALSE(r.ok()) << int{op};
    EXPECT_EQ(r.status().code(), StatusCode::kProtocolError);
  }
}

TEST(ParsePacket, OversizedLength_ProtocolError) {
  auto pkt = Request(kWireWrite, 0, true);
  StoreLe32(pkt.data() + 8, kMaxMessage + 1);
  size_t consumed;
  EXPECT_FALSE(ParsePacket(pkt.data(), pkt.size(), &consumed).ok());
  auto resp = Response(kWireReadResp, 0, 0);
  StoreLe32(resp.data() + 8, 0xFFFFFFFFu);
  EXPECT_FALSE(ParsePacket(resp.data(), resp.size(), &consumed).ok());
}

TEST(ParsePacket, ReservedBitsOrBadNakReason_ProtocolError) {
  size_t consumed;
  auto pkt = Request(kWireWrite, 0, true);
  pkt[3] = 0x80;
  EXPECT_FALSE(ParsePacket(pkt.data(), pkt.size(), &consumed).ok());
  auto nak = Response(kWireNak, 9, 0);
  EXPECT_FALSE(ParsePacket(nak.data(), nak.size(), &consumed).ok());
  auto atomic = Response(kWireAtomicResp, 0, 4);
  EXPECT_FALSE(ParsePacket(atomic.data(), atomic.size(), &consumed).ok());
}

TEST(ParsePacket, BackToBackPackets_ConsumesOneAtATime) {
  auto a = Request(kWireWrite, 10, true);
  auto b = Response(kWireAck, 0, 0);
  std::vector<uint8_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  size_t consumed;
  auto r = ParsePacket(both.data(), both.size(), &consumed);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(consumed, a.size());
  auto r2 = ParsePacket(both.data() + consumed, both.size() - consumed, &consumed);
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(r2->is_response);
}

TEST(ParsePacket, RandomBytes_NeverCrashOrOverConsume) {
  std::mt19937 rng(12345);
  for (int i = 0; i < 20000; i++) {
    size_t n = rng() % 64;
    std::vector<uint8_t> buf(n);
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    if (n > 0 && rng() % 2) buf[0] = kWireMagic;
    if (n > 1 && rng() % 2) buf[1] = kWireVersion;
    size_t consumed = 0;
    auto r = ParsePacket(buf.data(), buf.size(), &consumed);
    EXPECT_LE(consumed, n) << "seed 12345 iteration " << i;
  }
}

}  // namespace
}  // namespace asymnvm::fabric::soft
