// RDMP-KV's server-bypass path (doc/kv.md §RDMP) end to end: every value size through the
// server-reply, server-bypass and threshold-hybrid clients, read back by the others, across a
// clean restart and a SIGKILL of the real daemon; the persist-flag rule after a SIGKILL (a value
// written without its flag is not visible, a flagged one is, published or not); a reservation
// that expires revokes its client's connection before the slot is reclaimed.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "common/checksum.h"
#include "fabric/oq/oq.h"
#include "kv/format.h"
#include "kv/rdmp.h"
#include "kv/server.h"
#include "kv/store.h"
#include "kv/wire.h"
#include "tests/kv/kv_test_util.h"

namespace asymnvm::kv {
namespace {

using testutil::Kill9;
using testutil::Proc;
using testutil::StartKv;
using testutil::TempDir;
using testutil::Term;

std::vector<std::string> Args(const TempDir& d) {
  return {"--pool",    d.File("kv.pool"),
          "--size",    "64M",
          "--listen",  "unix://" + d.File("kv.sock"),
          "--pm-mode", "flush",
          "--coord",   "none",
          "--workers", "2",
          "--shards",  "4"};
}

std::unique_ptr<Client> Open(const std::string& address, size_t threshold, int stop_after = 0) {
  ClientOptions o;
  o.servers = {address};
  o.retry_deadline = std::chrono::seconds(20);
  o.bypass_threshold = threshold;
  o.TEST_bypass_stop_after = stop_after;
  auto c = Client::Open(o);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(c).value() : nullptr;
}

std::string Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& ch : s) ch = static_cast<char>(rng());
  return s;
}

const std::vector<size_t> kSizes = {0, 1, 100, 16383, 16384, 50000, 300000, kMaxValueSize};

TEST(KvRdmp, EverySizeOnEveryPath_ReadBackByTheOthers_AcrossRestartAndSigkill) {
  TempDir d;
  Proc p = StartKv(Args(d));
  ASSERT_FALSE(p.address().empty()) << p.first_line;
  struct Mode {
    const char* name;
    size_t threshold;
  };
  const std::vector<Mode> modes = {{"reply", kNoBypass}, {"bypass", 0}, {"hybrid", 16 * 1024}};
  std::vector<std::unique_ptr<Client>> clients;
  for (const auto& m : modes) clients.push_back(Open(p.address(), m.threshold));
  for (auto& c : clients) ASSERT_NE(c, nullptr);
  std::map<std::string, std::string> expect;
  for (size_t m = 0; m < modes.size(); m++) {
    for (size_t n : kSizes) {
      const std::string key = std::string(modes[m].name) + "-" + std::to_string(n);
      expect[key] = Random(n, n * 7 + m);
      ASSERT_TRUE(clients[m]->Put(key, expect[key]).ok()) << key;
    }
  }
  // Overwrite one bypass key through the reply path and one reply key through bypass.
  expect["bypass-300000"] = Random(1000, 1);
  ASSERT_TRUE(clients[0]->Put("bypass-300000", expect["bypass-300000"]).ok());
  expect["reply-50000"] = Random(70000, 2);
  ASSERT_TRUE(clients[1]->Put("reply-50000", expect["reply-50000"]).ok());
  auto check_all = [&](const std::string& when) {
    for (auto& c : clients) {
      for (const auto& [k, v] : expect) {
        auto g = c->Get(k);
        ASSERT_TRUE(g.ok()) << when << " " << k << ": " << g.status().ToString();
        ASSERT_TRUE(g->found) << when << " " << k;
        ASSERT_EQ(g->value.size(), v.size()) << when << " " << k;
        ASSERT_TRUE(g->value == v) << when << " " << k;
      }
    }
  };
  check_all("live");
  const RdmpCounters reply = clients[0]->rdmp_counters(), bypass = clients[1]->rdmp_counters(),
                     hybrid = clients[2]->rdmp_counters();
  EXPECT_EQ(reply.bypass_puts, 0u);
  EXPECT_EQ(reply.bypass_gets, 0u);
  EXPECT_EQ(bypass.bypass_puts, kSizes.size() + 1);
  EXPECT_EQ(bypass.bypass_gets, expect.size());  // every value read one-sidedly
  EXPECT_EQ(bypass.fallbacks, 0u);
  EXPECT_EQ(hybrid.bypass_puts, 4u);  // 16384, 50000, 300000, 1 MiB
  size_t large = 0;
  for (const auto& [k, v] : expect) large += v.size() >= 16 * 1024 ? 1 : 0;
  EXPECT_EQ(hybrid.bypass_gets, large);

  ASSERT_EQ(Term(p), 0);
  p = StartKv(Args(d));
  ASSERT_FALSE(p.address().empty()) << p.first_line;
  check_all("after a clean restart");  // the clients reconnect (new bypass endpoint too)
  expect["hybrid-50000"] = Random(50000, 3);
  ASSERT_TRUE(clients[2]->Put("hybrid-50000", expect["hybrid-50000"]).ok());
  Kill9(p);
  p = StartKv(Args(d));
  ASSERT_FALSE(p.address().empty()) << p.first_line;
  check_all("after SIGKILL");
}

