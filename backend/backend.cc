#include "backend/backend.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "alloc/backend_allocator.h"
#include "backend/applier.h"
#include "backend/deferred_frees.h"
#include "backend/log_format.h"
#include "backend/metrics.h"
#include "backend/naming.h"
#include "backend/replication.h"
#include "backend/rpc.h"
#include "common/checksum.h"
#include "common/coding.h"
#include "common/crash_point.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "common/zero.h"
#include "fabric/oq/oq.h"
#include "fabric/oq/wire.h"
#include "fabric/rowan/receiver.h"
#include "fabric/rowan/scanner.h"

namespace asymnvm::backend {
namespace {

constexpr uint16_t kOpLogEntryType = kOpLogRowanType;

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::atomic_ref<uint64_t> Word(uint8_t* base, uint64_t offset) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + offset));
}

// ---- redo-log mode (doc/backend.md §Disk-durable mode) ----
constexpr uint32_t kOqStride = 64;
constexpr uint32_t kRedoNicThreads = 4;
// Checkpoint record: two 64-byte slots in the back-end header page (pool offsets 6144, 6208).
constexpr uint64_t kCkptSlotOffset = kBackendHeaderOffset + 2048;
constexpr uint64_t kCkptSlotSize = 64;
constexpr uint64_t kCkptMagic = 0x3154504B434D564EULL;  // "NVMCKPT1"
constexpr uint32_t kCkptVersion = 1;
constexpr uint64_t kCkptActive = 1;
// Per front-end checkpoint copies in its naming slot: two copies of (seq, LPN, OPN) at slot
// bytes 160 and 184 (root word at 128, so root_addr + 32 + 24 × (seq % 2)).
constexpr uint64_t kCkptCopyFromRoot = 32;

struct CkptRecord {
  uint64_t seq = 0;
  uint64_t rte = 0;
  uint64_t flags = 0;
  uint64_t time_ns = 0;
};

void EncodeCkpt(const CkptRecord& r, uint8_t* p) {
  std::memset(p, 0, kCkptSlotSize);
  PutLe64(p, kCkptMagic);
  PutLe32(p + 12, kCkptVersion);
  PutLe64(p + 16, r.seq);
  PutLe64(p + 24, r.rte);
  PutLe64(p + 32, r.flags);
  PutLe64(p + 40, r.time_ns);
  PutLe32(p + 8, Crc32c(p + 12, kCkptSlotSize - 12));
}

bool DecodeCkpt(const uint8_t* p, CkptRecord* r) {
  if (GetLe64(p) != kCkptMagic || GetLe32(p + 12) != kCkptVersion ||
      GetLe32(p + 8) != Crc32c(p + 12, kCkptSlotSize - 12)) {
    return false;
  }
  r->seq = GetLe64(p + 16);
  r->rte = GetLe64(p + 24);
  r->flags = GetLe64(p + 32);
  r->time_ns = GetLe64(p + 40);
  return r->seq != 0;
}

