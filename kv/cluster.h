// ClusterAgent: a server's part in a replicated Rowan-KV cluster (doc/kv.md §Replication,
// §Configuration manager).
//
//  * Registers the ephemeral /asymnvm/kv/<cluster>/servers/<pool uuid> ("oq <addr>\nrowan <addr>").
//  * Configuration manager: the server holding the ephemeral /asymnvm/kv/<cluster>/manager node
//    computes the shard map (kv/shard_map.h, NextMap) whenever the live servers change and writes
//    it with a versioned compare-and-set. Any other server takes over when the holder dies.
//  * Follows the map: for each shard it is primary of (after a promotion: once it has digested
//    every b-log entry it holds and raised the shard's versions above epoch << 40) it serves
//    requests; other shards are refused with kUnavailable "kv: not primary ..." (the client
//    refreshes its map and retries). For each joining backup of its shards it streams the shard
//    (catch-up) and then marks the backup synced in the map.
//  * Replicate (the Store hook): appends the entry to every backup of the shard through a Rowan
//    Sender (one per worker and backup: SEND + FLUSH into the backup's b-log, one-sided). A backup
//    that fails is removed from the shard in the map before the write is acknowledged.
//  * Digest: a thread takes used b-log segments from the Rowan Receiver, applies their entries to
//    the Store (ApplyReplica) and commits the segments.
//  * Resharding (doc/kv.md §Resharding), when AgentOptions::rebalance is enabled: CheckPrimary
//    counts the requests served per shard; a thread publishes the rates every period to
//    /asymnvm/kv/<cluster>/load/<uuid> (ephemeral); the manager plans a move of an overloaded
//    server's shard (PlanMove); the shard's primary commits it (Handoff) once the target is synced.
//  * Fencing (doc/kv.md §Fencing): with a coordinator that has sessions with a timeout
//    (ZooKeeper), a server whose map reads have not reached the coordinator for 2/3 of the
//    session timeout serves nothing (its shards may already have moved: its ephemeral node may be
//    gone); one whose session expired exits with status 5 (restarted, it rejoins as a backup).
//
// Thread safety: Replicate and the ShardGuard from worker threads; everything else internal.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "asymnvm/coord.h"
#include "asymnvm/fabric.h"
#include "common/thread_annotations.h"
#include "fabric/rowan/receiver.h"
#include "fabric/rowan/scanner.h"
#include "fabric/rowan/sender.h"
#include "kv/replication.h"
#include "kv/shard_map.h"
#include "kv/store.h"

namespace asymnvm::kv {

struct AgentOptions {
  std::string coordinator;  // URI
  std::string cluster = "default";
  std::string uuid;  // this server (its pool uuid)
  ServerAddr self;
  uint32_t rf = 0;               // 0: min(3, servers live when the first map is made)
  uint32_t initial_servers = 1;  // the first map waits for this many live servers
  Store* store = nullptr;
  fabric::Fabric* fabric = nullptr;
  fabric::ProtectionDomain* pd = nullptr;
  rowan::Receiver* receiver = nullptr;
  std::chrono::milliseconds replicate_timeout{5000};  // connects, catch-up appends
  // A backup that has not acknowledged a write within this bound leaves the shards it backs for
  // this primary (through the coordinator, before the write is acknowledged), as a dead one does;
  // it rejoins by catch-up after RejoinBackoff (doc/kv.md §Failure model). 0: replicate_timeout.
  std::chrono::milliseconds backup_timeout{250};
  // ZooKeeper session timeout asked for (lease = 2/3 of the granted one; doc/kv.md §Fencing).
  std::chrono::milliseconds session_timeout{4000};
  // Manager: moves primaries back onto returning servers (PlanSpread, doc/kv.md §Spreading).
  bool spread_primaries = true;
  // How PUTs reach the backups (doc/kv.md §Baselines). Not rowan: `remote_logs` is this server's
  // backup side, and self.base its endpoint. Catch-up streams over Rowan in every mode.
  ReplicationMode mode = ReplicationMode::kRowan;
  RemoteLogs* remote_logs = nullptr;
  RebalanceOptions rebalance;        // resharding (off unless rebalance.threshold > 0)
  uint32_t rejoin_backoff_ms = 500;  // first hold-off of a removed backup (RejoinBackoff); 0 off
  // Called once when this server stops serving for good, and it then refuses every request
  // (CheckLease): on the follower thread when the coordinator session has expired (it is no
  // longer a member; its shards move), or on a worker when batch replication failed and the
  // failed backup could not be removed from the map (its replies are dropped: FlushBatch). The
  // library never ends the process; asymnvm-kv's main exits with status 5 here so that its
  // restart rejoins as a backup (doc/kv.md §Fencing). Null: keep refusing.
  std::function<void(const Status& why)> on_fenced;
};

class ClusterAgent {
 public:
  static Result<std::unique_ptr<ClusterAgent>> Start(const AgentOptions& o);
  ~ClusterAgent();
  void Stop();

