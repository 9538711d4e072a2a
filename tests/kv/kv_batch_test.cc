// Atomic batches of one shard (kv::Client::Batch, doc/kv.md §Batches) and the Redis gateway's
// MULTI/EXEC on top of them, against the real daemon SIGKILLed mid-run: money moves between
// accounts of one shard and the total never changes — after every restart, whatever was in
// flight — and no acknowledged transfer is lost.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "kv/resp/test_client.h"
#include "tests/kv/kv_test_util.h"

namespace asymnvm::kv {
namespace {

using testutil::Kill9;
using testutil::OpenClient;
using testutil::Proc;
using testutil::StartKv;
using testutil::TempDir;

constexpr uint32_t kShards = 4;
constexpr int kAccounts = 6;
constexpr int64_t kInitial = 1000;

std::vector<std::string> Args(const TempDir& d, bool resp = false) {
  std::vector<std::string> a = {"--pool",    d.File("kv.pool"),
                                "--size",    "64M",
                                "--listen",  "unix://" + d.File("kv.sock"),
                                "--pm-mode", "flush",
                                "--coord",   "none",
                                "--workers", "2",
                                "--shards",  std::to_string(kShards)};
  if (resp) {
    for (const char* x : {"--resp-port", "0"}) a.push_back(x);
  }
  return a;
}

// Account keys that share one shard.
std::vector<std::string> Accounts(uint32_t shard) {
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < kAccounts; i++) {
    std::string k = "acct:" + std::to_string(i);
    if (ShardOf(k, kShards) == shard) keys.push_back(k);
  }
  return keys;
}

int64_t Total(Client& c, const std::vector<std::string>& keys) {
  int64_t sum = 0;
  for (const auto& k : keys) {
    auto g = c.Get(k);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    if (g.ok() && g->found) sum += std::stoll(g->value);
  }
  return sum;
}

TEST(KvBatch, TransfersUnderSigkill_TotalNeverChanges_AckedNeverLost) {
  TempDir d;
  Proc p = StartKv(Args(d));
  ASSERT_FALSE(p.address().empty()) << p.first_line;
  const auto keys = Accounts(1);
  {
    auto c = OpenClient({p.address()});
    std::vector<BatchOp> init;
    for (const auto& k : keys) init.push_back({k, std::to_string(kInitial), std::nullopt});
    auto r = c->Batch(init);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->applied);
    // Bad input: keys of two shards, a duplicate, too many ops.
    const auto other = Accounts(2);
    EXPECT_EQ(
        c->Batch({{keys[0], "1", std::nullopt}, {other[0], "1", std::nullopt}}).status().code(),
        StatusCode::kInvalidArgument);
    EXPECT_EQ(
        c->Batch({{keys[0], "1", std::nullopt}, {keys[0], "2", std::nullopt}}).status().code(),
        StatusCode::kInvalidArgument);
    std::vector<BatchOp> many(kMaxBatchOps + 1, BatchOp{keys[0], "1", std::nullopt});
    EXPECT_EQ(c->Batch(many).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(Total(*c, keys), kInitial * kAccounts);
  }
  std::mutex mu;
  std::map<std::string, uint64_t> acked;  // the newest acknowledged version of each account
  std::atomic<uint64_t> committed{0}, conflicts{0}, unknown{0};
  for (int round = 0; round < 4; round++) {
    std::atomic<bool> stop{false};
    std::atomic<int> opened{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 2; t++) {
      ts.emplace_back([&, t] {
        // The server may be SIGKILLed before a slow thread connects: not a failure.
        auto c = testutil::TryOpenClient({p.address()}, std::chrono::seconds(2));
        opened++;  // tried: the kill waits for both threads to be past their connect
        if (!c) return;
        std::mt19937_64 rng(round * 10 + t);
        while (!stop) {
          const auto& a = keys[rng() % keys.size()];
          const auto& b = keys[rng() % keys.size()];
          if (a == b) continue;
          auto ga = c->Get(a), gb = c->Get(b);
          if (!ga.ok() || !gb.ok()) continue;
          const int64_t amount = static_cast<int64_t>(rng() % 50);
          auto r = c->Batch({{a, std::to_string(std::stoll(ga->value) - amount), ga->version},
                             {b, std::to_string(std::stoll(gb->value) + amount), gb->version}});
          if (!r.ok()) {
            unknown++;
            continue;
          }
          if (!r->applied) {
            conflicts++;
            continue;
          }
          committed++;
          std::lock_guard<std::mutex> l(mu);
          acked[a] = std::max(acked[a], r->versions[0]);
          acked[b] = std::max(acked[b], r->versions[1]);
        }
      });
    }
    // Mid-run, once this round has committed transfers: batches in flight.
    const uint64_t before = committed.load();
    EXPECT_TRUE(testutil::WaitFor(  // not ASSERT: the threads must be joined
        [&] { return opened.load() == 2 && committed.load() >= before + 10; },
        std::chrono::seconds(60)))
        << "no transfer committed in round " << round;
    Kill9(p);
    stop = true;
    for (auto& t : ts) t.join();
    // Then crash it again while it starts up and recovers (the index scan, the OQ's re-execution
    // of landed requests), at a different moment each round.
    for (int again = 0; again < 2; again++) {
      const pid_t early = testutil::SpawnKv(Args(d));
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + 15 * round + 7 * again));
      kill(early, SIGKILL);
      testutil::WaitExit(early);
    }
    p = StartKv(Args(d));
    ASSERT_FALSE(p.address().empty()) << p.first_line;
    auto c = OpenClient({p.address()});
    EXPECT_EQ(Total(*c, keys), kInitial * kAccounts) << "after SIGKILL round " << round;
    for (const auto& [k, v] : acked) {
      auto g = c->Get(k);
      ASSERT_TRUE(g.ok());
      EXPECT_GE(g->version, v) << k << ": an acknowledged transfer was lost";
    }
  }
  EXPECT_GT(committed.load(), 20u);
  std::cout << "transfers committed " << committed << ", conflicts " << conflicts
            << ", outcome unknown " << unknown << "\n";
}