uint64_t NowNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
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

}  // namespace

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

  // A front-end's ownership-journal entry, written by requests 20–22 together with the
  // allocation or free it records (frontend/alloc_journal.h): compare-and-swap, then persist.
  // The entry must be an aligned word of the data area; a different value there means a later
  // incarnation of the id owns the journal now (kFailedPrecondition, "fenced").
  Status JournalSwap(uint64_t entry, uint64_t expected, uint64_t desired) {
    if (entry % 8 != 0 || entry < layout.data.offset || entry + 8 > layout.data.end()) {
      return Status::InvalidArgument("journal entry " + std::to_string(entry) +
                                     " is not an aligned word of the data area");
    }
    uint64_t seen = expected;
    if (!Word(base(), entry).compare_exchange_strong(seen, desired)) {
      return Status::FailedPrecondition("fenced: ownership journal entry " + std::to_string(entry) +
                                        " holds " + std::to_string(seen) + ", expected " +
                                        std::to_string(expected) +
                                        " (a later incarnation of this id wrote it)");
    }
    persister()->Persist(base() + entry, 8);
    return Status::Ok();
  }

  // OpLogSource: pointer entries of memory logs (called under mu, from ApplyTxnRequest). The
  // span stays valid while mu is held: entries are erased only by RecycleCovered (under mu) and
  // never replaced (try_emplace).
  Result<std::span<const uint8_t>> Payload(uint64_t fe, uint64_t op_seq) override
      ASYMNVM_REQUIRES(mu) {
    {
      MutexLock l(op_logs_mu);
      auto it = op_logs.find({fe, op_seq});
      if (it != op_logs.end()) return std::span<const uint8_t>(it->second);
    }
    // Not indexed: landed before this process started (a restart replays transactions whose op
    // logs are in segments the consumer has not digested yet), or a multi-block op log whose
    // reassembly was dropped. The live segments hold every op log not yet covered.
    if (counters.op_log_scans++ == 0) {
      LOG_INFO("backend", "op log " << OpSeqString(op_seq) << " of front-end " << fe
                                    << " named by a pointer entry was not indexed at its landing"
                                       " (landed before this start?): scanning the live b-log");
    }
    for (const bool full : {false, true}) {
      IndexLiveSegments(full);
      MutexLock l(op_logs_mu);
      auto it = op_logs.find({fe, op_seq});
      if (it != op_logs.end()) return std::span<const uint8_t>(it->second);
    }
    return Status::NotFound("op log " + OpSeqString(op_seq) + " of front-end " +
                            std::to_string(fe) + " is not in the b-log");
  }

  void IndexOpLog(std::span<const uint8_t> entry_payload) ASYMNVM_REQUIRES(op_logs_mu) {
    auto rec = DecodeOpLog(entry_payload);
    if (!rec.ok()) return;  // the consumer reports it when it digests the segment
    op_logs.try_emplace({rec->frontend_id, rec->op_seq}, rec->payload.begin(), rec->payload.end());
  }

  // LandingIndexer: a range of the b-log area the NIC landed and is persisting (one SEND: a
  // block). Op logs are indexed as they land, so a transaction's pointer entries find them at
  // once (the consumer digests a segment only when it is full). A NIC that lands without the
  // soft NIC's persist hook (hardware RDMA) leaves this to IndexLiveSegments.
  void IndexLanding(uint64_t offset, uint64_t length) {
    MutexLock l(op_logs_mu);
    IndexBlocks(base() + layout.rowan.offset + offset, length);
  }

  // Indexes the op logs of the valid blocks at p.. (under op_logs_mu); stops at the first stride
  // that holds no valid block. Returns the bytes consumed.
  size_t IndexBlocks(const uint8_t* p, size_t length) ASYMNVM_REQUIRES(op_logs_mu) {
    size_t pos = 0;
    while (pos + rowan::kBlockHeaderSize <= length) {
      rowan::BlockHeader h;
      if (!rowan::DecodeBlock(p + pos, length - pos, rowan_mtu, &h).ok()) break;
      if (h.meta.type == kOpLogEntryType) {
        std::span<const uint8_t> body(p + pos + rowan::kBlockHeaderSize, h.payload_len);
        if (h.block_count == 1) {
          IndexOpLog(body);
        } else if (h.block_seq < h.block_count) {
          if (partial_op_logs.size() >= 256) partial_op_logs.clear();  // senders that died
          auto& part = partial_op_logs[{h.meta.owner, h.meta.version}];
          if (part.count == 0) {
            part.count = h.block_count;
            part.blocks.resize(h.block_count);
          }
          if (part.count == h.block_count && part.blocks[h.block_seq].empty() &&
              h.payload_len > 0) {
            part.blocks[h.block_seq].assign(body.begin(), body.end());
            if (++part.found == part.count) {
              std::vector<uint8_t> whole;
              for (const auto& b : part.blocks) whole.insert(whole.end(), b.begin(), b.end());
              partial_op_logs.erase({h.meta.owner, h.meta.version});
              IndexOpLog(whole);
            }
          }
        }
      }
      pos += rowan::BlockFootprint(h.payload_len);
    }
    return std::min<size_t>(pos, length);
  }

  // Indexes the op logs of the segments not yet committed: first incrementally, from where the
  // last call stopped in each segment (blocks land in order within a segment); then, when `full`,
  // every segment whole through the scanner, copied first (bytes may be landing; an entry still
  // landing fails its checksum and is skipped — it was never acknowledged).
  void IndexLiveSegments(bool full) {
    const auto live = receiver->LiveSegments();
    MutexLock l(op_logs_mu);
    std::map<uint64_t, size_t> resume;
    for (const rowan::SegmentView& v : live) {
      size_t& at = resume[v.post_seq];
      if (auto it = scanned_to.find(v.post_seq); it != scanned_to.end()) at = it->second;
      at += IndexBlocks(v.bytes.data() + at, v.bytes.size() - at);
    }
    scanned_to = std::move(resume);  // forgets committed segments
    if (!full) return;
    rowan::Scanner scanner;
    std::vector<uint8_t> copy;
    for (const rowan::SegmentView& v : live) {
      copy.assign(v.bytes.begin(), v.bytes.end());
      scanner.ScanSegment(copy, v.post_seq,
                          [&](const rowan::ScannedEntry& e) ASYMNVM_REQUIRES(op_logs_mu) {
                            if (e.meta.type == kOpLogEntryType) IndexOpLog(e.payload);
                          });
    }
  }
  // live segment (post_seq) → bytes indexed
  std::map<uint64_t, size_t> scanned_to ASYMNVM_GUARDED_BY(op_logs_mu);

  LayoutParams Params() const {
    LayoutParams lp;
    lp.naming_slots = o.naming_slots;
    lp.block_size = o.block_size;
    lp.rowan_bytes = o.log_bytes;
    lp.rowan_segment = o.log_segment;
    lp.oq_bytes = oq::DurableAreaSize(1, o.oq_buffers, o.oq_buffer_size);
    lp.bitmap_bytes = [](uint64_t data, uint32_t block) {
      return alloc::BackendAllocator::BitmapBytes(data, block);
    };
    return lp;
  }

  Status Format() {
    ASYMNVM_ASSIGN_OR_RETURN(layout, PlanLayout(pool->size(), Params()));
    // Regions may hold bytes of an interrupted earlier format: start them from zero.
    for (const Region* r : {&layout.naming, &layout.bitmap, &layout.rowan, &layout.oq}) {
      ZeroPages(base() + r->offset, r->size);  // a fresh (sparse) file: nothing to write
      persister()->Persist(base() + r->offset, r->size);
    }
    LOG_INFO("backend", "formatting " << pool->path() << ": " << layout.Describe());
    return Status::Ok();
  }

  Status Open() {
    if (::access(o.pool_path.c_str(), F_OK) != 0) {
      // Refuse an impossible geometry before creating a file that would be refused next time too.
      auto plan = PlanLayout(o.pool_size, Params());
      if (!plan.ok())
        return Status(plan.status().code(), o.pool_path + ": " + plan.status().message());
    }
    pm::PoolOptions po;
    po.mode = o.persist_mode;
    po.layout = "asymnvm-backend";
    po.crash_sim = o.crash_sim;
    ASYMNVM_ASSIGN_OR_RETURN(pool, pm::Pool::OpenOrCreate(o.pool_path, o.pool_size, po));
    fwd = std::make_unique<ForwardingPersister>(pool->persister(), pool->base(), pool->size());
    uint8_t* header = base() + kBackendHeaderOffset;
    auto decoded = DecodeLayout(header, pool->size());
    bool fresh = false;
    if (decoded.ok()) {
      layout = *decoded;
    } else if (decoded.status().code() == StatusCode::kNotFound) {
      ASYMNVM_RETURN_IF_ERROR(Format());
      fresh = true;
    } else {
      return Status(decoded.status().code(), o.pool_path + ": " + decoded.status().message());
    }
    ASYMNVM_ASSIGN_OR_RETURN(naming, NamingSpace::Open(base(), layout.naming.offset,
                                                       layout.naming.size, persister(), fresh));
    alloc::BackendOptions ao;
    ao.data_begin = layout.data.offset;
    ao.data_size = layout.data.size;
    ao.block_size = layout.block_size;
    ao.bitmap = base() + layout.bitmap.offset;
    ao.bitmap_size = layout.bitmap.size;
    ao.persister = persister();
    ao.format_if_empty = fresh;
    ASYMNVM_ASSIGN_OR_RETURN(allocator, alloc::BackendAllocator::Open(ao));
    LoadDeferredFrees();
    if (fresh) {
      // The header goes last: a crash before this line leaves a pool that is formatted again.
      EncodeLayout(layout, header);
      persister()->Persist(header, kBackendHeaderSize);
    }
    for (const auto& e : naming->List()) {
      if (e.type == kFrontendRecordType && e.name.rfind("fe:", 0) == 0) {
        MutexLock lock(mu);  // uncontended: nothing else runs yet
        frontends[std::stoull(e.name.substr(3))] = e;
      }
    }
    redo = pool->mode() == pm::PersistMode::kMsync;
    deferred_writes = std::make_unique<DeferredPersister>(base());
    fwd_deferred =
        std::make_unique<ForwardingPersister>(deferred_writes.get(), pool->base(), pool->size(),
                                              /*wait_on_drain=*/false);
    one_sided =
        std::make_unique<OneSidedPersister>(persister(), [this] { CheckpointIfTxnsSince(); });
    ASYMNVM_RETURN_IF_ERROR(RestoreCheckpoint());
    if (!fresh) CheckLanded();
    return Status::Ok();
  }

  // ---- persistent deferred frees (backend/deferred_frees.h) ----

  uint8_t* DeferredFreeSlotAt(uint32_t slot) {
    return base() + kBackendHeaderOffset + kDeferredFreeTableOffset + slot * kDeferredFreeSlotSize;
  }
  void WriteDeferredFreeSlot(uint32_t slot, uint64_t addr) ASYMNVM_REQUIRES(dfree_mu) {
    uint8_t* p = DeferredFreeSlotAt(slot);
    EncodeDeferredFree(slot, addr, p);
    persister()->Persist(p, kDeferredFreeSlotSize);
    dfree_used[slot] = addr != 0;
  }

  // At start, before anything is served: every recorded deferred free whose block is still
  // allocated is re-armed with the full delay (readers of the grace period may have survived the
  // restart); one whose block is already free (the crash came between the free and the clear)
  // and every torn slot are cleared.
  void LoadDeferredFrees() {
    MutexLock dl(dfree_mu);
    dfree_used.assign(kDeferredFreeSlots, false);
    std::vector<uint32_t> bad;
    const auto slots = DecodeDeferredFrees(DeferredFreeSlotAt(0), &bad);
    for (uint32_t b : bad) {
      LOG_WARN("backend", "deferred-free slot " << b << " is torn (never acknowledged): cleared");
      WriteDeferredFreeSlot(b, 0);
    }
    const auto due = std::chrono::steady_clock::now() + o.reclaim_delay;
    for (const auto& s : slots) {
      if (!allocator->ExtentBytes(s.addr).ok() || dfree_pending.count(s.addr) != 0) {
        WriteDeferredFreeSlot(s.slot, 0);  // freed before the crash cleared the slot
        continue;
      }
      dfree_used[s.slot] = true;
      dfree_pending[s.addr] = s.slot;
      MutexLock lock(mu);
      deferred.emplace_back(due, s.addr);
      counters.deferred_frees_rearmed++;
    }
    if (!dfree_pending.empty()) {
      LOG_INFO("backend", dfree_pending.size() << " deferred free(s) re-armed from the pool");
    }
  }

  // Request 23: validated and recorded durably before the reply.
  Status RecordDeferredFree(uint64_t addr, bool recovering) {
    MutexLock dl(dfree_mu);
    if (dfree_pending.count(addr) != 0) {
      // An OQ re-execution of a request that was recorded before the crash: already pending.
      if (recovering) return Status::Ok();
      return Status::FailedPrecondition("deferred free of " + std::to_string(addr) +
                                        ": already pending");
    }
    ASYMNVM_RETURN_IF_ERROR(allocator->ExtentBytes(addr).status());
    uint32_t slot = 0;
    while (slot < kDeferredFreeSlots && dfree_used[slot]) slot++;
    if (slot == kDeferredFreeSlots) {
      return Status::ResourceExhausted("deferred free: all " + std::to_string(kDeferredFreeSlots) +
                                       " slots pending (retry after the reclaim delay)");
    }
    WriteDeferredFreeSlot(slot, addr);
    dfree_pending[addr] = slot;
    MutexLock lock(mu);
    deferred.emplace_back(std::chrono::steady_clock::now() + o.reclaim_delay, addr);
    return Status::Ok();
  }

  // ---- redo-log mode: checkpoints and recovery (doc/backend.md §Disk-durable mode) ----

  uint8_t* CkptSlot(uint64_t seq) { return base() + kCkptSlotOffset + kCkptSlotSize * (seq % 2); }

  // The OQ worker 0's ReqToExecute as found in the area (0 when the area is not formatted).
  uint64_t OqAreaRte() {
    const uint8_t* h = base() + layout.oq.offset;
    if (std::all_of(h, h + 32, [](uint8_t b) { return b == 0; })) return 0;
    uint64_t rte = 0;
    return oq::wire::DecodeWord(GetLe64(h + 64), &rte) ? rte : 0;
  }

  // Runs at open, before the landed records are checked and before the OQ server recovers. A
  // valid active checkpoint record means the pool was last served in redo mode: the LPN/OPN
  // words of every front-end and the OQ worker's ReqToExecute go back to the checkpoint's values
  // (the mapped words may hold later values that reached the file by page write-back), so OQ
  // recovery re-executes every transaction logged after the checkpoint, in order (physical redo:
  // idempotent). Without a record, a redo-mode back-end takes the first checkpoint of the
  // current (directly persisted) state.
  Status RestoreCheckpoint() {
    CkptRecord best;
    for (uint64_t i = 0; i < 2; i++) {
      CkptRecord r;
      if (DecodeCkpt(base() + kCkptSlotOffset + kCkptSlotSize * i, &r) && r.seq > best.seq) {
        best = r;
      }
    }
    if (best.seq != 0 && (best.flags & kCkptActive) != 0) {
      MutexLock cl(ckpt_mu);
      MutexLock lock(mu);
      ckpt_seq = best.seq;
      ckpt_active = true;
      for (const auto& [fe, rec] : frontends) {
        const uint8_t* copy = base() + rec.root_addr + kCkptCopyFromRoot + 24 * (best.seq % 2);
        uint64_t lpn = 0, opn = 0;
        if (GetLe64(copy) == best.seq) {  // else registered after the checkpoint
          lpn = GetLe64(copy + 8);
          opn = GetLe64(copy + 16);
        }
        Word(base(), rec.root_addr).store(lpn);
        Word(base(), rec.lock_addr).store(opn);
        ckpt_opn[fe] = opn;
        persister()->Flush(base() + rec.root_addr, 16);
      }
      uint8_t* h = base() + layout.oq.offset;
      if (!std::all_of(h, h + 32, [](uint8_t b) { return b == 0; })) {
        PutLe64(h + 64, oq::wire::EncodeWord(best.rte));
        persister()->Flush(h + 64, 8);
      }
      persister()->Drain();
      applied_rte = best.rte;
      LOG_INFO("backend", "redo recovery from checkpoint " << best.seq << " (queue position "
                                                           << best.rte << ")");
      return Status::Ok();
    }
    if (best.seq != 0) {
      MutexLock cl(ckpt_mu);
      ckpt_seq = best.seq;  // an inactive record: numbering continues
    }
    if (!redo) return Status::Ok();
    {
      MutexLock lock(mu);
      applied_rte = OqAreaRte();
    }
    return Checkpoint(0);
  }

  // Makes every effect applied so far durable and records it: capture (under mu) the positions,
  // write the per-front-end copies, sync the naming area and every range written since the last
  // checkpoint (one msync), then write and sync the record (one msync). Log space before the
  // captured position may be recycled only after this returns.
  Status Checkpoint(uint64_t rte_floor) {
    MutexLock cl(ckpt_mu);
    return CheckpointLocked(rte_floor);
  }

  Status CheckpointLocked(uint64_t rte_floor) ASYMNVM_REQUIRES(ckpt_mu) {
    struct Fe {
      uint64_t root_addr, lpn, opn, id;
    };
    std::vector<Fe> fes;
    uint64_t rte, lo, hi, bytes, txns;
    {
      MutexLock lock(mu);
      applied_rte = std::max(applied_rte, rte_floor);
      rte = applied_rte;
      txns = counters.txns_applied;
      for (const auto& [fe, rec] : frontends) {
        fes.push_back({rec.root_addr, Word(base(), rec.root_addr).load(),
                       Word(base(), rec.lock_addr).load(), fe});
      }
      deferred_writes->Take(&lo, &hi, &bytes);
    }
    const uint64_t seq = ckpt_seq + 1;
    for (const Fe& f : fes) {
      uint8_t* copy = base() + f.root_addr + kCkptCopyFromRoot + 24 * (seq % 2);
      PutLe64(copy, seq);
      PutLe64(copy + 8, f.lpn);
      PutLe64(copy + 16, f.opn);
      fwd->ForwardOnly(copy, 24);  // mirrors: the hull below is not forwarded (applied ranges were)
    }
    ASYMNVM_CRASH_POINT("backend.checkpoint.before_data_sync");
    lo = std::min(lo, layout.naming.offset);
    hi = std::max(hi, layout.naming.end());
    // Synced locally only: the mirrors received every applied range when it was applied
    // (fwd_deferred) and the naming area's changes when they were made.
    pool->persister()->Persist(base() + lo, hi - lo);
    ASYMNVM_CRASH_POINT("backend.checkpoint.after_data_sync");
    CkptRecord r{seq, rte, kCkptActive, NowNs()};
    EncodeCkpt(r, CkptSlot(seq));
    persister()->Persist(CkptSlot(seq), kCkptSlotSize);
    ASYMNVM_CRASH_POINT("backend.checkpoint.after_record");
    ckpt_seq = seq;
    ckpt_active = true;
    MutexLock lock(mu);
    ckpt_txns = txns;
    for (const Fe& f : fes) ckpt_opn[f.id] = f.opn;
    counters.checkpoints++;
    counters.checkpoint_bytes += bytes;
    return Status::Ok();
  }

  // Direct mode after a redo-mode run: once OQ recovery has re-applied (and persisted) the
  // logged transactions, the record is retired so the next start does not replay again.
  void RetireCheckpointRecord() {
    MutexLock cl(ckpt_mu);
    if (!ckpt_active) return;
    CkptRecord r{ckpt_seq + 1, 0, 0, NowNs()};
    EncodeCkpt(r, CkptSlot(r.seq));
    persister()->Persist(CkptSlot(r.seq), kCkptSlotSize);
    ckpt_seq = r.seq;
    ckpt_active = false;
  }

  // oq::ServerOptions::before_recycle: the OQ buffers before `rte` are about to be reused.
  void BeforeRecycle(uint64_t rte) {
    if (!redo) {
      RetireCheckpointRecord();
      return;
    }
    Status s = Checkpoint(rte);
    if (!s.ok()) LOG_ERROR("backend", "checkpoint: " << s.ToString());
  }

  void CheckpointIfTxnsSince() {
    {
      MutexLock lock(mu);
      if (counters.txns_applied == ckpt_txns) return;
    }
    Status s = Checkpoint(0);
    if (!s.ok()) LOG_ERROR("backend", "checkpoint: " << s.ToString());
  }

  // Background checkpointer (redo mode): a checkpoint when something was applied since the last
  // one and the interval passed, or sooner when much was written or log segments wait for it.
  void CheckpointLoop() {
    Mutex wait_mu;
    auto last = std::chrono::steady_clock::now();
    while (!stop.load()) {
      {
        MutexLock lock(wait_mu);
        ckpt_cv.wait_for(lock.native(), o.checkpoint_interval / 4);
      }
      if (stop.load()) break;
      bool due = false;
      {
        MutexLock lock(mu);
        const bool dirty = counters.txns_applied != ckpt_txns;
        const auto now = std::chrono::steady_clock::now();
        due = dirty && (now - last >= o.checkpoint_interval ||
                        deferred_writes->pending_bytes() >= o.checkpoint_bytes || held.size() >= 4);
      }
      if (!due) continue;
      Status s = Checkpoint(0);
      if (!s.ok()) LOG_ERROR("backend", "checkpoint: " << s.ToString());
      last = std::chrono::steady_clock::now();
    }
  }

  // Runs before the receiver and the OQ server recover (OQ recovery zeroes its buffers, and it
  // skips a request that fails its checksum without a word): every landed record that fails
  // validation is logged and counted; a corrupt transaction is recorded as rejected for its
  // front-end. Unfinished landings (a crash cut them short; never acknowledged) are only noted.
  // Runs in Open before any other thread (the fabric, the receiver, the OQ server) starts.
  void CheckLanded() ASYMNVM_NO_THREAD_SAFETY_ANALYSIS {
    auto blog = rowan::CheckArea({base() + layout.rowan.offset, layout.rowan.size}, {});
    if (blog.ok()) {
      for (const std::string& p : blog->meta_problems) LOG_WARN("backend", "b-log: " << p);
      for (const rowan::AreaBadLanding& b : blog->bad) {
        std::ostringstream what;
        what << "pool offset " << layout.rowan.offset + b.offset << " (segment " << b.segment;
        if (b.header_read) what << ", owner " << b.meta.owner << ", version " << b.meta.version;
        what << "): " << b.what;
        if (b.tail) {
          LOG_INFO("backend", "b-log: unfinished landing at " << what.str()
                                                              << " (never acknowledged; ignored)");
          continue;
        }
        counters.log_corrupt_entries++;
        LOG_WARN("backend", "b-log: corrupt entry at " << what.str()
                                                       << "; skipped, its operation cannot be "
                                                          "replayed");
      }
    } else if (blog.status().code() != StatusCode::kNotFound) {
      LOG_WARN("backend", "b-log: " << blog.status().ToString());  // Receiver::Open decides
    }
    auto area = oq::ScanDurableArea({base() + layout.oq.offset, layout.oq.size},
                                    OqMaxRequest(o.oq_buffer_size));
    if (!area.ok()) {
      if (area.status().code() != StatusCode::kNotFound) {
        LOG_WARN("backend", "oq area: " << area.status().ToString());  // Server::Start decides
      }
      return;
    }
    for (const oq::LandedRequest& l : area->landed) {
      if (l.valid) continue;  // recovery re-executes it; a transaction is validated when applied
      const std::string where = "pool offset " + std::to_string(layout.oq.offset + l.area_offset) +
                                " (worker " + std::to_string(l.worker) + ", buffer " +
                                std::to_string(l.post_seq) + ", offset " +
                                std::to_string(l.offset) + ")";
      if (l.tail) {
        LOG_INFO("backend", "oq: unfinished landing at " << where << ": " << l.error
                                                         << " (never acknowledged; ignored)");
        continue;
      }
      counters.oq_corrupt_records++;
      auto txn = l.bytes.size() > oq::kRequestHeaderSize
                     ? PeekTxnHeader(l.bytes.subspan(oq::kRequestHeaderSize))
                     : Result<TxnHeader>(Status::Corruption("short"));
      if (!txn.ok()) {
        LOG_WARN("backend",
                 "oq: corrupt request at " << where << ": " << l.error << "; never executed");
        continue;
      }
      LOG_WARN("backend", "oq: corrupt transaction at " << where << " (txn_seq " << txn->txn_seq
                                                        << " of front-end " << txn->frontend_id
                                                        << ", unverified): " << l.error
                                                        << "; never applied");
      // The fields are unverified: record them only where they are plausible — a registered
      // front-end whose LPN has not passed the txn (one at or below the LPN was applied before
      // the crash, only ReqToExecute had not moved) — as its first rejected txn_seq, which the
      // front-end reads on registration; an earlier rejection stays first.
      auto it = frontends.find(txn->frontend_id & 0xFFFFFFFF);
      if (it == frontends.end()) continue;
      if (txn->txn_seq <= Word(base(), it->second.root_addr).load()) continue;
      counters.txns_rejected++;
      auto rejected = Word(base(), it->second.seq_addr);
      if (rejected.load() == 0) {
        rejected.store(txn->txn_seq, std::memory_order_release);
        persister()->Persist(base() + it->second.seq_addr, 8);
      }
    }
  }

  Status StartFabric() {
    fabric::FabricOptions fo = o.fabric;
    // Redo mode: a FLUSH waits for an msync. With one soft-NIC thread the FLUSHes of all
    // connections would wait one after another; with several, those that arrive together share
    // one group commit (pm: MsyncPersister). The threads block when idle (no spinning on 2 cores).
    if (redo) fo.nic_threads = std::max<uint32_t>(fo.nic_threads, kRedoNicThreads);
    ASYMNVM_ASSIGN_OR_RETURN(fabric, fabric::Fabric::Open(fo));
    ASYMNVM_ASSIGN_OR_RETURN(pd, fabric->AllocPd());
    fabric::MemoryRegionOptions mo;
    mo.access = fabric::kAllRemote;
    mo.persister = persister();
    ASYMNVM_ASSIGN_OR_RETURN(
        naming_mr, pd->RegisterMemory(base() + layout.naming.offset, layout.naming.size, mo));
    if (redo) mo.persister = one_sided.get();
    ASYMNVM_ASSIGN_OR_RETURN(data_mr,
                             pd->RegisterMemory(base() + layout.data.offset, layout.data.size, mo));
    rowan::ReceiverOptions ro;
    ro.fabric = fabric.get();
    ro.pd = pd.get();
    ro.area = base() + layout.rowan.offset;
    ro.area_size = layout.rowan.size;
    ro.persister = persister();
    ro.listen_address = o.log_listen_address;
    ro.segment_size = layout.rowan_segment;
    if (o.TEST_index_landings) ro.landing_observer = &landing_indexer;
    rowan_mtu = ro.mtu;
    ASYMNVM_ASSIGN_OR_RETURN(receiver, rowan::Receiver::Open(ro));
    consumer = std::thread([this] { ConsumeLog(); });
    oq::ServerOptions so;
    so.fabric = fabric.get();
    so.pd = pd.get();
    so.listen_address = o.listen_address;
    so.workers = 1;
    so.buffer_size = o.oq_buffer_size;
    so.buffers_per_worker = o.oq_buffers;
    so.max_request = OqMaxRequest(o.oq_buffer_size);
    so.max_response = 64 * 1024;
    so.durable = true;
    so.pm_area = base() + layout.oq.offset;
    so.pm_area_size = layout.oq.size;
    so.persister = persister();
    so.stride = kOqStride;
    if (redo) so.rte_persister = fwd_deferred.get();
    so.before_recycle = [this](uint32_t, uint64_t rte) { BeforeRecycle(rte); };
    ASYMNVM_ASSIGN_OR_RETURN(server, oq::Server::Start(so, [this](const oq::RequestContext& ctx,
                                                                  std::span<const uint8_t> payload,
                                                                  std::vector<uint8_t>* response) {
                               return Handle(ctx, payload, response);
                             }));
    return Status::Ok();
  }

  // ---- requests (one OQ worker: calls are sequential, in queue order) ----

  Status Handle(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                std::vector<uint8_t>* response) {
    const auto t0 = std::chrono::steady_clock::now();
    Status st = HandleRequest(ctx, payload, response);
    request_metrics.Record(
        ctx.type,
        static_cast<uint64_t>(
            std::chrono::nanoseconds(std::chrono::steady_clock::now() - t0).count()),
        payload.size(), response->size(), st.ok());
    // The queue position after this request (what the OQ worker's ReqToExecute becomes): a
    // checkpoint taken from now on covers it.
    const uint64_t end =
        uint64_t{ctx.position & 0xFFFF} * kOqStride + oq::kRequestHeaderSize + payload.size();
    const uint64_t after = oq::wire::Position(
        ctx.position >> 16, static_cast<uint32_t>((end + kOqStride - 1) / kOqStride));
    MutexLock lock(mu);
    applied_rte = std::max(applied_rte, after);
    return st;
  }

  Status HandleRequest(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                       std::vector<uint8_t>* response) {
    {
      MutexLock lock(mu);
      counters.requests++;
    }
    PayloadWriter w;
    switch (ctx.type) {
      case kRegister: {
        PayloadReader r(payload, "register");
        const uint64_t fe = r.U64();
        // The coordinator epoch of the claim (0: the front-end has no coordinator). A lower epoch
        // than one this back-end has seen for the id is a holder whose lease lapsed and whose id
        // was claimed again since: fenced.
        const uint64_t epoch = r.remaining() >= 8 ? r.U64() : 0;
        // The group term the front-end learned from the coordinator (0: none). A higher one than
        // this replica serves means a mirror may have been promoted since (doc/mirror.md §Terms).
        const uint64_t term = r.remaining() >= 8 ? r.U64() : 0;
        ASYMNVM_RETURN_IF_ERROR(r.status());
        if (term > o.replication.term) {
          Status t = o.check_term ? o.check_term(term)
                                  : Status::FailedPrecondition(
                                        "register: the front-end is at group term " +
                                        std::to_string(term) + ", this replica serves term " +
                                        std::to_string(o.replication.term) + " (stale replica)");
          if (!t.ok()) {
            MutexLock lock(mu);
            counters.registers_fenced++;
            LOG_WARN("backend", "refused a registration of front-end "
                                    << fe << " at group term " << term << ": " << t.ToString());
            return t;
          }
        }
        if (epoch != 0) {
          MutexLock lock(mu);
          uint64_t& highest = epochs[fe];
          if (epoch < highest) {
            counters.registers_fenced++;
            LOG_WARN("backend", "refused a registration of front-end "
                                    << fe << " at epoch " << epoch << ": epoch " << highest
                                    << " registered since");
            return Status::FailedPrecondition(
                "register: fenced: front-end id " + std::to_string(fe) + " epoch " +
                std::to_string(epoch) + " is stale (epoch " + std::to_string(highest) +
                " registered since: the id was taken over)");
          }
          highest = epoch;
        }
        ASYMNVM_ASSIGN_OR_RETURN(NamingEntry rec, Register(fe));
        uint32_t incarnation = 0;
        {
          // A new incarnation: op_seq numbers of this session start above 2^32 × incarnation, so
          // they never repeat an op log of an earlier session still in the b-log (the scanner
          // identifies entries by (owner, version)).
          auto aux = Word(base(), rec.aux_addr);
          incarnation = static_cast<uint32_t>((aux.load() >> 32) + 1);
          aux.store(uint64_t{incarnation} << 32, std::memory_order_release);
          persister()->Persist(base() + rec.aux_addr, 8);
        }
        RegisterReply reply;
        reply.lpn = Word(base(), rec.root_addr).load();
        reply.opn = Word(base(), rec.lock_addr).load();
        reply.rejected = Word(base(), rec.seq_addr).load();
        LOG_INFO("backend", "front-end " << fe << " registered: incarnation " << incarnation
                                         << ", LPN " << reply.lpn << ", OPN "
                                         << OpSeqString(reply.opn));
        reply.lpn_addr = rec.root_addr;
        reply.opn_addr = rec.lock_addr;
        reply.rejected_addr = rec.seq_addr;
        reply.naming_begin = layout.naming.offset;
        reply.data_begin = layout.data.offset;
        reply.data_end = layout.data.end();
        reply.block_size = layout.block_size;
        reply.incarnation = incarnation;
        reply.naming_region = naming_mr->descriptor();
        reply.data_region = data_mr->descriptor();
        reply.log_address = receiver->address();
        reply.pool_uuid = pool->superblock().uuid;
        *response = EncodeRegisterReply(reply);
        return Status::Ok();
        break;
      }
      case kNamingCreate: {
        ASYMNVM_ASSIGN_OR_RETURN(NamingCreateRequest q, DecodeNamingCreate(payload));
        const uint32_t type = q.type;
        if (type == kFrontendRecordType) {
          return Status::InvalidArgument("naming create: type 0xFE is reserved for front-ends");
        }
        NamingEntry existing;
        auto e = naming->Create(q.name, type, q.params, &existing);
        if (e.ok()) {
          EncodeNamingEntry(*e, &w);
        } else if (e.status().code() == StatusCode::kAlreadyExists && existing.type == type) {
          EncodeNamingEntry(existing, &w);  // create-or-open: same type is fine
        } else if (e.status().code() == StatusCode::kAlreadyExists) {
          return Status::AlreadyExists(e.status().message() + " with type " +
                                       std::to_string(existing.type) + ", not " +
                                       std::to_string(type));
        } else {
          return e.status();
        }
        break;
      }
      case kClearRejected: {
        PayloadReader r(payload, "clear rejected");
        const uint64_t fe = r.U64();
        ASYMNVM_RETURN_IF_ERROR(r.status());
        MutexLock lock(mu);
        auto it = frontends.find(fe);
        if (it == frontends.end()) {
          return Status::NotFound("clear rejected: front-end " + std::to_string(fe) +
                                  " is not registered");
        }
        Word(base(), it->second.seq_addr).store(0, std::memory_order_release);
        persister()->Persist(base() + it->second.seq_addr, 8);
        break;
      }
      case kNamingLookup: {
        ASYMNVM_ASSIGN_OR_RETURN(NamingEntry e,
                                 naming->Lookup(std::string(payload.begin(), payload.end())));
        EncodeNamingEntry(e, &w);
        break;
      }
      case kNamingAt: {
        PayloadReader r(payload, "naming at");
        const uint32_t slot = r.U32();
        ASYMNVM_RETURN_IF_ERROR(r.status());
        ASYMNVM_ASSIGN_OR_RETURN(NamingEntry e, naming->At(slot));
        if (e.type == kFrontendRecordType) {
          return Status::NotFound("naming at: slot " + std::to_string(slot) +
                                  " holds a front-end record, not a structure");
        }
        EncodeNamingEntry(e, &w);
        break;
      }
      case kLockedBy: {
        // A dead writer's take-over releases every lock it holds, also of structures none of its
        // unreplayed op logs names (Session::AdoptDeadWriter).
        PayloadReader r(payload, "locked by");
        const uint64_t fe = r.U64();
        ASYMNVM_RETURN_IF_ERROR(r.status());
        if (fe == 0) return Status::InvalidArgument("locked by: front-end id 0");
        std::vector<uint32_t> slots;
        for (const NamingEntry& e : naming->List()) {
          if (e.type != kFrontendRecordType && Word(base(), e.lock_addr).load() == fe)
            slots.push_back(e.slot);
        }
        w.U32(static_cast<uint32_t>(slots.size()));
        for (uint32_t slot : slots) w.U32(slot);
        break;
      }
      case kNamingRemove:
        ASYMNVM_RETURN_IF_ERROR(naming->Remove(std::string(payload.begin(), payload.end())));
        break;
      case kAllocSlab:
      case kAllocLarge: {
        // Optional trailer: the caller's ownership-journal entry (address, tag), written with
        // the allocation (doc/alloc.md §Reclaim at recovery).
        PayloadReader r(payload, ctx.type == kAllocSlab ? "alloc slab" : "alloc large");
        const uint64_t bytes = ctx.type == kAllocLarge ? r.U64() : 0;
        const bool journaled = r.remaining() > 0;
        const uint64_t entry = journaled ? r.U64() : 0, tag = journaled ? r.U64() : 0;
        ASYMNVM_RETURN_IF_ERROR(r.status());
        if (r.remaining() != 0) return Status::InvalidArgument("allocation: trailing bytes");
        if (journaled && tag > 63) {
          return Status::InvalidArgument("allocation: journal tag " + std::to_string(tag));
        }
        MutexLock dl(dfree_mu);
        ASYMNVM_ASSIGN_OR_RETURN(uint64_t a, ctx.type == kAllocSlab ? allocator->AllocSlab()
                                                                    : allocator->AllocLarge(bytes));
        if (journaled) {
          Status st = JournalSwap(entry, 0, a | tag);
          if (!st.ok()) {
            Status f = allocator->Free(a);
            if (!f.ok()) LOG_WARN("backend", "undoing an allocation: " << f.ToString());
            return st;
          }
        }
        w.U64(a);
        break;
      }
      case kFree: {
        // Optional trailer: the caller's ownership-journal entry (address, expected value),
        // cleared durably before the free.
        PayloadReader r(payload, "free");
        const uint64_t addr = r.U64();
        const bool journaled = r.remaining() > 0;
        const uint64_t entry = journaled ? r.U64() : 0, expected = journaled ? r.U64() : 0;
        ASYMNVM_RETURN_IF_ERROR(r.status());
        if (r.remaining() != 0) return Status::InvalidArgument("free: trailing bytes");
        MutexLock dl(dfree_mu);
        if (dfree_pending.count(addr) != 0) {
          return Status::FailedPrecondition("free of " + std::to_string(addr) +
                                            ": a deferred free of it is pending");
        }
        if (journaled) {
          if ((expected & ~uint64_t{63}) != addr) {
            return Status::InvalidArgument("free of " + std::to_string(addr) +
                                           ": the journal entry expected names " +
                                           std::to_string(expected & ~uint64_t{63}));
          }
          ASYMNVM_RETURN_IF_ERROR(JournalSwap(entry, expected, 0));
        }
        ASYMNVM_RETURN_IF_ERROR(allocator->Free(addr));
        break;
      }
      case kFetchOpLogs: {
        PayloadReader r(payload, "fetch op logs");
        const uint64_t fe = r.U64(), after = r.U64(), before = r.U64();
        ASYMNVM_RETURN_IF_ERROR(r.status());
        bool more = false;
        auto ops = FetchOpLogs(fe, after, before, &more);
        LOG_INFO("backend", "front-end "
                                << fe << " fetched " << ops.size() << " op log(s) after "
                                << OpSeqString(after)
                                << (ops.empty() ? std::string()
                                                : " (" + OpSeqString(ops.front().op_seq) + ".." +
                                                      OpSeqString(ops.back().op_seq) + ")")
                                << (more ? ", more" : ""));
        w.Bytes(EncodeFetchedOps(ops, more));
        break;
      }
      case kExtentOf: {
        PayloadReader r(payload, "extent of");
        const uint64_t addr = r.U64();
        ASYMNVM_RETURN_IF_ERROR(r.status());
        uint64_t start = 0, bytes = 0;
        for (const auto& e : allocator->Extents()) {
          if (addr >= e.addr && addr < e.addr + e.bytes) {
            start = e.addr;
            bytes = e.bytes;
            break;
          }
          if (e.addr > addr) break;
        }
        w.U64(start);
        w.U64(bytes);
        break;
      }
      case kFreeDeferred: {
        PayloadReader r(payload, "deferred free");
        const uint64_t addr = r.U64();
        ASYMNVM_RETURN_IF_ERROR(r.status());
        ASYMNVM_RETURN_IF_ERROR(RecordDeferredFree(addr, ctx.recovering));
        break;
      }
      case kTxn:
        return ApplyTxnRequest(payload, ctx.recovering);
      case kStatus: {
        const std::string s = StatusJson();
        w.Str(s);
        break;
      }
      default:
        return Status::InvalidArgument("backend: unknown request type " + std::to_string(ctx.type));
    }
    *response = std::move(w.bytes());
    return Status::Ok();
  }

  Result<NamingEntry> Register(uint64_t fe) {
    if (fe == 0) return Status::InvalidArgument("register: front-end id 0 is reserved");
    {
      MutexLock lock(mu);
      if (auto it = frontends.find(fe); it != frontends.end()) return it->second;
    }
    ASYMNVM_ASSIGN_OR_RETURN(NamingEntry e,
                             naming->Create("fe:" + std::to_string(fe), kFrontendRecordType, {}));
    MutexLock lock(mu);
    frontends[fe] = e;
    return e;
  }

  // A txn header's frontend_id carries the sender's incarnation in its high 32 bits (0: not
  // checked — tools and tests that build txns by hand). A txn of an incarnation other than the
  // id's latest registration is refused without touching the record: a later registration of the
  // id (a take-over or a duplicate) owns the LPN and the rejected word now. Requests re-executed
  // by the queue's recovery are not checked (they were accepted before the crash, and the
  // registrations between them are not re-executed).
  Status ApplyTxnRequest(std::span<const uint8_t> payload, bool recovering) {
    auto decoded = DecodeTxn(payload);
    MutexLock lock(mu);
    if (!decoded.ok()) {
      counters.txns_rejected++;
      LOG_WARN("backend", "rejected a transaction: " << decoded.status().ToString());
      return decoded.status();
    }
    const TxnView& txn = *decoded;
    const uint64_t fe = txn.header.frontend_id & 0xFFFFFFFF;
    const uint64_t sender_incarnation = txn.header.frontend_id >> 32;
    auto it = frontends.find(fe);
    if (it == frontends.end()) {
      counters.txns_rejected++;
      return Status::FailedPrecondition("txn from unregistered front-end " + std::to_string(fe));
    }
    const NamingEntry& rec = it->second;
    if (sender_incarnation != 0 && !recovering) {
      const uint64_t current = Word(base(), rec.aux_addr).load() >> 32;
      if (sender_incarnation != current) {
        counters.txns_fenced++;
        LOG_WARN("backend", "refused txn " << txn.header.txn_seq << " of front-end " << fe
                                           << " incarnation " << sender_incarnation
                                           << ": incarnation " << current
                                           << " registered since (fenced)");
        return Status::FailedPrecondition(
            "txn " + std::to_string(txn.header.txn_seq) + " of front-end " + std::to_string(fe) +
            ": fenced (incarnation " + std::to_string(sender_incarnation) +
            ", the id was registered again as " + std::to_string(current) + ")");
      }
    }
    auto lpn = Word(base(), rec.root_addr);
    const uint64_t applied = lpn.load(std::memory_order_acquire);
    if (txn.header.txn_seq <= applied) {  // re-executed by OQ recovery: already applied
      counters.txns_skipped++;
      return Status::Ok();
    }
    Status s;
    if (txn.header.txn_seq != applied + 1) {
      s = Status::FailedPrecondition("txn " + std::to_string(txn.header.txn_seq) +
                                     " of front-end " + std::to_string(fe) +
                                     " does not follow LPN " + std::to_string(applied));
    } else {
      ApplyTarget t{base(), pool->size(), layout.data.offset, layout.data.end(), apply_persister()};
      auto st = ApplyTxn(txn, t, this);
      if (st.ok()) {
        counters.txns_applied++;
        counters.txn_bytes_applied += st->bytes;
        auto opn = Word(base(), rec.lock_addr);
        if (txn.header.opn > opn.load()) opn.store(txn.header.opn, std::memory_order_release);
        lpn.store(txn.header.txn_seq, std::memory_order_release);
        apply_persister()->Persist(base() + rec.root_addr, 16);
        return Status::Ok();
      }
      s = st.status();
    }
    // Rejected: never applied; the front-end finds the first rejected txn_seq in its record.
    counters.txns_rejected++;
    auto rejected = Word(base(), rec.seq_addr);
    if (rejected.load() == 0) {
      rejected.store(txn.header.txn_seq, std::memory_order_release);
      persister()->Persist(base() + rec.seq_addr, 8);
    }
    LOG_WARN("backend", "rejected " << s.ToString());
    return s;
  }

  // The op logs of `fe` with after < op_seq < before still in the b-log (every segment not yet
  // committed holds all op logs not covered by an OPN), for recovery of a crashed front-end.
  // Segments being filled are copied first; entries still landing fail their checksums and are
  // not returned (they were never acknowledged).
  std::vector<FetchedOp> FetchOpLogs(uint64_t fe, uint64_t after, uint64_t before, bool* more) {
    std::map<uint64_t, FetchedOp> found;
    rowan::Scanner scanner;
    std::vector<uint8_t> copy;
    for (const rowan::SegmentView& v : receiver->LiveSegments()) {
      copy.assign(v.bytes.begin(), v.bytes.end());
      scanner.ScanSegment(copy, v.post_seq, [&](const rowan::ScannedEntry& e) {
        if (e.meta.type != kOpLogEntryType || e.meta.owner != (fe & 0xFFFF)) return;
        auto rec = DecodeOpLog(e.payload);
        if (!rec.ok() || rec->frontend_id != fe || rec->op_seq <= after || rec->op_seq >= before) {
          return;
        }
        FetchedOp op;
        op.op_seq = rec->op_seq;
        op.structure_id = rec->structure_id;
        op.op_type = rec->op_type;
        op.payload.assign(rec->payload.begin(), rec->payload.end());
        found[op.op_seq] = std::move(op);
      });
    }
    std::vector<FetchedOp> out;
    size_t bytes = 8;
    const size_t budget = 60 * 1024;
    *more = false;
    for (auto& [seq, op] : found) {
      const size_t n = 20 + op.payload.size();
      if (!out.empty() && bytes + n > budget) {
        *more = true;
        break;
      }
      bytes += n;
      out.push_back(std::move(op));
    }
    return out;
  }

  // ---- the b-log consumer: digests used segments, recycles covered ones, reclaims lazily ----

  void ConsumeLog() {
    rowan::Scanner scanner;
    while (!stop.load()) {
      auto seg = receiver->NextUsed(std::chrono::milliseconds(50));
      if (seg.ok()) {
        HeldSegment h{seg->index, {}};
        // Every op-log block pins its segment until its op is covered, not only the block that
        // completes the entry: a segment holding the first blocks of a multi-block op log that
        // completes in a later segment was recycled (zeroed) once the ops it completed were
        // covered, and the uncovered op could no longer be fetched for replay (found by
        // structures_hash_batch_test: a large PutBatch's op log lost after a crash). An op
        // log's Rowan owner is its front-end id and its version the op_seq.
        scanner.set_block_sink([&](const rowan::BlockHeader& b) {
          if (b.meta.type != kOpLogEntryType) return;
          MutexLock lock(mu);
          auto& m = h.max_op_seq[b.meta.owner];
          m = std::max(m, b.meta.version);
        });
        scanner.ScanSegment(seg->bytes, seg->post_seq, [&](const rowan::ScannedEntry& e) {
          if (e.meta.type != kOpLogEntryType) return;
          auto rec = DecodeOpLog(e.payload);
          MutexLock lock(mu);
          if (!rec.ok()) {
            LOG_WARN("backend", "b-log entry (owner " << e.meta.owner << ", version "
                                                      << e.meta.version
                                                      << "): " << rec.status().ToString());
            return;
          }
          counters.op_logs_seen++;
          {
            MutexLock l(op_logs_mu);
            op_logs.try_emplace({rec->frontend_id, rec->op_seq}, rec->payload.begin(),
                                rec->payload.end());
          }
          auto& m = h.max_op_seq[rec->frontend_id];
          m = std::max(m, rec->op_seq);
        });
        scanner.set_block_sink({});
        MutexLock lock(mu);
        counters.log_segments_digested++;
        held.push_back(std::move(h));
      }
      RecycleCovered();
      ReclaimDue();
    }
  }

  // Commits every held segment whose op logs are all covered by their front-end's OPN, in any
  // order: a segment pinned by op logs no front-end has replayed yet (a writer that died before
  // its first transaction; doc/backend.md §B-log recycling) must not pin the segments behind it —
  // empty segments posted before a crash, and later ones already covered.
  void RecycleCovered() {
    std::vector<uint32_t> done;
    size_t pinned = 0;
    uint64_t pinning_fe = 0;
    {
      MutexLock lock(mu);
      for (auto h = held.begin(); h != held.end();) {
        bool covered = true;
        for (const auto& [fe, max_seq] : h->max_op_seq) {
          if (max_seq > CoveredOpn(fe)) {
            covered = false;
            pinning_fe = fe;
          }
        }
        if (!covered) {
          pinned++;
          ++h;
          continue;
        }
        {
          MutexLock l(op_logs_mu);
          for (const auto& [fe, max_seq] : h->max_op_seq) {
            op_logs.erase(op_logs.lower_bound({fe, 0}), op_logs.upper_bound({fe, max_seq}));
          }
        }
        done.push_back(h->index);
        h = held.erase(h);
      }
      counters.log_segments_pinned = pinned;
    }
    // More than half the b-log pinned: writers will stall on RNR once it is all pinned. Say who
    // holds it (rate-limited by the consumer's loop: once per change of the count).
    const uint32_t segments = receiver->stats().segments;
    if (pinned != last_pinned_warned && pinned * 2 > segments) {
      LOG_WARN("backend", "b-log: " << pinned << " of " << segments
                                    << " segments hold op logs not covered by their front-end's "
                                       "OPN (e.g. front-end "
                                    << pinning_fe
                                    << "): start that front-end so it replays them, or writers "
                                       "stall when the log is full");
    }
    last_pinned_warned = pinned;
    for (uint32_t i : done) {
      Status s = receiver->Commit(i);
      if (!s.ok()) LOG_WARN("backend", "committing b-log segment " << i << ": " << s.ToString());
      MutexLock lock(mu);
      counters.log_segments_recycled++;
    }
  }

  // The highest op_seq of `fe` whose effects are durably applied (under mu).
  uint64_t CoveredOpn(uint64_t fe) const ASYMNVM_REQUIRES(mu) {
    if (redo) {  // only a durable checkpoint makes an OPN durable
      auto c = ckpt_opn.find(fe);
      return c == ckpt_opn.end() ? 0 : c->second;
    }
    auto it = frontends.find(fe);
    return it == frontends.end() ? 0 : Word(base(), it->second.lock_addr).load();
  }

  void ReclaimDue() {
    const auto now = std::chrono::steady_clock::now();
    std::vector<uint64_t> due;
    {
      MutexLock lock(mu);
      while (!deferred.empty() && deferred.front().first <= now) {
        due.push_back(deferred.front().second);
        deferred.pop_front();
      }
    }
    for (uint64_t a : due) {
      MutexLock dl(dfree_mu);
      Status s = allocator->Free(a);
      // Tests: the block is free in the bitmap, its slot still records it.
      ASYMNVM_CRASH_POINT("backend.deferred_free.after_free");
      auto it = dfree_pending.find(a);
      if (it != dfree_pending.end()) {
        WriteDeferredFreeSlot(it->second, 0);
        dfree_pending.erase(it);
      }
      MutexLock lock(mu);
      if (s.ok()) {
        counters.deferred_frees_done++;
      } else {
        LOG_WARN("backend", "deferred free of " << a << ": " << s.ToString());
        counters.deferred_frees_failed++;
      }
    }
  }

  std::string StatusJson() const {
    nlohmann::ordered_json j;
    BackendStats s = Stats();
    j["pool"] = pool->Describe();
    j["layout"] = layout.Describe();
    j["address"] = server ? server->address() : "";
    j["log_address"] = receiver ? receiver->address() : "";
    j["frontends"] = nlohmann::ordered_json::array();
    {
      MutexLock lock(mu);
      for (const auto& [fe, rec] : frontends) {
        j["frontends"].push_back({{"id", fe},
                                  {"lpn", Word(base(), rec.root_addr).load()},
                                  {"opn", Word(base(), rec.lock_addr).load()},
                                  {"first_rejected_txn", Word(base(), rec.seq_addr).load()},
                                  {"incarnation", Word(base(), rec.aux_addr).load() >> 32}});
      }
    }
    j["txns_applied"] = s.txns_applied;
    j["txns_skipped"] = s.txns_skipped;
    j["txns_rejected"] = s.txns_rejected;
    j["txns_fenced"] = s.txns_fenced;
    j["registers_fenced"] = s.registers_fenced;
    j["op_logs_seen"] = s.op_logs_seen;
    j["op_log_scans"] = s.op_log_scans;
    j["log_segments_digested"] = s.log_segments_digested;
    j["log_segments_recycled"] = s.log_segments_recycled;
    j["log_segments_pinned"] = s.log_segments_pinned;
    j["log_segments"] = receiver ? receiver->stats().segments : 0;
    j["log_corrupt_entries"] = s.log_corrupt_entries;
    j["oq_corrupt_records"] = s.oq_corrupt_records;
    j["requests"] = s.requests;
    j["deferred_frees_pending"] = s.deferred_frees_pending;
    j["deferred_frees_done"] = s.deferred_frees_done;
    j["deferred_frees_failed"] = s.deferred_frees_failed;
    j["deferred_frees_rearmed"] = s.deferred_frees_rearmed;
    j["cpu_seconds"] = s.cpu_seconds;
    j["durability"] = redo ? "redo-log" : "direct";
    j["pm_syncs"] = s.pm_syncs;
    j["pm_sync_bytes"] = s.pm_sync_bytes;
    j["checkpoints"] = s.checkpoints;
    j["checkpoint_bytes"] = s.checkpoint_bytes;
    {
      MutexLock lock(mu);
      j["checkpoint_lag_txns"] = redo ? s.txns_applied - std::min(s.txns_applied, ckpt_txns) : 0;
    }
    if (server) {
      const oq::ServerStats q = server->stats();
      j["oq"] = {
          {"connections", q.connections}, {"executed", q.executed}, {"rnr_seen", q.rnr_seen}};
    }
    if (repl) {
      j["mirror_mode"] = repl->async() ? "async" : "sync";
      j["mirrors"] = nlohmann::ordered_json::array();
      uint64_t insync = 0;
      for (const MirrorLinkStats& m : repl->stats()) {
        if (m.state == "in-sync") insync++;
        j["mirrors"].push_back({{"address", m.address},
                                {"name", m.name},
                                {"state", m.state},
                                {"bytes_forwarded", m.bytes_forwarded},
                                {"writes", m.writes},
                                {"flushes", m.flushes},
                                {"copies", m.copies},
                                {"copy_bytes", m.copy_bytes},
                                {"last_copy_bytes", m.last_copy_bytes},
                                {"incremental_copies", m.incremental_copies},
                                {"last_copy_ms", m.last_copy_ms},
                                {"drops", m.drops},
                                {"max_lag_bytes", m.max_lag_bytes},
                                {"max_lag_us", m.max_lag_us},
                                {"last_error", m.last_error}});
      }
      j["mirrors_in_sync"] = insync;
      const BarrierStats b = repl->barrier_stats();
      j["mirror_barriers"] = {
          {"barriers", b.barriers}, {"local_us", b.local_us}, {"mirror_wait_us", b.mirror_wait_us}};
      j["mirrors_configured"] = repl->stats().size();
    }
    auto as = allocator->stats();
    j["alloc"] = {{"blocks_total", as.blocks_total}, {"blocks_used", as.blocks_used}};
    return j.dump();
  }

  BackendStats Stats() const {
    MutexLock lock(mu);
    BackendStats s = counters;
    s.frontends = frontends.size();
    s.deferred_frees_pending = deferred.size();
    s.cpu_seconds = ProcessCpuSeconds();
    const pm::SyncStats ss = pool->sync_stats();
    s.pm_syncs = ss.syncs;
    s.pm_sync_bytes = ss.bytes;
    s.redo = redo;
    return s;
  }

  bool skip_final_checkpoint = false;  // TEST_CrashAndClose
  // Per request type counts, bytes and latency (Handle; the metrics endpoint reads them).
  metrics::RequestMetrics request_metrics{RequestTypeNames()};

  void Stop() {
    if (stop.exchange(true)) return;
    if (server) server->Stop();
    if (consumer.joinable()) consumer.join();
    ckpt_cv.notify_all();
    if (checkpointer.joinable()) checkpointer.join();
    if (redo && pool && deferred_writes && !skip_final_checkpoint) {
      // A clean stop leaves nothing to replay. (A crash instead replays from the last one.)
      Status s = Checkpoint(0);
      if (!s.ok()) LOG_ERROR("backend", "final checkpoint: " << s.ToString());
    }
    if (receiver) receiver->Close();
    if (repl) {  // last: the final checkpoint and the receiver's close were forwarded
      fwd->set_replicator(nullptr);
      fwd_deferred->set_replicator(nullptr);
      repl->Stop();
    }
  }

  Status StartReplication() {
    const ReplicationOptions& ro = o.replication;
    if (ro.mirrors.empty() && !ro.joinable) return Status::Ok();
    ASYMNVM_ASSIGN_OR_RETURN(repl, Replicator::Start(ro, o.fabric, pool.get()));
    fwd->set_replicator(repl.get());
    fwd_deferred->set_replicator(repl.get());
    const size_t n = repl->WaitInSync(o.mirror_wait);
    LOG_INFO("backend", n << " of " << ro.mirrors.size() << " mirror(s) in sync ("
                          << (ro.async ? "async" : "sync") << ")");
    return Status::Ok();
  }
};

