// Fabric::Open: picks a provider by name.
#include "asymnvm/fabric.h"
#include "fabric/shm/shm_fabric.h"
#include "fabric/soft/soft_fabric.h"
#include "fabric/verbs/verbs_fabric.h"

namespace asymnvm::fabric {

Result<std::unique_ptr<Fabric>> Fabric::Open(const FabricOptions& given) {
  // The providers see the resolved secret (file / environment / default).
  FabricOptions options = given;
  ASYMNVM_ASSIGN_OR_RETURN(options.cluster_secret, ResolveClusterSecret(given));
  options.secret_file.clear();
  if (options.provider == "soft") return soft::OpenSoftFabric(options);
  if (options.provider == "verbs") return verbs::OpenVerbsFabric(options);
  if (options.provider == "shm") return shm::OpenShmFabric(options);
  if (options.provider == "auto") {
    // A device: verbs. Otherwise shm, which is the soft NIC toward peers on other hosts and adds
    // the direct path per connection when the peer's offer shows the same host (doc/fabric.md).
    if (verbs::VerbsDeviceAvailable()) return verbs::OpenVerbsFabric(options);
    return shm::OpenShmFabric(options);
  }
  return Status::InvalidArgument("fabric: unknown provider '" + options.provider +
                                 "' (expected soft, verbs, shm or auto)");
}

}  // namespace asymnvm::fabric
