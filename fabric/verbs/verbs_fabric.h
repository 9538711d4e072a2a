// The verbs provider: AsymNVM's fabric API on libibverbs RC queue pairs (doc/fabric.md).
//
// Always compiled. Opening it where no RDMA device exists (ibv_get_device_list returns NULL, as on
// machines without InfiniBand support, or an empty list) fails with kNotSupported and a message
// that says so. Mapping, fallbacks and how to run it on hardware: fabric/verbs/README.md.
//
// This header does not include <infiniband/verbs.h>; VerbsApi (verbs_api.h) is the injection seam.
// Thread safety: as fabric.h.
#pragma once

#include <memory>

#include "asymnvm/fabric.h"

namespace asymnvm::fabric::verbs {

class VerbsApi;

// true when libibverbs lists at least one device (a NULL list or an empty one → false).
bool VerbsDeviceAvailable();

// Opens the device named options.device ("" = the first) through the real libibverbs.
// Errors: kNotSupported (no device: "verbs: no RDMA device (...); use --fabric soft"),
// kInvalidArgument (bad port / gid index, no device of that name), kIoError (an ibv call failed;
// the message names the call, sys_errno() carries errno).
Result<std::unique_ptr<Fabric>> OpenVerbsFabric(const FabricOptions& options);

// As OpenVerbsFabric, through `api` (tests pass a mock). Every object created from the fabric
// keeps using `api`.
Result<std::unique_ptr<Fabric>> OpenVerbsFabricWithApi(const FabricOptions& options,
                                                       std::shared_ptr<VerbsApi> api);

}  // namespace asymnvm::fabric::verbs
