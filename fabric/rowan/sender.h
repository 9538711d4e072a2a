// Rowan sender: Append(entry) = SEND of each block + FLUSH in one doorbell; returns once the
// receiver's NIC acknowledged the landing and its persistence (papers/rowan-osdi23.txt §3.2).
//
// Thread safety: Append is serialized internally; for parallelism use one Sender per thread (each
// is its own connection, as the paper's per-worker QPs).
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
#include "fabric/rowan/entry.h"

namespace asymnvm::rowan {

struct SenderOptions {
  fabric::Fabric* fabric = nullptr;        // required
  fabric::ProtectionDomain* pd = nullptr;  // required
  std::string address;                     // the receiver's
  std::chrono::milliseconds timeout{5000};  // per append
  uint32_t rnr_retry = 7;
};

class Sender {
 public:
  static Result<std::unique_ptr<Sender>> Connect(const SenderOptions& options);
  // Errors: kInvalidArgument (type 0, entry larger than a segment), kConnectionError /
  // kRnrRetryExceeded / kTimedOut from the fabric — then the entry may or may not have landed
  // (the scanner tolerates a retry: same (owner, version) is yielded once).
  Status Append(const EntryMeta& meta, std::span<const uint8_t> payload);
  const fabric::Connection& connection() const { return *conn_; }
  size_t mtu() const { return mtu_; }

 private:
  Sender() = default;
  std::mutex mu_;
  SenderOptions o_;
  size_t mtu_ = kDefaultMtu;
  size_t segment_size_ = 0;
  fabric::RegionDescriptor flush_target_;
  std::unique_ptr<fabric::CompletionQueue> cq_;
  std::unique_ptr<fabric::Connection> conn_;
  std::vector<uint8_t> buf_;
  std::unique_ptr<fabric::MemoryRegion> mr_;
  std::vector<fabric::WorkRequest> wrs_;
  uint64_t next_wr_ = 1;
};

}  // namespace asymnvm::rowan
