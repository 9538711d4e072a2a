// The front-end Session (include/asymnvm/frontend.h; design in doc/frontend.md).
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
#include "frontend/identity.h"
#include "frontend/page_cache.h"
#include "frontend/rpc_slab_source.h"

namespace asymnvm::frontend {

namespace {

constexpr uint16_t kOpLogEntryType = 1;  // Rowan entry type of an op log (doc/backend.md)
constexpr size_t kScratchBytes = 1 << 20;
using Clock = std::chrono::steady_clock;

size_t EntryFootprint(size_t len) { return backend::kTxnEntryHeaderSize + (len + 7) / 8 * 8; }

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

Result<Structure> DecodeEntry(std::span<const uint8_t> bytes) {
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

}  // namespace

const char* LevelName(Level level) {
  switch (level) {
    case Level::kNaive: return "naive";
    case Level::kR: return "r";
    case Level::kRc: return "rc";
    case Level::kRcb: return "rcb";
  }
  return "?";
}

Result<Level> ParseLevel(const std::string& name) {
  for (Level l : {Level::kNaive, Level::kR, Level::kRc, Level::kRcb}) {
    if (name == LevelName(l)) return l;
  }
  return Status::InvalidArgument("unknown optimization level '" + name +
                                 "' (naive, r, rc or rcb)");
}

struct Session::Impl {
  std::shared_ptr<FrontendIdentity> identity;  // first: the lease outlives everything else
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
  std::unique_ptr<RpcSlabSource> slabs;
  std::unique_ptr<alloc::FrontendAllocator> allocator;
  std::unique_ptr<PageCache> cache;

  // Registration.
  uint64_t lpn_addr = 0;  // fe record words: LPN, OPN, rejected, aux (8 bytes apart)
  uint64_t naming_begin = 0, naming_end = 0, data_begin = 0, data_end = 0;
  fabric::RegionDescriptor naming_desc, data_desc;
  uint32_t block_size = 0;
  uint32_t incarnation = 0;  // of this registration; in every txn header (doc/backend.md §Fencing)
  std::array<uint8_t, 16> pool_uuid{};
  uint64_t registered_opn = 0;
  // Ops this connection already re-executed (Replay): a second Replay before their transactions
  // are covered by the OPN must not run them again (it would re-apply an old write set over
  // newer transactions of other front-ends).
  uint64_t replayed_upto = 0;
  uint64_t first_op = 1;  // the first op_seq of this session (earlier ones belong to crashed ones)
  // The back-end held op logs of this id past the registered OPN (an earlier session's
  // acknowledged operations, not applied yet) and this connection has not replayed them: the OPN
  // stays at registered_opn — an OPN past them would tell the back-end they are applied, and it
  // would recycle them (a lock-ahead op logged by a structure opened before Replay did exactly
  // that: doc/frontend.md "Replay before the OPN moves") — and no writer lock is released.
  bool replay_pending = false;
  // While the ops to replay are not in open_ops yet (before ReplayWith fetched them): the OPN
  // does not pass this.
  uint64_t opn_cap = UINT64_MAX;
  uint64_t first_txn = 0;  // first txn_seq of this session
  size_t max_txn = 0;      // largest transaction (bytes) the back-end accepts
  size_t batch_limit = 0;
  uint32_t max_message = 0;

  // Sequence state.
  uint64_t next_txn = 1, last_sent = 0, known_lpn = 0;
  uint64_t next_op = 1, pending_opn = 0, sent_opn = 0;
  // Op logs whose memory logs are not in a transaction yet (op_seq → structure id), and the
  // highest op_seq logged. The OPN sent with a transaction never passes an open op, whichever
  // structure it belongs to (several structures may keep ops open across calls: stack/queue
  // annulment, multi-version publishing), nor an op still to be replayed.
  std::map<uint64_t, uint32_t> open_ops;
  uint64_t max_logged = 0;
  std::map<uint32_t, std::function<Status()>> closers;  // structure id → closes its open ops
  void AdvanceOpn() {
    const uint64_t c =
        std::min(opn_cap, open_ops.empty() ? max_logged : open_ops.begin()->first - 1);
    pending_opn = std::max(pending_opn, c);
  }
  // Before an op log of structure `id`: every other structure closes its open ops, so the ops
  // whose effects a transaction carries are always exactly those up to its OPN (a group of ops a
  // structure closes together never interleaves with another structure's).
  Status CloseOthers(uint32_t id) {
    if (open_ops.empty()) return Status::Ok();
    std::vector<uint32_t> others;
    for (const auto& [seq, sid] : open_ops) {
      if (sid != id && std::find(others.begin(), others.end(), sid) == others.end()) others.push_back(sid);
    }
    for (uint32_t sid : others) {
      auto it = closers.find(sid);
      if (it == closers.end()) {
        return Status::FailedPrecondition("op log while structure " + std::to_string(sid) +
                                          " has an operation in progress (no closer registered)");
      }
      ASYMNVM_RETURN_IF_ERROR(it->second());
      for (const auto& [seq, sid2] : open_ops) {
        if (sid2 == sid) {
          return Status::Internal("structure " + std::to_string(sid) + "'s closer left op " +
                                  std::to_string(seq) + " open");
        }
      }
    }
    return Status::Ok();
  }

  // The ops of structure `id` up to `upto` now have their memory logs in the batch.
  void CloseOps(uint32_t id, uint64_t upto) {
    for (auto it = open_ops.begin(); it != open_ops.end() && it->first <= upto;) {
      it = it->second == id ? open_ops.erase(it) : std::next(it);
    }
    AdvanceOpn();
  }
  bool replaying = false;
  uint64_t replay_seq = 0;
  Status broken = Status::Ok();  // sticky: a transaction's outcome is unknown
  // The connection to the back-end broke in the middle of an operation: the next call reconnects
  // first (Session::Reconnect). `lost_cause` is the error that showed it.
  bool lost = false;
  Status lost_cause = Status::Ok();

  // The current operation and the batch.
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> cur;
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
  // from the front instead of walking the whole overlay per transaction (issue 12: the walk was
  // ~11 % of a front-end's CPU). Unsent entries are never erased, so the iterators stay valid.
  std::deque<std::multimap<uint64_t, Pending>::iterator> unsent;
  uint64_t overlay_order = 0, overlay_size = 0, overlay_max_len = 0, batch_last_order = 0;

  bool bypass_cache = false;
  // Seqlock snapshots (ReadConsistent at rc/rcb; doc/frontend.md §Reader snapshots): per sequence
  // word, the raw bytes of the reads of bodies that completed with the word unchanged, valid while
  // the word still holds `seq` (every transaction bracketing it changes it; it never repeats).
  struct Snapshot {
    uint64_t seq = 1;  // odd: nothing valid
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
  Status SnapshotRead(uint64_t addr, std::span<uint8_t> out) {
    const auto key = std::make_pair(addr, static_cast<uint32_t>(out.size()));
    if (snap_fresh) {
      auto it = snap->reads.find(key);
      if (it != snap->reads.end()) {
        std::memcpy(out.data(), it->second.data(), out.size());
        Patch(addr, out);
        c.cache_hits++;
        return Status::Ok();
      }
    }
    snap_missed = true;
    ASYMNVM_RETURN_IF_ERROR(RemoteReadRaw(addr, out));
    if (snapshot_bytes + out.size() <= o.cache_bytes && snap->reads.find(key) == snap->reads.end()) {
      snap->reads.emplace(key, std::vector<uint8_t>(out.begin(), out.end()));
      snap->bytes += out.size();
      snapshot_bytes += out.size();
    }
    Patch(addr, out);
    return Status::Ok();
  }
  bool group_writes = false;  // naive: MemLogs buffered until TxWrite (SetGroupWrites)
  uint64_t next_wr_id = 1;
  std::set<uint64_t> held_locks;
  std::unordered_map<uint32_t, Structure> structures;
  std::unordered_map<uint32_t, ReplayFn> replay;
  AdoptFn adopter;
  bool adopting = false;  // inside AdoptDeadWriter (no nested take-over)
  // Session::SetReconnectHook: structures drop their DRAM state before a reconnect's replay.
  std::function<Status()> reconnect_hook;
  Counters c;

  // ---- RPC ----
  Result<std::vector<uint8_t>> Call(uint16_t type, std::span<const uint8_t> payload) {
    std::vector<uint8_t> response;
    ASYMNVM_RETURN_IF_ERROR(oq->Call(0, type, payload, &response));
    return response;
  }

