#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "fabric/rowan/entry.h"
#include "fabric/rowan/scanner.h"
#include "tests/common/status_assert.h"

namespace asymnvm::rowan {
namespace {

std::vector<uint8_t> Payload(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Lands blocks at stride-aligned offsets of a segment, as the multi-packet SRQ does.
struct Segment {
  std::vector<uint8_t> bytes;
  size_t tail = 0;
  explicit Segment(size_t size) : bytes(size, 0) {}
  bool Land(const std::vector<uint8_t>& block, size_t* at = nullptr) {
    size_t need = (block.size() + kStride - 1) / kStride * kStride;
    if (tail + need > bytes.size()) return false;
    std::memcpy(bytes.data() + tail, block.data(), block.size());
    if (at) *at = tail;
    tail += need;
    return true;
  }
};

TEST(RowanEntry, SingleBlockRoundTripsThroughScanner) {
  Segment seg(4096);
  auto payload = Payload(100, 1);
  auto blocks = EncodeEntry({.type = 7, .owner = 3, .version = 42}, payload);
  ASSERT_TRUE(blocks.ok());
  ASSERT_EQ(blocks->size(), 1u);
  ASSERT_TRUE(seg.Land((*blocks)[0]));
  Scanner scanner;
  std::vector<std::vector<uint8_t>> got;
  scanner.ScanSegment(seg.bytes, 0, [&](const ScannedEntry& e) {
    EXPECT_EQ(e.meta.type, 7);
    EXPECT_EQ(e.meta.owner, 3);
    EXPECT_EQ(e.meta.version, 42u);
    got.emplace_back(e.payload.begin(), e.payload.end());
  });
  scanner.Finish();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0], payload);
  EXPECT_EQ(scanner.report().corrupt_runs, 0u);
}

// Found by rowan_entry_fuzz: a block whose checksum holds but whose block count does not match
// its entry length (a multi-block entry of length 0 — reassembled with a memcpy of a null
// pointer — or of 3 GB — a 3 GB reassembly buffer) is reported as a bad landing, never
// reassembled; the entries around it are still yielded.
TEST(RowanEntry, BlockCountMustMatchEntryLength) {
  const size_t per_block = MaxBlockPayload(kDefaultMtu);
  struct Case {
    uint16_t count;
    uint32_t total;
  };
  for (const Case c : {Case{2, 0}, Case{2, 3000000000u}, Case{3, static_cast<uint32_t>(per_block)},
                       Case{2, static_cast<uint32_t>(2 * per_block + 1)}}) {
    Segment seg(16384);
    auto good = EncodeEntry({1, 1, 1}, Payload(100, 1));
    ASSERT_TRUE(good.ok());
    ASSERT_TRUE(seg.Land((*good)[0]));
    const EntryMeta meta{7, 2, 11};
    const std::vector<uint8_t> payload = Payload(c.total == 0 ? 0 : 64, 2);
    for (uint16_t s = 0; s < c.count; s++) {
      std::vector<uint8_t> block(kBlockHeaderSize + payload.size());
      EncodeBlock(meta, c.count, s, c.total, payload, block.data());
      ASSERT_TRUE(seg.Land(block));
    }
    auto after = EncodeEntry({1, 1, 2}, Payload(50, 3));
    ASSERT_TRUE(seg.Land((*after)[0]));
    Scanner sc(kDefaultMtu);
    std::vector<uint64_t> yielded;
    sc.ScanSegment(seg.bytes, 1, [&](const ScannedEntry& e) { yielded.push_back(e.meta.version); });
    sc.Finish();
    EXPECT_EQ(yielded, (std::vector<uint64_t>{1, 2}))
        << "count " << c.count << " total " << c.total;
    EXPECT_EQ(sc.report().corrupt_runs, c.count) << "count " << c.count << " total " << c.total;
    EXPECT_EQ(sc.report().incomplete_entries, 0u);
  }
}

TEST(RowanEntry, TypeZeroAndBadMtuRejected) {
  auto p = Payload(10, 2);
  EXPECT_EQ(EncodeEntry({.type = 0}, p).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeEntry({.type = 1}, p, 32).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeEntry({.type = 1}, p, 100).status().code(), StatusCode::kInvalidArgument);
}

TEST(RowanEntry, LargerThanMtuSplitsAndReassemblesNonAdjacentBlocksAcrossSegments) {
  const size_t mtu = 256;
  auto big = Payload(1000, 3);  // 224 B per block → 5 blocks
  auto blocks = EncodeEntry({.type = 1, .owner = 9, .version = 5}, big, mtu);
  ASSERT_TRUE(blocks.ok());
  ASSERT_EQ(blocks->size(), 5u);
  auto small = EncodeEntry({.type = 2, .owner = 1, .version = 1}, Payload(40, 4), mtu);
  ASSERT_TRUE(small.ok());
  // Blocks land out of order, interleaved with another sender, spread over two segments.
  Segment s0(1024), s1(1024);
  ASSERT_TRUE(s0.Land((*blocks)[3]));
  ASSERT_TRUE(s0.Land((*small)[0]));
  ASSERT_TRUE(s0.Land((*blocks)[0]));
  ASSERT_TRUE(s1.Land((*blocks)[4]));
  ASSERT_TRUE(s1.Land((*blocks)[1]));
  ASSERT_TRUE(s1.Land((*blocks)[2]));
  Scanner scanner(mtu);
  std::map<uint16_t, std::vector<uint8_t>> got;
  auto sink = [&](const ScannedEntry& e) {
    got[e.meta.owner] = std::vector<uint8_t>(e.payload.begin(), e.payload.end());
  };
  scanner.ScanSegment(s0.bytes, 0, sink);
  EXPECT_EQ(got.size(), 1u) << "the big entry must not be yielded before all blocks are seen";
  scanner.ScanSegment(s1.bytes, 1, sink);
  scanner.Finish();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[9], big);
  EXPECT_EQ(scanner.report().incomplete_entries, 0u);
}

