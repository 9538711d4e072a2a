#include "kv/resp/server.h"

#include <gtest/gtest.h>

#include <thread>

#include "kv/resp/test_client.h"
#include "kv/resp/test_fake_store.h"

namespace asymnvm::kv::resp {
namespace {

using testing::FakeStore;
using testing::SharedStore;
using testing::TestClient;

class RespServer : public ::testing::Test {
 protected:
  void StartServer(ServerOptions o = {}) {
    o.port = 0;
    o.store_factory = [this]() -> Result<std::unique_ptr<Store>> {
      return std::unique_ptr<Store>(new SharedStore(&store_));
    };
    auto s = Server::Start(std::move(o));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
  }
  FakeStore store_;
  std::unique_ptr<Server> server_;
};

TEST_F(RespServer, Pipeline_RepliesInRequestOrder) {
  StartServer();
  TestClient c(server_->port());
  ASSERT_TRUE(c.connected());
  std::string batch;
  for (int i = 0; i < 200; ++i) {
    batch += "*2\r\n$4\r\nINCR\r\n$1\r\nn\r\n";
    if (i % 50 == 0) batch += "PING\r\n";
  }
  batch += "*2\r\n$3\r\nGET\r\n$1\r\nn\r\n";
  ASSERT_TRUE(c.Send(batch));
  auto r = c.Read(205);
  ASSERT_EQ(r.size(), 205u);
  int want = 1;
  for (size_t i = 0; i + 1 < r.size(); ++i) {
    if (r[i] == "+PONG\r\n") continue;
    ASSERT_EQ(r[i], ":" + std::to_string(want) + "\r\n") << i;
    ++want;
  }
  EXPECT_EQ(r.back(), "$3\r\n200\r\n");
}

// A pipeline's run of plain SETs is written with one PutMany; replies stay in order and a GET
// behind them sees the last one; SETs inside MULTI are queued as always.
TEST_F(RespServer, PipelinedSets_OneReplyEachInOrder_GetSeesTheLast) {
  StartServer();
  TestClient c(server_->port());
  ASSERT_TRUE(c.connected());
  std::string batch;
  for (int i = 0; i < 20; ++i) {
    const std::string v = std::to_string(i);
    batch += "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$" + std::to_string(v.size()) + "\r\n" + v + "\r\n";
  }
  batch += "*3\r\n$3\r\nset\r\n$0\r\n\r\n$1\r\nx\r\n";  // empty key: still one reply
  batch += "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
  batch += "*1\r\n$5\r\nMULTI\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nq\r\n";
  batch += "*3\r\n$3\r\nSET\r\n$1\r\nj\r\n$1\r\nq\r\n*1\r\n$4\r\nEXEC\r\n";
  ASSERT_TRUE(c.Send(batch));
  auto r = c.Read(26);
  ASSERT_EQ(r.size(), 26u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(r[i], "+OK\r\n") << i;
  EXPECT_EQ(r[21], "$2\r\n19\r\n");
  EXPECT_EQ(r[22], "+OK\r\n");
  EXPECT_EQ(r[23], "+QUEUED\r\n");
  EXPECT_EQ(r[24], "+QUEUED\r\n");
  EXPECT_EQ(r[25], "*2\r\n+OK\r\n+OK\r\n");
}

// Redis's "$2000000000" test: the header alone is answered at once (the payload is never waited
// for) and the connection closes; an unknown command keeps it.
TEST_F(RespServer, OversizedBulkHeader_AnsweredAtOnceThenClose) {
  ServerOptions o;
  o.limits.max_bulk_len = 1024;
  StartServer(o);
  {
    TestClient c(server_->port());
    EXPECT_EQ(c.Call("NOSUCH a b").substr(0, 21), "-ERR unknown command ");
    ASSERT_TRUE(c.Send("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000000\r\n"));
    auto r = c.Read(1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0], "-ERR Protocol error: invalid bulk length\r\n");
    EXPECT_TRUE(c.WaitClosed());
  }
  TestClient d(server_->port());
  EXPECT_EQ(d.Call("PING"), "+PONG\r\n");
  EXPECT_EQ(d.Call("GET k"), "$-1\r\n");
}

TEST_F(RespServer, MalformedFrame_ErrorThenClose) {
  StartServer();
  TestClient c(server_->port());
  ASSERT_TRUE(c.Send("*1\r\n$abc\r\n"));
  auto r = c.Read(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], "-ERR Protocol error: invalid bulk length\r\n");
  EXPECT_TRUE(c.WaitClosed());
  TestClient d(server_->port());
  EXPECT_EQ(d.Call("PING"), "+PONG\r\n") << "the server keeps serving others";
}

TEST_F(RespServer, QuitAndHalfClose_AnswerThenClose) {
  StartServer();
  TestClient c(server_->port());
  ASSERT_TRUE(c.Send("SET a 1\r\nGET a\r\nQUIT\r\nPING\r\n"));
  auto r = c.Read(3);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[2], "+OK\r\n");
  EXPECT_TRUE(c.WaitClosed());
  TestClient d(server_->port());
  ASSERT_TRUE(d.Send("GET a\r\nECHO bye\r\n"));
  d.ShutdownWrite();
  auto r2 = d.Read(2);
  ASSERT_EQ(r2.size(), 2u);
  EXPECT_EQ(r2[0], "$1\r\n1\r\n");
  EXPECT_TRUE(d.WaitClosed());
}

