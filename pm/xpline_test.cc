// The XPLine write-combining model on known patterns.
#include <random>
#include <thread>

#include "asymnvm/pm.h"
#include "pm/pm_test_util.h"

namespace asymnvm::pm {
namespace {

TEST(XPLineModel, NothingRequested_DlwaIsZero) {
  XPLineModel model;
  model.Finish();
  EXPECT_EQ(model.requested_bytes(), 0u);
  EXPECT_EQ(model.media_bytes(), 0u);
  EXPECT_EQ(model.dlwa(), 0.0);
}

TEST(XPLineModel, SequentialStreamOf64BPersists_DlwaIsOne) {
  XPLineModel model;
  for (uint64_t off = 0; off < (4u << 20); off += 64) model.OnPersist(off, 64);
  model.Finish();
  EXPECT_EQ(model.requested_bytes(), 4u << 20);
  EXPECT_EQ(model.media_bytes(), 4u << 20);
  EXPECT_NEAR(model.dlwa(), 1.0, 0.01);
}

TEST(XPLineModel, UnalignedSequentialStream_DlwaNearOne) {
  XPLineModel model;
  for (uint64_t off = 100; off < (1u << 20); off += 40) model.OnPersist(off, 40);
  model.Finish();
  EXPECT_NEAR(model.dlwa(), 1.0, 0.01);
}

TEST(XPLineModel, Interleaved128StreamsOf64BAppends_DlwaAtLeastThree) {
  XPLineModel model;  // 64 lines: fewer than the streams, so every append misses
  constexpr uint64_t kStreams = 128;
  for (uint64_t round = 0; round < 64; ++round) {
    for (uint64_t s = 0; s < kStreams; ++s) model.OnPersist(s * (1u << 20) + round * 64, 64);
  }
  model.Finish();
  EXPECT_EQ(model.requested_bytes(), kStreams * 64 * 64);
  EXPECT_GE(model.dlwa(), 3.0);
  EXPECT_NEAR(model.dlwa(), 4.0, 0.01);
}

TEST(XPLineModel, FewInterleavedStreams_FitTheBufferAndDlwaIsOne) {
  XPLineModel model;
  for (uint64_t round = 0; round < 256; ++round) {
    for (uint64_t s = 0; s < 16; ++s) model.OnPersist(s * (1u << 20) + round * 64, 64);
  }
  model.Finish();
  EXPECT_NEAR(model.dlwa(), 1.0, 0.01);
}

TEST(XPLineModel, Random64BWritesOverLargeArea_DlwaNearFour) {
  const uint64_t seed = 8675309;
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 rng(seed);
  XPLineModel model;
  const uint64_t area_lines = (1ull << 30) / 64;
  for (int i = 0; i < 100000; ++i) model.OnPersist((rng() % area_lines) * 64, 64);
  model.Finish();
  EXPECT_NEAR(model.dlwa(), 4.0, 0.05);
}

TEST(XPLineModel, SmallKnownPattern_ExactByteCounts) {
  XPLineModel model(1024, 256);  // 4 lines
  model.OnPersist(0, 64);        // miss line 0
  EXPECT_EQ(model.requested_bytes(), 64u);
  EXPECT_EQ(model.media_bytes(), 0u);
  model.OnPersist(100, 200);  // hit line 0, miss line 1
  model.OnPersist(5, 0);      // nothing
  EXPECT_EQ(model.requested_bytes(), 264u);
  EXPECT_EQ(model.media_bytes(), 0u);
  model.OnPersist(1024, 1024);  // lines 4..7: fills the buffer, then evicts lines 0 and 1
  EXPECT_EQ(model.requested_bytes(), 1288u);
  EXPECT_EQ(model.media_bytes(), 512u);
  model.OnPersist(1024 + 255, 2);  // lines 4 and 5: hits
  EXPECT_EQ(model.media_bytes(), 512u);
  model.OnPersist(0, 1);  // miss: evicts line 6 (least recently used)
  EXPECT_EQ(model.media_bytes(), 768u);
  model.Finish();  // lines 4, 5, 7, 0
  EXPECT_EQ(model.requested_bytes(), 1291u);
  EXPECT_EQ(model.media_bytes(), 768u + 4 * 256);
  EXPECT_DOUBLE_EQ(model.dlwa(), 1792.0 / 1291.0);
  model.Finish();  // idempotent: nothing buffered
  EXPECT_EQ(model.media_bytes(), 1792u);
}

TEST(XPLineModel, LruOrder_RecentlyHitLineIsNotEvicted) {
  XPLineModel model(512, 256);  // 2 lines
  model.OnPersist(0, 64);       // line 0
  model.OnPersist(256, 64);     // line 1
  model.OnPersist(0, 64);       // hit line 0: line 1 is now LRU
  model.OnPersist(512, 64);     // line 2 evicts line 1
  EXPECT_EQ(model.media_bytes(), 256u);
  model.OnPersist(0, 64);  // still buffered
  EXPECT_EQ(model.media_bytes(), 256u);
}

TEST(XPLineModel, Reset_ClearsCountersAndBuffer) {
  XPLineModel model;
  model.OnPersist(0, 4096);
  model.Reset();
  model.Finish();
  EXPECT_EQ(model.requested_bytes(), 0u);
  EXPECT_EQ(model.media_bytes(), 0u);
}

TEST(XPLineModel, ConcurrentObservers_CountEveryByte) {
  XPLineModel model;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        model.OnPersist(static_cast<uint64_t>(t) * (1u << 24) + static_cast<uint64_t>(i) * 64, 64);
      }
    });
  }
  for (auto& th : threads) th.join();
  model.Finish();
  EXPECT_EQ(model.requested_bytes(), uint64_t{kThreads} * kPerThread * 64);
  EXPECT_GE(model.media_bytes(), model.requested_bytes());
}

TEST(XPLineModel, AsPoolObserver_MeasuresPersists) {
  testing::TempDir dir;
  XPLineModel model;
  PoolOptions opts;
  opts.mode = PersistMode::kFlushOnly;
  opts.observer = &model;
  auto pool = Pool::Create(dir.File("pool"), kMinPoolSize, opts);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  Pool& p = **pool;
  for (uint64_t off = 0; off < 64 * 1024; off += 64)
    p.persister()->Persist(p.user_base() + off, 64);
  model.Finish();
  EXPECT_EQ(model.requested_bytes(), 64u * 1024);
  EXPECT_NEAR(model.dlwa(), 1.0, 0.01);
}

}  // namespace
}  // namespace asymnvm::pm
