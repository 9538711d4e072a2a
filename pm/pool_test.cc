// Persistence across reopen in every mode, the crash simulator, and a real process crash.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "asymnvm/pm.h"
#include "pm/pm_test_util.h"
#include "pm/sync_metrics.h"

namespace asymnvm::pm {
namespace {

using testing::TempDir;

constexpr uint64_t kPoolSize = 2 * kMinPoolSize;

std::unique_ptr<Pool> MustCreate(const std::string& path, PoolOptions opts) {
  auto pool = Pool::Create(path, kPoolSize, opts);
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return pool.ok() ? std::move(pool).value() : nullptr;
}

std::unique_ptr<Pool> MustOpen(const std::string& path, PoolOptions opts) {
  auto pool = Pool::Open(path, opts);
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return pool.ok() ? std::move(pool).value() : nullptr;
}

std::vector<uint8_t> Pattern(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() | 1);  // never zero: differs from a fresh pool
  return v;
}

bool RegionEquals(const Pool& pool, uint64_t offset, const std::vector<uint8_t>& expected) {
  return std::memcmp(pool.base() + offset, expected.data(), expected.size()) == 0;
}

bool RegionIsZero(const Pool& pool, uint64_t offset, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (pool.base()[offset + i] != 0) return false;
  }
  return true;
}

class RecordingObserver : public PersistObserver {
 public:
  void OnPersist(uint64_t offset, uint64_t length) override {
    std::lock_guard<std::mutex> lock(mu);
    ranges.emplace_back(offset, length);
  }
  std::mutex mu;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
};

struct ModeCase {
  PersistMode mode;
  bool crash_sim;
};

class PoolPersistence : public ::testing::TestWithParam<ModeCase> {};

TEST_P(PoolPersistence, PersistedData_SurvivesCloseAndReopen) {
  TempDir dir;
  std::string path = dir.File("pool");
  PoolOptions opts;
  opts.mode = GetParam().mode;
  opts.crash_sim = GetParam().crash_sim;
  const uint64_t seed = 1000 + static_cast<uint64_t>(GetParam().mode);
  SCOPED_TRACE("seed=" + std::to_string(seed));
  auto data = Pattern(seed, 10000);
  const uint64_t offset = kSuperblockSize + 123;  // deliberately unaligned
  {
    auto pool = MustCreate(path, opts);
    ASSERT_NE(pool, nullptr);
    EXPECT_NE(pool->mode(), PersistMode::kAuto);
    EXPECT_EQ(pool->crash_sim(), GetParam().crash_sim);
    if (GetParam().mode != PersistMode::kAuto) {
      EXPECT_EQ(pool->mode(), GetParam().mode);
    }
    std::memcpy(pool->base() + offset, data.data(), data.size());
    pool->persister()->Persist(pool->base() + offset, data.size());
  }
  auto pool = MustOpen(path, opts);
  ASSERT_NE(pool, nullptr);
  EXPECT_TRUE(RegionEquals(*pool, offset, data));
  // And through a plain (non-simulating) open as well.
  pool.reset();
  pool = MustOpen(path, PoolOptions{});
  ASSERT_NE(pool, nullptr);
  EXPECT_TRUE(RegionEquals(*pool, offset, data));
}

INSTANTIATE_TEST_SUITE_P(
    AllModes, PoolPersistence,
    ::testing::Values(ModeCase{PersistMode::kAuto, false}, ModeCase{PersistMode::kMsync, false},
                      ModeCase{PersistMode::kFlushOnly, false}, ModeCase{PersistMode::kAuto, true},
                      ModeCase{PersistMode::kMsync, true}, ModeCase{PersistMode::kFlushOnly, true}),
    [](const ::testing::TestParamInfo<ModeCase>& info) {
      return std::string(PersistModeName(info.param.mode)) +
             (info.param.crash_sim ? "_CrashSim" : "_Real");
    });

TEST(PoolMode, AutoOnOrdinaryFile_ResolvesToMsyncUnlessForced) {
  TempDir dir;
  auto pool = MustCreate(dir.File("pool"), PoolOptions{});
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->mode(), pool->is_dax() ? PersistMode::kFlushOnly : PersistMode::kMsync);
}

