// A back-end group on the coordinator (doc/mirror.md §Group state; doc/coord.md §Back-end groups):
//
//   /asymnvm/groups/<pool-uuid>/primary        ephemeral: the serving back-end (asymnvm-backend or
//   a
//                                              promoted asymnvm-mirror): "address A\nlog L\npid
//                                              P\n…"
//   /asymnvm/groups/<pool-uuid>/state          persistent, versioned (every change is a CAS):
//                                              "term N\nprimary NAME\ninsync NAME,NAME\n"
//   /asymnvm/groups/<pool-uuid>/mirrors/<node> ephemeral: a live mirror ("name NAME\naddress A\n…")
//
// `term` changes only by a promotion; `primary` names the replica (name = host:absolute pool path
// unless --name) allowed to serve in that term; `insync` lists the mirrors that hold every
// acknowledged byte (only the primary of the term changes it; only those may be promoted).
//
// Thread safety: free functions over a thread-safe Coordinator.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "asymnvm/coord.h"
#include "asymnvm/status.h"

namespace asymnvm::mirror {

// Exit code of a daemon that finds its group served by another replica in a newer term.
inline constexpr int kExitFenced = 5;

struct GroupState {
  uint64_t term = 0;
  std::string primary;
  std::vector<std::string> insync;
};

std::string GroupPath(const std::array<uint8_t, 16>& uuid);  // /asymnvm/groups/<uuid>
std::string EncodeGroupState(const GroupState& s);
// kCorruption on a malformed node.
Result<GroupState> DecodeGroupState(const std::string& data);
// host:absolute-path (the default replica name of a daemon on `pool_path`).
std::string DefaultReplicaName(const std::string& pool_path);
// A coordinator path component made of `name` ([A-Za-z0-9_.-], others become '_').
std::string NodeComponent(const std::string& name);

// The primary's check at start: OK when the group has no state, or its state names `name`
// (then *term is its term; else 0). kFailedPrecondition ("fenced") naming the term and the
// replica that serves it otherwise.
Status CheckPrimary(coord::Coordinator& c, const std::array<uint8_t, 16>& uuid,
                    const std::string& name, uint64_t* term);
// The primary sets the in-sync set (CAS; creates the state with term 1 when missing).
// kFailedPrecondition ("fenced") when the state names another primary.
Status SetInSync(coord::Coordinator& c, const std::array<uint8_t, 16>& uuid,
                 const std::string& name, const std::vector<std::string>& insync, uint64_t* term);
// A mirror's promotion: when `name` is in the in-sync set, CAS the state to term + 1, primary =
// name, in-sync = {}. Returns the new term. kFailedPrecondition when `name` is not in sync (or
// no state exists), kAborted when another writer changed the state first (read it again).
Result<uint64_t> TryPromote(coord::Coordinator& c, const std::array<uint8_t, 16>& uuid,
                            const std::string& name);
// Creates the ephemeral primary node (waits up to `wait` for a stale holder to vanish).
Status RegisterPrimaryNode(coord::Coordinator& c, const std::array<uint8_t, 16>& uuid,
                           const std::string& data, std::chrono::milliseconds wait);

}  // namespace asymnvm::mirror