  // Held by a worker for a whole request: the map cannot change underneath it. OK when this
  // server serves `shard` as primary; *replicated = the shard has backups (a nilext PUT to it
  // should not have been nilext; it is still replicated before being applied).
  std::shared_lock<std::shared_mutex> Lock() const { return std::shared_lock(mu_); }
  // kUnavailable "kv: not primary ..." or "kv: fenced: ..." (the lease lapsed: the map this server
  // holds may be stale; the client re-reads the map and retries elsewhere).
  Status CheckPrimary(uint32_t shard) const;  // call with Lock() held
  // OK unless fenced (see the file comment).
  Status CheckLease() const;
  bool HasBackups(uint32_t shard) const;  // call with Lock() held
  Status Replicate(uint32_t worker, uint32_t shard, std::span<const uint8_t> entry);
  // Batch mode: WRITEs what `worker` staged and awaits the FLUSHes; called by the worker before
  // any reply of its batch of requests leaves (no map lock needed). A backup that fails is removed
  // from the shards it was staged for. If the map cannot be updated the writes are durable on
  // fewer replicas than the map says: this server fences itself (Fence) and the error tells the
  // caller to drop the batch's replies.
  Status FlushBatch(uint32_t worker);

  uint64_t epoch() const;
  // Blocks until the next map adoption or `timeout` (a worker holding an acknowledged nilext
  // PUT for a shard it does not serve yet).
  void WaitForAdoption(std::chrono::milliseconds timeout);
  uint64_t catchups_done() const { return catchups_done_; }
  uint64_t digested() const { return digested_; }
  // Replicated entries this backup could not apply (each marks it unsynced: DigestLoop).
  uint64_t digest_failures() const { return digest_failures_; }
  // Replication cost as the primary's sender connections count it (doc/fabric.md Counters):
  // doorbells and wire bytes (both directions) over every backup, and the writes replicated.
  uint64_t replication_round_trips() const { return repl_round_trips_; }
  uint64_t replication_bytes() const { return repl_bytes_; }
  uint64_t replicated_writes() const { return repl_writes_; }
  // Moves of a shard's primary this server committed as the old primary (Handoff).
  uint64_t handoffs() const { return handoffs_; }
  // Shards this server took up as primary by adopting a map (failovers, moves, spreading back).
  uint64_t promotions() const { return promotions_; }
  // Requests refused because the lease had lapsed (CheckLease: "kv: fenced: ...").
  uint64_t fenced_refusals() const { return fenced_refusals_; }
  // Backups this primary removed from its shards after a failed or late replication.
  uint64_t backups_removed() const { return backups_removed_; }
  // Since the coordinator last confirmed this server's map (0 without a lease: embedded).
  std::chrono::milliseconds lease_age() const;
  // Per shard this server leads: its synced backups (the metrics' in-sync state).
  std::vector<std::pair<uint32_t, uint32_t>> LedShards() const;
  // Manager: backups it found removed from a shard while alive (each held out for a while).
  uint64_t rejoin_holds() const { return rejoin_holds_; }
  // Manager: moves it planned to spread primaries back (PlanSpread).
  uint64_t spread_moves() const { return spread_moves_; }