TEST(PoolObserver, EveryPersistedRange_IsReportedRelativeToBase) {
  for (PersistMode mode : {PersistMode::kMsync, PersistMode::kFlushOnly}) {
    for (bool crash_sim : {false, true}) {
      SCOPED_TRACE(std::string(PersistModeName(mode)) + (crash_sim ? " crash-sim" : ""));
      TempDir dir;
      RecordingObserver observer;
      PoolOptions opts;
      opts.mode = mode;
      opts.crash_sim = crash_sim;
      opts.observer = &observer;
      auto pool = MustCreate(dir.File("pool"), opts);
      ASSERT_NE(pool, nullptr);
      pool->persister()->Persist(pool->user_base() + 10, 100);
      pool->persister()->Flush(pool->base() + 8192, 64);
      pool->persister()->Drain();
      std::vector<std::pair<uint64_t, uint64_t>> expected{{kSuperblockSize + 10, 100}, {8192, 64}};
      EXPECT_EQ(observer.ranges, expected);
    }
  }
}

TEST(PoolSyncStats, MsyncModeCountsEveryMsyncAndFlushModeNone) {
  TempDir dir;
  PoolOptions opts;
  opts.mode = PersistMode::kMsync;
  auto pool = MustCreate(dir.File("pool"), opts);
  ASSERT_NE(pool, nullptr);
  const SyncStats before = pool->sync_stats();
  // One Drain, two close ranges: merged into one msync.
  pool->persister()->Flush(pool->user_base(), 100);
  pool->persister()->Flush(pool->user_base() + 4096, 100);
  pool->persister()->Drain();
  SyncStats s = pool->sync_stats();
  EXPECT_EQ(s.syncs - before.syncs, 1u);
  EXPECT_EQ(s.bytes - before.bytes, 4196u);
  // Ranges far apart (beyond the merge gap) are synced separately.
  pool->persister()->Flush(pool->user_base(), 64);
  pool->persister()->Flush(pool->user_base() + 512 * 1024, 64);
  pool->persister()->Drain();
  EXPECT_EQ(pool->sync_stats().syncs - s.syncs, 2u);
  // A Drain with nothing flushed by this thread does not sync.
  s = pool->sync_stats();
  pool->persister()->Drain();
  EXPECT_EQ(pool->sync_stats().syncs, s.syncs);

  TempDir dir2;
  opts.mode = PersistMode::kFlushOnly;
  auto flush_pool = MustCreate(dir2.File("pool"), opts);
  ASSERT_NE(flush_pool, nullptr);
  flush_pool->persister()->Persist(flush_pool->user_base(), 100);
  EXPECT_EQ(flush_pool->sync_stats().syncs, 0u);
}

TEST(PoolSyncStats, EveryMsyncIsTimedInTheLatencyHistogram) {
  TempDir dir;
  PoolOptions opts;
  opts.mode = PersistMode::kMsync;
  auto pool = MustCreate(dir.File("pool"), opts);
  ASSERT_NE(pool, nullptr);
  const uint64_t count_before = SyncLatency().count();
  const double sum_before = SyncLatency().sum_seconds();
  const SyncStats before = pool->sync_stats();
  for (int i = 0; i < 5; i++) {
    pool->persister()->Flush(pool->user_base() + i * 256 * 1024, 64);  // far apart: one each
  }
  pool->persister()->Drain();
  const uint64_t syncs = pool->sync_stats().syncs - before.syncs;
  EXPECT_EQ(syncs, 5u);
  EXPECT_EQ(SyncLatency().count() - count_before, syncs);
  EXPECT_GT(SyncLatency().sum_seconds(), sum_before);
  // The exposition: a histogram family with the count of the syncs so far.
  metrics::Writer w;
  WriteSyncMetrics(w, "test", static_cast<double>(pool->sync_stats().syncs), 0);
  const std::string text = metrics::Render(w.families());
  EXPECT_NE(text.find("asymnvm_pm_sync_duration_seconds_count{component=\"test\"} " +
                      std::to_string(SyncLatency().count())),
            std::string::npos)
      << text;
  // Flush mode makes no msync, so nothing is timed.
  TempDir dir2;
  opts.mode = PersistMode::kFlushOnly;
  auto flush_pool = MustCreate(dir2.File("pool"), opts);
  ASSERT_NE(flush_pool, nullptr);
  const uint64_t count = SyncLatency().count();
  flush_pool->persister()->Persist(flush_pool->user_base(), 100);
  EXPECT_EQ(SyncLatency().count(), count);
}

