// The AsymNVM front-end SDK (AsymNVM paper §3 Table 1, §4, §6, §7.2; doc/architecture.md;
// doc/frontend.md). A Session is one front-end's connection to a back-end (doc/backend.md): it
// registers the front-end, exposes the naming space, one-sided reads through a page cache, memory
// logs batched into Ordered-Queue transactions, operation logs over a Rowan sender, fences, the
// writer lock and the reader seqlock, and the two-tier allocator.
//
// Addresses are back-end pool offsets (uint64), valid across restarts of either side.
//
// The update protocol a data structure follows (any level):
//   OpLog(s, type, params)   persist the operation (durable on return; skipped at `naive`)
//   MemLog(addr, bytes) ...  the redo writes of the operation (updates the cache at once)
//   TxWrite(s)               the operation is complete: hand its memory logs to the batch
// and Fence() when later reads (by anyone) must see everything before it.
//
// Levels (doc/architecture.md): naive = every MemLog is its own transaction, sent and fenced at
// once; no op log, no cache, every read remote. r = op log per update, one transaction per
// operation sent at TxWrite without waiting for it to apply. rc = r + page cache. rcb = rc +
// batching (a transaction per `batch_ops` operations or `batch_bytes` bytes, on Fence,
// WriterUnlock, or when the batch is older than `batch_timeout` at the next call).
//
// Read-your-writes: a Session's reads always see its own MemLogs (cached pages are updated in
// place; remote reads are patched with writes not yet known to be applied). Other sessions see them
// after this session's Fence (one-sided reads then return applied data).
//
// Thread safety: a Session is used by one thread at a time (thread-compatible). Use one Session per
// thread; each has its own front-end id and fabric.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/status.h"

namespace asymnvm::frontend {

class FrontendIdentity;  // frontend/identity.h

enum class Level : uint8_t { kNaive = 0, kR = 1, kRc = 2, kRcb = 3 };
const char* LevelName(Level level);                 // "naive" | "r" | "rc" | "rcb"
Result<Level> ParseLevel(const std::string& name);  // kInvalidArgument on anything else

// Reserved op types (structure op types must be below 0xFF00).
inline constexpr uint16_t kLockAheadOpType = 0xFF01;  // payload: lock word address u64

struct SessionOptions {
  // The back-end's OQ address (Backend::address()): exactly one. frontend::Cluster
  // (asymnvm/cluster.h) takes several and opens one Session each.
  std::vector<std::string> backends;
  uint64_t frontend_id = 0;  // 1..65535 (the Rowan owner field is 16 bits)
  // Coordinator URI (asymnvm/coord.h: dir:PATH or zk:HOST:PORT[,...][/chroot]). When set, Open
  // claims the front-end id there for the session's life (frontend/identity.h): frontend_id 0 is
  // allocated; a given id held by another live process is refused with kAlreadyExists. Empty (the
  // default): frontend_id must be given and is not checked.
  std::string coordinator;
  // Back-end liveness (doc/frontend.md §Reconnection; needs `coordinator`): when the connection to
  // the back-end breaks, the Session waits up to this long for a back-end of the same pool (any
  // address) to register at /asymnvm/groups/<pool-uuid>/primary, reconnects, re-registers and
  // replays its op logs, then retries the call if it is safe to repeat. A call made meanwhile waits
  // the same way; when the deadline passes it fails with kUnavailable (and the next call waits
  // again). 0 disables reconnection (a broken connection then stays an error).
  std::chrono::milliseconds reconnect_deadline{30000};
  // An identity the caller already holds (frontend/identity.h), shared instead of claimed: several
  // Sessions of one process under one id (the Sessions of a frontend::Cluster, asymnvm-job), each
  // reconnecting by itself through its coordinator session. When set, Open does not claim:
  // frontend_id is taken from it (a different non-zero frontend_id is kInvalidArgument) and
  // `coordinator` is only used by dead-writer take-overs (set it to the same URI).
  std::shared_ptr<FrontendIdentity> identity;
  Level level = Level::kRcb;
  fabric::FabricOptions fabric;
  // Opens the fabric of each connection set-up (Open, and every reconnection) from `fabric`.
  // Null: fabric::Fabric::Open. A test injects faults here by wrapping what it opens
  // (fabric/faulty_fabric.h: dropped or failed requests, cut connections).
  std::function<Result<std::unique_ptr<fabric::Fabric>>(const fabric::FabricOptions&)> open_fabric;
  // Page cache (rc, rcb): capacity in bytes and the default page size (a structure may choose its
  // own, see Structure::page_size). Power-of-two page sizes, 64 B .. 1 MiB.
  uint64_t cache_bytes = 64ull << 20;
  uint32_t page_size = 4096;
  // Batching (rcb): a transaction is sent when it holds batch_ops operations or batch_bytes bytes
  // (0: the largest transaction the back-end accepts), or is older than batch_timeout.
  uint32_t batch_ops = 1024;
  uint32_t batch_bytes = 0;
  std::chrono::microseconds batch_timeout{1000};
  // Remote writes not yet known applied are kept for read-your-writes; above this many bytes the
  // session fences on its own.
  uint64_t overlay_bytes = 8ull << 20;
  std::chrono::milliseconds timeout{5000};       // connect, each request, each fence
  std::chrono::milliseconds lock_timeout{2000};  // WriterLock
  uint64_t seed = 1;                             // cache sampling
  // Online reclamation of a crashed incarnation's blocks (doc/alloc.md §Leaks across crashes):
  // after Replay() (and a dead writer's take-over), the slabs and large extents the earlier
  // incarnations of this id recorded in their ownership journal and that no structure reaches
  // are freed. The walk needs every structure's writer lock, each waited for at most
  // `reclaim_lock_wait` (a lock still held by a live front-end defers the reclaim); the frees
  // wait `reclaim_grace` first (lock-free readers of old versions). false: journals are kept but
  // nothing is reclaimed online (asymnvm-ctl gc does it offline).
  bool reclaim_on_recovery = true;
  std::chrono::milliseconds reclaim_lock_wait{500};
  std::chrono::microseconds reclaim_grace{5000};

