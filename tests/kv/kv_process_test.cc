// asymnvm-kv as a real process: the command line, the client API over the wire (every operation,
// large values, bad input), the coordinator registration, and kill -9 rounds checked for
// single-key linearizability (which implies: no acknowledged PUT lost, no deleted key back).
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "fabric/oq/oq.h"
#include "kv/store.h"
#include "kv/wire.h"
#include "tests/common/linearizability.h"
#include "tests/kv/kv_test_util.h"

namespace asymnvm::kv {
namespace {

using testutil::OpenClient;
using testutil::Proc;
using testutil::StartKv;
using testutil::TempDir;

std::vector<std::string> ServerArgs(const TempDir& d, const std::string& sock = "kv.sock") {
  return {"--pool",    d.File("kv.pool"),
          "--size",    "64M",
          "--listen",  "unix://" + d.File(sock),
          "--pm-mode", "flush",
          "--coord",   "none",
          "--workers", "2",
          "--shards",  "4"};
}

TEST(KvCli, BadArguments_ExitTwo) {
  TempDir d;
  const std::string pool = d.File("p.pool");
  for (std::vector<std::string> args : {std::vector<std::string>{"--bogus"},
                                        {},
                                        {"--pool", pool, "--workers", "0"},
                                        {"--pool", pool, "--segment-size", "5000"},
                                        {"--pool", pool, "--size", "lots"},
                                        {"--pool", pool, "--pm-mode", "fast"},
                                        {"--pool", pool, "--replication", "paxos"}}) {
    SpawnSpec spec = testutil::KvSpec(args, "warn");
    spec.out = SpawnSpec::Out::kNull;
    spec.stderr_too = true;
    const pid_t pid = SpawnProcess(spec);
    ASSERT_GT(pid, 0);
    int st = testutil::WaitExit(pid);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 2) << (args.empty() ? "(none)" : args.back());
  }
}

TEST(KvCli, NotAPool_ExitOne) {
  TempDir d;
  {
    FILE* f = fopen(d.File("kv.pool").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::string junk(2 << 20, 'x');
    fwrite(junk.data(), 1, junk.size(), f);
    fclose(f);
  }
  Proc p = StartKv(ServerArgs(d));
  int st = testutil::WaitExit(p.pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 1);
  EXPECT_EQ(p.first_line, "");
}

// The replication mode is the pool's (doc/kv.md §Baselines): a pool created for one mode is
// refused under another, and still opens under its own.
TEST(KvCli, PoolOfAnotherReplicationMode_ExitOne) {
  TempDir d;
  auto args = [&](const std::string& mode) {
    auto a = ServerArgs(d);
    a.insert(a.end(), {"--replication", mode});
    return a;
  };
  {
    Proc p = StartKv(args("share"));
    ASSERT_FALSE(p.address().empty());
    int st = testutil::Term(p);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  Proc other = StartKv(args("rwrite"));
  int st = testutil::WaitExit(other.pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 1);
  EXPECT_EQ(other.first_line, "");
  Proc same = StartKv(args("share"));
  EXPECT_FALSE(same.address().empty());
  st = testutil::Term(same);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(KvApi, Operations_BadInput_LargeValues_SurviveRestart) {
  TempDir d;
  Proc p = StartKv(ServerArgs(d));
  ASSERT_FALSE(p.address().empty()) << p.first_line;
  auto c = OpenClient({p.address()});
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->shard_count(), 4u);

  ASSERT_TRUE(c->Put("k1", "v1").ok());
  auto g = c->Get("k1");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->found);
  EXPECT_EQ(g->value, "v1");
  EXPECT_GT(g->version, 0u);
  auto absent = c->Get("nope");
  ASSERT_TRUE(absent.ok());
  EXPECT_FALSE(absent->found);
  EXPECT_EQ(absent->version, 0u);

  auto pi = c->PutIf("k1", "v2", g->version);
  ASSERT_TRUE(pi.ok()) << pi.status().ToString();
  EXPECT_TRUE(pi->applied);
  EXPECT_GT(pi->version, g->version);
  auto stale = c->PutIf("k1", "v3", g->version);
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(stale->applied);
  EXPECT_EQ(stale->version, pi->version);
  auto create = c->PutIf("fresh", "x", 0);
  ASSERT_TRUE(create.ok());
  EXPECT_TRUE(create->applied);

  auto i1 = c->Incr("ctr", 41);
  ASSERT_TRUE(i1.ok()) << i1.status().ToString();
  auto i2 = c->Incr("ctr", 1);
  ASSERT_TRUE(i2.ok());
  EXPECT_EQ(i2->value, 42);
  EXPECT_GT(i2->version, i1->version);
  auto notint = c->Incr("k1", 1);
  EXPECT_EQ(notint.status().code(), StatusCode::kInvalidArgument) << notint.status().ToString();

  auto del = c->Delete("k1");
  ASSERT_TRUE(del.ok());
  EXPECT_TRUE(del->existed);
  EXPECT_EQ(del->version, pi->version);
  auto del2 = c->Delete("k1");
  ASSERT_TRUE(del2.ok());
  EXPECT_FALSE(del2->existed);

  // Large values: 1 MiB, and one just over the inline limit, also through PutIf.
  std::string big(kMaxValueSize, '\0');
  std::mt19937_64 rng(7);
  for (auto& ch : big) ch = static_cast<char>(rng());
  ASSERT_TRUE(c->Put("big", big).ok());
  auto gb = c->Get("big");
  ASSERT_TRUE(gb.ok()) << gb.status().ToString();
  EXPECT_EQ(gb->value.size(), big.size());
  EXPECT_TRUE(gb->value == big);
  std::string mid(kMaxInlineValue + 1, 'm');
  auto pm = c->PutIf("mid", mid, 0);
  ASSERT_TRUE(pm.ok()) << pm.status().ToString();
  EXPECT_TRUE(pm->applied);

  // Bad input: clear errors, nothing sent.
  EXPECT_EQ(c->Put("", "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Put(std::string(kMaxKeySize + 1, 'k'), "x").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(c->Put(std::string(kMaxKeySize, 'k'), "x").ok());
  EXPECT_EQ(c->Put("k", std::string(kMaxValueSize + 1, 'v')).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Get("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Scan(4, 0, 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Scan(0, 0, 0).status().code(), StatusCode::kInvalidArgument);

  // Scan every shard: all live keys exactly once, the big one whole.
  std::map<std::string, std::string> seen;
  for (uint32_t s = 0; s < c->shard_count(); s++) {
    uint64_t cursor = 0;
    for (;;) {
      auto r = c->Scan(s, cursor, 2);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      for (auto& it : r->items) {
        EXPECT_EQ(c->ShardOf(it.key), s);
        EXPECT_TRUE(seen.emplace(it.key, it.value).second) << it.key;
      }
      if (r->done) break;
      cursor = r->next_cursor;
    }
  }
  EXPECT_EQ(seen.size(), 5u);  // fresh, ctr, big, mid, kkk...k
  EXPECT_EQ(seen.count("k1"), 0u);
  EXPECT_TRUE(seen["big"] == big);
  EXPECT_EQ(seen["ctr"], "42");

  // Clean stop and restart: everything is there, deletes included.
  c.reset();
  int st = testutil::Term(p);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
  p = StartKv(ServerArgs(d));
  ASSERT_FALSE(p.address().empty());
  c = OpenClient({p.address()});
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->Get("k1")->found);
  EXPECT_TRUE(c->Get("big")->value == big);
  EXPECT_EQ(c->Get("mid")->value, mid);
  EXPECT_EQ(c->Incr("ctr", 0)->value, 42);
  c.reset();
  testutil::Term(p);
}

TEST(KvApi, Coordinator_ClientFindsRegisteredServer) {
  TempDir d;
  auto args = ServerArgs(d);
  args[9] = "dir:" + d.File("coord");  // --coord
  Proc p = StartKv(args);
  ASSERT_FALSE(p.address().empty()) << p.first_line;
  ClientOptions o;
  o.coordinator = "dir:" + d.File("coord");
  auto c = Client::Open(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE((*c)->Put("a", "b").ok());
  EXPECT_EQ((*c)->Get("a")->value, "b");
  c = Status::Aborted("closed");
  testutil::Term(p);
  ClientOptions both = o;
  both.servers = {p.address()};
  EXPECT_EQ(Client::Open(both).status().code(), StatusCode::kInvalidArgument);
}

// A hostile peer speaking the OQ protocol with malformed KV payloads gets clear errors; the
// server keeps serving.
TEST(KvApi, MalformedRequests_GetClearErrors) {
  TempDir d;
  Proc p = StartKv(ServerArgs(d));
  ASSERT_FALSE(p.address().empty()) << p.first_line;
  auto fab = fabric::Fabric::Open({});
  ASSERT_TRUE(fab.ok());
  auto pd = (*fab)->AllocPd();
  ASSERT_TRUE(pd.ok());
  oq::ClientOptions co;
  co.fabric = fab->get();
  co.pd = pd->get();
  co.server_address = p.address();
  auto c = oq::Client::Connect(co);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const uint32_t workers = (*c)->server().workers;
  auto call = [&](uint16_t type, const wire::Request& r, uint32_t worker) {
    std::vector<uint8_t> payload, resp;
    wire::EncodeRequest(r, &payload);
    return (*c)->Call(worker, type, payload, &resp);
  };
  const std::string key = "some-key";
  const uint32_t shard = ShardOf(key, 4), worker = Store::WorkerOf(shard, workers);
  // Short payload, lengths that do not add up, unknown type.
  {
    std::vector<uint8_t> resp, shortp(10, 0);
    EXPECT_EQ((*c)->Call(0, wire::kGet, shortp, &resp).code(), StatusCode::kInvalidArgument);
    std::vector<uint8_t> payload;
    wire::EncodeRequest({wire::kGet, shard, 0, 0, 0, 0, key, {}}, &payload);
    payload[4] = 200;  // key length beyond the payload
    EXPECT_EQ((*c)->Call(worker, wire::kGet, payload, &resp).code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(call(99, {99, shard, 0, 0, 0, 0, key, {}}, worker).code(),
            StatusCode::kInvalidArgument);
  // Empty key, oversized key, wrong shard, wrong worker.
  EXPECT_EQ(call(wire::kGet, {wire::kGet, 0, 0, 0, 0, 0, {}, {}}, 0).code(),
            StatusCode::kInvalidArgument);
  const std::string huge(kMaxKeySize + 1, 'k');
  EXPECT_EQ(call(wire::kGet, {wire::kGet, ShardOf(huge, 4), 0, 0, 0, 0, huge, {}},
                 Store::WorkerOf(ShardOf(huge, 4), workers))
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(call(wire::kGet, {wire::kGet, (shard + 1) % 4, 0, 0, 0, 0, key, {}}, worker).code(),
            StatusCode::kInvalidArgument);
  if (workers > 1) {
    EXPECT_EQ(
        call(wire::kGet, {wire::kGet, shard, 0, 0, 0, 0, key, {}}, (worker + 1) % workers).code(),
        StatusCode::kInvalidArgument);
  }
  // Scan: shard out of range, count 0.
  EXPECT_EQ(call(wire::kScan, {wire::kScan, 9, 0, 0, 0, 10, {}, {}}, 0).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(call(wire::kScan, {wire::kScan, 0, 0, 0, 0, 0, {}, {}}, 0).code(),
            StatusCode::kInvalidArgument);
  // Uploads: over the value limit, out of order, a commit without its chunks.
  EXPECT_EQ(call(wire::kPutChunk, {wire::kPutChunk, 0, 0, 0, 7, kMaxValueSize + 1, {}, "x"}, worker)
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(call(wire::kPutChunk, {wire::kPutChunk, 0, 0, 100, 8, 1000, {}, "x"}, worker).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(call(wire::kPutLarge, {wire::kPutLarge, shard, 0, 500, 9, 0, key, "x"}, worker).code(),
            StatusCode::kFailedPrecondition);
  // An inline PUT over the inline limit.
  const std::string big(kMaxInlineValue + 1, 'v');
  EXPECT_EQ(call(wire::kPut, {wire::kPut, shard, 0, 0, 0, 0, key, big}, worker).code(),
            StatusCode::kInvalidArgument);
  // RDMP: a reservation for a bypass connection that does not exist, an oversized one, a publish
  // of a slot nobody reserved, a publish before the value and its persist flag were written.
  EXPECT_EQ(call(wire::kReserve, {wire::kReserve, shard, 0, 0, 10, 12345, key, {}}, worker).code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      call(wire::kReserve, {wire::kReserve, shard, 0, 0, kMaxValueSize + 1, 12345, key, {}}, worker)
          .code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      call(wire::kPublish, {wire::kPublish, shard, 0, 0, 4096 + 64, 1, key, {}}, worker).code(),
      StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      call(wire::kPublish, {wire::kPublish, shard, 0, 0, uint64_t{1} << 50, 1, key, {}}, worker)
          .code(),
      StatusCode::kFailedPrecondition);
  // Still serving, nothing was written.
  auto client = OpenClient({p.address()});
  ASSERT_NE(client, nullptr);
  auto g = client->Get(key);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_FALSE(g->found);
  ASSERT_TRUE(client->Put(key, "ok").ok());
  EXPECT_EQ(client->Get(key)->value, "ok");
}

// Clients put unique values, read and delete a few shared keys while the server is SIGKILLed and
// restarted; the whole history (final reads included) must be linearizable per key.
TEST(KvKill, SigkillRounds_HistoryIsLinearizable) {
  TempDir d;
  Proc p = StartKv(ServerArgs(d));
  ASSERT_FALSE(p.address().empty()) << p.first_line;
  const std::string address = p.address();
  constexpr int kThreads = 3, kKeys = 6, kRounds = 3;
  std::mutex mu;
  std::vector<testing::RegisterOp> history;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> acked{0};
  const auto t0 = std::chrono::steady_clock::now();
  auto now_ns = [&] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                t0)
        .count();
  };
  auto client = OpenClient({address});
  ASSERT_NE(client, nullptr);
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; t++) {
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      uint64_t counter = 0;
      while (!stop) {
        testing::RegisterOp op;
        op.client = t;
        op.key = rng() % kKeys;
        const std::string key = "key" + std::to_string(op.key);
        const int what = static_cast<int>(rng() % 10);
        op.invoke_ns = now_ns();
        if (what < 5) {
          op.is_write = true;
          op.value = (uint64_t(t + 1) << 40) | ++counter;
          Status st = client->Put(key, std::to_string(op.value));
          if (st.ok()) op.response_ns = now_ns();
        } else if (what < 6) {
          op.is_write = true;
          op.value = 0;
          auto r = client->Delete(key);
          if (r.ok()) op.response_ns = now_ns();
        } else {
          auto r = client->Get(key);
          if (!r.ok()) continue;  // a read without a response constrains nothing
          op.response_ns = now_ns();
          op.value = r->found ? std::stoull(r->value) : 0;
        }
        if (op.response_ns != testing::kNoResponse) acked++;
        std::lock_guard<std::mutex> l(mu);
        history.push_back(op);
      }
    });
  }
  auto wait_acked = [&](uint64_t target) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (acked < target && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return acked >= target;
  };
  for (int round = 0; round < kRounds; round++) {
    ASSERT_TRUE(wait_acked(acked + 300)) << "clients made no progress in round " << round;
    testutil::Kill9(p);
    p = StartKv(ServerArgs(d));
    ASSERT_EQ(p.address(), address) << p.first_line;
  }
  ASSERT_TRUE(wait_acked(acked + 300));
  stop = true;
  for (auto& t : ts) t.join();
  // Final reads close the history.
  for (int k = 0; k < kKeys; k++) {
    testing::RegisterOp op;
    op.client = kThreads;
    op.key = k;
    op.invoke_ns = now_ns();
    auto r = client->Get("key" + std::to_string(k));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    op.response_ns = now_ns();
    op.value = r->found ? std::stoull(r->value) : 0;
    history.push_back(op);
  }
  Status lin = testing::CheckRegisterHistory(history, 0);
  EXPECT_TRUE(lin.ok()) << lin.ToString() << " (" << history.size() << " ops)";
  client.reset();
  int st = testutil::Term(p);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

}  // namespace
}  // namespace asymnvm::kv
