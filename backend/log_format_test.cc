#include "backend/log_format.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <tuple>

#include "backend/applier.h"
#include "common/checksum.h"
#include "common/coding.h"

namespace asymnvm::backend {
namespace {

std::vector<uint8_t> Bytes(std::initializer_list<int> v) {
  std::vector<uint8_t> out;
  for (int x : v) out.push_back(static_cast<uint8_t>(x));
  return out;
}

TEST(OpLog, RoundTripAndEveryBitFlipIsDetected) {
  auto payload = Bytes({1, 2, 3, 4, 5, 6, 7, 8, 9});
  OpLogRecord r{7, 42, 3, 11, 0, payload};
  auto enc = EncodeOpLog(r);
  ASSERT_EQ(enc.size(), kOpLogHeaderSize + payload.size());
  auto dec = DecodeOpLog(enc);
  ASSERT_TRUE(dec.ok()) << dec.status().ToString();
  EXPECT_EQ(dec->frontend_id, 7u);
  EXPECT_EQ(dec->op_seq, 42u);
  EXPECT_EQ(dec->structure_id, 3u);
  EXPECT_EQ(dec->op_type, 11u);
  EXPECT_EQ(std::vector<uint8_t>(dec->payload.begin(), dec->payload.end()), payload);
  for (size_t byte = 0; byte < enc.size(); byte++) {
    for (int bit = 0; bit < 8; bit++) {
      auto bad = enc;
      bad[byte] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_FALSE(DecodeOpLog(bad).ok()) << "byte " << byte << " bit " << bit;
    }
  }
  EXPECT_EQ(DecodeOpLog(std::span(enc).first(10)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeOpLog(std::span(enc).first(enc.size() - 1)).status().code(),
            StatusCode::kCorruption);
}

// Regression (log_format_fuzz, CI): a record whose reserved header bytes 36..39 are set, with a
// checksum that covers them, used to decode — and did not re-encode to itself. It is refused.
TEST(OpLog, ReservedHeaderBytesSetIsCorruption) {
  auto payload = Bytes({9, 8, 7});
  auto enc = EncodeOpLog(OpLogRecord{1, 2, 3, 4, 0, payload});
  enc[37] = 0x4F;
  PutLe32(enc.data(), Crc32c(enc.data() + 4, enc.size() - 4));
  auto dec = DecodeOpLog(enc);
  ASSERT_FALSE(dec.ok());
  EXPECT_EQ(dec.status().code(), StatusCode::kCorruption);
  EXPECT_NE(dec.status().ToString().find("reserved"), std::string::npos) << dec.status().ToString();
}

// Regression (log_format_fuzz): a pointer entry naming more bytes than any op log holds decoded
// (and a 1 GiB one exhausted memory downstream). It is refused; the largest legal one decodes.
TEST(Txn, PointerEntryLongerThanAnyOpLogIsCorruption) {
  for (const auto& [len, offset, ok] :
       {std::tuple<uint32_t, uint32_t, bool>{kMaxRecordSize, 0, true},
        {kMaxRecordSize + 1, 0, false},
        {16, kMaxRecordSize - 8, false},
        {0x40000000u, 0, false}}) {
    TxnBuilder tb;
    tb.WritePointer(4096, len, 3, offset);
    const auto bytes = tb.Finish(1, 1, 1, 0);
    auto v = DecodeTxn(bytes);
    EXPECT_EQ(v.ok(), ok) << len << " @ " << offset << ": " << v.status().ToString();
    if (!ok) {
      EXPECT_EQ(v.status().code(), StatusCode::kCorruption);
    }
  }
}

// Applies a decoded transaction to a byte image (the applier's rule: entries in order).
std::map<uint64_t, uint8_t> ApplyImage(const TxnView& v) {
  std::map<uint64_t, uint8_t> img;
  for (const auto& e : v.entries) {
    for (uint32_t i = 0; i < e.len; i++) img[e.addr + i] = e.data[i];
  }
  return img;
}

// Regression: A(0..8) = 1, B(4..12) = 2, A(0..8) = 3 must leave bytes 0..7 = 3 and 8..11 = 2. A
// coalescing of the second A into the first entry would let B overwrite bytes 4..7 at apply time.
TEST(Txn, CoalescingNeverReordersAcrossAnOverlappingWrite) {
  TxnBuilder b;
  b.Write(4096, Bytes({1, 1, 1, 1, 1, 1, 1, 1}));
  b.Write(4100, Bytes({2, 2, 2, 2, 2, 2, 2, 2}));
  b.Write(4096, Bytes({3, 3, 3, 3, 3, 3, 3, 3}));
  b.Write(4096, Bytes({4, 4, 4, 4, 4, 4, 4, 4}));  // no overlap since the third: coalesces
  EXPECT_EQ(b.entries(), 3u);
  auto enc = b.Finish(1, 1, 0, 0);
  auto v = DecodeTxn(enc);
  ASSERT_TRUE(v.ok());
  auto img = ApplyImage(*v);
  for (uint64_t a = 4096; a < 4104; a++) EXPECT_EQ(img[a], 4) << a;
  for (uint64_t a = 4104; a < 4108; a++) EXPECT_EQ(img[a], 2) << a;
  // Randomized against a byte-image model.
  std::mt19937_64 rng(5);
  for (int round = 0; round < 200; round++) {
    TxnBuilder r;
    std::map<uint64_t, uint8_t> model;
    for (int i = 0; i < 30; i++) {
      const uint64_t addr = 8192 + rng() % 24;
      const uint32_t len = 1 + static_cast<uint32_t>(rng() % 3) * 4;
      std::vector<uint8_t> d(len, static_cast<uint8_t>(i + 1));
      r.Write(addr, d);
      for (uint32_t k = 0; k < len; k++) model[addr + k] = d[k];
    }
    auto e = r.Finish(1, 1, 0, 0);
    auto dv = DecodeTxn(e);
    ASSERT_TRUE(dv.ok());
    ASSERT_EQ(ApplyImage(*dv), model) << "round " << round;
  }
}

// Found by log_format_fuzz (UBSan): a second empty write to the same address coalesced with a
// memcpy from a null pointer. It must coalesce cleanly and decode.
TEST(Txn, RepeatedEmptyWriteCoalesces) {
  TxnBuilder b;
  b.Write(4096, {});
  b.Write(4096, {});
  b.Write(4096, std::span<const uint8_t>());
  EXPECT_EQ(b.entries(), 1u);
  auto bytes = b.Finish(1, 1, 0, 0);
  auto v = DecodeTxn(bytes);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->entries.size(), 1u);
  EXPECT_EQ(v->entries[0].len, 0u);
}

TEST(Txn, RoundTripCoalescingAndPointers) {
  TxnBuilder b;
  auto a = Bytes({1, 1, 1, 1, 1, 1, 1, 1});
  auto c = Bytes({2, 2, 2, 2, 2, 2, 2, 2});
  b.Write(4096, a);
  b.Write(8192, Bytes({9, 9, 9}));
  b.Write(4096, c);  // same (addr, len): coalesces into the first entry
  b.WritePointer(12288, 4, 5, 2);
  EXPECT_EQ(b.entries(), 3u);
  const size_t expect = b.encoded_size();
  auto enc = b.Finish(3, 10, 9, 64);
  EXPECT_EQ(enc.size(), expect);
  EXPECT_TRUE(b.empty());
  auto v = DecodeTxn(enc);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->header.frontend_id, 3u);
  EXPECT_EQ(v->header.txn_seq, 10u);
  EXPECT_EQ(v->header.opn, 9u);
  EXPECT_EQ(v->header.seq_addr, 64u);
  ASSERT_EQ(v->entries.size(), 3u);
  EXPECT_EQ(std::vector<uint8_t>(v->entries[0].data.begin(), v->entries[0].data.end()), c);
  EXPECT_EQ(v->entries[1].len, 3u);
  EXPECT_EQ(v->entries[2].kind, MemLogKind::kOpLogPointer);
  EXPECT_EQ(v->entries[2].op_seq, 5u);
  EXPECT_EQ(v->entries[2].op_offset, 2u);
}

TEST(Txn, EveryBitFlipAndTruncationIsDetected) {
  TxnBuilder b;
  b.Write(100, Bytes({1, 2, 3, 4, 5}));
  b.WritePointer(200, 8, 1, 0);
  auto enc = b.Finish(1, 1, 1, 0);
  for (size_t byte = 0; byte < enc.size(); byte++) {
    for (int bit = 0; bit < 8; bit++) {
      auto bad = enc;
      bad[byte] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_EQ(DecodeTxn(bad).status().code(), StatusCode::kCorruption)
          << "byte " << byte << " bit " << bit;
    }
  }
  for (size_t n = 0; n < enc.size(); n++) {
    EXPECT_FALSE(DecodeTxn(std::span(enc).first(n)).ok()) << n;
  }
}

TEST(Txn, RandomGarbageNeverDecodesOrCrashes) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; i++) {
    std::vector<uint8_t> junk(rng() % 200);
    for (auto& x : junk) x = static_cast<uint8_t>(rng());
    if (junk.size() >= 8) {
      // Give half of them the right magic so the length/count checks are reached.
      if (i % 2) {
        junk[4] = 0x41, junk[5] = 0x54, junk[6] = 0x58, junk[7] = 0x4E;
      }
    }
    EXPECT_FALSE(DecodeTxn(junk).ok());
  }
}

