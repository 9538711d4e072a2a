// Server: one asymnvm-kv server — a PM pool holding the Store and a durable Ordered Queue whose
// handler executes KV requests (doc/kv.md §Server).
//
// Pool user area: [kv header page 4 KiB][OQ durable area][segments]. The OQ's receive buffers are
// in PM, so a nilext PUT is durable on the NIC acknowledgement of its SEND + FLUSH; the worker
// then appends it to its t-log. Start recovers: Store::Open rebuilds the index, then the OQ
// re-executes landed nilext requests (skipping those the t-logs already hold).
//
// Large values: a PUT over kMaxInlineValue is uploaded as PutChunk requests staged in the
// worker's DRAM (per client and upload id, at most `staging_bytes` per worker, dropped after
// `staging_timeout` idle) and committed by a PutLarge request on the software-response path.
//
// Thread safety: Start/Stop from one thread; address(), stats() from any.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/metrics.h"
#include "asymnvm/pm.h"
#include "asymnvm/status.h"
#include "fabric/oq/oq.h"
#include "kv/replication.h"
#include "kv/shard_map.h"
#include "kv/store.h"

namespace asymnvm::kv {

struct ServerOptions {
  std::string pool_path;              // required
  uint64_t pool_size = 256ull << 20;  // when creating the pool
  pm::PersistMode pm_mode = pm::PersistMode::kAuto;
  std::string listen_address = "tcp://127.0.0.1:0";
  // The Ordered Queue's workers 1, 2, ... (oq::ServerOptions::worker_listen_addresses): at least
  // workers - 1 addresses, or empty for port 0 of listen_address's host.
  std::vector<std::string> oq_worker_listen;
  fabric::FabricOptions fabric;
  // Geometry of a new pool (an existing pool keeps its own).
  uint32_t workers = 2;
  uint32_t shards = 8;
  uint32_t segment_size = 4u << 20;
  uint32_t oq_buffers = 8;
  uint32_t oq_buffer_size = 256u << 10;
  double gc_threshold = 0.75;
  // Replication (doc/kv.md §Replication): the b-log area of a new pool, the Rowan receiver's
  // address, and the cluster. coordinator empty: a stand-alone server owning every shard.
  uint64_t blog_size = 16ull << 20;
  std::string rowan_listen = "tcp://127.0.0.1:0";
  std::string coordinator;
  std::string cluster = "default";
  uint32_t rf = 0;               // replication factor of a new cluster; 0 = min(3, servers)
  uint32_t initial_servers = 1;  // the first shard map waits for this many servers
  RebalanceOptions rebalance;    // load-based resharding (doc/kv.md §Resharding); off by default
  // A backup its primary removed while alive rejoins that shard after this delay, doubled per
  // removal up to 8x (doc/kv.md §Configuration manager); 0 = at once.
  uint32_t rejoin_backoff_ms = 500;
  // Failure model knobs (doc/kv.md §Failure model): a backup that has not acknowledged a write
  // within backup_timeout_ms leaves the shard; the ZooKeeper session timeout asked for; whether
  // the manager moves primaries back onto returning servers.
  uint32_t backup_timeout_ms = 250;
  uint32_t session_timeout_ms = 4000;
  bool spread_primaries = true;
  // Cluster mode: called once when this server stops serving for good (AgentOptions::on_fenced:
  // its coordinator session expired, or it could neither replicate writes nor record the failed
  // backup). asymnvm-kv exits with status 5 there.
  std::function<void(const Status& why)> on_fenced;
  // How a primary replicates to its backups (doc/kv.md §Baselines): rowan (the default) or one
  // of the paper's baselines. Fixed when the pool is created; every server of a cluster must use
  // the same. remote_log_listen: the baselines' endpoint (empty: derived from listen_address).
  ReplicationMode replication = ReplicationMode::kRowan;
  std::string remote_log_listen;
  // How the Ordered Queue commits nilext requests (fabric/oq/oq.h Policy): kOq on the NIC's
  // acknowledgement (the default), kRawRpc after execution, kDeferred before execution — the
  // JUNE BERRY comparison baselines (doc/kv.md; asymnvm-bench kv --trace).
  oq::Policy oq_policy = oq::Policy::kOq;
  pm::PersistObserver* observer = nullptr;  // optional: sees every persisted range (XPLine DLWA)
  size_t staging_bytes = 64u << 20;
  std::chrono::milliseconds staging_timeout{30000};
  // RDMP-KV server-bypass (doc/kv.md §RDMP): clients write large values and read large entries
  // in the t-log area one-sidedly over connections to rdmp_listen (empty: derived from
  // listen_address as the b-log's is). Unreplicated shards only. A reservation not published
  // within rdmp_reservation_timeout revokes its client's bypass connection.
  bool rdmp = true;
  std::string rdmp_listen;
  std::chrono::milliseconds rdmp_reservation_timeout{10000};
};

// An address next to `listen` for another endpoint of the same server: unix://P -> unix://P.tag,
// tcp://H:P -> tcp://H:0, inproc://N -> inproc://N-tag.
std::string DerivedAddress(const std::string& listen, const std::string& tag);

struct ServerStats {
  StoreStats store;
  uint64_t requests = 0;
  uint64_t rejected = 0;        // malformed / out-of-range requests answered with an error
  uint64_t nilext_dropped = 0;  // nilext requests that failed (logged; no reply channel)
  uint64_t pm_syncs = 0;
  uint64_t map_epoch = 0;                // cluster mode: the shard map this server follows
  uint64_t digested = 0;                 // b-log entries applied as a backup
  uint64_t catchups = 0;                 // joining backups brought in sync by this server
  uint64_t replicated_writes = 0;        // writes this primary replicated to its backups
  uint64_t replication_round_trips = 0;  // their doorbells, summed over the backups
  uint64_t replication_bytes = 0;        // their wire bytes (both directions)
  uint64_t promotions = 0;               // shards taken up as primary (failover, move, spread)
  uint64_t fenced_refusals = 0;          // requests refused: the lease had lapsed
  uint64_t backups_removed = 0;          // backups removed after a failed or late replication
  uint64_t lease_age_ms = 0;             // since the coordinator last confirmed the map
  // Per shard this server leads: (shard, synced backups).
  std::vector<std::pair<uint32_t, uint32_t>> led_shards;
  uint64_t rdmp_reserved = 0;   // server-bypass slots reserved
  uint64_t rdmp_published = 0;  // ... published by the client's request
  uint64_t rdmp_settled = 0;    // ... ended by the server (client gone or too slow)
  uint64_t rdmp_revoked = 0;    // bypass connections closed for an expired reservation
  uint64_t rdmp_located = 0;    // GETs answered with a location (the client reads one-sidedly)

