// Internals of the front-end Session shared by its source files (include/asymnvm/frontend.h;
// design in doc/frontend.md): the Session::Impl state, the transport helpers it uses (one-sided
// operations, op logs, transactions and the fence: session_transport.cc), the op-log fetcher and
// the Guarded wrapper every public call goes through. Files by concern:
//   session.cc            open, register, reconnect, close, introspection
//   session_transport.cc  one-sided operations, op logs, transactions, batching, fence
//   session_data.cc       naming, reads, writes, allocation
//   session_recovery.cc   writer locks, replay, taking over dead writers
//   op_sequence.{h,cc}    op_seq / OPN bookkeeping
#pragma once

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <thread>
#include <unordered_map>

#include "alloc/frontend_allocator.h"
#include "asymnvm/frontend.h"
#include "asymnvm/pm.h"
#include "backend/log_format.h"
#include "backend/naming.h"
#include "backend/rpc.h"
#include "common/logging.h"
#include "fabric/oq/oq.h"
#include "fabric/rowan/sender.h"
#include "frontend/alloc_journal.h"
#include "frontend/group_watch.h"
#include "frontend/identity.h"
#include "frontend/op_sequence.h"
#include "frontend/page_cache.h"
#include "frontend/rpc_slab_source.h"

namespace asymnvm::frontend {
namespace internal {

constexpr uint16_t kOpLogEntryType = 1;  // Rowan entry type of an op log (doc/backend.md)
constexpr size_t kScratchBytes = 1 << 20;
using Clock = std::chrono::steady_clock;

inline size_t EntryFootprint(size_t len) {
  return backend::kTxnEntryHeaderSize + (len + 7) / 8 * 8;
}
inline constexpr size_t kPointerEntryFootprint = backend::kTxnEntryHeaderSize + 16;

// Exponential back-off between polls of a remote word: 20 µs doubling to 2 ms.
class Backoff {
 public:
  void Wait() {
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::microseconds(2000));
  }

 private:
  std::chrono::microseconds delay_{20};
};

inline bool ValidPageSize(uint32_t ps) {
  return ps >= 64 && ps <= (1u << 20) && (ps & (ps - 1)) == 0;
}

inline Result<Structure> DecodeEntry(std::span<const uint8_t> bytes) {
  ASYMNVM_ASSIGN_OR_RETURN(backend::NamingEntry e, backend::DecodeNamingEntry(bytes));
  Structure s;
  s.id = e.slot;
  s.type = e.type;
  s.params = e.params;
  s.root_addr = e.root_addr;
  s.lock_addr = e.lock_addr;
  s.seq_addr = e.seq_addr;
  s.aux_addr = e.aux_addr;
  s.name = std::move(e.name);
  return s;
}

// Op logs from the back-end's b-log (request kFetchOpLogs), page by page.
class BackendFetcher : public OpLogFetcher {
 public:
  BackendFetcher(oq::Client* client, uint64_t before) : client_(client), before_(before) {}
  Result<std::vector<RecoveredOp>> Fetch(uint64_t frontend_id, uint64_t after) override {
    std::vector<RecoveredOp> all;
    for (bool more = true; more;) {
      ASYMNVM_ASSIGN_OR_RETURN(auto ops, Page(frontend_id, after, &more));
      if (more && ops.empty()) return Status::ProtocolError("fetch op logs: empty page with more");
      for (auto& op : ops) {
        if (op.op_seq <= after) return Status::ProtocolError("fetch op logs: out of order");
        after = op.op_seq;
        all.push_back({op.op_seq, op.structure_id, op.op_type, std::move(op.payload)});
      }
    }
    return all;
  }
  // Whether the back-end holds any op log of `frontend_id` in (after, before) (one page).
  Result<bool> Any(uint64_t frontend_id, uint64_t after) {
    bool more = false;
    ASYMNVM_ASSIGN_OR_RETURN(auto ops, Page(frontend_id, after, &more));
    return !ops.empty();
  }

 private:
  Result<std::vector<backend::FetchedOp>> Page(uint64_t frontend_id, uint64_t after, bool* more) {
    backend::PayloadWriter w;
    w.U64(frontend_id).U64(after).U64(before_);
    std::vector<uint8_t> reply;
    ASYMNVM_RETURN_IF_ERROR(client_->Call(0, backend::kFetchOpLogs, w.bytes(), &reply));
    return backend::DecodeFetchedOps(reply, more);
  }

  oq::Client* client_;
  uint64_t before_;
};

inline bool IsConnectionLoss(const Status& s) {
  return s.code() == StatusCode::kConnectionError || s.code() == StatusCode::kRnrRetryExceeded;
}
inline const Status& StatusOf(const Status& s) { return s; }
template <class T>
Status StatusOf(const Result<T>& r) {
  return r.status();
}
}  // namespace internal

