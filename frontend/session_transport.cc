// The transport side of a Session (frontend/session_impl.h): one-sided operations, op logs
// (synchronous or posted), memory-log transactions and their batch, the fence, the overlay that
// gives read-your-writes, and seqlock snapshot reads.
#include "frontend/session_impl.h"

namespace asymnvm::frontend {

Status Session::Impl::CloseOthers(uint32_t id) {
  if (opseq.empty()) return Status::Ok();
  for (uint32_t sid : opseq.OpenOthers(id)) {
    auto it = closers.find(sid);
    if (it == closers.end()) {
      return Status::FailedPrecondition("op log while structure " + std::to_string(sid) +
                                        " has an operation in progress (no closer registered)");
    }
    ASYMNVM_RETURN_IF_ERROR(it->second());
    if (opseq.HasOpen(sid)) {
      return Status::Internal("structure " + std::to_string(sid) + "'s closer left an op open");
    }
  }
  return Status::Ok();
}

Status Session::Impl::SnapshotRead(uint64_t addr, std::span<uint8_t> out) {
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

Result<std::vector<uint8_t>> Session::Impl::Call(uint16_t type, std::span<const uint8_t> payload) {
  std::vector<uint8_t> response;
  ASYMNVM_RETURN_IF_ERROR(oq->Call(0, type, payload, &response));
  return response;
}

Result<fabric::RegionDescriptor> Session::Impl::Target(uint64_t off, uint64_t len) const {
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
                                 std::to_string(len) + ") is outside the naming and data areas");
}

Status Session::Impl::PostWait(std::vector<fabric::WorkRequest>& wrs) {
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
                                       fabric::OpcodeName(comp[i].opcode) +
                                       " failed: " + fabric::CompletionStatusName(comp[i].status));
      }
      if (comp[i].wr_id == id) return Status::Ok();
    }
    if (Clock::now() > deadline) return Status::TimedOut("one-sided operation timed out");
  }
}

Status Session::Impl::RemoteReadRaw(uint64_t addr, std::span<uint8_t> out) {
  ASYMNVM_RETURN_IF_ERROR(RemoteReadUncounted(addr, out));
  c.remote_reads++;
  c.remote_read_bytes += out.size();
  return Status::Ok();
}

Status Session::Impl::RemoteReadUncounted(uint64_t addr, std::span<uint8_t> out) {
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
  return Status::Ok();
}

Status Session::Impl::RemoteWriteDurable(uint64_t addr, std::span<const uint8_t> data) {
  const size_t chunk = std::min<size_t>(kScratchBytes, max_message);
  for (size_t done = 0; done < data.size();) {
    const size_t n = std::min(chunk, data.size() - done);
    ASYMNVM_ASSIGN_OR_RETURN(auto t, Target(addr + done, n));
    std::memcpy(scratch.data(), data.data() + done, n);
    std::vector<fabric::WorkRequest> wrs(2);
    wrs[0].opcode = fabric::Opcode::kWrite;
    wrs[0].local_addr = scratch.data();
    wrs[0].length = static_cast<uint32_t>(n);
    wrs[0].local_mr = scratch_mr.get();
    wrs[0].remote_addr = t.addr;
    wrs[0].rkey = t.rkey;
    wrs[1].opcode = fabric::Opcode::kFlush;
    wrs[1].remote_addr = t.addr;
    wrs[1].rkey = t.rkey;
    ASYMNVM_RETURN_IF_ERROR(PostWait(wrs));
    done += n;
  }
  return Status::Ok();
}