  // pm::SyncStats of the pool, with pm_syncs above (the metrics' asymnvm_pm_sync_*).
  uint64_t pm_sync_bytes = 0;
};

// Max request / response payload the server's OQ accepts (key + value + headers).
inline constexpr uint32_t kMaxRequest = 64 * 1024;
inline constexpr uint32_t kMaxResponse = 64 * 1024;

// In-process execution for a front end in the same process (the RESP gateway of the same
// asymnvm-kv: doc/resp.md §Fast path). A section holds every OQ worker's execution lock and the
// shard map (shared), so its calls run on the caller's thread exactly as the shard's worker would
// run them, between two of the worker's requests; a map change waits for the section to end.
// Writes are replicated as they execute (the same per-write replication as the OQ path) and
// synced by Commit, once for all of them (group commit): after Commit returns OK every write of
// the section is durable in the primary's t-log and on every live backup of its shard — the
// acknowledgement rule of the response path (doc/kv.md §Commit points). Results read inside a
// section may only be released after Commit (they may show the section's own unsynced writes).
//
// Thread safety: one thread uses a section; sections of different threads exclude each other.
class LocalSection {
 public:
  virtual ~LocalSection() = default;  // the owner must Commit before; else the writes' fate is
                                      // decided by the next sync of their worker
  // Whether `shard` may be served here: this server is its primary in the adopted map
  // (stand-alone: always) and no OQ worker left writes of its partition unsynced (a reader must
  // not see them before they are durable: the caller then takes the OQ path, whose response
  // comes after that worker's sync).
  virtual bool Serves(uint32_t shard) const = 0;
  virtual uint32_t ShardOf(std::string_view key) const = 0;
  // As kv::Client's (include/asymnvm/kv.h), on a shard Serves() accepted; same argument errors.
  virtual Status Put(std::string_view key, std::string_view value) = 0;
  virtual Result<GetReply> Get(std::string_view key) = 0;
  virtual Result<DeleteReply> Delete(std::string_view key) = 0;
  virtual Result<PutIfReply> PutIf(std::string_view key, std::string_view value,
                                   uint64_t expected_version) = 0;
  virtual Result<IncrReply> Incr(std::string_view key, int64_t delta) = 0;
  // As kv::Client::Batch (every op or none, also across a crash), on shards Serves() accepted.
  // Keys of different shards go in one batch (Store::BatchAcrossShards) when none of their
  // shards has a backup (Server::CommitsAcrossShards); else they must share a shard
  // (kInvalidArgument, as the client's).
  virtual Result<BatchReply> Batch(const std::vector<BatchOp>& ops) = 0;
  // Whether Batch takes keys of different shards now (Server::CommitsAcrossShards, under the
  // section's map lock).
  virtual bool CommitsAcrossShards() const = 0;
  // Makes every write of the section durable; at most one sync. Error: their outcome is unknown.
  virtual Status Commit() = 0;
  uint64_t writes() const { return writes_; }

 protected:
  uint64_t writes_ = 0;
};

class Server {
 public:
  // Errors: kInvalidArgument (options), the pool's Open/Create errors (kCorruption,
  // kFailedPrecondition when another process holds it, ...), kCorruption (the kv layout),
  // fabric errors.
  static Result<std::unique_ptr<Server>> Start(const ServerOptions& options);
  ~Server();
  std::string address() const;
  std::string rowan_address() const;       // empty without a b-log
  std::string rdmp_address() const;        // empty with rdmp off
  std::string remote_log_address() const;  // empty in rowan mode
  std::string pool_uuid() const;
  const format::ServerHeader& geometry() const;
  ServerStats stats() const;
  // Requests by type: counts, bytes, latency (asymnvm-kv --metrics-listen writes them).
  const metrics::RequestMetrics& request_metrics() const;
  void Stop();  // idempotent
  // Starts a LocalSection (blocks while an OQ worker executes a request). Call only while the
  // server runs (before Stop).
  std::unique_ptr<LocalSection> BeginLocal();
  // This server now leads every shard and none has a backup (a one-server deployment, with or
  // without a coordinator): a LocalSection then commits batches across shards. A later map may
  // change it (a server joins): the section's Batch checks again.
  bool CommitsAcrossShards() const;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace asymnvm::kv