  // ---- one-sided ----
  Result<fabric::RegionDescriptor> Target(uint64_t off, uint64_t len) const {
    if (off >= data_begin && off <= data_end && len <= data_end - off) {
      fabric::RegionDescriptor d = data_desc;
      d.addr += off - data_begin;
      return d;
    }
    if (off >= naming_begin && off <= naming_end && len <= naming_end - off) {
      fabric::RegionDescriptor d = naming_desc;
      d.addr += off - naming_begin;
      return d;
    }
    return Status::InvalidArgument("pool range [" + std::to_string(off) + ", +" +
                                   std::to_string(len) +
                                   ") is outside the naming and data areas");
  }

  // Posts `wrs` (the last one signaled) and waits for its completion.
  Status PostWait(std::vector<fabric::WorkRequest>& wrs) {
    const uint64_t id = next_wr_id++;
    for (auto& w : wrs) {
      w.wr_id = id;
      w.signaled = false;
    }
    wrs.back().signaled = true;
    ASYMNVM_RETURN_IF_ERROR(conn->Post(wrs));
    const auto deadline = Clock::now() + o.timeout;
    fabric::Completion comp[8];
    while (true) {
      ASYMNVM_ASSIGN_OR_RETURN(size_t n, cq->Wait(comp, std::chrono::milliseconds(100)));
      for (size_t i = 0; i < n; i++) {
        if (comp[i].status != fabric::CompletionStatus::kSuccess) {
          return Status::ConnectionError(std::string("one-sided ") +
                                         fabric::OpcodeName(comp[i].opcode) + " failed: " +
                                         fabric::CompletionStatusName(comp[i].status));
        }
        if (comp[i].wr_id == id) return Status::Ok();
      }
      if (Clock::now() > deadline) return Status::TimedOut("one-sided operation timed out");
    }
  }

  Status RemoteReadRaw(uint64_t addr, std::span<uint8_t> out) {
    const size_t chunk = std::min<size_t>(kScratchBytes, max_message);
    for (size_t done = 0; done < out.size();) {
      const size_t n = std::min(chunk, out.size() - done);
      ASYMNVM_ASSIGN_OR_RETURN(auto t, Target(addr + done, n));
      std::vector<fabric::WorkRequest> wrs(1);
      wrs[0].opcode = fabric::Opcode::kRead;
      wrs[0].local_addr = scratch.data();
      wrs[0].length = static_cast<uint32_t>(n);
      wrs[0].local_mr = scratch_mr.get();
      wrs[0].remote_addr = t.addr;
      wrs[0].rkey = t.rkey;
      ASYMNVM_RETURN_IF_ERROR(PostWait(wrs));
      std::memcpy(out.data() + done, scratch.data(), n);
      done += n;
    }
    c.remote_reads++;
    c.remote_read_bytes += out.size();
    return Status::Ok();
  }

  // Applies this session's writes that may not be applied yet, in the order they were made.
  void Patch(uint64_t addr, std::span<uint8_t> out) {
    if (overlay.empty() || out.empty()) return;
    const uint64_t end = addr + out.size();
    const uint64_t from = addr > overlay_max_len ? addr - overlay_max_len : 0;
    std::vector<const std::pair<const uint64_t, Pending>*> hits;
    for (auto it = overlay.lower_bound(from); it != overlay.end() && it->first < end; ++it) {
      if (it->first + it->second.data.size() > addr) hits.push_back(&*it);
    }
    std::sort(hits.begin(), hits.end(),
              [](auto* a, auto* b) { return a->second.order < b->second.order; });
    for (auto* h : hits) {
      const uint64_t lo = std::max(addr, h->first);
      const uint64_t hi = std::min(end, h->first + h->second.data.size());
      std::memcpy(out.data() + (lo - addr), h->second.data.data() + (lo - h->first), hi - lo);
    }
  }

  // True when `addr` lies in one of this session's slabs or large extents (error path only).
  bool OwnsMemoryAt(uint64_t addr) const {
    const uint64_t ss = allocator->slab_size();
    for (uint64_t slab : allocator->Slabs()) {
      if (addr >= slab && addr < slab + ss) return true;
    }
    for (const auto& o : allocator->LargeObjects()) {
      if (addr >= o.addr && addr < o.addr + o.bytes) return true;
    }
    return false;
  }

  Status RemoteRead(uint64_t addr, std::span<uint8_t> out) {
    // Inside a ReadConsistent body: a read not served by the snapshot (naming area, ReadRemote,
    // ReadWord) is fresh, so the body is not "all from the snapshot" — the word is read again.
    if (snap != nullptr) snap_missed = true;
    ASYMNVM_RETURN_IF_ERROR(RemoteReadRaw(addr, out));
    Patch(addr, out);
    return Status::Ok();
  }

  Result<uint64_t> Cas(uint64_t addr, uint64_t expected, uint64_t desired) {
    ASYMNVM_ASSIGN_OR_RETURN(auto t, Target(addr, 8));
    std::vector<fabric::WorkRequest> wrs(2);
    wrs[0].opcode = fabric::Opcode::kCompareSwap;
    wrs[0].local_addr = scratch.data();
    wrs[0].length = 8;
    wrs[0].local_mr = scratch_mr.get();
    wrs[0].remote_addr = t.addr;
    wrs[0].rkey = t.rkey;
    wrs[0].compare_add = expected;
    wrs[0].swap = desired;
    wrs[1].opcode = fabric::Opcode::kFlush;  // the swapped word is durable before we go on
    wrs[1].remote_addr = t.addr;
    wrs[1].rkey = t.rkey;
    ASYMNVM_RETURN_IF_ERROR(PostWait(wrs));
    uint64_t old;
    std::memcpy(&old, scratch.data(), 8);
    return old;
  }

  // A holder whose lease may have lapsed must not acknowledge anything more: another process may
  // have claimed the id and replayed its op logs already (doc/frontend.md §Fencing). Sticky.
  Status CheckFenced() {
    ASYMNVM_RETURN_IF_ERROR(broken);
    if (!identity) return Status::Ok();
    Status s = identity->CheckLease();
    if (!s.ok()) broken = s.WithContext("front-end " + std::to_string(o.frontend_id));
    return broken;
  }

  // ---- logs ----
  Result<uint64_t> SendOpLog(uint32_t structure, uint16_t type, std::span<const uint8_t> params) {
    backend::OpLogRecord rec;
    rec.frontend_id = o.frontend_id;
    rec.op_seq = next_op;
    rec.structure_id = structure;
    rec.op_type = type;
    rec.payload = params;
    const std::vector<uint8_t> bytes = backend::EncodeOpLog(rec);
    rowan::EntryMeta meta{kOpLogEntryType, static_cast<uint16_t>(o.frontend_id), next_op};
    if (log_cq) {
      ASYMNVM_RETURN_IF_ERROR(PostOpLog(meta, bytes));
    } else {
      ASYMNVM_RETURN_IF_ERROR(sender->Append(meta, bytes).WithContext("op log"));
    }
    c.op_logs++;
    c.op_log_bytes += bytes.size();
    return next_op++;
  }

  std::string LogTarget() const {
    return o.op_log_address.empty() ? "the data back-end" : o.op_log_address;
  }

  // Async op logs: posts the append without waiting for its acknowledgement (the symmetric
  // baseline's "flushed asynchronously"). Waits only while the send queue is full.
  Status PostOpLog(const rowan::EntryMeta& meta, std::span<const uint8_t> bytes) {
    ASYMNVM_RETURN_IF_ERROR(broken);
    ASYMNVM_RETURN_IF_ERROR(CollectLogAcks(false, 0));
    while (true) {
      Status s = sender->PostAppend(meta, bytes, meta.version);
      if (s.ok()) break;
      if (s.code() == StatusCode::kInvalidArgument) return s.WithContext("async op log");
      if (s.code() != StatusCode::kResourceExhausted || log_inflight.empty()) {
        broken = s.WithContext("async op log to " + LogTarget() +
                               " (op logs not acknowledged may be lost)");
        return broken;
      }
      ASYMNVM_RETURN_IF_ERROR(CollectLogAcks(true, log_inflight.size() - 1));
    }
    log_inflight.push_back(meta.version);
    return Status::Ok();
  }

