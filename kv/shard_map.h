// The Rowan-KV shard map kept on the coordinator (doc/kv.md §Configuration manager) and the
// configuration manager's pure decision function.
//
// Node /asymnvm/kv/<cluster>/map (persistent, text, replaced with a versioned compare-and-set):
//   epoch <E>
//   shards <S>
//   rf <R>
//   server <uuid> <oq-address> <rowan-address>      (one line per server the map names)
//   shard <i> <primary-uuid> [<backup-uuid>:<s|j>,...] [move=<target-uuid>]
// A backup is `s` (synced: holds every acknowledged write of the shard; may be promoted) or `j`
// (joining: receives new writes while the primary streams it the shard; not promotable).
// `move=` is a planned move of the shard's primary (resharding, doc/kv.md §Resharding): the
// target is a backup of the shard; once it is synced the primary itself swaps roles with it.
//
// Thread safety: pure functions / values.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::kv {

struct ServerAddr {
  std::string oq;     // client requests (OQ worker 0)
  std::string rowan;  // b-log (Rowan receiver) for replication
  std::string base;   // remote-log endpoint of the rpc/rwrite/batch/share baselines ("" none)
};

// A server's registration node (servers/<uuid>, ephemeral): "oq <addr>\nrowan <addr>\n" and, in
// the baseline modes, "base <addr>\n". Decode is false without both oq and rowan.
std::string EncodeServerNode(const ServerAddr& a);
bool DecodeServerNode(const std::string& data, ServerAddr* a);

struct ShardAssignment {
  std::string primary;
  struct Backup {
    std::string uuid;
    bool synced = false;
  };
  std::vector<Backup> backups;
  std::string move_to;  // planned move of the primary ("" none)
};

struct ShardMap {
  uint64_t epoch = 0;
  uint32_t shards = 0;
  uint32_t rf = 1;
  std::map<std::string, ServerAddr> servers;  // uuid -> addresses
  std::vector<ShardAssignment> assignment;    // one per shard

  std::string Encode() const;
  static Result<ShardMap> Decode(const std::string& text);  // kCorruption naming the line
};

// The manager's step: from the current map (epoch 0 = none yet) and the live servers, the next
// map. Returns false when nothing changes. Rules: a dead primary is replaced by its first live
// synced backup (kept when none is alive: the shard waits for it, e.g. a cold start); dead
// backups are dropped; live servers not in a shard join it as `j` backups until it has rf - 1;
// addresses of live servers are refreshed. A new map (epoch 0) spreads primaries round-robin over
// the live servers in uuid order, each with the next rf - 1 as synced backups.
// A planned move is dropped (rolled back: the primary stays) when its target is not alive, not
// a backup of the shard any more, or the primary changed (failover).
// `held`: (shard, uuid) pairs that must not join that shard now (RejoinBackoff); they stay out
// and another live server joins instead, if there is one.
using JoinHold = std::set<std::pair<uint32_t, std::string>>;
bool NextMap(const ShardMap& current, const std::map<std::string, ServerAddr>& live,
             uint32_t shards, uint32_t rf, ShardMap* next, const JoinHold& held = {});

// The manager's memory of backups that left a shard while alive — a primary removed them after a
// failed replication (connect, post, no FLUSH acknowledgement within 5 s), e.g. a backup whose
// pool is full and whose digest waits for its cleaner. Re-added at once, such a backup would
// cycle: join, stall the shard's writes for 5 s, be removed, join again. Each such removal holds
// the server out of that shard for a delay that doubles from `first` up to `max`, back to
// `first` when the last removal is older than `reset_after`. Promotions, deaths (the manager
// drops dead servers itself) and a move's surplus drop are not removals.
class RejoinBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    Clock::duration first = std::chrono::seconds(1);
    Clock::duration max = std::chrono::seconds(64);
    Clock::duration reset_after = std::chrono::minutes(5);
  };
  RejoinBackoff() = default;
  explicit RejoinBackoff(Options o) : o_(o) {}

  // Compares the last map the manager saw with the current one (ignored unless `cur` is newer).
  // Returns the removals it found as "shard:uuid" (for the log), with their hold-off.
  std::vector<std::pair<std::string, Clock::duration>> Observe(const ShardMap& prev,
                                                               const ShardMap& cur,
                                                               const std::set<std::string>& live,
                                                               Clock::time_point now);
  // The pairs held out at `now`.
  JoinHold Held(Clock::time_point now) const;
  uint64_t removals() const { return removals_; }

 private:
  struct Entry {
    Clock::time_point until{};
    Clock::time_point last{};
    Clock::duration next{};
  };
  Options o_;
  std::map<std::pair<uint32_t, std::string>, Entry> held_;
  uint64_t removals_ = 0;
};