TEST(PoolSyncStats, ConcurrentDrainsAllCompleteAndNeverSyncMoreThanOncePerDrain) {
  TempDir dir;
  PoolOptions opts;
  opts.mode = PersistMode::kMsync;
  auto pool = MustCreate(dir.File("pool"), opts);
  ASSERT_NE(pool, nullptr);
  const SyncStats before = pool->sync_stats();
  constexpr int kThreads = 4, kEach = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; t++) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; i++) {
        uint8_t* p = pool->user_base() + (t * kEach + i) * 64;
        std::memset(p, t + 1, 64);
        pool->persister()->Persist(p, 64);
      }
    });
  }
  for (auto& th : threads) th.join();
  const uint64_t syncs = pool->sync_stats().syncs - before.syncs;
  EXPECT_GE(syncs, 1u);
  EXPECT_LE(syncs, uint64_t{kThreads * kEach});
  pool.reset();
  auto bytes = testing::ReadFileBytes(dir.File("pool"));
  for (int t = 0; t < kThreads; t++) {
    for (int i = 0; i < kEach; i++) {
      EXPECT_EQ(bytes[kSuperblockSize + (t * kEach + i) * 64], t + 1);
    }
  }
}

TEST(PoolOffsets, OffsetOfAndContains_MatchTheMapping) {
  TempDir dir;
  auto pool = MustCreate(dir.File("pool"), PoolOptions{});
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->OffsetOf(pool->base()), 0u);
  EXPECT_EQ(pool->OffsetOf(pool->user_base() + 5), kSuperblockSize + 5);
  EXPECT_EQ(pool->OffsetOf(pool->base() + pool->size()), UINT64_MAX);
  int local = 0;
  EXPECT_EQ(pool->OffsetOf(&local), UINT64_MAX);
  EXPECT_TRUE(pool->Contains(pool->base(), pool->size()));
  EXPECT_FALSE(pool->Contains(pool->base(), pool->size() + 1));
  EXPECT_TRUE(pool->Contains(pool->base() + pool->size() - 1, 1));
  EXPECT_FALSE(pool->Contains(pool->base() + pool->size() - 1, 2));
  EXPECT_FALSE(pool->Contains(&local, sizeof(local)));
}

TEST(DramPersister, AnyRange_IsANoOp) {
  std::vector<uint8_t> buf(100, 7);
  DramPersister()->Persist(buf.data(), buf.size());
  DramPersister()->Flush(nullptr, 0);
  DramPersister()->Drain();
  EXPECT_EQ(DramPersister(), DramPersister());
  EXPECT_EQ(buf, std::vector<uint8_t>(100, 7));
}

TEST(PoolCrashSim, NotEnabled_SimulateCrashIsFailedPrecondition) {
  TempDir dir;
  auto pool = MustCreate(dir.File("pool"), PoolOptions{});
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->SimulateCrash(1, 0.5, nullptr, nullptr).code(), StatusCode::kFailedPrecondition);
}

TEST(PoolCrashSim, BadProbability_IsInvalidArgument) {
  TempDir dir;
  PoolOptions opts;
  opts.crash_sim = true;
  auto pool = MustCreate(dir.File("pool"), opts);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->SimulateCrash(1, -0.1, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->SimulateCrash(1, 1.5, nullptr, nullptr).code(), StatusCode::kInvalidArgument);
}

class CrashSimTest : public ::testing::TestWithParam<PersistMode> {
 protected:
  void SetUp() override {
    PoolOptions opts;
    opts.mode = GetParam();
    opts.crash_sim = true;
    pool_ = MustCreate(dir_.File("pool"), opts);
    ASSERT_NE(pool_, nullptr);
  }
  // Writes `lines` cache lines of pattern at line-aligned offset `offset`, without persisting.
  std::vector<uint8_t> Write(uint64_t offset, size_t lines, uint64_t seed) {
    auto data = Pattern(seed, lines * kCacheLine);
    std::memcpy(pool_->base() + offset, data.data(), data.size());
    return data;
  }
  TempDir dir_;
  std::unique_ptr<Pool> pool_;
};

constexpr uint64_t kRegionA = 64 * 1024;   // persisted data
constexpr uint64_t kRegionB = 512 * 1024;  // unpersisted data
constexpr size_t kLines = 1000;

TEST_P(CrashSimTest, PersistedData_SurvivesEveryCrash) {
  for (double keep : {0.0, 0.5, 1.0}) {
    const uint64_t seed = 11 + static_cast<uint64_t>(keep * 10);
    SCOPED_TRACE("seed=" + std::to_string(seed) + " keep=" + std::to_string(keep));
    auto persisted = Write(kRegionA, kLines, seed);
    pool_->persister()->Persist(pool_->base() + kRegionA, persisted.size());
    Write(kRegionB, kLines, seed + 1);
    uint64_t dropped = 0, kept = 0;
    ASSERT_TRUE(pool_->SimulateCrash(seed, keep, &dropped, &kept).ok());
    EXPECT_TRUE(RegionEquals(*pool_, kRegionA, persisted));
    EXPECT_EQ(dropped + kept, kLines);  // only region B differed
  }
}

