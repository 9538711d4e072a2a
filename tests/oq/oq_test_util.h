// Shared fixture pieces for the OQ tests: a soft fabric per side, a KV server, clients.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "asymnvm/fabric.h"
#include "fabric/oq/kv_store.h"
#include "fabric/oq/oq.h"

namespace asymnvm::oq::testutil {

struct Side {
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::ProtectionDomain> pd;
  static Side Open() {
    Side s;
    auto f = fabric::Fabric::Open({});
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    s.fabric = std::move(f).value();
    auto pd = s.fabric->AllocPd();
    EXPECT_TRUE(pd.ok());
    s.pd = std::move(pd).value();
    return s;
  }
};

struct KvServer {
  Side side = Side::Open();
  std::unique_ptr<KvStore> kv = KvStore::OpenDram();
  std::unique_ptr<Server> server;

  explicit KvServer(ServerOptions o) {
    o.fabric = side.fabric.get();
    o.pd = side.pd.get();
    auto s = Server::Start(o, kv->handler());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) server = std::move(s).value();
  }
  ~KvServer() {
    if (server) server->Stop();
    server.reset();
  }
};

inline std::unique_ptr<Client> ConnectClient(Side& side, const std::string& address,
                                             uint32_t window = 32) {
  ClientOptions co;
  co.fabric = side.fabric.get();
  co.pd = side.pd.get();
  co.server_address = address;
  co.window = window;
  auto c = Client::Connect(co);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

inline uint64_t Get(Client& c, uint64_t key, Status* st = nullptr) {
  std::vector<uint8_t> resp;
  auto p = KvStore::KeyPayload(key);
  Status s = c.Call(KvStore::WorkerFor(key, c.server().workers), kKvGet, p, &resp);
  if (st != nullptr) *st = s;
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok() || resp.size() != 8) return UINT64_MAX;
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= uint64_t{resp[i]} << (8 * i);
  return v;
}

inline Status Set(Client& c, uint64_t key, uint64_t value) {
  auto p = KvStore::SetPayload(key, value);
  return c.Submit(KvStore::WorkerFor(key, c.server().workers), kKvSet, p);
}

}  // namespace asymnvm::oq::testutil
