// Fabric::Open: picks a provider by name.
#include "asymnvm/fabric.h"
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
  if (options.provider == "auto") {
    if (verbs::VerbsDeviceAvailable()) return verbs::OpenVerbsFabric(options);
    return soft::OpenSoftFabric(options);
  }
  return Status::InvalidArgument("fabric: unknown provider '" + options.provider +
                                 "' (expected soft, verbs or auto)");
}

}  // namespace asymnvm::fabric
