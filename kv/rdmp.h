// RDMP-KV's server-bypass data path (the RDMP-KV paper §III, doc/kv.md §RDMP): the server exposes
// its t-log area to clients as one registered PM region; a client writes a large PUT's value and
// persist flag straight into a slot the server reserved for it, and reads a large GET's entry
// one-sidedly, without the server's CPU.
//
// BypassTarget (server): the region, a listener for clients' bypass connections and the
// reservations made over them. A reservation belongs to the connection that will write it; when
// it is not published within `reservation_timeout`, or the connection fails, the target first
// closes that connection — so no late write from it can land — and only then settles its slots
// (Store::Settle: published if the persist flag is set, abandoned otherwise).
//
// BypassChannel (client): one connection to a BypassTarget with a registered staging buffer; one
// thread at a time.
//
// A bypass connection is named by a random 64-bit token the client sends in the handshake (a
// token already in use is refused); reservations name it.
//
// Thread safety: BypassTarget methods from any thread. BypassChannel: one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "asymnvm/status.h"
#include "common/thread_annotations.h"

namespace asymnvm::kv {

struct BypassTargetOptions {
  fabric::Fabric* fabric = nullptr;        // required
  fabric::ProtectionDomain* pd = nullptr;  // required
  std::string listen_address = "tcp://127.0.0.1:0";
  uint8_t* base = nullptr;  // the t-log area (required)
  size_t length = 0;
  pm::Persister* persister = nullptr;  // required: what a client's FLUSH persists through
  std::chrono::milliseconds reservation_timeout{10000};
  // Ends a reservation whose connection is closed (Store::Settle).
  std::function<void(uint64_t log_offset)> settle;
};

struct BypassTargetStats {
  uint64_t connections = 0;  // accepted so far
  uint64_t reservations = 0;
  uint64_t revoked = 0;  // connections closed because a reservation expired
  uint64_t settled = 0;  // reservations ended without a publish
};

class BypassTarget {
 public:
  // Errors: kInvalidArgument (options), fabric errors (RegisterMemory, Listen).
  static Result<std::unique_ptr<BypassTarget>> Start(const BypassTargetOptions& o);
  ~BypassTarget();  // Stop()

  std::string address() const;
  fabric::RegionDescriptor region() const;
  // Records that the client holding bypass connection `token` will write the slot at
  // `log_offset`. kFailedPrecondition when the token names no live connection (the caller must
  // then not hand out the slot: reconnect and reserve again).
  Status Track(uint64_t token, uint64_t log_offset);
  // The slot was published (or will not be written): forget it.
  void Untrack(uint64_t log_offset);
  // Revokes connections with an expired reservation or that failed, then settles their slots.
  // Runs on the target's own thread every 100 ms; callable directly (tests).
  void Reap();
  BypassTargetStats stats() const;
  void Stop();  // idempotent

 private:
  struct Peer {
    std::unique_ptr<fabric::Connection> conn;
    std::set<uint64_t> slots;
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  };
  explicit BypassTarget(const BypassTargetOptions& o) : o_(o) {}
  void AcceptLoop();

  BypassTargetOptions o_;
  std::unique_ptr<fabric::MemoryRegion> mr_;
  std::unique_ptr<fabric::CompletionQueue> cq_;
  std::unique_ptr<fabric::Listener> listener_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Peer> peers_ ASYMNVM_GUARDED_BY(mu_);           // by token
  std::map<uint64_t, uint64_t> slot_owner_ ASYMNVM_GUARDED_BY(mu_);  // log offset -> token
  bool stopping_ ASYMNVM_GUARDED_BY(mu_) = false;
  std::thread acceptor_, reaper_;
  std::atomic<uint64_t> accepted_{0}, reservations_{0}, revoked_{0}, settled_{0};
};

class BypassChannel {
 public:
  // buffer: the largest WRITE or READ this channel carries.
  static Result<std::unique_ptr<BypassChannel>> Connect(
      fabric::Fabric* fabric, fabric::ProtectionDomain* pd, const std::string& address,
      const fabric::RegionDescriptor& region, size_t buffer, std::chrono::milliseconds timeout);
  uint64_t token() const { return token_; }
  const fabric::RegionDescriptor& region() const { return region_; }
  // WRITE `data` at region offset `offset`, then FLUSH (one doorbell); returns when the FLUSH
  // completed: the bytes are durable in the target's PM.
  Status WriteDurable(uint64_t offset, std::span<const uint8_t> data);
  // The server-bypass PUT's writes in one doorbell: WRITE value at value_offset, FLUSH, WRITE the
  // 8-byte flag word at flag_offset, FLUSH. The fabric executes a connection's requests at the
  // target in posting order and a FLUSH persists what landed before it, so the flag lands only
  // after the value is durable (doc/fabric.md). Returns when the last FLUSH completed.
  Status WriteValueThenFlag(uint64_t value_offset, std::span<const uint8_t> value,
                            uint64_t flag_offset, uint64_t flag_word);
  // READ `length` bytes at region offset `offset` into the channel's buffer.
  Result<std::span<const uint8_t>> Read(uint64_t offset, size_t length);
  bool broken() const { return broken_; }
  uint64_t doorbells() const { return doorbells_; }  // Posts so far
  fabric::Counters counters() const { return conn_->counters(); }

 private:
  BypassChannel() = default;
  // A request on the registered buffer (`local` inside it, or null) at region offset `offset`
  // (a FLUSH names the region's first byte).
  fabric::WorkRequest Op(fabric::Opcode op, uint8_t* local, size_t length, uint64_t offset) const;
  Status PostAndComplete(std::span<const fabric::WorkRequest> wrs);
  Status Complete(size_t n);

  std::unique_ptr<fabric::CompletionQueue> cq_;
  std::unique_ptr<fabric::Connection> conn_;
  std::unique_ptr<fabric::MemoryRegion> mr_;
  std::unique_ptr<uint8_t[]> buf_;
  size_t buf_size_ = 0;
  fabric::RegionDescriptor region_;
  uint64_t token_ = 0;
  bool broken_ = false;
  uint64_t doorbells_ = 0;
  std::chrono::milliseconds timeout_{5000};
};

}  // namespace asymnvm::kv