// Load-based resharding (doc/kv.md §Resharding). threshold 0 = off.
struct RebalanceOptions {
  double threshold = 0;       // a server is overloaded above threshold x the mean load (> 1; 0 off)
  uint32_t period_ms = 1000;  // statistics period, and how often the manager decides
  uint32_t cooldown_ms = 0;   // a moved shard is not moved again before (0: 10 periods)
  uint64_t min_ops_per_sec = 50;     // below this cluster-wide rate nothing moves (noise)
  uint32_t move_timeout_ms = 60000;  // a move not committed by then is rolled back
  uint32_t swap_delay_ms = 0;        // test hook: the primary waits this long before the swap
  bool enabled() const { return threshold > 0; }
  Status Validate() const;
};

// One server's statistics for the last period: requests per second served per shard (as primary),
// and the map epoch in force when the period began.
struct LoadReport {
  uint64_t epoch = 0;
  std::map<uint32_t, uint64_t> ops_per_sec;
  std::string Encode() const;
  static Result<LoadReport> Decode(const std::string& text);
};

// The manager's resharding decision: from the map (no move pending), the live servers' reports
// and the shards still cooling down, at most one move: the most loaded server, if above
// threshold x the mean, gives the shard whose move to the least loaded live server minimizes the
// larger of the two loads (only if it lowers it: a single hot shard does not bounce), preferring
// a target that is already a synced backup. The target joins the shard as a `j` backup if it is
// not one. Clusters with rf 1, and shards that have no backup at the moment, never move (their
// shards take nilext PUTs, which a client with a stale map could send to the old primary). Returns
// false when nothing moves; *why says why it moved (for the log).
bool PlanMove(const ShardMap& current, const std::set<std::string>& live,
              const std::map<std::string, LoadReport>& load, const RebalanceOptions& o,
              const std::set<uint32_t>& cooling, ShardMap* next, std::string* why);

// Primaries spread back (doc/kv.md §Spreading primaries back): after failovers the primaries of
// dead servers sit on their backups, and a returning server comes back as a backup only. With no
// move pending, if a live server leads more than `limit` shards, plans one move of one of its
// shards to a live *synced* backup that leads fewer than `limit`: the shard's preferred primary
// (the live servers in uuid order, round-robin over the shards, as in the first map) when it is
// such a backup, else the one leading fewest. The move goes through the resharding move protocol
// (`move=`, SwapPrimary by the primary). False when nothing moves (no server above `limit`, or no
// synced backup to take a shard). `limit` 0 = ceil(shards / live servers).
bool PlanSpread(const ShardMap& current, const std::set<std::string>& live, uint32_t limit,
                ShardMap* next, std::string* why);
// The primaries each live server leads in `m` (0 for live servers leading none).
std::map<std::string, uint32_t> LeaderCounts(const ShardMap& m, const std::set<std::string>& live);

// The move's commit: in `m`, if `self` is the primary of `shard` and its move target is a synced
// backup, makes the target primary and `self` its first (synced) backup, clears the move, and
// drops surplus backups (joining ones first) down to rf. False when the move cannot commit.
bool SwapPrimary(ShardMap* m, uint32_t shard, const std::string& self);

}  // namespace asymnvm::kv
