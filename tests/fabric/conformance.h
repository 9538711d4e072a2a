// The fabric conformance suite (include/asymnvm/fabric.h is the contract; every comment there is a
// requirement tested here). One fixture, FabricConformance, instantiated in conformance_main.cc
// over every provider × transport: soft/tcp, soft/unix, soft/inproc, shm/unix, shm/tcp, verbs/tcp.
// Regions live in fabric::SharedMemory, so on shm every valid one-sided request takes the direct
// path (the initiator's own loads and stores) and every invalid one the channel. Instances whose
// provider cannot open here (verbs without a device) skip with the provider's reason.
//
// Each test uses two Fabric instances in this process — the initiator NIC and the target NIC —
// except the peer-death tests, which run the target in a separate process (fabric_test_peer).
// Waits are bounded (CQ Wait with a timeout); a timeout fails the test instead of hanging.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/shared_memory.h"

namespace asymnvm::fabric::conformance {

using std::chrono::microseconds;
using std::chrono::milliseconds;

inline constexpr milliseconds kWait{10000};  // bound for any single expected event
inline constexpr uint8_t kGuardByte = 0xA5;

struct Instance {
  std::string provider;   // "soft" | "shm" | "verbs"
  std::string transport;  // "tcp" | "unix" | "inproc"
  bool tls = false;       // tcp over TLS (doc/fabric.md §TLS), certificates made at test time
};

inline void PrintTo(const Instance& i, std::ostream* os) {
  *os << i.provider << "/" << i.transport << (i.tls ? "+tls" : "");
}

inline std::string InstanceName(const ::testing::TestParamInfo<Instance>& info) {
  return info.param.provider + "_" + info.param.transport + (info.param.tls ? "_tls" : "");
}

inline ConnectionOptions Opts(CompletionQueue* send_cq, CompletionQueue* recv_cq = nullptr,
                              SharedReceiveQueue* srq = nullptr) {
  ConnectionOptions o;
  o.send_cq = send_cq;
  o.recv_cq = recv_cq;
  o.srq = srq;
  return o;
}

// Registered memory placed inside a larger buffer whose guard bytes must never change.
struct GuardedRegion {
  static constexpr size_t kGuard = 4096;
  std::unique_ptr<SharedMemory> shared;  // owns the storage
  std::span<uint8_t> storage;
  uint8_t* data = nullptr;
  size_t len = 0;
  std::unique_ptr<MemoryRegion> mr;

  uint64_t raddr(size_t off = 0) const { return reinterpret_cast<uint64_t>(data) + off; }
  uint32_t rkey() const { return mr->rkey(); }
  // First offset (relative to data) of a changed guard byte, or SIZE_MAX.
  bool GuardsIntact(std::string* where = nullptr) const {
    const size_t lead = static_cast<size_t>(data - storage.data());
    for (size_t i = 0; i < storage.size(); i++) {
      if (i >= lead && i < lead + len) continue;
      if (storage[i] != kGuardByte) {
        if (where) *where = "guard byte at offset " + std::to_string(long(i) - long(lead));
        return false;
      }
    }
    return true;
  }
};

struct Pair {
  std::unique_ptr<Connection> init;    // initiator side (init_ fabric)
  std::unique_ptr<Connection> target;  // accepted side (target_ fabric)
};

class FabricConformance : public ::testing::TestWithParam<Instance> {
 protected:
  void SetUp() override;
  void TearDown() override;

  // A fresh listen address for this instance's transport.
  std::string NewAddress();
  Result<std::unique_ptr<Fabric>> OpenFabric(const std::string& secret = "asymnvm");

  // Connects init_ to target_ through listener_ (Accept runs concurrently). Fails the test (and
  // returns empty connections) when either side fails.
  Pair ConnectPair(const ConnectionOptions& init_opts, const ConnectionOptions& target_opts);
  Pair ConnectPair() {
    return ConnectPair(Opts(init_cq_.get()), Opts(target_cq_.get(), target_cq_.get()));
  }

  // `len` bytes registered on pd (zeroed), surrounded by guard bytes. 64-byte aligned.
  std::unique_ptr<GuardedRegion> Region(ProtectionDomain* pd, size_t len, uint32_t access,
                                        uint8_t fill = 0);
  std::unique_ptr<GuardedRegion> TargetRegion(size_t len, uint32_t access = kAllRemote) {
    return Region(target_pd_.get(), len, access);
  }
  std::unique_ptr<GuardedRegion> LocalRegion(size_t len) {
    return Region(init_pd_.get(), len, kLocalWrite);
  }

  // Collects exactly n completions from cq or stops at the timeout (the caller asserts the size).
  static std::vector<Completion> WaitFor(CompletionQueue* cq, size_t n,
                                         milliseconds timeout = kWait);
  // Expects no completion within a short grace period.
  static void ExpectQuiet(CompletionQueue* cq, milliseconds grace = milliseconds(30));

  // Work request builders. `local` may be null for inline/atomics without result.
  static WorkRequest Write(uint64_t wr_id, const GuardedRegion& local, size_t loff,
                           const GuardedRegion& remote, size_t roff, uint32_t len,
                           bool signaled = true);
  static WorkRequest Read(uint64_t wr_id, const GuardedRegion& local, size_t loff,
                          const GuardedRegion& remote, size_t roff, uint32_t len);
  static WorkRequest Cas(uint64_t wr_id, const GuardedRegion* local, size_t loff,
                         const GuardedRegion& remote, size_t roff, uint64_t expect, uint64_t swap);
  static WorkRequest Faa(uint64_t wr_id, const GuardedRegion* local, size_t loff,
                         const GuardedRegion& remote, size_t roff, uint64_t add);
  static WorkRequest Send(uint64_t wr_id, const GuardedRegion& local, size_t loff, uint32_t len);
  static WorkRequest Flush(uint64_t wr_id, const GuardedRegion& remote);

  uint64_t seed() const { return seed_; }

  Instance inst_;
  uint64_t seed_ = 0;
  std::unique_ptr<Fabric> init_, target_;
  std::unique_ptr<ProtectionDomain> init_pd_, target_pd_;
  std::unique_ptr<CompletionQueue> init_cq_, target_cq_;
  std::unique_ptr<Listener> listener_;
};

// Spawns a peer process (fabric_test_peer). See tests/fabric/peer/peer_main.cc.
struct PeerProcess {
  pid_t pid = -1;
  int stdout_fd = -1;
  std::string address;      // where it listens
  RegionDescriptor region;  // its registered region (kAllRemote)
  ~PeerProcess();
  // Starts the peer listening on `address`; waits (bounded) for its READY line.
  Status Start(const std::string& provider, const std::string& address);
  // Starts the peer as an initiator writing records into `target_region` at `address`, with
  // ASYMNVM_CRASH_AT=`crash_at` in its environment; waits (bounded) for its CONNECTED line.
  Status StartInitiator(const std::string& provider, const std::string& address,
                        const RegionDescriptor& target_region, const std::string& crash_at);
  // Waits (bounded) for the process to exit; returns its wait status, or -1 on timeout.
  int WaitExit(milliseconds timeout);
  void Kill();

 private:
  Status Spawn(const std::vector<std::string>& args, const std::vector<std::string>& extra_env);
  Result<std::string> ReadLine(milliseconds timeout);
};

}  // namespace asymnvm::fabric::conformance
