#include "backend/layout.h"

#include <gtest/gtest.h>

#include <vector>

namespace asymnvm::backend {
namespace {

LayoutParams Params() {
  LayoutParams p;
  p.oq_bytes = 1 << 20;
  p.rowan_segment = 256 * 1024;
  p.bitmap_bytes = [](uint64_t data, uint32_t block) { return 2 * ((data / block + 7) / 8) + 64; };
  return p;
}

TEST(Layout, PlansOrderedAlignedRegionsAndRoundTrips) {
  auto l = PlanLayout(64ull << 20, Params());
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  const Region* r[] = {&l->naming, &l->bitmap, &l->rowan, &l->oq, &l->data};
  uint64_t prev = kBackendHeaderOffset + kBackendHeaderSize;
  for (auto* x : r) {
    EXPECT_GE(x->offset, prev);
    EXPECT_EQ(x->offset % 4096, 0u);
    EXPECT_GT(x->size, 0u);
    prev = x->end();
  }
  EXPECT_LE(l->data.end(), 64ull << 20);
  EXPECT_EQ(l->data.offset % l->block_size, 0u);
  EXPECT_EQ(l->rowan.size, 8ull << 20);  // an eighth of the pool by default
  std::vector<uint8_t> h(kBackendHeaderSize);
  EncodeLayout(*l, h.data());
  auto d = DecodeLayout(h.data(), 64ull << 20);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->data.offset, l->data.offset);
  EXPECT_EQ(d->rowan.size, l->rowan.size);
  EXPECT_NE(l->Describe().find("data"), std::string::npos);
}

TEST(Layout, TooSmallPoolSaysHowLargeItMustBe) {
  auto l = PlanLayout(2ull << 20, Params());
  ASSERT_EQ(l.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(l.status().message().find("at least"), std::string::npos) << l.status().ToString();
}

TEST(Layout, BadParametersAreRejected) {
  auto p = Params();
  p.block_size = 1000;
  EXPECT_EQ(PlanLayout(64ull << 20, p).status().code(), StatusCode::kInvalidArgument);
  p = Params();
  p.oq_bytes = 0;
  EXPECT_EQ(PlanLayout(64ull << 20, p).status().code(), StatusCode::kInvalidArgument);
  p = Params();
  p.bitmap_bytes = nullptr;
  EXPECT_EQ(PlanLayout(64ull << 20, p).status().code(), StatusCode::kInvalidArgument);
}

// Found by layout_fuzz: a b-log (or OQ) size near 2^64 wrapped the offset arithmetic and the
// planner returned regions outside the pool. Every planned layout must decode back.
TEST(Layout, HugeSizesAreRefusedNotWrapped) {
  auto p = Params();
  p.rowan_bytes = 0xff00400000000080ull;
  EXPECT_EQ(PlanLayout(64ull << 20, p).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanLayout(0xff00400000000080ull, p).status().code(), StatusCode::kInvalidArgument);
  p = Params();
  p.oq_bytes = ~uint64_t{4095};
  EXPECT_EQ(PlanLayout(64ull << 20, p).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanLayout(0x0043000004000000ull * 64, Params()).status().code(),
            StatusCode::kInvalidArgument);
  p = Params();
  p.rowan_bytes = 1ull << 40;  // large but not wrapping: the usual "too small" answer
  auto small = PlanLayout(64ull << 20, p);
  EXPECT_EQ(small.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(small.status().message().find("at least"), std::string::npos);
  p = Params();
  p.rowan_bytes = 8ull << 20;
  auto l = PlanLayout(64ull << 20, p);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  std::vector<uint8_t> h(kBackendHeaderSize);
  EncodeLayout(*l, h.data());
  EXPECT_TRUE(DecodeLayout(h.data(), 64ull << 20).ok());
}

TEST(Layout, HeaderCorruptionAndForeignPoolsAreDetected) {
  auto l = PlanLayout(64ull << 20, Params());
  ASSERT_TRUE(l.ok());
  std::vector<uint8_t> h(kBackendHeaderSize, 0);
  EXPECT_EQ(DecodeLayout(h.data(), 64ull << 20).status().code(), StatusCode::kNotFound);
  EncodeLayout(*l, h.data());
  EXPECT_EQ(DecodeLayout(h.data(), 32ull << 20).status().code(), StatusCode::kCorruption);
  for (size_t byte = 0; byte < 120; byte++) {
    auto bad = h;
    bad[byte] ^= 0x10;
    EXPECT_EQ(DecodeLayout(bad.data(), 64ull << 20).status().code(), StatusCode::kCorruption)
        << byte;
  }
}

}  // namespace
}  // namespace asymnvm::backend
