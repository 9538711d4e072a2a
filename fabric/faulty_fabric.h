// FaultyFabric: a fault-injecting decorator over any Fabric (soft or verbs), for tests.
//
// It forwards everything to the wrapped fabric and, per posted work request, draws seeded one-in-N
// decisions (STYLE.md: RocksDB-style knobs):
//   drop   the request is not sent; it completes with kTransportError and the connection enters
//          kError (an RC QP whose transport retries are exhausted);
//   error  the request is not sent; it completes with kGeneralError and the connection enters
//   kError; delay  the Post call is held for FaultOptions::delay before the list is handed to the
//   provider.
// Requests behind an injected failure in the same list complete with kFlushed (signaled or not, as
// with an RC QP in error); later Post calls return kConnectionError. CutConnection() severs a
// connection at any time: the wrapper enters kError, the underlying connection is closed (its
// outstanding requests complete as the provider flushes them, the peer sees the connection go away)
// and later Post calls return kConnectionError.
//
// Ordering: an injected completion appears in the CQ the request would have completed in, after
// every completion of requests posted before it on the same connection. To know when those have
// completed, the wrapper asks the provider for a completion on the last request of every Post call
// (hidden from the caller when that request was unsignaled and succeeds): size CQs with one spare
// entry per outstanding Post. Connections must be created with CQs returned by this FaultyFabric.
//
// Determinism: each connection draws from its own generator, seeded from FaultOptions::seed and the
// connection's creation ordinal in this FaultyFabric, so the same seed and the same sequence of
// Connect/Accept and Post calls give the same faults (fault_log() records them).
//
// Crash points (common/crash_point.h), reached by every Post on a wrapped connection:
//   "fabric.post.before"   before anything of the list is handed to the provider
//   "fabric.post.after"    after the provider accepted the list
//   "fabric.connect.after" after Connect/Accept returned a connection
//
// Protection domains, memory regions and SRQs are the wrapped fabric's own objects.
// Thread safety: as the Fabric contract; knobs may be changed with SetFaultOptions at any time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "asymnvm/fabric.h"
#include "common/thread_annotations.h"

namespace asymnvm::fabric {

constexpr uint32_t OpcodeBit(Opcode op) { return 1u << static_cast<uint32_t>(op); }
inline constexpr uint32_t kAllPostedOpcodes =
    OpcodeBit(Opcode::kWrite) | OpcodeBit(Opcode::kRead) | OpcodeBit(Opcode::kCompareSwap) |
    OpcodeBit(Opcode::kFetchAdd) | OpcodeBit(Opcode::kSend) | OpcodeBit(Opcode::kFlush);

struct FaultOptions {
  uint64_t seed = 0;
  uint32_t drop_one_in = 0;   // 0 = never; 1 = every eligible request
  uint32_t error_one_in = 0;  // 0 = never
  uint32_t delay_one_in = 0;  // 0 = never
  std::chrono::microseconds delay{200};
  uint32_t opcode_mask = kAllPostedOpcodes;  // OpcodeBit(op) set = op is eligible
};

enum class FaultKind : uint8_t { kDrop, kError, kDelay, kCut };
const char* FaultKindName(FaultKind kind);

struct FaultEvent {
  uint64_t connection_ordinal = 0;  // creation order of the connection in this FaultyFabric
  uint64_t request_index = 0;       // index of the request among those posted on the connection
  FaultKind kind = FaultKind::kDrop;
  Opcode opcode = Opcode::kWrite;
  uint64_t wr_id = 0;
  bool operator==(const FaultEvent&) const = default;
};

struct FaultCounters {
  uint64_t requests_seen = 0;  // requests posted through the wrapper
  uint64_t dropped = 0;
  uint64_t errored = 0;
  uint64_t delayed = 0;
  uint64_t flushed = 0;  // requests completed kFlushed by the wrapper behind an injected fault
  uint64_t cuts = 0;
};

class FaultyConnection;

class FaultyFabric : public Fabric {
 public:
  // Takes ownership of `base`.
  static std::unique_ptr<FaultyFabric> Wrap(std::unique_ptr<Fabric> base,
                                            const FaultOptions& options);
  // Opens a fabric with Fabric::Open and wraps it.
  static Result<std::unique_ptr<FaultyFabric>> Open(const FabricOptions& fabric_options,
                                                    const FaultOptions& fault_options);
  ~FaultyFabric() override;

  std::string provider() const override;
  Capabilities capabilities() const override;
  Result<std::unique_ptr<ProtectionDomain>> AllocPd() override;
  Result<std::unique_ptr<CompletionQueue>> CreateCq(const CompletionQueueOptions& o) override;
  Result<std::unique_ptr<SharedReceiveQueue>> CreateSrq(ProtectionDomain* pd,
                                                        const SrqOptions& o) override;
  Result<std::unique_ptr<Listener>> Listen(ProtectionDomain* pd,
                                           const std::string& address) override;
  Result<std::unique_ptr<Connection>> Connect(ProtectionDomain* pd, const std::string& address,
                                              const ConnectionOptions& options) override;
  Counters counters() const override;

  // Severs `connection`, which must have been created by this FaultyFabric (kInvalidArgument
  // otherwise). Idempotent.
  Status CutConnection(Connection* connection);

  void SetFaultOptions(const FaultOptions& options);  // affects later draws; generators keep state
  FaultOptions fault_options() const;
  FaultCounters fault_counters() const;
  std::vector<FaultEvent> fault_log() const;
  Fabric* base() const { return base_.get(); }

 private:
  friend class FaultyConnection;
  friend class FaultyListener;
  FaultyFabric(std::unique_ptr<Fabric> base, const FaultOptions& options);
  Result<std::unique_ptr<Connection>> WrapConnection(std::unique_ptr<Connection> base,
                                                     const ConnectionOptions& options);
  static Result<ConnectionOptions> Unwrap(const ConnectionOptions& options);
  void Record(const FaultEvent& event);
  void CountSeen(uint64_t n);
  void CountFlushed(uint64_t n);

  std::unique_ptr<Fabric> base_;
  mutable Mutex mu_;
  FaultOptions options_ ASYMNVM_GUARDED_BY(mu_);
  FaultCounters counters_ ASYMNVM_GUARDED_BY(mu_);
  std::vector<FaultEvent> log_ ASYMNVM_GUARDED_BY(mu_);
  std::atomic<uint64_t> next_ordinal_{0};
};

}  // namespace asymnvm::fabric
