// The RESP gateway's TCP server: N event-loop threads (epoll, level-triggered, blocking waits — no
// spinning) share one listening socket; each connection lives on one loop, which reads and parses
// its input and writes its replies. Commands that never touch the store (PING, HELLO, CLIENT, ...)
// run on the loop; the others go, as one batch of the connection's consecutive commands, to a pool
// of worker threads that call the store synchronously (each worker owns one Store). A connection
// has at most one batch in flight, so its replies leave in request order, while different
// connections' requests run concurrently (the store group-commits them). With a FastPath
// (ServerOptions::fast_path) a loop runs commands on its co-located primary's shards itself: at
// the end of each loop pass, every waiting connection's leading such commands in one section,
// acknowledged after the section's one commit (doc/resp.md §Fast path).
//
// Thread safety: Start/Stop/port from one controlling thread. Stop (or the destructor) closes every
// connection and joins the loops.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "asymnvm/status.h"
#include "kv/resp/protocol.h"
#include "kv/resp/store.h"

namespace asymnvm::kv::resp {

class TlsContext;

struct ServerOptions {
  std::string bind_address = "127.0.0.1";
  uint16_t port = 6379;
  bool listen_plain = true;  // false: no plain-TCP port (only the TLS one; Redis's port 0)
  // When `port` is taken (or 0), listen on an ephemeral port instead; port() tells which.
  bool fallback_to_ephemeral = true;
  // TLS (tls.h, doc/resp.md §TLS): with a context, a second listening socket on tls_port (0: an
  // ephemeral one; taken: as `port`) whose connections speak TLS; same loops, same commands.
  std::shared_ptr<const TlsContext> tls;
  uint16_t tls_port = 0;
  int loop_threads = 2;
  int workers = 32;  // store-calling threads (they block on the store, not on the CPU)
  ParserLimits limits = DefaultGatewayLimits();
  std::string cluster_secret;  // non-empty: clients must AUTH with it
  int64_t max_clients = 10000;
  size_t max_output_bytes = 256 << 20;  // per connection: stop reading its input above this
  // Makes one Store per worker thread (called by Start).
  std::function<Result<std::unique_ptr<Store>>()> store_factory;
  // Optional: a co-located primary the loops execute commands against directly (store.h
  // FastPath; doc/resp.md §Fast path). Null: every store command goes to the workers.
  std::shared_ptr<FastPath> fast_path;
  std::string version = "0.1.0";

  static ParserLimits DefaultGatewayLimits() {
    ParserLimits l;
    l.max_bulk_len = 64LL << 20;
    l.max_request_bytes = 128ULL << 20;
    return l;
  }
};

class Server {
 public:
  // Binds, listens and starts the loops. Errors: InvalidArgument (bad options), IoError (socket,
  // bind without fallback, epoll), or the store factory's error.
  static Result<std::unique_ptr<Server>> Start(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const;      // 0: no plain port (listen_plain false)
  uint16_t tls_port() const;  // 0: no TLS port
  // Counters of the gateway (connections, commands; read by the metrics endpoint).
  const struct GatewayState& state() const;
  void Stop();

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace asymnvm::kv::resp
