// The replication baselines of the Rowan paper §6.1 in the same server (doc/kv.md §Baselines):
// how a primary makes a write durable on its backups, one switch (`--replication`).
//
//   rowan   Rowan SEND + FLUSH into the backup's one b-log (kv/cluster.cc; the default)
//   rpc     RPC-KV: the entry goes by two-sided SEND; a backup thread (one of `threads`, each
//           with its own remote log) copies it into its log, persists it and replies
//   rwrite  RWrite-KV (FaRM): one-sided WRITE into a log the backup reserved for this (sender
//           server, sender worker), then FLUSH; (servers − 1) × workers logs per backup
//   batch   Batch-KV: rwrite, but a worker stages its entries per backup and WRITEs them (with
//           a FLUSH, one doorbell) once 256 B (one XPLine) are staged, the rest at the end of
//           its batch of requests (before any reply leaves)
//   share   Share-KV: the workers of a sender server share one log per backup, reserving space
//           in it with a local atomic (a mutex), each then WRITE + FLUSH on its own connection
//
// Every non-rowan variant lands in the same *remote-log area* of the backup's pool (the part of
// the b-log area after a 4 MiB Rowan b-log kept for catch-up): a 4 KiB slot table and fixed-size
// rings. Ring records are self-validating (CRC32C, the ring's generation, their logical
// position); a digest thread applies them in ring order (Store::ApplyReplica) and persists the
// ring's head, which senders READ when the ring looks full. Promotion and start-up apply every
// valid record at or after the head wherever it lies (holes of Share included). Layouts:
// doc/kv.md §Baselines.
//
// Thread safety: RemoteLogs is internally synchronized. A RemoteLogSender is used by one thread
// at a time (its worker); the SharedRing of share mode is shared by the workers (internal mutex).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/kv.h"
#include "asymnvm/pm.h"
#include "asymnvm/status.h"
#include "common/thread_annotations.h"

namespace asymnvm::kv {

enum class ReplicationMode : uint32_t { kRowan = 0, kRpc = 1, kRWrite = 2, kBatch = 3, kShare = 4 };
const char* ReplicationModeName(ReplicationMode m);
// "rowan" | "rpc" | "rwrite" | "batch" | "share"; kInvalidArgument otherwise.
Result<ReplicationMode> ParseReplicationMode(std::string_view name);

namespace remotelog {
inline constexpr size_t kTableBytes = 4096;
inline constexpr size_t kSlotBytes = 64;
inline constexpr size_t kMaxSlots = kTableBytes / kSlotBytes;
inline constexpr size_t kRecordHeader = 32;
// Largest payload: one entry with a maximal key and value (a batch request is far smaller).
inline constexpr size_t kMaxPayload = 48 + kMaxKeySize + kMaxValueSize;
inline constexpr size_t kMaxRecord = (kRecordHeader + kMaxPayload + 63) / 64 * 64;
inline constexpr size_t kRingBytes = 1280u << 10;  // 1.25 MiB: one maximal record fits
inline constexpr size_t kRowanPart = 4u << 20;     // b-log kept for catch-up in baseline modes
inline constexpr size_t kBatchBytes = 256;         // Batch-KV posts once an XPLine is staged
inline constexpr size_t RecordFootprint(size_t payload) {
  return (kRecordHeader + payload + 63) / 64 * 64;
}
}  // namespace remotelog

// Backup side: the remote-log area, its listener, digest thread and (rpc) backup threads.
struct RemoteLogsOptions {
  fabric::Fabric* fabric = nullptr;
  fabric::ProtectionDomain* pd = nullptr;
  uint8_t* area = nullptr;  // PM
  size_t area_size = 0;
  pm::Persister* persister = nullptr;
  std::string listen_address;
  ReplicationMode mode = ReplicationMode::kRWrite;
  uint32_t rpc_threads = 2;  // rpc: backup threads, each with its own log
  // Applies one replicated entry (Store::ApplyReplica); called from the digest thread and
  // DigestAll, never concurrently.
  std::function<Status(std::span<const uint8_t>)> apply;
};

class RemoteLogs {
 public:
  // Recovers first: applies every valid record of every assigned ring, then resets the rings.
  // Errors: kInvalidArgument (options, an area without room for two rings), fabric errors.
  static Result<std::unique_ptr<RemoteLogs>> Open(const RemoteLogsOptions& o);
  ~RemoteLogs();
  void Close();
  std::string address() const;
  // Applies every valid record at or after each ring's head (promotion: holes are skipped).
  void DigestAll();
  uint64_t digested() const { return digested_; }
  uint32_t slots() const { return static_cast<uint32_t>(slots_.size()); }

 private:
  struct Slot {
    uint8_t* table = nullptr;  // its 64-byte table entry in PM
    uint8_t* ring = nullptr;
    uint64_t head = 0;  // DRAM copy, persisted after the records before it are applied
    std::atomic<uint64_t> shared_head{0};  // for the rpc thread that writes this ring
    std::vector<std::unique_ptr<fabric::Connection>> conns;
    uint64_t assigned_seq = 0;
  };
  struct RpcPeer {
    std::unique_ptr<fabric::Connection> conn;
    std::vector<uint8_t> buf;
    std::unique_ptr<fabric::MemoryRegion> mr;
  };
  struct RpcThread {
    std::unique_ptr<fabric::CompletionQueue> cq;
    Mutex mu;
    std::vector<std::unique_ptr<RpcPeer>> peers ASYMNVM_GUARDED_BY(mu);
    uint32_t slot = 0;
    uint64_t tail = 0;  // this thread's ring tail (only it writes the ring)
    std::thread thread;
  };
  explicit RemoteLogs(const RemoteLogsOptions& o) : o_(o) {}
  Status Init();
  void AcceptLoop();
  void DigestLoop();
  void RpcLoop(RpcThread* t);
  bool DigestSlot(Slot& s) ASYMNVM_REQUIRES(mu_);
  void ScanAll(Slot& s) ASYMNVM_REQUIRES(mu_);
  void ResetSlot(Slot& s, uint64_t owner, uint64_t nonce, uint32_t kind) ASYMNVM_REQUIRES(mu_);
  void StoreHead(Slot& s) ASYMNVM_REQUIRES(mu_);
  Status WriteLocal(RpcThread* t, std::span<const uint8_t> payload);