// PutMany: each put its own outcome; a key's puts keep their order across the fast path (posted
// together), the bypass path and the chunked path; bad items fail alone.
TEST(KvBatch, PutMany_EachItsOutcome_OrderKept) {
  TempDir d;
  Proc p = StartKv(Args(d));
  ASSERT_FALSE(p.address().empty()) << p.first_line;
  auto c = OpenClient({p.address()});
  const std::string big(100000, 'b'), mid(20000, 'm');
  std::vector<std::pair<std::string_view, std::string_view>> kvs = {
      {"a", "1"}, {"b", "1"}, {"a", big}, {"", "no key"}, {"b", "2"},
      {"a", "3"}, {"c", mid}, {"c", "4"}, {"d", "5"}};
  for (int i = 0; i < 50; i++) kvs.push_back({"many", "x"});
  std::vector<Status> st = c->PutMany(kvs);
  ASSERT_EQ(st.size(), kvs.size());
  for (size_t i = 0; i < st.size(); i++) {
    if (kvs[i].first.empty()) {
      EXPECT_EQ(st[i].code(), StatusCode::kInvalidArgument);
    } else {
      EXPECT_TRUE(st[i].ok()) << i << ": " << st[i].ToString();
    }
  }
  EXPECT_EQ(c->Get("a")->value, "3");
  EXPECT_EQ(c->Get("b")->value, "2");
  EXPECT_EQ(c->Get("c")->value, "4");
  EXPECT_EQ(c->Get("d")->value, "5");
  EXPECT_EQ(c->rdmp_counters().bypass_puts, 2u);  // big and mid (>= 16 KiB)
  Kill9(p);                                       // acknowledged: durable
  p = StartKv(Args(d));
  ASSERT_FALSE(p.address().empty()) << p.first_line;
  auto c2 = OpenClient({p.address()});
  EXPECT_EQ(c2->Get("a")->value, "3");
  EXPECT_EQ(c2->Get("many")->value, "x");
}

