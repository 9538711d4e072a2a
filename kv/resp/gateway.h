// The RESP gateway wired to the KV cluster: one kv::Client (thread-safe, shared by every loop
// thread) behind the Store seam. This is what `asymnvm-kv --resp-port` starts.
#pragma once

#include <memory>

#include "asymnvm/kv.h"
#include "kv/resp/server.h"

namespace asymnvm::kv::resp {

// The Store the product uses: forwards every call to the KV client API. Not an owner of the
// cluster's data in any way; every answer comes from the servers.
std::unique_ptr<Store> NewKvClientStore(std::shared_ptr<kv::Client> client);

struct KvGatewayOptions {
  kv::ClientOptions client;  // how the gateway reaches the cluster (any server; it routes by shard)
  ServerOptions server;      // port, threads, limits, AUTH secret; store_factory is filled in
  int kv_clients = 1;        // KV clients the workers share round-robin
};

// Starts the server; the KV client opens on the first command that needs it (so a server of a
// cluster that is still forming serves RESP at once). Errors: Server::Start's.
Result<std::unique_ptr<Server>> StartKvGateway(KvGatewayOptions options);

}  // namespace asymnvm::kv::resp
