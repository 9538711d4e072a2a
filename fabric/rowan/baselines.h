// Rowan and its baselines behind one interface, so the bench compares them in the same code
// (Rowan paper §6: RWrite-KV, Batch-KV, Share-KV; doc/rowan.md §Baselines).
//
//   rowan   Sender::PostAppend: SEND of the entry's blocks + FLUSH into the receiver's one b-log.
//   rwrite  one exclusive remote log per writer (FaRM-style); append = one-sided WRITE at the
//           writer's own tail + FLUSH.
//   share   one remote log shared by all writers of a SharedCursor; a writer reserves space with a
//           local atomic fetch_add on the cursor, then WRITEs there + FLUSH. Writes of different
//           writers reach the log out of reservation order.
//   batch   rwrite with per-writer batching: entries accumulate in DRAM and go as one WRITE + FLUSH
//           once the batch holds >= batch_bytes (256 B, one XPLine) or its oldest entry waited
//           batch_delay (5 µs); every entry of the batch is acknowledged by that FLUSH.
//
// Every variant writes the same bytes per entry: the entry's encoded blocks (entry.h), each at a
// 64 B-aligned offset, so the requested PM bytes are identical and a scanner can read any log.
// The baseline logs are circular and have no consumer or recovery: they exist to measure latency,
// throughput and device-level write amplification, not to be a durable log (wrapped-over entries
// are simply overwritten).
//
// Driver model: a driver thread owns a CompletionQueue shared by many writers, keeps appends in
// flight with Submit, polls the CQ itself and routes each completion to the writer whose
// connection_id() it carries (OnCompletion reports the tokens that became durable), and calls Tick
// often enough for batch's delay (Tick returns when it wants to be called next).
//
// Thread safety: a LogWriter is used by one thread. LogTarget methods are thread-safe. SharedCursor
// is an atomic; writers of several threads may share one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "asymnvm/status.h"
#include "common/thread_annotations.h"
#include "fabric/rowan/entry.h"
#include "fabric/rowan/landing.h"

namespace asymnvm::rowan {

enum class LogVariant : uint8_t { kRowan, kRWrite, kShare, kBatch };
const char* LogVariantName(LogVariant v);  // "rowan" | "rwrite" | "share" | "batch"
// Errors: kInvalidArgument naming the accepted values.
Result<LogVariant> ParseLogVariant(const std::string& name);

// Receiver side of rwrite/share/batch: a PM area registered for remote WRITE, carved into one log
// per connection (exclusive) or one log for all (shared). Each accepted connection receives, in
// its private data, the area's descriptor and its log's [offset, offset + bytes).
struct LogTargetOptions {
  fabric::Fabric* fabric = nullptr;        // required
  fabric::ProtectionDomain* pd = nullptr;  // required
  uint8_t* area = nullptr;                 // required; 64 B aligned
  size_t area_size = 0;
  pm::Persister* persister = nullptr;  // required: the NIC persists landed WRITEs through it
  pm::PersistObserver* landing_observer = nullptr;  // optional, as ReceiverOptions
  std::string listen_address = "tcp://127.0.0.1:0";
  bool shared = false;            // share: every connection gets the whole area as its log
  size_t log_bytes = 256 * 1024;  // exclusive: bytes per connection's log (multiple of 4 KiB)
};

class LogTarget {
 public:
  // Errors: kInvalidArgument (missing field, area smaller than one log, bad log_bytes), fabric
  // errors. Connections beyond area_size / log_bytes are refused at set-up (the writer's
  // ConnectWriter fails with kResourceExhausted).
  static Result<std::unique_ptr<LogTarget>> Open(const LogTargetOptions& options);
  ~LogTarget();
  std::string address() const;
  uint64_t connections() const;
  void Close();

 private:
  explicit LogTarget(const LogTargetOptions& o) : o_(o) {}
  void AcceptLoop();

  LogTargetOptions o_;
  std::unique_ptr<LandingPersister> landing_;
  std::unique_ptr<fabric::MemoryRegion> mr_;
  std::unique_ptr<fabric::CompletionQueue> cq_;
  std::unique_ptr<fabric::Listener> listener_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<fabric::Connection>> conns_ ASYMNVM_GUARDED_BY(mu_);
  uint64_t next_log_ ASYMNVM_GUARDED_BY(mu_) = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
};

// The share variant's reservation counter (one per shared log, local to the writers' node).
struct SharedCursor {
  std::atomic<uint64_t> next{0};
};

struct WriterOptions {
  fabric::Fabric* fabric = nullptr;            // required
  fabric::ProtectionDomain* pd = nullptr;      // required
  std::string address;                         // the receiver's / log target's
  fabric::CompletionQueue* cq = nullptr;       // required: shared with the driver's other writers
  std::chrono::milliseconds timeout{5000};     // connection set-up
  uint32_t max_outstanding = 16;               // appends (batches) in flight per writer
  SharedCursor* cursor = nullptr;              // share: required, shared by the log's writers
  size_t batch_bytes = 256;                    // batch: send once the batch holds this many bytes
  std::chrono::nanoseconds batch_delay{5000};  // batch: or once its oldest entry waited this long
};

class LogWriter {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~LogWriter() = default;
  virtual LogVariant variant() const = 0;
  // Starts one append; `token` (caller-chosen, unique among this writer's outstanding appends)
  // is reported by OnCompletion once the entry is durable at the receiver. The encoded entry
  // (32 B header + payload) must be at most kMaxEntryBytes: appends are posted inline.
  // Errors: kInvalidArgument (bad entry, too large), kResourceExhausted (max_outstanding
  // reached), kConnectionError.
  virtual Status Submit(const EntryMeta& meta, std::span<const uint8_t> payload,
                        uint64_t token) = 0;
  // Time-driven work: batch sends a batch whose oldest entry waited batch_delay. Returns when it
  // wants to be called again (time_point::max() when nothing waits). Errors as Submit.
  virtual Result<Clock::time_point> Tick(Clock::time_point now) { return Clock::time_point::max(); }
  // A completion whose connection_id == connection_id(): appends the tokens of every entry it
  // made durable to *durable. Error completion → kConnectionError / kRnrRetryExceeded.
  virtual Status OnCompletion(const fabric::Completion& c, std::vector<uint64_t>* durable) = 0;
  virtual uint64_t connection_id() const = 0;
  virtual fabric::Counters counters() const = 0;  // of the writer's connection
  // Largest encoded entry (header + payload) Submit accepts.
  static constexpr size_t kMaxEntryBytes = 256;
};

// Connects a writer of the given variant. Errors: kInvalidArgument (missing option, share without
// cursor), kResourceExhausted (the target has no log left for this connection), kProtocolError
// (the peer is not a target of that variant), fabric errors.
Result<std::unique_ptr<LogWriter>> ConnectWriter(LogVariant variant, const WriterOptions& options);

}  // namespace asymnvm::rowan
