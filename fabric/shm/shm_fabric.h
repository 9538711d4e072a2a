// The shm provider (doc/fabric.md §shm): the soft NIC (fabric/soft/) with a direct path for peers
// on the same host.
//
// A region registered on an shm fabric whose memory is a shared mapping — a pool file mapped
// MAP_SHARED, or a fabric::SharedMemory (memfd) — is offered to the peers of its protection
// domain. A connection's initiator asks the target's region server (an abstract unix socket,
// authenticated with the cluster secret) for a region by rkey the first time it names it, receives
// the file descriptor over SCM_RIGHTS (read-only unless the region grants a remote write or
// atomic right) and maps exactly the pages of the region. From then on WRITE, READ, CAS and
// FETCH_ADD on that region are its own memcpy and atomics, after the bounds, rights and alignment
// checks the target would make; a revoked region (deregistered: its slot in the target's status
// page no longer holds the rkey) and anything outside a grant go through the channel, where the
// target rejects them exactly as the soft NIC does. FLUSH persists the ranges the initiator wrote
// itself with the region's persist mode (cache-line flushes, or msync of its own mapping of the
// same file), and goes through the channel only when something landed there since the last one.
// SEND/RECV, the handshake and connection errors (peer death: the channel's hang-up) are the soft
// NIC's.
//
// Same host: each side's offer carries its boot id and network namespace; a peer whose offer
// differs (or that offers nothing: a plain soft NIC) gets no direct path, so `auto` can open shm
// everywhere.
#pragma once

#include <memory>

#include "asymnvm/fabric.h"

namespace asymnvm::fabric::shm {

// Errors: as soft::OpenSoftFabric, plus kIoError (memfd / region server socket).
Result<std::unique_ptr<Fabric>> OpenShmFabric(const FabricOptions& options);

// "<boot id>/<network namespace>": two processes with the same id can share memory and reach each
// other's abstract unix sockets.
std::string HostId();

}  // namespace asymnvm::fabric::shm
