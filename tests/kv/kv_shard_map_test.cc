// The configuration manager's pure resharding functions (doc/kv.md §Resharding): the map's
// `move=` field, PlanMove's decision (threshold, target choice, no bouncing of a single hot
// shard, cooldown, rf 1), SwapPrimary (the move's commit), NextMap's rollback of a move whose
// target died or left the shard, and the rejoin backoff of backups a primary removed.
#include <gtest/gtest.h>

#include "kv/shard_map.h"

namespace asymnvm::kv {
namespace {

// Three servers a, b, c; 6 shards; primaries round-robin (a: 0 3, b: 1 4, c: 2 5).
ShardMap Initial(uint32_t rf) {
  std::map<std::string, ServerAddr> live;
  for (const char* u : {"a", "b", "c"}) live[u] = {std::string("oq-") + u, "rowan", ""};
  ShardMap m;
  EXPECT_TRUE(NextMap(ShardMap{}, live, 6, rf, &m));
  return m;
}

std::map<std::string, LoadReport> Load(uint64_t epoch, std::map<uint32_t, uint64_t> per_shard,
                                       const ShardMap& m) {
  std::map<std::string, LoadReport> r;
  for (const char* u : {"a", "b", "c"}) r[u].epoch = epoch;
  for (auto [s, n] : per_shard) r[m.assignment[s].primary].ops_per_sec[s] = n;
  return r;
}

const std::set<std::string> kLive{"a", "b", "c"};

RebalanceOptions On(double threshold = 1.5) {
  RebalanceOptions o;
  o.threshold = threshold;
  return o;
}

TEST(KvShardMap, MoveFieldRoundTrips) {
  ShardMap m = Initial(2);
  m.assignment[3].move_to = "c";
  m.assignment[3].backups.push_back({"c", false});
  auto d = ShardMap::Decode(m.Encode());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->assignment[3].move_to, "c");
  EXPECT_EQ(d->assignment[3].backups.size(), 2u);
  EXPECT_EQ(d->Encode(), m.Encode());
  // rf 1: no backups, the move token alone.
  ShardMap one = Initial(1);
  one.assignment[0].move_to = "b";
  auto d1 = ShardMap::Decode(one.Encode());
  ASSERT_TRUE(d1.ok()) << d1.status().ToString();
  EXPECT_EQ(d1->assignment[0].move_to, "b");
  EXPECT_TRUE(d1->assignment[0].backups.empty());
  EXPECT_FALSE(ShardMap::Decode("epoch 1\nshards 1\nrf 1\nshard 0 a move=\n").ok());
  auto r = LoadReport::Decode(LoadReport{7, {{1, 10}, {4, 0}}}.Encode());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->epoch, 7u);
  EXPECT_EQ(r->ops_per_sec.size(), 2u);
  EXPECT_FALSE(LoadReport::Decode("shard x\n").ok());
}

TEST(KvShardMap, PlanMoveTakesTheShardThatBalancesBest) {
  ShardMap m = Initial(2);  // shard s backups: the next server
  ShardMap next;
  std::string why;
  // a: 400 + 400, b: 200, c: 0. Mean 333; a is above 1.5x. c is least loaded and no member of
  // shard 0 or 3: it joins as a backup first.
  auto load = Load(m.epoch, {{0, 400}, {3, 400}, {1, 200}}, m);
  ASSERT_TRUE(PlanMove(m, kLive, load, On(), {}, &next, &why));
  EXPECT_EQ(next.epoch, m.epoch + 1);
  int moved = -1;
  for (uint32_t s = 0; s < 6; s++) {
    if (!next.assignment[s].move_to.empty()) moved = static_cast<int>(s);
  }
  ASSERT_TRUE(moved == 0 || moved == 3) << moved;
  const auto& a = next.assignment[static_cast<uint32_t>(moved)];
  EXPECT_EQ(a.move_to, "c");
  EXPECT_EQ(a.primary, "a");
  ASSERT_EQ(a.backups.size(), 2u);
  EXPECT_EQ(a.backups[1].uuid, "c");
  EXPECT_FALSE(a.backups[1].synced);
  EXPECT_NE(why.find("joins as a backup"), std::string::npos) << why;
  // A move pending: nothing else moves.
  EXPECT_FALSE(PlanMove(next, kLive, load, On(), {}, &next, &why));
}