  // ---- the `symmetric` comparison baseline only (doc/frontend.md §Symmetric baseline) ----
  // Where op logs go: the Rowan receiver address (Backend::log_address()) of ANOTHER back-end,
  // which then holds them instead of the data back-end's own b-log. Empty (the default): the data
  // back-end's b-log, the only configuration recovery supports — with a redirected op log,
  // Replay() (no fetcher) is kFailedPrecondition because the op logs are not at the data back-end,
  // and the log back-end never truncates them (its OPN for this front-end never advances), so a
  // run is bounded by that back-end's b-log size. Open fails with the address in the message when
  // nothing at `op_log_address` answers as a Rowan receiver.
  std::string op_log_address;
  // !!! BREAKS THE DURABILITY GUARANTEE. Op logs are posted (rowan::Sender::PostAppend) and OpLog
  // returns without waiting for the acknowledgement, so an operation the caller considers done can
  // be lost when the front-end crashes before the log landed. Acknowledgements are drained on
  // later calls; the session waits for them only when the send queue is full, on Fence, and when
  // closed. A failed or missing acknowledgement makes the session broken (every later update
  // call returns that error). Exists to measure the paper's symmetric architecture ("logs are
  // flushed asynchronously, without waiting for the acknowledgement"); never use it for data you
  // need. Each op log must fit in one inline block (the provider's inline limit, at most 4 KiB
  // with the soft NIC): larger ones are kInvalidArgument.
  bool async_op_logs = false;
  // How many times an op log that finds the b-log without a posted segment is held and retried
  // before the append fails (rowan::SenderOptions::rnr_retry: back-pressure while the back-end's
  // log consumer catches up; ~6.5 s with the soft NIC at the default 17; verbs: 7 = forever).
  uint32_t log_rnr_retry = 17;
  // Memory logs that repeat a value of their op log travel as pointers into it
  // (Session::MemLogFromOp; the AsymNVM paper §4.3). false: always inline (to compare).
  bool pointer_mem_logs = true;
};

// A named root in the back-end's naming space (doc/backend.md §Naming space).
struct Structure {
  uint32_t id = 0;  // naming slot; the structure id in op logs
  uint32_t type = 0;
  std::string name;
  std::array<uint64_t, 4> params{};
  uint64_t root_addr = 0, lock_addr = 0, seq_addr = 0, aux_addr = 0;  // one-sided words
  uint32_t page_size = 0;  // cache page size for this structure's data (0: the session default)
};

struct Counters {
  fabric::Counters fabric;  // every connection of this session (OQ, Rowan, one-sided)
  uint64_t remote_reads = 0, remote_read_bytes = 0;
  uint64_t cache_hits = 0, cache_misses = 0, cache_evictions = 0;
  uint64_t mem_logs = 0, coalesced = 0;  // coalesced: MemLogs merged into an earlier entry
  uint64_t pointer_mem_logs = 0;         // of mem_logs, sent as pointers into their op log
  uint64_t txns = 0, txn_bytes = 0;
  uint64_t op_logs = 0, op_log_bytes = 0;
  uint64_t fences = 0, fence_polls = 0;
  uint64_t lock_acquires = 0, lock_retries = 0;
  uint64_t takeovers = 0;  // dead writers whose locks this session took over (WriterLock)
  uint64_t reader_retries = 0;
  uint64_t replayed_ops = 0;
  // Frees of objects carved by an earlier session (another incarnation or front-end): the
  // allocator state of a session is DRAM only (the paper reconstructs allocation state only at
  // slab level), so their space stays allocated until the slab is reclaimed (doc/frontend.md).
  uint64_t orphan_frees = 0;
  // Online reclamation (doc/alloc.md §Leaks across crashes): reclaim walks run, blocks freed by
  // them, reclaims deferred (a structure's lock held by a live front-end), journal entries whose
  // extent was not allocated any more (refused, dropped), walks that failed (nothing freed).
  uint64_t reclaim_runs = 0, reclaimed_blocks = 0, reclaim_deferred = 0, reclaim_refused = 0,
           reclaim_failures = 0;
  uint64_t reclaim_walk_us = 0;  // time in the reclaims' block walks
  uint64_t journal_writes = 0;   // durable ownership-journal entry writes (slab fetches + returns)
};

// An operation log found after a crash (recovery case 2, §7.2).
struct RecoveredOp {
  uint64_t op_seq = 0;
  uint32_t structure_id = 0;
  uint16_t op_type = 0;
  std::vector<uint8_t> payload;
};

// Where recovery finds this front-end's op logs with op_seq > OPN: the back-end (Session::Replay())
// or, in tests, a fake.
class OpLogFetcher {
 public:
  virtual ~OpLogFetcher() = default;
  virtual Result<std::vector<RecoveredOp>> Fetch(uint64_t frontend_id, uint64_t after_op_seq) = 0;
};

class Session;
// Re-executes one operation (the op log exists already: OpLog() inside it returns op.op_seq and
// sends nothing). It issues MemLogs and TxWrite like the original execution.
using ReplayFn = std::function<Status(Session&, const Structure&, const RecoveredOp&)>;

// Takes over a dead writer's structures (doc/frontend.md §Dead writers): given a recovery Session
// that holds the dead front-end's id and the structures its unreplayed op logs name (plus the one
// whose lock was wanted), opens what the replay functions need, calls recovery.Replay() and closes
// (fence + unlock) before returning. structures::RegisterReplays installs one.
using AdoptFn = std::function<Status(Session& recovery, const std::vector<Structure>& structures)>;

class Session {
 public:
  // Connects, registers the front-end (creating its record on first use) and learns LPN/OPN.
  // Errors: kInvalidArgument (options, more than one back-end: frontend::Cluster serves several),
  // fabric / OQ
  // errors with context. A rejected transaction of an earlier session recorded by the back-end is
  // logged (it cannot be cleared yet; doc/frontend.md).
  static Result<std::unique_ptr<Session>> Open(const SessionOptions& options);
  // Flushes the batch and fences (errors are logged), releases a held writer lock.
  ~Session();

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // ---- naming (Table 1: naming) ----
  // Create-or-open. kAlreadyExists (same name, other type), kInvalidArgument (name 1..63 bytes,
  // type non-zero and not 0xFE), kResourceExhausted (table full), transport errors.
  Result<Structure> CreateRoot(const std::string& name, uint32_t type,
                               const std::array<uint64_t, 4>& params = {}, uint32_t page_size = 0);
  Result<Structure> OpenRoot(const std::string& name);  // kNotFound
  Status RemoveRoot(const std::string& name);           // kNotFound

