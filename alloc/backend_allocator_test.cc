#include "alloc/backend_allocator.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <random>
#include <set>
#include <thread>

#include "alloc/alloc_test_util.h"
#include "common/checksum.h"
#include "common/coding.h"
#include "common/crash_point.h"

namespace asymnvm::alloc {
namespace {

using testing::BackendEnv;
using testing::CutPersister;
using testing::ExtentModel;

constexpr uint64_t kPool = 2u << 20;
constexpr uint32_t kBlock = 512;  // ~4000 blocks in 2 MiB: five bitmap chunks

// Chunk copy k of chunk c inside the bitmap area (doc/alloc.md).
uint8_t* CopyAt(uint8_t* bitmap, uint64_t c, int k) { return bitmap + 256 + c * 512 + k * 256; }

TEST(BackendAllocator, Open_FreshArea_FormatsAndHandsOutAlignedSlabs) {
  BackendEnv env(kPool, kBlock);
  ASSERT_TRUE(env.OpenAllocator().ok());
  BackendAllocator* a = env.alloc();
  EXPECT_EQ(a->blocks_total(), env.geometry().data_size / kBlock);
  auto s1 = a->AllocSlab();
  auto s2 = a->AllocSlab();
  ASSERT_TRUE(s1.ok() && s2.ok());
  EXPECT_NE(s1.value(), s2.value());
  for (uint64_t s : {s1.value(), s2.value()}) {
    EXPECT_GE(s, a->data_begin());
    EXPECT_LT(s, a->data_end());
    EXPECT_EQ((s - a->data_begin()) % kBlock, 0u);
    EXPECT_EQ(a->ExtentBytes(s).value(), kBlock);
  }
  auto st = a->stats();
  EXPECT_EQ(st.blocks_used, 2u);
  EXPECT_EQ(st.extents_used, 2u);
  EXPECT_EQ(st.slab_allocs, 2u);
  ASSERT_TRUE(a->Free(s1.value()).ok());
  EXPECT_EQ(a->stats().blocks_used, 1u);
  EXPECT_EQ(a->stats().frees, 1u);
}

TEST(BackendAllocator, Open_BadOptions_InvalidArgument) {
  BackendEnv env(kPool, kBlock);
  auto o = env.Options();
  auto check = [&](BackendOptions bad, const char* what) {
    auto r = BackendAllocator::Open(bad);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument)
        << what << ": " << r.status().ToString();
  };
  auto b = o;
  b.block_size = 1000;
  check(b, "block size not a power of two");
  b = o;
  b.block_size = 32;
  check(b, "block size too small");
  b = o;
  b.data_begin = 0;
  check(b, "null data_begin");
  b = o;
  b.data_size = 100;
  check(b, "no block");
  b = o;
  b.bitmap_size = 300;
  check(b, "bitmap too small");
  b = o;
  b.persister = nullptr;
  check(b, "no persister");
  b = o;
  b.bitmap = o.bitmap + 8;
  check(b, "misaligned bitmap");
}

TEST(BackendAllocator, Open_OtherGeometry_InvalidArgumentNamesIt) {
  BackendEnv env(kPool, kBlock);
  ASSERT_TRUE(env.OpenAllocator().ok());
  env.CloseAll();
  ASSERT_TRUE(env.Restart().ok());
  auto o = env.Options();
  o.data_size -= kBlock * 10;
  auto r = BackendAllocator::Open(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("formatted for"), std::string::npos) << r.status().ToString();
}

TEST(BackendAllocator, Exhaustion_ResourceExhaustedThenRecoversAfterFree) {
  BackendEnv env(kPool, kBlock);
  ASSERT_TRUE(env.OpenAllocator().ok());
  BackendAllocator* a = env.alloc();
  std::vector<uint64_t> got;
  for (uint64_t i = 0; i < a->blocks_total(); i++) {
    auto r = a->AllocSlab();
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    got.push_back(r.value());
  }
  auto r = a->AllocSlab();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(r.status().retryable());
  auto l = a->AllocLarge(2 * kBlock);
  EXPECT_EQ(l.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(a->stats().failed_allocs, 2u);
  // Free every other slab: plenty of space, but no run of two blocks.
  for (size_t i = 0; i < got.size(); i += 2) ASSERT_TRUE(a->Free(got[i]).ok());
  EXPECT_TRUE(a->AllocSlab().ok());
  l = a->AllocLarge(kBlock + 1);
  EXPECT_EQ(l.status().code(), StatusCode::kResourceExhausted) << "fragmented";
  ASSERT_TRUE(a->Free(got[3]).ok());  // joins the free blocks 2,3,4
  l = a->AllocLarge(3 * kBlock);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l.value(), got[2]);
}

TEST(BackendAllocator, Free_Errors_AreClear) {
  BackendEnv env(kPool, kBlock);
  ASSERT_TRUE(env.OpenAllocator().ok());
  BackendAllocator* a = env.alloc();
  auto slab = a->AllocSlab().value();
  auto big = a->AllocLarge(5 * kBlock).value();
  EXPECT_EQ(a->ExtentBytes(big).value(), 5u * kBlock);
  // Middle of an extent.
  Status st = a->Free(big + 2 * kBlock);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  // Unaligned, before, after the area.
  EXPECT_EQ(a->Free(slab + 8).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Free(a->data_begin() - kBlock).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Free(a->data_end()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->Free(0).code(), StatusCode::kInvalidArgument);
  // Double free.
  ASSERT_TRUE(a->Free(slab).ok());
  st = a->Free(slab);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  ASSERT_TRUE(a->Free(big).ok());
  EXPECT_EQ(a->Free(big).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->Free(big + kBlock).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(a->stats().blocks_used, 0u);
  // Sizes.
  EXPECT_EQ(a->AllocLarge(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a->AllocLarge(a->data_end() - a->data_begin() + 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(a->AllocLarge(UINT64_MAX).status().code(), StatusCode::kInvalidArgument);
  auto all = a->AllocLarge(a->data_end() - a->data_begin());
  ASSERT_TRUE(all.ok()) << "the whole area in one extent: " << all.status().ToString();
  EXPECT_EQ(a->stats().blocks_used, a->blocks_total());
}

// Random AllocSlab / AllocLarge / Free / bad frees against a model; restarts from the pool file
// every few hundred operations and compares the recovered slab-level state.
TEST(BackendAllocator, Randomized_MatchesModelAcrossRestarts) {
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    BackendEnv env(kPool, kBlock);
    ASSERT_TRUE(env.OpenAllocator().ok());
    std::mt19937_64 rng(seed);
    ExtentModel model(env.alloc()->data_begin(), env.alloc()->blocks_total(), kBlock);
    const uint64_t nblocks = env.alloc()->blocks_total();
    for (int op = 0; op < 3000; op++) {
      BackendAllocator* a = env.alloc();
      int r = static_cast<int>(rng() % 100);
      if (r < 40) {
        auto s = a->AllocSlab();
        if (s.ok()) {
          model.Add(s.value(), kBlock);
        } else {
          ASSERT_EQ(s.status().code(), StatusCode::kResourceExhausted);
          ASSERT_EQ(model.UsedBlocks(), nblocks);
        }
      } else if (r < 52) {
        // Mostly small extents, sometimes ones spanning several bitmap chunks.
        uint64_t blocks = rng() % 10 == 0 ? 1 + rng() % 2500 : 1 + rng() % 12;
        uint64_t bytes = blocks * kBlock - rng() % kBlock;
        auto l = a->AllocLarge(bytes);
        if (l.ok()) {
          model.Add(l.value(), blocks * kBlock);
        } else {
          ASSERT_EQ(l.status().code(), StatusCode::kResourceExhausted) << l.status().ToString();
          ASSERT_LT(model.LongestFreeRun(), blocks);
        }
      } else if (r < 92) {
        if (model.live().empty()) continue;
        auto it = model.live().begin();
        std::advance(it, rng() % model.live().size());
        uint64_t addr = it->first;
        ASSERT_TRUE(a->Free(addr).ok());
        model.Remove(addr);
      } else {
        uint64_t addr = a->data_begin() + (rng() % nblocks) * kBlock;
        int kind = model.Classify(addr);
        if (kind == 1) continue;
        Status st = a->Free(addr);
        ASSERT_EQ(st.code(),
                  kind == 0 ? StatusCode::kFailedPrecondition : StatusCode::kInvalidArgument)
            << st.ToString();
        ASSERT_EQ(a->Free(addr + 1 + rng() % (kBlock - 1)).code(), StatusCode::kInvalidArgument);
      }
      if (op % 500 == 499) {
        ASSERT_TRUE(env.Restart().ok());
        ASSERT_EQ(env.alloc()->Extents(), model.Extents());
      }
    }
    ASSERT_EQ(env.alloc()->Extents(), model.Extents());
    auto st = env.alloc()->stats();
    EXPECT_EQ(st.blocks_used, model.UsedBlocks());
    EXPECT_EQ(st.extents_used, model.live().size());
  }
}

TEST(BackendAllocator, Concurrent_AllocSlab_NoDuplicates) {
  BackendEnv env(kPool, kBlock);
  ASSERT_TRUE(env.OpenAllocator().ok());
  BackendAllocator* a = env.alloc();
  constexpr int kThreads = 4;
  std::vector<std::vector<uint64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      // Each thread also frees some of its own slabs to mix the paths.
      for (int i = 0;; i++) {
        auto r = a->AllocSlab();
        if (!r.ok()) break;
        if (i % 7 == 3) {
          if (!a->Free(r.value()).ok()) break;
          continue;
        }
        got[t].push_back(r.value());
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<uint64_t> all;
  size_t total = 0;
  for (auto& v : got) {
    total += v.size();
    all.insert(v.begin(), v.end());
  }
  EXPECT_EQ(all.size(), total) << "a slab was handed out twice";
  EXPECT_EQ(total, a->blocks_total());
  ASSERT_TRUE(env.Restart().ok());
  EXPECT_EQ(env.alloc()->stats().blocks_used, total);
}

TEST(BackendAllocator, CorruptBitmap_BothCopies_Corruption) {
  BackendEnv env(kPool, kBlock);
  ASSERT_TRUE(env.OpenAllocator().ok());
  ASSERT_TRUE(env.alloc()->AllocSlab().ok());
  env.CloseAll();
  // Flip one bit in each copy of chunk 0 (bitmap at pool offset 4096).
  const uint64_t off = env.geometry().bitmap_offset + 256;
  auto bytes = pm::testing::ReadFileBytes(env.path());
  bytes[off + 20] ^= 0x10;
  bytes[off + 256 + 20] ^= 0x10;
  pm::testing::WriteFileBytes(env.path(), bytes);
  Status st = env.Restart();
  ASSERT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("chunk 0"), std::string::npos) << st.ToString();
}

TEST(BackendAllocator, CorruptBitmap_Header_Corruption) {
  BackendEnv env(kPool, kBlock);
  ASSERT_TRUE(env.OpenAllocator().ok());
  env.CloseAll();
  auto bytes = pm::testing::ReadFileBytes(env.path());
  bytes[env.geometry().bitmap_offset + 20] ^= 0x01;  // data_begin field
  pm::testing::WriteFileBytes(env.path(), bytes);
  EXPECT_EQ(env.Restart().code(), StatusCode::kCorruption);
}

TEST(BackendAllocator, LostHeader_WithAllocations_NotReformatted) {
  BackendEnv env(kPool, kBlock);
  ASSERT_TRUE(env.OpenAllocator().ok());
  ASSERT_TRUE(env.alloc()->AllocSlab().ok());
  env.CloseAll();
  pm::testing::PatchFile(env.path(), env.geometry().bitmap_offset, std::vector<uint8_t>(64, 0));
  Status st = env.Restart();
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
}

TEST(BackendAllocator, CorruptBitmap_ValidChecksumBrokenRule_Corruption) {
  // A continuation bit with no head, re-checksummed as doc/alloc.md describes: the structural
  // check still refuses it.
  BackendEnv env(kPool, kBlock);
  ASSERT_TRUE(env.OpenAllocator().ok());
  env.CloseAll();
  ASSERT_TRUE(env.Restart().ok());
  uint8_t* copy = CopyAt(env.bitmap(), 1, 0);  // chunk 1, copy A (generation 1 after format)
  copy[8 + 3] |= 0x04;                         // alloc bit of block 992 + 26, head bit clear
  uint8_t idx[8];
  PutLe64(idx, 1);
  PutLe32(copy, Crc32c(copy + 4, 252, Crc32c(idx, 8)));
  env.pool()->persister()->Persist(copy, 256);
  Status st = env.OpenAllocator();
  ASSERT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("no head"), std::string::npos) << st.ToString();
}

TEST(BackendAllocator, TornNewerCopy_OlderCopyUsed) {
  BackendEnv env(kPool, kBlock);
  ASSERT_TRUE(env.OpenAllocator().ok());
  uint64_t s1 = env.alloc()->AllocSlab().value();  // chunk 0 -> copy B (gen 2)
  uint64_t s2 = env.alloc()->AllocSlab().value();  // chunk 0 -> copy A (gen 3)
  (void)s2;
  env.CloseAll();
  // Tear copy A (the newest): recovery falls back to copy B, which holds s1 only.
  auto bytes = pm::testing::ReadFileBytes(env.path());
  bytes[env.geometry().bitmap_offset + 256 + 100] ^= 0xFF;
  pm::testing::WriteFileBytes(env.path(), bytes);
  ASSERT_TRUE(env.Restart().ok());
  EXPECT_EQ(env.alloc()->stats().torn_copies_recovered, 1u);
  EXPECT_EQ(env.alloc()->Extents(), (std::vector<Extent>{{s1, kBlock}}));
  // The next write goes to the torn copy and heals it.
  ASSERT_TRUE(env.alloc()->AllocSlab().ok());
  ASSERT_TRUE(env.Restart().ok());
  EXPECT_EQ(env.alloc()->stats().torn_copies_recovered, 0u);
}

// Power loss at a random persist inside a random operation (crash_sim pool): every operation that
// returned before the cut is intact; the interrupted one either happened or did not.
TEST(BackendAllocator, CrashSim_PowerLossMidOperation_AckedStateSurvives) {
  for (uint64_t seed : {11, 12, 13}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    BackendEnv env(kPool, kBlock, /*crash_sim=*/true);
    std::mt19937_64 rng(seed);
    auto cut = std::make_unique<CutPersister>(env.pool()->persister(), env.bitmap(),
                                              env.geometry().bitmap_bytes);
    ASSERT_TRUE(env.OpenAllocator(cut.get()).ok());
    ExtentModel model(env.alloc()->data_begin(), env.alloc()->blocks_total(), kBlock);
    uint64_t intents = 0, torn = 0;
    for (int trial = 0; trial < 60; trial++) {
      cut->set_budget(static_cast<int64_t>(rng() % 40));
      // In-flight operation when the cut hits: alloc (addr unknown until it returns) or free.
      bool inflight_alloc = false;
      uint64_t inflight_blocks = 0, inflight_free = 0;
      while (!cut->cut()) {
        BackendAllocator* a = env.alloc();
        int r = static_cast<int>(rng() % 100);
        if (r < 55 || model.live().empty()) {
          uint64_t blocks = r < 35 ? 1 : (rng() % 8 == 0 ? 900 + rng() % 1200 : 1 + rng() % 6);
          auto res = blocks == 1 ? a->AllocSlab() : a->AllocLarge(blocks * kBlock);
          if (cut->cut()) {
            inflight_alloc = true;
            inflight_blocks = blocks;
            break;
          }
          if (res.ok()) model.Add(res.value(), blocks * kBlock);
        } else {
          auto it = model.live().begin();
          std::advance(it, rng() % model.live().size());
          uint64_t addr = it->first;
          ASSERT_TRUE(a->Free(addr).ok());
          if (cut->cut()) {
            inflight_free = addr;
            break;
          }
          model.Remove(addr);
        }
      }
      cut->Restore();
      uint64_t dropped = 0, kept = 0;
      ASSERT_TRUE(env.pool()->SimulateCrash(seed * 1000 + trial, 0.5, &dropped, &kept).ok());
      cut = std::make_unique<CutPersister>(env.pool()->persister(), env.bitmap(),
                                           env.geometry().bitmap_bytes);
      Status st = env.OpenAllocator(cut.get());
      ASSERT_TRUE(st.ok()) << "trial " << trial << ": " << st.ToString();
      intents += env.alloc()->stats().intents_recovered;
      torn += env.alloc()->stats().torn_copies_recovered;
      std::vector<Extent> got = env.alloc()->Extents();
      std::vector<Extent> want = model.Extents();
      if (inflight_free != 0) {
        if (got != want) {
          model.Remove(inflight_free);
          ASSERT_EQ(got, model.Extents()) << "trial " << trial << ": not before nor after the free";
        }
      } else if (inflight_alloc && got != want) {
        // Exactly one extra extent of the requested size.
        ASSERT_EQ(got.size(), want.size() + 1) << "trial " << trial;
        std::vector<Extent> extra;
        std::set_difference(got.begin(), got.end(), want.begin(), want.end(),
                            std::back_inserter(extra));
        ASSERT_EQ(extra.size(), 1u);
        ASSERT_EQ(extra[0].bytes, inflight_blocks * kBlock);
        model.Add(extra[0].addr, extra[0].bytes);
        ASSERT_EQ(got, model.Extents());
      } else {
        ASSERT_EQ(got, want) << "trial " << trial;
      }
    }
    // The campaign must actually have exercised the recovery paths.
    EXPECT_GT(intents + torn, 0u);
  }
}

// A real process killed (SIGKILL) at a named crash point inside the bitmap update; the parent
// reopens the pool file and finds every acknowledged allocation.
TEST(BackendAllocator, KilledProcess_AtCrashPoint_AckedAllocationsSurvive) {
  for (uint64_t nth : {3, 10, 17, 31}) {
    SCOPED_TRACE("crash at chunk write " + std::to_string(nth));
    BackendEnv env(kPool, kBlock);
    ASSERT_TRUE(env.OpenAllocator().ok());
    env.CloseAll();
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      if (!env.Restart().ok()) _exit(3);
      ArmCrashPoint("alloc.chunk_written", nth);
      std::mt19937_64 rng(nth);
      for (int i = 0; i < 1000; i++) {
        uint64_t blocks = i % 5 == 4 ? 500 : 1;  // some of these span two chunks
        auto r = blocks == 1 ? env.alloc()->AllocSlab() : env.alloc()->AllocLarge(blocks * kBlock);
        if (!r.ok()) _exit(4);
        uint64_t rec[2] = {r.value(), blocks * kBlock};
        if (write(fds[1], rec, sizeof(rec)) != sizeof(rec)) _exit(5);
      }
      _exit(0);
    }
    close(fds[1]);
    std::vector<Extent> acked;
    uint64_t rec[2];
    while (read(fds[0], rec, sizeof(rec)) == sizeof(rec)) acked.push_back({rec[0], rec[1]});
    close(fds[0]);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
    ASSERT_TRUE(env.Restart().ok());
    std::vector<Extent> got = env.alloc()->Extents();
    std::sort(acked.begin(), acked.end());
    for (const Extent& e : acked) {
      EXPECT_TRUE(std::binary_search(got.begin(), got.end(), e)) << "lost " << e.addr;
    }
    EXPECT_LE(got.size(), acked.size() + 1) << "at most the interrupted allocation is extra";
  }
}

}  // namespace
}  // namespace asymnvm::alloc