Result<std::unique_ptr<Backend>> Backend::Start(const BackendOptions& options) {
  if (options.pool_path.empty()) return Status::InvalidArgument("backend: --pool is required");
  if (options.oq_buffers < 2 || options.oq_buffer_size < 4096 ||
      options.oq_buffer_size % 4096 != 0) {
    return Status::InvalidArgument("backend: OQ needs >= 2 buffers of a multiple of 4 KiB");
  }
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  ASYMNVM_RETURN_IF_ERROR(impl->Open());
  Status s = impl->StartReplication();
  if (s.ok()) s = impl->StartFabric();
  if (!s.ok()) {
    impl->Stop();
    return s;
  }
  if (impl->redo) {
    Impl* p = impl.get();
    impl->checkpointer = std::thread([p] { p->CheckpointLoop(); });
  }
  return std::unique_ptr<Backend>(new Backend(std::move(impl)));
}

Backend::Backend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Backend::~Backend() { Stop(); }
std::string Backend::address() const { return impl_->server->address(); }
std::string Backend::log_address() const { return impl_->receiver->address(); }
const Layout& Backend::layout() const { return impl_->layout; }
BackendStats Backend::stats() const { return impl_->Stats(); }
std::string Backend::StatusJson() const { return impl_->StatusJson(); }
const metrics::RequestMetrics& Backend::request_metrics() const { return impl_->request_metrics; }
void Backend::Stop() { impl_->Stop(); }
Status Backend::AddMirror(const std::string& address) {
  if (!impl_->repl) {
    return Status::FailedPrecondition("mirror " + address +
                                      ": this back-end was started without replication");
  }
  return impl_->repl->AddMirror(address);
}

