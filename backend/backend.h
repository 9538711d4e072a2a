// The AsymNVM back-end service (AsymNVM paper §3–5, §7.2; doc/architecture.md; requests and
// layout in doc/backend.md). One Backend owns one pool file and serves front-ends:
//
//   * one-sided: the naming space (root/lock/seq words) and the data area are registered with the
//     fabric (remote read/write/atomic; the data region persists what lands, so WRITE + FLUSH is
//     durable). The back-end's own threads never take part in one-sided operations (passivity).
//   * Ordered Queue (durable, buffers in the pool's OQ area): registration, naming, allocation and
//     memory-log transactions (nilext: committed on the NIC ack + flush, applied in queue order by
//     the worker; a transaction with txn_seq <= the front-end's LPN is a recovery re-execution and
//     is skipped, one that fails validation is never applied and is recorded in the front-end's
//     record as its first rejected txn_seq; so is a landed transaction found corrupt at start).
//   * Rowan b-log (the pool's log area): operation logs, durable on the NIC ack + flush. A consumer
//     thread digests used segments and recycles a segment once every op log in it is covered by
//     its front-end's OPN (so recovery can still find op logs whose memory logs never arrived).
//
// On a pool that is not PM (persist mode msync) the back-end runs a redo log with checkpoints
// (doc/backend.md §Disk-durable mode): op logs and transactions are durable when their landings
// are synced (group commit), transactions are applied in memory and written back by checkpoints,
// and log space is recycled only behind the newest durable checkpoint.
//
// Start formats a fresh pool (the back-end header is written last) or recovers an existing one
// (allocator from its bitmap, OQ from ReqToExecute..SRQTail, the b-log from its segment table).
// Before recovering, it checks every landed record (rowan::CheckArea, oq::ScanDurableArea — the
// same checks `asymnvm-ctl check` runs) and logs and counts the corrupt ones (doc/backend.md).
//
// Thread safety: stats()/Stop() from any thread; Stop is idempotent.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "alloc/backend_allocator.h"
#include "asymnvm/fabric.h"
#include "asymnvm/metrics.h"
#include "asymnvm/pm.h"
#include "asymnvm/status.h"
#include "backend/layout.h"
#include "backend/naming.h"
#include "backend/replication.h"

