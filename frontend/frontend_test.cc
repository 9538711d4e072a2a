// The front-end SDK against an in-process back-end (asymnvm::backend::Backend on a temp pool):
// API semantics per optimization level (also across session reopen and back-end restart), the page
// cache, coalescing, the writer lock, the reader seqlock, the two-tier allocator, op-log replay,
// bad input.
#include "asymnvm/frontend.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "backend/backend.h"
#include "common/coding.h"
#include "frontend/page_cache.h"
#include "tests/common/backend_fixture.h"

namespace asymnvm::frontend {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) { return test_support::TempPath("fe", name); }

// 16 MiB pool, 4 OQ buffers: small on purpose (tests fill them).
backend::BackendOptions SmallBackend(const std::string& path) {
  backend::BackendOptions o = test_support::SmallBackendOptions(path);
  o.pool_size = 16ull << 20;
  o.oq_buffers = 4;
  return o;
}

class FrontendTest : public test_support::BackendTest {
 protected:
  backend::BackendOptions BackendOptionsFor(const std::string& path) override {
    return SmallBackend(path);
  }
  std::string PoolTag() const override { return "fe"; }
  // The fixture's session with a 1 MiB cache and the default batch size.
  SessionOptions Options(uint64_t fe, Level level) {
    SessionOptions o = SessionOpts(fe, level);
    o.cache_bytes = 1 << 20;
    o.batch_ops = SessionOptions{}.batch_ops;
    return o;
  }
  std::unique_ptr<Session> OpenSession(uint64_t fe, Level level) {
    return BackendTest::OpenSession(Options(fe, level));
  }
};

std::vector<uint8_t> Bytes(size_t n, uint8_t fill) { return std::vector<uint8_t>(n, fill); }

// One "operation": op log, two memory logs, tx_write.
Status Update(Session& s, const Structure& st, uint64_t addr, uint8_t fill) {
  uint8_t params[9];
  std::memcpy(params, &addr, 8);
  params[8] = fill;
  auto seq = s.OpLog(st, 1, params);
  if (!seq.ok()) return seq.status();
  auto a = Bytes(64, fill);
  ASYMNVM_RETURN_IF_ERROR(s.MemLog(addr, a));
  auto b = Bytes(8, static_cast<uint8_t>(fill + 1));
  ASYMNVM_RETURN_IF_ERROR(s.MemLog(addr + 64, b));
  return s.TxWrite(st);
}

class LevelTest : public FrontendTest, public ::testing::WithParamInterface<Level> {};

