// Store: one Rowan-KV server's log-structured PM state (doc/kv.md §Storage).
//
// PM: a header page and `segments` segments of `segment_size` bytes. Each OQ worker owns a
// t-log (a chain of segments it appends to, single writer); the cleaner (GC) owns its own. A
// write appends a self-validating entry (kv/format.h) and persists it before it returns (or,
// with group commit, at the worker's next SyncDeferred), then updates the DRAM index. The index
// is partitioned by worker (all requests of a shard go to one worker, WorkerOf): per key the tag
// (KeyHash), the shard, the entry's PM location and its version; keys are compared in PM. Open
// rebuilds the index by scanning every segment (the largest version wins).
//
// Versions: one counter per shard, rebuilt at Open as the largest version seen; each write takes
// the next value. A delete writes a tombstone entry that stays live (and is copied by GC), so a
// deleted key never comes back and its version is never reissued.
//
// Exactly-once under OQ recovery: every entry records the OQ queue position of the request that
// wrote it; ApplyPut called with recovering = true for a position at or below the worker's
// largest applied position is skipped. The largest positions survive GC in the header page.
//
// GC (CleanOnce): seals nothing; picks sealed segments whose live bytes are below
// threshold × segment_size, copies their live entries to the GC log (same version and position),
// persists, repoints the index, persists the header's applied floors and frees the segments
// (zeroes and persists their header).
//
// Thread safety: calls for worker w (Put/Get/Delete/PutIf/Incr with worker = w) must come from one
// thread at a time (the OQ worker). Scan, CleanOnce and stats() may run concurrently with them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "asymnvm/kv.h"
#include "asymnvm/pm.h"
#include "asymnvm/status.h"
#include "common/thread_annotations.h"
#include "kv/format.h"

namespace asymnvm::kv {

struct StoreOptions {
  uint8_t* header_page = nullptr;  // kHeaderPage bytes
  uint8_t* log_base = nullptr;     // segments × segment_size bytes
  pm::Persister* persister = nullptr;
  // Geometry for a blank header page (ignored, and replaced by the stored one, otherwise).
  format::ServerHeader geometry;
  double gc_threshold = 0.75;  // clean sealed segments whose live fraction is below this
  // Group commit (doc/kv.md §Write path): the workers' writes (Put, Delete, PutIf, Incr, Batch,
  // Reserve) are flushed but not synced; they become durable at the worker thread's next
  // SyncDeferred, which the caller runs before any result of them leaves the server (the OQ
  // server's before_respond) and before the request that made them can be forgotten (its
  // ReqToExecute persisted past it, its buffer recycled). false: each write is synced at once.
  bool group_commit = false;
  // Replication (doc/kv.md §Replication): called by a write after its entry is durable in the
  // local t-log and before the index shows it, with the encoded entry (kEntryHeaderSize + key +
  // value bytes; its generation field is the local segment's). A non-OK status fails the write
  // (the client learns an error: outcome unknown). Null: no replication.
  std::function<Status(uint32_t worker, uint32_t shard, std::span<const uint8_t> entry)> replicate;
};

struct StoreStats {
  uint64_t keys = 0;  // live keys (tombstones excluded)
  uint64_t tombstones = 0;
  uint64_t segments = 0, free_segments = 0;
  uint64_t live_bytes = 0;      // footprints of index entries
  uint64_t appended_bytes = 0;  // entry footprints appended since Open (GC copies included)
  uint64_t gc_copied_bytes = 0;
  uint64_t gc_segments_freed = 0;
  uint64_t recovery_skipped = 0;   // OQ re-executions skipped as already applied
  uint64_t recovered_entries = 0;  // valid entries found by Open's scan
};

struct ReadResult {
  bool found = false;
  uint64_t version = 0;
  uint64_t total_len = 0;
  std::string bytes;  // value bytes from the requested offset
  // Get with locate_from: the value is at least that long, so only where it lies is returned
  // (no bytes copied, no checksum computed: the one-sided reader checks it).
  bool located = false;
  uint64_t log_offset = 0, generation = 0;
  uint32_t footprint = 0;
};

struct ScanOut {
  struct Item {
    uint64_t tag = 0;
    std::string key, value;
    uint64_t version = 0;
    uint32_t value_len = 0;
    bool truncated = false;
  };
  std::vector<Item> items;
  uint64_t next_cursor = 0;
  bool done = false;
};

// RDMP server-bypass (doc/kv.md §RDMP): a reserved slot in a worker's t-log and where it is.
struct BypassSlot {
  uint64_t log_offset = 0;  // of the slot's first byte, from the start of the segment area
  uint64_t version = 0;     // the version the value will have
  uint32_t footprint = 0;
};

// One write of an atomic batch (Store::Batch): a put (value set) or a delete (no value),
// conditional on the key's current version when `conditional` (0 = must be absent).
struct WriteOp {
  std::string_view key;
  std::optional<std::string_view> value;
  bool conditional = false;
  uint64_t expected_version = 0;
  bool check_only = false;  // a condition only: writes nothing
};
struct BatchResult {
  bool applied = false;
  // applied: the version each op wrote (a check: the key's current one); else each key's
  // current version (0 = absent).
  std::vector<uint64_t> versions;
};

// Where a key's current entry lies (one-sided GET).
struct Located {
  bool found = false;  // false also for a tombstone
  uint64_t version = 0;
  uint32_t value_len = 0;
  uint64_t log_offset = 0;
  uint64_t generation = 0;  // of the segment holding it
  uint32_t footprint = 0;
};

class Store {
 public:
  // Formats a blank header page with options.geometry, or validates the stored one and rebuilds
  // the index. Errors: kInvalidArgument (missing pointers, bad geometry), kCorruption (header page,
  // a segment header).
  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  ~Store();

