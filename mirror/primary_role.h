// The serving replica's part in its back-end group (doc/mirror.md §Terms, §Joining): shared by
// asymnvm-backend and a promoted asymnvm-mirror.
//
// A PrimaryRole knows the term this replica serves and enforces it:
//   * it registers /asymnvm/groups/<uuid>/primary with "term N" in the data (front-ends send the
//     term they learned there with their registration; Backend's check_term → CheckClientTerm);
//   * a watch thread re-reads /…/state whenever it changes (and every 250 ms): a state naming
//     another replica means a mirror was promoted in a newer term, and the process is fenced
//     (the `fenced` callback: the daemons print and _exit(5) without acknowledging more);
//   * on a coordinator with leases (ZooKeeper), a replica whose session was not confirmed for
//     2/3 of the session timeout, or whose session expired, is fenced the same way: by the time
//     the coordinator drops its /…/primary node and a mirror's promotion timeout runs out, it has
//     stopped (a SIGSTOPped or partitioned old primary never serves next to a new one);
//   * mirrors that announce themselves under /…/joining/<name> ("address A") are attached while
//     serving (`add_mirror`, i.e. Backend::AddMirror).
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "asymnvm/coord.h"
#include "asymnvm/status.h"
#include "common/thread_annotations.h"

namespace asymnvm::mirror {

class PrimaryRole {
 public:
  // `term`: the term this replica serves (0: the group has no state yet; the first in-sync set
  // creates it at term 1). `who`: the daemon's name for messages.
  PrimaryRole(std::shared_ptr<coord::Coordinator> coordinator, const std::array<uint8_t, 16>& uuid,
              std::string name, uint64_t term, std::string who);
  ~PrimaryRole();  // Stop(false)

  uint64_t term() const { return term_.load(); }
  const std::string& name() const { return name_; }
  coord::Coordinator& coordinator() { return *coord_; }

  // ReplicationOptions::on_insync: the group's in-sync set (a CAS; kFailedPrecondition "fenced"
  // when the state names another replica).
  Status OnInSync(const std::vector<std::string>& insync);

  // BackendOptions::check_term, for a registration at `client_term` above term(): re-reads the
  // group state; OK when it still names this replica (the term moved 0 → 1 with the first in-sync
  // set); kFailedPrecondition without fencing when the state shows no such term (a confused or
  // hostile front-end decides nothing); when the state names another replica, fences (the
  // `fenced` callback given to Start) and returns kFailedPrecondition.
  Status CheckClientTerm(uint64_t client_term);

  // Creates the ephemeral /…/primary node: `data` + "term N\n" (waits up to `wait` for a node of
  // an earlier incarnation to vanish).
  Status Register(const std::string& data, std::chrono::milliseconds wait);

  // Starts the watch thread. `add_mirror` may be empty (no joining).
  void Start(std::function<void(const Status&)> fenced,
             std::function<Status(const std::string& address)> add_mirror);

  // Stops the watch thread; with `clear_insync` empties the in-sync set first if the group has a
  // state (an operator's stop must not promote a mirror); deletes the /…/primary node if
  // registered. Idempotent.
  void Stop(bool clear_insync);

  // How many mirrors were attached because they announced themselves (tests, status).
  uint64_t joined() const { return joined_.load(); }
  // Passes of the watch loop (tests: wait for further polls instead of sleeping).
  uint64_t polls() const { return polls_.load(); }

 private:
  void Loop();
  void Fence(const Status& why);
  void AttachJoining();

  std::shared_ptr<coord::Coordinator> coord_;
  const std::array<uint8_t, 16> uuid_;
  const std::string name_, who_;
  std::atomic<uint64_t> term_;
  std::atomic<uint64_t> joined_{0};
  std::atomic<uint64_t> polls_{0};
  std::atomic<bool> fenced_once_{false};
  std::function<void(const Status&)> fenced_;
  std::function<Status(const std::string&)> add_mirror_;
  std::set<std::string> attached_;  // joining addresses handed to add_mirror (watch thread only)
  std::string registered_;          // the /…/primary path once registered
  Mutex mu_;
  std::condition_variable cv_;
  bool stop_ ASYMNVM_GUARDED_BY(mu_) = false;
  bool stopped_ ASYMNVM_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

// /asymnvm/replicas/<name>: persistent "group UUID\n", written by a primary at start and by a
// mirror once in sync, so a replica whose pool file is lost still knows its group
// (asymnvm-backend --rejoin).
Status RecordReplica(coord::Coordinator& c, const std::string& name,
                     const std::array<uint8_t, 16>& uuid);
// kNotFound when the name was never recorded.
Result<std::array<uint8_t, 16>> LookupReplica(coord::Coordinator& c, const std::string& name);

// Where a mirror that wants to join a running group announces itself (ephemeral children
// "name N\naddress A\npid P\n").
std::string JoiningPath(const std::array<uint8_t, 16>& uuid);

}  // namespace asymnvm::mirror
