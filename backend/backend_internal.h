// Internals of the back-end service shared by its files (doc/backend.md; the public entry is
// backend/backend.h). Files:
//   backend_internal.h       Backend::Impl: the service's state, its locks and their order, and
//                            every member function, grouped by the file that defines it; helpers
//                            shared by the files (pool words, the redo-mode persisters)
//   backend.cc               lifecycle: format or open a pool, check landed records, start the
//                            fabric, the OQ server, the receiver and the threads, mirroring,
//                            status, stop; the public Backend methods
//   backend_requests.cc      the Ordered Queue requests: Handle (metrics, queue position), the
//                            dispatch on the request type, one handler per request type,
//                            registration and memory-log transactions
//   backend_log_consumer.cc  the op-log index (landings, live segments, fetch for recovery), the
//                            b-log consumer (digest, recycle covered segments), deferred frees
//                            (the persistent table and the lazy reclaimer)
//   backend_checkpoint.cc    redo-log mode (a pool that is not PM): checkpoint records, restore
//                            at open, the background checkpointer
//
// Lock order (checked by the thread-safety annotations where they can express it):
//   dfree_mu  →  mu  →  op_logs_mu      (allocation / free / reclaim hold dfree_mu over mu)
//   ckpt_mu   →  mu  →  op_logs_mu      (a checkpoint holds ckpt_mu over mu)
//   dfree_mu and ckpt_mu are never held together. op_logs_mu is never held while waiting: the
//   NIC threads take it to index landings while a request holding mu waits for a persist those
//   threads complete. DeferredPersister's own mutex and the Replicator's locks are leaves.
//   Requests run on the one OQ worker; the consumer and the checkpointer are their own threads;
//   IndexLanding runs on the NIC's threads.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "alloc/backend_allocator.h"
#include "backend/applier.h"
#include "backend/backend.h"
#include "backend/deferred_frees.h"
#include "backend/log_format.h"
#include "backend/metrics.h"
#include "backend/naming.h"
#include "backend/replication.h"
#include "backend/rpc.h"
#include "common/thread_annotations.h"
#include "fabric/oq/oq.h"
#include "fabric/rowan/receiver.h"

namespace asymnvm::backend {

inline constexpr uint16_t kOpLogEntryType = kOpLogRowanType;
// The OQ area's stride (bytes per queue position) and the NIC threads of a redo-mode back-end.
inline constexpr uint32_t kOqStride = 64;
inline constexpr uint32_t kRedoNicThreads = 4;

// The aligned 64-bit word of the pool at `offset`.
inline std::atomic_ref<uint64_t> Word(uint8_t* base, uint64_t offset) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + offset));
}

// In redo mode the applier's writes (data area, sequence words) and the LPN/OPN words are not
// synced when applied: this persister records the hull of the written ranges for the next
// checkpoint and returns.
class DeferredPersister final : public pm::Persister {
 public:
  explicit DeferredPersister(const uint8_t* base) : base_(base) {}
  void Flush(const void* addr, size_t length) override {
    if (length == 0) return;
    const uint64_t off = static_cast<uint64_t>(static_cast<const uint8_t*>(addr) - base_);
    MutexLock lock(mu_);
    lo_ = std::min(lo_, off);
    hi_ = std::max(hi_, off + length);
    bytes_ += length;
  }
  void Drain() override {}
  // Takes the hull written since the last call ({UINT64_MAX, 0}: nothing) and its byte count.
  void Take(uint64_t* lo, uint64_t* hi, uint64_t* bytes) {
    MutexLock lock(mu_);
    *lo = lo_;
    *hi = hi_;
    *bytes = bytes_;
    lo_ = UINT64_MAX;
    hi_ = 0;
    bytes_ = 0;
  }
  uint64_t pending_bytes() {
    MutexLock lock(mu_);
    return bytes_;
  }

 private:
  const uint8_t* base_;
  Mutex mu_;
  uint64_t lo_ ASYMNVM_GUARDED_BY(mu_) = UINT64_MAX;
  uint64_t hi_ ASYMNVM_GUARDED_BY(mu_) = 0;
  uint64_t bytes_ ASYMNVM_GUARDED_BY(mu_) = 0;
};

// The data region's persister in redo mode: a one-sided WRITE into the data area is synced at
// once, but only after a checkpoint covers every transaction applied so far — otherwise recovery
// could replay an older logged write over it.
class OneSidedPersister final : public pm::Persister {
 public:
  OneSidedPersister(pm::Persister* inner, std::function<void()> before)
      : inner_(inner), before_(std::move(before)) {}
  void Flush(const void* addr, size_t length) override {
    if (length == 0) return;
    before_();
    inner_->Flush(addr, length);
  }
  void Drain() override { inner_->Drain(); }