using internal::BackendFetcher;
using internal::Backoff;
using internal::Clock;
using internal::DecodeEntry;
using internal::EntryFootprint;
using internal::IsConnectionLoss;
using internal::kOpLogEntryType;
using internal::kScratchBytes;
using internal::StatusOf;
using internal::ValidPageSize;

struct Session::Impl {
  std::shared_ptr<FrontendIdentity> identity;  // first: the lease outlives everything else
  // Reader-side fencing (group_watch.h): set when connected through the group's registration.
  std::unique_ptr<GroupWatch> group_watch;
  SessionOptions o;
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::ProtectionDomain> pd;
  std::unique_ptr<oq::Client> oq;
  // Async op logs (SessionOptions::async_op_logs): the sender posts on `log_cq` (declared first so
  // it outlives the sender's connection); `log_inflight` holds the op_seqs (the appends' tokens)
  // not acknowledged yet, in post order.
  std::unique_ptr<fabric::CompletionQueue> log_cq;
  std::deque<uint64_t> log_inflight;
  std::unique_ptr<rowan::Sender> sender;
  std::unique_ptr<fabric::CompletionQueue> cq;
  std::unique_ptr<fabric::Connection> conn;  // one-sided operations
  std::vector<uint8_t> scratch;
  std::unique_ptr<fabric::MemoryRegion> scratch_mr;
  // The ownership journal (frontend/alloc_journal.h) outlives the source that writes it.
  std::unique_ptr<OwnershipJournal> journal;
  std::unique_ptr<RpcSlabSource> slabs;
  std::unique_ptr<alloc::FrontendAllocator> allocator;
  // Online reclamation (Session::SetReclaimer): pending while the journal holds extents of
  // earlier incarnations not yet reclaimed by this session.
  std::function<Status(Session&)> reclaimer;
  bool reclaim_pending = false;
  // Frees this session dropped of objects in blocks its own journal records (slabs of an earlier
  // incarnation): such a block may have died, so the close is not marked clean (the next
  // incarnation walks).
  uint64_t journaled_orphan_frees = 0;
  std::unique_ptr<PageCache> cache;

  // Registration.
  uint64_t lpn_addr = 0;  // fe record words: LPN, OPN, rejected, aux (8 bytes apart)
  uint64_t naming_begin = 0, naming_end = 0, data_begin = 0, data_end = 0;
  fabric::RegionDescriptor naming_desc, data_desc;
  uint32_t block_size = 0;
  uint32_t incarnation = 0;  // of this registration; in every txn header (doc/backend.md §Fencing)
  std::array<uint8_t, 16> pool_uuid{};
  uint64_t first_txn = 0;  // first txn_seq of this session
  size_t max_txn = 0;      // largest transaction (bytes) the back-end accepts
  size_t batch_limit = 0;
  uint32_t max_message = 0;

  // Sequence state.
  uint64_t next_txn = 1, last_sent = 0, known_lpn = 0;
  // Transactions posted and not yet known landed (pipelined: a transaction's landing — its sync
  // on a disk-backed pool — overlaps the next operation's op log; nothing is acknowledged on a
  // transaction, only on op logs). Reaped before the next one past kTxnsInFlight and by Fence.
  static constexpr size_t kTxnsInFlight = 2;
  std::deque<std::pair<uint64_t, oq::Client::Ticket>> txns_in_flight;
  // op_seq and OPN: the OPN sent with a transaction never passes an open op (whichever
  // structure's: several may keep ops open across calls — stack/queue annulment, multi-version
  // publishing), nor an earlier session's op log still to be replayed (frontend/op_sequence.h).
  OpSequence opseq;
  std::map<uint32_t, std::function<Status()>> closers;  // structure id → closes its open ops
  // Before an op log of structure `id`: every other structure closes its open ops, so the ops
  // whose effects a transaction carries are always exactly those up to its OPN (a group of ops a
  // structure closes together never interleaves with another structure's).
  Status CloseOthers(uint32_t id);

  bool replaying = false;
  uint64_t replay_seq = 0;
  Status broken = Status::Ok();  // sticky: a transaction's outcome is unknown
  // The connection to the back-end broke in the middle of an operation: the next call reconnects
  // first (Session::Reconnect). `lost_cause` is the error that showed it.
  bool lost = false;
  Status lost_cause = Status::Ok();

  // The current operation and the batch.
  // A buffered write of the current operation. op_seq != 0: its bytes are those of that op log's
  // payload at op_offset, and it is sent as a pointer entry (MemLogFromOp).
  struct CurWrite {
    uint64_t addr;
    std::vector<uint8_t> data;
    uint64_t op_seq = 0;
    uint32_t op_offset = 0;
  };
  std::vector<CurWrite> cur;
  size_t cur_bytes = 0;
  backend::TxnBuilder batch;
  std::set<std::pair<uint64_t, uint32_t>> batch_keys;
  uint32_t batch_ops = 0;
  uint64_t batch_seq_addr = 0;
  Clock::time_point batch_start;