  // Async op logs: takes the acknowledgements that have arrived (never blocks), or, with `wait`,
  // waits until at most `keep` op logs are unacknowledged. A failed completion or no progress
  // within o.timeout breaks the session: the op logs not acknowledged may never have landed.
  Status CollectLogAcks(bool wait, size_t keep) {
    if (!log_cq) return Status::Ok();
    ASYMNVM_RETURN_IF_ERROR(broken);
    const std::string target = LogTarget();
    auto deadline = Clock::now() + o.timeout;
    fabric::Completion comp[32];
    while (true) {
      const bool need = wait && log_inflight.size() > keep;
      Result<size_t> n = need ? log_cq->Wait(comp, std::chrono::milliseconds(100))
                              : log_cq->Poll(comp);
      if (!n.ok()) {
        broken = n.status().WithContext("async op log acknowledgements from " + target);
        return broken;
      }
      for (size_t i = 0; i < *n; i++) {
        if (comp[i].status != fabric::CompletionStatus::kSuccess) {
          broken = Status::ConnectionError(
              std::string("async op log to ") + target + ": " +
              fabric::OpcodeName(comp[i].opcode) + " " +
              fabric::CompletionStatusName(comp[i].status) + " (" +
              std::to_string(log_inflight.size()) + " op logs not acknowledged may be lost)");
          return broken;
        }
        if (!sender->IsAck(comp[i], comp[i].wr_id)) continue;
        auto it = std::find(log_inflight.begin(), log_inflight.end(), comp[i].wr_id);
        if (it != log_inflight.end()) log_inflight.erase(it);
        deadline = Clock::now() + o.timeout;  // progress
      }
      if (!need) {
        if (*n < std::size(comp)) return Status::Ok();
        continue;
      }
      if (log_inflight.size() <= keep) return Status::Ok();
      if (Clock::now() > deadline) {
        broken = Status::TimedOut("async op log to " + target + ": " +
                                  std::to_string(log_inflight.size()) +
                                  " op logs not acknowledged within the timeout");
        return broken;
      }
    }
  }

  Status SendTxn(backend::TxnBuilder* b, uint64_t seq_addr, uint64_t opn) {
    ASYMNVM_RETURN_IF_ERROR(broken);
    const uint64_t seq = next_txn;
    opn = std::max(opn, sent_opn);
    std::vector<uint8_t> bytes =
        b->Finish(o.frontend_id | uint64_t{incarnation} << 32, seq, opn, seq_addr);
    Status s = oq->Submit(0, backend::kTxn, bytes);
    if (!s.ok()) {
      // The transaction may or may not have landed: later txn_seqs cannot be chosen safely.
      broken = s.WithContext("transaction " + std::to_string(seq) + " outcome unknown");
      return broken;
    }
    next_txn++;
    last_sent = seq;
    sent_opn = opn;
    c.txns++;
    c.txn_bytes += bytes.size();
    while (!unsent.empty() && unsent.front()->second.order <= batch_last_order) {
      unsent.front()->second.txn = seq;
      unsent.pop_front();
    }
    return Status::Ok();
  }

  Status FlushBatch() {
    if (batch.empty() && pending_opn <= sent_opn) return Status::Ok();
    Status s = SendTxn(&batch, batch_seq_addr, pending_opn);
    batch.Clear();
    batch_keys.clear();
    batch_ops = 0;
    batch_seq_addr = 0;
    return s;
  }

  Status ReadRecord(uint64_t* lpn, uint64_t* opn, uint64_t* rejected, uint64_t* aux) {
    uint8_t w[32];
    ASYMNVM_RETURN_IF_ERROR(RemoteReadRaw(lpn_addr, w));
    c.remote_reads--;  // bookkeeping reads are counted as fence polls, not data reads
    c.remote_read_bytes -= sizeof(w);
    *lpn = GetLe64(w);
    *opn = GetLe64(w + 8);
    *rejected = GetLe64(w + 16);
    *aux = GetLe64(w + 24);
    return Status::Ok();
  }

  Status Fence() {
    ASYMNVM_RETURN_IF_ERROR(CollectLogAcks(true, 0));
    ASYMNVM_RETURN_IF_ERROR(FlushBatch());
    c.fences++;
    const auto deadline = Clock::now() + o.timeout;
    Backoff backoff;
    while (true) {
      uint64_t lpn, opn, rejected, aux;
      ASYMNVM_RETURN_IF_ERROR(ReadRecord(&lpn, &opn, &rejected, &aux));
      c.fence_polls++;
      if (incarnation != 0 && (aux >> 32) != incarnation) {
        // The id was registered again (a take-over, or a second process given the same id): the
        // back-end refuses this session's transactions, and the record is the newcomer's.
        broken = Status::FailedPrecondition(
            "fenced: front-end id " + std::to_string(o.frontend_id) + " was registered again " +
            "(incarnation " + std::to_string(aux >> 32) + ", this session's " +
            std::to_string(incarnation) + "); its transactions since are refused");
        return broken;
      }
      if (rejected != 0 && rejected >= first_txn) {
        return Status::Aborted("the back-end rejected transaction " + std::to_string(rejected) +
                               " of front-end " + std::to_string(o.frontend_id));
      }
      known_lpn = std::max(known_lpn, lpn);
      if (lpn >= last_sent) break;
      if (Clock::now() > deadline) {
        return Status::TimedOut("fence: back-end applied up to " + std::to_string(lpn) +
                                ", waiting for " + std::to_string(last_sent));
      }
      backoff.Wait();
    }
    // Everything sent is applied: drop it from the overlay.
    for (auto it = overlay.begin(); it != overlay.end();) {
      if (it->second.txn != 0 && it->second.txn <= known_lpn) {
        overlay_size -= it->second.data.size();
        it = overlay.erase(it);
      } else {
        ++it;
      }
    }
    if (overlay.empty()) overlay_max_len = 0;
    return CheckFenced();
  }

  void AddOverlay(uint64_t addr, std::span<const uint8_t> data, uint64_t txn) {
    auto it = overlay.emplace(addr, Pending{++overlay_order, txn, {data.begin(), data.end()}});
    if (txn == 0) unsent.push_back(it);
    overlay_size += data.size();
    overlay_max_len = std::max<uint64_t>(overlay_max_len, data.size());
  }

  Status CheckData(uint64_t addr, size_t len) const {
    if (len == 0) return Status::InvalidArgument("memory log of 0 bytes");
    if (addr < data_begin || addr > data_end || len > data_end - addr) {
      return Status::InvalidArgument("memory log [" + std::to_string(addr) + ", +" +
                                     std::to_string(len) + ") is outside the data area [" +
                                     std::to_string(data_begin) + ", " +
                                     std::to_string(data_end) + ")");
    }
    if (EntryFootprint(len) + backend::kTxnHeaderSize + backend::kTxnCommitSize > max_txn) {
      return Status::ResourceExhausted("memory log of " + std::to_string(len) +
                                       " bytes exceeds the largest transaction (" +
                                       std::to_string(max_txn) + " bytes)");
    }
    return Status::Ok();
  }

  Status MaybeTimer() {
    if (o.level == Level::kRcb && batch_ops > 0 && Clock::now() - batch_start >= o.batch_timeout) {
      return FlushBatch();
    }
    return Status::Ok();
  }

  uint32_t PageSize(uint32_t ps) const { return ps == 0 ? o.page_size : ps; }
};

// ---------------------------------------------------------------------------------------------

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

// ---- back-end liveness (doc/frontend.md §Reconnection) ----

namespace {
// Op logs from the back-end's b-log (request kFetchOpLogs), page by page.
class BackendFetcher : public OpLogFetcher {
 public:
  BackendFetcher(oq::Client* client, uint64_t before) : client_(client), before_(before) {}
  Result<std::vector<RecoveredOp>> Fetch(uint64_t frontend_id, uint64_t after) override {
    std::vector<RecoveredOp> all;
    for (bool more = true; more;) {
      backend::PayloadWriter w;
      w.U64(frontend_id).U64(after).U64(before_);
      std::vector<uint8_t> reply;
      ASYMNVM_RETURN_IF_ERROR(client_->Call(0, backend::kFetchOpLogs, w.bytes(), &reply));
      ASYMNVM_ASSIGN_OR_RETURN(auto ops, backend::DecodeFetchedOps(reply, &more));
      if (more && ops.empty()) return Status::ProtocolError("fetch op logs: empty page with more");
      for (auto& op : ops) {
        if (op.op_seq <= after) return Status::ProtocolError("fetch op logs: out of order");
        after = op.op_seq;
        all.push_back({op.op_seq, op.structure_id, op.op_type, std::move(op.payload)});
      }
    }
    return all;
  }