 private:
  pm::Persister* inner_;
  std::function<void()> before_;
};

struct Backend::Impl : public OpLogSource {
  BackendOptions o;
  std::unique_ptr<pm::Pool> pool;
  Layout layout;
  std::unique_ptr<NamingSpace> naming;
  std::unique_ptr<alloc::BackendAllocator> allocator;
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::ProtectionDomain> pd;
  std::unique_ptr<fabric::MemoryRegion> naming_mr, data_mr;
  std::unique_ptr<rowan::Receiver> receiver;
  std::unique_ptr<oq::Server> server;

  mutable Mutex mu;  // front-end records, op-log index, pending segments, deferred frees
  // fe id → its record in the naming space
  std::unordered_map<uint64_t, NamingEntry> frontends ASYMNVM_GUARDED_BY(mu);
  // fe id → the highest coordinator epoch a registration carried (in memory: a restarted
  // back-end learns it again from the next registration; doc/backend.md §Fencing).
  std::unordered_map<uint64_t, uint64_t> epochs ASYMNVM_GUARDED_BY(mu);
  // (fe, op_seq) → payload: the op logs pointer entries of memory logs may name. Filled when an
  // op log lands (IndexLanding, on the NIC's threads), by the consumer's digest, and on a miss by
  // a scan of the live segments (after a restart); erased when its segment is recycled. Its own
  // lock (taken after mu, never held while waiting): the NIC threads index landings while a
  // request holding mu waits for a persist that those threads complete.
  Mutex op_logs_mu ASYMNVM_ACQUIRED_AFTER(mu);
  std::map<std::pair<uint64_t, uint64_t>, std::vector<uint8_t>> op_logs
      ASYMNVM_GUARDED_BY(op_logs_mu);
  // Multi-block op logs being reassembled from their landings: (owner, version) → blocks.
  struct PartialOpLog {
    uint16_t count = 0, found = 0;
    std::vector<std::vector<uint8_t>> blocks;
  };
  std::map<std::pair<uint16_t, uint64_t>, PartialOpLog> partial_op_logs
      ASYMNVM_GUARDED_BY(op_logs_mu);
  size_t rowan_mtu = rowan::kDefaultMtu;
  class LandingIndexer final : public pm::PersistObserver {
   public:
    explicit LandingIndexer(Impl* impl) : impl_(impl) {}
    void OnPersist(uint64_t offset, uint64_t length) override {
      impl_->IndexLanding(offset, length);
    }

   private:
    Impl* impl_;
  };
  LandingIndexer landing_indexer{this};
  struct HeldSegment {
    uint32_t index;
    std::map<uint64_t, uint64_t> max_op_seq;  // fe → highest op_seq in the segment
  };
  std::list<HeldSegment> held ASYMNVM_GUARDED_BY(mu);  // digested, not yet committed, in order
  size_t last_pinned_warned = 0;                       // consumer thread only
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> deferred
      ASYMNVM_GUARDED_BY(mu);
  // The persistent deferred-free table (backend/deferred_frees.h): addr → its slot. Allocations,
  // immediate frees and the reclaimer's free + clear hold dfree_mu, so a block freed by the
  // reclaimer is not handed out again before its slot is cleared (a restart in between would
  // free it a second time).
  mutable Mutex dfree_mu ASYMNVM_ACQUIRED_BEFORE(mu);
  std::map<uint64_t, uint32_t> dfree_pending ASYMNVM_GUARDED_BY(dfree_mu);
  std::vector<bool> dfree_used ASYMNVM_GUARDED_BY(dfree_mu);
  BackendStats counters ASYMNVM_GUARDED_BY(mu);

  std::atomic<bool> stop{false};
  std::thread consumer;

  // Redo-log mode (pool in msync mode: not PM). See doc/backend.md §Disk-durable mode.
  bool redo = false;
  std::unique_ptr<DeferredPersister> deferred_writes;
  std::unique_ptr<OneSidedPersister> one_sided;
  Mutex ckpt_mu ASYMNVM_ACQUIRED_BEFORE(mu);             // serializes checkpoints; taken before mu
  uint64_t ckpt_seq ASYMNVM_GUARDED_BY(ckpt_mu) = 0;     // newest durable checkpoint (0: none)
  bool ckpt_active ASYMNVM_GUARDED_BY(ckpt_mu) = false;  // a valid active record is on media
  uint64_t applied_rte ASYMNVM_GUARDED_BY(mu) = 0;  // OQ position after the last executed request
  uint64_t ckpt_txns ASYMNVM_GUARDED_BY(mu) = 0;    // txns_applied covered by the newest checkpoint
  // fe → OPN of the newest checkpoint
  std::unordered_map<uint64_t, uint64_t> ckpt_opn ASYMNVM_GUARDED_BY(mu);
  std::condition_variable ckpt_cv;
  std::thread checkpointer;