  // Writes not yet known applied, for read-your-writes: addr → (order, txn (0 = unsent), bytes).
  struct Pending {
    uint64_t order;
    uint64_t txn;
    std::vector<uint8_t> data;
  };
  std::multimap<uint64_t, Pending> overlay;
  // The overlay entries not yet in a sent transaction (txn == 0), in order: SendTxn stamps them
  // from the front instead of walking the whole overlay per transaction (the walk was
  // ~11 % of a front-end's CPU). Unsent entries are never erased, so the iterators stay valid.
  std::deque<std::multimap<uint64_t, Pending>::iterator> unsent;
  uint64_t overlay_order = 0, overlay_size = 0, overlay_max_len = 0, batch_last_order = 0;

  bool bypass_cache = false;
  // Seqlock snapshots (ReadConsistent at rc/rcb; doc/frontend.md §Reader snapshots): per sequence
  // word, the raw bytes of the reads of bodies that completed with the word unchanged, valid while
  // the word still holds `seq` (every transaction bracketing it changes it; it never repeats).
  struct Snapshot {
    uint64_t seq = 1;                                                     // odd: nothing valid
    std::map<std::pair<uint64_t, uint32_t>, std::vector<uint8_t>> reads;  // (addr, len) → bytes
    uint64_t bytes = 0;
  };
  std::unordered_map<uint64_t, Snapshot> snapshots;
  uint64_t snapshot_bytes = 0;  // over all snapshots; bounded by SessionOptions::cache_bytes
  Snapshot* snap = nullptr;     // inside a ReadConsistent body: the word's snapshot
  bool snap_fresh = false;      // snap->seq equals the word read before the body
  bool snap_missed = false;     // the body read something the snapshot did not hold
  void DropSnapshot(Snapshot& sn) {
    snapshot_bytes -= sn.bytes;
    sn.reads.clear();
    sn.bytes = 0;
    sn.seq = 1;
  }
  // A data-area read inside a ReadConsistent body: from the snapshot when it is fresh and holds
  // exactly this range, else remote (and kept for the snapshot).
  Status SnapshotRead(uint64_t addr, std::span<uint8_t> out);
  bool group_writes = false;  // naive: MemLogs buffered until TxWrite (SetGroupWrites)
  uint64_t next_wr_id = 1;
  std::set<uint64_t> held_locks;
  std::unordered_map<uint32_t, Structure> structures;
  std::unordered_map<uint32_t, ReplayFn> replay;
  AdoptFn adopter;
  bool adopting = false;  // inside AdoptDeadWriter (no nested take-over)
  // Session::SetReconnectHook: structures drop their DRAM state before a reconnect's replay.
  std::function<Status()> reconnect_hook;
  // Session::SetReadObserver: every range Read / ReadRemote / ReadWord is asked for.
  std::function<void(uint64_t addr, uint64_t len)> read_observer;
  Counters c;

  // ---- RPC ----
  Result<std::vector<uint8_t>> Call(uint16_t type, std::span<const uint8_t> payload);

  // ---- one-sided ----
  Result<fabric::RegionDescriptor> Target(uint64_t off, uint64_t len) const;

  // Posts `wrs` (the last one signaled) and waits for its completion.
  Status PostWait(std::vector<fabric::WorkRequest>& wrs);

  Status RemoteReadRaw(uint64_t addr, std::span<uint8_t> out);
  // The same, not counted in remote_reads (the ownership journal's reads: not the application's).
  Status RemoteReadUncounted(uint64_t addr, std::span<uint8_t> out);
  // One-sided WRITE + FLUSH: durable on return (the ownership journal's writes).
  Status RemoteWriteDurable(uint64_t addr, std::span<const uint8_t> data);

  // Applies this session's writes that may not be applied yet, in the order they were made.
  void Patch(uint64_t addr, std::span<uint8_t> out);

  // True when `addr` lies in one of this session's slabs or large extents (error path only).
  bool OwnsMemoryAt(uint64_t addr) const;

  Status RemoteRead(uint64_t addr, std::span<uint8_t> out);

  Result<uint64_t> Cas(uint64_t addr, uint64_t expected, uint64_t desired);

  // A holder whose lease may have lapsed must not acknowledge anything more: another process may
  // have claimed the id and replayed its op logs already (doc/frontend.md §Fencing). Sticky.
  Status CheckFenced();

  // ---- logs ----
  Result<uint64_t> SendOpLog(uint32_t structure, uint16_t type, std::span<const uint8_t> params);

  std::string LogTarget() const;

