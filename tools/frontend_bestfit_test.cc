// Placement oracle for alloc::FrontendAllocator's best-fit index (the bucketed index that replaced
// the ordered set): from the outside — live objects and the slabs the allocator holds — computes
// the free ranges of every partial slab (the gaps between live objects, which the allocator keeps
// coalesced) and checks that every small Malloc returns the start of the smallest gap that fits,
// lowest address on ties, and otherwise an address in a slab with no live object. Seeded random
// mixes, three slab sizes including one with more granules than the exact buckets cover.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "alloc/backend_allocator.h"
#include "alloc/frontend_allocator.h"
#include "alloc/slab_source.h"
#include "asymnvm/pm.h"

namespace asymnvm::alloc {
namespace {

struct alignas(64) Line {
  uint8_t b[64];
};

void RunOracle(uint32_t slab, uint32_t alignment, uint64_t max_size, uint64_t seed, int ops) {
  SCOPED_TRACE("slab " + std::to_string(slab) + " seed " + std::to_string(seed));
  const uint64_t data = uint64_t{slab} * 512;
  std::vector<Line> bitmap((BackendAllocator::BitmapBytes(data, slab) + 63) / 64);
  BackendOptions bo;
  bo.data_begin = 1ull << 20;
  bo.data_size = data;
  bo.block_size = slab;
  bo.bitmap = reinterpret_cast<uint8_t*>(bitmap.data());
  bo.bitmap_size = bitmap.size() * 64;
  bo.persister = pm::DramPersister();
  auto backend = BackendAllocator::Open(bo).value();
  LocalSlabSource source(backend.get());
  FrontendOptions fo;
  fo.source = &source;
  fo.alignment = alignment;
  fo.max_empty_slabs = 1 + static_cast<uint32_t>(seed % 3);
  auto fe = FrontendAllocator::Open(fo).value();

  std::mt19937_64 rng(seed);
  std::map<uint64_t, uint64_t> live;  // addr -> rounded length (small objects only)
  std::vector<uint64_t> addrs;
  for (int op = 0; op < ops; op++) {
    if (addrs.empty() || rng() % 100 < 55) {
      const uint64_t size = 1 + rng() % max_size;
      const uint64_t len = (size + alignment - 1) / alignment * alignment;
      // Oracle: gaps of slabs that hold at least one object.
      bool found = false;
      uint64_t best_len = 0, best_addr = 0;
      for (uint64_t s : fe->Slabs()) {
        auto it = live.lower_bound(s);
        if (it == live.end() || it->first >= s + slab) continue;  // empty slab
        uint64_t cursor = s;
        auto consider = [&](uint64_t gap_start, uint64_t gap_end) {
          const uint64_t g = gap_end - gap_start;
          if (g >= len && (!found || g < best_len || (g == best_len && gap_start < best_addr))) {
            found = true;
            best_len = g;
            best_addr = gap_start;
          }
        };
        for (; it != live.end() && it->first < s + slab; ++it) {
          if (it->first > cursor) consider(cursor, it->first);
          cursor = it->first + it->second;
        }
        if (cursor < s + slab) consider(cursor, s + slab);
      }
      auto m = fe->Malloc(size);
      if (!m.ok()) {
        ASSERT_EQ(m.status().code(), StatusCode::kResourceExhausted);
        ASSERT_FALSE(found) << "a fitting gap existed";
        continue;
      }
      if (found) {
        ASSERT_EQ(*m, best_addr) << "op " << op << ": size " << size << ", best gap " << best_len;
      } else {
        const uint64_t s = *m - (*m - bo.data_begin) % slab;
        auto it = live.lower_bound(s);
        ASSERT_TRUE(it == live.end() || it->first >= s + slab)
            << "op " << op << ": no gap fit, but the object went into a non-empty slab";
      }
      live[*m] = len;
      addrs.push_back(*m);
    } else {
      const size_t i = rng() % addrs.size();
      ASSERT_TRUE(fe->Free(addrs[i]).ok());
      live.erase(addrs[i]);
      addrs[i] = addrs.back();
      addrs.pop_back();
    }
  }
  EXPECT_EQ(fe->stats().objects_live, live.size());
}

TEST(FrontendBestFit, MatchesOracle_SmallSlabs) {
  for (uint64_t seed : {1, 2, 3}) RunOracle(1024, 16, 128, seed, 4000);
}

TEST(FrontendBestFit, MatchesOracle_4KiBSlabs) {
  for (uint64_t seed : {4, 5}) RunOracle(4096, 16, 600, seed, 4000);
}

// 128 KiB slabs with 8-byte alignment: 16384 granules, so long ranges use the ordered fallback.
TEST(FrontendBestFit, MatchesOracle_BeyondExactBuckets) {
  for (uint64_t seed : {6, 7}) RunOracle(128 * 1024, 8, 40000, seed, 1500);
}

}  // namespace
}  // namespace asymnvm::alloc
