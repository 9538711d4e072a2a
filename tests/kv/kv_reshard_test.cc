// Load-based resharding of a replicated Rowan-KV cluster (doc/kv.md §Resharding), three real
// asymnvm-kv processes on an embedded coordinator, rf 2 (so a move's target is usually not yet a
// member of the shard: it first joins as a backup and is caught up):
//
//  * Replication/KvReshardModes.MovesAShardOffAnOverloadedServer/{rowan,rpc}: after a uniform
//  preload, three client threads
//    put, delete and read keys of which 80 % live in the shards of one server; the manager must
//    move one of its shards to another server while the history runs. The whole history must be
//    linearizable per key and every preloaded key of the moved shard read back. Prints the
//    detection time (skew start -> move planned, -> move committed) and the catch-up's
//    migration rate.
//  * KvReshard.TargetKilledMidMove_RollsBack: the primary holds the swap (test hook
//    --rebalance-swap-delay-ms) after its target is synced; the target is SIGKILLed; the map must
//    keep the old primary and drop the move, and the history stay linearizable.
//  * KvReshard.BadFlags_ExitTwo, KvReshard.OffByDefault: flag validation, and the off switch (no
//    statistics published, no shard moves under the same skew).
//
// Nothing asserts on wall-clock time: waits are on observable states (the map), with generous
// limits only to fail instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <set>
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

constexpr uint32_t kShards = 6;

struct Cluster {
  TempDir& d;
  std::vector<Proc> procs{3};
  std::vector<std::string> extra;
  explicit Cluster(TempDir& dir, std::vector<std::string> x) : d(dir), extra(std::move(x)) {}
  std::string coord() const { return "dir:" + d.File("coord"); }
  std::vector<std::string> Args(int i) const {
    std::vector<std::string> a{"--pool",
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
                               std::to_string(kShards),
                               "--rf",
                               "2",
                               "--initial-servers",
                               "3"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  void StartAll() {
    std::vector<std::thread> ts;
    for (int i = 0; i < 3; i++) ts.emplace_back([this, i] { procs[i] = StartKv(Args(i)); });
    for (auto& t : ts) t.join();
  }
  Result<ShardMap> Map() {
    auto c = coord::Coordinator::Open(coord());
    if (!c.ok()) return c.status();
    auto n = (*c)->Get("/asymnvm/kv/default/map");
    if (!n.ok()) return n.status();
    return ShardMap::Decode(n->data);
  }
  bool WaitMap(const std::function<bool(const ShardMap&)>& pred,
               std::chrono::seconds limit = std::chrono::seconds(60)) {
    return testutil::WaitFor(
        [&] {
          auto m = Map();
          return m.ok() && pred(*m);
        },
        limit);
  }
  // The process serving as `uuid` (by its OQ address in the map), or -1.
  int ProcOf(const ShardMap& m, const std::string& uuid) const {
    auto it = m.servers.find(uuid);
    for (int i = 0; i < 3; i++) {
      if (it != m.servers.end() && procs[i].pid > 0 && procs[i].address() == it->second.oq) {
        return i;
      }
    }
    return -1;
  }
};

// Every backup synced after the first map settled: the primaries re-mark their backups joining
// when they take up their roles (3 edits) and catch them up (6 x 1): from epoch 1 + 3 + 6 on.
bool AllSynced(const ShardMap& m) {
  if (m.epoch < 10) return false;
  for (const auto& a : m.assignment) {
    if (a.backups.empty()) return false;
    for (const auto& b : a.backups) {
      if (!b.synced) return false;
    }
  }
  return true;
}

// Keys "<prefix><n>" whose shard is in `shards`, `count` of them.
std::vector<std::string> KeysIn(const std::set<uint32_t>& shards, const std::string& prefix,
                                size_t count) {
  std::vector<std::string> keys;
  for (uint64_t n = 0; keys.size() < count; n++) {
    std::string k = prefix + std::to_string(n);
    if (shards.count(ShardOf(k, kShards))) keys.push_back(k);
  }
  return keys;
}

// Three client threads putting, deleting and reading `keys` (a register history for the
// linearizability checker); keys are picked uniformly, so the shards hold load in proportion to
// how many of the keys they hold.
struct History {
  Client* client;
  std::vector<std::string> keys;
  std::mutex mu;
  std::vector<testing::RegisterOp> ops;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> acked{0};
  std::vector<std::thread> ts;
  const std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  uint64_t seed = std::random_device{}();

  int64_t Now() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                t0)
        .count();
  }
  void Start() {
    for (int t = 0; t < 3; t++) {
      ts.emplace_back([this, t] {
        std::mt19937_64 rng(seed + t);
        uint64_t counter = 0;
        while (!stop) {
          testing::RegisterOp op;
          op.client = t;
          op.key = rng() % keys.size();
          const std::string& key = keys[op.key];
          const int what = static_cast<int>(rng() % 10);
          op.invoke_ns = Now();
          if (what < 4) {
            op.is_write = true;
            op.value = (uint64_t(t + 1) << 40) | ++counter;
            if (client->Put(key, std::to_string(op.value)).ok()) op.response_ns = Now();
          } else if (what < 5) {
            op.is_write = true;
            op.value = 0;
            if (client->Delete(key).ok()) op.response_ns = Now();
          } else {
            auto r = client->Get(key);
            if (!r.ok()) continue;
            op.response_ns = Now();
            op.value = r->found ? std::stoull(r->value) : 0;
          }
          if (op.response_ns != testing::kNoResponse) acked++;
          std::lock_guard<std::mutex> l(mu);
          ops.push_back(op);
        }
      });
    }
  }
  bool Progress(uint64_t n) {
    const uint64_t target = acked + n;
    return testutil::WaitFor([&] { return acked >= target; }, std::chrono::seconds(60));
  }
  // Stops the threads, closes the history with a read of every key, checks it.
  void FinishAndCheck() {
    stop = true;
    for (auto& t : ts) t.join();
    ts.clear();
    for (size_t k = 0; k < keys.size(); k++) {
      testing::RegisterOp op;
      op.client = 3;
      op.key = k;
      op.invoke_ns = Now();
      auto r = client->Get(keys[k]);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      op.response_ns = Now();
      op.value = r->found ? std::stoull(r->value) : 0;
      ops.push_back(op);
    }
    Status lin = testing::CheckRegisterHistory(ops, 0);
    EXPECT_TRUE(lin.ok()) << lin.ToString() << " (" << ops.size() << " ops, seed " << seed << ")";
  }
};