std::vector<NamingEntry> Backend::NamingEntries() const { return impl_->naming->List(); }
std::vector<alloc::Extent> Backend::Extents() const { return impl_->allocator->Extents(); }
std::vector<uint64_t> Backend::PendingDeferredFrees() const {
  MutexLock dl(impl_->dfree_mu);
  std::vector<uint64_t> out;
  for (const auto& [addr, slot] : impl_->dfree_pending) out.push_back(addr);
  return out;
}
Status Backend::ForgetFrontend(uint64_t fe) {
  {
    MutexLock lock(impl_->mu);
    if (impl_->frontends.erase(fe) == 0) return Status::NotFound("front-end " + std::to_string(fe));
    impl_->epochs.erase(fe);
  }
  return impl_->naming->Remove("fe:" + std::to_string(fe));
}
Status Backend::FreeExtent(uint64_t addr) {
  MutexLock dl(impl_->dfree_mu);
  if (impl_->dfree_pending.count(addr) != 0) {
    return Status::FailedPrecondition("free of " + std::to_string(addr) +
                                      ": a deferred free of it is pending");
  }
  return impl_->allocator->Free(addr);
}

Status Backend::TEST_CrashAndClose(uint64_t seed, double keep, uint64_t* dropped_lines) {
  if (!impl_->pool || !impl_->pool->crash_sim()) {
    return Status::FailedPrecondition("backend: TEST_CrashAndClose needs a crash-simulation pool");
  }
  impl_->skip_final_checkpoint = true;
  impl_->Stop();
  Status s = impl_->pool->SimulateCrash(seed, keep, dropped_lines, nullptr);
  impl_->data_mr.reset();
  impl_->naming_mr.reset();
  impl_->server.reset();
  impl_->receiver.reset();
  impl_->pool.reset();  // writes the crashed state (copy == media now) to the file
  return s;
}

}  // namespace asymnvm::backend
