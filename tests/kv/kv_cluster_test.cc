// A replicated Rowan-KV cluster of three asymnvm-kv processes sharing an embedded coordinator:
// clients write, delete and read shared keys while servers are SIGKILLed (failover to a synced
// backup), restarted (rejoin as a backup, caught up by the primary), and all killed at once (cold
// start). The whole history must be linearizable per key: no acknowledged write lost, no deleted
// key back.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <random>
#include <thread>

#include "asymnvm/coord.h"
#include "kv/shard_map.h"
#include "tests/common/linearizability.h"
#include "tests/kv/kv_test_util.h"

namespace asymnvm::kv {
namespace {

using testutil::Proc;
using testutil::StartKv;
using testutil::TempDir;

struct Cluster {
  TempDir& d;
  std::vector<Proc> procs{3};
  explicit Cluster(TempDir& dir) : d(dir) {}
  std::string coord() const { return "dir:" + d.File("coord"); }
  std::vector<std::string> Args(int i) const {
    return {"--pool",
            d.File("kv" + std::to_string(i) + ".pool"),
            "--size",
            "64M",
            "--listen",
            "unix://" + d.File("kv" + std::to_string(i) + ".sock"),
            "--pm-mode",
            "flush",
            "--coord",
            coord(),
            "--workers",
            "2",
            "--shards",
            "6",
            "--initial-servers",
            "3"};
  }
  void Start(int i) { procs[i] = StartKv(Args(i)); }
  // Starts several at once (the first map waits for all three).
  void StartAll() {
    std::vector<std::thread> ts;
    for (int i = 0; i < 3; i++) ts.emplace_back([this, i] { Start(i); });
    for (auto& t : ts) t.join();
  }
  Result<ShardMap> Map() {
    auto c = coord::Coordinator::Open(coord());
    if (!c.ok()) return c.status();
    auto n = (*c)->Get("/asymnvm/kv/default/map");
    if (!n.ok()) return n.status();
    return ShardMap::Decode(n->data);
  }
  // Waits until every shard has a live primary and rf - 1 synced backups.
  bool WaitSynced(size_t backups, std::chrono::seconds limit = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      auto m = Map();
      if (m.ok()) {
        bool ok = true;
        for (auto& a : m->assignment) {
          size_t synced = 0;
          for (auto& b : a.backups) synced += b.synced ? 1 : 0;
          ok &= synced == backups;
        }
        if (ok) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
};

// WAIT's answer (doc/resp.md): the smallest number of synced backups over the shards. Three
// servers, rf 3: 2. One SIGKILLed: once the map is repaired (its shards moved, the dead server's
// backup slots dropped) every shard has 1 synced backup. Back again: 2 once it is caught up.
TEST(KvCluster, MinSyncedBackupsFollowsTheShardMap) {
  TempDir d;
  Cluster cl(d);
  cl.StartAll();
  for (int i = 0; i < 3; i++) ASSERT_FALSE(cl.procs[i].address().empty()) << i;
  ASSERT_TRUE(cl.WaitSynced(2));
  ClientOptions co;
  co.coordinator = cl.coord();
  co.retry_deadline = std::chrono::seconds(30);
  auto client = Client::Open(co);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  Status put0 = (*client)->Put("k", "v");
  ASSERT_TRUE(put0.ok()) << put0.ToString();
  // The map may still move right after it first showed every backup synced (the manager settles
  // the assignment over a few epochs, and a moved backup resyncs): WAIT's answer follows it, so
  // it is polled until it shows `want` (30 s at most), never read once.
  auto wait_min = [&](uint32_t want) -> Result<uint32_t> {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      auto m = (*client)->MinSyncedBackups();
      if (!m.ok() || *m == want || std::chrono::steady_clock::now() > deadline) return m;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  auto n = wait_min(2);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2u);
  testutil::Kill9(cl.procs[0]);
  ASSERT_TRUE(cl.WaitSynced(1)) << "the map never dropped the dead server's backup slots";
  // The first write after the kill succeeds: its connection to the dead primary had failed before
  // it was posted, so the OQ client knows it was never sent and the KV client resends it to the
  // new primary (no "outcome unknown" for a request that never left).
  Status put = (*client)->Put("k", "w");
  ASSERT_TRUE(put.ok()) << put.ToString();
  n = wait_min(1);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1u);
  cl.Start(0);
  ASSERT_FALSE(cl.procs[0].address().empty());
  ASSERT_TRUE(cl.WaitSynced(2)) << "the returning server never became a synced backup";
  n = wait_min(2);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 2u);
  client->reset();
  for (int i = 0; i < 3; i++) {
    int st = testutil::Term(cl.procs[i]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << i;
  }
}

TEST(KvCluster, FailoverRejoinColdStart_HistoryIsLinearizable) {
  TempDir d;
  Cluster cl(d);
  cl.StartAll();
  for (int i = 0; i < 3; i++) ASSERT_FALSE(cl.procs[i].address().empty()) << i;
  ASSERT_TRUE(cl.WaitSynced(2)) << "the first map never named two synced backups per shard";

  ClientOptions co;
  co.coordinator = cl.coord();
  co.retry_deadline = std::chrono::seconds(30);
  auto opened = Client::Open(co);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto client = std::move(opened).value();

  constexpr int kThreads = 3, kKeys = 8;
  std::mutex mu;
  std::vector<testing::RegisterOp> history;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> acked{0};
  const auto t0 = std::chrono::steady_clock::now();
  auto now_ns = [&] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                t0)
        .count();
  };
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++) {
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      uint64_t counter = 0;
      while (!stop) {
        testing::RegisterOp op;
        op.client = t;
        op.key = rng() % kKeys;
        const std::string key = "key" + std::to_string(op.key);
        const int what = static_cast<int>(rng() % 10);
        op.invoke_ns = now_ns();
        if (what < 5) {
          op.is_write = true;
          op.value = (uint64_t(t + 1) << 40) | ++counter;
          if (client->Put(key, std::to_string(op.value)).ok()) op.response_ns = now_ns();
        } else if (what < 6) {
          op.is_write = true;
          op.value = 0;
          if (client->Delete(key).ok()) op.response_ns = now_ns();
        } else {
          auto r = client->Get(key);
          if (!r.ok()) continue;
          op.response_ns = now_ns();
          op.value = r->found ? std::stoull(r->value) : 0;
        }
        if (op.response_ns != testing::kNoResponse) acked++;
        std::lock_guard<std::mutex> l(mu);
        history.push_back(op);
      }
    });
  }
  auto progress = [&](uint64_t n) {
    const uint64_t target = acked + n;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (acked < target && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return acked >= target;
  };
  auto finish = [&] {
    stop = true;
    for (auto& t : ts) t.join();
    ts.clear();
  };
  ASSERT_TRUE(progress(200));
  // Failover: kill server 0; its shards move to synced backups.
  testutil::Kill9(cl.procs[0]);
  EXPECT_TRUE(progress(200)) << "no progress after failover";
  // Rejoin: it comes back as a joining backup and is caught up.
  cl.Start(0);
  ASSERT_FALSE(cl.procs[0].address().empty());
  EXPECT_TRUE(cl.WaitSynced(2)) << "the returning server never became a synced backup";
  EXPECT_TRUE(progress(200));
  // Fail another one.
  testutil::Kill9(cl.procs[1]);
  EXPECT_TRUE(progress(200)) << "no progress after the second failover";
  // Cold start: all killed, all restarted.
  for (int i = 0; i < 3; i++) testutil::Kill9(cl.procs[i]);
  cl.StartAll();
  for (int i = 0; i < 3; i++) ASSERT_FALSE(cl.procs[i].address().empty()) << i;
  EXPECT_TRUE(progress(200)) << "no progress after the cold start";
  finish();
  for (int k = 0; k < kKeys; k++) {
    testing::RegisterOp op;
    op.client = kThreads;
    op.key = k;
    op.invoke_ns = now_ns();
    auto r = client->Get("key" + std::to_string(k));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    op.response_ns = now_ns();
    op.value = r->found ? std::stoull(r->value) : 0;
    history.push_back(op);
  }
  Status lin = testing::CheckRegisterHistory(history, 0);
  EXPECT_TRUE(lin.ok()) << lin.ToString() << " (" << history.size() << " ops)";
  client.reset();
  for (int i = 0; i < 3; i++) {
    int st = testutil::Term(cl.procs[i]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << i;
  }
}

}  // namespace
}  // namespace asymnvm::kv