  const format::ServerHeader& geometry() const { return geo_; }

  // position = worker << 56 | OQ queue position (0 when not from the OQ).
  // Returns the version written. kResourceExhausted when no segment is free.
  Result<uint64_t> Put(uint32_t worker, uint32_t shard, std::string_view key,
                       std::string_view value, uint64_t position, bool recovering);
  // Group commit: makes the worker's deferred writes durable (on the worker's thread: the
  // persister's pending ranges are per thread).
  void SyncDeferred(uint32_t worker);
  // Whether worker's partition holds writes not yet synced (group commit; under the same
  // one-thread-per-worker rule as the writes).
  bool Deferred(uint32_t worker) const { return worker < geo_.workers && dirty_[worker] != 0; }
  // Group commit by a thread that wrote into another worker's partition (a co-located front end,
  // Server::BeginLocal): forgets the worker's deferred flag without syncing — the calling thread
  // then syncs its own flushed ranges with SyncThread() before any result of those writes
  // leaves. Only for writes without an OQ position (position 0).
  void HandOffDeferred(uint32_t worker) {
    if (worker < geo_.workers) dirty_[worker] = 0;
  }
  void SyncThread() { persister_->Drain(); }
  // While set (a worker index), the entries of Put/Delete/PutIf/Incr of every worker are appended
  // to that worker's t-log; each key stays indexed in its own worker's partition (recovery and
  // the cleaner index an entry by its shard, not by the log holding it). For a caller that holds
  // every worker at once (Server::BeginLocal): its writes form one log range, which one sync
  // covers. UINT32_MAX: off (each worker's own t-log). Set and cleared under that exclusion.
  void SetSharedLog(uint32_t worker) { shared_log_ = worker; }
  // OQ recovery is over: forget the positions Open collected to recognise re-executions.
  void EndRecovery();
  ReadResult Get(uint32_t worker, uint32_t shard, std::string_view key, uint64_t offset,
                 size_t max_bytes, uint64_t locate_from = UINT64_MAX) const;
  Result<DeleteReply> Delete(uint32_t worker, uint32_t shard, std::string_view key,
                             uint64_t position);
  Result<PutIfReply> PutIf(uint32_t worker, uint32_t shard, std::string_view key,
                           std::string_view value, uint64_t expected_version, uint64_t position);
  Result<IncrReply> Incr(uint32_t worker, uint32_t shard, std::string_view key, int64_t delta,
                         uint64_t position);
  // Items of `shard` with tag >= cursor, in tag order: at most `count` (whole tag groups), at most
  // about `max_bytes` of encoded items; values above `max_value` are left out (truncated).
  ScanOut Scan(uint32_t shard, uint64_t cursor, uint32_t count, size_t max_bytes,
               size_t max_value) const;

  // Applies every op of a batch or none: all keys in `shard`, distinct, 1..format::kMaxBatch of
  // them. When a condition fails nothing is written (applied = false, the current versions).
  // Otherwise the ops become consecutive entries of the worker's t-log written and persisted as
  // one range (and replicated as one b-log entry) — recovery counts them only all together.
  // kInvalidArgument for bad input; append errors as Put.
  Result<BatchResult> Batch(uint32_t worker, uint32_t shard, std::span<const WriteOp> ops,
                            uint64_t position);
  // As Batch, with keys of any shards (a multi-shard batch, doc/kv.md §Batches): only for a
  // caller holding every worker at once (Server::BeginLocal, a stand-alone server: nothing is
  // replicated). Members land in the shared log when one is set, else in the first key's
  // worker's t-log; each is indexed in its own shard's partition and takes its shard's next
  // version. Recovery counts the members only all together, as any batch.
  Result<BatchResult> BatchAcrossShards(std::span<const WriteOp> ops);

