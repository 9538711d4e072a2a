#include "fabric/bootstrap.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace asymnvm::fabric {
namespace {

using std::chrono::milliseconds;

std::string UnixPath(const char* tag) {
  return "/tmp/asymnvm-bt-" + std::to_string(::getpid()) + "-" + tag + ".sock";
}

struct Pair {
  int listen_fd = -1, client = -1, server = -1;
  ~Pair() {
    for (int fd : {listen_fd, client, server}) {
      if (fd >= 0) ::close(fd);
    }
  }
};

void MakePair(const std::string& address, Pair* p) {
  auto ep = ParseAddress(address);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  Endpoint bound;
  auto l = ListenSocket(*ep, &bound);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  p->listen_fd = *l;
  auto c = ConnectSocket(bound, milliseconds(2000));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  p->client = *c;
  auto s = AcceptSocket(p->listen_fd, milliseconds(2000));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  p->server = *s;
}

class HandshakeTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string Address() {
    return GetParam() == "tcp" ? "tcp://127.0.0.1:0" : "unix://" + UnixPath("hs");
  }
};

TEST_P(HandshakeTest, RightSecret_BlobsExchanged) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(MakePair(Address(), &p));
  std::vector<uint8_t> cblob = {1, 2, 3}, sblob = {9, 8};
  std::vector<uint8_t> got_c, got_s;
  Status server_st;
  std::thread t(
      [&] { server_st = HandshakeServer(p.server, "s3cret", sblob, &got_c, milliseconds(2000)); });
  Status st = HandshakeClient(p.client, "s3cret", cblob, &got_s, milliseconds(2000));
  t.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(server_st.ok()) << server_st.ToString();
  EXPECT_EQ(got_c, cblob);
  EXPECT_EQ(got_s, sblob);
}

TEST_P(HandshakeTest, WrongSecret_BothSidesRefuse) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(MakePair(Address(), &p));
  Status server_st;
  std::thread t(
      [&] { server_st = HandshakeServer(p.server, "right", {}, nullptr, milliseconds(2000)); });
  Status st = HandshakeClient(p.client, "wrong", {}, nullptr, milliseconds(2000));
  ::shutdown(p.client, SHUT_RDWR);
  t.join();
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
  EXPECT_FALSE(server_st.ok());
}

TEST_P(HandshakeTest, Garbage_ServerRefuses) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(MakePair(Address(), &p));
  const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(WriteFull(p.client, garbage, sizeof garbage,
                        std::chrono::steady_clock::now() + milliseconds(1000))
                  .ok());
  Status st = HandshakeServer(p.server, "s", {}, nullptr, milliseconds(2000));
  EXPECT_EQ(st.code(), StatusCode::kProtocolError) << st.ToString();
}

TEST_P(HandshakeTest, SilentPeer_TimesOut) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(MakePair(Address(), &p));
  Status st = HandshakeServer(p.server, "s", {}, nullptr, milliseconds(50));
  EXPECT_EQ(st.code(), StatusCode::kTimedOut) << st.ToString();
}

INSTANTIATE_TEST_SUITE_P(Transports, HandshakeTest, ::testing::Values("tcp", "unix"));

TEST(ParseAddress, Forms_ParsedOrRejected) {
  auto t = ParseAddress("tcp://127.0.0.1:4000");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->port, 4000);
  EXPECT_EQ(FormatAddress(*t), "tcp://127.0.0.1:4000");
  auto u = ParseAddress("unix:///tmp/x.sock");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->path, "/tmp/x.sock");
  auto i = ParseAddress("inproc://abc");
  ASSERT_TRUE(i.ok());
  EXPECT_EQ(i->kind, Endpoint::Kind::kInproc);
  EXPECT_FALSE(ParseAddress("tcp://host").ok());
  EXPECT_FALSE(ParseAddress("tcp://host:99999").ok());
  EXPECT_FALSE(ParseAddress("udp://h:1").ok());
  EXPECT_FALSE(ParseAddress("nonsense").ok());
}

TEST(ParseAddress, IsFixedAddress_TcpPortZeroIsNot) {
  EXPECT_TRUE(IsFixedAddress("tcp://127.0.0.1:4000"));
  EXPECT_FALSE(IsFixedAddress("tcp://0.0.0.0:0"));
  EXPECT_TRUE(IsFixedAddress("unix:///tmp/x.sock"));
  EXPECT_TRUE(IsFixedAddress("inproc://abc"));
  EXPECT_FALSE(IsFixedAddress(""));
  EXPECT_FALSE(IsFixedAddress("nonsense"));
}

}  // namespace
}  // namespace asymnvm::fabric
