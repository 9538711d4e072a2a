// SCAN and DBSIZE through the RESP gateway on a real replicated cluster (three asymnvm-kv, rf 3,
// six shards), on a keyspace nobody changes: every key exactly once (no repeats, none missing) and
// DBSIZE exact, after the writes, after a failover (one server SIGKILLed: its shards' backups take
// over) and after the shards move back (the server restarts, rejoins and the manager spreads
// primaries onto it again: a handoff of each moved shard).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/kv/kv_resp_util.h"

namespace asymnvm::kv {
namespace {

using resp::testing::TestClient;
using testutil::Cmd;
using testutil::TempDir;
using testutil::Trio;

constexpr int kKeys = 1500;

std::string Key(int i) { return "scan:" + std::to_string(i); }

// One reply's bulk strings (SCAN's reply: cursor, then an array of keys) — flattened.
std::vector<std::string> Bulks(const std::string& r) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = r.find('$', at)) != std::string::npos) {
    size_t e = r.find("\r\n", at);
    long len = std::stol(r.substr(at + 1, e - at - 1));
    if (len < 0) {
      at = e + 2;
      continue;
    }
    out.push_back(r.substr(e + 2, static_cast<size_t>(len)));
    at = e + 2 + static_cast<size_t>(len) + 2;
  }
  return out;
}

std::string Call(TestClient& c, const std::vector<std::string>& argv) {
  EXPECT_TRUE(c.Send(Cmd(argv)));
  auto r = c.Read(1, 60000);
  return r.empty() ? std::string("(no reply)") : r[0];
}

// SCAN from cursor 0 to 0 with COUNT 100: the keys returned and how often each came.
void CheckScanAndDbsize(uint16_t port, const char* when) {
  SCOPED_TRACE(when);
  TestClient c(port);
  ASSERT_TRUE(c.connected());
  std::map<std::string, int> seen;
  std::string cursor = "0";
  size_t calls = 0;
  do {
    const std::string r = Call(c, {"SCAN", cursor, "COUNT", "100"});
    auto v = Bulks(r);
    ASSERT_FALSE(v.empty()) << r.substr(0, 200);
    cursor = v[0];
    for (size_t i = 1; i < v.size(); i++) seen[v[i]]++;
    ASSERT_LT(++calls, 100000u) << "SCAN never returned cursor 0";
  } while (cursor != "0");
  size_t repeats = 0;
  for (const auto& [k, n] : seen) repeats += n > 1 ? 1 : 0;
  EXPECT_EQ(repeats, 0u) << "SCAN returned keys more than once on a static keyspace";
  EXPECT_EQ(seen.size(), static_cast<size_t>(kKeys));
  for (int i = 0; i < kKeys; i++) {
    if (!seen.count(Key(i))) {
      ADD_FAILURE() << Key(i) << " missing from SCAN";
      break;
    }
  }
  EXPECT_EQ(Call(c, {"DBSIZE"}), ":" + std::to_string(kKeys) + "\r\n");
}

// The number of distinct servers leading a shard (3 once the primaries are spread again).
size_t Leaders(const std::string& coord) {
  auto c = coord::Coordinator::Open(coord);
  if (!c.ok()) return 0;
  auto n = (*c)->Get("/asymnvm/kv/default/map");
  if (!n.ok()) return 0;
  auto m = ShardMap::Decode(n->data);
  if (!m.ok()) return 0;
  std::set<std::string> p;
  for (const auto& a : m->assignment) p.insert(a.primary);
  return p.size();
}

TEST(KvRespScan, StaticKeyspaceScansOnceAndCountsExactlyAcrossFailoverAndMove) {
  TempDir d;
  Trio trio(d);
  trio.StartAll();
  for (auto& s : trio.servers) ASSERT_NE(s.port, 0);
  ASSERT_TRUE(trio.WaitSynced(2));
  {
    TestClient c(trio.servers[1].port);
    ASSERT_TRUE(c.connected());
    std::string q;
    for (int i = 0; i < kKeys; i++) q += Cmd({"SET", Key(i), "v" + std::to_string(i)});
    ASSERT_TRUE(c.Send(q));
    auto r = c.Read(kKeys, 120000);
    ASSERT_EQ(r.size(), static_cast<size_t>(kKeys));
    for (const auto& x : r) ASSERT_EQ(x, "+OK\r\n");
  }
  CheckScanAndDbsize(trio.servers[1].port, "after the writes");
  // Failover: server 0's shards are taken over by their backups.
  trio.servers[0].Kill9();
  ASSERT_TRUE(trio.WaitSynced(1)) << "the map never repaired after the SIGKILL";
  CheckScanAndDbsize(trio.servers[2].port, "after the failover");
  // Server 0 returns: it is caught up as a backup, and the manager moves primaries back onto it.
  trio.servers[0].Start(trio.Args(0), d.File("out0b.txt"));
  ASSERT_NE(trio.servers[0].port, 0);
  ASSERT_TRUE(
      testutil::WaitFor([&] { return Leaders(trio.coord()) == 3; }, std::chrono::seconds(120)))
      << "the primaries were never spread back";
  ASSERT_TRUE(trio.WaitSynced(2));
  CheckScanAndDbsize(trio.servers[0].port, "after the shards moved back");
  CheckScanAndDbsize(trio.servers[1].port, "after the shards moved back (another gateway)");
}

}  // namespace
}  // namespace asymnvm::kv