 private:
  oq::Client* client_;
  uint64_t before_;
};
}  // namespace


namespace {
bool IsConnectionLoss(const Status& s) {
  return s.code() == StatusCode::kConnectionError || s.code() == StatusCode::kRnrRetryExceeded;
}
const Status& StatusOf(const Status& s) { return s; }
template <class T>
Status StatusOf(const Result<T>& r) {
  return r.status();
}
// "address A\n..." → A (the registration written by asymnvm-backend, doc/coord.md).
std::string RegisteredAddress(const std::string& data) {
  size_t pos = 0;
  while (pos < data.size()) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    std::string_view line(data.data() + pos, end - pos);
    if (line.starts_with("address ")) return std::string(line.substr(8));
    pos = end + 1;
  }
  return "";
}
}  // namespace

std::string BackendGroupPrimaryPath(const std::array<uint8_t, 16>& pool_uuid) {
  return "/asymnvm/groups/" + pm::UuidToString(pool_uuid) + "/primary";
}

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
    if (!fenced.ok() && fenced.code() == StatusCode::kFailedPrecondition &&
        fenced.message().find("fenced") != std::string::npos) {
      return fenced;
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
  if (r.ok() || !IsConnectionLoss(StatusOf(r)) || !can_reconnect) return r;
  Impl& m = *impl_;
  const Status cause = StatusOf(r);
  m.lost = true;
  m.lost_cause = cause;
  m.broken = cause;  // the destructor must not fence a dead connection
  // Retry only calls that are safe to repeat, and only when no operation was in progress (an
  // interrupted operation's op log, if acknowledged, is replayed by the reconnection; the caller
  // learns of the interruption from this error).
  if (!retry || !m.cur.empty() || !m.open_ops.empty()) {
    return cause.WithContext(
        "the connection to the back-end broke; this Session reconnects at its next call (the "
        "outcome of this call is unknown)");
  }
  Status s = Reconnect(cause);
  if (!s.ok()) return s;
  Depth depth(guard_depth_);
  return f();
}

Status Session::Reconnect(const Status& cause) {
  Impl& old = *impl_;
  if (!old.identity) return cause;
  guard_depth_++;
  struct Undo {
    int& d;
    ~Undo() { d--; }
  } undo{guard_depth_};
  coord::Coordinator& c = old.identity->coordinator();
  const std::string path = BackendGroupPrimaryPath(old.pool_uuid);
  const auto start = coord::Clock::now();
  const auto deadline = start + old.o.reconnect_deadline;
  LOG_WARN("frontend", "front-end " << old.o.frontend_id << ": lost back-end "
                                    << old.o.backends[0] << " (" << cause.ToString()
                                    << "); waiting up to " << old.o.reconnect_deadline.count()
                                    << " ms for pool " << pm::UuidToString(old.pool_uuid)
                                    << " to register at " << path);
  Status last = cause;
  auto pause = std::chrono::milliseconds(20);
  for (;;) {
    int64_t known = coord::Coordinator::kNoNode;
    bool absent = false;
    auto node = c.Get(path);
    if (node.ok()) {
      known = node->version;
      const std::string address = RegisteredAddress(node->data);
      if (address.empty()) {
        last = Status::ProtocolError(path + " holds no address");
      } else {
        SessionOptions so = old.o;
        so.backends = {address};
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - coord::Clock::now());
        so.timeout = std::max(std::chrono::milliseconds(1), std::min(so.timeout, left));
        if (Status lease = old.identity->CheckLease(); !lease.ok()) return lease;
        auto fresh = Connect(so, old.identity->epoch());
        if (fresh.ok() && (*fresh)->pool_uuid != old.pool_uuid) {
          fresh = Status::FailedPrecondition(address + " serves pool " +
                                             pm::UuidToString((*fresh)->pool_uuid) +
                                             ", not " + pm::UuidToString(old.pool_uuid));
        }
        if (fresh.ok()) {
          Impl& n = **fresh;
          // Ops a structure held open in DRAM (stack/queue annulment, multi-version publishing)
          // and ops whose transactions were lost with the old connection (an unsent batch, or
          // sent but not durable on the back-end that answers now) are all past the new OPN: the
          // replay re-executes them in op order, after the structures dropped their DRAM state
          // (the reconnect hook). Carrying open ops over instead let a structure's closer commit
          // them from a DRAM view that still held the lost transactions' effects (a queue lost
          // an element after a promotion; doc/mirror.md).
          n.o.timeout = old.o.timeout;
          n.identity = std::move(old.identity);
          n.structures = std::move(old.structures);
          n.replay = std::move(old.replay);
          n.adopter = std::move(old.adopter);
          n.closers = std::move(old.closers);
          n.reconnect_hook = std::move(old.reconnect_hook);
          n.held_locks = std::move(old.held_locks);  // the lock words name our id; still ours
          n.group_writes = old.group_writes;
          n.bypass_cache = old.bypass_cache;
          n.c.replayed_ops = old.c.replayed_ops;
          std::unique_ptr<Impl> dead = std::move(impl_);
          impl_ = std::move(fresh).value();
          dead.reset();
          reconnects_++;
          LOG_INFO("frontend", "front-end " << impl_->o.frontend_id << ": reconnected to "
                                            << address << " after "
                                            << std::chrono::duration_cast<std::chrono::milliseconds>(
                                                   coord::Clock::now() - start)
                                                   .count()
                                            << " ms; replaying");
          Status r = impl_->reconnect_hook ? impl_->reconnect_hook() : Status::Ok();
          if (r.ok()) {
            BackendFetcher f(impl_->oq.get(), impl_->first_op);
            r = ReplayWith(&f).WithContext("reconnect: replay at " + address);
          } else {
            r = r.WithContext("reconnect: structures re-reading their state at " + address);
          }
          if (!r.ok()) {
            // Not recovered: the next call starts the reconnection over (a new registration,
            // the hook, the whole replay) rather than running on a state missing the replay.
            impl_->lost = true;
            impl_->lost_cause = r;
          }
          return r;
        }
        last = fresh.status().WithContext("reconnect to " + address);
      }
    } else if (node.status().code() == StatusCode::kNotFound) {
      absent = true;
    } else {
      last = node.status();
    }
    const auto now = coord::Clock::now();
    if (now >= deadline) {
      return Status::Unavailable(
          "back-end of pool " + pm::UuidToString(old.pool_uuid) + " (was " + old.o.backends[0] +
          ") did not come back within reconnect_deadline " +
          std::to_string(old.o.reconnect_deadline.count()) + " ms; last: " + last.ToString());
    }
    // Wake on a change of the registration; re-try a registered address with backoff (it may be
    // a dead holder's node that has not vanished yet, or a daemon still starting).
    auto until = std::min(deadline, now + pause);
    if (absent) until = deadline;  // nothing to try until a back-end registers
    auto w = c.WaitForChange(path, known, until);
    if (!w.ok() && w.status().code() != StatusCode::kTimedOut) last = w.status();
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

static bool ValidPageSize(uint32_t ps) {
  return ps >= 64 && ps <= (1u << 20) && (ps & (ps - 1)) == 0;
}

Result<std::unique_ptr<Session>> Session::Open(const SessionOptions& given) {
  SessionOptions options = given;  // frontend_id may come from the coordinator (identity.h)
  if (options.backends.empty()) return Status::InvalidArgument("session: no back-end address");
  if (options.backends.size() > 1) {
    return Status::InvalidArgument(
        "session: one back-end per Session; use frontend::Cluster for several (include/asymnvm/cluster.h)");
  }
  // A shared identity (SessionOptions::identity) is not claimed again; m.o does not keep it.
  std::shared_ptr<FrontendIdentity> shared = std::move(options.identity);
  options.identity.reset();
  if (shared) {
    if (options.frontend_id != 0 && options.frontend_id != shared->id()) {
      return Status::InvalidArgument("session: frontend_id differs from the shared identity's id");
    }
    options.frontend_id = shared->id();
  }
  if ((options.frontend_id == 0 && options.coordinator.empty()) || options.frontend_id > 0xFFFF) {
    return Status::InvalidArgument("session: frontend_id must be in 1..65535");
  }
  if (!ValidPageSize(options.page_size)) {
    return Status::InvalidArgument("session: page_size must be a power of two in 64..1 MiB");
  }
  if (options.batch_ops == 0) return Status::InvalidArgument("session: batch_ops must be > 0");
  std::shared_ptr<FrontendIdentity> identity = std::move(shared);
  if (!identity) {
    ASYMNVM_ASSIGN_OR_RETURN(identity, ClaimSessionIdentity(&options));
  }
  ASYMNVM_ASSIGN_OR_RETURN(auto impl, Connect(options, identity ? identity->epoch() : 0));
  impl->identity = std::move(identity);
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

// Connects to options.backends[0] and registers options.frontend_id (already claimed): the part of
// Open a reconnection repeats (Session::Reconnect).
Result<std::unique_ptr<Session::Impl>> Session::Connect(const SessionOptions& options,
                                                        uint64_t epoch) {
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.o = options;
  const std::string ctx = "session " + options.backends[0];
  ASYMNVM_ASSIGN_OR_RETURN(m.fabric, fabric::Fabric::Open(options.fabric));
  ASYMNVM_ASSIGN_OR_RETURN(m.pd, m.fabric->AllocPd());
  oq::ClientOptions co;
  co.fabric = m.fabric.get();
  co.pd = m.pd.get();
  co.server_address = options.backends[0];
  co.timeout = options.timeout;
  co.client_id = options.frontend_id;
  auto cl = oq::Client::Connect(co);
  if (!cl.ok()) return cl.status().WithContext(ctx);
  m.oq = std::move(cl).value();
  m.max_txn = m.oq->server().max_request - oq::kRequestHeaderSize;
  m.batch_limit = options.batch_bytes == 0 ? m.max_txn
                                           : std::min<size_t>(options.batch_bytes, m.max_txn);

  // Register.
  backend::PayloadWriter w;
  w.U64(options.frontend_id);
  if (epoch != 0) w.U64(epoch);
  auto reply = m.Call(backend::kRegister, w.bytes());
  if (!reply.ok()) return reply.status().WithContext(ctx + ": register");
  ASYMNVM_ASSIGN_OR_RETURN(backend::RegisterReply reg, backend::DecodeRegisterReply(*reply));
  const uint64_t lpn = reg.lpn, opn = reg.opn, rejected = reg.rejected;
  m.lpn_addr = reg.lpn_addr;
  m.naming_begin = reg.naming_begin;
  m.data_begin = reg.data_begin;
  m.data_end = reg.data_end;
  m.block_size = reg.block_size;
  m.incarnation = reg.incarnation;
  m.pool_uuid = reg.pool_uuid;
  m.naming_desc = reg.naming_region;
  m.data_desc = reg.data_region;
  m.naming_end = m.naming_begin + m.naming_desc.length;
  m.known_lpn = lpn;
  m.next_txn = lpn + 1;
  m.first_txn = lpn + 1;
  m.registered_opn = opn;
  m.sent_opn = opn;
  m.pending_opn = opn;
  m.max_logged = opn;
  if (rejected != 0) {
    LOG_WARN("frontend", "front-end " << options.frontend_id
                                      << ": the back-end recorded rejected transaction "
                                      << rejected << " (an earlier session)");
  }

  // Rowan sender for op logs (to the data back-end's b-log, or to op_log_address: the symmetric
  // baseline); a plain connection to the data back-end's listener for one-sided operations.
  rowan::SenderOptions so;
  so.fabric = m.fabric.get();
  so.pd = m.pd.get();
  so.address = options.op_log_address.empty() ? reg.log_address : options.op_log_address;
  so.timeout = options.timeout;
  so.rnr_retry = options.log_rnr_retry;
  if (options.async_op_logs) {
    // PostAppend sends blocks inline; an op log must fit the provider's inline limit.
    ASYMNVM_ASSIGN_OR_RETURN(m.log_cq, m.fabric->CreateCq({.capacity = 1024}));
    so.cq = m.log_cq.get();
    const uint32_t cap = m.fabric->capabilities().max_inline;
    so.max_inline = std::min<uint32_t>(cap == 0 ? so.max_inline : cap,
                                       static_cast<uint32_t>(rowan::kDefaultMtu));
  }
  auto snd = rowan::Sender::Connect(so);
  if (!snd.ok()) {
    return snd.status().WithContext(options.op_log_address.empty()
                                        ? ctx
                                        : "session: op log target " + options.op_log_address);
  }
  m.sender = std::move(snd).value();
  ASYMNVM_ASSIGN_OR_RETURN(m.cq, m.fabric->CreateCq({.capacity = 1024}));
  fabric::ConnectionOptions cop;
  cop.send_cq = m.cq.get();
  cop.recv_cq = m.cq.get();
  cop.timeout = options.timeout;
  auto conn = m.fabric->Connect(m.pd.get(), reg.log_address, cop);
  if (!conn.ok()) return conn.status().WithContext(ctx + ": one-sided connection");
  m.conn = std::move(conn).value();
  m.max_message = m.fabric->capabilities().max_message;
  if (m.max_message == 0) m.max_message = kScratchBytes;
  m.scratch.resize(kScratchBytes);
  ASYMNVM_ASSIGN_OR_RETURN(
      m.scratch_mr, m.pd->RegisterMemory(m.scratch.data(), m.scratch.size(),
                                         {.access = fabric::kLocalWrite, .persister = nullptr}));

  // op_seq continues after everything the back-end has seen (OPN, and aux = highest op_seq).
  uint64_t l2, o2, rej2, aux;
  ASYMNVM_RETURN_IF_ERROR(m.ReadRecord(&l2, &o2, &rej2, &aux));
  m.next_op = std::max(opn, aux) + 1;
  m.first_op = m.next_op;
  if (options.op_log_address.empty()) {
    // Anything of this id's earlier sessions still to replay? (One page of kFetchOpLogs; op logs
    // kept elsewhere, SessionOptions::op_log_address, are the caller's to replay.)
    backend::PayloadWriter fw;
    fw.U64(options.frontend_id).U64(m.registered_opn).U64(m.first_op);
    std::vector<uint8_t> fetched;
    auto probe = m.oq->Call(0, backend::kFetchOpLogs, fw.bytes(), &fetched);
    if (!probe.ok()) return probe.WithContext(ctx + ": op logs to replay");
    bool more = false;
    ASYMNVM_ASSIGN_OR_RETURN(auto pending, backend::DecodeFetchedOps(fetched, &more));
    m.replay_pending = !pending.empty();
    if (m.replay_pending) m.opn_cap = m.registered_opn;
  }

  m.slabs = std::make_unique<RpcSlabSource>(m.oq.get(), m.block_size, m.data_begin, m.data_end);
  alloc::FrontendOptions fo;
  fo.source = m.slabs.get();
  ASYMNVM_ASSIGN_OR_RETURN(m.allocator, alloc::FrontendAllocator::Open(fo));
  if (options.level == Level::kRc || options.level == Level::kRcb) {
    m.cache = std::make_unique<PageCache>(options.cache_bytes, options.seed);
  }
  return impl;
}

Session::~Session() {
  if (!impl_) return;
  Impl& m = *impl_;
  if (m.broken.ok()) {
    Status s = m.Fence();
    if (!s.ok()) LOG_WARN("frontend", "session close: " << s.ToString());
    if (m.replay_pending && !m.held_locks.empty()) {
      LOG_WARN("frontend", "session close: front-end " << m.o.frontend_id << " keeps "
                                                       << m.held_locks.size()
                                                       << " writer lock(s): op logs of an earlier "
                                                          "session were not replayed");
    }
    for (uint64_t lock : m.replay_pending ? std::set<uint64_t>{} : m.held_locks) {
      auto old = m.Cas(lock, m.o.frontend_id, 0);
      if (!old.ok()) LOG_WARN("frontend", "session close: unlock: " << old.status().ToString());
    }
  }
  if (m.allocator) (void)m.allocator->Trim();
  m.allocator.reset();
  m.slabs.reset();
  m.sender.reset();
  m.log_cq.reset();
  m.conn.reset();
  m.scratch_mr.reset();
  m.cq.reset();
  m.oq.reset();
  m.pd.reset();
  m.fabric.reset();
}

// ---- naming ----

Result<Structure> Session::CreateRoot(const std::string& name, uint32_t type,
                                      const std::array<uint64_t, 4>& params, uint32_t page_size) {
  return Guarded(true, [&]() -> Result<Structure> {
    Impl& m = *impl_;
    if (name.empty() || name.size() > 63) {
      return Status::InvalidArgument("root name must be 1..63 bytes");
    }
    if (type == 0 || type == backend::kFrontendRecordType) {
      return Status::InvalidArgument("root type must be non-zero and not 0xFE");
    }
    if (page_size != 0 && !ValidPageSize(page_size)) {
      return Status::InvalidArgument("page_size must be a power of two in 64..1 MiB");
    }
    ASYMNVM_ASSIGN_OR_RETURN(
        auto reply, m.Call(backend::kNamingCreate, backend::EncodeNamingCreate(name, type, params)));
    ASYMNVM_ASSIGN_OR_RETURN(Structure s, DecodeEntry(reply));
    s.page_size = page_size;
    m.structures[s.id] = s;
    return s;
  });
}

Result<Structure> Session::OpenRoot(const std::string& name) {
  return Guarded(true, [&]() -> Result<Structure> {
    Impl& m = *impl_;
    std::vector<uint8_t> n(name.begin(), name.end());
    ASYMNVM_ASSIGN_OR_RETURN(auto reply, m.Call(backend::kNamingLookup, n));
    ASYMNVM_ASSIGN_OR_RETURN(Structure s, DecodeEntry(reply));
    if (auto it = m.structures.find(s.id); it != m.structures.end()) {
      s.page_size = it->second.page_size;
    }
    m.structures[s.id] = s;
    return s;
  });
}

Status Session::RemoveRoot(const std::string& name) {
  return Guarded(false, [&]() -> Status {
    std::vector<uint8_t> n(name.begin(), name.end());
    return impl_->Call(backend::kNamingRemove, n).status();
  });
}

// ---- reads ----

Status Session::Read(uint64_t addr, std::span<uint8_t> out, uint32_t page_size) {
  return Guarded(true, [&]() -> Status {
    Impl& m = *impl_;
    ASYMNVM_RETURN_IF_ERROR(m.MaybeTimer());
    ASYMNVM_RETURN_IF_ERROR(m.Target(addr, out.size()).status());
    const bool data = addr >= m.data_begin && addr < m.data_end;
    if (m.snap != nullptr && data && out.size() <= m.data_end - addr) return m.SnapshotRead(addr, out);
    if (!m.cache || m.bypass_cache || !data) return m.RemoteRead(addr, out);
    const uint32_t ps = m.PageSize(page_size);
    if (!ValidPageSize(ps)) return Status::InvalidArgument("page_size must be a power of two");
    // Pages are aligned relative to the data area's start.
    uint64_t pos = addr;
    const uint64_t end = addr + out.size();
    while (pos < end) {
      const uint64_t page = m.data_begin + (pos - m.data_begin) / ps * ps;
      const uint64_t page_len = std::min<uint64_t>(ps, m.data_end - page);
      uint8_t* p = m.cache->Lookup(ps, page);
      std::vector<uint8_t> tmp;
      if (p == nullptr) {
        tmp.resize(page_len);
        ASYMNVM_RETURN_IF_ERROR(m.RemoteRead(page, tmp));
        p = m.cache->Insert(ps, page, tmp);
        if (p == nullptr) p = tmp.data();
      }
      const uint64_t n = std::min(end, page + page_len) - pos;
      std::memcpy(out.data() + (pos - addr), p + (pos - page), n);
      pos += n;
    }
    return Status::Ok();
  });
}

Status Session::ReadRemote(uint64_t addr, std::span<uint8_t> out) {
  return Guarded(true, [&]() -> Status {
    Impl& m = *impl_;
    ASYMNVM_RETURN_IF_ERROR(m.MaybeTimer());
    return m.RemoteRead(addr, out);
  });
}

Result<uint64_t> Session::ReadWord(uint64_t addr) {
  return Guarded(true, [&]() -> Result<uint64_t> {
    if (addr % 8 != 0) return Status::InvalidArgument("ReadWord: address not 8-byte aligned");
    uint8_t w[8];
    ASYMNVM_RETURN_IF_ERROR(impl_->RemoteRead(addr, w));
    return GetLe64(w);
  });
}

namespace {
// Errors of a reader body that a concurrent transaction can cause (torn data); transport
// errors are not among them.
bool IsRetryableBodyError(const Status& st) {
  switch (st.code()) {
    case StatusCode::kAborted:
    case StatusCode::kCorruption:
    case StatusCode::kNotFound:
    case StatusCode::kInvalidArgument:
      return true;
    default:
      return false;
  }
}
}  // namespace

Status Session::ReadConsistent(const Structure& s, const std::function<Status()>& body) {
  return Guarded(true, [&]() -> Status {
    Impl& m = *impl_;
    const auto deadline = Clock::now() + m.o.timeout;
    Backoff backoff;
    const bool saved = m.bypass_cache;
    m.bypass_cache = true;
    // Snapshots only where a cache is (rc/rcb), and not for a nested ReadConsistent.
    const bool snapshots = m.cache != nullptr && m.snap == nullptr && m.o.cache_bytes > 0;
    struct Unsnap {
      Impl& m;
      ~Unsnap() { m.snap = nullptr; }
    } unsnap{m};
    Status result = Status::Ok();
    while (true) {
      auto v1 = ReadWord(s.seq_addr);
      if (!v1.ok()) {
        result = v1.status();
        break;
      }
      if (*v1 % 2 == 0) {
        if (snapshots) {
          Impl::Snapshot& sn = m.snapshots[s.seq_addr];
          if (sn.seq != *v1) m.DropSnapshot(sn);  // written since: what it held may be stale
          m.snap = &sn;
          m.snap_fresh = sn.seq == *v1;
          m.snap_missed = false;
        }
        result = body();
        if (m.snap != nullptr) {
          m.snap = nullptr;
          // Every read came from a snapshot taken at this very word value: the body saw the
          // state at the moment the word was read, consistent without a second read.
          if (m.snap_fresh && !m.snap_missed) break;
        }
        auto v2 = ReadWord(s.seq_addr);
        if (!v2.ok()) {
          result = v2.status();
          break;
        }
        if (snapshots) {
          Impl::Snapshot& sn = m.snapshots[s.seq_addr];
          if (*v2 == *v1) {
            sn.seq = *v1;  // what the body read (and kept) is the state at v1
          } else {
            m.DropSnapshot(sn);
          }
        }
        // A body error is final only when the data did not change under it: a torn read may make
        // the body fail (bad pointer, bad magic), and that is a retry, not an error.
        if (*v2 == *v1) break;
        if (!result.ok() && !IsRetryableBodyError(result)) break;
      }
      m.c.reader_retries++;
      if (Clock::now() > deadline) {
        result = Status::TimedOut("reader: sequence word kept changing");
        break;
      }
      backoff.Wait();
    }
    m.bypass_cache = saved;
    return result;
  });
}

Result<uint64_t> Session::CompareSwap(uint64_t addr, uint64_t expected, uint64_t desired) {
  return Guarded(false, [&]() -> Result<uint64_t> {
    Impl& m = *impl_;
    if (addr % 8 != 0) return Status::InvalidArgument("CompareSwap: address not 8-byte aligned");
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t old, m.Cas(addr, expected, desired));
    if (old == expected && m.cache) {
      uint8_t w[8];
      PutLe64(w, desired);
      m.cache->Update(addr, w);
    }
    return old;
  });
}

// ---- writes ----

Status Session::Write(uint64_t addr, std::span<const uint8_t> data, const Structure* s) {
  return Guarded(true, [&]() -> Status {
    Impl& m = *impl_;
    if (!m.cur.empty()) {
      return Status::FailedPrecondition("Write inside an operation (MemLog before TxWrite)");
    }
    ASYMNVM_RETURN_IF_ERROR(m.CheckData(addr, data.size()));
    ASYMNVM_RETURN_IF_ERROR(m.FlushBatch());  // keep transaction order = program order
    backend::TxnBuilder b;
    b.Write(addr, data);
    m.c.mem_logs++;
    m.AddOverlay(addr, data, 0);
    m.batch_last_order = m.overlay_order;
    if (m.cache) m.cache->Update(addr, data);
    ASYMNVM_RETURN_IF_ERROR(m.SendTxn(&b, s ? s->seq_addr : 0, m.pending_opn));
    return m.Fence();
  });
}

Status Session::MemLog(uint64_t addr, std::span<const uint8_t> data) {
  return Guarded(false, [&]() -> Status {
    Impl& m = *impl_;
    if (m.o.level == Level::kNaive && !m.group_writes) return Write(addr, data);
    ASYMNVM_RETURN_IF_ERROR(m.CheckData(addr, data.size()));
    const size_t fp = EntryFootprint(data.size());
    if (m.cur_bytes + fp + backend::kTxnHeaderSize + backend::kTxnCommitSize > m.max_txn) {
      return Status::ResourceExhausted("the operation's memory logs exceed the largest transaction (" +
                                       std::to_string(m.max_txn) + " bytes)");
    }
    m.cur.emplace_back(addr, std::vector<uint8_t>(data.begin(), data.end()));
    m.cur_bytes += fp;
    m.c.mem_logs++;
    m.AddOverlay(addr, data, 0);
    if (m.cache) m.cache->Update(addr, data);
    return Status::Ok();
  });
}

Result<uint64_t> Session::OpLog(const Structure& s, uint16_t op_type,
                                std::span<const uint8_t> params) {
  return Guarded(false, [&]() -> Result<uint64_t> {
    Impl& m = *impl_;
    if (op_type >= 0xFF00) return Status::InvalidArgument("op types 0xFF00.. are reserved");
    if (m.o.level == Level::kNaive) return uint64_t{0};
    if (m.replaying) return m.replay_seq;  // already in open_ops (Replay put it there)
    ASYMNVM_RETURN_IF_ERROR(m.MaybeTimer());
    ASYMNVM_RETURN_IF_ERROR(m.CloseOthers(s.id));
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t seq, m.SendOpLog(s.id, op_type, params));
    m.open_ops[seq] = s.id;
    m.max_logged = std::max(m.max_logged, seq);
    // The op log is durable; it counts as acknowledged only while the lease holds.
    ASYMNVM_RETURN_IF_ERROR(m.CheckFenced().WithContext(
        "op " + std::to_string(seq) + " was logged but is not acknowledged"));
    return seq;
  });
}

Status Session::TxWrite(const Structure& s) { return EndWrites(s, /*close=*/true); }

Status Session::TxWritePart(const Structure& s) { return EndWrites(s, /*close=*/false); }

Status Session::EndWrites(const Structure& s, bool close) {
  return Guarded(false, [&]() -> Status {
    Impl& m = *impl_;
    const bool naive = m.o.level == Level::kNaive;
    if (naive && m.cur.empty()) return Status::Ok();
    ASYMNVM_RETURN_IF_ERROR(m.broken);
    // A batch brackets one sequence word, and has a size limit.
    if (m.batch_ops > 0 &&
        (m.batch_seq_addr != s.seq_addr || m.batch.encoded_size() + m.cur_bytes > m.batch_limit)) {
      ASYMNVM_RETURN_IF_ERROR(m.FlushBatch());
    }
    if (m.batch_ops == 0) m.batch_start = Clock::now();
    for (auto& [addr, data] : m.cur) {
      if (!m.batch_keys.insert({addr, static_cast<uint32_t>(data.size())}).second) m.c.coalesced++;
      m.batch.Write(addr, data);
    }
    m.cur.clear();
    m.cur_bytes = 0;
    m.batch_ops++;
    m.batch_seq_addr = s.seq_addr;
    // A part (TxWritePart) leaves the operation open: the OPN does not pass its op log yet.
    if (close) m.CloseOps(s.id, m.replaying ? m.replay_seq : m.max_logged);
    m.batch_last_order = m.overlay_order;
    const bool send = m.o.level != Level::kRcb || m.batch_ops >= m.o.batch_ops ||
                      m.batch.encoded_size() >= m.batch_limit;
    if (send) ASYMNVM_RETURN_IF_ERROR(m.FlushBatch());
    if (naive || m.overlay_size > m.o.overlay_bytes) return m.Fence();  // naive: grouped writes
    return m.MaybeTimer();
  });
}

Status Session::Flush() {
  return Guarded(true, [&]() -> Status {
    Impl& m = *impl_;
    if (!m.cur.empty()) {
      return Status::FailedPrecondition("Flush inside an operation (MemLog before TxWrite)");
    }
    return m.FlushBatch();
  });
}

Status Session::Fence() {
  return Guarded(true, [&]() -> Status {
    Impl& m = *impl_;
    if (!m.cur.empty()) {
      return Status::FailedPrecondition("Fence inside an operation (MemLog before TxWrite)");
    }
    return m.Fence();
  });
}

void Session::SetGroupWrites(bool on) { impl_->group_writes = on; }

Status Session::Poll() {
  return Guarded(true, [&]() -> Status {
    ASYMNVM_RETURN_IF_ERROR(impl_->CollectLogAcks(false, 0));
    return impl_->MaybeTimer();
  });
}

// ---- allocation ----

Result<uint64_t> Session::Malloc(uint64_t size) {
  return Guarded(false, [&]() -> Result<uint64_t> { return impl_->allocator->Malloc(size); });
}
Status Session::Free(uint64_t addr) {
  return Guarded(false, [&]() -> Status {
    Impl& m = *impl_;
    Status st = m.allocator->Free(addr);
    if (st.code() != StatusCode::kInvalidArgument || addr < m.data_begin || addr >= m.data_end ||
        m.OwnsMemoryAt(addr)) {
      return st;
    }
    // Not this session's: ask the back-end what lives there.
    ASYMNVM_ASSIGN_OR_RETURN(auto ext, m.slabs->ExtentOf(addr));
    const auto [start, bytes] = ext;
    if (bytes == 0) {
      return Status::FailedPrecondition("free of " + std::to_string(addr) +
                                        ": not in any live allocation (double free?)");
    }
    if (bytes > m.block_size) {  // a large extent of an earlier session: the back-end frees it
      if (addr != start) {
        return Status::InvalidArgument("free of " + std::to_string(addr) +
                                       ": points into the middle of a large allocation");
      }
      return m.slabs->Free(addr);
    }
    m.c.orphan_frees++;  // an object in a slab of an earlier session: stays allocated
    return Status::Ok();
  });
}

// ---- concurrency ----

Status Session::WriterLock(const Structure& s) {
  return Guarded(false, [&]() -> Status {
    Impl& m = *impl_;
    if (m.held_locks.count(s.lock_addr)) {
      return Status::FailedPrecondition("writer lock of '" + s.name + "' already held");
    }
    if (m.o.level != Level::kNaive) {
      uint8_t p[8];
      PutLe64(p, s.lock_addr);
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t seq, m.SendOpLog(s.id, kLockAheadOpType, p));
      m.max_logged = std::max(m.max_logged, seq);  // it has no memory logs: covered at once
      m.AdvanceOpn();
    }
    const auto deadline = Clock::now() + m.o.lock_timeout;
    Backoff backoff;
    while (true) {
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t old, m.Cas(s.lock_addr, 0, m.o.frontend_id));
      if (old == 0 || old == m.o.frontend_id) break;
      if (!m.o.coordinator.empty() && m.adopter && !m.adopting) {
        ASYMNVM_ASSIGN_OR_RETURN(bool adopted, AdoptDeadWriter(old, s));
        if (adopted) continue;  // its lock is free now: try again at once
      }
      m.c.lock_retries++;
      if (Clock::now() > deadline) {
        return Status::TimedOut("writer lock of '" + s.name + "' held by front-end " +
                                std::to_string(old));
      }
      backoff.Wait();
    }
    m.held_locks.insert(s.lock_addr);
    m.c.lock_acquires++;
    // The previous holder fenced before unlocking, so what it committed is applied; our cached
    // pages may predate it.
    InvalidateCache();
    return Status::Ok();
  });
}

