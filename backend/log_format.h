// AsymNVM log records (AsymNVM paper §4.2–4.3, Figure 3; byte layout in
// doc/backend.md §Log records): the operation log (one per update, persisted before the update
// returns) and the memory-log transaction (the redo log of a batch of updates: entries + commit +
// checksum). Both travel as Rowan b-log entries (or OQ requests); both are self-validating on
// their own, independent of the transport's checksums, so a back-end never applies a record that is
// not exactly what the front-end built.
//
// Addresses in memory logs are pool offsets (stable across restarts). An entry carries either the
// bytes to write ("inline") or a pointer into an operation log already persisted by the same
// front-end (op_seq + offset into its payload), which saves sending the same bytes twice (§4.3).
//
// Thread safety: pure functions; TxnBuilder is a value type for one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::backend {

inline constexpr uint32_t kOpLogMagic = 0x4C504F41;      // "AOPL"
inline constexpr uint32_t kTxnMagic = 0x4E585441;        // "ATXN"
inline constexpr uint32_t kTxnCommitMagic = 0x4D435854;  // "TXCM"
inline constexpr size_t kOpLogHeaderSize = 40;
inline constexpr size_t kTxnHeaderSize = 56;
inline constexpr size_t kTxnEntryHeaderSize = 16;
inline constexpr size_t kTxnCommitSize = 8;
inline constexpr uint32_t kMaxRecordSize = 64u << 20;
// Rowan entry type of an operation log in the back-end's b-log (the entry's owner is the
// front-end id, its version the op_seq).
inline constexpr uint16_t kOpLogRowanType = 1;

// An op_seq is (registration incarnation << 32) + a counter of that session, so a new session
// never reuses an op_seq of an earlier one; "inc:n" for log messages.
inline std::string OpSeqString(uint64_t op_seq) {
  return std::to_string(op_seq >> 32) + ":" + std::to_string(op_seq & 0xFFFFFFFFu);
}

struct OpLogRecord {
  uint64_t frontend_id = 0;
  uint64_t op_seq = 0;        // monotonic per front-end: (incarnation << 32) + n
  uint32_t structure_id = 0;  // naming-space slot of the structure the op belongs to
  uint16_t op_type = 0;       // structure-defined (insert, delete, push, ...)
  uint16_t flags = 0;
  std::span<const uint8_t> payload;  // operation parameters (key, value, ...)
};

std::vector<uint8_t> EncodeOpLog(const OpLogRecord& record);
// kCorruption (checksum, magic, lengths) or kInvalidArgument (shorter than a header). The
// returned payload points into `bytes`.
Result<OpLogRecord> DecodeOpLog(std::span<const uint8_t> bytes);

enum class MemLogKind : uint8_t { kInline = 0, kOpLogPointer = 1 };

struct MemLogEntry {
  uint64_t addr = 0;  // pool offset of the destination
  uint32_t len = 0;
  MemLogKind kind = MemLogKind::kInline;
  std::span<const uint8_t> data;  // kInline: `len` bytes
  uint64_t op_seq = 0;            // kOpLogPointer: the op log (same front-end) holding the bytes
  uint32_t op_offset = 0;         //                at this offset of its payload
};

struct TxnHeader {
  uint64_t frontend_id = 0;
  uint64_t txn_seq = 0;   // monotonic per front-end, from 1; the LPN after applying it
  uint64_t opn = 0;       // every op log with op_seq <= opn has its memory logs in txns <= txn_seq
  uint64_t seq_addr = 0;  // pool offset of the structure's reader sequence number (0 = none)
  uint32_t entry_count = 0;
  uint32_t total_len = 0;
};

struct TxnView {
  TxnHeader header;
  std::vector<MemLogEntry> entries;  // data spans point into the decoded bytes
};

// Builds one transaction. A write to exactly the same (addr, len) as an earlier entry coalesces
// into it (the later data wins, the entry keeps its position) only when no entry after it
// overlaps that range; otherwise it is appended. Entries are applied in order, so the last write
// to a byte always wins.
class TxnBuilder {
 public:
  void Write(uint64_t addr, std::span<const uint8_t> data);
  void WritePointer(uint64_t addr, uint32_t len, uint64_t op_seq, uint32_t op_offset);
  size_t entries() const { return entries_.size(); }
  size_t encoded_size() const;
  bool empty() const { return entries_.empty(); }
  // Encodes (header fields entry_count/total_len are filled in) and clears the builder.
  std::vector<uint8_t> Finish(uint64_t frontend_id, uint64_t txn_seq, uint64_t opn,
                              uint64_t seq_addr);
  void Clear();

 private:
  struct Pending {
    uint64_t addr;
    uint32_t len;
    MemLogKind kind;
    std::vector<uint8_t> data;
    uint64_t op_seq;
    uint32_t op_offset;
  };
  std::vector<Pending> entries_;
  // Un-indexes every entry overlapping [addr, addr + len).
  void DropOverlapping(uint64_t addr, uint32_t len);
  // (addr, len) → inline entry that no later entry overlaps (so patching it in place keeps
  // program order).
  std::map<std::pair<uint64_t, uint32_t>, size_t> index_;
  uint32_t max_len_ = 0;
};

// Validates checksum, magics, entry count, every length (nothing read beyond `bytes`), and the
// commit marker. kCorruption names what failed; the view's spans point into `bytes`.
Result<TxnView> DecodeTxn(std::span<const uint8_t> bytes);

// The header fields of bytes that start like a transaction (magic ATXN), WITHOUT checking the
// checksum or anything else: only for naming a record that failed DecodeTxn (a corrupt landed
// transaction: which front-end, which txn_seq — unverified). kCorruption when shorter than a
// header or the magic is not ATXN.
Result<TxnHeader> PeekTxnHeader(std::span<const uint8_t> bytes);

}  // namespace asymnvm::backend