  RemoteLogsOptions o_;
  size_t ring_bytes_ = remotelog::kRingBytes;
  std::unique_ptr<fabric::MemoryRegion> mr_;
  std::unique_ptr<fabric::CompletionQueue> accept_cq_;
  std::unique_ptr<fabric::Listener> listener_;
  Mutex mu_;  // slots_ (table, heads, connections), apply
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t seq_ ASYMNVM_GUARDED_BY(mu_) = 0;
  std::vector<std::unique_ptr<RpcThread>> rpc_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> digested_{0};
  Mutex wake_mu_;
  std::condition_variable wake_cv_;
  std::thread acceptor_, digester_;
};

// Sender side, share mode: the ring this sender server shares among its workers at one backup.
struct SharedRing {
  Mutex mu;
  uint64_t nonce = 0;  // fixed at creation: the session the backup knows the ring by
  bool assigned ASYMNVM_GUARDED_BY(mu) = false;
  bool broken ASYMNVM_GUARDED_BY(mu) = false;
  uint64_t tail ASYMNVM_GUARDED_BY(mu) = 0;
  uint64_t head ASYMNVM_GUARDED_BY(mu) = 0;
  uint64_t ring_addr ASYMNVM_GUARDED_BY(mu) = 0, ring_bytes ASYMNVM_GUARDED_BY(mu) = 0;
  uint64_t head_addr ASYMNVM_GUARDED_BY(mu) = 0, generation ASYMNVM_GUARDED_BY(mu) = 0;
};

struct RemoteLogSenderOptions {
  fabric::Fabric* fabric = nullptr;
  fabric::ProtectionDomain* pd = nullptr;
  std::string address;  // the backup's remote-log endpoint
  ReplicationMode mode = ReplicationMode::kRWrite;
  std::string self_uuid;               // this (sender) server
  uint32_t thread = 0;                 // the worker
  std::shared_ptr<SharedRing> shared;  // share mode: required
  std::chrono::milliseconds timeout{5000};
};

// One worker's channel to one backup: its own connection and completion queue.
class RemoteLogSender {
 public:
  static Result<std::unique_ptr<RemoteLogSender>> Connect(const RemoteLogSenderOptions& o);
  ~RemoteLogSender();
  // rpc: SEND; rwrite/share: WRITE(s) + FLUSH; batch: stage (WRITE once kBatchBytes are staged).
  // Await() makes everything posted or staged durable at the backup (batch: posts the rest and a
  // FLUSH first). Errors: connection errors, kTimedOut (no ack, or the ring stayed full).
  Status Post(std::span<const uint8_t> entry);
  Status Await(std::chrono::steady_clock::time_point deadline);
  fabric::Counters counters() const { return conn_->counters(); }

 private:
  explicit RemoteLogSender(const RemoteLogSenderOptions& o) : o_(o) {}
  Status Init();
  Status WaitFor(uint64_t wr_id, fabric::Opcode op, std::chrono::steady_clock::time_point deadline,
                 fabric::Completion* out);
  // Reserves `fp` bytes of the ring (and a wrap record before them when needed); stages records.
  Status Stage(std::span<const uint8_t> payload, std::chrono::steady_clock::time_point deadline);
  struct RingView {
    uint64_t* tail;
    uint64_t* head;
    uint64_t ring_addr, ring_bytes, head_addr, generation;
  };
  Status StageIn(const RingView& v, std::span<const uint8_t> payload,
                 std::chrono::steady_clock::time_point deadline);
  Status ReadHead(uint64_t head_addr, uint64_t* head, std::chrono::steady_clock::time_point dl);
  Status PostRuns(bool flush);

  RemoteLogSenderOptions o_;
  std::unique_ptr<fabric::CompletionQueue> cq_;
  std::unique_ptr<fabric::Connection> conn_;
  fabric::RegionDescriptor region_;
  std::vector<uint8_t> buf_;  // staging (records) / rpc request
  std::unique_ptr<fabric::MemoryRegion> mr_;
  std::vector<uint8_t> small_;  // [0, 64) reply / assignment, [64, 72) head READ
  std::unique_ptr<fabric::MemoryRegion> small_mr_;
  // rwrite/batch: this sender's ring (share: SharedRing).
  uint64_t ring_addr_ = 0, ring_bytes_ = 0, head_addr_ = 0, generation_ = 0, tail_ = 0, head_ = 0;
  struct Run {
    uint64_t remote;
    size_t local, length;
  };
  std::vector<Run> runs_;  // staged, not posted
  size_t used_ = 0;        // bytes of buf_ in use
  size_t staged_ = 0;      // bytes staged since the last WRITE
  bool outstanding_ = false;
  uint64_t next_id_ = 1;
  uint64_t await_id_ = 0;  // rpc: the request token awaited; else the FLUSH awaited
};

}  // namespace asymnvm::kv