Status Session::WriterUnlock(const Structure& s) {
  return Guarded(false, [&]() -> Status {
    Impl& m = *impl_;
    if (!m.held_locks.count(s.lock_addr)) {
      return Status::FailedPrecondition("writer lock of '" + s.name + "' not held");
    }
    if (m.replay_pending) {
      return Status::FailedPrecondition(
          "writer lock of '" + s.name + "' kept: front-end " + std::to_string(m.o.frontend_id) +
          " has op logs of an earlier session to replay first (Session::Replay); releasing the "
          "lock would let others write over a state those operations have not reached");
    }
    ASYMNVM_RETURN_IF_ERROR(Fence());
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t old, m.Cas(s.lock_addr, m.o.frontend_id, 0));
    m.held_locks.erase(s.lock_addr);
    if (old != m.o.frontend_id) {
      return Status::FailedPrecondition("writer lock of '" + s.name + "' was held by front-end " +
                                        std::to_string(old));
    }
    return Status::Ok();
  });
}

// ---- recovery ----

void Session::SetOpCloser(uint32_t structure_id, std::function<Status()> close) {
  if (close) {
    impl_->closers[structure_id] = std::move(close);
  } else {
    impl_->closers.erase(structure_id);
  }
}

void Session::SetReconnectHook(std::function<Status()> hook) {
  impl_->reconnect_hook = std::move(hook);
}