 private:
  explicit ClusterAgent(const AgentOptions& o) : o_(o) {}
  Status Init();
  void ManagerLoop();
  void FollowLoop();
  // The tail of both loops: sleeps until Wake() or `period` (capped at a sixth of the coordinator
  // lease, so that renewals land well inside two thirds of it); `*seen` is the wake sequence last
  // acted on.
  void WaitWake(std::chrono::milliseconds period, uint64_t* seen);
  void DigestLoop();
  void LoadLoop();
  // Manager: one resharding decision over the current map (written with its node version).
  void Rebalance(const ShardMap& cur, int64_t version, const std::set<std::string>& live);
  // Manager: true while a planned move is pending (rolled back once move_timeout_ms passed).
  bool MovePending(const ShardMap& cur, int64_t version);
  // Manager: plans one move of a primary back onto a server leading too few (PlanSpread); true
  // when a move is pending or was planned.
  bool Spread(const ShardMap& cur, int64_t version, const std::set<std::string>& live);
  std::chrono::milliseconds BackupBound() const;
  // `shard` and every other shard this server leads that `backup` backs (call with Lock() held).
  std::set<uint32_t> BackedBy(const std::string& backup, uint32_t shard) const;
  // Commits planned moves of shards this server is primary of whose target is synced.
  void HandoffReady();
  void Adopt(const ShardMap& m);
  // `generation`: catch_void_ of (shard, backup) when the catch-up was started; a change by the
  // end means a write may have missed the backup, and it is not marked synced.
  void CatchUp(uint32_t shard, std::string backup, uint64_t epoch, uint64_t generation);
  // A write of `shard` was not replicated to `backup` (it failed, or the backup left the shard):
  // a catch-up of it that is running cannot mark it synced (catch_void_).
  void VoidCatchUp(uint32_t shard, const std::string& backup);
  // Compare-and-set edit of the map on the coordinator; `edit` returns false for "no change".
  // *epoch (if given): the epoch of the map written, or of the map read when nothing changed.
  Status EditMap(const std::function<bool(ShardMap*)>& edit, uint64_t* epoch = nullptr);
  void DigestLive();
  // Called by Adopt (map lock held exclusively): a backup that `next` adds to a shard this server
  // leads may be a restarted process at the old address; the workers' connections to it were to
  // the old one (their first write would fail and remove the backup it just caught up), so they
  // are dropped and the next write connects afresh (Rowan replication; the baselines keep theirs).
  void DropStaleSenders(const ShardMap& next);
  // Sets this server's backup slots unsynced in the map (an entry it could not apply).
  Status MarkSelfUnsynced(const Status& why);
  Status ReplicateBaseline(uint32_t worker, uint32_t shard, std::span<const uint8_t> entry);
  RemoteLogSender* BaseSender(uint32_t worker, const std::string& uuid, Status* st);
  // True when this server removed `backup` from `shard` by a map edit it has not adopted yet
  // (removed_): writes skip it rather than reconnect to it and wait the bound again.
  bool Removed(const std::string& backup, uint32_t shard) const;
  // The timeout of a write's connection to a backup: a stopped backup must not hold the write
  // (and the map lock) for replicate_timeout.
  std::chrono::milliseconds BackupConnectTimeout() const;
  // Removes `gone` from `shards` (this server primary) in the map; OK when done or not needed.
  // A write of `write_shard` (one of `shards`) is acknowledged only if the coordinator's map still
  // names this server its primary: else kUnavailable, outcome unknown (the shard moved while the
  // write waited for the backup; its new primary may lack the write, and backups may hold it).
  Status RemoveBackup(const std::string& gone, const std::set<uint32_t>& shards, const Status& why,
                      uint32_t write_shard = UINT32_MAX);

