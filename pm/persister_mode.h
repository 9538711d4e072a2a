// How a Persister makes ranges durable, for a peer that persists the same file through its own
// mapping (the shm fabric, doc/fabric.md §shm). Kept out of include/asymnvm/pm.h: only the fabric
// needs it.
#pragma once

#include "asymnvm/pm.h"

namespace asymnvm::pm {

// kFlushOnly for a pool's cache-line-flush persister; kMsync for any other (the safe answer: an
// msync of the same file range through another mapping makes it durable too).
PersistMode PersisterMode(const Persister* persister);

}  // namespace asymnvm::pm