TEST(RowanEntry, MissingBlockIsReportedIncompleteNeverYielded) {
  const size_t mtu = 256;
  auto blocks = EncodeEntry({.type = 1, .owner = 2, .version = 8}, Payload(600, 5), mtu);
  ASSERT_TRUE(blocks.ok());
  Segment seg(4096);
  ASSERT_TRUE(seg.Land((*blocks)[0]));
  ASSERT_TRUE(seg.Land((*blocks)[2]));
  Scanner scanner(mtu);
  int yielded = 0;
  scanner.ScanSegment(seg.bytes, 0, [&](const ScannedEntry&) { yielded++; });
  scanner.Finish();
  EXPECT_EQ(yielded, 0);
  EXPECT_EQ(scanner.report().incomplete_entries, 1u);
  ASSERT_FALSE(scanner.report().problems.empty());
}

TEST(RowanEntry, CorruptBlockIsReportedAndScanningContinuesPastIt) {
  Segment seg(8192);
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<size_t> at;
  for (int i = 0; i < 10; i++) {
    payloads.push_back(Payload(64 + 37 * i, 100 + i));
    auto b = EncodeEntry({.type = 3, .owner = 1, .version = static_cast<uint64_t>(i)}, payloads[i]);
    ASSERT_TRUE(b.ok());
    size_t off;
    ASSERT_TRUE(seg.Land((*b)[0], &off));
    at.push_back(off);
  }
  seg.bytes[at[4] + 40] ^= 0x1;  // flip a payload bit of entry 4
  Scanner scanner;
  std::vector<BadBlock> bad;
  scanner.set_bad_sink([&](const BadBlock& b) { bad.push_back(b); });
  std::vector<uint64_t> versions;
  scanner.ScanSegment(seg.bytes, 0, [&](const ScannedEntry& e) {
    versions.push_back(e.meta.version);
    EXPECT_EQ(std::vector<uint8_t>(e.payload.begin(), e.payload.end()), payloads[e.meta.version]);
  });
  EXPECT_EQ(versions, (std::vector<uint64_t>{0, 1, 2, 3, 5, 6, 7, 8, 9}));
  EXPECT_EQ(scanner.report().corrupt_runs, 1u);
  // Only the checksum failed (DecodeBlock's sub-code kChecksumMismatch): the header's fields are
  // named, unverified.
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0].offset, at[4]);
  EXPECT_TRUE(bad[0].header_read);
  EXPECT_EQ(bad[0].meta.version, 4u);
  EXPECT_EQ(bad[0].meta.owner, 1u);
}

