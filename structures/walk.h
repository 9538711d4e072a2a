// The block walk of `asymnvm-ctl check` and `asymnvm-ctl gc` (doc/tools.md §check, §gc;
// doc/alloc.md §Leaks across crashes): which data-area ranges the named structures of one
// back-end reach.
//
// The walk is each structure's own Verify, not a second traversal: the structure is opened as a
// reader of its kind and verified with the session's read observer on (Session::SetReadObserver),
// and every data-area range Verify reads is recorded. Verify reads every node, value slot,
// anchor and bucket array of its structure (it checks them all), so the recorded ranges cover
// every object the structure owns. Besides, the root word of every entry that points into the
// data area is recorded (the anchor of a structure kind, the map block of a partitioned map).
//
// Naming types it knows: the structure kinds (structures::Kind), the transaction root of a
// Database (kTxnRootType: its root word only; its tables are ordinary maps with entries of their
// own) and the partition map (kPartitionMapType: its map block). Any other type makes the walk
// fail (kNotSupported), as does a Verify that fails: a caller that frees what the walk did not
// reach must then free nothing.
//
// Thread safety: like the Session (one thread).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "asymnvm/frontend.h"
#include "asymnvm/status.h"

namespace asymnvm::structures {

struct WalkedStructure {
  std::string name;
  uint32_t type = 0;
  uint64_t ranges = 0;  // data-area reads recorded for it
};

struct BlockWalk {
  // Data-area ranges (addr, length) the walk read, sorted by address, overlapping ones merged.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<WalkedStructure> structures;
};

// Walks the entries `names` (structure names of the session's back-end; front-end records are
// not structures and must not be passed). Errors: kNotSupported (a type the walk does not know,
// named), the Open or Verify error of a structure with its name, transport errors.
Result<BlockWalk> WalkStructures(frontend::Session& session, const std::vector<std::string>& names);

// gc's comparison, shared by asymnvm-ctl check/gc and the online reclaim: which of `extents`
// ((addr, bytes), sorted by address, disjoint) the `ranges` of a walk (sorted, merged) touch, and
// the parts of ranges outside every extent (ranges.size() order).
struct ExtentReach {
  std::vector<bool> reached;                               // per extent
  std::vector<std::pair<uint64_t, uint64_t>> unallocated;  // (addr, length)
};
ExtentReach ReachExtents(const std::vector<std::pair<uint64_t, uint64_t>>& extents,
                         const std::vector<std::pair<uint64_t, uint64_t>>& ranges);

// Online reclamation of a crashed incarnation's blocks (doc/alloc.md §Leaks across crashes):
// the extents `session` inherited from the ownership journal of earlier incarnations of its id
// (Session::InheritedExtents) that no structure reaches are freed; the others stay recorded.
// Run after the replay (Session::Replay calls it through the reclaimer RegisterReplays installs;
// call it again to retry a deferred reclaim).
//  1. every structure's writer lock is taken (those this session holds already stay), each
//     waited for at most SessionOptions::reclaim_lock_wait; one still held by another front-end
//     defers the reclaim: nothing is freed, the journal stays, `deferred` is set;
//  2. WalkStructures over every structure of the pool; the locks taken are released;
//  3. each inherited extent is checked against the back-end's bitmap (Session::ExtentOf): one
//     that is not a live extent starting there is dropped from the journal, never freed
//     (`refused`);
//  4. after SessionOptions::reclaim_grace, each extent ReachExtents finds unreached is removed
//     from the journal and freed by one back-end request (request 22 with the journal trailer:
//     entry cleared durably first); a refused free is logged. Crash points (common/crash_point.h)
//     per such extent: structures.reclaim.before_free, structures.reclaim.after_free.
// Errors: the walk's (nothing freed), transport errors.
struct ReclaimResult {
  uint64_t inherited = 0;  // extents the journal named
  uint64_t freed_extents = 0, freed_blocks = 0;
  uint64_t kept_extents = 0;  // reached: stay recorded under this id
  uint64_t refused = 0;       // not a live extent (dropped) or a free the back-end refused
  bool deferred = false;
  std::string deferred_by;  // the structure whose lock was held
  uint64_t structures = 0;  // walked
  double walk_seconds = 0, seconds = 0;
};
Result<ReclaimResult> ReclaimDeadAllocations(frontend::Session& session);

}  // namespace asymnvm::structures