void Session::RegisterReplay(uint32_t structure_type, ReplayFn fn) {
  impl_->replay[structure_type] = std::move(fn);
}

void Session::SetAdopter(AdoptFn adopt) { impl_->adopter = std::move(adopt); }

Result<bool> Session::AdoptDeadWriter(uint64_t holder, const Structure& target) {
  Impl& m = *impl_;
  const std::string who = "front-end " + std::to_string(m.o.frontend_id) + ": taking over '" +
                          target.name + "' from dead front-end " + std::to_string(holder);
  if (holder > 0xFFFF) {
    return Status::Corruption("writer lock of '" + target.name + "' holds " +
                              std::to_string(holder) + ", not a front-end id");
  }
  // Claiming the id is the liveness check: it fails with kAlreadyExists while the holder (or
  // another front-end adopting it) holds its lease, and keeps the holder from coming back while
  // its op logs are replayed.
  auto claim = FrontendIdentity::Claim(m.o.coordinator, holder, m.o.timeout);
  if (!claim.ok()) {
    if (claim.status().code() == StatusCode::kAlreadyExists) return false;
    return claim.status().WithContext(who);
  }
  const auto start = Clock::now();
  SessionOptions ro = m.o;
  ro.coordinator.clear();  // the id is held by `claim`
  ro.frontend_id = holder;
  ro.backends = {backend_address()};
  ro.reconnect_deadline = std::chrono::milliseconds(0);
  // Registered with the claim's epoch: from now on the back-end refuses the dead writer's
  // registrations (lower epoch) and transactions (older incarnation).
  auto connected = Connect(ro, (*claim)->epoch());
  if (!connected.ok()) return connected.status().WithContext(who);
  Result<std::unique_ptr<Session>> opened =
      std::unique_ptr<Session>(new Session(std::move(connected).value()));
  Session& r = **opened;
  Impl& rm = *r.impl_;
  rm.replay = m.replay;
  rm.adopting = true;
  // The structures the dead writer's unreplayed op logs name (naming slots), and the target.
  BackendFetcher f(rm.oq.get(), rm.first_op);
  ASYMNVM_ASSIGN_OR_RETURN(auto ops, f.Fetch(holder, rm.registered_opn));
  std::vector<Structure> named;
  std::set<uint32_t> seen;
  {
    auto t = r.OpenRoot(target.name);
    if (!t.ok()) return t.status().WithContext(who);
    named.push_back(*t);
    seen.insert(t->id);
  }
  // And every other structure whose lock it holds (nothing of it to replay, but the lock is as
  // stale): one take-over frees them all.
  std::vector<uint32_t> slots;
  for (const RecoveredOp& op : ops) slots.push_back(op.structure_id);
  {
    backend::PayloadWriter w;
    w.U64(holder);
    auto reply = rm.Call(backend::kLockedBy, w.bytes());
    if (!reply.ok()) return reply.status().WithContext(who + ": the structures it locked");
    backend::PayloadReader in(*reply, "locked by");
    const uint32_t n = in.U32();
    for (uint32_t i = 0; i < n && in.status().ok(); i++) slots.push_back(in.U32());
    ASYMNVM_RETURN_IF_ERROR(in.status().WithContext(who));
  }
  for (uint32_t slot : slots) {
    if (!seen.insert(slot).second) continue;
    backend::PayloadWriter w;
    w.U32(slot);
    auto reply = rm.Call(backend::kNamingAt, w.bytes());
    if (!reply.ok()) return reply.status().WithContext(who + ": structure in naming slot " + std::to_string(slot));
    ASYMNVM_ASSIGN_OR_RETURN(Structure st, DecodeEntry(*reply));
    rm.structures[st.id] = st;
    named.push_back(st);
  }
  ASYMNVM_RETURN_IF_ERROR(m.adopter(r, named).WithContext(who));
  // The adopter released the locks of what it opened; a lock of the dead writer still on the
  // target (nothing of it to replay, or the adopter could not open it) is released here.
  if (rm.replay_pending) {
    return Status::FailedPrecondition(who + ": its op logs were not replayed; its locks stay held");
  }
  ASYMNVM_ASSIGN_OR_RETURN(uint64_t word, r.ReadWord(target.lock_addr));
  if (word == holder) {
    ASYMNVM_RETURN_IF_ERROR(r.Fence());
    ASYMNVM_RETURN_IF_ERROR(rm.Cas(target.lock_addr, holder, 0).status());
  }
  const uint64_t replayed = rm.c.replayed_ops;
  opened->reset();  // closes the recovery session before the id is released
  m.c.takeovers++;
  LOG_WARN("frontend", who << ": replayed " << replayed << " operation(s) on " << named.size()
                           << " structure(s) in "
                           << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() -
                                                                                   start)
                                  .count()
                           << " ms");
  return true;
}