// DecodeBlock's failures: only a checksum mismatch carries the sub-code the scanner decides on.
TEST(RowanEntry, OnlyAChecksumMismatchCarriesItsSubCode) {
  auto b = EncodeEntry({.type = 3, .owner = 1, .version = 1}, Payload(100, 7));
  ASSERT_OK(b);
  std::vector<uint8_t> block = (*b)[0];
  BlockHeader h;
  ASSERT_OK(DecodeBlock(block.data(), block.size(), kDefaultMtu, &h));
  block[kBlockHeaderSize + 3] ^= 0x40;
  Status st = DecodeBlock(block.data(), block.size(), kDefaultMtu, &h);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_EQ(st.subcode(), StatusSubCode::kChecksumMismatch) << st.ToString();
  st = DecodeBlock(block.data(), kBlockHeaderSize - 1, kDefaultMtu, &h);
  EXPECT_EQ(st.code(), StatusCode::kCorruption);
  EXPECT_EQ(st.subcode(), StatusSubCode::kNone) << st.ToString();
}

TEST(RowanEntry, TornLandingNeverYieldsAndLaterEntriesSurvive) {
  // A torn entry: only some of its 64 B lines reached media. Every seed must yield exactly the
  // intact entries, never the torn one.
  for (uint64_t seed = 0; seed < 200; seed++) {
    std::mt19937_64 rng(seed);
    Segment seg(16384);
    std::vector<size_t> at;
    std::vector<std::vector<uint8_t>> blocks;
    for (int i = 0; i < 12; i++) {
      auto b = EncodeEntry(
          {.type = 1, .owner = static_cast<uint16_t>(i % 3), .version = static_cast<uint64_t>(i)},
          Payload(64 + rng() % 600, seed * 100 + i));
      ASSERT_TRUE(b.ok());
      blocks.push_back((*b)[0]);
      size_t off;
      ASSERT_TRUE(seg.Land(blocks.back(), &off));
      at.push_back(off);
    }
    size_t victim = rng() % at.size();
    size_t lines = BlockFootprint(blocks[victim].size() - kBlockHeaderSize) / kStride;
    bool dropped_any = false;
    for (size_t l = 0; l < lines; l++) {
      if (rng() % 2 == 0 || (l == lines - 1 && !dropped_any)) {
        std::memset(seg.bytes.data() + at[victim] + l * kStride, 0, kStride);
        dropped_any = true;
      }
    }
    Scanner scanner;
    std::set<uint64_t> got;
    scanner.ScanSegment(seg.bytes, 0, [&](const ScannedEntry& e) {
      EXPECT_TRUE(got.insert(e.meta.version).second) << "seed " << seed;
    });
    EXPECT_EQ(got.count(victim), 0u) << "seed " << seed;
    EXPECT_EQ(got.size(), at.size() - 1) << "seed " << seed;
  }
}

TEST(RowanEntry, DuplicateLandingYieldedOnce) {
  Segment seg(4096);
  auto b = EncodeEntry({.type = 1, .owner = 4, .version = 77}, Payload(80, 9));
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(seg.Land((*b)[0]));
  ASSERT_TRUE(seg.Land((*b)[0]));
  Scanner scanner;
  int n = 0;
  scanner.ScanSegment(seg.bytes, 0, [&](const ScannedEntry&) { n++; });
  EXPECT_EQ(n, 1);
  EXPECT_EQ(scanner.report().duplicate_blocks, 1u);
}

TEST(RowanEntry, DecodeNeverReadsPastAvailableBytes) {
  auto b = EncodeEntry({.type = 1, .owner = 1, .version = 1}, Payload(200, 10));
  ASSERT_TRUE(b.ok());
  const auto& block = (*b)[0];
  for (size_t n = 0; n < block.size(); n++) {
    std::vector<uint8_t> prefix(block.begin(), block.begin() + n);  // exact-size heap copy
    BlockHeader h;
    EXPECT_FALSE(DecodeBlock(prefix.data(), prefix.size(), kDefaultMtu, &h).ok()) << n;
  }
  BlockHeader h;
  EXPECT_TRUE(DecodeBlock(block.data(), block.size(), kDefaultMtu, &h).ok());
}

}  // namespace
}  // namespace asymnvm::rowan