TEST(KvShardMap, PlanMoveLeavesBalancedOrSingleHotShardAlone) {
  ShardMap m = Initial(3);
  ShardMap next;
  std::string why;
  // Balanced.
  EXPECT_FALSE(
      PlanMove(m, kLive, Load(m.epoch, {{0, 100}, {1, 100}, {2, 100}}, m), On(), {}, &next, &why));
  // One hot shard: moving it would only overload the target (no bouncing).
  EXPECT_FALSE(PlanMove(m, kLive, Load(m.epoch, {{0, 1000}}, m), On(), {}, &next, &why));
  // Below the minimum rate.
  EXPECT_FALSE(PlanMove(m, kLive, Load(m.epoch, {{0, 20}, {3, 20}}, m), On(), {}, &next, &why));
  // Off.
  EXPECT_FALSE(PlanMove(m, kLive, Load(m.epoch, {{0, 500}, {3, 500}}, m), RebalanceOptions{}, {},
                        &next, &why));
  // Above the threshold by the mean of 3: 2 hot shards of a; but a threshold of 4 is not met.
  EXPECT_FALSE(PlanMove(m, kLive, Load(m.epoch, {{0, 500}, {3, 500}}, m), On(4), {}, &next, &why));
  // Cooling down: shard 0 and 3 just moved.
  EXPECT_FALSE(
      PlanMove(m, kLive, Load(m.epoch, {{0, 500}, {3, 500}}, m), On(), {0, 3}, &next, &why));
  EXPECT_TRUE(PlanMove(m, kLive, Load(m.epoch, {{0, 500}, {3, 500}}, m), On(), {0}, &next, &why));
  EXPECT_EQ(next.assignment[3].move_to, "b");  // rf 3: b is a synced backup; ties by uuid
  // rf 1 never moves.
  ShardMap one = Initial(1);
  EXPECT_FALSE(
      PlanMove(one, kLive, Load(one.epoch, {{0, 500}, {3, 500}}, one), On(), {}, &next, &why));
}

TEST(KvShardMap, SwapPrimaryCommitsOnlyASyncedTarget) {
  ShardMap m = Initial(2);
  m.assignment[0].backups.push_back({"c", false});
  m.assignment[0].move_to = "c";
  ShardMap t = m;
  EXPECT_FALSE(SwapPrimary(&t, 0, "a"));  // c is still joining
  t.assignment[0].backups[1].synced = true;
  EXPECT_FALSE(SwapPrimary(&t, 0, "b"));  // not the primary
  ASSERT_TRUE(SwapPrimary(&t, 0, "a"));
  const auto& a = t.assignment[0];
  EXPECT_EQ(a.primary, "c");
  EXPECT_TRUE(a.move_to.empty());
  // rf 2: the old primary stays as the one (synced) backup; b (the surplus) leaves.
  ASSERT_EQ(a.backups.size(), 1u);
  EXPECT_EQ(a.backups[0].uuid, "a");
  EXPECT_TRUE(a.backups[0].synced);
}

TEST(KvShardMap, NextMapRollsBackAMoveWhoseTargetDied) {
  ShardMap m = Initial(2);
  m.assignment[0].backups.push_back({"c", true});
  m.assignment[0].move_to = "c";
  std::map<std::string, ServerAddr> live = m.servers;
  ShardMap same;
  EXPECT_FALSE(NextMap(m, live, 6, 2, &same));  // nothing to change: the move stays
  live.erase("c");
  ShardMap next;
  ASSERT_TRUE(NextMap(m, live, 6, 2, &next));
  EXPECT_EQ(next.assignment[0].primary, "a");
  EXPECT_TRUE(next.assignment[0].move_to.empty());
  for (const auto& b : next.assignment[0].backups) EXPECT_NE(b.uuid, "c");
  // The target left the shard (its replication failed): rolled back too.
  ShardMap left = m;
  left.assignment[0].backups.pop_back();
  ASSERT_TRUE(NextMap(left, m.servers, 6, 2, &next));
  EXPECT_TRUE(next.assignment[0].move_to.empty());
}

TEST(KvShardMap, RebalanceOptionsValidate) {
  RebalanceOptions o;
  EXPECT_TRUE(o.Validate().ok());  // off
  o.threshold = 1.0;
  EXPECT_FALSE(o.Validate().ok());
  o.threshold = 1.5;
  EXPECT_TRUE(o.Validate().ok());
  o.period_ms = 1;
  EXPECT_FALSE(o.Validate().ok());
  o.period_ms = 1000;
  o.move_timeout_ms = 10;
  EXPECT_FALSE(o.Validate().ok());
}

