// A replicated Rowan-KV cluster of three asymnvm-kv processes sharing an embedded coordinator:
// clients write, delete and read shared keys while servers are SIGKILLed (failover to a synced
// backup), restarted (rejoin as a backup, caught up by the primary), and all killed at once (cold
// start). The whole history must be linearizable per key: no acknowledged write lost, no deleted
// key back.
//
// KvReplication: the same cluster under each --replication variant (rowan and the paper's
// baselines rpc, rwrite, batch, share; doc/kv.md §Baselines): PUT/GET/DELETE, a server SIGKILLed
// (a backup of some shards, the primary of others: failover) and restarted, a second failover that
// promotes copies written through the variant's logs; every acknowledged write must be read back.
// Built with KV_CLUSTER_VARIANTS (kv_cluster_variants_test, label long) this file instead runs the
// failover/rejoin/cold-start linearizability history under every baseline.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
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
  std::string replication = "rowan";
  std::vector<std::string> extra;  // appended to every server's command line
  explicit Cluster(TempDir& dir, std::string repl = "rowan")
      : d(dir), replication(std::move(repl)) {}
  std::string coord() const { return "dir:" + d.File("coord"); }
  std::vector<std::string> Args(int i) const {
    std::vector<std::string> a = Base(i);
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  std::vector<std::string> Base(int i) const {
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
            "3",
            "--replication",
            replication};
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
    return WaitSynced(backups, 0, limit);
  }
  // The first map names every backup synced, but each primary, taking up its role, re-marks its
  // shards' backups joining and catches them up: a server killed before that leaves shards
  // without a promotable backup (they wait for it: "no progress after failover", seen under
  // load). Settled = every backup synced again after the 3 re-marks and 6 x 2 catch-ups, i.e.
  // from epoch 1 + 3 + 12 on.
  bool WaitFirstMapSettled() { return WaitSynced(2, 16, std::chrono::seconds(60)); }
  bool WaitSynced(size_t backups, uint64_t min_epoch, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      auto m = Map();
      if (m.ok() && m->epoch >= min_epoch) {
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
  // The uuid of server i (its address names kv<i>.sock).
  static std::string Uuid(const ShardMap& m, int i) {
    for (const auto& [u, a] : m.servers) {
      if (a.oq.find("kv" + std::to_string(i) + ".sock") != std::string::npos) return u;
    }
    return "";
  }
  static std::map<std::string, uint32_t> Leads(const ShardMap& m) {
    std::map<std::string, uint32_t> n;
    for (const auto& a : m.assignment) n[a.primary]++;
    return n;
  }
  // Waits until every shard has two synced backups and no pending move, and `pred` holds.
  template <typename P>
  Result<ShardMap> WaitMap(P pred, std::chrono::seconds limit = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      auto m = Map();
      if (m.ok()) {
        bool ok = true;
        for (auto& a : m->assignment) {
          size_t synced = 0;
          for (auto& b : a.backups) synced += b.synced ? 1 : 0;
          ok &= synced == 2 && a.move_to.empty();
        }
        if (ok && pred(*m)) return m;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return Status::TimedOut("the shard map never reached the awaited state");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
};

// Client threads writing, deleting and reading 8 shared keys through `client`, recording a
// history that the final reads close and the linearizability checker judges.
class History {
 public:
  History(Client* client, uint64_t seed) : client_(client) {
    t0_ = std::chrono::steady_clock::now();
    for (int t = 0; t < kThreads; t++) {
      ts_.emplace_back([this, t, seed] {
        std::mt19937_64 rng(seed + t);
        uint64_t counter = 0;
        while (!stop_) {
          testing::RegisterOp op;
          op.client = t;
          op.key = rng() % kKeys;
          const std::string key = "key" + std::to_string(op.key);
          const int what = static_cast<int>(rng() % 10);
          op.invoke_ns = now_ns();
          if (what < 5) {
            op.is_write = true;
            op.value = (uint64_t(t + 1) << 40) | ++counter;
            if (client_->Put(key, std::to_string(op.value)).ok()) op.response_ns = now_ns();
          } else if (what < 6) {
            op.is_write = true;
            op.value = 0;
            if (client_->Delete(key).ok()) op.response_ns = now_ns();
          } else {
            auto r = client_->Get(key);
            if (!r.ok()) continue;
            op.response_ns = now_ns();
            op.value = r->found ? std::stoull(r->value) : 0;
          }
          if (op.response_ns != testing::kNoResponse) acked_++;
          std::lock_guard<std::mutex> l(mu_);
          history_.push_back(op);
        }
      });
    }
  }
  ~History() { Finish(); }
  // Waits (up to 60 s) for n more acknowledged operations.
  bool Progress(uint64_t n) {
    const uint64_t target = acked_ + n;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (acked_ < target && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return acked_ >= target;
  }
  void Finish() {
    stop_ = true;
    for (auto& t : ts_) t.join();
    ts_.clear();
  }
  // Stops the threads, reads every key once more and checks the whole history.
  Status Check() {
    Finish();
    for (int k = 0; k < kKeys; k++) {
      testing::RegisterOp op;
      op.client = kThreads;
      op.key = k;
      op.invoke_ns = now_ns();
      auto r = client_->Get("key" + std::to_string(k));
      if (!r.ok()) return r.status().WithContext("final read");
      op.response_ns = now_ns();
      op.value = r->found ? std::stoull(r->value) : 0;
      history_.push_back(op);
    }
    Status lin = testing::CheckRegisterHistory(history_, 0);
    if (!lin.ok()) return lin.WithContext(std::to_string(history_.size()) + " ops");
    return Status::Ok();
  }

 private:
  static constexpr int kThreads = 3, kKeys = 8;
  int64_t now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                t0_)
        .count();
  }
  Client* client_;
  std::chrono::steady_clock::time_point t0_;
  std::mutex mu_;
  std::vector<testing::RegisterOp> history_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> acked_{0};
  std::vector<std::thread> ts_;
};

#ifndef KV_CLUSTER_VARIANTS
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

// Issue 29: a SIGSTOPped backup does not stall writes. Server 2 is stopped (its own shards wait
// for it: the embedded coordinator keeps a stopped server's shards); a write to every shard it
// only backs must be acknowledged (the wait, the backup bound of 250 ms plus one map edit, is
// measured by the kv bench's pause-backup fault runs, not asserted here) and, once acknowledged,
// server 2 is no synced backup of that shard (it left before the ack). Woken,
// it rejoins every shard by catch-up; then server 0 is SIGKILLed (failover onto copies that
// include server 2's), and the whole history must be linearizable.
TEST(KvCluster, SigstoppedBackupLeavesBeforeTheAckAndRejoins_HistoryIsLinearizable) {
  TempDir d;
  Cluster cl(d);
  cl.StartAll();
  for (int i = 0; i < 3; i++) ASSERT_FALSE(cl.procs[i].address().empty()) << i;
  ASSERT_TRUE(cl.WaitFirstMapSettled());
  ClientOptions co;
  co.coordinator = cl.coord();
  co.retry_deadline = std::chrono::seconds(30);
  auto client = Client::Open(co);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  // Generous: tests do not assert on wall-clock time (under ASan on a loaded machine a 3 s bound
  // failed 1 run in 3). How long such a write waits is measured by `asymnvm-bench kv --faults
  // pause-backup` (write p99 during the pause); this test checks that the write is acknowledged
  // without the stopped backup, that it left before the ack, and that it rejoins.
  co.timeout = std::chrono::seconds(20);
  auto probe = Client::Open(co);
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  History h(client->get(), seed);
  ASSERT_TRUE(h.Progress(100));
  auto m = cl.Map();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::string stopped = Cluster::Uuid(*m, 2);
  ASSERT_FALSE(stopped.empty());
  ASSERT_TRUE(testutil::StopAndWait(cl.procs[2].pid));
  int written = 0;
  for (uint32_t s = 0; s < m->shards; s++) {
    if (m->assignment[s].primary == stopped) continue;
    std::string key;
    for (int i = 0; key.empty(); i++) {
      if (ShardOf("p" + std::to_string(i), m->shards) == s) key = "p" + std::to_string(i);
    }
    Status put = (*probe)->Put(key, "v");
    EXPECT_TRUE(put.ok()) << "shard " << s << ": " << put.ToString();
    auto after = cl.Map();
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    for (const auto& b : after->assignment[s].backups) {
      EXPECT_FALSE(b.uuid == stopped && b.synced) << "shard " << s << " acknowledged a write "
                                                  << "while the stopped backup stayed synced";
    }
    written++;
  }
  EXPECT_GT(written, 0);
  kill(cl.procs[2].pid, SIGCONT);
  EXPECT_TRUE(cl.WaitSynced(2)) << "the woken backup never rejoined every shard";
  EXPECT_TRUE(h.Progress(100));
  testutil::Kill9(cl.procs[0]);
  EXPECT_TRUE(h.Progress(100)) << "no progress after the failover";
  Status lin = h.Check();
  EXPECT_TRUE(lin.ok()) << lin.ToString();
  probe->reset();
  client->reset();
  for (int i = 1; i < 3; i++) {
    int st = testutil::Term(cl.procs[i]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << i;
  }
}

// Issue 29: primaries spread back. Twice, two servers are SIGKILLed at once so that the third
// leads every shard; when they return and are synced, the manager moves primaries back (one
// move at a time, the move protocol) until no server leads more than ceil(6 / 3) + 1 = 3
// shards. Writes go on throughout; the whole history must be linearizable. With
// --no-spread-primaries (the negative control) the survivor keeps leading everything.
void PilesUpAndSpreads(bool spread) {
  TempDir d;
  Cluster cl(d);
  if (!spread) cl.extra = {"--no-spread-primaries"};
  cl.StartAll();
  for (int i = 0; i < 3; i++) ASSERT_FALSE(cl.procs[i].address().empty()) << i;
  ASSERT_TRUE(cl.WaitFirstMapSettled());
  ClientOptions co;
  co.coordinator = cl.coord();
  co.retry_deadline = std::chrono::seconds(30);
  auto client = Client::Open(co);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  History h(client->get(), seed);
  ASSERT_TRUE(h.Progress(100));
  for (int round = 0; round < (spread ? 2 : 1); round++) {
    const int survivor = 2 - round;
    auto before = cl.WaitMap([](const ShardMap&) { return true; });
    ASSERT_TRUE(before.ok()) << before.status().ToString();
    const std::string lead = Cluster::Uuid(*before, survivor);
    for (int i = 0; i < 3; i++) {
      if (i != survivor) testutil::Kill9(cl.procs[i]);
    }
    EXPECT_TRUE(h.Progress(100)) << "no progress with one server left";
    auto piled = cl.Map();
    ASSERT_TRUE(piled.ok()) << piled.status().ToString();
    EXPECT_EQ(Cluster::Leads(*piled)[lead], piled->shards) << "round " << round;
    for (int i = 0; i < 3; i++) {
      if (i != survivor) cl.Start(i);
    }
    const uint32_t limit = spread ? (6 + 2) / 3 + 1 : 6;
    auto spread_map = cl.WaitMap([&](const ShardMap& m) {
      if (m.servers.size() < 3) return false;
      for (const auto& [u, n] : Cluster::Leads(m)) {
        if (n > limit) return false;
      }
      return true;
    });
    ASSERT_TRUE(spread_map.ok()) << "round " << round << ": " << spread_map.status().ToString();
    EXPECT_TRUE(h.Progress(100));
    if (!spread) {
      // Settled and synced, and nothing moves: still all on the survivor.
      std::this_thread::sleep_for(std::chrono::seconds(1));
      auto still = cl.Map();
      ASSERT_TRUE(still.ok());
      EXPECT_EQ(Cluster::Leads(*still)[lead], still->shards);
    }
  }
  Status lin = h.Check();
  EXPECT_TRUE(lin.ok()) << lin.ToString();
  client->reset();
  for (int i = 0; i < 3; i++) {
    int st = testutil::Term(cl.procs[i]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << i;
  }
}

TEST(KvCluster, PrimariesSpreadBackAfterPilingUpOnOneServer_HistoryIsLinearizable) {
  PilesUpAndSpreads(true);
}

TEST(KvCluster, WithoutSpreadingPrimariesStayPiledUp) { PilesUpAndSpreads(false); }

#endif  // KV_CLUSTER_VARIANTS

void FailoverRejoinColdStart(const std::string& replication) {
  TempDir d;
  Cluster cl(d, replication);
  cl.StartAll();
  for (int i = 0; i < 3; i++) ASSERT_FALSE(cl.procs[i].address().empty()) << i;
  ASSERT_TRUE(cl.WaitFirstMapSettled())
      << "the first map never settled (two synced backups per shard)";

  ClientOptions co;
  co.coordinator = cl.coord();
  co.retry_deadline = std::chrono::seconds(30);
  auto opened = Client::Open(co);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto client = std::move(opened).value();
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  History h(client.get(), seed);
  ASSERT_TRUE(h.Progress(200));
  // Failover: kill server 0; its shards move to synced backups.
  testutil::Kill9(cl.procs[0]);
  EXPECT_TRUE(h.Progress(200)) << "no progress after failover";
  // Rejoin: it comes back as a joining backup and is caught up.
  cl.Start(0);
  ASSERT_FALSE(cl.procs[0].address().empty());
  EXPECT_TRUE(cl.WaitSynced(2)) << "the returning server never became a synced backup";
  EXPECT_TRUE(h.Progress(200));
  // Fail another one.
  testutil::Kill9(cl.procs[1]);
  EXPECT_TRUE(h.Progress(200)) << "no progress after the second failover";
  // Cold start: all killed, all restarted.
  for (int i = 0; i < 3; i++) testutil::Kill9(cl.procs[i]);
  cl.StartAll();
  for (int i = 0; i < 3; i++) ASSERT_FALSE(cl.procs[i].address().empty()) << i;
  EXPECT_TRUE(h.Progress(200)) << "no progress after the cold start";
  Status lin = h.Check();
  EXPECT_TRUE(lin.ok()) << lin.ToString();
  client.reset();
  for (int i = 0; i < 3; i++) {
    int st = testutil::Term(cl.procs[i]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << i;
  }
}

class KvReplication : public ::testing::TestWithParam<std::string> {};

#ifndef KV_CLUSTER_VARIANTS
TEST(KvCluster, FailoverRejoinColdStart_HistoryIsLinearizable) { FailoverRejoinColdStart("rowan"); }

TEST_P(KvReplication, PutGetDelete_BackupRestart_Failovers_NoAcknowledgedWriteLost) {
  TempDir d;
  Cluster cl(d, GetParam());
  cl.StartAll();
  for (int i = 0; i < 3; i++) ASSERT_FALSE(cl.procs[i].address().empty()) << i;
  ASSERT_TRUE(cl.WaitFirstMapSettled())
      << "the first map never settled (two synced backups per shard)";
  ClientOptions co;
  co.coordinator = cl.coord();
  co.retry_deadline = std::chrono::seconds(30);
  auto opened = Client::Open(co);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto client = std::move(opened).value();
  // The oracle: key -> the value of its last acknowledged write ("" = deleted).
  std::map<std::string, std::string> oracle;
  int round = 0;
  auto write_round = [&](int n) {
    round++;
    for (int i = 0; i < n; i++) {
      const std::string key = "k" + std::to_string(i % 97);
      // Values of every size class the variants frame differently: small, > 256 B, > 4 KiB.
      const size_t size = (i % 3 == 0) ? 20 : (i % 3 == 1) ? 700 : 9000;
      std::string value = "r" + std::to_string(round) + "i" + std::to_string(i) + ":";
      value.resize(size, static_cast<char>('a' + i % 26));
      if (i % 11 == 5) {
        auto del = client->Delete(key);
        ASSERT_TRUE(del.ok()) << key << ": " << del.status().ToString();
        oracle[key] = "";
      } else {
        Status st = client->Put(key, value);
        ASSERT_TRUE(st.ok()) << key << ": " << st.ToString();
        oracle[key] = value;
      }
    }
  };
  auto check = [&](const char* when) {
    for (const auto& [key, value] : oracle) {
      auto r = client->Get(key);
      ASSERT_TRUE(r.ok()) << when << " " << key << ": " << r.status().ToString();
      if (value.empty()) {
        EXPECT_FALSE(r->found) << when << ": deleted " << key << " is back";
      } else {
        EXPECT_TRUE(r->found && r->value == value) << when << ": " << key << " lost its value";
      }
    }
  };
  ASSERT_NO_FATAL_FAILURE(write_round(300));
  // The largest entry each mode must carry whole (a 1 MiB value: one record of a ring, one rpc
  // message), then small ones behind it.
  std::string big(kMaxValueSize, 'B');
  for (int i = 0; i < 4; i++) {
    big[0] = static_cast<char>('0' + i);
    Status st = client->Put("big" + std::to_string(i % 2), big);
    ASSERT_TRUE(st.ok()) << st.ToString();
    oracle["big" + std::to_string(i % 2)] = big;
  }
  ASSERT_NO_FATAL_FAILURE(write_round(50));
  ASSERT_NO_FATAL_FAILURE(check("after the writes"));
  // Server 0 is a backup of some shards and the primary of others: its shards fail over to
  // copies the variant wrote; the others lose a backup.
  testutil::Kill9(cl.procs[0]);
  ASSERT_NO_FATAL_FAILURE(check("after the first failover"));
  ASSERT_NO_FATAL_FAILURE(write_round(200));
  // It comes back as a joining backup (caught up), then takes new writes through the variant.
  cl.Start(0);
  ASSERT_FALSE(cl.procs[0].address().empty());
  ASSERT_TRUE(cl.WaitSynced(2)) << "the restarted server never became a synced backup";
  ASSERT_NO_FATAL_FAILURE(write_round(300));
  // A second failover: server 1's shards move to servers that hold them only through the
  // variant's logs (and server 0's catch-up).
  testutil::Kill9(cl.procs[1]);
  ASSERT_NO_FATAL_FAILURE(check("after the second failover"));
  ASSERT_NO_FATAL_FAILURE(write_round(100));
  ASSERT_NO_FATAL_FAILURE(check("at the end"));
  client.reset();
  for (int i : {0, 2}) {
    int st = testutil::Term(cl.procs[i]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << i;
  }
}
INSTANTIATE_TEST_SUITE_P(Variants, KvReplication,
                         ::testing::Values("rowan", "rpc", "rwrite", "batch", "share"),
                         [](const auto& info) { return info.param; });
#else
TEST_P(KvReplication, FailoverRejoinColdStart_HistoryIsLinearizable) {
  FailoverRejoinColdStart(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Variants, KvReplication,
                         ::testing::Values("rpc", "rwrite", "batch", "share"),
                         [](const auto& info) { return info.param; });
#endif

}  // namespace
}  // namespace asymnvm::kv
