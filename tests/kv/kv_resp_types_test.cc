// Redis hashes, lists, sets and sorted sets (doc/types.md) on a real replicated cluster: three
// asymnvm-kv processes, rf 3, writers pipelining HSET (5 fields, each into a fresh hash; every
// third one 40 fields, more than one atomic batch holds, so it commits in parts: doc/types.md
// §Large commands), LPUSH, SADD and ZADD through the RESP gateways while the primary of a third of
// the shards is SIGKILLed.
// After the failover, with an oracle of what each writer sent and what was acknowledged:
//  * every acknowledged element is there (HSET fields, list elements, set members);
//  * no command is half-applied: each HSET's hash has all its fields or (only if unacknowledged)
//    none; a list or set holds nothing that was never sent;
//  * sizes agree with the elements: HLEN = the fields sent, LLEN = LRANGE's length, SCARD =
//  SMEMBERS' size,
//    ZCARD = ZRANGE's length; every sorted-set member has the score it was sent with, in order;
//  * no list element appears twice (a write is never applied twice).
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "tests/kv/kv_resp_util.h"

namespace asymnvm::kv {
namespace {

using resp::testing::TestClient;
using testutil::Bulk;
using testutil::Cmd;
using testutil::TempDir;
using testutil::Trio;

// A flat reply (array of bulks) → its bulk strings; false if it is not one.
bool BulkArray(const std::string& r, std::vector<std::string>* out) {
  out->clear();
  if (r.empty() || (r[0] != '*' && r[0] != '~')) return false;
  size_t nl = r.find("\r\n");
  long n = std::stol(r.substr(1, nl - 1));
  size_t at = nl + 2;
  for (long i = 0; i < n; i++) {
    if (at >= r.size() || r[at] != '$') return false;
    size_t e = r.find("\r\n", at);
    long len = std::stol(r.substr(at + 1, e - at - 1));
    out->push_back(r.substr(e + 2, static_cast<size_t>(len)));
    at = e + 2 + static_cast<size_t>(len) + 2;
  }
  return at == r.size();
}

struct Oracle {
  std::mutex mu;
  std::set<std::string> hash_acked;
  std::map<std::string, int> hash_sent;  // hash key → its number of fields
  std::map<std::string, std::set<std::string>> list_acked, list_sent;
  std::map<std::string, std::set<std::string>> set_acked, set_sent;
  std::map<std::string, std::set<std::string>> zset_acked;
  std::map<std::string, std::map<std::string, int64_t>> zset_sent;  // member → its score
  std::atomic<int64_t> acked{0};
};

std::string FieldValue(const std::string& key, int f) { return key + "/v" + std::to_string(f); }

// One writer: rounds of a pipeline of kDepth commands (HSET of 5 fields into a fresh hash, LPUSH
// SADD and ZADD of a fresh element into this writer's list, set and sorted set, in turn) until
// `stop` or until its gateway stops answering. A reply other than the success reply leaves that
// command's outcome unknown (it stays "sent", not "acknowledged").
void Writer(uint16_t port, int id, Oracle* o, std::atomic<bool>* stop) {
  constexpr int kDepth = 12;
  TestClient c(port);
  if (!c.connected()) return;
  const std::string list = "l:" + std::to_string(id), set = "s:" + std::to_string(id);
  const std::string zset = "z:" + std::to_string(id);
  for (int64_t n = 0; !stop->load(); n += kDepth) {
    std::string q;
    std::vector<std::pair<int, std::string>> cmds;  // kind (0 hash, 1 list, 2 set, 3 zset), ...
    {
      std::lock_guard<std::mutex> l(o->mu);
      for (int j = 0; j < kDepth; j++) {
        const std::string tag = std::to_string(id) + ":" + std::to_string(n + j);
        switch (j % 4) {
          case 0: {
            const std::string key = "h:" + tag;
            const int fields = j == 8 ? 40 : 5;  // 40: 81 records, committed in parts
            std::vector<std::string> argv = {"HSET", key};
            for (int f = 0; f < fields; f++) {
              argv.push_back("f" + std::to_string(f));
              argv.push_back(FieldValue(key, f));
            }
            q += Cmd(argv);
            o->hash_sent[key] = fields;
            cmds.emplace_back(0, key);
            break;
          }
          case 1:
            q += Cmd({"LPUSH", list, "e" + tag});
            o->list_sent[list].insert("e" + tag);
            cmds.emplace_back(1, "e" + tag);
            break;
          case 2:
            q += Cmd({"SADD", set, "m" + tag});
            o->set_sent[set].insert("m" + tag);
            cmds.emplace_back(2, "m" + tag);
            break;
          default:
            q += Cmd({"ZADD", zset, std::to_string(n + j), "z" + tag});
            o->zset_sent[zset]["z" + tag] = n + j;
            cmds.emplace_back(3, "z" + tag);
        }
      }
    }
    if (!c.Send(q)) return;
    auto r = c.Read(cmds.size(), 60000);
    std::lock_guard<std::mutex> l(o->mu);
    for (size_t j = 0; j < r.size(); j++) {
      const auto& [kind, what] = cmds[j];
      if (kind == 0 && r[j] == ":" + std::to_string(o->hash_sent[what]) + "\r\n") {
        o->hash_acked.insert(what);
      } else if (kind == 1 && r[j].rfind(":", 0) == 0) {
        o->list_acked[list].insert(what);
      } else if (kind == 2 && r[j] == ":1\r\n") {
        o->set_acked[set].insert(what);
      } else if (kind == 3 && r[j] == ":1\r\n") {
        o->zset_acked[zset].insert(what);
      } else {
        continue;  // an error reply (the primary died under it): outcome unknown
      }
      o->acked++;
    }
    if (r.size() < cmds.size()) return;  // the gateway is gone
  }
}

// Reads every key the writers touched through the gateway at `port` and checks it against the
// oracle (the file comment's rules).
void Verify(uint16_t port, Oracle& o) {
  TestClient c(port);
  ASSERT_TRUE(c.connected());
  auto call = [&](const std::vector<std::string>& argv) {
    EXPECT_TRUE(c.Send(Cmd(argv)));
    auto r = c.Read(1, 60000);
    return r.empty() ? std::string("(no reply)") : r[0];
  };
  size_t bad = 0;
  auto fail = [&](const std::string& what) {
    if (bad++ < 10) ADD_FAILURE() << what;
  };
  std::vector<std::string> items;
  // Hashes: all their fields or none; acknowledged → all; HLEN agrees.
  size_t whole = 0, large = 0;
  for (const auto& [key, fields] : o.hash_sent) {
    const std::string all = call({"HGETALL", key});
    if (!BulkArray(all, &items)) {
      fail(key + " HGETALL -> " + all);
      continue;
    }
    const bool acked = o.hash_acked.count(key) > 0;
    if (items.empty()) {
      if (acked) fail("acknowledged HSET " + key + " lost");
      continue;
    }
    std::map<std::string, std::string> m;
    for (size_t i = 0; i + 1 < items.size(); i += 2) m[items[i]] = items[i + 1];
    bool ok = m.size() == static_cast<size_t>(fields) && items.size() == 2 * m.size();
    for (int f = 0; ok && f < fields; f++) ok = m["f" + std::to_string(f)] == FieldValue(key, f);
    if (ok && fields > 5 && acked) large++;
    if (!ok) fail("half-applied or wrong HSET " + key + ": " + all);
    if (call({"HLEN", key}) != ":" + std::to_string(m.size()) + "\r\n") fail("HLEN " + key);
    whole++;
  }
  EXPECT_GE(whole, o.hash_acked.size());
  EXPECT_GT(large, 0u) << "no HSET committed in parts was acknowledged";
  // Lists: acknowledged ⊆ elements ⊆ sent, no duplicates, LLEN = the elements.
  for (const auto& [list, sent] : o.list_sent) {
    const std::string r = call({"LRANGE", list, "0", "-1"});
    if (!BulkArray(r, &items)) {
      fail(list + " LRANGE -> " + r.substr(0, 200));
      continue;
    }
    std::set<std::string> got(items.begin(), items.end());
    if (got.size() != items.size()) fail(list + " holds an element twice");
    for (const auto& e : o.list_acked[list]) {
      if (!got.count(e)) fail("acknowledged LPUSH " + list + " " + e + " lost");
    }
    for (const auto& e : got) {
      if (!sent.count(e)) fail(list + " holds " + e + ", never sent");
    }
    if (call({"LLEN", list}) != ":" + std::to_string(items.size()) + "\r\n") fail("LLEN " + list);
  }
  // Sets: acknowledged ⊆ members ⊆ sent, SCARD = the members.
  for (const auto& [set, sent] : o.set_sent) {
    const std::string r = call({"SMEMBERS", set});
    if (!BulkArray(r, &items)) {
      fail(set + " SMEMBERS -> " + r.substr(0, 200));
      continue;
    }
    std::set<std::string> got(items.begin(), items.end());
    for (const auto& m : o.set_acked[set]) {
      if (!got.count(m)) fail("acknowledged SADD " + set + " " + m + " lost");
    }
    for (const auto& m : got) {
      if (!sent.count(m)) fail(set + " holds " + m + ", never sent");
    }
    if (call({"SCARD", set}) != ":" + std::to_string(items.size()) + "\r\n") fail("SCARD " + set);
  }
  // Sorted sets: acknowledged ⊆ members ⊆ sent, each with its sent score, ascending; ZCARD agrees.
  for (const auto& [zset, sent] : o.zset_sent) {
    const std::string r = call({"ZRANGE", zset, "0", "-1", "WITHSCORES"});
    if (!BulkArray(r, &items) || items.size() % 2 != 0) {
      fail(zset + " ZRANGE -> " + r.substr(0, 200));
      continue;
    }
    std::set<std::string> got;
    int64_t prev = -1;
    for (size_t i = 0; i + 1 < items.size(); i += 2) {
      got.insert(items[i]);
      auto it = sent.find(items[i]);
      if (it == sent.end()) {
        fail(zset + " holds " + items[i] + ", never sent");
      } else if (items[i + 1] != std::to_string(it->second) || it->second < prev) {
        fail(zset + " " + items[i] + " has score " + items[i + 1] + " or is out of order");
      } else {
        prev = it->second;
      }
    }
    if (got.size() * 2 != items.size()) fail(zset + " holds a member twice");
    for (const auto& m : o.zset_acked[zset]) {
      if (!got.count(m)) fail("acknowledged ZADD " + zset + " " + m + " lost");
    }
    if (call({"ZCARD", zset}) != ":" + std::to_string(got.size()) + "\r\n") fail("ZCARD " + zset);
  }
  EXPECT_FALSE(o.zset_acked.empty()) << "no ZADD was acknowledged";
  EXPECT_EQ(bad, 0u) << "of " << o.hash_sent.size() << " HSETs (" << o.hash_acked.size()
                     << " acknowledged), " << o.acked.load() << " acknowledged commands";
}

TEST(KvRespTypes, SigkillPrimaryDuringPipelines_AckedElementsSurviveNoHalfCommands) {
  TempDir d;
  Trio trio(d);
  trio.StartAll();
  for (auto& s : trio.servers) ASSERT_NE(s.port, 0);
  ASSERT_TRUE(trio.WaitSynced(2));
  Oracle o;
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  // Writers on all three gateways: those on server 0 lose their gateway with it; the others'
  // commands on server 0's shards fail over to the promoted backups.
  for (int id = 0; id < 6; id++) {
    writers.emplace_back(Writer, trio.servers[id % 3].port, id, &o, &stop);
  }
  ASSERT_TRUE(testutil::WaitFor([&] { return o.acked.load() >= 600; }, std::chrono::seconds(180)));
  trio.servers[0].Kill9();
  // Keep writing through the failover until the survivors acknowledge more.
  const int64_t at_kill = o.acked.load();
  testutil::WaitFor([&] { return o.acked.load() >= at_kill + 300; }, std::chrono::seconds(120));
  stop = true;
  for (auto& w : writers) w.join();
  ASSERT_TRUE(trio.WaitSynced(1)) << "the map never repaired after the primary's SIGKILL";

  Verify(trio.servers[1].port, o);
  EXPECT_GT(o.acked.load(), at_kill) << "nothing was acknowledged after the SIGKILL";
}

// One server (the default: it leads every shard, no backup): the gateway runs the type commands on
// its fast path, each command's records one batch in the loop's section (doc/types.md). The same
// writers pipeline into it, it is SIGKILLed and restarted on its pool, and the oracle holds.
TEST(KvRespTypes, OneServerFastPath_SigkillDuringPipelines_AckedElementsSurviveNoHalfCommands) {
  TempDir d;
  const std::vector<std::string> args = {"--pool",      d.File("kv.pool"),
                                         "--size",      "64M",
                                         "--listen",    "unix://" + d.File("kv.sock"),
                                         "--pm-mode",   "flush",
                                         "--resp-port", "0"};
  testutil::Daemon server;
  server.Start(args, d.File("out0.txt"));
  ASSERT_NE(server.port, 0);
  Oracle o;
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int id = 0; id < 4; id++) writers.emplace_back(Writer, server.port, id, &o, &stop);
  ASSERT_TRUE(testutil::WaitFor([&] { return o.acked.load() >= 600; }, std::chrono::seconds(180)));
  const int64_t fast = testutil::InfoStat(server.port, "asymnvm_fast_path_commands");
  server.Kill9();
  stop = true;
  for (auto& w : writers) w.join();
  EXPECT_GE(fast, 300) << "the type commands did not take the fast path";
  server.Start(args, d.File("out1.txt"));
  ASSERT_NE(server.port, 0);
  Verify(server.port, o);
  int st = server.Term();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

}  // namespace
}  // namespace asymnvm::kv