// The RDMP-KV recovery rule: after a crash, a slot counts only if its persist flag is set.
TEST(KvRdmp, SigkillAfterValueOrAfterPersistFlag_OnlyFlaggedValuesSurvive) {
  TempDir d;
  Proc p = StartKv(Args(d));
  ASSERT_FALSE(p.address().empty()) << p.first_line;
  auto plain = Open(p.address(), kNoBypass);
  ASSERT_TRUE(plain->Put("no-flag", "old").ok());
  ASSERT_TRUE(plain->Put("flagged", "old").ok());
  const std::string v1 = Random(40000, 11), v2 = Random(40000, 12);
  auto stop1 = Open(p.address(), 0, 1);
  EXPECT_EQ(stop1->Put("no-flag", v1).code(), StatusCode::kAborted);
  auto stop2 = Open(p.address(), 0, 2);
  EXPECT_EQ(stop2->Put("flagged", v2).code(), StatusCode::kAborted);
  // Neither is published yet (the reservation has not expired).
  EXPECT_EQ(plain->Get("no-flag")->value, "old");
  EXPECT_EQ(plain->Get("flagged")->value, "old");
  Kill9(p);
  p = StartKv(Args(d));
  ASSERT_FALSE(p.address().empty()) << p.first_line;
  auto after = Open(p.address(), 0);
  EXPECT_EQ(after->Get("no-flag")->value, "old");
  auto g = after->Get("flagged");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(g->value == v2);
  // Versions moved past the abandoned slot: a new write is newer than everything.
  ASSERT_TRUE(after->Put("no-flag", "new").ok());
  EXPECT_GT(after->Get("no-flag")->version, g->version - 1);
  EXPECT_EQ(after->Get("no-flag")->value, "new");
}