// A backup its primary removed while it stayed alive (a failed replication) is held out of that
// shard for 1 s, then 2 s, 4 s ... up to the maximum, and back to 1 s after a quiet period;
// meanwhile NextMap lets another live server join instead.
TEST(KvShardMap, RemovedBackupRejoinsAfterAGrowingDelay) {
  using namespace std::chrono_literals;
  ShardMap m = Initial(2);  // shard 0: primary a, backup b
  ASSERT_EQ(m.assignment[0].backups.size(), 1u);
  ASSERT_EQ(m.assignment[0].backups[0].uuid, "b");
  RejoinBackoff::Options o;
  o.first = 1s;
  o.max = 4s;
  o.reset_after = 60s;
  RejoinBackoff backoff(o);
  const auto t0 = RejoinBackoff::Clock::time_point{} + 1000s;

  // The primary removes b (the map write of RemoveBackup).
  ShardMap removed = m;
  removed.assignment[0].backups.clear();
  removed.epoch = m.epoch + 1;
  auto found = backoff.Observe(m, removed, kLive, t0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].first, "0:b");
  EXPECT_EQ(found[0].second, std::chrono::duration_cast<RejoinBackoff::Clock::duration>(1s));
  EXPECT_TRUE(backoff.Observe(removed, removed, kLive, t0).empty());  // read again: no news

  // Held: c joins shard 0 instead of b.
  ShardMap next;
  ASSERT_TRUE(NextMap(removed, m.servers, 6, 2, &next, backoff.Held(t0 + 500ms)));
  ASSERT_EQ(next.assignment[0].backups.size(), 1u);
  EXPECT_EQ(next.assignment[0].backups[0].uuid, "c");
  EXPECT_FALSE(next.assignment[0].backups[0].synced);
  // Only two servers alive: nobody joins while b is held, b joins once the delay is over.
  std::map<std::string, ServerAddr> two{{"a", m.servers.at("a")}, {"b", m.servers.at("b")}};
  ShardMap alone;
  NextMap(removed, two, 6, 2, &alone, backoff.Held(t0 + 500ms));
  EXPECT_TRUE(alone.assignment[0].backups.empty());
  ASSERT_TRUE(NextMap(removed, two, 6, 2, &next, backoff.Held(t0 + 1s)));
  ASSERT_EQ(next.assignment[0].backups.size(), 1u);
  EXPECT_EQ(next.assignment[0].backups[0].uuid, "b");

  // Removed again and again: 2 s, 4 s, then capped at 4 s.
  ShardMap rejoined = removed;
  rejoined.assignment[0].backups.push_back({"b", false});
  auto t = t0 + 2s;
  for (auto want : {2s, 4s, 4s}) {
    rejoined.epoch += 2;
    removed.epoch = rejoined.epoch + 1;
    EXPECT_TRUE(backoff.Observe(removed, rejoined, kLive, t).empty());  // a join is no removal
    found = backoff.Observe(rejoined, removed, kLive, t);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].second, std::chrono::duration_cast<RejoinBackoff::Clock::duration>(want));
    EXPECT_TRUE(backoff.Held(t + want - 1ms).count({0, "b"}));
    EXPECT_FALSE(backoff.Held(t + want).count({0, "b"}));
    t += want + 1s;
  }
  // After a quiet minute the delay starts over at 1 s.
  t += 61s;
  rejoined.epoch += 2;
  removed.epoch = rejoined.epoch + 1;
  found = backoff.Observe(rejoined, removed, kLive, t);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].second, std::chrono::duration_cast<RejoinBackoff::Clock::duration>(1s));
  EXPECT_EQ(backoff.removals(), 5u);
}

// Not removals: a backup that died, a backup promoted at a failover, a move's surplus drop.
TEST(KvShardMap, DeathsPromotionsAndMovesAreNotRemovals) {
  ShardMap m = Initial(2);  // shard 0: a + b
  RejoinBackoff backoff;
  const auto now = RejoinBackoff::Clock::now();
  ShardMap dead = m;
  dead.assignment[0].backups.clear();
  dead.epoch++;
  EXPECT_TRUE(backoff.Observe(m, dead, {"a", "c"}, now).empty());  // b is not alive
  ShardMap promoted = m;
  promoted.assignment[0].primary = "b";
  promoted.assignment[0].backups.clear();
  promoted.epoch++;
  EXPECT_TRUE(backoff.Observe(m, promoted, kLive, now).empty());
  ShardMap moving = m;
  moving.assignment[0].backups.push_back({"c", true});
  moving.assignment[0].move_to = "c";
  ShardMap swapped = moving;
  ASSERT_TRUE(SwapPrimary(&swapped, 0, "a"));
  swapped.epoch++;
  EXPECT_TRUE(backoff.Observe(moving, swapped, kLive, now).empty());
  EXPECT_TRUE(backoff.Held(now).empty());
  EXPECT_EQ(backoff.removals(), 0u);
}