Status Session::Replay() {
  if (!impl_->o.op_log_address.empty()) {
    return Status::FailedPrecondition(
        "replay: this session's op logs go to " + impl_->o.op_log_address +
        " (SessionOptions::op_log_address), not to the data back-end; replay them with a fetcher "
        "for that back-end");
  }
  return Guarded(false, [&]() -> Status {
    BackendFetcher f(impl_->oq.get(), impl_->first_op);
    return ReplayWith(&f);
  });
}

Status Session::Replay(OpLogFetcher* fetcher) {
  return Guarded(false, [&]() -> Status { return ReplayWith(fetcher); });
}

Status Session::ReplayWith(OpLogFetcher* fetcher) {
  Impl& m = *impl_;
  if (fetcher == nullptr) return Status::InvalidArgument("replay: no fetcher");
  ASYMNVM_ASSIGN_OR_RETURN(auto ops, fetcher->Fetch(m.o.frontend_id, m.registered_opn));
  std::sort(ops.begin(), ops.end(),
            [](const RecoveredOp& a, const RecoveredOp& b) { return a.op_seq < b.op_seq; });
  // Every op to replay is open until re-executed: a transaction sent meanwhile never carries an
  // OPN past one (a crash during replay replays the rest again).
  const uint64_t done = std::max(m.registered_opn, m.replayed_upto);
  size_t replayed = 0;
  uint64_t last = 0;
  for (const RecoveredOp& op : ops) {
    if (op.op_seq <= done || op.op_seq >= m.first_op) continue;
    m.max_logged = std::max(m.max_logged, op.op_seq);
    if (op.op_type != kLockAheadOpType) m.open_ops[op.op_seq] = op.structure_id;
  }
  // The ops to replay hold the OPN back from here on (open_ops), each passed once re-executed.
  m.opn_cap = UINT64_MAX;
  for (const RecoveredOp& op : ops) {
    if (op.op_seq <= done || op.op_seq >= m.first_op) continue;
    m.next_op = std::max(m.next_op, op.op_seq + 1);
    if (op.op_type == kLockAheadOpType) {
      m.AdvanceOpn();
      continue;
    }
    auto st = m.structures.find(op.structure_id);
    if (st == m.structures.end()) {
      return Status::FailedPrecondition("replay: op " + std::to_string(op.op_seq) +
                                        " names structure " + std::to_string(op.structure_id) +
                                        ", not opened in this session");
    }
    auto fn = m.replay.find(st->second.type);
    if (fn == m.replay.end()) {
      return Status::FailedPrecondition("replay: no replay function for structure type " +
                                        std::to_string(st->second.type));
    }
    m.replaying = true;
    m.replay_seq = op.op_seq;
    Status s = fn->second(*this, st->second, op);
    m.replaying = false;
    if (!s.ok()) return s.WithContext("replay of op " + std::to_string(op.op_seq));
    if (!m.cur.empty()) {
      m.replaying = true;  // TxWrite closes ops of this structure up to replay_seq only
      Status t = TxWrite(st->second);
      m.replaying = false;
      ASYMNVM_RETURN_IF_ERROR(t);
    }
    m.open_ops.erase(op.op_seq);
    m.replayed_upto = std::max(m.replayed_upto, op.op_seq);
    m.AdvanceOpn();
    m.c.replayed_ops++;
    replayed++;
    last = op.op_seq;
  }
  // Everything of the earlier sessions is re-executed (its transactions are in the batch).
  m.replay_pending = false;
  if (replayed > 0 || !ops.empty()) {
    LOG_INFO("frontend", "front-end " << m.o.frontend_id << ": replayed " << replayed << " of "
                                      << ops.size() << " fetched op log(s) after OPN "
                                      << backend::OpSeqString(m.registered_opn)
                                      << (replayed > 0 ? ", up to " + backend::OpSeqString(last) : ""));
  }
  return Fence();
}