class FakeOpLogs : public OpLogSource {
 public:
  Result<std::span<const uint8_t>> Payload(uint64_t fe, uint64_t seq) override {
    if (fe == 1 && seq == 5) return std::span<const uint8_t>(payload);
    return Status::NotFound("no op log " + std::to_string(seq));
  }
  std::vector<uint8_t> payload = Bytes({10, 11, 12, 13, 14, 15, 16, 17});
};

struct Area {
  std::vector<uint8_t> mem = std::vector<uint8_t>(4096, 0);
  ApplyTarget target() {
    return ApplyTarget{mem.data(), mem.size(), 1024, 4096, pm::DramPersister()};
  }
};

TEST(Applier, AppliesInOrderWithSeqlockAndPointers) {
  Area area;
  FakeOpLogs logs;
  TxnBuilder b;
  b.Write(1024, Bytes({1, 2, 3, 4}));
  b.Write(1026, Bytes({9}));  // overlapping later write wins
  b.WritePointer(2000, 4, 5, 2);
  auto enc = b.Finish(1, 1, 5, 64);
  auto v = DecodeTxn(enc);
  ASSERT_TRUE(v.ok());
  auto st = ApplyTxn(*v, area.target(), &logs);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->entries, 3u);
  EXPECT_EQ(area.mem[1024], 1);
  EXPECT_EQ(area.mem[1026], 9);
  EXPECT_EQ(area.mem[1027], 4);
  EXPECT_EQ(area.mem[2000], 12);
  EXPECT_EQ(area.mem[2003], 15);
  EXPECT_EQ(LoadSequence(area.mem.data(), 64), 2u);
  // Re-applying (recovery redo) gives the same bytes and a new even sequence number.
  ASSERT_TRUE(ApplyTxn(*v, area.target(), &logs).ok());
  EXPECT_EQ(area.mem[1026], 9);
  EXPECT_EQ(LoadSequence(area.mem.data(), 64), 4u);
  // A sequence number left odd by a crash mid-apply becomes even after the redo.
  area.mem[64] = 5;
  ASSERT_TRUE(ApplyTxn(*v, area.target(), &logs).ok());
  EXPECT_EQ(LoadSequence(area.mem.data(), 64), 6u);
}