  // Mirroring (doc/mirror.md): wrappers of the pool's persister and of the deferred one.
  std::unique_ptr<ForwardingPersister> fwd, fwd_deferred;
  std::unique_ptr<Replicator> repl;

  pm::Persister* apply_persister() {
    return redo ? static_cast<pm::Persister*>(fwd_deferred.get()) : persister();
  }

  // Every persist of the pool goes through this: the range is forwarded to the mirrors and a
  // Drain waits for them (backend/replication.h; a pass-through without mirrors).
  pm::Persister* persister() { return fwd.get(); }

  uint8_t* base() const { return pool->base(); }

  // live segment (post_seq) → bytes indexed (IndexLiveSegments)
  std::map<uint64_t, size_t> scanned_to ASYMNVM_GUARDED_BY(op_logs_mu);
  bool skip_final_checkpoint = false;  // TEST_CrashAndClose
  // Per request type counts, bytes and latency (Handle; the metrics endpoint reads them).
  metrics::RequestMetrics request_metrics{RequestTypeNames()};

  // ---- lifecycle: format or open, recover, serve, stop (backend.cc) ----

  LayoutParams Params() const;

  Status Format();

  Status Open();

  // Runs before the receiver and the OQ server recover (OQ recovery zeroes its buffers, and it
  // skips a request that fails its checksum without a word): every landed record that fails
  // validation is logged and counted; a corrupt transaction is recorded as rejected for its
  // front-end. Unfinished landings (a crash cut them short; never acknowledged) are only noted.
  // Runs in Open before any other thread (the fabric, the receiver, the OQ server) starts.
  void CheckLanded() ASYMNVM_NO_THREAD_SAFETY_ANALYSIS;

  Status StartFabric();

  Status StartReplication();

  void Stop();

  std::string StatusJson() const;

  BackendStats Stats() const;

  // A front-end's ownership-journal entry, written by requests 20–22 together with the
  // allocation or free it records (frontend/alloc_journal.h): compare-and-swap, then persist.
  // The entry must be an aligned word of the data area; a different value there means a later
  // incarnation of the id owns the journal now (kFailedPrecondition, "fenced").
  Status JournalSwap(uint64_t entry, uint64_t expected, uint64_t desired);

  // ---- requests (backend_requests.cc; one OQ worker: calls are sequential, in queue order) ----

  // ---- requests (one OQ worker: calls are sequential, in queue order) ----
  Status Handle(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                std::vector<uint8_t>* response);

  Status HandleRequest(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                       std::vector<uint8_t>* response);

  Result<NamingEntry> Register(uint64_t fe);

  // A txn header's frontend_id carries the sender's incarnation in its high 32 bits (0: not
  // checked — tools and tests that build txns by hand). A txn of an incarnation other than the
  // id's latest registration is refused without touching the record: a later registration of the
  // id (a take-over or a duplicate) owns the LPN and the rejected word now. Requests re-executed
  // by the queue's recovery are not checked (they were accepted before the crash, and the
  // registrations between them are not re-executed).
  Status ApplyTxnRequest(std::span<const uint8_t> payload, bool recovering);

  // One handler per request type (HandleRequest dispatches on it): on success each sets
  // *response to its reply payload (kRegister: the encoded RegisterReply); on failure it leaves
  // *response untouched.
  Status HandleRegister(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                        std::vector<uint8_t>* response);
  Status HandleNamingCreate(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                            std::vector<uint8_t>* response);
  Status HandleClearRejected(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                             std::vector<uint8_t>* response);
  Status HandleNamingLookup(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                            std::vector<uint8_t>* response);
  Status HandleNamingAt(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                        std::vector<uint8_t>* response);
  Status HandleLockedBy(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                        std::vector<uint8_t>* response);
  Status HandleNamingRemove(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                            std::vector<uint8_t>* response);
  Status HandleAlloc(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                     std::vector<uint8_t>* response);
  Status HandleFree(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                    std::vector<uint8_t>* response);
  Status HandleFetchOpLogs(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                           std::vector<uint8_t>* response);
  Status HandleExtentOf(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                        std::vector<uint8_t>* response);
  Status HandleFreeDeferred(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                            std::vector<uint8_t>* response);
  Status HandleStatus(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                      std::vector<uint8_t>* response);

  // ---- op-log index, the b-log consumer and deferred frees (backend_log_consumer.cc) ----

  // OpLogSource: pointer entries of memory logs (called under mu, from ApplyTxnRequest). The
  // span stays valid while mu is held: entries are erased only by RecycleCovered (under mu) and
  // never replaced (try_emplace).
  Result<std::span<const uint8_t>> Payload(uint64_t fe, uint64_t op_seq) override
      ASYMNVM_REQUIRES(mu);