void Session::Impl::Patch(uint64_t addr, std::span<uint8_t> out) {
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

bool Session::Impl::OwnsMemoryAt(uint64_t addr) const {
  const uint64_t ss = allocator->slab_size();
  for (uint64_t slab : allocator->Slabs()) {
    if (addr >= slab && addr < slab + ss) return true;
  }
  for (const auto& o : allocator->LargeObjects()) {
    if (addr >= o.addr && addr < o.addr + o.bytes) return true;
  }
  return false;
}

Status Session::Impl::RemoteRead(uint64_t addr, std::span<uint8_t> out) {
  // Inside a ReadConsistent body: a read not served by the snapshot (naming area, ReadRemote,
  // ReadWord) is fresh, so the body is not "all from the snapshot" — the word is read again.
  if (snap != nullptr) snap_missed = true;
  ASYMNVM_RETURN_IF_ERROR(RemoteReadRaw(addr, out));
  Patch(addr, out);
  return Status::Ok();
}

Result<uint64_t> Session::Impl::Cas(uint64_t addr, uint64_t expected, uint64_t desired) {
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

Status Session::Impl::CheckFenced() {
  ASYMNVM_RETURN_IF_ERROR(broken);
  if (!identity) return Status::Ok();
  Status s = identity->CheckLease();
  if (!s.ok()) broken = s.WithContext("front-end " + std::to_string(o.frontend_id));
  return broken;
}

Result<uint64_t> Session::Impl::SendOpLog(uint32_t structure, uint16_t type,
                                          std::span<const uint8_t> params) {
  backend::OpLogRecord rec;
  rec.frontend_id = o.frontend_id;
  rec.op_seq = opseq.next();
  rec.structure_id = structure;
  rec.op_type = type;
  rec.payload = params;
  const std::vector<uint8_t> bytes = backend::EncodeOpLog(rec);
  rowan::EntryMeta meta{kOpLogEntryType, static_cast<uint16_t>(o.frontend_id), rec.op_seq};
  if (log_cq) {
    ASYMNVM_RETURN_IF_ERROR(PostOpLog(meta, bytes));
  } else {
    ASYMNVM_RETURN_IF_ERROR(sender->Append(meta, bytes).WithContext("op log"));
  }
  c.op_logs++;
  c.op_log_bytes += bytes.size();
  return opseq.Take();
}

std::string Session::Impl::LogTarget() const {
  return o.op_log_address.empty() ? "the data back-end" : o.op_log_address;
}

Status Session::Impl::PostOpLog(const rowan::EntryMeta& meta, std::span<const uint8_t> bytes) {
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

Status Session::Impl::CollectLogAcks(bool wait, size_t keep) {
  if (!log_cq) return Status::Ok();
  ASYMNVM_RETURN_IF_ERROR(broken);
  const std::string target = LogTarget();
  auto deadline = Clock::now() + o.timeout;
  fabric::Completion comp[32];
  while (true) {
    const bool need = wait && log_inflight.size() > keep;
    Result<size_t> n =
        need ? log_cq->Wait(comp, std::chrono::milliseconds(100)) : log_cq->Poll(comp);
    if (!n.ok()) {
      broken = n.status().WithContext("async op log acknowledgements from " + target);
      return broken;
    }
    for (size_t i = 0; i < *n; i++) {
      if (comp[i].status != fabric::CompletionStatus::kSuccess) {
        broken = Status::ConnectionError(
            std::string("async op log to ") + target + ": " + fabric::OpcodeName(comp[i].opcode) +
            " " + fabric::CompletionStatusName(comp[i].status) + " (" +
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

Status Session::Impl::SendTxn(backend::TxnBuilder* b, uint64_t seq_addr, uint64_t opn) {
  ASYMNVM_RETURN_IF_ERROR(broken);
  const uint64_t seq = next_txn;
  opn = opseq.OpnToSend(opn);
  std::vector<uint8_t> bytes =
      b->Finish(o.frontend_id | uint64_t{incarnation} << 32, seq, opn, seq_addr);
  ASYMNVM_RETURN_IF_ERROR(ReapTxns(kTxnsInFlight - 1));
  auto posted = oq->SubmitAsync(0, backend::kTxn, bytes);
  if (!posted.ok()) {
    // The transaction may or may not have landed: later txn_seqs cannot be chosen safely.
    broken = posted.status().WithContext("transaction " + std::to_string(seq) + " outcome unknown");
    return broken;
  }
  txns_in_flight.emplace_back(seq, *posted);
  next_txn++;
  last_sent = seq;
  opseq.Sent(opn);
  c.txns++;
  c.txn_bytes += bytes.size();
  while (!unsent.empty() && unsent.front()->second.order <= batch_last_order) {
    unsent.front()->second.txn = seq;
    unsent.pop_front();
  }
  return Status::Ok();
}

Status Session::Impl::ReapTxns(size_t keep) {
  while (txns_in_flight.size() > keep) {
    const auto [seq, ticket] = txns_in_flight.front();
    txns_in_flight.pop_front();
    Status s = oq->AwaitSubmit(ticket);
    if (!s.ok()) {
      txns_in_flight.clear();  // dropped with the connection (a broken session reconnects anew)
      broken = s.WithContext("transaction " + std::to_string(seq) + " outcome unknown");
      return broken;
    }
  }
  return Status::Ok();
}

Status Session::Impl::FlushBatch() {
  if (batch.empty() && !opseq.OpnUnsent()) return Status::Ok();
  Status s = SendTxn(&batch, batch_seq_addr, opseq.opn());
  batch.Clear();
  batch_keys.clear();
  batch_ops = 0;
  batch_seq_addr = 0;
  return s;
}

Status Session::Impl::ReadRecord(uint64_t* lpn, uint64_t* opn, uint64_t* rejected, uint64_t* aux) {
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

Status Session::Impl::Fence() {
  ASYMNVM_RETURN_IF_ERROR(CollectLogAcks(true, 0));
  ASYMNVM_RETURN_IF_ERROR(FlushBatch());
  ASYMNVM_RETURN_IF_ERROR(ReapTxns(0));
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
      broken = Status::FailedPrecondition("fenced: front-end id " + std::to_string(o.frontend_id) +
                                          " was registered again " + "(incarnation " +
                                          std::to_string(aux >> 32) + ", this session's " +
                                          std::to_string(incarnation) +
                                          "); its transactions since are refused")
                   .WithSubCode(StatusSubCode::kFenced);
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
  ASYMNVM_RETURN_IF_ERROR(CheckFenced());
  // The frees queued behind those writes may go now (frontend/rpc_slab_source.h).
  return slabs ? slabs->IssueFrees(batch_last_order) : Status::Ok();
}

void Session::Impl::AddOverlay(uint64_t addr, std::span<const uint8_t> data, uint64_t txn) {
  auto it = overlay.emplace(addr, Pending{++overlay_order, txn, {data.begin(), data.end()}});
  if (txn == 0) unsent.push_back(it);
  overlay_size += data.size();
  overlay_max_len = std::max<uint64_t>(overlay_max_len, data.size());
}

Status Session::Impl::CheckData(uint64_t addr, size_t len) const {
  if (len == 0) return Status::InvalidArgument("memory log of 0 bytes");
  if (addr < data_begin || addr > data_end || len > data_end - addr) {
    return Status::InvalidArgument("memory log [" + std::to_string(addr) + ", +" +
                                   std::to_string(len) + ") is outside the data area [" +
                                   std::to_string(data_begin) + ", " + std::to_string(data_end) +
                                   ")");
  }
  if (EntryFootprint(len) + backend::kTxnHeaderSize + backend::kTxnCommitSize > max_txn) {
    return Status::ResourceExhausted("memory log of " + std::to_string(len) +
                                     " bytes exceeds the largest transaction (" +
                                     std::to_string(max_txn) + " bytes)");
  }
  return Status::Ok();
}

Status Session::Impl::MaybeTimer() {
  if (o.level == Level::kRcb && batch_ops > 0 && Clock::now() - batch_start >= o.batch_timeout) {
    return FlushBatch();
  }
  return Status::Ok();
}

}  // namespace asymnvm::frontend
