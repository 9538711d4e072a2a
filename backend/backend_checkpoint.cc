// Redo-log mode (a pool that is not PM; doc/backend.md §Disk-durable mode): the checkpoint
// record, its restore at open, checkpoints and the background checkpointer (file map:
// backend/backend_internal.h).
#include "backend/backend_internal.h"
#include "common/checksum.h"
#include "common/coding.h"
#include "common/crash_point.h"
#include "common/logging.h"
#include "fabric/oq/wire.h"

namespace asymnvm::backend {
namespace {

// ---- redo-log mode (doc/backend.md §Disk-durable mode) ----
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

}  // namespace

uint8_t* Backend::Impl::CkptSlot(uint64_t seq) {
  return base() + kCkptSlotOffset + kCkptSlotSize * (seq % 2);
}

uint64_t Backend::Impl::OqAreaRte() {
  const uint8_t* h = base() + layout.oq.offset;
  if (std::all_of(h, h + 32, [](uint8_t b) { return b == 0; })) return 0;
  uint64_t rte = 0;
  return oq::wire::DecodeWord(GetLe64(h + 64), &rte) ? rte : 0;
}

Status Backend::Impl::RestoreCheckpoint() {
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

Status Backend::Impl::Checkpoint(uint64_t rte_floor) {
  MutexLock cl(ckpt_mu);
  return CheckpointLocked(rte_floor);
}

Status Backend::Impl::CheckpointLocked(uint64_t rte_floor) ASYMNVM_REQUIRES(ckpt_mu) {
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

void Backend::Impl::RetireCheckpointRecord() {
  MutexLock cl(ckpt_mu);
  if (!ckpt_active) return;
  CkptRecord r{ckpt_seq + 1, 0, 0, NowNs()};
  EncodeCkpt(r, CkptSlot(r.seq));
  persister()->Persist(CkptSlot(r.seq), kCkptSlotSize);
  ckpt_seq = r.seq;
  ckpt_active = false;
}

void Backend::Impl::BeforeRecycle(uint64_t rte) {
  if (!redo) {
    RetireCheckpointRecord();
    return;
  }
  Status s = Checkpoint(rte);
  if (!s.ok()) LOG_ERROR("backend", "checkpoint: " << s.ToString());
}

void Backend::Impl::CheckpointIfTxnsSince() {
  {
    MutexLock lock(mu);
    if (counters.txns_applied == ckpt_txns) return;
  }
  Status s = Checkpoint(0);
  if (!s.ok()) LOG_ERROR("backend", "checkpoint: " << s.ToString());
}

void Backend::Impl::CheckpointLoop() {
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
}  // namespace asymnvm::backend