TEST(Applier, RejectsBadTransactionsWithoutWritingAnything) {
  FakeOpLogs logs;
  auto check = [&](TxnBuilder& b, uint64_t seq_addr, StatusCode code, const char* what) {
    Area area;
    auto before = area.mem;
    auto enc = b.Finish(1, 1, 1, seq_addr);
    auto v = DecodeTxn(enc);
    ASSERT_TRUE(v.ok());
    auto st = ApplyTxn(*v, area.target(), &logs);
    EXPECT_EQ(st.status().code(), code) << what << ": " << st.status().ToString();
    EXPECT_EQ(area.mem, before) << what;
  };
  auto one = Bytes({1});
  {
    TxnBuilder b;
    b.Write(1024, one);
    b.Write(1000, one);  // below the data area: the first, valid entry must not be applied either
    check(b, 0, StatusCode::kRemoteAccessError, "below data area");
  }
  {
    TxnBuilder b;
    b.Write(4095, Bytes({1, 2}));
    check(b, 0, StatusCode::kRemoteAccessError, "past the end");
  }
  {
    TxnBuilder b;
    b.Write(~uint64_t{0} - 1, Bytes({1, 2, 3}));
    check(b, 0, StatusCode::kRemoteAccessError, "address wraps");
  }
  {
    TxnBuilder b;
    b.Write(1024, one);
    check(b, 65, StatusCode::kRemoteAccessError, "misaligned seq");
  }
  {
    TxnBuilder b;
    b.Write(1024, one);
    check(b, 4096, StatusCode::kRemoteAccessError, "seq outside pool");
  }
  {
    TxnBuilder b;
    b.Write(1024, one);
    check(b, 1024, StatusCode::kRemoteAccessError, "entry overwrites seq");
  }
  {
    TxnBuilder b;
    b.WritePointer(1024, 4, 6, 0);
    check(b, 0, StatusCode::kNotFound, "missing op log");
  }
  {
    TxnBuilder b;
    b.WritePointer(1024, 4, 5, 6);
    check(b, 0, StatusCode::kCorruption, "range beyond op log payload");
  }
  Area area;
  TxnBuilder b;
  b.WritePointer(1024, 4, 5, 0);
  auto enc = b.Finish(1, 1, 1, 0);
  auto view = DecodeTxn(enc);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(ApplyTxn(*view, area.target(), nullptr).status().code(), StatusCode::kNotFound);
}

TEST(Applier, AppliedBytesSurvivePowerLoss) {
  std::string path = ::testing::TempDir() + "/applier_crash_pool";
  std::remove(path.c_str());
  pm::PoolOptions po;
  po.crash_sim = true;
  auto pool = pm::Pool::Create(path, 1 << 20, po);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  ApplyTarget t{(*pool)->base(), (*pool)->size(), 8192, (*pool)->size(), (*pool)->persister()};
  TxnBuilder b;
  std::vector<uint8_t> data(3000);
  for (size_t i = 0; i < data.size(); i++) data[i] = static_cast<uint8_t>(i * 7 + 1);
  b.Write(10000, data);
  auto enc = b.Finish(1, 1, 0, 4096 + 64);
  auto view = DecodeTxn(enc);
  ASSERT_TRUE(view.ok());
  ASSERT_TRUE(ApplyTxn(*view, t, nullptr).ok());
  ASSERT_TRUE((*pool)->SimulateCrash(1, 0.0, nullptr, nullptr).ok());
  EXPECT_EQ(std::memcmp((*pool)->base() + 10000, data.data(), data.size()), 0);
  EXPECT_EQ(LoadSequence((*pool)->base(), 4096 + 64), 2u);
  pool->reset();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace asymnvm::backend