TEST_P(CrashSimTest, NeverFlushed_KeepZeroLosesAll) {
  Write(kRegionB, kLines, 21);
  uint64_t dropped = 0, kept = 0;
  ASSERT_TRUE(pool_->SimulateCrash(21, 0.0, &dropped, &kept).ok());
  EXPECT_EQ(dropped, kLines);
  EXPECT_EQ(kept, 0u);
  EXPECT_TRUE(RegionIsZero(*pool_, kRegionB, kLines * kCacheLine));
}

TEST_P(CrashSimTest, NeverFlushed_KeepOneKeepsAll) {
  auto data = Write(kRegionB, kLines, 22);
  uint64_t dropped = 0, kept = 0;
  ASSERT_TRUE(pool_->SimulateCrash(22, 1.0, &dropped, &kept).ok());
  EXPECT_EQ(dropped, 0u);
  EXPECT_EQ(kept, kLines);
  EXPECT_TRUE(RegionEquals(*pool_, kRegionB, data));
}

TEST_P(CrashSimTest, NeverFlushed_KeepHalfKeepsSomeLinesDeterministically) {
  const uint64_t seed = 23;
  SCOPED_TRACE("seed=" + std::to_string(seed));
  auto data = Write(kRegionB, kLines, seed);
  uint64_t dropped = 0, kept = 0;
  ASSERT_TRUE(pool_->SimulateCrash(seed, 0.5, &dropped, &kept).ok());
  EXPECT_EQ(dropped + kept, kLines);
  EXPECT_GT(kept, kLines / 4);
  EXPECT_LT(kept, 3 * kLines / 4);
  // Each line is whole: either the new content or the old (zero), never a mix.
  std::set<size_t> survivors;
  for (size_t i = 0; i < kLines; ++i) {
    const uint8_t* line = pool_->base() + kRegionB + i * kCacheLine;
    bool is_new = std::memcmp(line, data.data() + i * kCacheLine, kCacheLine) == 0;
    bool is_old = RegionIsZero(*pool_, kRegionB + i * kCacheLine, kCacheLine);
    ASSERT_TRUE(is_new != is_old) << "line " << i;
    if (is_new) survivors.insert(i);
  }
  EXPECT_EQ(survivors.size(), kept);

  // The same seed on a second pool with the same writes keeps exactly the same lines.
  TempDir dir2;
  PoolOptions opts;
  opts.mode = GetParam();
  opts.crash_sim = true;
  auto other = MustCreate(dir2.File("pool"), opts);
  ASSERT_NE(other, nullptr);
  std::memcpy(other->base() + kRegionB, data.data(), data.size());
  uint64_t dropped2 = 0, kept2 = 0;
  ASSERT_TRUE(other->SimulateCrash(seed, 0.5, &dropped2, &kept2).ok());
  EXPECT_EQ(kept2, kept);
  EXPECT_EQ(0, std::memcmp(other->base() + kRegionB, pool_->base() + kRegionB, data.size()));
}

TEST_P(CrashSimTest, FlushedNotDrained_BehavesAsUnpersisted) {
  auto data = Write(kRegionB, kLines, 24);
  pool_->persister()->Flush(pool_->base() + kRegionB, data.size());
  uint64_t dropped = 0, kept = 0;
  ASSERT_TRUE(pool_->SimulateCrash(24, 0.0, &dropped, &kept).ok());
  EXPECT_EQ(dropped, kLines);
  EXPECT_TRUE(RegionIsZero(*pool_, kRegionB, data.size()));
  // The forgotten flush is not completed by a later Drain either.
  pool_->persister()->Drain();
  ASSERT_TRUE(pool_->SimulateCrash(25, 1.0, &dropped, &kept).ok());
  EXPECT_EQ(dropped + kept, 0u);

  data = Write(kRegionB, kLines, 26);
  pool_->persister()->Flush(pool_->base() + kRegionB, data.size());
  ASSERT_TRUE(pool_->SimulateCrash(26, 1.0, &dropped, &kept).ok());
  EXPECT_EQ(kept, kLines);
  EXPECT_TRUE(RegionEquals(*pool_, kRegionB, data));
}

TEST_P(CrashSimTest, DrainOnAnotherThread_DoesNotCompleteThisThreadsFlush) {
  auto data = Write(kRegionB, kLines, 27);
  pool_->persister()->Flush(pool_->base() + kRegionB, data.size());
  std::thread other([&] { pool_->persister()->Drain(); });
  other.join();
  uint64_t dropped = 0, kept = 0;
  ASSERT_TRUE(pool_->SimulateCrash(27, 0.0, &dropped, &kept).ok());
  EXPECT_EQ(dropped, kLines);
  EXPECT_TRUE(RegionIsZero(*pool_, kRegionB, data.size()));
}