TEST_P(LevelTest, WriteFenceReadBackAcrossReopenAndRestart) {
  const Level level = GetParam();
  std::vector<uint64_t> addrs;
  {
    auto s = OpenSession(3, level);
    ASSERT_TRUE(s);
    auto st = s->CreateRoot("kv", 7);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    for (int i = 0; i < 20; i++) {
      auto a = s->Malloc(128);
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      addrs.push_back(*a);
      ASSERT_TRUE(Update(*s, *st, *a, static_cast<uint8_t>(i + 1)).ok());
      // Read-your-writes before any fence, at every level.
      std::vector<uint8_t> got(72);
      ASSERT_TRUE(s->Read(*a, got).ok());
      EXPECT_EQ(got[0], i + 1);
      EXPECT_EQ(got[64], i + 2);
    }
    ASSERT_TRUE(s->Fence().ok());
    const Counters c = s->counters();
    if (level == Level::kNaive) {
      EXPECT_EQ(c.op_logs, 0u);
      EXPECT_EQ(c.txns, 40u);  // every write its own transaction
      EXPECT_EQ(c.fences, 41u);
    } else {
      EXPECT_EQ(c.op_logs, 20u);
      EXPECT_EQ(c.txns, level == Level::kRcb ? 1u : 20u);
    }
    EXPECT_EQ(s->applied_lpn(), c.txns);
    // A second session (another front-end) sees everything after the fence.
    auto r = OpenSession(4, Level::kNaive);
    ASSERT_TRUE(r);
    for (int i = 0; i < 20; i++) {
      std::vector<uint8_t> got(72);
      ASSERT_TRUE(r->Read(addrs[i], got).ok());
      EXPECT_EQ(got[63], i + 1);
      EXPECT_EQ(got[71], i + 2);
    }
  }
  {
    // Reopen the session: LPN continues.
    auto s = OpenSession(3, level);
    ASSERT_TRUE(s);
    EXPECT_GT(s->applied_lpn(), 0u);
    auto st = s->OpenRoot("kv");
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(Update(*s, *st, addrs[0], 0x55).ok());
    ASSERT_TRUE(s->Fence().ok());
  }
  RestartBackend();
  {
    auto s = OpenSession(3, level);
    ASSERT_TRUE(s);
    std::vector<uint8_t> got(72);
    ASSERT_TRUE(s->Read(addrs[0], got).ok());
    EXPECT_EQ(got[0], 0x55);
    ASSERT_TRUE(s->Read(addrs[19], got).ok());
    EXPECT_EQ(got[0], 20);
    EXPECT_EQ(got[64], 21);
    auto st = s->OpenRoot("kv");
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(Update(*s, *st, addrs[1], 0x66).ok());
    ASSERT_TRUE(s->Fence().ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, LevelTest,
                         ::testing::Values(Level::kNaive, Level::kR, Level::kRc, Level::kRcb),
                         [](const auto& info) { return std::string(LevelName(info.param)); });

// Not a benchmark: prints what one update and one read cost per level (round trips and wire bytes
// from the fabric counters), for doc/frontend.md. Asserts only the deterministic parts.
TEST_F(FrontendTest, PoolUuidIdentifiesTheBackendAcrossRestarts) {
  std::array<uint8_t, 16> first{};
  {
    auto s = OpenSession(7, Level::kRcb);
    ASSERT_TRUE(s);
    first = s->pool_uuid();
  }
  EXPECT_NE(first, (std::array<uint8_t, 16>{}));
  RestartBackend();
  auto s = OpenSession(7, Level::kRcb);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->pool_uuid(), first);
  // Another pool is another identity.
  const std::string other = path_ + ".other";
  std::remove(other.c_str());
  auto be2 = backend::Backend::Start(SmallBackend(other));
  ASSERT_TRUE(be2.ok()) << be2.status().ToString();
  SessionOptions o = Options(8, Level::kRcb);
  o.backends = {(*be2)->address()};
  auto s2 = Session::Open(o);
  ASSERT_TRUE(s2.ok()) << s2.status().ToString();
  EXPECT_NE((*s2)->pool_uuid(), first);
  s2->reset();
  (*be2)->Stop();
  std::remove(other.c_str());
}

TEST_F(FrontendTest, CostPerLevel) {
  constexpr int kOps = 200;
  for (Level level : {Level::kNaive, Level::kR, Level::kRc, Level::kRcb}) {
    auto s = OpenSession(30 + static_cast<int>(level), level);
    ASSERT_TRUE(s);
    auto st = s->CreateRoot("cost", 3);
    auto a = s->Malloc(8 * kOps + 64);
    ASSERT_TRUE(st.ok() && a.ok());
    const Counters c0 = s->counters();
    for (int i = 0; i < kOps; i++) ASSERT_TRUE(Update(*s, *st, *a + 8 * (i % 16), 1).ok());
    ASSERT_TRUE(s->Fence().ok());
    const Counters c1 = s->counters();
    uint8_t b[8];
    for (int i = 0; i < kOps; i++) ASSERT_TRUE(s->Read(*a + 8 * i, b).ok());
    const Counters c2 = s->counters();
    const auto w = c1.fabric - c0.fabric, r = c2.fabric - c1.fabric;
    std::printf(
        "cost %-5s update: %.2f round trips, %.0f B out; read: %.2f round trips; "
        "txns %llu op logs %llu coalesced %llu\n",
        LevelName(level), double(w.round_trips) / kOps, double(w.bytes_out) / kOps,
        double(r.round_trips) / kOps, (unsigned long long)(c1.txns - c0.txns),
        (unsigned long long)(c1.op_logs - c0.op_logs),
        (unsigned long long)(c1.coalesced - c0.coalesced));
    if (level == Level::kRc || level == Level::kRcb) {
      EXPECT_LE(r.round_trips, 2u);
    } else {
      EXPECT_EQ(r.round_trips, uint64_t{kOps});
    }
  }
}

TEST_F(FrontendTest, CacheHitsMissesAndEviction) {
  SessionOptions o = Options(5, Level::kRc);
  o.cache_bytes = 4 * 4096;  // four pages
  auto s = Session::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const uint64_t base = (*s)->data_begin();
  std::vector<uint8_t> b(16);
  ASSERT_TRUE((*s)->Read(base, b).ok());
  ASSERT_TRUE((*s)->Read(base + 100, b).ok());
  Counters c = (*s)->counters();
  EXPECT_EQ(c.cache_misses, 1u);
  EXPECT_EQ(c.cache_hits, 1u);
  EXPECT_EQ(c.remote_reads, 1u);
  // A read crossing a page boundary touches two pages.
  ASSERT_TRUE((*s)->Read(base + 4096 - 8, b).ok());
  c = (*s)->counters();
  EXPECT_EQ(c.cache_hits, 2u);
  EXPECT_EQ(c.cache_misses, 2u);
  for (int p = 2; p < 10; p++) ASSERT_TRUE((*s)->Read(base + p * 4096, b).ok());
  c = (*s)->counters();
  EXPECT_EQ(c.cache_misses, 10u);
  EXPECT_EQ(c.cache_evictions, 6u);  // ten pages through a four-page cache
  // Memory logs update cached pages.
  auto st = (*s)->CreateRoot("c", 9);
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE((*s)->Read(base + 9 * 4096, b).ok());  // cached
  auto v = Bytes(16, 0xAB);
  ASSERT_TRUE((*s)->MemLog(base + 9 * 4096, v).ok());
  ASSERT_TRUE((*s)->TxWrite(*st).ok());
  const uint64_t misses = (*s)->counters().cache_misses;
  ASSERT_TRUE((*s)->Read(base + 9 * 4096, b).ok());
  EXPECT_EQ(b, v);
  EXPECT_EQ((*s)->counters().cache_misses, misses);
  // A per-structure page size caches separately.
  std::vector<uint8_t> big(16);
  ASSERT_TRUE((*s)->Read(base + 9 * 4096, big, 1024).ok());
  EXPECT_EQ(big, v);
}

TEST(PageCacheTest, SamplingEvictsLeastUsed) {
  PageCache cache(3 * 64, 42);
  std::vector<uint8_t> page(64, 1);
  cache.Insert(64, 0, page);
  cache.Insert(64, 64, page);
  cache.Insert(64, 128, page);
  for (int i = 0; i < 5; i++) ASSERT_NE(cache.Lookup(64, 0), nullptr);
  for (int i = 0; i < 3; i++) ASSERT_NE(cache.Lookup(64, 128), nullptr);
  cache.Insert(64, 192, page);  // evicts page 64 (least used)
  EXPECT_EQ(cache.Lookup(64, 64), nullptr);
  EXPECT_NE(cache.Lookup(64, 0), nullptr);
  EXPECT_EQ(cache.evictions(), 1u);
  std::vector<uint8_t> w(8, 9);
  cache.Update(60, w);  // spans pages 0 and 64
  EXPECT_EQ(cache.Lookup(64, 0)[63], 9);
  EXPECT_EQ(cache.pages(), 3u);
  EXPECT_EQ(cache.Insert(64, 999, std::vector<uint8_t>(1000)), nullptr);  // larger than capacity
}

TEST_F(FrontendTest, BatchingCoalescesWrites) {
  auto s = OpenSession(6, Level::kRcb);
  ASSERT_TRUE(s);
  auto st = s->CreateRoot("b", 3);
  ASSERT_TRUE(st.ok());
  auto a = s->Malloc(64);
  ASSERT_TRUE(a.ok());
  for (int i = 1; i <= 10; i++) {
    ASSERT_TRUE(s->OpLog(*st, 1, {}).ok());
    auto v = Bytes(8, static_cast<uint8_t>(i));
    ASSERT_TRUE(s->MemLog(*a, v).ok());
    ASSERT_TRUE(s->TxWrite(*st).ok());
  }
  EXPECT_EQ(s->counters().txns, 0u);  // still batched
  ASSERT_TRUE(s->Fence().ok());
  Counters c = s->counters();
  EXPECT_EQ(c.txns, 1u);
  EXPECT_EQ(c.coalesced, 9u);
  auto r = OpenSession(7, Level::kNaive);
  uint8_t got[8];
  ASSERT_TRUE(r->Read(*a, got).ok());
  EXPECT_EQ(got[0], 10);
  // The batch fills by ops.
  SessionOptions o = Options(8, Level::kRcb);
  o.batch_ops = 4;
  auto s2 = Session::Open(o);
  ASSERT_TRUE(s2.ok());
  for (int i = 0; i < 9; i++) ASSERT_TRUE(Update(**s2, *st, *a, 1).ok());
  EXPECT_EQ((*s2)->counters().txns, 2u);
  ASSERT_TRUE((*s2)->Fence().ok());
  EXPECT_EQ((*s2)->counters().txns, 3u);
}

// Pointer entries (Session::MemLogFromOp): a value that is in the op log crosses the wire once —
// the transaction carries 32 bytes for it — and lands exactly, at r and rcb, whether the back-end
// indexed the op log as it landed or has to find it in the b-log (restart; hardware NIC), and
// across a restart of the back-end. Misuse is an error; the opt-out and naive send it inline.
class PointerEntryTest : public FrontendTest, public ::testing::WithParamInterface<bool> {
 protected:
  backend::BackendOptions BackendOptionsFor(const std::string& path) override {
    backend::BackendOptions o = SmallBackend(path);
    o.TEST_index_landings = GetParam();
    return o;
  }
};

TEST_P(PointerEntryTest, ValuesCrossTheWireOnceAndLandExactly) {
  constexpr int kOps = 24;
  constexpr size_t kValue = 500;
  auto value = [](int i) {
    std::vector<uint8_t> v(kValue);
    for (size_t j = 0; j < v.size(); j++) v[j] = static_cast<uint8_t>(i * 31 + j * 7);
    return v;
  };
  std::vector<uint64_t> addrs;
  uint64_t pointer_bytes = 0, inline_bytes = 0, scans = 0;
  int round = 0;
  for (const Level level : {Level::kR, Level::kRcb, Level::kNaive}) {
    for (const bool pointers : {true, false}) {
      SessionOptions o = Options(10, level);
      o.pointer_mem_logs = pointers;
      auto s = BackendTest::OpenSession(o);
      ASSERT_TRUE(s);
      auto st = s->CreateRoot("ptr" + std::to_string(round++), 7);
      ASSERT_TRUE(st.ok()) << st.status().ToString();
      const Counters before = s->counters();
      addrs.clear();
      for (int i = 0; i < kOps; i++) {
        auto a = s->Malloc(kValue + 8);
        ASSERT_TRUE(a.ok());
        addrs.push_back(*a);
        std::vector<uint8_t> params(8);
        std::memcpy(params.data(), &*a, 8);
        const auto v = value(i + static_cast<int>(level) * 100);
        params.insert(params.end(), v.begin(), v.end());
        auto seq = s->OpLog(*st, 1, params);
        ASSERT_TRUE(seq.ok());
        const uint64_t header = 0xA5A5000000000000ull + static_cast<uint64_t>(i);
        ASSERT_TRUE(
            s->MemLog(*a, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&header), 8))
                .ok());
        Status m = s->MemLogFromOp(*a + 8, v, *seq, 8);
        ASSERT_TRUE(m.ok()) << m.ToString();
        // Misuse: an op that is not open in this session.
        EXPECT_EQ(s->MemLogFromOp(*a + 8, v, *seq + 1000, 8).code(),
                  level == Level::kNaive ? StatusCode::kOk : StatusCode::kFailedPrecondition);
        std::vector<uint8_t> got(kValue);  // read-your-writes before anything was sent
        ASSERT_TRUE(s->Read(*a + 8, got).ok());
        ASSERT_EQ(got, v);
        ASSERT_TRUE(s->TxWrite(*st).ok());
      }
      ASSERT_TRUE(s->Fence().ok());
      const Counters c = s->counters();
      const bool expect_pointers = pointers && level != Level::kNaive;
      EXPECT_EQ(c.pointer_mem_logs - before.pointer_mem_logs, expect_pointers ? kOps : 0u);
      if (level == Level::kRcb) (pointers ? pointer_bytes : inline_bytes) = c.txn_bytes;
      // Another front-end reads exactly the values, and so after a back-end restart.
      for (int pass = 0; pass < 2; pass++) {
        auto r = OpenSession(11, Level::kNaive);
        ASSERT_TRUE(r);
        for (int i = 0; i < kOps; i++) {
          std::vector<uint8_t> got(kValue + 8);
          ASSERT_TRUE(r->Read(addrs[i], got).ok());
          EXPECT_EQ(GetLe64(got.data()), 0xA5A5000000000000ull + static_cast<uint64_t>(i));
          EXPECT_EQ(std::vector<uint8_t>(got.begin() + 8, got.end()),
                    value(i + static_cast<int>(level) * 100))
              << LevelName(level) << " op " << i;
        }
        r.reset();
        if (pass == 0) {
          s.reset();
          scans += be_->stats().op_log_scans;
          RestartBackend();
        }
      }
    }
  }
  // The value went as a pointer: rcb's transaction bytes shrink by about the values.
  EXPECT_LT(pointer_bytes + kOps * (kValue - 64), inline_bytes)
      << "pointer " << pointer_bytes << " vs inline " << inline_bytes;
  // Unindexed at landing, the op logs were found in the b-log.
  if (!GetParam()) {
    EXPECT_GT(scans, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(IndexAtLanding, PointerEntryTest, ::testing::Bool(), [](const auto& info) {
  return std::string(info.param ? "indexed" : "scanned");
});

TEST_F(FrontendTest, BatchTimerFlushesAtTheNextCall) {
  SessionOptions o = Options(9, Level::kRcb);
  o.batch_timeout = std::chrono::microseconds(0);  // every batch is already due at the next call
  auto s = Session::Open(o);
  ASSERT_TRUE(s.ok());
  auto st = (*s)->CreateRoot("t", 3);
  auto a = (*s)->Malloc(64);
  ASSERT_TRUE(st.ok() && a.ok());
  ASSERT_TRUE(Update(**s, *st, *a, 1).ok());
  EXPECT_EQ((*s)->counters().txns, 1u);
  // With a long timeout the batch waits for Poll / Fence.
  o = Options(19, Level::kRcb);
  auto s2 = Session::Open(o);
  ASSERT_TRUE(s2.ok());
  ASSERT_TRUE(Update(**s2, *st, *a, 2).ok());
  ASSERT_TRUE((*s2)->Poll().ok());
  EXPECT_EQ((*s2)->counters().txns, 0u);
  ASSERT_TRUE((*s2)->Flush().ok());
  EXPECT_EQ((*s2)->counters().txns, 1u);
}

TEST_F(FrontendTest, WriterLockContentionAndHandOver) {
  auto a = OpenSession(10, Level::kRcb);
  SessionOptions ob = Options(11, Level::kRcb);
  ob.lock_timeout = std::chrono::milliseconds(100);
  auto bs = Session::Open(ob);
  ASSERT_TRUE(a && bs.ok());
  auto& b = *bs;
  auto st = a->CreateRoot("locked", 4);
  ASSERT_TRUE(st.ok());
  auto stb = b->OpenRoot("locked");
  ASSERT_TRUE(stb.ok());
  auto addr = a->Malloc(64);
  ASSERT_TRUE(addr.ok());
  // B caches the old contents.
  uint8_t got[8];
  ASSERT_TRUE(b->Read(*addr, got).ok());
  ASSERT_TRUE(a->WriterLock(*st).ok());
  EXPECT_EQ(a->WriterLock(*st).code(), StatusCode::kFailedPrecondition);
  auto lock_word = a->ReadWord(st->lock_addr);
  ASSERT_TRUE(lock_word.ok());
  EXPECT_EQ(*lock_word, 10u);
  EXPECT_EQ(b->WriterLock(*stb).code(), StatusCode::kTimedOut);
  EXPECT_GT(b->counters().lock_retries, 0u);
  ASSERT_TRUE(Update(*a, *st, *addr, 0x42).ok());
  EXPECT_EQ(b->WriterUnlock(*stb).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(a->WriterUnlock(*st).ok());
  ASSERT_TRUE(b->WriterLock(*stb).ok());
  ASSERT_TRUE(b->Read(*addr, got).ok());  // the cache was invalidated at acquisition
  EXPECT_EQ(got[0], 0x42);
  ASSERT_TRUE(Update(*b, *stb, *addr, 0x43).ok());
  ASSERT_TRUE(b->WriterUnlock(*stb).ok());
  EXPECT_EQ(a->ReadWord(st->lock_addr).value(), 0u);
}

TEST_F(FrontendTest, ReaderRetriesWhileAWriterApplies) {
  auto w = OpenSession(12, Level::kR);
  auto r = OpenSession(13, Level::kRc);
  ASSERT_TRUE(w && r);
  auto st = w->CreateRoot("seq", 4);
  ASSERT_TRUE(st.ok());
  auto addr = w->Malloc(64);
  ASSERT_TRUE(addr.ok());
  ASSERT_TRUE(Update(*w, *st, *addr, 1).ok());
  ASSERT_TRUE(w->Fence().ok());
  int attempts = 0;
  uint8_t got[8] = {};
  Status s = r->ReadConsistent(*st, [&]() -> Status {
    attempts++;
    ASYMNVM_RETURN_IF_ERROR(r->Read(*addr, got));
    if (attempts == 1) {
      // A transaction on this structure is applied between the reader's two sequence reads.
      ASYMNVM_RETURN_IF_ERROR(Update(*w, *st, *addr, 2));
      ASYMNVM_RETURN_IF_ERROR(w->Fence());
    }
    return Status::Ok();
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(got[0], 2);
  EXPECT_EQ(r->counters().reader_retries, 1u);
  const uint64_t seq = r->ReadWord(st->seq_addr).value();
  EXPECT_EQ(seq % 2, 0u);
  EXPECT_GE(seq, 4u);  // two applications, each +2
}

// Reader snapshots (doc/frontend.md §Reader snapshots): at rc/rcb a ReadConsistent whose reads
// were all taken at the sequence word's current value is served from them after one word read;
// any transaction bracketing the word drops the snapshot (the next body reads remotely and sees
// the new value). At naive every body reads remotely.
TEST_F(FrontendTest, ReaderSnapshotsServeRepeatsUntilTheWordChanges) {
  auto w = OpenSession(14, Level::kR);
  auto r = OpenSession(15, Level::kRc);
  auto n = OpenSession(16, Level::kNaive);
  ASSERT_TRUE(w && r && n);
  auto st = w->CreateRoot("snap", 4);
  ASSERT_TRUE(st.ok());
  auto addr = w->Malloc(128);
  ASSERT_TRUE(addr.ok());
  ASSERT_TRUE(Update(*w, *st, *addr, 1).ok());
  ASSERT_TRUE(w->Fence().ok());
  auto read = [&](Session& s, uint64_t* remote_reads) -> int {
    const uint64_t before = s.counters().remote_reads;
    uint8_t got[8] = {};
    Status rs = s.ReadConsistent(*st, [&]() { return s.Read(*addr, got); });
    EXPECT_TRUE(rs.ok()) << rs.ToString();
    *remote_reads = s.counters().remote_reads - before;
    return got[0];
  };
  uint64_t rr = 0;
  EXPECT_EQ(read(*r, &rr), 1);
  EXPECT_EQ(rr, 3u);  // word, data, word
  EXPECT_EQ(read(*r, &rr), 1);
  EXPECT_EQ(rr, 1u);  // word only: the data came from the snapshot taken at this word value
  EXPECT_EQ(read(*r, &rr), 1);
  EXPECT_EQ(rr, 1u);
  ASSERT_TRUE(Update(*w, *st, *addr, 7).ok());
  ASSERT_TRUE(w->Fence().ok());
  EXPECT_EQ(read(*r, &rr), 7);  // the word moved: the snapshot is dropped, the new value read
  EXPECT_EQ(rr, 3u);
  EXPECT_EQ(read(*r, &rr), 7);
  EXPECT_EQ(rr, 1u);
  for (int i = 0; i < 2; i++) {
    EXPECT_EQ(read(*n, &rr), 7);
    EXPECT_EQ(rr, 3u);  // naive: no cache, no snapshot
  }
}

// Fencing (doc/backend.md §Fencing): a second registration of a front-end id — what a take-over
// of a lapsed holder does — fences the first session. Its transactions are refused by the back-end
// without touching the id's record, and its next fence fails with "fenced" (before, the back-end
// skipped the stale txn as "already applied" and the fence reported success: a silently lost
// write) and stays failed.
TEST_F(FrontendTest, ASecondRegistrationOfTheIdFencesTheFirstSession) {
  auto a = OpenSession(9, Level::kR);
  ASSERT_TRUE(a);
  auto st = a->CreateRoot("fenced", 7);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  auto addr = a->Malloc(128);
  ASSERT_TRUE(addr.ok()) << addr.status().ToString();
  ASSERT_TRUE(Update(*a, *st, *addr, 1).ok());
  ASSERT_TRUE(a->Fence().ok());

  auto b = OpenSession(9, Level::kR);  // the id registered again: a new incarnation
  ASSERT_TRUE(b);
  Status u = Update(*a, *st, *addr, 2);
  Status f = u.ok() ? a->Fence() : u;
  ASSERT_FALSE(f.ok()) << "a superseded session's write was reported durable";
  EXPECT_EQ(f.code(), StatusCode::kFailedPrecondition) << f.ToString();
  EXPECT_NE(f.ToString().find("fenced"), std::string::npos) << f.ToString();
  EXPECT_FALSE(a->Fence().ok());  // sticky
  // The back-end refuses the stale transaction when its worker reaches it, which may be after
  // the session saw the new incarnation in the record.
  for (int i = 0; i < 1000 && be_->stats().txns_fenced == 0; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(be_->stats().txns_fenced, 1u);

  // The newcomer sees the last acknowledged value, writes, and fences normally.
  std::vector<uint8_t> got(72);
  ASSERT_TRUE(b->Read(*addr, got).ok());
  EXPECT_EQ(got[0], 1);
  auto st2 = b->OpenRoot("fenced");
  ASSERT_TRUE(st2.ok());
  ASSERT_TRUE(Update(*b, *st2, *addr, 3).ok());
  ASSERT_TRUE(b->Fence().ok());
  ASSERT_TRUE(b->Read(*addr, got).ok());
  EXPECT_EQ(got[0], 3);
}

TEST_F(FrontendTest, CompareSwapRootWord) {
  auto s = OpenSession(18, Level::kRc);
  auto t = OpenSession(21, Level::kNaive);
  ASSERT_TRUE(s && t);
  auto st = s->CreateRoot("mv", 8);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(s->CompareSwap(st->root_addr, 0, 4096).value(), 0u);
  EXPECT_EQ(t->CompareSwap(st->root_addr, 0, 8192).value(), 4096u);  // lost the race
  EXPECT_EQ(t->ReadWord(st->root_addr).value(), 4096u);
  EXPECT_EQ(s->CompareSwap(st->root_addr + 3, 0, 1).status().code(), StatusCode::kInvalidArgument);
  // A swap in the data area updates the swapper's cached page.
  auto a = s->Malloc(64);
  ASSERT_TRUE(a.ok());
  uint8_t b[8];
  ASSERT_TRUE(s->Read(*a, b).ok());
  EXPECT_EQ(s->CompareSwap(*a, 0, 77).value(), 0u);
  ASSERT_TRUE(s->Read(*a, b).ok());
  EXPECT_EQ(b[0], 77);
}

TEST_F(FrontendTest, TwoTierAllocator) {
  auto s = OpenSession(14, Level::kRcb);
  ASSERT_TRUE(s);
  auto a = s->Malloc(100);
  auto b = s->Malloc(100);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_GE(*a, s->data_begin());
  EXPECT_LT(*a, s->data_end());
  ASSERT_TRUE(s->Free(*a).ok());
  EXPECT_EQ(s->Free(*a).code(), StatusCode::kFailedPrecondition);  // double free
  // Not allocated anywhere: the back-end says so.
  EXPECT_EQ(s->Free(s->data_end() - 8).code(), StatusCode::kFailedPrecondition);
  auto big = s->Malloc(3 * 4096 + 5);  // larger than a slab: the back-end's large extent
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  ASSERT_TRUE(s->Free(*big).ok());
  EXPECT_EQ(s->Free(*big).code(), StatusCode::kFailedPrecondition);  // double free of a large one
  EXPECT_EQ(s->Malloc(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Malloc(1ull << 40).status().code() == StatusCode::kOk, false);
}

// Objects allocated by an earlier session of the same front-end (its allocator state was DRAM):
// a small object is left allocated and counted, a large extent is freed at the back-end, a second
// free of it is a double free, an address into our own object is still refused.
TEST_F(FrontendTest, FreeOfObjectsOfAnEarlierSession) {
  uint64_t small = 0, large = 0;
  {
    auto s = OpenSession(15, Level::kRcb);
    ASSERT_TRUE(s);
    auto a = s->Malloc(100);
    auto b = s->Malloc(5 * 4096);
    ASSERT_TRUE(a.ok() && b.ok());
    small = *a;
    large = *b;
  }
  auto s = OpenSession(15, Level::kRcb);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->Free(small).ok());
  EXPECT_EQ(s->counters().orphan_frees, 1u);
  EXPECT_EQ(s->Free(large + 8).code(), StatusCode::kInvalidArgument);  // middle of the extent
  EXPECT_TRUE(s->Free(large).ok());
  EXPECT_EQ(s->Free(large).code(), StatusCode::kFailedPrecondition);
  auto mine = s->Malloc(64);
  ASSERT_TRUE(mine.ok());
  EXPECT_EQ(s->Free(*mine + 8).code(), StatusCode::kInvalidArgument);
}

class FakeFetcher : public OpLogFetcher {
 public:
  std::vector<RecoveredOp> ops;
  uint64_t asked_after = ~0ull;
  Result<std::vector<RecoveredOp>> Fetch(uint64_t, uint64_t after) override {
    asked_after = after;
    return ops;
  }
};

TEST_F(FrontendTest, ReplayReexecutesOpsAfterOpn) {
  uint64_t addr = 0;
  uint32_t sid = 0;
  {
    auto s = OpenSession(15, Level::kRcb);
    auto st = s->CreateRoot("replay", 21);
    ASSERT_TRUE(st.ok());
    sid = st->id;
    auto a = s->Malloc(64);
    ASSERT_TRUE(a.ok());
    addr = *a;
    ASSERT_TRUE(Update(*s, *st, addr, 1).ok());
    ASSERT_TRUE(s->Fence().ok());
  }
  auto s = OpenSession(15, Level::kRcb);
  ASSERT_TRUE(s);
  const uint64_t opn = s->recovered_opn();
  EXPECT_GE(opn, 1u);
  ASSERT_TRUE(s->OpenRoot("replay").ok());
  FakeFetcher f;
  auto mk = [&](uint64_t seq, uint8_t fill) {
    RecoveredOp op;
    op.op_seq = seq;
    op.structure_id = sid;
    op.op_type = 1;
    op.payload.resize(9);
    std::memcpy(op.payload.data(), &addr, 8);
    op.payload[8] = fill;
    return op;
  };
  f.ops = {mk(opn + 2, 0x22), mk(opn, 0x99) /* covered: skipped */, mk(opn + 1, 0x11)};
  std::vector<uint64_t> seen;
  s->RegisterReplay(21, [&](Session& ss, const Structure& st, const RecoveredOp& op) -> Status {
    auto seq = ss.OpLog(st, op.op_type, op.payload);
    if (!seq.ok()) return seq.status();
    seen.push_back(*seq);
    uint64_t a;
    std::memcpy(&a, op.payload.data(), 8);
    return Update(ss, st, a, op.payload[8]);
  });
  const uint64_t op_logs_before = s->counters().op_logs;
  ASSERT_TRUE(s->Replay(&f).ok());
  EXPECT_EQ(f.asked_after, opn);
  EXPECT_EQ(seen, (std::vector<uint64_t>{opn + 1, opn + 2}));
  EXPECT_EQ(s->counters().replayed_ops, 2u);
  EXPECT_EQ(s->counters().op_logs, op_logs_before);  // nothing re-logged
  EXPECT_GE(s->next_op_seq(), opn + 3);
  uint8_t got[8];
  ASSERT_TRUE(s->Read(addr, got).ok());
  EXPECT_EQ(got[0], 0x22);
  // A second Replay on the same connection (Database::Recover after the session already replayed
  // at a reconnection) re-executes nothing: re-running opn+1 here would write 0x11 over the
  // newer 0x33 — an old write set over newer transactions (found by txn_kill_rounds_long).
  auto root = s->OpenRoot("replay");
  ASSERT_TRUE(root.ok());
  ASSERT_TRUE(Update(*s, root.value(), addr, 0x33).ok());
  ASSERT_TRUE(s->Fence().ok());
  ASSERT_TRUE(s->Replay(&f).ok());
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(s->counters().replayed_ops, 2u);
  ASSERT_TRUE(s->Read(addr, got).ok());
  EXPECT_EQ(got[0], 0x33);
  // An op of a structure not opened here is refused.
  auto s2 = OpenSession(16, Level::kRcb);
  FakeFetcher g;
  g.ops = {mk(s2->recovered_opn() + 1, 1)};
  EXPECT_EQ(s2->Replay(&g).code(), StatusCode::kFailedPrecondition);
}

TEST_F(FrontendTest, BadInput) {
  SessionOptions o = Options(0, Level::kRcb);
  EXPECT_EQ(Session::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.frontend_id = 70000;
  EXPECT_EQ(Session::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.frontend_id = 1;
  o.backends.push_back(be_->address());
  EXPECT_EQ(Session::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.backends = {};
  EXPECT_EQ(Session::Open(o).status().code(), StatusCode::kInvalidArgument);
  o = Options(1, Level::kRcb);
  o.page_size = 1000;
  EXPECT_EQ(Session::Open(o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseLevel("rcb").value(), Level::kRcb);
  EXPECT_EQ(ParseLevel("fast").status().code(), StatusCode::kInvalidArgument);

  auto s = OpenSession(17, Level::kRcb);
  ASSERT_TRUE(s);
  auto st = s->CreateRoot("x", 1);
  ASSERT_TRUE(st.ok());
  auto v = Bytes(8, 1);
  EXPECT_EQ(s->MemLog(0, v).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->MemLog(s->data_end() - 4, v).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->MemLog(s->data_begin(), {}).code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> huge(1 << 20);
  EXPECT_EQ(s->MemLog(s->data_begin(), huge).code(), StatusCode::kResourceExhausted);
  uint8_t b[8];
  EXPECT_EQ(s->Read(0, b).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->ReadWord(s->data_begin() + 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->OpLog(*st, 0xFF01, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->CreateRoot("", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->CreateRoot("x", 2).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(s->CreateRoot("y", 0xFE).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s->OpenRoot("nope").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(s->MemLog(s->data_begin(), v).ok());
  EXPECT_EQ(s->Fence().code(), StatusCode::kFailedPrecondition);  // inside an operation
  EXPECT_EQ(s->Write(s->data_begin(), v).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->TxWrite(*st).ok());
  ASSERT_TRUE(s->Fence().ok());
  ASSERT_TRUE(s->RemoveRoot("x").ok());
  EXPECT_EQ(s->RemoveRoot("x").code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace asymnvm::frontend

namespace asymnvm::frontend {
namespace {

// A child process writes through the SDK (rcb, batches of 8 ops, a fence every batch) and records
// each fenced op in a file; the parent SIGKILLs it mid-stream, reopens the front-end and checks:
// every acknowledged op is applied, applied ops form a prefix, no op is half applied (its two
// memory logs landed together), and the front-end continues where the back-end left off.
// In a forked child: the back-end's address from the parent's pipe, then the options of a
// front-end `fe` at rcb whose batches of `batch_ops` flush by size or fence only. Exits 2 when
// the parent sent nothing.
SessionOptions ChildSessionOptions(int from_parent, uint64_t fe, uint32_t batch_ops) {
  char addr[256] = {};
  const ssize_t n = read(from_parent, addr, sizeof(addr) - 1);
  if (n <= 0) _exit(2);
  SessionOptions o;
  o.backends = {std::string(addr, static_cast<size_t>(n))};
  o.frontend_id = fe;
  o.level = Level::kRcb;
  o.batch_ops = batch_ops;
  o.batch_timeout = std::chrono::hours(1);
  return o;
}

TEST(FrontendCrash, AckedOpsSurviveSigkillOfTheFrontend) {
  const std::string pool = TempPath("crash.pool"), acks = TempPath("crash.acks");
  std::remove(pool.c_str());
  std::remove(acks.c_str());
  constexpr int kOps = 400;
  int to_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t pid = fork();  // before any thread exists in this process
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(to_child[1]);
    auto s = Session::Open(ChildSessionOptions(to_child[0], 20, 8));
    if (!s.ok()) _exit(3);
    auto st = (*s)->CreateRoot("crash", 2);
    auto a = (*s)->Malloc(8 * kOps);
    auto b = (*s)->Malloc(8 * kOps);
    if (!st.ok() || !a.ok() || !b.ok()) _exit(4);
    if (!(*s)->WriterLock(*st).ok()) _exit(9);
    FILE* f = fopen(acks.c_str(), "w");
    fprintf(f, "%llu %llu\n", static_cast<unsigned long long>(*a),
            static_cast<unsigned long long>(*b));
    fflush(f);
    for (uint64_t i = 0; i < kOps; i++) {
      uint64_t v = i + 1;
      uint8_t p[8];
      std::memcpy(p, &v, 8);
      if (!(*s)->OpLog(*st, 1, p).ok()) _exit(5);
      if (!(*s)->MemLog(*a + 8 * i, p).ok() || !(*s)->MemLog(*b + 8 * i, p).ok()) _exit(6);
      if (!(*s)->TxWrite(*st).ok()) _exit(7);
      if (i % 8 == 7) {
        if (!(*s)->Fence().ok()) _exit(8);
        fprintf(f, "%llu\n", static_cast<unsigned long long>(i));
        fflush(f);
      }
    }
    _exit(0);
  }
  close(to_child[0]);
  auto be = backend::Backend::Start(SmallBackend(pool));
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  const std::string address = (*be)->address();
  ASSERT_EQ(write(to_child[1], address.data(), address.size()),
            static_cast<ssize_t>(address.size()));
  close(to_child[1]);
  // Kill after a seeded number of acknowledged batches (or when the child finished).
  std::mt19937_64 rng(7);
  const int kill_after = 3 + static_cast<int>(rng() % 20);
  auto read_acks = [&](uint64_t* a, uint64_t* b) {
    std::vector<uint64_t> got;
    FILE* f = fopen(acks.c_str(), "r");
    if (f == nullptr) return got;
    unsigned long long x, y;
    if (fscanf(f, "%llu %llu", &x, &y) == 2) {
      *a = x;
      *b = y;
      while (fscanf(f, "%llu", &x) == 1) got.push_back(x);
    }
    fclose(f);
    return got;
  };
  uint64_t a = 0, b = 0;
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 3000; i++) {  // up to ~30 s
    if (static_cast<int>(read_acks(&a, &b).size()) >= kill_after) break;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  EXPECT_TRUE(!exited || (WIFEXITED(status) && WEXITSTATUS(status) == 0)) << status;
  const std::vector<uint64_t> acked = read_acks(&a, &b);
  ASSERT_GE(acked.size(), 1u);
  const uint64_t last_acked = acked.back();
  std::printf("crash: child %s after %zu acknowledged batches (kill_after %d)\n",
              exited ? "finished" : "killed", acked.size(), kill_after);

  SessionOptions o;
  o.backends = {address};
  o.frontend_id = 20;
  o.level = Level::kRc;
  auto s = Session::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // The child's op logs past its last transaction (logged, not applied) are replayed first: the
  // session keeps its OPN and the dead child's lock until it has (doc/frontend.md "Replay before
  // the OPN moves").
  auto st = (*s)->OpenRoot("crash");
  ASSERT_TRUE(st.ok());
  (*s)->RegisterReplay(2, [&](Session& ss, const Structure&, const RecoveredOp& op) -> Status {
    uint64_t v = 0;
    if (op.payload.size() != 8) return Status::Corruption("crash op: payload");
    std::memcpy(&v, op.payload.data(), 8);
    if (v == 0 || v > kOps) return Status::Corruption("crash op: value");
    ASYMNVM_RETURN_IF_ERROR(ss.MemLog(a + 8 * (v - 1), op.payload));
    return ss.MemLog(b + 8 * (v - 1), op.payload);
  });
  ASSERT_TRUE((*s)->Replay().ok());
  std::vector<uint64_t> va(kOps), vb(kOps);
  ASSERT_TRUE((*s)->Read(a, std::span(reinterpret_cast<uint8_t*>(va.data()), 8 * kOps)).ok());
  ASSERT_TRUE((*s)->Read(b, std::span(reinterpret_cast<uint8_t*>(vb.data()), 8 * kOps)).ok());
  bool gap = false;
  uint64_t applied = 0;
  for (uint64_t i = 0; i < kOps; i++) {
    EXPECT_EQ(va[i], vb[i]) << "op " << i << " half applied";
    if (i <= last_acked) {
      EXPECT_EQ(va[i], i + 1) << "acknowledged op " << i << " lost";
    }
    if (va[i] == 0) gap = true;
    if (va[i] != 0) {
      EXPECT_FALSE(gap) << "op " << i << " applied after a missing one";
      EXPECT_EQ(va[i], i + 1);
      applied++;
    }
  }
  EXPECT_GT(applied, last_acked);
  EXPECT_GE((*s)->recovered_opn(), last_acked + 1);
  // The dead child still holds the writer lock: another front-end times out, the same front-end
  // id takes it back.
  if (!exited) {
    SessionOptions other = o;
    other.frontend_id = 22;
    other.lock_timeout = std::chrono::milliseconds(50);
    auto s2 = Session::Open(other);
    ASSERT_TRUE(s2.ok());
    EXPECT_EQ((*s2)->WriterLock(*st).code(), StatusCode::kTimedOut);
  }
  ASSERT_TRUE((*s)->WriterLock(*st).ok());
  // The front-end continues: its next transaction is LPN + 1.
  uint64_t v = 999;
  uint8_t p[8];
  std::memcpy(p, &v, 8);
  ASSERT_TRUE((*s)->OpLog(*st, 1, p).ok());
  ASSERT_TRUE((*s)->MemLog(a, p).ok());
  ASSERT_TRUE((*s)->TxWrite(*st).ok());
  ASSERT_TRUE((*s)->WriterUnlock(*st).ok());
  s->reset();
  (*be)->Stop();
  std::remove(pool.c_str());
  std::remove(acks.c_str());
}

// A session of an id whose earlier session died with acknowledged op logs not yet applied (its
// transactions still in the batch): until it replays them, its OPN stays put — a structure opened
// first logs a lock-ahead op, and an OPN past it told the back-end the dead session's ops were
// applied, so the next recovery found nothing (TATP/SmallBank lost committed transactions when a
// driver killed at start-up had adopted a dead writer) — and it releases no writer lock.
TEST(FrontendCrash, UnreplayedOpLogsHoldTheOpnAndTheLocksUntilReplayed) {
  const std::string pool = TempPath("unreplayed.pool");
  std::remove(pool.c_str());
  constexpr uint64_t kOps = 5;
  int to_child[2], from_child[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(from_child), 0);
  const pid_t pid = fork();  // before any thread exists in this process
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(to_child[1]);
    close(from_child[0]);
    auto s = Session::Open(ChildSessionOptions(to_child[0], 30, 1000));
    if (!s.ok()) _exit(3);
    auto st = (*s)->CreateRoot("unreplayed", 2);
    auto a = (*s)->Malloc(8 * kOps);
    if (!st.ok() || !a.ok() || !(*s)->WriterLock(*st).ok() || !(*s)->Fence().ok()) _exit(4);
    for (uint64_t i = 0; i < kOps; i++) {  // acknowledged (op log durable), batched
      uint8_t p[16];
      const uint64_t where = *a + 8 * i, v = 100 + i;
      std::memcpy(p, &where, 8);
      std::memcpy(p + 8, &v, 8);
      if (!(*s)->OpLog(*st, 1, p).ok() || !(*s)->MemLog(where, std::span(p + 8, 8)).ok() ||
          !(*s)->TxWrite(*st).ok()) {
        _exit(5);
      }
    }
    if (write(from_child[1], &*a, 8) != 8) _exit(6);
    pause();  // killed here: the batch never leaves
    _exit(7);
  }
  close(to_child[0]);
  close(from_child[1]);
  auto be = backend::Backend::Start(SmallBackend(pool));
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  const std::string address = (*be)->address();
  ASSERT_EQ(write(to_child[1], address.data(), address.size()),
            static_cast<ssize_t>(address.size()));
  close(to_child[1]);
  uint64_t a = 0;
  ASSERT_EQ(read(from_child[0], &a, 8), 8);
  close(from_child[0]);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);

  SessionOptions o;
  o.backends = {address};
  o.frontend_id = 30;
  o.level = Level::kRcb;
  const auto replay = [&](Session& ss, const Structure&, const RecoveredOp& op) -> Status {
    if (op.payload.size() != 16) return Status::Corruption("payload");
    uint64_t where = 0;
    std::memcpy(&where, op.payload.data(), 8);
    return ss.MemLog(where, std::span(op.payload.data() + 8, 8));
  };
  uint64_t opn = 0;
  {
    // Not replaying: the lock it still holds (the dead session's) is kept, and the op it logs
    // does not move the OPN.
    auto s = Session::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    opn = (*s)->recovered_opn();
    auto st = (*s)->OpenRoot("unreplayed");
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE((*s)->WriterLock(*st).ok());  // its own id: taken back
    ASSERT_TRUE((*s)->Fence().ok());
    EXPECT_EQ((*s)->WriterUnlock(*st).code(), StatusCode::kFailedPrecondition);
  }
  {
    auto s = Session::Open(o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->recovered_opn(), opn) << "an OPN moved past op logs nobody replayed";
    auto st = (*s)->OpenRoot("unreplayed");
    ASSERT_TRUE(st.ok());
    (*s)->RegisterReplay(2, replay);
    ASSERT_TRUE((*s)->Replay().ok());
    EXPECT_EQ((*s)->counters().replayed_ops, kOps);
    for (uint64_t i = 0; i < kOps; i++) {
      uint64_t v = 0;
      ASSERT_TRUE((*s)->Read(a + 8 * i, std::span(reinterpret_cast<uint8_t*>(&v), 8)).ok());
      EXPECT_EQ(v, 100 + i) << "acknowledged op " << i;
    }
    // Replayed: the lock (still the dead session's, i.e. this id's) can go now.
    auto lock = (*s)->ReadWord(st->lock_addr);
    ASSERT_TRUE(lock.ok());
    EXPECT_EQ(*lock, 30u);
    ASSERT_TRUE((*s)->WriterLock(*st).ok());
    EXPECT_TRUE((*s)->WriterUnlock(*st).ok());
    lock = (*s)->ReadWord(st->lock_addr);
    ASSERT_TRUE(lock.ok());
    EXPECT_EQ(*lock, 0u);
  }
  (*be)->Stop();
  std::remove(pool.c_str());
}

}  // namespace
}  // namespace asymnvm::frontend

// ---- the symmetric baseline: op logs redirected to another back-end, posted asynchronously ----
// (Included here rather than at the top: this block is self-contained.)
#include <iostream>

#include "backend/rpc.h"
#include "common/coding.h"
#include "fabric/oq/oq.h"

namespace asymnvm::frontend {
namespace {

// The data back-end is FrontendTest's be_; a second in-process back-end receives the op logs.
class SymmetricTest : public FrontendTest {
 protected:
  void SetUp() override {
    FrontendTest::SetUp();
    log_path_ = path_ + ".log-backend";
    std::remove(log_path_.c_str());
    auto be = backend::Backend::Start(SmallBackend(log_path_));
    ASSERT_TRUE(be.ok()) << be.status().ToString();
    log_be_ = std::move(*be);
  }
  void TearDown() override {
    if (log_be_) log_be_->Stop();
    log_be_.reset();
    std::remove(log_path_.c_str());
    FrontendTest::TearDown();
  }
  SessionOptions SymOptions(uint64_t fe, Level level) {
    SessionOptions o = Options(fe, level);
    o.op_log_address = log_be_->log_address();
    o.async_op_logs = true;
    o.timeout = std::chrono::milliseconds(3000);
    return o;
  }

  std::string log_path_;
  std::unique_ptr<backend::Backend> log_be_;
};

// The op logs of front-end `fe` a back-end holds in its b-log (request kFetchOpLogs, the first
// page: up to ~60 KiB of records).
std::vector<backend::FetchedOp> FetchOpLogsAt(const std::string& oq_address, uint64_t fe) {
  auto fab = fabric::Fabric::Open({});
  EXPECT_TRUE(fab.ok());
  if (!fab.ok()) return {};
  auto pd = (*fab)->AllocPd();
  EXPECT_TRUE(pd.ok());
  if (!pd.ok()) return {};
  oq::ClientOptions co;
  co.fabric = fab->get();
  co.pd = pd->get();
  co.server_address = oq_address;
  co.client_id = 61000;
  auto cl = oq::Client::Connect(co);
  EXPECT_TRUE(cl.ok()) << cl.status().ToString();
  if (!cl.ok()) return {};
  backend::PayloadWriter w;
  w.U64(fe).U64(0).U64(~0ull);
  std::vector<uint8_t> reply;
  Status st = (*cl)->Call(0, backend::kFetchOpLogs, w.bytes(), &reply);
  EXPECT_TRUE(st.ok()) << st.ToString();
  bool more = false;
  auto ops = backend::DecodeFetchedOps(reply, &more);
  EXPECT_TRUE(ops.ok()) << ops.status().ToString();
  return ops.ok() ? std::move(*ops) : std::vector<backend::FetchedOp>{};
}

TEST_F(SymmetricTest, AsyncOpLogsLandAtTheLogBackendAfterAFence) {
  constexpr int kOps = 300;  // more than the send queue holds (128 appends of one block)
  auto s = Session::Open(SymOptions(21, Level::kRc));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto st = (*s)->CreateRoot("sym", 9);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  auto a = (*s)->Malloc(8 * kOps);
  ASSERT_TRUE(a.ok());
  std::vector<uint64_t> seqs;
  for (uint64_t i = 0; i < kOps; i++) {
    uint8_t p[8];
    PutLe64(p, i + 1);
    auto seq = (*s)->OpLog(*st, 3, p);
    ASSERT_TRUE(seq.ok()) << seq.status().ToString();
    seqs.push_back(*seq);
    ASSERT_TRUE((*s)->MemLog(*a + 8 * i, p).ok());
    ASSERT_TRUE((*s)->TxWrite(*st).ok());
  }
  ASSERT_TRUE((*s)->Fence().ok());
  EXPECT_EQ((*s)->counters().op_logs, static_cast<uint64_t>(kOps));

  // Every op log is in the log back-end's b-log, with its payload; none in the data back-end's.
  auto at_log = FetchOpLogsAt(log_be_->address(), 21);
  ASSERT_EQ(at_log.size(), static_cast<size_t>(kOps));
  for (int i = 0; i < kOps; i++) {
    EXPECT_EQ(at_log[i].op_seq, seqs[i]);
    EXPECT_EQ(at_log[i].structure_id, st->id);
    EXPECT_EQ(at_log[i].op_type, 3);
    ASSERT_EQ(at_log[i].payload.size(), 8u);
    EXPECT_EQ(GetLe64(at_log[i].payload.data()), static_cast<uint64_t>(i + 1));
  }
  EXPECT_TRUE(FetchOpLogsAt(be_->address(), 21).empty());

  // The data went to the data back-end: another front-end reads it there after the fence.
  auto r = OpenSession(22, Level::kNaive);
  ASSERT_TRUE(r);
  std::vector<uint8_t> got(8 * kOps);
  ASSERT_TRUE(r->Read(*a, got).ok());
  for (uint64_t i = 0; i < kOps; i++) EXPECT_EQ(GetLe64(got.data() + 8 * i), i + 1);

  // Recovery cannot find these op logs at the data back-end.
  EXPECT_EQ((*s)->Replay().code(), StatusCode::kFailedPrecondition);
}

TEST_F(SymmetricTest, BadOpLogAddressFailsAtOpen) {
  for (const std::string addr : {"tcp://127.0.0.1:1", "nonsense"}) {
    SessionOptions o = SymOptions(23, Level::kRcb);
    o.op_log_address = addr;
    auto s = Session::Open(o);
    ASSERT_FALSE(s.ok()) << addr;
    EXPECT_NE(s.status().ToString().find(addr), std::string::npos) << s.status().ToString();
    std::cerr << s.status().ToString() << "\n";
  }
  // Synchronous redirected op logs (no async) also work, and also refuse Replay().
  SessionOptions o = SymOptions(23, Level::kR);
  o.async_op_logs = false;
  auto s = Session::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto st = (*s)->CreateRoot("sync", 9);
  ASSERT_TRUE(st.ok());
  auto a = (*s)->Malloc(64);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(Update(**s, *st, *a, 7).ok());
  ASSERT_TRUE((*s)->Fence().ok());
  EXPECT_EQ(FetchOpLogsAt(log_be_->address(), 23).size(), 1u);
  EXPECT_EQ((*s)->Replay().code(), StatusCode::kFailedPrecondition);
}

TEST_F(SymmetricTest, LostLogBackendBreaksTheSession) {
  auto s = Session::Open(SymOptions(24, Level::kRcb));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto st = (*s)->CreateRoot("lost", 9);
  ASSERT_TRUE(st.ok());
  auto a = (*s)->Malloc(64);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(Update(**s, *st, *a, 1).ok());
  ASSERT_TRUE((*s)->Fence().ok());
  log_be_->Stop();
  log_be_.reset();
  // The failure surfaces at an op log or at the latest at the fence that waits for the acks.
  Status err = Status::Ok();
  for (int i = 0; i < 10 && err.ok(); i++) err = Update(**s, *st, *a, static_cast<uint8_t>(i));
  if (err.ok()) err = (*s)->Fence();
  ASSERT_FALSE(err.ok());
  EXPECT_NE(err.ToString().find("async op log"), std::string::npos) << err.ToString();
  // Sticky: the session stays broken.
  EXPECT_FALSE((*s)->Fence().ok());
  EXPECT_FALSE(Update(**s, *st, *a, 9).ok());
}

// Nothing truncates the remote log (the owner has no OPN at the log back-end): once its b-log is
// full the receiver has no segment to post, appends are refused (RNR), and the session breaks with
// a clear error — the log back-end itself keeps serving.
TEST_F(SymmetricTest, FullRemoteLogBreaksTheSessionNotTheBackend) {
  SessionOptions o = SymOptions(25, Level::kR);
  o.log_rnr_retry = 7;  // fail within ~6 ms of a full log rather than hold ~6.5 s per append
  auto s = Session::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto st = (*s)->CreateRoot("full", 9);
  ASSERT_TRUE(st.ok());
  std::vector<uint8_t> params(200, 0x5A);
  Status err = Status::Ok();
  uint64_t logged = 0;
  // The log back-end's b-log is 2 MiB: ~6,500 of these fill it.
  for (int i = 0; i < 50000 && err.ok(); i++) {
    auto seq = (*s)->OpLog(*st, 3, params);
    err = seq.status();
    if (seq.ok()) logged++;
  }
  if (err.ok()) err = (*s)->Fence();
  ASSERT_FALSE(err.ok()) << "the 2 MiB remote log took " << logged << " op logs";
  EXPECT_NE(err.ToString().find("async op log"), std::string::npos) << err.ToString();
  EXPECT_GT(logged, 1000u);
  std::cerr << "after " << logged << " op logs: " << err.ToString() << "\n";
  // The log back-end still answers and holds what landed.
  EXPECT_GT(FetchOpLogsAt(log_be_->address(), 25).size(), 0u);
}

}  // namespace
}  // namespace asymnvm::frontend
