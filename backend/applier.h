// Applies validated memory-log transactions to the data area of a back-end pool
// (AsymNVM paper §4.3 and §6.3, Algorithm 2's Write_Begin/Write_End).
//
// Every check happens before the first byte is written: each entry must lie inside the data area
// (no overflow), a pointer entry must name an op log of the same front-end whose payload holds the
// range, and the sequence number word must be 8-byte aligned inside the pool. A transaction that
// fails any check is not applied at all and the caller reports the returned Status to its
// front-end. While entries are applied the structure's sequence number is odd (readers retry); the
// written ranges are persisted before it becomes even again. Applying the same transaction twice
// leaves the same bytes (redo semantics), which recovery relies on.
//
// Thread safety: ApplyTxn calls for transactions touching disjoint data may run concurrently; the
// caller serializes transactions of one structure (log order).
#pragma once

#include <cstdint>
#include <span>

#include "asymnvm/pm.h"
#include "asymnvm/status.h"
#include "backend/log_format.h"

namespace asymnvm::backend {

struct ApplyTarget {
  uint8_t* base = nullptr;  // the pool mapping; addresses are offsets from it
  uint64_t size = 0;        // bytes mapped
  uint64_t data_begin = 0;  // memory logs may write only [data_begin, data_end)
  uint64_t data_end = 0;
  pm::Persister* persister = nullptr;
};

// Finds the payload of a persisted operation log (for pointer entries).
class OpLogSource {
 public:
  virtual ~OpLogSource() = default;
  // kNotFound when the back-end holds no such op log.
  virtual Result<std::span<const uint8_t>> Payload(uint64_t frontend_id, uint64_t op_seq) = 0;
};

struct ApplyStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;
};

// kInvalidArgument (bad target), kRemoteAccessError (entry outside the data area, misaligned or
// out-of-pool seq_addr), kNotFound / kCorruption (pointer entry without a matching op log, or a
// range beyond its payload). Nothing is written unless OK.
Status ValidateTxn(const TxnView& txn, const ApplyTarget& target, OpLogSource* op_logs);
Result<ApplyStats> ApplyTxn(const TxnView& txn, const ApplyTarget& target, OpLogSource* op_logs);

// Reader side of the seqlock on a local mapping (tests, `asymnvm-ctl check`): returns the word.
uint64_t LoadSequence(const uint8_t* base, uint64_t seq_addr);

}  // namespace asymnvm::backend
