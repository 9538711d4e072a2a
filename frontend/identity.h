// Front-end identity from the coordinator (doc/coord.md §Front-end identity, §Node layout).
//
// A FrontendIdentity holds a front-end id for a Session's lifetime: the ephemeral node
// /asymnvm/frontends/<id>/lease proves a live holder (a second live holder is refused), and the
// persistent /asymnvm/frontends/<id> holds the id's incarnation epoch ("epoch N"), bumped by
// compare-and-set each time the id is claimed. Id 0 asks for a fresh id from
// AllocateId("/asymnvm/ids/frontend").
//
// Thread safety: immutable after Claim; destroy it (releasing the lease) from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "asymnvm/coord.h"
#include "asymnvm/frontend.h"
#include "common/thread_annotations.h"

namespace asymnvm::frontend {

class FrontendIdentity {
 public:
  // Claims `requested` (0: allocate one) on the coordinator at `uri`. Errors: kAlreadyExists
  // (another live process holds the id; the message names it), kInvalidArgument (id > 65535),
  // kResourceExhausted (allocated ids ran past 65535), and the coordinator's own errors.
  static Result<std::unique_ptr<FrontendIdentity>> Claim(const std::string& uri, uint64_t requested,
                                                         std::chrono::milliseconds timeout);
  ~FrontendIdentity();  // deletes the lease and closes the coordinator session

  uint64_t id() const { return id_; }
  uint64_t epoch() const { return epoch_; }
  coord::Coordinator& coordinator() { return *coord_; }

  // Whether this process may still act as the holder of the id without asking the coordinator
  // (no round trip: an atomic load and a clock read). kFailedPrecondition ("fenced") once the
  // lease node is gone or owned by another session, or when the coordinator has not confirmed it
  // for 2/3 of its lease_timeout (a stopped or partitioned holder: by the time the coordinator
  // expires the session another process may claim the id). The embedded coordinator's leases
  // live as long as the process, so only a lost node fails there. A background thread confirms
  // the lease every lease_timeout / 5 (none for the embedded coordinator).
  Status CheckLease() const;

  static std::string LeasePath(uint64_t id);
  static std::string EpochPath(uint64_t id);

 private:
  FrontendIdentity() = default;
  Status TryClaim(uint64_t id);

  void StartHeartbeat();
  void Heartbeat();

  std::unique_ptr<coord::Coordinator> coord_;
  uint64_t id_ = 0;
  uint64_t epoch_ = 0;
  std::chrono::milliseconds lease_{0};
  // steady_clock ticks of the send time of the last call that found the lease ours.
  std::atomic<int64_t> confirmed_{0};
  std::atomic<bool> lost_{false};
  mutable Mutex mu_;
  std::condition_variable cv_;
  bool stop_ ASYMNVM_GUARDED_BY(mu_) = false;
  std::thread heartbeat_;
};

// For Session::Open: when options->coordinator is set, claims the identity and writes the id into
// options->frontend_id; otherwise returns nullptr and leaves options alone.
Result<std::unique_ptr<FrontendIdentity>> ClaimSessionIdentity(SessionOptions* options);

}  // namespace asymnvm::frontend
