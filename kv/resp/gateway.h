// The RESP gateway wired to the KV cluster: one kv::Client (thread-safe, shared by every loop
// thread) behind the Store seam. This is what `asymnvm-kv --resp-port` starts.
#pragma once

#include <memory>

#include "asymnvm/kv.h"
#include "kv/resp/server.h"
#include "kv/server.h"

namespace asymnvm::kv::resp {

// The Store the product uses: forwards every call to the KV client API. Not an owner of the
// cluster's data in any way; every answer comes from the servers.
std::unique_ptr<Store> NewKvClientStore(std::shared_ptr<kv::Client> client);

// The fast path onto a KV server running in the same process (doc/resp.md §Fast path): commands
// on the shards it is the primary of run on the gateway's event loops, the rest (and everything
// while a shard's role is changing) through the KV client. `server` must outlive the gateway.
std::shared_ptr<FastPath> NewLocalFastPath(kv::Server* server);

struct KvGatewayOptions {
  kv::ClientOptions client;  // how the gateway reaches the cluster (any server; it routes by shard)
  ServerOptions server;      // port, threads, limits, AUTH secret; store_factory is filled in
  int kv_clients = 1;        // KV clients the workers share round-robin
  // The KV server of this process (null: none; every command goes through the KV client). With
  // one, the fast path is on and the gateway's KV client sends no nilext PUT and no
  // server-bypass PUT (see StartKvGateway).
  kv::Server* local = nullptr;
};

// Starts the server; the KV client opens on the first command that needs it (so a server of a
// cluster that is still forming serves RESP at once). Errors: Server::Start's.
Result<std::unique_ptr<Server>> StartKvGateway(KvGatewayOptions options);

}  // namespace asymnvm::kv::resp
