// Rowan sender: Append(entry) = SEND of each block + FLUSH in one doorbell; returns once the
// receiver's NIC acknowledged the landing and its persistence (Rowan paper §3.2).
//
// Two ways to append:
//  * Append: blocking, one entry at a time; needs the Sender's own CQ (SenderOptions::cq null).
//  * PostAppend: non-blocking, for drivers that keep appends of many senders in flight from one
//    thread (the bench drives 144 streams from 2 threads this way). The caller passes a CQ in
//    SenderOptions::cq shared by its senders, polls it itself and matches completions with
//    IsAck(). Blocks go inline (each block <= SenderOptions::max_inline), so no buffer outlives
//    the call.
//
// Thread safety: Append/PostAppend are serialized internally; for parallelism use one Sender per
// thread (each is its own connection, as the paper's per-worker QPs). Polling a shared CQ follows
// the fabric's rule: one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/status.h"
#include "common/thread_annotations.h"
#include "fabric/rowan/entry.h"

namespace asymnvm::rowan {

struct SenderOptions {
  fabric::Fabric* fabric = nullptr;         // required
  fabric::ProtectionDomain* pd = nullptr;   // required
  std::string address;                      // the receiver's
  std::chrono::milliseconds timeout{5000};  // per append
  // RNR (no posted segment: the receiver's consumer has not re-posted yet) is back-pressure, not a
  // failure: verbs treats 7 as "retry forever"; the soft fabric counts holds (50 µs << attempt,
  // ended early when a segment is posted), so 17 allows ~6.5 s of a starved consumer (a loaded
  // machine) before the append fails. With 7 (~6 ms) writers failed with RnrRetryExceeded on a
  // busy 2-core machine.
  uint32_t rnr_retry = 17;
  // Optional: a CQ shared with other senders (the caller polls it); then only PostAppend may be
  // used. Must outlive the Sender. Null: the Sender creates its own.
  fabric::CompletionQueue* cq = nullptr;
  uint32_t max_inline = 256;   // PostAppend: largest block sent inline
  uint32_t max_send_wr = 256;  // outstanding work requests on the connection (2 per 1-block append)
};

class Sender {
 public:
  static Result<std::unique_ptr<Sender>> Connect(const SenderOptions& options);
  // Errors: kInvalidArgument (type 0, entry larger than a segment), kConnectionError /
  // kRnrRetryExceeded / kTimedOut from the fabric — then the entry may or may not have landed
  // (the scanner tolerates a retry: same (owner, version) is yielded once).
  // kFailedPrecondition when the Sender was built on a shared CQ.
  Status Append(const EntryMeta& meta, std::span<const uint8_t> payload);
  // Posts the entry's blocks (unsignaled SENDs, inline) and a signaled FLUSH in one doorbell and
  // returns at once. The entry is acknowledged (landed and persisted) when the CQ yields a
  // completion c with IsAck(c, token). A completion of this connection with an error status means
  // the connection failed; entries not acknowledged may or may not have landed.
  // Errors: kInvalidArgument (type 0, a block larger than max_inline), kResourceExhausted (more
  // than max_send_wr requests outstanding), kConnectionError (connection failed earlier).
  Status PostAppend(const EntryMeta& meta, std::span<const uint8_t> payload, uint64_t token);
  bool IsAck(const fabric::Completion& c, uint64_t token) const {
    return c.connection_id == conn_->id() && c.wr_id == token && c.opcode == fabric::Opcode::kFlush;
  }
  const fabric::Connection& connection() const { return *conn_; }
  size_t mtu() const { return mtu_; }

 private:
  Sender() = default;
  Mutex mu_;
  SenderOptions o_;
  size_t mtu_ = kDefaultMtu;
  size_t segment_size_ = 0;
  fabric::RegionDescriptor flush_target_;
  std::unique_ptr<fabric::CompletionQueue> own_cq_;
  fabric::CompletionQueue* cq_ = nullptr;
  std::unique_ptr<fabric::Connection> conn_;
  std::vector<uint8_t> buf_ ASYMNVM_GUARDED_BY(mu_);
  std::unique_ptr<fabric::MemoryRegion> mr_ ASYMNVM_GUARDED_BY(mu_);
  std::vector<fabric::WorkRequest> wrs_ ASYMNVM_GUARDED_BY(mu_);
  uint64_t next_wr_ ASYMNVM_GUARDED_BY(mu_) = 1;
};

}  // namespace asymnvm::rowan
