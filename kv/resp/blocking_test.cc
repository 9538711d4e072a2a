// Blocking pops on a real gateway (epoll loops, worker pool) over the in-memory FakeStore.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kv/resp/server.h"
#include "kv/resp/test_client.h"
#include "kv/resp/test_fake_store.h"

namespace asymnvm::kv::resp {
namespace {

using testing::FakeStore;
using testing::SharedStore;
using testing::TestClient;

std::string Bulk(const std::string& s) {
  return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
}

class Blocking : public ::testing::Test {
 protected:
  std::unique_ptr<Server> Start(int workers = 4) {
    ServerOptions o;
    o.port = 0;
    o.workers = workers;
    o.store_factory = [this]() -> Result<std::unique_ptr<Store>> {
      return std::unique_ptr<Store>(new SharedStore(&store_));
    };
    auto s = Server::Start(std::move(o));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  void SetUp() override {
    server_ = Start();
    ASSERT_NE(server_, nullptr);
  }
  // Waits (generously, polling with a sleep) until the gateway counts `n` blocked clients.
  bool WaitBlocked(int64_t n, Server* server = nullptr) {
    server = server ? server : server_.get();
    TestClient probe(server->port());
    const std::string want = "blocked_clients:" + std::to_string(n) + "\r\n";
    for (int i = 0; i < 2000; ++i) {
      if (probe.Call("INFO clients").find(want) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  FakeStore store_;
  std::unique_ptr<Server> server_;
};

TEST_F(Blocking, ServedAtOnceWhenDataIsThere) {
  TestClient c(server_->port());
  ASSERT_EQ(c.Call("RPUSH l a b c d e"), ":5\r\n");
  EXPECT_EQ(c.Call("BLPOP none l 0"), "*2\r\n" + Bulk("l") + Bulk("a"));
  EXPECT_EQ(c.Call("BRPOP l 0"), "*2\r\n" + Bulk("l") + Bulk("e"));
  EXPECT_EQ(c.Call("BLMPOP 0 2 none l RIGHT COUNT 2"),
            "*2\r\n" + Bulk("l") + "*2\r\n" + Bulk("d") + Bulk("c"));
  EXPECT_EQ(c.Call("LMPOP 1 none LEFT"), "*-1\r\n");
  EXPECT_EQ(c.Call("BLMOVE l m LEFT RIGHT 0"), Bulk("b"));
  EXPECT_EQ(c.Call("BRPOPLPUSH m l 0"), Bulk("b"));
  EXPECT_EQ(c.Call("LRANGE l 0 -1"), "*1\r\n" + Bulk("b"));
  ASSERT_EQ(c.Call("ZADD z 1 a 2 b 3 c 4 d"), ":4\r\n");
  EXPECT_EQ(c.Call("BZPOPMIN none z 0"), "*3\r\n" + Bulk("z") + Bulk("a") + Bulk("1"));
  EXPECT_EQ(c.Call("BZPOPMAX z 0"), "*3\r\n" + Bulk("z") + Bulk("d") + Bulk("4"));
  EXPECT_EQ(c.Call("BZMPOP 0 1 z MIN COUNT 5"), "*2\r\n" + Bulk("z") + "*2\r\n*2\r\n" + Bulk("b") +
                                                    Bulk("2") + "*2\r\n" + Bulk("c") + Bulk("3"));
  EXPECT_EQ(c.Call("EXISTS z"), ":0\r\n");
}

TEST_F(Blocking, TimesOutWithNullAfterTheTimeout) {
  TestClient c(server_->port());
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c.Call("BLPOP none 0.2"), "*-1\r\n");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
  t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c.Call("BLMOVE none other LEFT LEFT 0.05"), "*-1\r\n");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(50));
  ASSERT_NE(c.Call("HELLO 3"), "");
  EXPECT_EQ(c.Call("BZPOPMIN none 0.01"), "_\r\n");
  EXPECT_EQ(c.Call("BZMPOP 0.01 1 none MAX"), "_\r\n");
  EXPECT_EQ(c.Call("PING"), "+PONG\r\n");  // the connection is usable after a timeout
}

TEST_F(Blocking, PushFromAnotherConnectionWakesTheBlockedClient_PipelineWaits) {
  TestClient blocked(server_->port()), pusher(server_->port());
  // The PING behind the BLPOP is not answered while the BLPOP is blocked.
  ASSERT_TRUE(blocked.Send("BLPOP l 0\r\nPING\r\n"));
  ASSERT_TRUE(WaitBlocked(1));
  EXPECT_EQ(pusher.Call("RPUSH l x y"), ":2\r\n");
  auto r = blocked.Read(2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], "*2\r\n" + Bulk("l") + Bulk("x"));
  EXPECT_EQ(r[1], "+PONG\r\n");
  EXPECT_EQ(pusher.Call("LRANGE l 0 -1"), "*1\r\n" + Bulk("y"));
  // A sorted set, woken by ZADD; BLMOVE's push wakes a client blocked on its destination.
  TestClient b2(server_->port());
  ASSERT_TRUE(blocked.Send("BZPOPMAX z 0\r\n"));
  ASSERT_TRUE(b2.Send("BLPOP dst 0\r\n"));
  ASSERT_TRUE(WaitBlocked(2));
  EXPECT_EQ(pusher.Call("ZADD z 5 five"), ":1\r\n");
  EXPECT_EQ(blocked.Read(1).at(0), "*3\r\n" + Bulk("z") + Bulk("five") + Bulk("5"));
  EXPECT_EQ(pusher.Call("LMOVE l dst LEFT LEFT"), Bulk("y"));
  EXPECT_EQ(b2.Read(1).at(0), "*2\r\n" + Bulk("dst") + Bulk("y"));
  EXPECT_TRUE(WaitBlocked(0));
}

TEST_F(Blocking, LongestWaitingClientIsServedFirst) {
  TestClient first(server_->port()), second(server_->port()), pusher(server_->port());
  ASSERT_TRUE(first.Send("BRPOP q 0\r\n"));
  ASSERT_TRUE(WaitBlocked(1));
  ASSERT_TRUE(second.Send("BRPOP q 0\r\n"));
  ASSERT_TRUE(WaitBlocked(2));
  EXPECT_EQ(pusher.Call("LPUSH q one"), ":1\r\n");
  EXPECT_EQ(first.Read(1).at(0), "*2\r\n" + Bulk("q") + Bulk("one"));
  ASSERT_TRUE(WaitBlocked(1));
  EXPECT_EQ(pusher.Call("LPUSH q two"), ":1\r\n");
  EXPECT_EQ(second.Read(1).at(0), "*2\r\n" + Bulk("q") + Bulk("two"));
  // One push of two elements serves both waiters, in order.
  ASSERT_TRUE(first.Send("BLPOP q 0\r\n"));
  ASSERT_TRUE(WaitBlocked(1));
  ASSERT_TRUE(second.Send("BLPOP q 0\r\n"));
  ASSERT_TRUE(WaitBlocked(2));
  EXPECT_EQ(pusher.Call("RPUSH q a b"), ":2\r\n");
  EXPECT_EQ(first.Read(1).at(0), "*2\r\n" + Bulk("q") + Bulk("a"));
  EXPECT_EQ(second.Read(1).at(0), "*2\r\n" + Bulk("q") + Bulk("b"));
}

// As Redis: the clients a write unblocks are served before the write's reply leaves, so what the
// pusher reads next already reflects the whole chain.
TEST_F(Blocking, ChainIsServedBeforeThePushReplies) {
  TestClient rd1(server_->port()), rd2(server_->port()), c(server_->port());
  ASSERT_TRUE(rd1.Send("BLMOVE l1 l2 RIGHT LEFT 0\r\n"));
  ASSERT_TRUE(WaitBlocked(1));
  ASSERT_TRUE(rd2.Send("BLMOVE l2 l3 LEFT RIGHT 0\r\n"));
  ASSERT_TRUE(WaitBlocked(2));
  EXPECT_EQ(c.Call("RPUSH l1 foo"), ":1\r\n");
  EXPECT_EQ(c.Call("LRANGE l1 0 -1"), "*0\r\n");
  EXPECT_EQ(c.Call("LRANGE l2 0 -1"), "*0\r\n");
  EXPECT_EQ(c.Call("LRANGE l3 0 -1"), "*1\r\n" + Bulk("foo"));
  EXPECT_EQ(rd1.Read(1).at(0), Bulk("foo"));
  EXPECT_EQ(rd2.Read(1).at(0), Bulk("foo"));
}

// A client pipelining a push and a blocking pop does not take the element from the client that
// was already waiting.
TEST_F(Blocking, PipelinedPushAndPopKeepFairness) {
  TestClient rd1(server_->port()), rd2(server_->port()), c(server_->port());
  ASSERT_EQ(c.Call("CONFIG RESETSTAT"), "+OK\r\n");
  ASSERT_TRUE(rd1.Send("BLPOP m 0\r\n"));
  ASSERT_TRUE(WaitBlocked(1));
  ASSERT_TRUE(rd2.Send("LPUSH m 1\r\nBLPOP m 0\r\n"));
  auto r1 = rd1.Read(1);
  ASSERT_EQ(r1.size(), 1u);
  EXPECT_EQ(r1[0], "*2\r\n" + Bulk("m") + Bulk("1"));
  EXPECT_EQ(rd2.Read(1).at(0), ":1\r\n");
  ASSERT_TRUE(WaitBlocked(1));
  EXPECT_EQ(c.Call("LPUSH m 2"), ":1\r\n");
  EXPECT_EQ(rd2.Read(1).at(0), "*2\r\n" + Bulk("m") + Bulk("2"));
  // Each blocking command counted once however often it re-ran.
  EXPECT_NE(c.Call("INFO commandstats").find("cmdstat_blpop:calls=2,"), std::string::npos);
}

TEST_F(Blocking, DisconnectWhileBlockedFreesTheClient) {
  {
    TestClient gone(server_->port());
    ASSERT_TRUE(gone.Send("BLPOP d 0\r\n"));
    ASSERT_TRUE(WaitBlocked(1));
  }  // closed while blocked
  ASSERT_TRUE(WaitBlocked(0));
  TestClient c(server_->port());
  EXPECT_EQ(c.Call("RPUSH d x"), ":1\r\n");
  EXPECT_EQ(c.Call("LLEN d"), ":1\r\n");  // nobody took it
}

TEST_F(Blocking, BlockedClientsHoldNoWorker) {
  auto one = Start(1);  // a single worker: a blocked client holding it would stall the rest
  ASSERT_NE(one, nullptr);
  std::vector<std::unique_ptr<TestClient>> blocked;
  for (int i = 0; i < 3; ++i) {
    blocked.push_back(std::make_unique<TestClient>(one->port()));
    ASSERT_TRUE(blocked.back()->Send("BLPOP k" + std::to_string(i) + " 0\r\n"));
  }
  ASSERT_TRUE(WaitBlocked(3, one.get()));
  TestClient c(one->port());
  EXPECT_EQ(c.Call("SET s v"), "+OK\r\n");
  EXPECT_EQ(c.Call("GET s"), Bulk("v"));
  EXPECT_EQ(c.Call("RPUSH k1 v"), ":1\r\n");
  EXPECT_EQ(blocked[1]->Read(1).at(0), "*2\r\n" + Bulk("k1") + Bulk("v"));
  one->Stop();  // does not hang on the two still blocked
}

TEST_F(Blocking, PushThroughAnotherGatewayIsNoticed) {
  auto other = Start();  // a second gateway onto the same store (another server of the cluster)
  ASSERT_NE(other, nullptr);
  TestClient blocked(server_->port()), pusher(other->port());
  ASSERT_TRUE(blocked.Send("BLPOP x 0\r\n"));
  ASSERT_TRUE(WaitBlocked(1));
  EXPECT_EQ(pusher.Call("RPUSH x far"), ":1\r\n");
  EXPECT_EQ(blocked.Read(1).at(0), "*2\r\n" + Bulk("x") + Bulk("far"));
}

TEST_F(Blocking, WrongType) {
  TestClient c(server_->port());
  ASSERT_EQ(c.Call("SET s v"), "+OK\r\n");
  const std::string wrong =
      "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
  EXPECT_EQ(c.Call("BLPOP s 0"), wrong);
  EXPECT_EQ(c.Call("BLPOP none s 0"), wrong);
  EXPECT_EQ(c.Call("BLMPOP 0 1 s LEFT"), wrong);
  EXPECT_EQ(c.Call("BZPOPMIN s 0"), wrong);
  EXPECT_EQ(c.Call("BZMPOP 0 1 s MIN"), wrong);
  EXPECT_EQ(c.Call("BRPOPLPUSH s l 0"), wrong);
  // A wrong destination matters only once there is an element to move (as Redis).
  EXPECT_EQ(c.Call("BRPOPLPUSH empty s 0.01"), "*-1\r\n");
  TestClient pusher(server_->port());
  ASSERT_TRUE(c.Send("BRPOPLPUSH src s 0\r\n"));
  ASSERT_TRUE(WaitBlocked(1));
  EXPECT_EQ(pusher.Call("RPUSH src e"), ":1\r\n");
  EXPECT_EQ(c.Read(1).at(0), wrong);
  EXPECT_EQ(pusher.Call("LRANGE src 0 -1"), "*1\r\n" + Bulk("e"));
}

TEST_F(Blocking, BadTimeoutsAndArguments) {
  TestClient c(server_->port());
  EXPECT_EQ(c.Call("BLPOP l abc"), "-ERR timeout is not a float or out of range\r\n");
  EXPECT_EQ(c.Call("BRPOP l -1"), "-ERR timeout is negative\r\n");
  EXPECT_EQ(c.Call("BZPOPMIN l -0.5"), "-ERR timeout is negative\r\n");
  EXPECT_EQ(c.Call("BLPOP l 0x7FFFFFFFFFFFFF"), "-ERR timeout is out of range\r\n");
  EXPECT_EQ(c.Call("BLMPOP nan 1 l LEFT"), "-ERR timeout is not a float or out of range\r\n");
  EXPECT_EQ(c.Call("BLMPOP 0 0 l LEFT"), "-ERR numkeys should be greater than 0\r\n");
  EXPECT_EQ(c.Call("BLMPOP 0 1 l UP"), "-ERR syntax error\r\n");
  EXPECT_EQ(c.Call("BZMPOP 0 1 l MIN COUNT 0"), "-ERR count should be greater than 0\r\n");
  EXPECT_EQ(c.Call("BLMOVE a b UP LEFT 0"), "-ERR syntax error\r\n");
  EXPECT_EQ(c.Call("BLPOP l"), "-ERR wrong number of arguments for 'blpop' command\r\n");
  EXPECT_EQ(c.Call("LPOP l 1 2"), "-ERR wrong number of arguments for 'lpop' command\r\n");
  EXPECT_EQ(c.Call("CLIENT UNBLOCK 1 MAYBE"),
            "-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n");
  EXPECT_EQ(c.Call("CLIENT UNBLOCK 999999"), ":0\r\n");
}

TEST_F(Blocking, InsideMultiNeverBlocks) {
  TestClient c(server_->port());
  ASSERT_EQ(c.Call("MULTI"), "+OK\r\n");  // keys of one shard (the fake store has two)
  EXPECT_EQ(c.Call("BLPOP {t}none 0"), "+QUEUED\r\n");
  EXPECT_EQ(c.Call("BLMOVE {t}none {t}x LEFT LEFT 0"), "+QUEUED\r\n");
  EXPECT_EQ(c.Call("BZPOPMIN {t}none 0"), "+QUEUED\r\n");
  EXPECT_EQ(c.Call("RPUSH {t}l v"), "+QUEUED\r\n");
  EXPECT_EQ(c.Call("BRPOP {t}l 0"), "+QUEUED\r\n");
  EXPECT_EQ(c.Call("EXEC"), "*5\r\n*-1\r\n$-1\r\n*-1\r\n:1\r\n*2\r\n" + Bulk("{t}l") + Bulk("v"));
}

TEST_F(Blocking, ClientUnblock) {
  TestClient blocked(server_->port()), admin(server_->port());
  const std::string id = blocked.Call("CLIENT ID").substr(1, std::string::npos);
  ASSERT_TRUE(blocked.Send("BLPOP u 0\r\n"));
  ASSERT_TRUE(WaitBlocked(1));
  EXPECT_EQ(admin.Call("CLIENT UNBLOCK " + id.substr(0, id.size() - 2)), ":1\r\n");
  EXPECT_EQ(blocked.Read(1).at(0), "*-1\r\n");
  ASSERT_TRUE(blocked.Send("BZPOPMIN u 0\r\n"));
  ASSERT_TRUE(WaitBlocked(1));
  EXPECT_EQ(admin.Call("CLIENT UNBLOCK " + id.substr(0, id.size() - 2) + " ERROR"), ":1\r\n");
  EXPECT_EQ(blocked.Read(1).at(0), "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n");
  EXPECT_EQ(admin.Call("CLIENT UNBLOCK " + id.substr(0, id.size() - 2)), ":0\r\n");
}

// --- CLIENT LIST / CLIENT INFO (doc/resp.md §CLIENT LIST).

// The id of the connection (CLIENT ID).
std::string IdOf(TestClient& c) {
  std::string r = c.Call("CLIENT ID");
  return r.size() > 3 ? r.substr(1, r.size() - 3) : "";
}

// The text of a bulk reply ("$n\r\n...\r\n").
std::string BulkText(const std::string& r) {
  size_t nl = r.find("\r\n");
  if (r.empty() || r[0] != '$' || nl == std::string::npos || r.size() < nl + 4)
    return "<" + r + ">";
  return r.substr(nl + 2, r.size() - nl - 4);
}

// One CLIENT LIST line as (field, value) pairs in order.
std::vector<std::pair<std::string, std::string>> Fields(const std::string& line) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = 0;
  while (pos < line.size()) {
    size_t sp = line.find(' ', pos);
    if (sp == std::string::npos) sp = line.size();
    std::string f = line.substr(pos, sp - pos);
    size_t eq = f.find('=');
    out.push_back({f.substr(0, eq), eq == std::string::npos ? "" : f.substr(eq + 1)});
    pos = sp + 1;
  }
  return out;
}

std::string Field(const std::string& line, const std::string& name) {
  for (auto& [k, v] : Fields(line)) {
    if (k == name) return v;
  }
  return "<no " + name + ">";
}

TEST_F(Blocking, ClientList_RedisLineFormat) {
  TestClient a(server_->port()), b(server_->port());
  const std::string ida = IdOf(a), idb = IdOf(b);
  ASSERT_EQ(a.Call("CLIENT SETNAME app"), "+OK\r\n");
  ASSERT_EQ(a.Call("CLIENT SETINFO LIB-NAME mylib"), "+OK\r\n");
  ASSERT_EQ(a.Call("CLIENT SETINFO LIB-VER 1.2"), "+OK\r\n");
  const std::string text = BulkText(b.Call("CLIENT LIST ID " + ida + " " + idb));
  ASSERT_EQ(std::count(text.begin(), text.end(), '\n'), 2) << text;
  ASSERT_EQ(text.back(), '\n');
  // The lines by id (the server may accept b's connection before a's).
  std::string la = text.substr(0, text.find('\n'));
  std::string lb = text.substr(text.find('\n') + 1, text.size() - text.find('\n') - 2);
  if (Field(la, "id") != ida) std::swap(la, lb);
  // Redis's field order (the fields the gateway has honest values for).
  std::vector<std::string> names;
  for (auto& [k, v] : Fields(la)) names.push_back(k);
  EXPECT_EQ(names, (std::vector<std::string>{"id", "addr", "laddr", "fd", "name", "age", "idle",
                                             "flags", "db", "sub", "psub", "ssub", "multi", "cmd",
                                             "user", "redir", "resp", "lib-name", "lib-ver"}));
  EXPECT_EQ(Field(la, "id"), ida);
  EXPECT_EQ(Field(la, "addr").rfind("127.0.0.1:", 0), 0u) << la;
  EXPECT_EQ(Field(la, "laddr"), "127.0.0.1:" + std::to_string(server_->port()));
  EXPECT_EQ(Field(la, "name"), "app");
  EXPECT_EQ(Field(la, "flags"), "N");
  EXPECT_EQ(Field(la, "multi"), "-1");
  EXPECT_EQ(Field(la, "cmd"), "client|setinfo");
  EXPECT_EQ(Field(la, "resp"), "2");
  EXPECT_EQ(Field(la, "lib-name"), "mylib");
  EXPECT_EQ(Field(la, "lib-ver"), "1.2");
  EXPECT_EQ(Field(lb, "id"), idb);
  EXPECT_EQ(Field(lb, "name"), "");
  EXPECT_EQ(Field(lb, "cmd"), "client|list");
  EXPECT_NE(Field(la, "fd"), Field(lb, "fd"));
  // CLIENT INFO: the caller's own line; MULTI shows flag x and the queued count; HELLO 3: resp=3.
  const std::string info = BulkText(a.Call("CLIENT INFO"));
  EXPECT_EQ(Field(info, "id"), ida);
  EXPECT_EQ(Field(info, "cmd"), "client|info");
  EXPECT_EQ(info.back(), '\n');
  ASSERT_EQ(a.Call("MULTI"), "+OK\r\n");
  ASSERT_EQ(a.Call("GET k"), "+QUEUED\r\n");
  std::string l = BulkText(b.Call("CLIENT LIST ID " + ida));
  EXPECT_EQ(Field(l, "flags"), "x") << l;
  EXPECT_EQ(Field(l, "multi"), "1");
  EXPECT_EQ(Field(l, "cmd"), "get");
  ASSERT_EQ(a.Call("EXEC"), "*1\r\n$-1\r\n");
  l = BulkText(b.Call("CLIENT LIST ID " + ida));
  EXPECT_EQ(Field(l, "flags"), "N");
  EXPECT_EQ(Field(l, "multi"), "-1");
  EXPECT_EQ(Field(l, "cmd"), "exec");
  ASSERT_NE(a.Call("HELLO 3"), "");
  EXPECT_EQ(Field(BulkText(b.Call("CLIENT LIST ID " + ida)), "resp"), "3");
}

TEST_F(Blocking, ClientList_BlockedClientHasFlagB) {
  // Valkey's "BRPOPLPUSH does not affect WATCH while still blocked", in miniature.
  TestClient blocked(server_->port()), watching(server_->port()), r(server_->port());
  const std::string idb = IdOf(blocked), idw = IdOf(watching);
  ASSERT_EQ(r.Call("SET somekey{t} v"), "+OK\r\n");
  ASSERT_TRUE(blocked.Send("BRPOPLPUSH src{t} dst{t} 0\r\n"));
  ASSERT_TRUE(WaitBlocked(1));
  std::string l = BulkText(r.Call("CLIENT LIST ID " + idb));
  EXPECT_EQ(Field(l, "flags"), "b") << l;
  EXPECT_EQ(Field(l, "cmd"), "brpoplpush");
  ASSERT_EQ(watching.Call("WATCH dst{t}"), "+OK\r\n");
  ASSERT_EQ(watching.Call("MULTI"), "+OK\r\n");
  ASSERT_EQ(watching.Call("GET somekey{t}"), "+QUEUED\r\n");
  EXPECT_EQ(watching.Call("EXEC"), "*1\r\n" + Bulk("v"));
  const std::string all = BulkText(r.Call("CLIENT LIST"));
  size_t execs = 0;
  for (size_t p = all.find("cmd=exec "); p != std::string::npos; p = all.find("cmd=exec ", p + 1)) {
    ++execs;
  }
  EXPECT_EQ(execs, 1u) << all;
  EXPECT_NE(all.find("id=" + idw + " "), std::string::npos);
  EXPECT_EQ(r.Call("LPUSH src{t} e"), ":1\r\n");
  EXPECT_EQ(blocked.Read(1).at(0), Bulk("e"));
  l = BulkText(r.Call("CLIENT LIST ID " + idb));
  EXPECT_EQ(Field(l, "flags"), "N") << l;
}

TEST_F(Blocking, ClientList_FiltersAndErrors) {
  TestClient a(server_->port()), b(server_->port());
  const std::string ida = IdOf(a), idb = IdOf(b);
  const std::string normal = BulkText(a.Call("CLIENT LIST TYPE NORMAL"));
  EXPECT_NE(normal.find("id=" + ida + " "), std::string::npos) << normal;
  EXPECT_NE(normal.find("id=" + idb + " "), std::string::npos) << normal;
  for (const char* t : {"master", "replica", "slave", "pubsub"}) {
    EXPECT_EQ(a.Call(std::string("CLIENT LIST TYPE ") + t), "$0\r\n\r\n") << t;
  }
  const std::string only_b = BulkText(a.Call("CLIENT LIST ID " + idb + " 0 -1 999999"));
  EXPECT_EQ(only_b.find('\n'), only_b.size() - 1) << only_b;
  EXPECT_EQ(Field(only_b, "id"), idb);
  EXPECT_EQ(a.Call("CLIENT LIST ID 999999"), "$0\r\n\r\n");
  EXPECT_EQ(a.Call("CLIENT LIST TYPE foo"), "-ERR Unknown client type 'foo'\r\n");
  EXPECT_EQ(a.Call("CLIENT LIST ID abc"), "-ERR Invalid client ID\r\n");
  EXPECT_EQ(a.Call("CLIENT LIST ID " + ida + " x"), "-ERR Invalid client ID\r\n");
  EXPECT_EQ(a.Call("CLIENT LIST ID 1 TYPE normal"), "-ERR Invalid client ID\r\n");
  EXPECT_EQ(a.Call("CLIENT LIST ID"), "-ERR syntax error\r\n");
  EXPECT_EQ(a.Call("CLIENT LIST TYPE"), "-ERR syntax error\r\n");
  EXPECT_EQ(a.Call("CLIENT LIST TYPE normal extra"), "-ERR syntax error\r\n");
  EXPECT_EQ(a.Call("CLIENT LIST foo"), "-ERR syntax error\r\n");
  EXPECT_EQ(a.Call("CLIENT INFO x"),
            "-ERR wrong number of arguments for 'client|info' command\r\n");
  // A closed connection leaves the list (its loop sees the hang-up asynchronously: poll).
  std::string idg;
  {
    TestClient gone(server_->port());
    idg = IdOf(gone);
    ASSERT_EQ(Field(BulkText(a.Call("CLIENT LIST ID " + idg)), "id"), idg);
  }
  bool left = false;
  for (int i = 0; i < 2000 && !left; ++i) {
    left = a.Call("CLIENT LIST ID " + idg) == "$0\r\n\r\n";
    if (!left) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(left);
}

}  // namespace
}  // namespace asymnvm::kv::resp