// Spreading primaries back (doc/kv.md §Spreading primaries back): every shard led by `a` (as
// after the failovers of b and c) with b and c back as synced backups: one move at a time, to
// the shard's preferred primary (round-robin in uuid order: shard s -> {a,b,c}[s % 3]); applying
// each move, the primaries end spread 2/2/2 and then nothing moves.
TEST(KvShardMap, PlanSpreadMovesPrimariesBackOneAtATime) {
  ShardMap m = Initial(3);
  for (auto& a : m.assignment) {
    a.primary = "a";
    a.backups = {{"b", true}, {"c", true}};
  }
  ShardMap next;
  std::string why;
  int moves = 0;
  while (PlanSpread(m, kLive, 0, &next, &why)) {
    ASSERT_LT(++moves, 10) << why;
    int moved = -1;
    for (uint32_t s = 0; s < 6; s++) {
      if (!next.assignment[s].move_to.empty()) {
        EXPECT_EQ(moved, -1) << "two moves at once";
        moved = static_cast<int>(s);
      }
    }
    ASSERT_GE(moved, 0);
    const uint32_t s = static_cast<uint32_t>(moved);
    EXPECT_EQ(next.assignment[s].primary, "a");
    EXPECT_EQ(next.assignment[s].move_to, std::string(1, "abc"[s % 3])) << why;
    EXPECT_EQ(next.epoch, m.epoch + 1);
    // A move pending: nothing else is planned.
    ShardMap again;
    EXPECT_FALSE(PlanSpread(next, kLive, 0, &again, &why));
    ASSERT_TRUE(SwapPrimary(&next, s, "a"));
    for (auto& b : next.assignment[s].backups) b.synced = true;  // caught up
    m = next;
  }
  EXPECT_EQ(moves, 4);
  auto leads = LeaderCounts(m, kLive);
  EXPECT_EQ(leads["a"], 2u);
  EXPECT_EQ(leads["b"], 2u);
  EXPECT_EQ(leads["c"], 2u);
}

// Only a live synced backup takes a shard; the limit (resharding on: ceil + 1) is respected;
// rf 1 never moves.
TEST(KvShardMap, PlanSpreadNeedsASyncedBackupBelowTheLimit) {
  ShardMap m = Initial(3);
  for (auto& a : m.assignment) {
    a.primary = "a";
    a.backups = {{"b", false}, {"c", false}};
  }
  ShardMap next;
  std::string why;
  EXPECT_FALSE(PlanSpread(m, kLive, 0, &next, &why)) << "joining backups took a shard";
  m.assignment[4].backups[1].synced = true;  // c synced for shard 4 only
  ASSERT_TRUE(PlanSpread(m, kLive, 0, &next, &why));
  EXPECT_EQ(next.assignment[4].move_to, "c");
  EXPECT_FALSE(PlanSpread(m, {"a", "b"}, 0, &next, &why)) << "a dead server took a shard";
  // a leads 4, limit 4 (ceil(6 / 3) + 2): nothing moves.
  ShardMap four = Initial(3);
  four.assignment[1].primary = "a";
  four.assignment[1].backups = {{"b", true}, {"c", true}};
  four.assignment[2].primary = "a";
  four.assignment[2].backups = {{"b", true}, {"c", true}};
  EXPECT_TRUE(PlanSpread(four, kLive, 0, &next, &why));
  EXPECT_FALSE(PlanSpread(four, kLive, 4, &next, &why));
  EXPECT_FALSE(PlanSpread(Initial(1), kLive, 0, &next, &why));
}

TEST(KvShardMap, ServerNodeRoundTripsAndNeedsBothAddresses) {
  ServerAddr a{"tcp://10.0.0.1:7000", "tcp://10.0.0.1:7002", ""};
  ServerAddr d;
  ASSERT_TRUE(DecodeServerNode(EncodeServerNode(a), &d));
  EXPECT_EQ(d.oq, a.oq);
  EXPECT_EQ(d.rowan, a.rowan);
  EXPECT_EQ(d.base, "");
  a.base = "tcp://10.0.0.1:7003";
  ServerAddr e;
  ASSERT_TRUE(DecodeServerNode(EncodeServerNode(a), &e));
  EXPECT_EQ(e.base, a.base);
  ServerAddr f;
  EXPECT_FALSE(DecodeServerNode("oq tcp://10.0.0.1:7000\n", &f));
  EXPECT_FALSE(DecodeServerNode("", &f));
}

}  // namespace
}  // namespace asymnvm::kv