  void IndexOpLog(std::span<const uint8_t> entry_payload) ASYMNVM_REQUIRES(op_logs_mu);

  // LandingIndexer: a range of the b-log area the NIC landed and is persisting (one SEND: a
  // block). Op logs are indexed as they land, so a transaction's pointer entries find them at
  // once (the consumer digests a segment only when it is full). A NIC that lands without the
  // soft NIC's persist hook (hardware RDMA) leaves this to IndexLiveSegments.
  void IndexLanding(uint64_t offset, uint64_t length);

  // Indexes the op logs of the valid blocks at p.. (under op_logs_mu); stops at the first stride
  // that holds no valid block. Returns the bytes consumed.
  size_t IndexBlocks(const uint8_t* p, size_t length) ASYMNVM_REQUIRES(op_logs_mu);

  // Indexes the op logs of the segments not yet committed: first incrementally, from where the
  // last call stopped in each segment (blocks land in order within a segment); then, when `full`,
  // every segment whole through the scanner, copied first (bytes may be landing; an entry still
  // landing fails its checksum and is skipped — it was never acknowledged).
  void IndexLiveSegments(bool full);

  // The op logs of `fe` with after < op_seq < before still in the b-log (every segment not yet
  // committed holds all op logs not covered by an OPN), for recovery of a crashed front-end.
  // Segments being filled are copied first; entries still landing fail their checksums and are
  // not returned (they were never acknowledged).
  std::vector<FetchedOp> FetchOpLogs(uint64_t fe, uint64_t after, uint64_t before, bool* more);

  // ---- the b-log consumer: digests used segments, recycles covered ones, reclaims lazily ----
  void ConsumeLog();

  // Commits every held segment whose op logs are all covered by their front-end's OPN, in any
  // order: a segment pinned by op logs no front-end has replayed yet (a writer that died before
  // its first transaction; doc/backend.md §B-log recycling) must not pin the segments behind it —
  // empty segments posted before a crash, and later ones already covered.
  void RecycleCovered();

  // The highest op_seq of `fe` whose effects are durably applied (under mu).
  uint64_t CoveredOpn(uint64_t fe) const ASYMNVM_REQUIRES(mu);

  void ReclaimDue();

  // ---- persistent deferred frees (backend/deferred_frees.h) ----
  uint8_t* DeferredFreeSlotAt(uint32_t slot);

  void WriteDeferredFreeSlot(uint32_t slot, uint64_t addr) ASYMNVM_REQUIRES(dfree_mu);

  // At start, before anything is served: every recorded deferred free whose block is still
  // allocated is re-armed with the full delay (readers of the grace period may have survived the
  // restart); one whose block is already free (the crash came between the free and the clear)
  // and every torn slot are cleared.
  void LoadDeferredFrees();

  // Request 23: validated and recorded durably before the reply.
  Status RecordDeferredFree(uint64_t addr, bool recovering);

  // ---- redo-log mode: checkpoints and recovery (backend_checkpoint.cc; doc/backend.md
  // §Disk-durable mode) ----

  uint8_t* CkptSlot(uint64_t seq);

  // The OQ worker 0's ReqToExecute as found in the area (0 when the area is not formatted).
  uint64_t OqAreaRte();

  // Runs at open, before the landed records are checked and before the OQ server recovers. A
  // valid active checkpoint record means the pool was last served in redo mode: the LPN/OPN
  // words of every front-end and the OQ worker's ReqToExecute go back to the checkpoint's values
  // (the mapped words may hold later values that reached the file by page write-back), so OQ
  // recovery re-executes every transaction logged after the checkpoint, in order (physical redo:
  // idempotent). Without a record, a redo-mode back-end takes the first checkpoint of the
  // current (directly persisted) state.
  Status RestoreCheckpoint();

  // Makes every effect applied so far durable and records it: capture (under mu) the positions,
  // write the per-front-end copies, sync the naming area and every range written since the last
  // checkpoint (one msync), then write and sync the record (one msync). Log space before the
  // captured position may be recycled only after this returns.
  Status Checkpoint(uint64_t rte_floor);

  Status CheckpointLocked(uint64_t rte_floor) ASYMNVM_REQUIRES(ckpt_mu);

  // Direct mode after a redo-mode run: once OQ recovery has re-applied (and persisted) the
  // logged transactions, the record is retired so the next start does not replay again.
  void RetireCheckpointRecord();

  // oq::ServerOptions::before_recycle: the OQ buffers before `rte` are about to be reused.
  void BeforeRecycle(uint64_t rte);

  void CheckpointIfTxnsSince();

  // Background checkpointer (redo mode): a checkpoint when something was applied since the last
  // one and the interval passed, or sooner when much was written or log segments wait for it.
  void CheckpointLoop();
};

}  // namespace asymnvm::backend