  // ---- reads ----
  // Through the page cache (rc, rcb; pages of `page_size`, 0 = default) or one one-sided READ.
  // kInvalidArgument: range outside the naming and data areas; transport errors.
  Status Read(uint64_t addr, std::span<uint8_t> out, uint32_t page_size = 0);
  Result<uint64_t> ReadWord(uint64_t addr);  // 8 bytes, 8-aligned, always remote
  // One-sided READ that bypasses the cache at every level (still patched with this session's own
  // writes not yet applied). Structures use it for data they choose not to cache.
  Status ReadRemote(uint64_t addr, std::span<uint8_t> out);
  // A consistent read of a structure's data (Algorithm 2): `body` runs between two reads of the
  // sequence word, with reads remote (cache bypassed), and is retried while a transaction is being
  // applied or was applied meanwhile. kTimedOut after options.timeout. A body error is returned
  // when the sequence word did not change around it; when it did, an error a torn read can cause
  // (kAborted, kCorruption, kNotFound, kInvalidArgument) is retried instead.
  Status ReadConsistent(const Structure& s, const std::function<Status()>& body);
  // Calls `observer` with the range of every Read, ReadRemote and ReadWord of this session (the
  // range asked for, before the cache), whether it succeeds or not; empty: none. The block walk
  // of `asymnvm-ctl check` / `gc` (structures/walk.h) learns from it which blocks a structure's
  // Verify reads.
  void SetReadObserver(std::function<void(uint64_t addr, uint64_t len)> observer);

