// Conformance: each verb's semantics, posting lists, pipelining, per-connection ordering, atomics
// under contention.
#include <map>
#include <mutex>

#include "tests/fabric/conformance.h"

namespace asymnvm::fabric::conformance {
namespace {

void FillRandom(uint8_t* p, size_t n, std::mt19937_64& rng) {
  for (size_t i = 0; i < n; i++) p[i] = static_cast<uint8_t>(rng());
}

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void Store64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

TEST_P(FabricConformance, Write_Signaled_DataLandsAndWrIdRoundTrips) {
  auto remote = TargetRegion(4096);
  auto local = LocalRegion(4096);
  std::mt19937_64 rng(seed());
  FillRandom(local->data, 4096, rng);
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  const uint64_t id = 0xDEADBEEF12345678ull;
  ASSERT_TRUE(p.init->Post(std::vector{Write(id, *local, 0, *remote, 100, 1000)}).ok());
  auto c = WaitFor(init_cq_.get(), 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, id);
  EXPECT_EQ(c[0].opcode, Opcode::kWrite);
  EXPECT_EQ(c[0].status, CompletionStatus::kSuccess) << CompletionStatusName(c[0].status);
  EXPECT_EQ(c[0].connection_id, p.init->id());
  EXPECT_EQ(0, std::memcmp(remote->data + 100, local->data, 1000));
  for (size_t i = 0; i < 100; i++) ASSERT_EQ(remote->data[i], 0) << i;
  for (size_t i = 1100; i < 4096; i++) ASSERT_EQ(remote->data[i], 0) << i;
  std::string where;
  EXPECT_TRUE(remote->GuardsIntact(&where)) << where;
}

TEST_P(FabricConformance, Write_InlineFromStackBuffer_PayloadCopiedAtPost) {
  const uint32_t max_inline = init_->capabilities().max_inline;
  if (max_inline < 32) GTEST_SKIP() << "max_inline " << max_inline << " < 32";
  auto remote = TargetRegion(256);
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  uint8_t payload[32];
  for (int i = 0; i < 32; i++) payload[i] = static_cast<uint8_t>(i + 1);
  WorkRequest wr;
  wr.wr_id = 7;
  wr.opcode = Opcode::kWrite;
  wr.inline_data = true;
  wr.local_addr = payload;
  wr.length = 32;
  wr.remote_addr = remote->raddr(64);
  wr.rkey = remote->rkey();
  ASSERT_TRUE(p.init->Post(std::span<const WorkRequest>(&wr, 1)).ok());
  std::memset(payload, 0xEE, sizeof(payload));  // the provider copied it at Post
  auto c = WaitFor(init_cq_.get(), 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, CompletionStatus::kSuccess);
  for (int i = 0; i < 32; i++) EXPECT_EQ(remote->data[64 + i], i + 1) << i;
}

TEST_P(FabricConformance, Write_UnsignaledThenSignaled_OnlySignaledCompletes) {
  auto remote = TargetRegion(4096);
  auto local = LocalRegion(4096);
  std::memset(local->data, 0x3C, 4096);
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  for (int i = 0; i < 10; i++) {
    ASSERT_TRUE(
        p.init->Post(std::vector{Write(i, *local, i * 64, *remote, i * 64, 64, false)}).ok());
  }
  ASSERT_TRUE(p.init->Post(std::vector{Write(99, *local, 640, *remote, 640, 64)}).ok());
  auto c = WaitFor(init_cq_.get(), 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 99u);
  EXPECT_EQ(c[0].status, CompletionStatus::kSuccess);
  ExpectQuiet(init_cq_.get());
  for (int i = 0; i < 704; i++) ASSERT_EQ(remote->data[i], 0x3C) << i;  // ordered: all landed
}

TEST_P(FabricConformance, Read_RemoteBytes_CopiedWithByteLen) {
  auto remote = TargetRegion(8192);
  auto local = LocalRegion(8192);
  std::mt19937_64 rng(seed());
  FillRandom(remote->data, 8192, rng);
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  ASSERT_TRUE(p.init->Post(std::vector{Read(5, *local, 16, *remote, 333, 5000)}).ok());
  auto c = WaitFor(init_cq_.get(), 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 5u);
  EXPECT_EQ(c[0].opcode, Opcode::kRead);
  EXPECT_EQ(c[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(c[0].byte_len, 5000u);
  EXPECT_EQ(0, std::memcmp(local->data + 16, remote->data + 333, 5000));
  for (int i = 0; i < 16; i++) EXPECT_EQ(local->data[i], 0);
  std::string where;
  EXPECT_TRUE(local->GuardsIntact(&where)) << where;
}

TEST_P(FabricConformance, CompareSwap_ExpectedMatches_SwapsAndReturnsOriginal) {
  auto remote = TargetRegion(64);
  auto local = LocalRegion(64);
  Store64(remote->data + 8, 0x1111222233334444ull);
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  ASSERT_TRUE(p.init
                  ->Post(std::vector{Cas(1, local.get(), 0, *remote, 8, 0x1111222233334444ull,
                                         0x5555666677778888ull)})
                  .ok());
  auto c = WaitFor(init_cq_.get(), 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].opcode, Opcode::kCompareSwap);
  EXPECT_EQ(c[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(Load64(local->data), 0x1111222233334444ull);
  EXPECT_EQ(Load64(remote->data + 8), 0x5555666677778888ull);
}

TEST_P(FabricConformance, CompareSwap_ExpectedDiffers_UnchangedAndReturnsOriginal) {
  auto remote = TargetRegion(64);
  auto local = LocalRegion(64);
  Store64(remote->data + 16, 42);
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  ASSERT_TRUE(p.init->Post(std::vector{Cas(1, local.get(), 8, *remote, 16, 41, 99)}).ok());
  auto c = WaitFor(init_cq_.get(), 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(Load64(local->data + 8), 42u);
  EXPECT_EQ(Load64(remote->data + 16), 42u);
}

TEST_P(FabricConformance, FetchAdd_Addend_AddsAndReturnsOriginal) {
  auto remote = TargetRegion(64);
  auto local = LocalRegion(64);
  Store64(remote->data, 0xFFFFFFFFFFFFFFF0ull);
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  ASSERT_TRUE(p.init
                  ->Post(std::vector{Faa(1, local.get(), 0, *remote, 0, 0x20),
                                     Faa(2, nullptr, 0, *remote, 0, 1),  // result discarded
                                     Faa(3, local.get(), 8, *remote, 0, 5)})
                  .ok());
  auto c = WaitFor(init_cq_.get(), 3);
  ASSERT_EQ(c.size(), 3u);
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(c[i].wr_id, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(c[i].opcode, Opcode::kFetchAdd);
    EXPECT_EQ(c[i].status, CompletionStatus::kSuccess);
  }
  EXPECT_EQ(Load64(local->data), 0xFFFFFFFFFFFFFFF0ull);
  EXPECT_EQ(Load64(local->data + 8), 0x11u);  // wrapped modulo 2^64
  EXPECT_EQ(Load64(remote->data), 0x16u);
}

TEST_P(FabricConformance, SendRecv_OwnReceiveQueue_MessageDeliveredWithLengthAndConnection) {
  auto rbuf = Region(target_pd_.get(), 1024, kLocalWrite);
  auto local = LocalRegion(1024);
  std::mt19937_64 rng(seed());
  FillRandom(local->data, 1024, rng);
  Pair p = ConnectPair(Opts(init_cq_.get()), Opts(target_cq_.get(), target_cq_.get()));
  ASSERT_TRUE(p.init);
  RecvRequest rr{77, rbuf->data, 512, rbuf->mr.get()};
  ASSERT_TRUE(p.target->PostRecv(std::span<const RecvRequest>(&rr, 1)).ok());
  ASSERT_TRUE(p.init->Post(std::vector{Send(3, *local, 0, 200)}).ok());
  auto s = WaitFor(init_cq_.get(), 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].opcode, Opcode::kSend);
  EXPECT_EQ(s[0].status, CompletionStatus::kSuccess);
  auto r = WaitFor(target_cq_.get(), 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].opcode, Opcode::kRecv);
  EXPECT_EQ(r[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(r[0].wr_id, 77u);
  EXPECT_EQ(r[0].byte_len, 200u);
  EXPECT_EQ(r[0].connection_id, p.target->id());
  EXPECT_EQ(r[0].offset, 0u);
  EXPECT_EQ(0, std::memcmp(rbuf->data, local->data, 200));
  for (int i = 200; i < 1024; i++) ASSERT_EQ(rbuf->data[i], 0) << i;
}

TEST_P(FabricConformance, Flush_AfterWritesInList_CompletesInOrder) {
  auto remote = TargetRegion(4096, kAllRemote);
  auto local = LocalRegion(4096);
  std::memset(local->data, 0x66, 4096);
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  ASSERT_TRUE(
      p.init
          ->Post(std::vector{Write(1, *local, 0, *remote, 0, 2048),
                             Write(2, *local, 0, *remote, 2048, 2048, false), Flush(3, *remote)})
          .ok());
  auto c = WaitFor(init_cq_.get(), 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[1].wr_id, 3u);
  EXPECT_EQ(c[1].opcode, Opcode::kFlush);
  EXPECT_EQ(c[1].status, CompletionStatus::kSuccess);
  for (int i = 0; i < 4096; i++) ASSERT_EQ(remote->data[i], 0x66) << i;
}

TEST_P(FabricConformance, PostList_SixteenRequests_OneRoundTrip) {
  auto remote = TargetRegion(4096);
  auto local = LocalRegion(4096);
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  std::vector<WorkRequest> wrs;
  for (int i = 0; i < 16; i++)
    wrs.push_back(Write(i, *local, i * 64, *remote, i * 64, 64, i == 15));
  const Counters before = p.init->counters();
  ASSERT_TRUE(p.init->Post(wrs).ok());
  ASSERT_EQ(WaitFor(init_cq_.get(), 1).size(), 1u);
  const Counters d = p.init->counters() - before;
  EXPECT_EQ(d.round_trips, 1u);
  EXPECT_EQ(d.writes, 16u);
}

TEST_P(FabricConformance, Pipeline_64Outstanding_AllCompleteInPostingOrder) {
  auto remote = TargetRegion(64 * 128);
  auto local = LocalRegion(64 * 128);
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  for (int i = 0; i < 64; i++) {
    WorkRequest wr;
    switch (i % 3) {
      case 0:
        wr = Write(i, *local, i * 128, *remote, i * 128, 128);
        break;
      case 1:
        wr = Read(i, *local, i * 128, *remote, (i - 1) * 128, 128);
        break;
      default:
        wr = Faa(i, local.get(), i * 128, *remote, i * 128, 1);
        break;
    }
    ASSERT_TRUE(p.init->Post(std::span<const WorkRequest>(&wr, 1)).ok()) << i;
  }
  auto c = WaitFor(init_cq_.get(), 64);
  ASSERT_EQ(c.size(), 64u);
  for (int i = 0; i < 64; i++) {
    EXPECT_EQ(c[i].wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(c[i].status, CompletionStatus::kSuccess);
  }
}

TEST_P(FabricConformance, Ordering_WriteThenReadInOneList_ReadSeesNewValue) {
  auto remote = TargetRegion(256);
  auto local = LocalRegion(256);
  std::memset(local->data, 0x9D, 64);
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  ASSERT_TRUE(p.init
                  ->Post(std::vector{Write(1, *local, 0, *remote, 64, 64, false),
                                     Read(2, *local, 128, *remote, 64, 64)})
                  .ok());
  auto c = WaitFor(init_cq_.get(), 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 2u);
  for (int i = 0; i < 64; i++) EXPECT_EQ(local->data[128 + i], 0x9D) << i;
}

TEST_P(FabricConformance, Ordering_RandomOverlappingWritesAndReads_MatchLocalModel) {
  constexpr size_t kRemote = 2048, kSlot = 256, kSlots = 64;
  auto remote = TargetRegion(kRemote);
  auto local = LocalRegion(kSlot * kSlots);
  std::vector<uint8_t> model(kRemote, 0);
  std::mt19937_64 rng(seed());
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  for (int round = 0; round < 60; round++) {
    const size_t n = 1 + rng() % kSlots;
    std::vector<WorkRequest> wrs;
    std::vector<std::vector<uint8_t>> expect(n);
    for (size_t k = 0; k < n; k++) {
      const uint32_t len = 1 + rng() % kSlot;
      const size_t off = rng() % (kRemote - len + 1);
      if (rng() % 2) {
        FillRandom(local->data + k * kSlot, len, rng);
        std::memcpy(model.data() + off, local->data + k * kSlot, len);
        wrs.push_back(Write(k, *local, k * kSlot, *remote, off, len, rng() % 4 == 0));
      } else {
        expect[k].assign(model.begin() + off, model.begin() + off + len);
        wrs.push_back(Read(k, *local, k * kSlot, *remote, off, len));
      }
    }
    wrs.back().signaled = true;
    size_t signaled = 0;
    for (auto& w : wrs) signaled += w.signaled;
    ASSERT_TRUE(p.init->Post(wrs).ok());
    auto c = WaitFor(init_cq_.get(), signaled);
    ASSERT_EQ(c.size(), signaled) << "round " << round;
    uint64_t last = 0;
    for (size_t i = 0; i < c.size(); i++) {
      ASSERT_EQ(c[i].status, CompletionStatus::kSuccess);
      if (i > 0) {
        ASSERT_GT(c[i].wr_id, last) << "completions out of posting order";
      }
      last = c[i].wr_id;
    }
    for (size_t k = 0; k < n; k++) {
      if (wrs[k].opcode != Opcode::kRead) continue;
      ASSERT_EQ(0, std::memcmp(local->data + k * kSlot, expect[k].data(), expect[k].size()))
          << "round " << round << " request " << k << ": READ does not see earlier WRITEs";
    }
  }
  EXPECT_EQ(0, std::memcmp(remote->data, model.data(), kRemote));
}

TEST_P(FabricConformance, FetchAdd_ManyConnectionsAndThreads_ExactSumAndDistinctOriginals) {
  constexpr int kConns = 4, kThreads = 2, kOps = 300;
  auto remote = TargetRegion(64);
  auto local = LocalRegion(kConns * kThreads * kOps * 8);
  std::vector<std::unique_ptr<CompletionQueue>> cqs;
  std::vector<Pair> pairs;
  for (int i = 0; i < kConns; i++) {
    auto cq = init_->CreateCq({});
    ASSERT_TRUE(cq.ok());
    cqs.push_back(std::move(cq).value());
    pairs.push_back(ConnectPair(Opts(cqs.back().get()), Opts(target_cq_.get())));
    ASSERT_TRUE(pairs.back().init);
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int ci = 0; ci < kConns; ci++) {
    for (int t = 0; t < kThreads; t++) {
      threads.emplace_back([&, ci, t] {
        for (int k = 0; k < kOps; k++) {
          const size_t slot = ((ci * kThreads + t) * kOps + k) * 8;
          WorkRequest wr = Faa(slot, local.get(), slot, *remote, 0, 1);
          Status st;
          while ((st = pairs[ci].init->Post(std::span<const WorkRequest>(&wr, 1))).code() ==
                 StatusCode::kResourceExhausted) {
            std::this_thread::yield();
          }
          if (!st.ok()) failures++;
        }
      });
    }
    threads.emplace_back([&, ci] {  // one poller per CQ
      auto c = WaitFor(cqs[ci].get(), kThreads * kOps, milliseconds(30000));
      if (c.size() != size_t(kThreads * kOps)) failures++;
      for (auto& x : c) {
        if (x.status != CompletionStatus::kSuccess) failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  const uint64_t total = kConns * kThreads * kOps;
  EXPECT_EQ(Load64(remote->data), total);
  std::vector<bool> seen(total, false);
  for (uint64_t i = 0; i < total; i++) {
    const uint64_t orig = Load64(local->data + i * 8);
    ASSERT_LT(orig, total);
    ASSERT_FALSE(seen[orig]) << "two FAAs returned the same original " << orig;
    seen[orig] = true;
  }
}

TEST_P(FabricConformance, CompareSwap_LockProtectedIncrements_ExactCount) {
  constexpr int kWorkers = 4, kIncrements = 40;
  auto remote = TargetRegion(128);  // lock word at 0, counter at 64
  std::vector<std::unique_ptr<GuardedRegion>> locals;
  std::vector<std::unique_ptr<CompletionQueue>> cqs;
  std::vector<Pair> pairs;
  for (int i = 0; i < kWorkers; i++) {
    locals.push_back(LocalRegion(64));
    auto cq = init_->CreateCq({});
    ASSERT_TRUE(cq.ok());
    cqs.push_back(std::move(cq).value());
    pairs.push_back(ConnectPair(Opts(cqs.back().get()), Opts(target_cq_.get())));
    ASSERT_TRUE(pairs.back().init);
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; w++) {
    threads.emplace_back([&, w] {
      Connection* conn = pairs[w].init.get();
      GuardedRegion& l = *locals[w];
      auto run = [&](const WorkRequest& wr) -> bool {
        if (!conn->Post(std::span<const WorkRequest>(&wr, 1)).ok()) return false;
        auto c = WaitFor(cqs[w].get(), 1);
        return c.size() == 1 && c[0].status == CompletionStatus::kSuccess;
      };
      for (int k = 0; k < kIncrements && failures == 0; k++) {
        while (true) {  // acquire
          if (!run(Cas(1, &l, 0, *remote, 0, 0, w + 1))) {
            failures++;
            return;
          }
          if (Load64(l.data) == 0) break;
          std::this_thread::yield();
        }
        if (!run(Read(2, l, 8, *remote, 64, 8))) {
          failures++;
          return;
        }
        Store64(l.data + 16, Load64(l.data + 8) + 1);
        // WRITE the counter and release in one list: per-connection order puts the counter first.
        std::vector<WorkRequest> wrs = {Write(3, l, 16, *remote, 64, 8, false),
                                        Cas(4, &l, 24, *remote, 0, w + 1, 0)};
        if (!conn->Post(wrs).ok()) {
          failures++;
          return;
        }
        auto c = WaitFor(cqs[w].get(), 1);
        if (c.size() != 1 || c[0].status != CompletionStatus::kSuccess ||
            Load64(l.data + 24) != uint64_t(w + 1)) {
          failures++;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  EXPECT_EQ(Load64(remote->data + 64), uint64_t(kWorkers * kIncrements));
  EXPECT_EQ(Load64(remote->data), 0u);
}

TEST_P(FabricConformance, Counters_MixedList_PerConnectionAndFabricTotals) {
  auto remote = TargetRegion(4096);
  auto rbuf = Region(target_pd_.get(), 1024, kLocalWrite);
  auto local = LocalRegion(4096);
  Pair p = ConnectPair(Opts(init_cq_.get()), Opts(target_cq_.get(), target_cq_.get()));
  ASSERT_TRUE(p.init);
  RecvRequest rr{1, rbuf->data, 1024, rbuf->mr.get()};
  ASSERT_TRUE(p.target->PostRecv(std::span<const RecvRequest>(&rr, 1)).ok());
  const Counters fi0 = init_->counters(), ft0 = target_->counters();
  const Counters ci0 = p.init->counters(), ct0 = p.target->counters();
  std::vector<WorkRequest> wrs = {Write(1, *local, 0, *remote, 0, 100),
                                  Write(2, *local, 0, *remote, 200, 300),
                                  Write(3, *local, 0, *remote, 600, 50),
                                  Read(4, *local, 1024, *remote, 0, 400),
                                  Read(5, *local, 2048, *remote, 0, 10),
                                  Cas(6, local.get(), 3000, *remote, 1024, 0, 1),
                                  Faa(7, local.get(), 3008, *remote, 1032, 1),
                                  Send(8, *local, 0, 128),
                                  Flush(9, *remote)};
  ASSERT_TRUE(p.init->Post(wrs).ok());
  auto c = WaitFor(init_cq_.get(), wrs.size());
  ASSERT_EQ(c.size(), wrs.size());
  ASSERT_EQ(WaitFor(target_cq_.get(), 1).size(), 1u);
  const Counters ci = p.init->counters() - ci0;
  EXPECT_EQ(ci.writes, 3u);
  EXPECT_EQ(ci.reads, 2u);
  EXPECT_EQ(ci.compare_swaps, 1u);
  EXPECT_EQ(ci.fetch_adds, 1u);
  EXPECT_EQ(ci.sends, 1u);
  EXPECT_EQ(ci.flushes, 1u);
  EXPECT_EQ(ci.round_trips, 1u);
  EXPECT_EQ(ci.payload_bytes, 100u + 300 + 50 + 400 + 10 + 128);
  // shm: the WRITEs, READs and atomics are the initiator's own stores and loads (no wire bytes,
  // nothing served by the target's NIC); the SEND and the FLUSH behind it use the channel.
  const bool direct = inst_.provider == "shm";
  EXPECT_GE(ci.bytes_out, direct ? 128u : 100u + 300 + 50 + 128);
  EXPECT_GE(ci.bytes_in, direct ? 0u : 410u);
  EXPECT_EQ(ci.errors, 0u);
  const Counters ct = p.target->counters() - ct0;
  EXPECT_EQ(ct.recvs, 1u);
  if (direct) {
    EXPECT_EQ(ct.remote_ops_served, 0u) << "shm: a valid one-sided request took the channel";
    EXPECT_LT(ci.bytes_out, 100u + 300 + 50);
  } else {
    EXPECT_GE(ct.remote_ops_served, 7u);
  }
  EXPECT_GE(ct.bytes_in, direct ? 128u : 100u + 300 + 50 + 128);
  // Fabric totals: this is the only active connection of each fabric.
  const Counters fi = init_->counters() - fi0;
  EXPECT_EQ(fi.writes, ci.writes);
  EXPECT_EQ(fi.reads, ci.reads);
  EXPECT_EQ(fi.round_trips, ci.round_trips);
  EXPECT_EQ(fi.payload_bytes, ci.payload_bytes);
  const Counters ft = target_->counters() - ft0;
  EXPECT_EQ(ft.recvs, 1u);
  EXPECT_EQ(ft.remote_ops_served, ct.remote_ops_served);
  // Closed connections still count.
  const Counters before_close = init_->counters();
  p.init->Close();
  p.init.reset();
  const Counters after_close = init_->counters();
  EXPECT_GE(after_close.writes, before_close.writes);
  EXPECT_GE(after_close.payload_bytes, before_close.payload_bytes);
}

}  // namespace
}  // namespace asymnvm::fabric::conformance