TEST_P(CrashSimTest, ConcurrentWritersPersistingOwnRanges_AllSurvive) {
  constexpr int kThreads = 4;
  std::vector<std::vector<uint8_t>> datas(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t off = kRegionA + static_cast<uint64_t>(t) * 64 * 1024;
      datas[t] = Pattern(100 + t, 64 * 1024);
      for (size_t i = 0; i < datas[t].size(); i += 256) {
        std::memcpy(pool_->base() + off + i, datas[t].data() + i, 256);
        pool_->persister()->Persist(pool_->base() + off + i, 256);
      }
    });
  }
  for (auto& th : threads) th.join();
  uint64_t dropped = 0, kept = 0;
  ASSERT_TRUE(pool_->SimulateCrash(28, 0.0, &dropped, &kept).ok());
  EXPECT_EQ(dropped, 0u);
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(RegionEquals(*pool_, kRegionA + static_cast<uint64_t>(t) * 64 * 1024, datas[t]));
  }
}

TEST_P(CrashSimTest, ReopenAfterCrash_SeesExactlyTheCrashedState) {
  const uint64_t seed = 29;
  SCOPED_TRACE("seed=" + std::to_string(seed));
  auto persisted = Write(kRegionA, kLines, seed);
  pool_->persister()->Persist(pool_->base() + kRegionA, persisted.size());
  Write(kRegionB, kLines, seed + 1);
  ASSERT_TRUE(pool_->SimulateCrash(seed, 0.5, nullptr, nullptr).ok());
  std::vector<uint8_t> crashed(pool_->base(), pool_->base() + pool_->size());
  std::string path = pool_->path();
  pool_.reset();
  auto reopened = MustOpen(path, PoolOptions{});
  ASSERT_NE(reopened, nullptr);
  EXPECT_EQ(0, std::memcmp(reopened->base(), crashed.data(), crashed.size()));
  EXPECT_TRUE(RegionEquals(*reopened, kRegionA, persisted));
}

TEST_P(CrashSimTest, CleanClose_WritesEverythingToTheFile) {
  auto data = Write(kRegionB, kLines, 30);
  std::string path = pool_->path();
  pool_.reset();
  auto reopened = MustOpen(path, PoolOptions{});
  ASSERT_NE(reopened, nullptr);
  EXPECT_TRUE(RegionEquals(*reopened, kRegionB, data));
}

TEST_P(CrashSimTest, RepeatedCrashes_SuperblockStaysValid) {
  for (uint64_t seed = 0; seed < 5; ++seed) {
    Write(0, 1, seed);  // scribble over the superblock without persisting
    ASSERT_TRUE(pool_->SimulateCrash(seed, 0.0, nullptr, nullptr).ok());
  }
  std::string path = pool_->path();
  pool_.reset();
  EXPECT_NE(MustOpen(path, PoolOptions{}), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Modes, CrashSimTest,
                         ::testing::Values(PersistMode::kMsync, PersistMode::kFlushOnly),
                         [](const ::testing::TestParamInfo<PersistMode>& info) {
                           return std::string(PersistModeName(info.param));
                         });

TEST(PoolRealCrash, ChildPersistsThenSigkills_ParentFindsPersistedData) {
  TempDir dir;
  std::string path = dir.File("pool");
  {
    auto pool = MustCreate(path, PoolOptions{});
    ASSERT_NE(pool, nullptr);
  }
  const uint64_t seed = 31;
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const auto data = Pattern(seed, 100000);
  const uint64_t offset = kSuperblockSize + 64;
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    PoolOptions opts;
    opts.mode = PersistMode::kFlushOnly;
    auto pool = Pool::Open(path, opts);
    if (!pool.ok()) _exit(2);
    Pool& p = **pool;
    for (size_t i = 0; i < data.size(); i += 1000) {
      size_t n = std::min<size_t>(1000, data.size() - i);
      std::memcpy(p.base() + offset + i, data.data() + i, n);
      p.persister()->Persist(p.base() + offset + i, n);
    }
    raise(SIGKILL);
    _exit(3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  auto pool = MustOpen(path, PoolOptions{});  // the dead child's lock is gone
  ASSERT_NE(pool, nullptr);
  EXPECT_TRUE(RegionEquals(*pool, offset, data));
}

}  // namespace
}  // namespace asymnvm::pm