  // Remote compare-and-swap of an 8-byte word (root word of a multi-version structure, or any
  // 8-aligned word of the naming or data area), made durable (FLUSH) before returning. Returns the
  // previous value (the swap happened iff it equals `expected`). Cached pages holding the word are
  // updated when the swap happened. kInvalidArgument (misaligned, outside both areas).
  Result<uint64_t> CompareSwap(uint64_t addr, uint64_t expected, uint64_t desired);

  // ---- writes ----
  // Table 1 `write`: one transaction with this write, sent and fenced now (the naive path).
  Status Write(uint64_t addr, std::span<const uint8_t> data, const Structure* s = nullptr);
  // Table 1 `mem_log`: buffers a redo write of the current operation (naive: Write). The range
  // must lie in the data area (kInvalidArgument).
  Status MemLog(uint64_t addr, std::span<const uint8_t> data);
  // Like MemLog, for bytes that equal the payload of this session's open op log `op_seq` (what
  // OpLog returned) at `op_offset`: the transaction carries a pointer to the op log instead of the
  // bytes (the AsymNVM paper §4.3), so a value crosses the wire once. The caller guarantees the
  // equality (the back-end copies from the op log it holds). Inline, as MemLog, where a pointer
  // cannot be resolved or does not pay: naive, async op logs, op logs sent to another back-end
  // (op_log_address), SessionOptions::pointer_mem_logs false, 16 bytes or less.
  // kFailedPrecondition when op_seq is not an open operation of this session.
  Status MemLogFromOp(uint64_t addr, std::span<const uint8_t> data, uint64_t op_seq,
                      uint32_t op_offset);
  // Table 1 `op_log`: persists an operation log now (Rowan append, durable on return; not so with
  // SessionOptions::async_op_logs) and returns its op_seq; naive: returns 0 and sends nothing.
  // kInvalidArgument (op type reserved).
  Result<uint64_t> OpLog(const Structure& s, uint16_t op_type, std::span<const uint8_t> params);
  // Table 1 `tx_write`: ends the current operation; its memory logs join the batch (r, rc: sent
  // at once). The transaction brackets `s`'s sequence word. kResourceExhausted when one operation's
  // memory logs exceed the largest transaction.
  Status TxWrite(const Structure& s);
  // Like TxWrite, but the operation stays open: its memory logs so far join the batch (and are
  // sent like TxWrite's), while the OPN sent with transactions does not cover its op log until
  // TxWrite ends it. An operation whose memory logs exceed one transaction issues parts, then
  // TxWrite: after a crash before that last transaction applied, Session::Replay re-executes the
  // operation whole, so its replay must be idempotent over any prefix of its parts (the hash
  // table's atomic PutBatch). At `naive` (no op log) each part is its own fenced transaction.
  Status TxWritePart(const Structure& s);
  // Sends the batch now (no wait for application).
  Status Flush();
  // Grouped writes (multi-structure transactions, asymnvm/structures/transaction.h): at `naive`
  // MemLog then buffers like at r instead of sending each write at once, and TxWrite sends the
  // operation's memory logs as ONE transaction and fences it. No effect at r, rc, rcb.
  void SetGroupWrites(bool on);
  // Flushes, then waits until the back-end applied every transaction sent (one-sided reads of the
  // LPN word). kAborted if the back-end rejected a transaction; kTimedOut. With async_op_logs it
  // also waits for every op log's acknowledgement (a failed one: the session's broken error).
  Status Fence();
  // Flushes an rcb batch whose age exceeds batch_timeout (call from an idle loop; every other call
  // does it too).
  Status Poll();