  // Async op logs: posts the append without waiting for its acknowledgement (the symmetric
  // baseline's "flushed asynchronously"). Waits only while the send queue is full.
  Status PostOpLog(const rowan::EntryMeta& meta, std::span<const uint8_t> bytes);

  // Async op logs: takes the acknowledgements that have arrived (never blocks), or, with `wait`,
  // waits until at most `keep` op logs are unacknowledged. A failed completion or no progress
  // within o.timeout breaks the session: the op logs not acknowledged may never have landed.
  Status CollectLogAcks(bool wait, size_t keep);

  // Buffers a memory log of the current operation (op_seq != 0: sent as a pointer into that op
  // log at op_offset). kResourceExhausted past the largest transaction.
  Status BufferWrite(uint64_t addr, std::span<const uint8_t> data, uint64_t op_seq,
                     uint32_t op_offset);
  Status SendTxn(backend::TxnBuilder* b, uint64_t seq_addr, uint64_t opn);
  // Awaits posted transactions until at most `keep` are in flight; an error makes the session
  // broken (the transaction's outcome is unknown).
  Status ReapTxns(size_t keep);

  Status FlushBatch();

  Status ReadRecord(uint64_t* lpn, uint64_t* opn, uint64_t* rejected, uint64_t* aux);

  Status Fence();

  void AddOverlay(uint64_t addr, std::span<const uint8_t> data, uint64_t txn);

  Status CheckData(uint64_t addr, size_t len) const;

  Status MaybeTimer();

  uint32_t PageSize(uint32_t ps) const { return ps == 0 ? o.page_size : ps; }
};

template <class F>
auto Session::Guarded(bool retry, F&& f) -> decltype(f()) {
  // Nested calls (a structure's body inside ReadConsistent, replay functions, public methods
  // calling each other) run plainly: only the outermost call may replace impl_.
  if (guard_depth_ > 0) {
    auto r = f();
    if (!r.ok() && IsConnectionLoss(StatusOf(r)) && impl_->identity) {
      impl_->lost = true;
      impl_->lost_cause = StatusOf(r);
    }
    return r;
  }
  struct Depth {
    int& d;
    explicit Depth(int& x) : d(x) { d++; }
    ~Depth() { d--; }
  };
  if (impl_->identity) {
    Status fenced = impl_->CheckFenced();
    if (fenced.code() == StatusCode::kFailedPrecondition &&
        fenced.subcode() == StatusSubCode::kFenced) {
      return fenced;
    }
  }
  if (!impl_->lost && impl_->group_watch && impl_->group_watch->moves() != 0) {
    // The group's primary moved since we connected (group_watch.h): the connection may lead to a
    // replica that no longer serves. Reconnect through the registration first.
    impl_->lost = true;
    impl_->lost_cause = Status::ConnectionError(impl_->group_watch->path() +
                                                " changed since this session connected (a "
                                                "failover)");
    impl_->broken = impl_->lost_cause;  // nothing more is sent on the old connection
    if (!impl_->cur.empty() || !impl_->opseq.empty()) {
      // An operation is in progress on the old connection: its caller must learn that (as when
      // the connection breaks under it); the next call reconnects.
      return impl_->lost_cause.WithContext(
          "the group's primary moved during an operation; its outcome is unknown and this "
          "Session reconnects at its next call");
    }
  }
  if (impl_->lost) {
    Status s = Reconnect(impl_->lost_cause);
    if (!s.ok()) return s;
  }
  const bool can_reconnect = impl_->identity != nullptr && impl_->o.reconnect_deadline.count() > 0;
  auto r = [&] {
    Depth depth(guard_depth_);
    return f();
  }();
  if (r.ok() && impl_->group_watch && impl_->group_watch->moves() != 0) {
    // Not trusted: the call may have been served by a primary that was replaced meanwhile.
    r = Status::ConnectionError(impl_->group_watch->path() +
                                " changed during the call (a failover); its result is not used");
  }
  if (r.ok() || !IsConnectionLoss(StatusOf(r)) || !can_reconnect) return r;
  Impl& m = *impl_;
  const Status cause = StatusOf(r);
  m.lost = true;
  m.lost_cause = cause;
  m.broken = cause;  // the destructor must not fence a dead connection
  // Retry only calls that are safe to repeat, and only when no operation was in progress (an
  // interrupted operation's op log, if acknowledged, is replayed by the reconnection; the caller
  // learns of the interruption from this error).
  if (!retry || !m.cur.empty() || !m.opseq.empty()) {
    return cause.WithContext(
        "the connection to the back-end broke; this Session reconnects at its next call (the "
        "outcome of this call is unknown)");
  }
  Status s = Reconnect(cause);
  if (!s.ok()) return s;
  Depth depth(guard_depth_);
  return f();
}

}  // namespace asymnvm::frontend
