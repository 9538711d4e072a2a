// The main job's replicas (doc/mirror.md §Main job): where back-end i's pools live, which one
// serves, the daemons the job starts for them (back-ends, mirrors, promoted mirrors) and the
// --kill-primary-after failover. Not thread-safe (the job's one thread).
//
// Replica slots of back-end i: slot 0 = DIR/asymnvm[-i].pool, slot m+1 = its mirror m's pool
// (DIR/asymnvm[-i].mirror-m.pool); each slot's mirror daemon listens on a unix socket next to
// the pool, so every run finds it at the same address. Which slot serves is the group's state on
// the coordinator (/asymnvm/groups/<uuid>/state names the primary replica, host:absolute pool
// path): a later run serves the promoted pool, and the other slots (the old primary's path
// included) become its mirrors.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "asymnvm/cluster.h"
#include "asymnvm/coord.h"
#include "asymnvm/status.h"
#include "workloads/driver/backend_process.h"
#include "workloads/job/job.h"

namespace asymnvm::job {

// Errors that mean "a daemon or a connection went away", not "the data is wrong".
bool IsLostConnection(const Status& st);
// printf's "%.*f".
std::string FormatFixed(double v, int prec);

// The pool's uuid from its superblock (read-only look at the first 4 KiB).
Result<std::array<uint8_t, 16>> ReadPoolUuid(const std::string& path);

class ReplicaPaths {
 public:
  static constexpr uint32_t kSlots = 5;

  explicit ReplicaPaths(std::string data_dir) : data_dir_(std::move(data_dir)) {}
  std::string Pool(uint32_t i) const;
  std::string Mirror(uint32_t i, uint32_t m) const;
  std::string Slot(uint32_t i, uint32_t slot) const;
  std::string SlotAddress(uint32_t i, uint32_t slot) const;
  // Whether any slot of back-end i holds a pool.
  bool Exists(uint32_t i) const;
  // A slot whose pool is a mirror's torn copy (sidecar POOL.mirror not "in-sync") never serves.
  bool TornCopy(uint32_t i, uint32_t slot) const;
  // --fresh: removes every pool, log and mirror sidecar of every back-end.
  void RemoveAll() const;
  // The slot serving back-end i: the one the group's state on the coordinator names (a mirror
  // promoted by an earlier run), slot 0 when the group has no state.
  Result<uint32_t> ServingSlot(uint32_t i, coord::Coordinator& coord) const;

 private:
  std::string data_dir_;
};

// The daemons of the job. Back-end i's are started by Start; a failed step names itself in
// *what (the job prints "asymnvm-job: WHAT: STATUS").
class JobDaemons {
 public:
  JobDaemons(const JobOptions& o, const ReplicaPaths& paths, coord::Coordinator& coord)
      : o_(o), paths_(paths), coord_(coord) {}

  // Finds asymnvm-mirror next to the back-end binary (only with mirrors).
  Status FindMirrorBinary(const std::string& backend_bin);
  // Starts back-end i's mirrors (printing each) and then back-end i on its serving slot.
  Status StartGroup(uint32_t i, const std::string& backend_bin, std::string* what);

  // Kills back-end 0 (SIGKILL) and deletes its pool, waits for the cluster's session to follow
  // the promoted mirror, and rejoins the old pool path as a mirror of the promoted primary.
  // Prints what happened; fills *fo. Only an in-sync mirror may be promoted: waits for that
  // first.
  Status KillPrimary(frontend::Cluster& cl, uint64_t kill_after, FailoverReport* fo,
                     std::chrono::steady_clock::time_point* kill_time);

  // Waits (polling the daemon's status, 20 ms doubling to 500 ms, up to 3 minutes) until the
  // back-end at `address` reports every configured mirror in sync.
  static Status WaitMirrorsInSync(const std::string& address);

  // Back-end i's daemon (null once killed by KillPrimary) and address.
  std::vector<std::unique_ptr<driver::BackendProcess>> backends;
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<driver::BackendProcess>> mirrors;   // stopped after the back-ends
  std::vector<std::unique_ptr<driver::BackendProcess>> promoted;  // serve; stopped before mirrors

 private:
  // A mirror daemon of the group of back-end i on `slot`: it forwards, once promoted, to every
  // other slot of the group (the old primary's path rejoins there).
  Result<std::unique_ptr<driver::BackendProcess>> StartMirror(uint32_t i, uint32_t slot);

  const JobOptions& o_;
  const ReplicaPaths& paths_;
  coord::Coordinator& coord_;
  std::string mirror_bin_;
  // Per back-end: the serving slot and its mirrors' slots (the mirror daemons of back-end i are
  // mirrors[mirror_first_[i] ...], in the order of group_slots_[i] after the first).
  std::vector<std::vector<uint32_t>> group_slots_;
  std::vector<size_t> mirror_first_;
};

}  // namespace asymnvm::job