  // ---- allocation (two tiers: slabs from the back-end, objects carved here) ----
  Result<uint64_t> Malloc(uint64_t size);
  // kFailedPrecondition (double free of an object of this session), kInvalidArgument (an address
  // outside the data area, or inside an object of this session's slabs). An object this session
  // did not allocate (carved by an earlier session) is left allocated and counted in
  // orphan_frees.
  Status Free(uint64_t addr);

  // ---- concurrency ----
  // Lock-ahead op log, then CAS 0 → frontend_id on s.lock_addr, retried until lock_timeout
  // (kTimedOut). Re-acquiring a lock this front-end id already holds (after a crash) succeeds.
  // The cache is invalidated (another writer may have changed the data).
  Status WriterLock(const Structure& s);
  // Flush, Fence, CAS frontend_id → 0 + FLUSH. kFailedPrecondition if the lock is not ours.
  Status WriterUnlock(const Structure& s);

  // A structure that keeps op logs open across calls (memory logs deferred: stack/queue
  // annulment, multi-version publishing) registers how to close them (MemLogs + TxWrite of all of
  // them). The session calls it before another structure's op log, so transactions never carry
  // effects of ops past their OPN. An empty function unregisters. A structure with a closer must
  // drop the ops it holds open when the session reconnects (SetReconnectHook): the replay
  // re-executes them.
  void SetOpCloser(uint32_t structure_id, std::function<Status()> close);
  // After a reconnection (SessionOptions::coordinator; doc/frontend.md §Reconnection) and before
  // its replay, the session calls `hook`: whatever DRAM state the application's structures derived
  // from the pool or hold for open ops must be dropped (re-read from the pool), because the
  // transactions the old connection had not made durable are lost and every op past the new OPN
  // — open ones included — is re-executed by the replay. structures::RegisterReplays installs one.
  // An error leaves the session to reconnect again at its next call.
  void SetReconnectHook(std::function<Status()> hook);

  // ---- recovery (§7.2 case 2) ----
  // Structures register a replay function per structure type before Replay.
  void RegisterReplay(uint32_t structure_type, ReplayFn fn);
  // Fetches op logs with op_seq > OPN and re-executes them in op_seq order through the replay
  // function of their structure's type; then fences. The structures must have been opened in this
  // session (kFailedPrecondition otherwise, or when no function is registered for the type).
  Status Replay(OpLogFetcher* fetcher);
  // Dead writers (needs SessionOptions::coordinator and an adopter): when WriterLock finds the lock
  // held by a front-end id whose lease on the coordinator is gone, it claims that id, opens a
  // recovery Session under it on the same back-end, lets `adopt` replay the dead writer's
  // acknowledged op logs and release its locks, then takes the lock (doc/frontend.md §Dead
  // writers). Without an adopter a dead holder's lock is waited for until lock_timeout.
  void SetAdopter(AdoptFn adopt);
  // Replay with the op logs the back-end still holds in its b-log (request kFetchOpLogs): the
  // ops of crashed earlier sessions of this front-end id that are not covered by the OPN.
  // kFailedPrecondition when SessionOptions::op_log_address redirects the op logs elsewhere.
  Status Replay();