// An in-process server with a short reservation timeout: a client that stops after the persist
// flag gets its value published by the server; one that stops after the value has its connection
// revoked — a write on it afterwards fails — and its slot abandoned.
TEST(KvRdmp, ExpiredReservations_RevokeTheConnectionThenSettle) {
  TempDir d;
  ServerOptions so;
  so.pool_path = d.File("kv.pool");
  so.pool_size = 64ull << 20;
  so.pm_mode = pm::PersistMode::kFlushOnly;
  so.listen_address = "unix://" + d.File("kv.sock");
  so.workers = 1;
  so.shards = 2;
  so.rdmp_reservation_timeout = std::chrono::milliseconds(200);
  auto server = Server::Start(so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string address = (*server)->address();
  auto plain = Open(address, kNoBypass);
  ASSERT_TRUE(plain->Put("a", "old").ok());
  ASSERT_TRUE(plain->Put("b", "old").ok());
  const std::string va = Random(20000, 21), vb = Random(20000, 22);
  EXPECT_EQ(Open(address, 0, 2)->Put("b", vb).code(), StatusCode::kAborted);

  // A raw bypass connection: reserve "a", write only its value, then wait for the expiry.
  auto fab = fabric::Fabric::Open({});
  ASSERT_TRUE(fab.ok());
  auto pd = (*fab)->AllocPd();
  ASSERT_TRUE(pd.ok());
  oq::ClientOptions co;
  co.fabric = fab->get();
  co.pd = pd->get();
  co.server_address = address;
  auto oqc = oq::Client::Connect(co);
  ASSERT_TRUE(oqc.ok());
  std::vector<uint8_t> payload, resp;
  wire::EncodeRequest(wire::Request{}, &payload);
  ASSERT_TRUE((*oqc)->Call(0, wire::kInfo, payload, &resp).ok());
  auto info = wire::DecodeResponse(resp);
  ASSERT_TRUE(info.ok());
  ASSERT_GT(info->body.size(), 36u + fabric::RegionDescriptor::kEncodedSize);
  auto region =
      fabric::RegionDescriptor::Decode(reinterpret_cast<const uint8_t*>(info->body.data()) + 36,
                                       fabric::RegionDescriptor::kEncodedSize);
  ASSERT_TRUE(region.ok());
  EXPECT_EQ(info->body.substr(36 + fabric::RegionDescriptor::kEncodedSize),
            (*server)->rdmp_address());
  auto chan = BypassChannel::Connect(fab->get(), pd->get(), (*server)->rdmp_address(), *region,
                                     1 << 20, std::chrono::seconds(5));
  ASSERT_TRUE(chan.ok()) << chan.status().ToString();
  payload.clear();
  wire::EncodeRequest({wire::kReserve,
                       ShardOf("a", 2),
                       0,
                       0,
                       va.size() | (uint64_t{Crc32c(va.data(), va.size())} << 32),
                       (*chan)->token(),
                       "a",
                       {}},
                      &payload);
  ASSERT_TRUE((*oqc)->Call(0, wire::kReserve, payload, &resp).ok());
  auto slot = wire::DecodeResponse(resp);
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE((*chan)
                  ->WriteDurable(slot->arg + format::kEntryHeaderSize + 1,
                                 {reinterpret_cast<const uint8_t*>(va.data()), va.size()})
                  .ok());
  // Both reservations expire: b (flagged) is published, a's connection is revoked.
  testutil::WaitFor([&] { return (*server)->stats().rdmp_settled >= 2; });
  const ServerStats st = (*server)->stats();
  EXPECT_EQ(st.rdmp_settled, 2u);
  // b's client is gone (its connection failed: settled without a revoke); a's is live: revoked.
  EXPECT_EQ(st.rdmp_revoked, 1u);
  EXPECT_TRUE(plain->Get("b")->value == vb);
  EXPECT_EQ(plain->Get("a")->value, "old");
  // The revoked connection can no longer write anything (the slot may be reclaimed).
  uint8_t pf[8] = {};
  const uint64_t word = format::PersistWord(slot->version);
  std::memcpy(pf, &word, 8);
  EXPECT_FALSE(
      (*chan)->WriteDurable(slot->arg + format::BypassFlagOffset(1, va.size()), {pf, 8}).ok());
  EXPECT_EQ(plain->Get("a")->value, "old");
  // A publish of the abandoned slot is refused; a fresh client's bypass PUT works.
  payload.clear();
  wire::EncodeRequest({wire::kPublish, ShardOf("a", 2), 0, 0, slot->arg, slot->version, "a", {}},
                      &payload);
  EXPECT_EQ((*oqc)->Call(0, wire::kPublish, payload, &resp).code(),
            StatusCode::kFailedPrecondition);
  auto fresh = Open(address, 0);
  ASSERT_TRUE(fresh->Put("a", va).ok());
  EXPECT_TRUE(plain->Get("a")->value == va);
  EXPECT_EQ(fresh->rdmp_counters().bypass_puts, 1u);
  (*server)->Stop();
}

}  // namespace
}  // namespace asymnvm::kv
