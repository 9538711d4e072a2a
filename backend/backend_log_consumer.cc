// The op-log index (landings, live segments, fetch for a crashed front-end's recovery), the b-log
// consumer (digests used segments, recycles covered ones) and deferred frees (the persistent
// table and the lazy reclaimer) (file map: backend/backend_internal.h).
#include "backend/backend_internal.h"
#include "common/crash_point.h"
#include "common/logging.h"
#include "common/zero.h"
#include "fabric/rowan/scanner.h"

namespace asymnvm::backend {

Result<std::span<const uint8_t>> Backend::Impl::Payload(uint64_t fe, uint64_t op_seq)
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
  return Status::NotFound("op log " + OpSeqString(op_seq) + " of front-end " + std::to_string(fe) +
                          " is not in the b-log");
}

void Backend::Impl::IndexOpLog(std::span<const uint8_t> entry_payload)
    ASYMNVM_REQUIRES(op_logs_mu) {
  auto rec = DecodeOpLog(entry_payload);
  if (!rec.ok()) return;  // the consumer reports it when it digests the segment
  op_logs.try_emplace({rec->frontend_id, rec->op_seq}, rec->payload.begin(), rec->payload.end());
}

void Backend::Impl::IndexLanding(uint64_t offset, uint64_t length) {
  MutexLock l(op_logs_mu);
  IndexBlocks(base() + layout.rowan.offset + offset, length);
}

size_t Backend::Impl::IndexBlocks(const uint8_t* p, size_t length) ASYMNVM_REQUIRES(op_logs_mu) {
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
        if (part.count == h.block_count && part.blocks[h.block_seq].empty() && h.payload_len > 0) {
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

void Backend::Impl::IndexLiveSegments(bool full) {
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

uint8_t* Backend::Impl::DeferredFreeSlotAt(uint32_t slot) {
  return base() + kBackendHeaderOffset + kDeferredFreeTableOffset + slot * kDeferredFreeSlotSize;
}

void Backend::Impl::WriteDeferredFreeSlot(uint32_t slot, uint64_t addr) ASYMNVM_REQUIRES(dfree_mu) {
  uint8_t* p = DeferredFreeSlotAt(slot);
  EncodeDeferredFree(slot, addr, p);
  persister()->Persist(p, kDeferredFreeSlotSize);
  dfree_used[slot] = addr != 0;
}

void Backend::Impl::LoadDeferredFrees() {
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

Status Backend::Impl::RecordDeferredFree(uint64_t addr, bool recovering) {
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

std::vector<FetchedOp> Backend::Impl::FetchOpLogs(uint64_t fe, uint64_t after, uint64_t before,
                                                  bool* more) {
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

void Backend::Impl::ConsumeLog() {
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

void Backend::Impl::RecycleCovered() {
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

uint64_t Backend::Impl::CoveredOpn(uint64_t fe) const ASYMNVM_REQUIRES(mu) {
  if (redo) {  // only a durable checkpoint makes an OPN durable
    auto c = ckpt_opn.find(fe);
    return c == ckpt_opn.end() ? 0 : c->second;
  }
  auto it = frontends.find(fe);
  return it == frontends.end() ? 0 : Word(base(), it->second.lock_addr).load();
}

void Backend::Impl::ReclaimDue() {
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
}  // namespace asymnvm::backend