// The same through the Redis gateway: MULTI / DECRBY / INCRBY / EXEC, SIGKILL mid-run. The server
// leads every shard unreplicated (as a stand-alone Redis, doc/resp.md §Transactions across
// shards), so the accounts are in different shards: each EXEC is one multi-shard batch, whole or
// absent after the SIGKILL.
TEST(KvBatch, MultiExecUnderSigkill_TotalNeverChanges) {
  TempDir d;
  // The daemon prints "listening", "log", "rdmp", "resp HOST:PORT" in one write; StartKv keeps
  // only the first line, so this test runs it with stdout in a file and reads the resp line.
  std::vector<std::string> keys;  // one account per shard
  for (uint32_t shard = 0; shard < kShards; shard++) keys.push_back(Accounts(shard)[0]);
  int launches = 0;
  auto launch = [&](pid_t* pid) -> uint16_t {
    const std::string out = d.File("out" + std::to_string(launches++) + ".txt");
    SpawnSpec spec = testutil::KvSpec(Args(d, true), "warn");
    spec.out = SpawnSpec::Out::kFile;
    spec.out_file = out;
    std::string error;
    *pid = SpawnProcess(spec, &error);
    if (*pid < 0) {
      ADD_FAILURE() << error;
      return 0;
    }
    for (int i = 0; i < 400; i++) {
      std::ifstream in(out);
      std::string line;
      while (std::getline(in, line)) {
        if (line.rfind("resp ", 0) == 0)
          return static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return 0;
  };
  pid_t pid = -1;
  uint16_t port = launch(&pid);
  ASSERT_NE(port, 0);
  auto cmd = [](const std::vector<std::string>& args) {
    std::string s = "*" + std::to_string(args.size()) + "\r\n";
    for (const auto& a : args) s += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
    return s;
  };
  {
    resp::testing::TestClient c(port);
    ASSERT_TRUE(c.connected());
    std::vector<std::string> mset = {"MSET"};
    for (const auto& k : keys) {
      mset.push_back(k);
      mset.push_back(std::to_string(kInitial));
    }
    ASSERT_TRUE(c.Send(cmd(mset)));
    ASSERT_EQ(c.Read(1).at(0), "+OK\r\n");
    // Keys of two shards in one transaction, and a multi-key command across them: applied.
    ASSERT_TRUE(c.Send(cmd({"MULTI"}) + cmd({"INCRBY", keys[0], "1"}) +
                       cmd({"DECRBY", keys[1], "1"}) + cmd({"EXEC"})));
    auto r = c.Read(4);
    ASSERT_EQ(r.size(), 4u);
    EXPECT_EQ(r[3], "*2\r\n:" + std::to_string(kInitial + 1) +
                        "\r\n:" + std::to_string(kInitial - 1) + "\r\n");
    std::string fresh0 = "fresh:", fresh1 = "fresh:";
    while (ShardOf(fresh0, kShards) != 0) fresh0 += "0";
    while (ShardOf(fresh1, kShards) != 1) fresh1 += "1";
    ASSERT_TRUE(c.Send(cmd({"MSETNX", fresh0, "1", fresh1, "2"})));
    EXPECT_EQ(c.Read(1).at(0), ":1\r\n");
  }
  auto total = [&](uint16_t prt) {
    resp::testing::TestClient c(prt);
    std::string q;
    for (const auto& k : keys) q += cmd({"GET", k});
    EXPECT_TRUE(c.Send(q));
    auto rs = c.Read(keys.size());
    int64_t sum = 0;
    for (const auto& x : rs) {
      if (x.rfind("$", 0) != 0 || x == "$-1\r\n") continue;
      sum += std::stoll(x.substr(x.find("\r\n") + 2));
    }
    return sum;
  };
  EXPECT_EQ(total(port), kInitial * static_cast<int64_t>(keys.size()));
  uint64_t execs = 0;
  for (int round = 0; round < 3; round++) {
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> ok{0};
    std::thread t([&] {
      resp::testing::TestClient c(port);
      std::mt19937_64 rng(round);
      while (!stop && c.connected()) {
        const auto& a = keys[rng() % keys.size()];
        const auto& b = keys[rng() % keys.size()];
        if (a == b) continue;
        const std::string amount = std::to_string(rng() % 40);
        if (!c.Send(cmd({"MULTI"}) + cmd({"DECRBY", a, amount}) + cmd({"INCRBY", b, amount}) +
                    cmd({"EXEC"}))) {
          break;
        }
        auto rs = c.Read(4, 3000);
        if (rs.size() < 4) break;  // the server died mid-transaction
        if (rs[3].rfind("*2", 0) == 0) ok++;
      }
    });
    ASSERT_TRUE(testutil::WaitFor([&] { return ok.load() >= 10; }));  // transactions ran
    kill(pid, SIGKILL);
    testutil::WaitExit(pid);
    stop = true;
    t.join();
    execs += ok;
    port = launch(&pid);
    ASSERT_NE(port, 0);
    EXPECT_EQ(total(port), kInitial * static_cast<int64_t>(keys.size()))
        << "after SIGKILL round " << round;
  }
  kill(pid, SIGTERM);
  testutil::WaitExit(pid);
  EXPECT_GT(execs, 10u);
}

}  // namespace
}  // namespace asymnvm::kv
