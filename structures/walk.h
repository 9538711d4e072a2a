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

}  // namespace asymnvm::structures