// ---- introspection ----

Counters Session::counters() const {
  Counters c = impl_->c;
  c.fabric = impl_->fabric->counters();
  if (impl_->cache) {
    c.cache_hits = impl_->cache->hits();
    c.cache_misses = impl_->cache->misses();
    c.cache_evictions = impl_->cache->evictions();
  }
  return c;
}

void Session::InvalidateCache() {
  if (impl_->cache) impl_->cache->Clear();
}
uint64_t Session::frontend_id() const { return impl_->o.frontend_id; }
uint64_t Session::applied_lpn() const { return impl_->known_lpn; }
uint64_t Session::recovered_opn() const { return impl_->registered_opn; }
uint64_t Session::next_op_seq() const { return impl_->next_op; }
uint64_t Session::data_begin() const { return impl_->data_begin; }
uint64_t Session::data_end() const { return impl_->data_end; }
size_t Session::max_transaction_bytes() const { return impl_->max_txn; }
Level Session::level() const { return impl_->o.level; }
const std::array<uint8_t, 16>& Session::pool_uuid() const { return impl_->pool_uuid; }
const std::string& Session::backend_address() const { return impl_->o.backends[0]; }
uint64_t Session::reconnects() const { return reconnects_; }
bool Session::reconnect_pending() const { return impl_->lost; }

}  // namespace asymnvm::frontend
