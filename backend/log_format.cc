#include "backend/log_format.h"

#include <cstring>
#include <string>

#include "common/checksum.h"
#include "common/coding.h"

namespace asymnvm::backend {
namespace {

constexpr uint16_t kTxnVersion = 1;
constexpr size_t kPointerBodySize = 16;

size_t Pad8(size_t n) { return (n + 7) & ~size_t{7}; }

size_t EntryFootprint(MemLogKind kind, uint32_t len) {
  return kTxnEntryHeaderSize + (kind == MemLogKind::kInline ? Pad8(len) : kPointerBodySize);
}

TxnHeader ReadTxnHeader(const uint8_t* p) {
  TxnHeader h;
  h.frontend_id = GetLe64(p + 8);
  h.txn_seq = GetLe64(p + 16);
  h.opn = GetLe64(p + 24);
  h.seq_addr = GetLe64(p + 32);
  h.entry_count = GetLe32(p + 40);
  h.total_len = GetLe32(p + 44);
  return h;
}

}  // namespace

std::vector<uint8_t> EncodeOpLog(const OpLogRecord& r) {
  std::vector<uint8_t> out(kOpLogHeaderSize + r.payload.size(), 0);
  uint8_t* p = out.data();
  PutLe32(p + 4, kOpLogMagic);
  PutLe64(p + 8, r.frontend_id);
  PutLe64(p + 16, r.op_seq);
  PutLe32(p + 24, r.structure_id);
  PutLe16(p + 28, r.op_type);
  PutLe16(p + 30, r.flags);
  PutLe32(p + 32, static_cast<uint32_t>(r.payload.size()));
  if (!r.payload.empty()) std::memcpy(p + kOpLogHeaderSize, r.payload.data(), r.payload.size());
  PutLe32(p, Crc32c(p + 4, out.size() - 4));
  return out;
}

Result<OpLogRecord> DecodeOpLog(std::span<const uint8_t> bytes) {
  if (bytes.size() < kOpLogHeaderSize) {
    return Status::InvalidArgument("op log: " + std::to_string(bytes.size()) +
                                   " bytes is shorter than its header");
  }
  const uint8_t* p = bytes.data();
  if (GetLe32(p + 4) != kOpLogMagic) return Status::Corruption("op log: bad magic");
  const uint32_t len = GetLe32(p + 32);
  if (len > bytes.size() - kOpLogHeaderSize) {
    return Status::Corruption("op log: payload length " + std::to_string(len) + " exceeds the " +
                              std::to_string(bytes.size()) + "-byte record");
  }
  if (GetLe32(p) != Crc32c(p + 4, kOpLogHeaderSize - 4 + len)) {
    return Status::Corruption("op log: checksum mismatch");
  }
  // Bytes 36..39 are reserved and written as zero; a record with them set was not written by
  // this format (found by log_format_fuzz: such a record decoded but did not re-encode to itself).
  if (GetLe32(p + 36) != 0) return Status::Corruption("op log: reserved header bytes are not zero");
  OpLogRecord r;
  r.frontend_id = GetLe64(p + 8);
  r.op_seq = GetLe64(p + 16);
  r.structure_id = GetLe32(p + 24);
  r.op_type = GetLe16(p + 28);
  r.flags = GetLe16(p + 30);
  r.payload = bytes.subspan(kOpLogHeaderSize, len);
  return r;
}

void TxnBuilder::Write(uint64_t addr, std::span<const uint8_t> data) {
  const auto key = std::make_pair(addr, static_cast<uint32_t>(data.size()));
  if (auto it = index_.find(key); it != index_.end()) {
    // A repeated empty write has nothing to copy (memcpy of null pointers is undefined even for 0
    // bytes; found by log_format_fuzz under UBSan).
    if (!data.empty()) std::memcpy(entries_[it->second].data.data(), data.data(), data.size());
    return;
  }
  // Entries this write overlaps can no longer be patched in place: a later write of their range
  // must append (and win by order), or it would be overwritten by this one at apply time.
  DropOverlapping(addr, static_cast<uint32_t>(data.size()));
  index_.emplace(key, entries_.size());
  max_len_ = std::max<uint32_t>(max_len_, static_cast<uint32_t>(data.size()));
  entries_.push_back(Pending{addr, static_cast<uint32_t>(data.size()), MemLogKind::kInline,
                             std::vector<uint8_t>(data.begin(), data.end()), 0, 0});
}

void TxnBuilder::WritePointer(uint64_t addr, uint32_t len, uint64_t op_seq, uint32_t op_offset) {
  // A pointer entry overrides an earlier inline write of the same range: drop the index so a later
  // inline write appends (and wins by order) instead of patching the superseded one.
  DropOverlapping(addr, len);
  entries_.push_back(Pending{addr, len, MemLogKind::kOpLogPointer, {}, op_seq, op_offset});
}

void TxnBuilder::DropOverlapping(uint64_t addr, uint32_t len) {
  const uint64_t from = addr > max_len_ ? addr - max_len_ : 0;
  auto it = index_.lower_bound({from, 0});
  while (it != index_.end() && it->first.first < addr + len) {
    if (it->first.first + it->first.second > addr) {
      it = index_.erase(it);
    } else {
      ++it;
    }
  }
}

size_t TxnBuilder::encoded_size() const {
  size_t n = kTxnHeaderSize + kTxnCommitSize;
  for (const auto& e : entries_) n += EntryFootprint(e.kind, e.len);
  return n;
}

void TxnBuilder::Clear() {
  entries_.clear();
  index_.clear();
  max_len_ = 0;
}

std::vector<uint8_t> TxnBuilder::Finish(uint64_t frontend_id, uint64_t txn_seq, uint64_t opn,
                                        uint64_t seq_addr) {
  std::vector<uint8_t> out(encoded_size(), 0);
  uint8_t* p = out.data();
  PutLe32(p + 4, kTxnMagic);
  PutLe64(p + 8, frontend_id);
  PutLe64(p + 16, txn_seq);
  PutLe64(p + 24, opn);
  PutLe64(p + 32, seq_addr);
  PutLe32(p + 40, static_cast<uint32_t>(entries_.size()));
  PutLe32(p + 44, static_cast<uint32_t>(out.size()));
  PutLe16(p + 48, kTxnVersion);
  size_t off = kTxnHeaderSize;
  for (const auto& e : entries_) {
    PutLe64(p + off, e.addr);
    PutLe32(p + off + 8, e.len);
    p[off + 12] = static_cast<uint8_t>(e.kind);
    if (e.kind == MemLogKind::kInline) {
      if (e.len) std::memcpy(p + off + kTxnEntryHeaderSize, e.data.data(), e.len);
    } else {
      PutLe64(p + off + kTxnEntryHeaderSize, e.op_seq);
      PutLe32(p + off + kTxnEntryHeaderSize + 8, e.op_offset);
    }
    off += EntryFootprint(e.kind, e.len);
  }
  PutLe32(p + off, kTxnCommitMagic);
  PutLe32(p + off + 4, static_cast<uint32_t>(entries_.size()));
  PutLe32(p, Crc32c(p + 4, out.size() - 4));
  Clear();
  return out;
}

Result<TxnView> DecodeTxn(std::span<const uint8_t> bytes) {
  if (bytes.size() < kTxnHeaderSize + kTxnCommitSize) {
    return Status::Corruption("memory-log txn: " + std::to_string(bytes.size()) +
                              " bytes cannot hold a header and a commit record");
  }
  const uint8_t* p = bytes.data();
  if (GetLe32(p + 4) != kTxnMagic) return Status::Corruption("memory-log txn: bad magic");
  const uint32_t total = GetLe32(p + 44);
  if (total < kTxnHeaderSize + kTxnCommitSize || total > bytes.size() || total > kMaxRecordSize) {
    return Status::Corruption("memory-log txn: total length " + std::to_string(total) +
                              " impossible for a " + std::to_string(bytes.size()) + "-byte record");
  }
  if (GetLe32(p) != Crc32c(p + 4, total - 4)) {
    return Status::Corruption("memory-log txn: checksum mismatch");
  }
  if (GetLe16(p + 48) != kTxnVersion) {
    return Status::Corruption("memory-log txn: unknown version " + std::to_string(GetLe16(p + 48)));
  }
  TxnView v;
  v.header = ReadTxnHeader(p);
  const size_t end = total - kTxnCommitSize;
  size_t off = kTxnHeaderSize;
  if (v.header.entry_count > (end - off) / kTxnEntryHeaderSize) {
    return Status::Corruption("memory-log txn: entry count " +
                              std::to_string(v.header.entry_count) + " does not fit");
  }
  v.entries.reserve(v.header.entry_count);
  for (uint32_t i = 0; i < v.header.entry_count; i++) {
    if (end - off < kTxnEntryHeaderSize) {
      return Status::Corruption("memory-log txn: entry " + std::to_string(i) + " truncated");
    }
    MemLogEntry e;
    e.addr = GetLe64(p + off);
    e.len = GetLe32(p + off + 8);
    const uint8_t kind = p[off + 12];
    if (kind > static_cast<uint8_t>(MemLogKind::kOpLogPointer)) {
      return Status::Corruption("memory-log txn: entry " + std::to_string(i) + " has kind " +
                                std::to_string(kind));
    }
    e.kind = static_cast<MemLogKind>(kind);
    const size_t body = e.kind == MemLogKind::kInline ? Pad8(e.len) : kPointerBodySize;
    if (body > end - off - kTxnEntryHeaderSize) {
      return Status::Corruption("memory-log txn: entry " + std::to_string(i) + " of " +
                                std::to_string(e.len) + " bytes runs past the commit record");
    }
    if (e.kind == MemLogKind::kInline) {
      e.data = bytes.subspan(off + kTxnEntryHeaderSize, e.len);
    } else {
      e.op_seq = GetLe64(p + off + kTxnEntryHeaderSize);
      e.op_offset = GetLe32(p + off + kTxnEntryHeaderSize + 8);
      // The bytes come from one op log's payload, which no record larger than kMaxRecordSize
      // holds (found by log_format_fuzz: a 1 GiB pointer entry decoded).
      if (e.len > kMaxRecordSize || e.op_offset > kMaxRecordSize - e.len) {
        return Status::Corruption("memory-log txn: pointer entry " + std::to_string(i) + " of " +
                                  std::to_string(e.len) + " bytes at payload offset " +
                                  std::to_string(e.op_offset) + " exceeds the largest op log");
      }
    }
    off += kTxnEntryHeaderSize + body;
    v.entries.push_back(e);
  }
  if (off != end) {
    return Status::Corruption("memory-log txn: " + std::to_string(end - off) +
                              " stray bytes before the commit record");
  }
  if (GetLe32(p + off) != kTxnCommitMagic || GetLe32(p + off + 4) != v.header.entry_count) {
    return Status::Corruption("memory-log txn: commit record missing or does not match");
  }
  return v;
}

Result<TxnHeader> PeekTxnHeader(std::span<const uint8_t> bytes) {
  if (bytes.size() < kTxnHeaderSize) {
    return Status::Corruption("memory-log txn: " + std::to_string(bytes.size()) +
                              " bytes cannot hold a header");
  }
  if (GetLe32(bytes.data() + 4) != kTxnMagic) {
    return Status::Corruption("memory-log txn: bad magic");
  }
  return ReadTxnHeader(bytes.data());
}

}  // namespace asymnvm::backend