  // RDMP server-bypass PUT. Reserve appends a kPutBypass slot (header + key, flag words zeroed,
  // persisted) for a value of value_len bytes whose CRC32C is value_crc, takes the next version of
  // the shard and marks the slot pending (its segment is not cleaned while a slot is pending).
  // The client then writes the value and the persist flag one-sidedly. Publish validates the slot
  // (key, version, persist flag, value checksum) and makes it the key's current entry unless a
  // newer version already is; it is idempotent and works on slots found after a restart too.
  // Settle ends a pending reservation whose client is gone: published when its persist flag is
  // set (as a restart would find it), abandoned otherwise. Errors: Reserve as Put;
  // Publish kFailedPrecondition (no such slot, flag not set, value fails its checksum).
  Result<BypassSlot> Reserve(uint32_t worker, uint32_t shard, std::string_view key,
                             uint32_t value_len, uint32_t value_crc);
  Result<uint64_t> Publish(uint32_t worker, uint32_t shard, std::string_view key,
                           uint64_t log_offset, uint64_t version);
  void Settle(uint64_t log_offset);
  // The key's current entry (for a one-sided read). Partition of `worker`, as Get.
  Located Locate(uint32_t worker, uint32_t shard, std::string_view key) const;
  uint8_t* log_base() const { return log_base_; }
  size_t log_bytes() const { return size_t{geo_.segments} * geo_.segment_size; }
  uint64_t pending_slots() const;

  // A backup applies an entry its primary replicated (an encoded entry as given to
  // StoreOptions::replicate; a batch arrives as its members back to back, each padded to 64 B
  // but the last, and is applied all together): appended to the replica log, then indexed when its
  // version is above the key's current one (so applying twice, or out of order, is harmless).
  // kCorruption when the bytes do not validate. Thread-safe.
  Status ApplyReplica(std::span<const uint8_t> entry);
  // Versions of `shard` continue above `floor` (a promoted primary: floor = epoch << 40).
  void RaiseVersionFloor(uint32_t shard, uint64_t floor);
  // Calls fn with the encoded current entry (tombstones included) of every key of `shard`, copied
  // in batches under the partition locks (catch-up of a joining backup).
  Status ForEachEntry(uint32_t shard,
                      const std::function<Status(std::span<const uint8_t> entry)>& fn) const;

  // One cleaning pass; returns the number of segments freed.
  Result<uint32_t> CleanOnce();
  // Blocks until a segment is free or `deadline`; used when an append finds none.
  bool WaitForFreeSegment(std::chrono::steady_clock::time_point deadline);
  // True when the free segments fall below the cleaning watermark (wake the cleaner).
  bool NeedsCleaning() const;

  StoreStats stats() const;
  // The worker (t-log, index partition, OQ worker) of a shard: every request of a shard runs on
  // one worker thread, in queue order, so a multi-key batch of one shard is atomic there.
  static uint32_t WorkerOf(uint32_t shard, uint32_t workers);

