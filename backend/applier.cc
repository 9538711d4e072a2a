#include "backend/applier.h"

#include <atomic>
#include <cstring>
#include <optional>
#include <string>

namespace asymnvm::backend {
namespace {

bool InRange(uint64_t addr, uint64_t len, uint64_t begin, uint64_t end) {
  return addr >= begin && addr <= end && len <= end - addr;
}

std::string EntryName(size_t i, const MemLogEntry& e) {
  return "entry " + std::to_string(i) + " [" + std::to_string(e.addr) + ", +" +
         std::to_string(e.len) + ")";
}

}  // namespace

Status ValidateTxn(const TxnView& txn, const ApplyTarget& t, OpLogSource* op_logs) {
  if (t.base == nullptr || t.persister == nullptr || t.data_begin > t.data_end ||
      t.data_end > t.size) {
    return Status::InvalidArgument("apply: target has no mapping, no persister or a bad data area");
  }
  const uint64_t seq = txn.header.seq_addr;
  if (seq != 0 && (seq % 8 != 0 || !InRange(seq, 8, 0, t.size))) {
    return Status::RemoteAccessError("apply: sequence number address " + std::to_string(seq) +
                                     " is misaligned or outside the pool");
  }
  for (size_t i = 0; i < txn.entries.size(); i++) {
    const MemLogEntry& e = txn.entries[i];
    if (!InRange(e.addr, e.len, t.data_begin, t.data_end)) {
      return Status::RemoteAccessError("apply: " + EntryName(i, e) + " is outside the data area [" +
                                       std::to_string(t.data_begin) + ", " +
                                       std::to_string(t.data_end) + ")");
    }
    if (seq != 0 && e.addr < seq + 8 && seq < e.addr + e.len) {
      return Status::RemoteAccessError("apply: " + EntryName(i, e) +
                                       " overwrites the sequence number");
    }
    if (e.kind == MemLogKind::kOpLogPointer) {
      if (op_logs == nullptr) {
        return Status::NotFound("apply: " + EntryName(i, e) + " points to op log " +
                                std::to_string(e.op_seq) + " but no op-log source is attached");
      }
      auto payload = op_logs->Payload(txn.header.frontend_id & 0xFFFFFFFF, e.op_seq);
      if (!payload.ok()) return payload.status();
      if (!InRange(e.op_offset, e.len, 0, payload->size())) {
        return Status::Corruption("apply: " + EntryName(i, e) + " reads past op log " +
                                  std::to_string(e.op_seq) + " (" +
                                  std::to_string(payload->size()) + " payload bytes)");
      }
    }
  }
  return Status::Ok();
}

Result<ApplyStats> ApplyTxn(const TxnView& txn, const ApplyTarget& t, OpLogSource* op_logs) {
  ASYMNVM_RETURN_IF_ERROR(ValidateTxn(txn, t, op_logs));
  std::optional<std::atomic_ref<uint64_t>> seq;
  uint64_t before = 0;
  if (txn.header.seq_addr != 0) {
    seq.emplace(*reinterpret_cast<uint64_t*>(t.base + txn.header.seq_addr));
    before = seq->load(std::memory_order_relaxed);
    // Odd already: a previous application was cut short (crash); stay odd until this one is done.
    if (before % 2 == 0) seq->store(before + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
  }
  ApplyStats stats;
  for (const MemLogEntry& e : txn.entries) {
    const uint8_t* src = e.data.data();
    if (e.kind == MemLogKind::kOpLogPointer) {
      src = op_logs->Payload(txn.header.frontend_id & 0xFFFFFFFF, e.op_seq)->data() + e.op_offset;
    }
    if (e.len) {
      std::memcpy(t.base + e.addr, src, e.len);
      t.persister->Flush(t.base + e.addr, e.len);
    }
    stats.entries++;
    stats.bytes += e.len;
  }
  t.persister->Drain();
  if (seq) {
    seq->store((before | 1) + 1, std::memory_order_release);
    t.persister->Persist(t.base + txn.header.seq_addr, 8);
  }
  return stats;
}

uint64_t LoadSequence(const uint8_t* base, uint64_t seq_addr) {
  auto* word = reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(base) + seq_addr);
  return std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire);
}

}  // namespace asymnvm::backend