std::unique_ptr<Client> Open(Cluster& cl) {
  ClientOptions co;
  co.coordinator = cl.coord();
  co.retry_deadline = std::chrono::seconds(30);
  auto c = Client::Open(co);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

// The hot server (primary of shard 0), its shards, and the shards of the server that backs them
// up (the warm one: it gets some load, so the least loaded server, the target, is the third one,
// not yet a member of the hot shards).
struct Placement {
  std::string hot, warm;
  std::set<uint32_t> hot_shards, warm_shards;
};

Placement Place(const ShardMap& m) {
  Placement p;
  p.hot = m.assignment[0].primary;
  p.warm = m.assignment[0].backups.at(0).uuid;
  for (uint32_t s = 0; s < m.assignment.size(); s++) {
    if (m.assignment[s].primary == p.hot) p.hot_shards.insert(s);
    if (m.assignment[s].primary == p.warm) p.warm_shards.insert(s);
  }
  return p;
}

// The first hot shard that has a move pending (-1 none).
int Moving(const ShardMap& m, const Placement& p) {
  for (uint32_t s : p.hot_shards) {
    if (!m.assignment[s].move_to.empty()) return static_cast<int>(s);
  }
  return -1;
}

class KvReshardModes : public ::testing::TestWithParam<std::string> {};

TEST_P(KvReshardModes, MovesAShardOffAnOverloadedServer) {
  TempDir d;
  Cluster cl(d, {"--rebalance-threshold", "1.5", "--rebalance-period-ms", "200", "--replication",
                 GetParam()});
  cl.StartAll();
  for (int i = 0; i < 3; i++) ASSERT_FALSE(cl.procs[i].address().empty()) << i;
  ASSERT_TRUE(cl.WaitMap(AllSynced)) << "the first map never had every backup synced";
  auto client = Open(cl);
  ASSERT_NE(client, nullptr);

  // Uniform preload (every server equally loaded: nothing moves): what a move has to migrate.
  constexpr size_t kPreload = 6000, kValue = 1000;
  std::vector<uint32_t> all(kShards);
  for (uint32_t s = 0; s < kShards; s++) all[s] = s;
  const std::vector<std::string> pre = KeysIn({all.begin(), all.end()}, "pre", kPreload);
  auto value_of = [&](const std::string& k) {
    std::string v = k + ":";
    v.resize(kValue, static_cast<char>('a' + k.size() % 26));
    return v;
  };
  {
    std::vector<std::thread> ts;
    std::atomic<int> failed{0};
    for (int t = 0; t < 3; t++) {
      ts.emplace_back([&, t] {
        for (size_t i = t; i < pre.size(); i += 3) {
          if (!client->Put(pre[i], value_of(pre[i])).ok()) failed++;
        }
      });
    }
    for (auto& t : ts) t.join();
    ASSERT_EQ(failed, 0);
  }
  std::map<uint32_t, size_t> preloaded;
  for (const auto& k : pre) preloaded[ShardOf(k, kShards)]++;
  // The placement after the preload (which should not have moved anything, but the test does
  // not depend on it).
  auto m0 = cl.Map();
  ASSERT_TRUE(m0.ok()) << m0.status().ToString();
  const Placement p = Place(*m0);

  // Skew: 8 keys in the hot server's shards, 2 in the warm one's.
  History h;
  h.client = client.get();
  h.keys = KeysIn(p.hot_shards, "key", 8);
  for (auto& k : KeysIn(p.warm_shards, "key", 2)) h.keys.push_back(k);
  // Timeline of the move, from a thread polling the map (every 2 ms).
  std::atomic<bool> watching{true};
  std::atomic<int> moved{-1};
  std::atomic<int64_t> planned_ns{-1}, synced_ns{-1}, committed_ns{-1};
  std::string target;
  std::mutex target_mu;
  std::thread watcher([&] {
    while (watching && committed_ns < 0) {
      auto m = cl.Map();
      if (m.ok()) {
        const int s = moved >= 0 ? moved.load() : Moving(*m, p);
        if (s >= 0) {
          const auto& a = m->assignment[static_cast<uint32_t>(s)];
          if (moved < 0) {
            moved = s;
            planned_ns = h.Now();
            std::lock_guard<std::mutex> l(target_mu);
            target = a.move_to;
          }
          bool synced = false;
          for (const auto& b : a.backups) synced |= b.uuid == a.move_to && b.synced;
          if (synced && synced_ns < 0) synced_ns = h.Now();
          if (a.primary != p.hot) {
            if (synced_ns < 0) synced_ns = h.Now();
            committed_ns = h.Now();
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  h.Start();
  const bool committed =
      testutil::WaitFor([&] { return committed_ns >= 0; }, std::chrono::seconds(90));
  watching = false;
  watcher.join();
  EXPECT_TRUE(committed) << "the manager never moved a shard off the overloaded server";
  EXPECT_TRUE(h.Progress(300)) << "no progress after the move";
  ASSERT_NO_FATAL_FAILURE(h.FinishAndCheck());
  if (committed) {
    auto m = cl.Map();
    ASSERT_TRUE(m.ok());
    const uint32_t s = static_cast<uint32_t>(moved.load());
    EXPECT_NE(m->assignment[s].primary, p.hot);
    {
      std::lock_guard<std::mutex> l(target_mu);
      EXPECT_EQ(m->assignment[s].primary, target);
    }
    // The old primary stays a backup (rf 2: the only one).
    bool old_is_backup = false;
    for (const auto& b : m->assignment[s].backups) old_is_backup |= b.uuid == p.hot;
    EXPECT_TRUE(old_is_backup);
    // Every preloaded key of the moved shard (and the rest) reads back from its new primary.
    for (const auto& k : pre) {
      auto r = client->Get(k);
      ASSERT_TRUE(r.ok()) << k << ": " << r.status().ToString();
      ASSERT_TRUE(r->found && r->value == value_of(k)) << k << " lost its value";
    }
    const double detect_ms = static_cast<double>(planned_ns) / 1e6;
    const double commit_ms = static_cast<double>(committed_ns) / 1e6;
    const double catchup_ms = static_cast<double>(synced_ns - planned_ns) / 1e6;
    const size_t entries = preloaded[s];
    std::printf(
        "reshard: shard %u moved (%s); detection %.0f ms (skew start -> move planned), committed "
        "at %.0f ms; catch-up ~%zu entries of %zu B in <= %.1f ms: %.0f entries/s, %.1f MB/s\n",
        s, target.c_str(), detect_ms, commit_ms, entries, kValue, catchup_ms,
        catchup_ms > 0 ? static_cast<double>(entries) * 1000 / catchup_ms : 0.0,
        catchup_ms > 0 ? static_cast<double>(entries * kValue) / 1000 / catchup_ms : 0.0);
  }
  client.reset();
  for (int i = 0; i < 3; i++) {
    int st = testutil::Term(cl.procs[i]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << i;
  }
}

// rowan, and one baseline whose promotion digests the remote logs instead of the b-log (the
// catch-up streams over Rowan in every mode).
INSTANTIATE_TEST_SUITE_P(Replication, KvReshardModes, ::testing::Values("rowan", "rpc"),
                         [](const auto& info) { return info.param; });

TEST(KvReshard, TargetKilledMidMove_RollsBack) {
  TempDir d;
  // Threshold 2: with three servers the hot one (80 % of the load) is 2.4x the mean; once the
  // target is dead it is 1.6x the mean of two, so nothing else moves after the rollback.
  Cluster cl(d, {"--rebalance-threshold", "2", "--rebalance-period-ms", "200",
                 "--rebalance-swap-delay-ms", "600000"});
  cl.StartAll();
  for (int i = 0; i < 3; i++) ASSERT_FALSE(cl.procs[i].address().empty()) << i;
  ASSERT_TRUE(cl.WaitMap(AllSynced)) << "the first map never had every backup synced";
  auto m0 = cl.Map();
  ASSERT_TRUE(m0.ok()) << m0.status().ToString();
  const Placement p = Place(*m0);
  auto client = Open(cl);
  ASSERT_NE(client, nullptr);
  History h;
  h.client = client.get();
  h.keys = KeysIn(p.hot_shards, "key", 8);
  for (auto& k : KeysIn(p.warm_shards, "key", 2)) h.keys.push_back(k);
  h.Start();
  // The move planned and its target caught up: only the (held) swap is left.
  int shard = -1;
  std::string target;
  ASSERT_TRUE(cl.WaitMap(
      [&](const ShardMap& m) {
        shard = Moving(m, p);
        if (shard < 0) return false;
        const auto& a = m.assignment[static_cast<uint32_t>(shard)];
        target = a.move_to;
        for (const auto& b : a.backups) {
          if (b.uuid == a.move_to && b.synced) return true;
        }
        return false;
      },
      std::chrono::seconds(90)))
      << "no move of a hot shard reached its swap";
  auto m1 = cl.Map();
  ASSERT_TRUE(m1.ok());
  const int victim = cl.ProcOf(*m1, target);
  ASSERT_GE(victim, 0) << "no process for " << target;
  EXPECT_TRUE(h.Progress(100));
  testutil::Kill9(cl.procs[victim]);
  const uint32_t s = static_cast<uint32_t>(shard);
  EXPECT_TRUE(cl.WaitMap([&](const ShardMap& m) {
    return m.assignment[s].move_to.empty() && !m.servers.empty() && [&] {
      for (const auto& b : m.assignment[s].backups) {
        if (b.uuid == target) return false;
      }
      return true;
    }();
  })) << "the move to the dead target was never rolled back";
  auto m2 = cl.Map();
  ASSERT_TRUE(m2.ok());
  EXPECT_EQ(m2->assignment[s].primary, p.hot) << "the shard left its old primary";
  EXPECT_TRUE(h.Progress(300)) << "no progress after the rollback";
  ASSERT_NO_FATAL_FAILURE(h.FinishAndCheck());
  client.reset();
  for (int i = 0; i < 3; i++) {
    if (i == victim) continue;
    int st = testutil::Term(cl.procs[i]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << i;
  }
}

TEST(KvReshard, BadFlags_ExitTwo) {
  TempDir d;
  Cluster cl(d, {});
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"--rebalance-threshold", "0.5"},
           {"--rebalance-threshold", "1"},
           {"--rebalance-threshold", "x"},
           {"--rebalance-threshold", "1.5", "--rebalance-period-ms", "5"},
           {"--rebalance-threshold", "1.5", "--rebalance-move-timeout-ms", "10"},
       }) {
    auto args = cl.Args(0);
    args.insert(args.end(), bad.begin(), bad.end());
    Proc p = StartKv(args);
    const int st = testutil::WaitExit(p.pid);
    p.pid = -1;
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << bad[1] << " status " << st;
    EXPECT_EQ(p.first_line, "") << bad[1];
  }
}

TEST(KvReshard, OffByDefault) {
  TempDir d;
  Cluster cl(d, {});
  cl.StartAll();
  for (int i = 0; i < 3; i++) ASSERT_FALSE(cl.procs[i].address().empty()) << i;
  ASSERT_TRUE(cl.WaitMap(AllSynced));
  auto m0 = cl.Map();
  ASSERT_TRUE(m0.ok());
  const Placement p = Place(*m0);
  auto client = Open(cl);
  ASSERT_NE(client, nullptr);
  History h;
  h.client = client.get();
  h.keys = KeysIn(p.hot_shards, "key", 8);
  h.Start();
  EXPECT_TRUE(h.Progress(2000));
  ASSERT_NO_FATAL_FAILURE(h.FinishAndCheck());
  auto m = cl.Map();
  ASSERT_TRUE(m.ok());
  for (uint32_t s = 0; s < kShards; s++) {
    EXPECT_EQ(m->assignment[s].primary, m0->assignment[s].primary) << s;
    EXPECT_TRUE(m->assignment[s].move_to.empty()) << s;
  }
  // No statistics are published when resharding is off.
  auto c = coord::Coordinator::Open(cl.coord());
  ASSERT_TRUE(c.ok());
  auto load = (*c)->Children("/asymnvm/kv/default/load");
  EXPECT_TRUE(!load.ok() || load->empty());
  client.reset();
  for (int i = 0; i < 3; i++) {
    int st = testutil::Term(cl.procs[i]);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << i;
  }
}

}  // namespace
}  // namespace asymnvm::kv
