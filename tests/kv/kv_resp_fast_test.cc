// The RESP gateway's co-located fast path (doc/resp.md §Fast path) against real asymnvm-kv
// processes: commands on the shards the gateway's own server is the primary of run on the
// gateway's event loops and are acknowledged after one group commit, the rest go through the KV
// client. What must hold:
//  * a SET acknowledged through the fast path survives a SIGKILL of the server (an oracle of the
//    acknowledged keys, read back after the restart);
//  * with three servers (rf 3) such a SET is on the backups: the primary is SIGKILLed and every
//    acknowledged key is read from the promoted backups;
//  * one connection's pipelined replies stay in request order when its commands alternate
//    between local shards (fast path) and remote ones (KV client);
//  * hostile input between fast-path commands gets its error in order, as on the ordinary path.
// Each test checks the gateway's INFO counters to prove the fast path was taken.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "asymnvm/coord.h"
#include "kv/resp/test_client.h"
#include "kv/shard_map.h"
#include "tests/kv/kv_resp_util.h"
#include "tests/kv/kv_test_util.h"

namespace asymnvm::kv {
namespace {

using resp::testing::TestClient;
using testutil::Bulk;
using testutil::Cmd;
using testutil::Daemon;
using testutil::InfoStat;
using testutil::TempDir;
using testutil::Trio;

// Many writers pipeline SETs of their own keys (and overwrite a counter key) through the fast
// path of a stand-alone cluster server (the default: embedded coordinator, rf 1) while the server
// is SIGKILLed; after the restart every acknowledged SET is there (the counter at least at its
// last acknowledged value).
TEST(KvRespFast, AckedFastPathSetsSurviveSigkill) {
  TempDir d;
  const std::vector<std::string> args = {"--pool",      d.File("kv.pool"),
                                         "--size",      "64M",
                                         "--listen",    "unix://" + d.File("kv.sock"),
                                         "--pm-mode",   "flush",
                                         "--coord",     "dir:" + d.File("coord"),
                                         "--workers",   "2",
                                         "--shards",    "8",
                                         "--resp-port", "0"};
  Daemon server;
  server.Start(args, d.File("out0.txt"));
  ASSERT_NE(server.port, 0);
  constexpr int kWriters = 4, kDepth = 16;
  std::mutex mu;
  std::map<std::string, std::string> acked;  // key -> value acknowledged
  std::vector<int64_t> last_counter(kWriters, -1), sent_counter(kWriters, -1);
  std::atomic<int64_t> acked_count{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < kWriters; t++) {
    writers.emplace_back([&, t] {
      TestClient c(server.port);
      if (!c.connected()) return;
      const std::string ctr = "ctr:" + std::to_string(t);
      for (int64_t i = 0;; i += kDepth) {
        std::string q;
        for (int j = 0; j < kDepth; j++) {
          const int64_t n = i + j;
          q += j + 1 < kDepth ? Cmd({"SET", "k:" + std::to_string(t) + ":" + std::to_string(n),
                                     "v" + std::to_string(n)})
                              : Cmd({"SET", ctr, std::to_string(n)});
        }
        {
          std::lock_guard<std::mutex> l(mu);
          sent_counter[t] = i + kDepth - 1;
        }
        if (!c.Send(q)) return;
        auto r = c.Read(kDepth, 10000);
        std::lock_guard<std::mutex> l(mu);
        for (size_t j = 0; j < r.size(); j++) {
          if (r[j] != "+OK\r\n") return;  // the server is gone (or failed): outcome unknown
          const int64_t n = i + static_cast<int64_t>(j);
          if (j + 1 < kDepth) {
            acked["k:" + std::to_string(t) + ":" + std::to_string(n)] = "v" + std::to_string(n);
          } else {
            last_counter[t] = n;
          }
          acked_count++;
        }
        if (r.size() < static_cast<size_t>(kDepth)) return;
      }
    });
  }
  // Kill it in the middle of the stream, once enough is acknowledged (observable state).
  ASSERT_TRUE(
      testutil::WaitFor([&] { return acked_count.load() >= 3000; }, std::chrono::seconds(120)));
  const int64_t fast = InfoStat(server.port, "asymnvm_fast_path_commands");
  server.Kill9();
  for (auto& w : writers) w.join();
  EXPECT_GE(fast, 1000) << "the SETs did not take the fast path";

  server.Start(args, d.File("out1.txt"));
  ASSERT_NE(server.port, 0);
  TestClient c(server.port);
  ASSERT_TRUE(c.connected());
  std::vector<std::pair<std::string, std::string>> expect(acked.begin(), acked.end());
  size_t missing = 0;
  for (size_t i = 0; i < expect.size(); i += 256) {
    std::string q;
    const size_t n = std::min<size_t>(256, expect.size() - i);
    for (size_t j = 0; j < n; j++) q += Cmd({"GET", expect[i + j].first});
    ASSERT_TRUE(c.Send(q));
    auto r = c.Read(n);
    ASSERT_EQ(r.size(), n);
    for (size_t j = 0; j < n; j++) {
      if (r[j] != Bulk(expect[i + j].second)) {
        if (missing++ < 5) ADD_FAILURE() << expect[i + j].first << " -> " << r[j];
      }
    }
  }
  EXPECT_EQ(missing, 0u) << "of " << expect.size() << " acknowledged SETs";
  for (int t = 0; t < kWriters; t++) {
    if (last_counter[t] < 0) continue;
    ASSERT_TRUE(c.Send(Cmd({"GET", "ctr:" + std::to_string(t)})));
    auto rs = c.Read(1);
    ASSERT_EQ(rs.size(), 1u);
    const std::string& r = rs[0];
    ASSERT_EQ(r.rfind("$", 0), 0u) << r;
    const int64_t v = std::stoll(r.substr(r.find("\r\n") + 2));
    EXPECT_GE(v, last_counter[t]) << "writer " << t;
    EXPECT_LE(v, sent_counter[t]) << "writer " << t;
  }
  EXPECT_GT(InfoStat(server.port, "asymnvm_fast_path_commands"), 0);
  int st = server.Term();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

// Hostile input between fast-path commands on one connection: an unknown command gets its error
// in sequence and the connection goes on; an oversized bulk header (Redis's "$2000000000") and a
// malformed frame get their error at once, after the replies before them, then the connection
// closes (as Redis does).
TEST(KvRespFast, HostileInputBetweenFastPathCommands) {
  TempDir d;
  Daemon server;
  server.Start(
      {"--pool", d.File("kv.pool"), "--size", "64M", "--listen", "unix://" + d.File("kv.sock"),
       "--pm-mode", "flush", "--coord", "dir:" + d.File("coord"), "--resp-port", "0"},
      d.File("out.txt"));
  ASSERT_NE(server.port, 0);
  {
    TestClient c(server.port);
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.Send(Cmd({"SET", "a", "1"}) + Cmd({"GET", "a"}) + Cmd({"NOSUCHCOMMAND", "a"}) +
                       Cmd({"INCR", "a"}) + Cmd({"GET", "b"}) + Cmd({"PING"}) +
                       "*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$2000000000\r\n"));
    auto r = c.Read(7);
    ASSERT_EQ(r.size(), 7u);
    EXPECT_EQ(r[0], "+OK\r\n");
    EXPECT_EQ(r[1], Bulk("1"));
    EXPECT_EQ(r[2].rfind("-ERR unknown command", 0), 0u) << r[2];
    EXPECT_EQ(r[3], ":2\r\n");
    EXPECT_EQ(r[4], "$-1\r\n");
    EXPECT_EQ(r[5], "+PONG\r\n");
    EXPECT_EQ(r[6], "-ERR Protocol error: invalid bulk length\r\n");
    EXPECT_TRUE(c.WaitClosed());
  }
  {
    TestClient c(server.port);
    ASSERT_TRUE(c.Send(Cmd({"SET", "c", "3"}) + Cmd({"GET", "c"}) + "*x\r\n" + Cmd({"GET", "c"})));
    auto r = c.Read(3);
    ASSERT_EQ(r.size(), 3u);
    EXPECT_EQ(r[0], "+OK\r\n");
    EXPECT_EQ(r[1], Bulk("3"));
    EXPECT_EQ(r[2].rfind("-ERR Protocol error", 0), 0u) << r[2];
    EXPECT_TRUE(c.WaitClosed());
  }
  EXPECT_GT(InfoStat(server.port, "asymnvm_fast_path_commands"), 0);
}

// One connection pipelines SET / GET / INCR / APPEND / DEL over keys of every shard (two of the
// six are local: fast path; four remote: KV client), several connections at once; every reply
// must be the one a sequential execution of that connection's commands gives, in order.
TEST(KvRespFast, PipelinedMixedLocalAndRemoteKeys_RepliesInRequestOrder) {
  TempDir d;
  Trio trio(d);
  trio.StartAll();
  for (auto& s : trio.servers) ASSERT_NE(s.port, 0);
  ASSERT_TRUE(trio.WaitSynced(2));
  const uint16_t port = trio.servers[0].port;
  const int64_t fast0 = InfoStat(port, "asymnvm_fast_path_commands");
  const int64_t total0 = InfoStat(port, "total_commands_processed");
  constexpr int kConns = 3, kRounds = 120;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kConns; t++) {
    ts.emplace_back([&, t] {
      TestClient c(port);
      if (!c.connected()) {
        mismatches++;
        return;
      }
      std::mt19937_64 rng(t);
      std::map<std::string, std::string> model;
      std::string q;
      std::vector<std::string> want;
      for (int i = 0; i < kRounds; i++) {
        const std::string k = "o:" + std::to_string(t) + ":" + std::to_string(rng() % 40);
        const std::string ctr = "n:" + std::to_string(t) + ":" + std::to_string(rng() % 9);
        const std::string v = "v" + std::to_string(i);
        q += Cmd({"SET", k, v});
        want.push_back("+OK\r\n");
        model[k] = v;
        q += Cmd({"GET", k});
        want.push_back(Bulk(v));
        q += Cmd({"INCR", ctr});
        model[ctr] = std::to_string(model.count(ctr) ? std::stoll(model[ctr]) + 1 : 1);
        want.push_back(":" + model[ctr] + "\r\n");
        q += Cmd({"APPEND", k, "+"});
        model[k] += "+";
        want.push_back(":" + std::to_string(model[k].size()) + "\r\n");
        if (i % 5 == 4) {
          q += Cmd({"DEL", k});
          model.erase(k);
          want.push_back(":1\r\n");
          q += Cmd({"GET", k});
          want.push_back("$-1\r\n");
        }
        q += Cmd({"PING"});  // runs on the loop itself, between the others
        want.push_back("+PONG\r\n");
      }
      if (!c.Send(q)) {
        mismatches++;
        return;
      }
      auto r = c.Read(want.size());
      if (r.size() != want.size()) {
        ADD_FAILURE() << "connection " << t << ": " << r.size() << " of " << want.size()
                      << " replies";
        mismatches++;
        return;
      }
      for (size_t i = 0; i < want.size(); i++) {
        if (r[i] != want[i]) {
          if (mismatches++ < 5) {
            ADD_FAILURE() << "connection " << t << " reply " << i << ": " << r[i]
                          << " != " << want[i];
          }
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(mismatches.load(), 0);
  const int64_t fast = InfoStat(port, "asymnvm_fast_path_commands") - fast0;
  const int64_t total = InfoStat(port, "total_commands_processed") - total0;
  // Both paths were taken: some commands on local shards, the others (and the PINGs) not.
  EXPECT_GT(fast, 0);
  EXPECT_LT(fast, total - kConns * kRounds);
}

// SETs acknowledged by server 0's fast path (its own shards) are on the backups: server 0 is
// SIGKILLed, the map promotes backups, and server 1's gateway reads every acknowledged key back.
TEST(KvRespFast, ThreeServers_FastPathSetsAreOnTheBackups) {
  TempDir d;
  Trio trio(d);
  trio.StartAll();
  for (auto& s : trio.servers) ASSERT_NE(s.port, 0);
  ASSERT_TRUE(trio.WaitSynced(2));
  const uint16_t port = trio.servers[0].port;
  const int64_t fast0 = InfoStat(port, "asymnvm_fast_path_commands");
  std::map<std::string, std::string> acked;
  {
    TestClient c(port);
    ASSERT_TRUE(c.connected());
    for (int round = 0; round < 10; round++) {
      std::string q;
      std::vector<std::string> keys;
      for (int i = 0; i < 32; i++) {
        keys.push_back("b:" + std::to_string(round * 32 + i));
        q += Cmd({"SET", keys.back(), "value-" + keys.back()});
      }
      ASSERT_TRUE(c.Send(q));
      auto r = c.Read(keys.size());
      ASSERT_EQ(r.size(), keys.size());
      for (size_t i = 0; i < keys.size(); i++) {
        ASSERT_EQ(r[i], "+OK\r\n") << keys[i];
        acked[keys[i]] = "value-" + keys[i];
      }
    }
  }
  const int64_t fast = InfoStat(port, "asymnvm_fast_path_commands") - fast0;
  EXPECT_GT(fast, 0) << "no SET took the fast path";
  EXPECT_LT(fast, static_cast<int64_t>(acked.size())) << "every key was local?";
  {
    // Replicated shards keep a transaction to one shard (Redis Cluster's rule): keys of two
    // shards get -CROSSSLOT and nothing runs; a hash tag puts them in one shard.
    TestClient c(port);
    ASSERT_TRUE(c.connected());
    std::string k2 = "x";
    while (ShardOf(k2, 6) == ShardOf("b:0", 6)) k2 += "x";  // the trio has 6 shards
    ASSERT_TRUE(c.Send(Cmd({"MULTI"}) + Cmd({"SET", "b:0", "changed"}) + Cmd({"SET", k2, "v"}) +
                       Cmd({"EXEC"}) + Cmd({"MSETNX", "{t}1", "a", "{t}2", "b"})));
    auto r = c.Read(5);
    ASSERT_EQ(r.size(), 5u);
    EXPECT_EQ(r[3].rfind("-CROSSSLOT", 0), 0u) << r[3];
    EXPECT_EQ(r[4], ":1\r\n");
  }
  trio.servers[0].Kill9();
  ASSERT_TRUE(trio.WaitSynced(1)) << "the map never repaired after the primary's SIGKILL";
  TestClient c(trio.servers[1].port);
  ASSERT_TRUE(c.connected());
  std::string q;
  for (const auto& [k, v] : acked) q += Cmd({"GET", k});
  ASSERT_TRUE(c.Send(q));
  auto r = c.Read(acked.size(), 60000);
  ASSERT_EQ(r.size(), acked.size());
  size_t i = 0, missing = 0;
  for (const auto& [k, v] : acked) {
    if (r[i++] != Bulk(v) && missing++ < 5) ADD_FAILURE() << k << " -> " << r[i - 1];
  }
  EXPECT_EQ(missing, 0u);
}

}  // namespace
}  // namespace asymnvm::kv