TEST_F(RespServer, ConcurrentClients_IncrIsNotLost) {
  ServerOptions o;
  o.loop_threads = 2;
  StartServer(o);
  constexpr int kClients = 6, kOps = 150;
  std::vector<std::thread> ts;
  for (int t = 0; t < kClients; ++t) {
    ts.emplace_back([&] {
      TestClient c(server_->port());
      std::string batch;
      for (int i = 0; i < kOps; ++i) batch += "INCR shared\r\n";
      c.Send(batch);
      auto r = c.Read(kOps);
      EXPECT_EQ(r.size(), static_cast<size_t>(kOps));
    });
  }
  for (auto& t : ts) t.join();
  TestClient c(server_->port());
  EXPECT_EQ(c.Call("GET shared"), "$3\r\n900\r\n");
  // The other clients' closes reach the loops asynchronously: wait for the count to settle.
  bool settled = false;
  for (int i = 0; i < 20000 && !settled; ++i) {
    settled = c.Call("INFO clients").find("connected_clients:1\r\n") != std::string::npos;
    if (!settled) c.Call("PING");  // a round trip lets the loops run
  }
  EXPECT_TRUE(settled);
}

TEST_F(RespServer, StalledPartialCommand_DoesNotBlockOthers) {
  ServerOptions o;
  o.loop_threads = 1;
  StartServer(o);
  TestClient stalled(server_->port());
  ASSERT_TRUE(stalled.Send("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\nabc"));
  TestClient other(server_->port());
  EXPECT_EQ(other.Call("PING"), "+PONG\r\n");
  EXPECT_EQ(other.Call("SET x 1"), "+OK\r\n");
  ASSERT_TRUE(stalled.Send("defghij\r\n"));
  EXPECT_EQ(stalled.Read(1), std::vector<std::string>{"+OK\r\n"});
  EXPECT_EQ(other.Call("GET k"), "$10\r\nabcdefghij\r\n");
}

TEST_F(RespServer, LongPipeline_AllRepliesInOrder) {
  StartServer();
  TestClient c(server_->port());
  std::string batch;
  constexpr int kN = 5000;
  for (int i = 0; i < kN; ++i) {
    batch += i % 3 == 0 ? "PING\r\n" : "ECHO " + std::to_string(i) + "\r\n";
    if (i % 100 == 0) batch += "INCR seq\r\n";
  }
  ASSERT_TRUE(c.Send(batch));
  auto r = c.Read(kN + kN / 100);
  ASSERT_EQ(r.size(), static_cast<size_t>(kN + kN / 100));
  size_t j = 0;
  int incr = 0;
  for (int i = 0; i < kN; ++i) {
    std::string want = i % 3 == 0 ? "+PONG\r\n"
                                  : "$" + std::to_string(std::to_string(i).size()) + "\r\n" +
                                        std::to_string(i) + "\r\n";
    ASSERT_EQ(r[j++], want) << i;
    if (i % 100 == 0) {
      ASSERT_EQ(r[j++], ":" + std::to_string(++incr) + "\r\n") << i;
    }
  }
}

TEST_F(RespServer, TakenPort_FallsBackToAnEphemeralPort) {
  StartServer();
  ServerOptions o;
  o.port = server_->port();
  o.store_factory = [this]() -> Result<std::unique_ptr<Store>> {
    return std::unique_ptr<Store>(new SharedStore(&store_));
  };
  auto s2 = Server::Start(o);
  ASSERT_TRUE(s2.ok()) << s2.status().ToString();
  EXPECT_NE((*s2)->port(), server_->port());
  o.fallback_to_ephemeral = false;
  auto s3 = Server::Start(o);
  EXPECT_FALSE(s3.ok());
  EXPECT_EQ(s3.status().code(), StatusCode::kIoError);
}

TEST_F(RespServer, MaxClients_RefusesWithAnError) {
  ServerOptions o;
  o.max_clients = 1;
  StartServer(o);
  TestClient a(server_->port());
  EXPECT_EQ(a.Call("PING"), "+PONG\r\n");
  TestClient b(server_->port());
  auto r = b.Read(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0], "-ERR max number of clients reached\r\n");
}

}  // namespace
}  // namespace asymnvm::kv::resp