 private:
  struct Loc {
    uint32_t shard = 0;
    uint32_t seg = 0;
    uint32_t off = 0;
    uint32_t footprint = 0;
    uint64_t version = 0;
    bool tombstone = false;
  };
  using IndexKey = std::pair<uint32_t, uint64_t>;  // (shard, tag)
  struct Partition {
    mutable Mutex mu;
    std::multimap<IndexKey, Loc> index ASYMNVM_GUARDED_BY(mu);
    // The log's end: its single writer's (the worker, the cleaner under clean_mu_, ApplyReplica
    // under replica_mu_), not under mu.
    uint32_t seg = UINT32_MAX;  // open segment of this log (UINT32_MAX: none yet)
    uint32_t off = 0;
  };
  struct SegmentMeta {
    uint64_t generation = 0;  // 0: free
    uint32_t owner = 0;
    bool open = false;  // being appended to
    std::atomic<uint64_t> live{0};
    std::atomic<uint32_t> pending{0};  // RDMP slots reserved and not yet published or settled
  };
  explicit Store(const StoreOptions& o);
  Status Format();
  // Rebuilds the index and the free list before the store is shared (not analysed: no lock held).
  Status Recover() ASYMNVM_NO_THREAD_SAFETY_ANALYSIS;
  uint8_t* SegmentBase(uint32_t seg) const { return log_base_ + size_t{seg} * geo_.segment_size; }
  // Room for `fp` bytes at the end of partition p's log (a new segment when the open one is
  // full); advances the log. The returned Loc has seg/off/footprint set.
  Result<Loc> Place(Partition& p, uint32_t owner, size_t fp);
  // Place, retrying while no segment is free (the cleaner frees one) for up to 10 s.
  Result<Loc> PlaceWaiting(Partition& p, uint32_t owner, size_t fp);
  // The entry at `loc` as a plain kPut/kDelete encoding (a kPutBypass becomes a kPut): what
  // replication, catch-up and the cleaner carry.
  std::vector<uint8_t> Canonical(const uint8_t* e, const format::EntryHeader& h) const;
  // Appends an entry to partition p's log (p = workers for the GC log). Returns its location.
  // sync = false: flushed only (made durable by the calling thread's next Drain).
  Result<Loc> Append(Partition& p, uint32_t owner, const format::EntryHeader& h,
                     std::string_view key, std::string_view value, bool sync = true);
  Result<uint32_t> AllocateSegment(uint32_t owner, format::SegmentKind kind);
  Status PersistHeader();
  // Finds the index entry of key (partition lock held). end() when absent.
  std::multimap<IndexKey, Loc>::iterator FindLocked(Partition& p, uint32_t shard, uint64_t tag,
                                                    std::string_view key) const
      ASYMNVM_REQUIRES(p.mu);
  // Whether the `h.batch_count` members of the batch starting at `e` (member 0, header h) all
  // validate back to back within `avail` bytes; *bytes = up to the end of the last one.
  static bool WholeBatch(const uint8_t* e, size_t avail, uint64_t generation,
                         const format::EntryHeader& h, size_t* bytes);
  // Points the index at `loc` for key unless it holds a newer version (partition p, locked by the
  // caller); keeps the segments' live bytes.
  void IndexLocked(Partition& p, std::string_view key, const Loc& loc) ASYMNVM_REQUIRES(p.mu);
  // Writes a new entry for key and repoints the index (the worker's own partition).
  Result<uint64_t> WriteLocked(uint32_t worker, format::EntryType type, uint32_t shard,
                               std::string_view key, std::string_view value, uint64_t position);
  // A worker's write at `position` was flushed: without group commit drain now (and count it),
  // with group commit remember the position for the next SyncDeferred.
  void AfterWrite(uint32_t worker, uint64_t position);
  void NotePosition(uint32_t worker, uint64_t position);
  // The worker's thread synced: its deferred entries are durable; their positions count.
  void Synced(uint32_t worker);
  Status CheckShard(uint32_t shard) const;
  // Batch's body for keys of any shards: `worker` owns the t-log (unless a shared one is set) and
  // takes the group-commit bookkeeping; replicate: pass the range to StoreOptions::replicate.
  Result<BatchResult> BatchLocked(uint32_t worker, std::span<const WriteOp> ops, uint64_t position,
                                  bool replicate);

  StoreOptions o_;
  format::ServerHeader geo_;
  uint8_t* log_base_;
  pm::Persister* persister_;
  std::vector<std::unique_ptr<Partition>> parts_;  // workers, the GC log, the replica log
  Partition& gc_part() const { return *parts_[geo_.workers]; }
  Partition& replica_part() const { return *parts_[geo_.workers + 1]; }
  Mutex replica_mu_;  // serializes ApplyReplica appends
  std::unique_ptr<std::atomic<uint64_t>[]> shard_version_;
  std::unique_ptr<std::atomic<uint64_t>[]> applied_;  // per worker: largest durable position
  std::unique_ptr<uint64_t[]> deferred_;              // per worker: largest position not yet synced
  // per worker: writes flushed and not yet synced (bytes, not vector<bool>: the workers' threads
  // write their own elements concurrently)
  std::vector<uint8_t> dirty_;
  uint32_t shared_log_ = UINT32_MAX;  // SetSharedLog
  // Recognising OQ re-executions after a restart: the floors of the header page and every
  // position found in the logs above them (exact: with deferred syncs the logs may hold a later
  // position without an earlier one). Cleared by EndRecovery.
  std::vector<uint64_t> floor_at_open_;
  std::unordered_set<uint64_t> recovered_positions_;
  std::unique_ptr<SegmentMeta[]> segs_;
  mutable Mutex alloc_mu_;
  std::condition_variable free_cv_;
  // free segment indexes, lowest last (pop_back)
  std::vector<uint32_t> free_ ASYMNVM_GUARDED_BY(alloc_mu_);
  uint64_t next_generation_ ASYMNVM_GUARDED_BY(alloc_mu_) = 1;
  Mutex header_mu_;
  Mutex clean_mu_;
  mutable Mutex pending_mu_;
  // RDMP: log offset of a pending slot -> worker
  std::map<uint64_t, uint32_t> pending_ ASYMNVM_GUARDED_BY(pending_mu_);
  std::atomic<uint64_t> appended_{0}, gc_copied_{0}, gc_freed_{0}, skipped_{0};
  uint64_t recovered_entries_ = 0;
};

// Parses a decimal int64 counter value ("-12"); false for anything else.
bool ParseCounter(std::string_view s, int64_t* out);

}  // namespace asymnvm::kv