  enum class Role : uint8_t { kNone, kPrimary };
  AgentOptions o_;
  std::string base_, map_path_;
  std::unique_ptr<coord::Coordinator> coord_;
  mutable std::shared_mutex mu_;  // map_ and roles_
  ShardMap map_;
  std::vector<Role> roles_;
  // Per worker (used only by that worker's thread): one CQ shared by its senders, one sender per
  // backup; an entry is posted to every backup at once, then the FLUSH acks are awaited together.
  struct WorkerReplication {
    std::unique_ptr<fabric::CompletionQueue> cq;
    std::map<std::string, std::unique_ptr<rowan::Sender>> senders;
    uint64_t next_token = 1;
    // Baseline modes: one remote-log sender per backup (share: on the backup's SharedRing).
    struct Base {
      std::unique_ptr<RemoteLogSender> sender;
      std::shared_ptr<SharedRing> ring;
    };
    std::map<std::string, Base> base;
    std::map<std::string, std::set<uint32_t>> staged;  // batch: backup -> shards staged for
    std::map<const void*, fabric::Counters> counted;   // per sender: counters already summed
  };
  void Count(WorkerReplication& rep, const void* sender, const fabric::Counters& now);
  std::vector<WorkerReplication> reps_;
  Mutex catch_mu_;
  std::set<std::pair<uint32_t, std::string>> catching_ ASYMNVM_GUARDED_BY(catch_mu_);
  // Per (shard, backup): bumped whenever a write of the shard was not replicated to the backup.
  std::map<std::pair<uint32_t, std::string>, uint64_t> catch_void_ ASYMNVM_GUARDED_BY(catch_mu_);
  std::vector<std::thread> catch_threads_ ASYMNVM_GUARDED_BY(catch_mu_);
  Mutex rings_mu_;
  std::map<std::string, std::shared_ptr<SharedRing>> rings_ ASYMNVM_GUARDED_BY(rings_mu_);
  // Backups removed from shards this server leads by its own map edits (RemoveBackup), until a
  // map at least as recent as the edit is adopted: without it every later write of those shards
  // reconnected to the stopped backup under the map lock, and the follower, waiting for that lock
  // to adopt the very map that dropped the backup, let the lease lapse (pause-primary: 5 s).
  struct RemovedBackup {
    uint64_t epoch = 0;  // of the map the edit wrote (or found already without it)
    std::set<uint32_t> shards;
  };
  mutable Mutex removed_mu_;
  std::map<std::string, RemovedBackup> removed_ ASYMNVM_GUARDED_BY(removed_mu_);
  std::atomic<bool> any_removed_{false};  // removed_ is not empty (the write path's fast check)
  Mutex digest_mu_;                       // DigestLive vs the digest thread's scanner
  rowan::Scanner digest_scanner_ ASYMNVM_GUARDED_BY(digest_mu_);
  std::atomic<bool> stop_{false};
  // Set once by Fence: every request is refused from then on (CheckLease).
  std::atomic<bool> self_fenced_{false};
  // Stops serving for good: self_fenced_, then the owner's on_fenced (once).
  void Fence(const Status& why);
  Mutex adopt_mu_;
  std::condition_variable adopt_cv_;
  uint64_t adopt_seq_ ASYMNVM_GUARDED_BY(adopt_mu_) = 0;
  Mutex wake_mu_;
  std::condition_variable wake_cv_;
  uint64_t wake_seq_ ASYMNVM_GUARDED_BY(wake_mu_) = 0;
  std::thread manager_, follower_, digester_;
  std::atomic<uint64_t> catchups_done_{0}, digested_{0}, digest_failures_{0};
  // When the last map read that reached the coordinator was sent, after its map was adopted
  // (steady clock, ns): a request served under the lease saw every map up to then.
  std::atomic<int64_t> confirmed_ns_{0};
  std::atomic<uint64_t> repl_round_trips_{0}, repl_bytes_{0}, repl_writes_{0};
  std::atomic<uint64_t> promotions_{0}, backups_removed_{0};
  mutable std::atomic<uint64_t> fenced_refusals_{0};
  // Requests served per shard as primary (resharding statistics; relaxed, request path).
  std::unique_ptr<std::atomic<uint64_t>[]> served_;
  std::atomic<uint64_t> handoffs_{0};
  std::atomic<uint64_t> rejoin_holds_{0};
  std::atomic<uint64_t> spread_moves_{0};
  std::thread loader_;
  // Follower thread only (Adopt, HandoffReady): maps older than the one a handoff wrote are not
  // adopted (a read that raced the handoff must not make this server primary again); a handoff
  // whose map write failed forces the next read to be adopted even if its version is unchanged.
  uint64_t handoff_floor_ = 0;
  bool readopt_ = false;
  std::map<uint32_t, std::chrono::steady_clock::time_point> swap_ready_since_;
  // Manager thread only: when each shard last moved (cooldown), the pending move's start, and
  // the epoch from which load reports count (those of periods begun before a move do not).
  std::map<uint32_t, std::chrono::steady_clock::time_point> moved_at_;
  std::chrono::steady_clock::time_point move_started_{};
  uint64_t reports_from_epoch_ = 0;
  std::string overloaded_;      // the server the last decisions found overloaded
  int overloaded_periods_ = 0;  // in how many consecutive decisions
  std::chrono::steady_clock::time_point next_rebalance_{};
  // Manager thread only: backups a primary removed while alive rejoin after a growing delay
  // (doc/kv.md §Configuration manager); the last map the manager read, to see removals.
  RejoinBackoff rejoin_;
  ShardMap last_seen_;
  coord::WatchId w1_ = 0, w2_ = 0;
};

}  // namespace asymnvm::kv