namespace asymnvm::backend {

struct BackendOptions {
  std::string pool_path;              // required; created when missing
  uint64_t pool_size = 256ull << 20;  // used only when creating
  pm::PersistMode persist_mode = pm::PersistMode::kAuto;
  std::string listen_address = "tcp://127.0.0.1:0";      // OQ (requests)
  std::string log_listen_address = "tcp://127.0.0.1:0";  // Rowan (op logs)
  fabric::FabricOptions fabric;
  // Geometry of a new pool (an existing pool keeps the geometry in its header).
  uint32_t naming_slots = 1024;
  uint32_t block_size = 4096;
  uint64_t log_bytes = 0;  // 0: an eighth of the pool
  uint32_t log_segment = 1u << 20;
  uint32_t oq_buffers = 16;
  uint32_t oq_buffer_size = 64 * 1024;
  // Lazy reclamation (§6.2: n + l µs, 4000 + 1000 by default).
  std::chrono::microseconds reclaim_delay{5000};
  // Redo-log mode (a pool in msync mode, i.e. not PM; doc/backend.md §Disk-durable mode): the
  // background checkpointer runs when something was applied and this much time passed since the
  // last checkpoint, or when this many bytes were applied since.
  std::chrono::milliseconds checkpoint_interval{200};
  uint64_t checkpoint_bytes = 16ull << 20;
  // Mirrors (doc/mirror.md): every persisted range is forwarded to these mirror daemons; Start
  // waits up to mirror_wait for their first full copy before serving.
  ReplicationOptions replication;
  std::chrono::milliseconds mirror_wait{30000};
  // Terms (doc/mirror.md §Terms): a registration may carry the group term its front-end learned
  // from the coordinator. One above replication.term is passed here (the daemon's group role
  // re-reads the group state: OK when this replica still serves that term, else it fences the
  // process); without it such a registration is refused.
  std::function<Status(uint64_t client_term)> check_term;
  // Tests: open the pool with pm crash simulation (PoolOptions::crash_sim); see
  // TEST_CrashAndClose.
  bool crash_sim = false;
  // Tests: false leaves op logs unindexed at their landing, as with a NIC that lands without the
  // soft NIC's persist hook (hardware RDMA): pointer entries then find them by scanning.
  bool TEST_index_landings = true;
};

struct BackendStats {
  uint64_t frontends = 0;
  uint64_t txns_applied = 0, txns_skipped = 0, txns_rejected = 0;
  // Fencing (doc/backend.md §Fencing): transactions of a superseded incarnation of their
  // front-end id, and registrations carrying an epoch below the highest seen for the id.
  uint64_t txns_fenced = 0, registers_fenced = 0;
  uint64_t txn_bytes_applied = 0;
  uint64_t op_logs_seen = 0, log_segments_digested = 0, log_segments_recycled = 0;
  // Pointer entries whose op log was not indexed at its landing: the live b-log segments were
  // scanned for it (normal after a restart; rare otherwise).
  uint64_t op_log_scans = 0;
  // Digested b-log segments held back by op logs their front-end has not covered with its OPN
  // (a writer that died before its next transaction and has not replayed yet).
  uint64_t log_segments_pinned = 0;
  // Found at start, before recovery: landed records that fail validation (not unfinished
  // landings of a crash, which are only logged). A corrupt op log is skipped (its operation
  // cannot be replayed); a corrupt OQ request is never executed, and when it holds a
  // transaction of a registered front-end that txn is recorded as rejected (and counted in
  // txns_rejected).
  uint64_t log_corrupt_entries = 0, oq_corrupt_records = 0;
  // Deferred frees (request 23; persistent: doc/backend.md §Deferred frees): pending now, done,
  // failed (the block was not allocated any more: never expected), and re-armed from the pool's
  // table at start.
  uint64_t deferred_frees_pending = 0, deferred_frees_done = 0, deferred_frees_failed = 0;
  uint64_t deferred_frees_rearmed = 0;
  uint64_t requests = 0;
  // Durability: redo = the redo-log mode (pool not PM, msync mode) is on; pm_syncs / pm_sync_bytes
  // = msync calls and bytes of the pool (pm::Pool::sync_stats; 0 in flush mode); checkpoints
  // taken and the bytes they wrote back (sum of the applied ranges they covered).
  bool redo = false;
  uint64_t pm_syncs = 0, pm_sync_bytes = 0;
  uint64_t checkpoints = 0, checkpoint_bytes = 0;
  // CPU time of the whole back-end process (user + system), for "back-end CPU per operation".
  double cpu_seconds = 0;
};

class Backend {
 public:
  // Errors: kInvalidArgument (options), pool errors (kCorruption for a pool that is not ours or is
  // damaged, kFailedPrecondition when another back-end holds it, kResourceExhausted when too
  // small — messages name the path), fabric errors.
  static Result<std::unique_ptr<Backend>> Start(const BackendOptions& options);
  ~Backend();

  std::string address() const;      // OQ address front-ends connect to
  std::string log_address() const;  // Rowan receiver address
  const Layout& layout() const;
  BackendStats stats() const;
  std::string StatusJson() const;  // what `asymnvm-ctl status` prints
  // Requests by type: counts, bytes, latency (backend/metrics.h writes them for Prometheus).
  const metrics::RequestMetrics& request_metrics() const;
  // Forwards to one more mirror from now on (a mirror that announced itself in the group while
  // this back-end serves; doc/mirror.md §Joining). kFailedPrecondition when the back-end was
  // started without replication (neither replication.mirrors nor replication.joinable), else
  // Replicator::AddMirror's errors.
  Status AddMirror(const std::string& address);
  // Stops serving, joins threads, closes the pool. Acknowledged work is already durable.
  void Stop();

  // For `asymnvm-ctl check` / `gc` (tools/ctl_gc.cc), which run a back-end in process: the live
  // naming entries (front-end records included), the allocator's live extents, the blocks whose
  // deferred free is pending (persistent table; doc/backend.md §Deferred frees), and an
  // immediate, durable free of the extent starting at `addr` (errors as request 22 free).
  std::vector<NamingEntry> NamingEntries() const;
  std::vector<alloc::Extent> Extents() const;
  std::vector<uint64_t> PendingDeferredFrees() const;
  Status FreeExtent(uint64_t addr);
  // Removes the record of front-end `fe` (its session must be closed and have nothing in the
  // b-log): the walk's own session, so check and gc leave no record behind. kNotFound.
  Status ForgetFrontend(uint64_t fe);
  // Tests (crash_sim pools only): stops serving without the final checkpoint, then models a power
  // loss with pm::Pool::SimulateCrash(seed, keep) and closes the pool; the file then holds the
  // crashed state. Errors: kFailedPrecondition when the pool is not in crash simulation.
  Status TEST_CrashAndClose(uint64_t seed, double keep, uint64_t* dropped_lines = nullptr);

 private:
  struct Impl;
  explicit Backend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace asymnvm::backend