  // ---- online reclamation (doc/alloc.md §Leaks across crashes; structures/walk.h) ----
  // The slabs and large extents earlier incarnations of this id recorded in the ownership journal
  // (frontend/alloc_journal.h) and that are still recorded, in address order.
  std::vector<uint64_t> InheritedExtents() const;
  // Whether a reclaim of the inherited extents is still to run (set at registration when the
  // journal holds any; cleared by MarkReclaimed).
  bool reclaim_pending() const;
  void MarkReclaimed();
  // Clears `addr`'s journal entry (durably) and then, when `free`, frees the extent (`bytes`) at
  // the back-end (request 22). A freed extent is never carved by this session again, and a Free
  // of an address in it (a stale free: a structure's pending free of an object the reclaim found
  // unreached) is dropped and counted in orphan_frees. kNotFound when `addr` is not an inherited
  // extent.
  Status ReleaseInherited(uint64_t addr, uint64_t bytes, bool free);
  // The live back-end allocation holding `addr` (request 24): {start, bytes}, {0, 0}: none.
  Result<std::pair<uint64_t, uint64_t>> ExtentOf(uint64_t addr);
  // Every structure of the back-end's naming space (front-end records excluded), read from the
  // naming area one-sidedly. Slots failing their checksum are skipped.
  Result<std::vector<Structure>> ListStructures();
  // WriterLock with its own bound: true when acquired (or already held by this id), false when
  // another front-end still held it after `wait`.
  Result<bool> TryWriterLock(const Structure& s, std::chrono::milliseconds wait);
  bool HoldsWriterLock(const Structure& s) const;
  // Run after a successful Replay() while reclaim_pending() and SessionOptions::
  // reclaim_on_recovery (structures::RegisterReplays installs structures::ReclaimDeadAllocations).
  // Its error is logged and counted (reclaim_failures), never returned by Replay.
  void SetReclaimer(std::function<Status(Session&)> reclaimer);
  const SessionOptions& options() const;
  void CountReclaim(uint64_t blocks, bool deferred, uint64_t refused, uint64_t walk_us);

  // ---- introspection ----
  Counters counters() const;
  void InvalidateCache();
  uint64_t frontend_id() const;
  uint64_t applied_lpn() const;    // LPN last read from the back-end
  uint64_t recovered_opn() const;  // OPN at registration
  uint64_t next_op_seq() const;
  uint64_t data_begin() const;
  uint64_t data_end() const;
  uint32_t block_size() const;  // the back-end's allocation block (slab) size
  // The largest transaction (bytes, headers included) the back-end accepts: one operation's
  // memory logs must fit (TxWrite returns kResourceExhausted otherwise). Structures size
  // multi-pair runs and multi-version publishes by it.
  size_t max_transaction_bytes() const;
  Level level() const;
  // The identity of the back-end's pool (fixed when the pool file was created; survives restarts
  // and address changes). Partition maps name back-ends by it.
  const std::array<uint8_t, 16>& pool_uuid() const;
  // The back-end address currently connected (changes when the Session reconnects).
  const std::string& backend_address() const;
  // How many times this Session reconnected to a restarted back-end.
  uint64_t reconnects() const;
  // A call found the connection broken and this Session reconnects (and replays) at its next
  // call: what the failed call did is dropped or redone by the replay, not half-applied.
  bool reconnect_pending() const;

 private:
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  // `epoch`: the coordinator epoch of the claimed id, sent with the registration (0: none).
  // `term`: the group term learned from the back-end's registration (0: none; doc/mirror.md
  // §Terms).
  static Result<std::unique_ptr<Impl>> Connect(const SessionOptions& options, uint64_t epoch,
                                               uint64_t term = 0);
  // Runs one public call: reconnects first when an earlier call found the connection broken, and
  // after a connection error reconnects and (when `retry` and no operation is in progress) runs
  // the call again.
  template <class F>
  auto Guarded(bool retry, F&& f) -> decltype(f());
  // Waits for the pool's registration, replaces impl_ with a new connection, replays.
  // kUnavailable after reconnect_deadline.
  Status Reconnect(const Status& cause);
  Status ReplayWith(OpLogFetcher* fetcher);
  // WriterLock found `target` held by `holder`: true when the holder was dead and this session
  // replayed its op logs and released its lock; false when it is alive (or being adopted).
  Result<bool> AdoptDeadWriter(uint64_t holder, const Structure& target);
  // CAS loop of WriterLock up to `deadline`: 0 when acquired, else the holder.
  Result<uint64_t> LockUntil(const Structure& s, std::chrono::steady_clock::time_point deadline);
  Status EndWrites(const Structure& s, bool close);  // TxWrite (close) / TxWritePart
  std::unique_ptr<Impl> impl_;
  int guard_depth_ = 0;
  uint64_t reconnects_ = 0;
};

// The coordinator node where the primary back-end of a pool registers (doc/coord.md).
std::string BackendGroupPrimaryPath(const std::array<uint8_t, 16>& pool_uuid);

}  // namespace asymnvm::frontend
