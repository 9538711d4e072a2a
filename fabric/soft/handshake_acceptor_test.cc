// The concurrent server side of the handshake (HandshakeAcceptor, soft listeners) and the cluster
// secret (doc/fabric.md §Handshake, §Cluster secret). Every wait is for observable state with a
// generous deadline; the only timed values are the handshake deadlines under test.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "asymnvm/fabric.h"
#include "fabric/bootstrap.h"
#include "fabric/soft/soft_fabric.h"
#include "fabric/soft/test_peers.h"

namespace asymnvm::fabric {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::PeerFlood;
using testing::StallProxy;

// A listening socket and its acceptor, driven by a thread that calls Accept with 100 ms timeouts
// (the OQ server's accept_poll) and counts completed peers.
struct AcceptorRig {
  int listen_fd = -1;
  std::string address;
  std::unique_ptr<HandshakeAcceptor> acceptor;
  std::atomic<bool> stop{false};
  std::atomic<int> accepted{0};
  std::thread loop;
  std::vector<int> fds;
  std::mutex mu;

  explicit AcceptorRig(HandshakeLimits limits, const std::string& secret = "s3cret") {
    Endpoint bound;
    auto l = ListenSocket(ParseAddress("tcp://127.0.0.1:0").value(), &bound);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    listen_fd = *l;
    address = FormatAddress(bound);
    acceptor = std::make_unique<HandshakeAcceptor>(listen_fd, secret, "test " + address, limits);
    loop = std::thread([this] {
      std::vector<uint8_t> blob = {7, 7, 7};
      while (!stop.load()) {
        auto p = acceptor->Accept(blob, milliseconds(100));
        if (p.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          fds.push_back(p->fd);
          accepted++;
        }
      }
    });
  }
  ~AcceptorRig() {
    stop = true;
    loop.join();
    for (int fd : fds) ::close(fd);
    acceptor.reset();
    ::close(listen_fd);
  }
  // A legitimate client: connect + handshake with `timeout`.
  Status Client(const std::string& secret, milliseconds timeout) {
    auto fd = ConnectSocket(ParseAddress(address).value(), timeout);
    if (!fd.ok()) return fd.status();
    std::vector<uint8_t> peer;
    std::vector<uint8_t> mine = {1, 2};
    Status st = HandshakeClient(*fd, secret, mine, &peer, timeout);
    ::close(*fd);
    if (st.ok() && peer != std::vector<uint8_t>{7, 7, 7}) return Status::Internal("wrong blob");
    return st;
  }
  template <typename Pred>
  bool WaitFor(Pred pred, milliseconds limit = milliseconds(20000)) {
    auto until = Clock::now() + limit;
    while (Clock::now() < until) {
      if (pred(acceptor->stats())) return true;
      std::this_thread::sleep_for(milliseconds(5));
    }
    return pred(acceptor->stats());
  }
};

TEST(HandshakeAcceptor, FloodOfSilentAndGarbagePeers_LegitimatePeerConnectsWithinOneDeadline) {
  HandshakeLimits limits;  // defaults: 5 s deadline, 256 pending
  AcceptorRig rig(limits);
  PeerFlood silent, garbage;
  ASSERT_TRUE(silent.Open(rig.address, 500, false).ok());
  ASSERT_TRUE(garbage.Open(rig.address, 500, true).ok());
  Status st = rig.Client("s3cret", limits.deadline);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(rig.WaitFor([](const HandshakeAcceptorStats& s) { return s.accepted >= 1; }));
  auto s = rig.acceptor->stats();
  EXPECT_LE(s.max_pending_seen, limits.max_pending);
  EXPECT_GT(s.evicted, 0u) << "500 silent peers must overflow a cap of 256";
  EXPECT_TRUE(rig.WaitFor([](const HandshakeAcceptorStats& s) { return s.refused >= 500; }))
      << "every garbage peer is refused; refused=" << rig.acceptor->stats().refused;
  EXPECT_LT(s.log_lines, s.refused + s.evicted) << "refusal lines are rate-limited";
}

TEST(HandshakeAcceptor, PeerSlowerThanThePollPeriod_IsAccepted) {
  HandshakeLimits limits;
  AcceptorRig rig(limits);
  StallProxy proxy(rig.address, 24, milliseconds(300));  // stalls after HELLO
  ASSERT_TRUE(proxy.Start().ok());
  auto fd = ConnectSocket(ParseAddress(proxy.address()).value(), limits.deadline);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  std::vector<uint8_t> peer;
  Status st = HandshakeClient(*fd, "s3cret", {}, &peer, limits.deadline);
  ::close(*fd);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(proxy.stalled());
  EXPECT_TRUE(rig.WaitFor([](const HandshakeAcceptorStats& s) { return s.accepted == 1; }));
}

TEST(HandshakeAcceptor, PendingCap_OldestClosedAndNewPeerServed) {
  HandshakeLimits limits;
  limits.max_pending = 8;
  AcceptorRig rig(limits);
  PeerFlood silent;
  ASSERT_TRUE(silent.Open(rig.address, 20, false).ok());
  ASSERT_TRUE(rig.WaitFor([](const HandshakeAcceptorStats& s) { return s.evicted >= 12; }))
      << "evicted=" << rig.acceptor->stats().evicted;
  Status st = rig.Client("s3cret", limits.deadline);
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto s = rig.acceptor->stats();
  EXPECT_LE(s.max_pending_seen, 8u);
  EXPECT_NE(s.last_refusal.find("handshakes pending"), std::string::npos) << s.last_refusal;
}

TEST(HandshakeAcceptor, SilentPeer_ClosedAtItsDeadline) {
  HandshakeLimits limits;
  limits.deadline = milliseconds(200);
  AcceptorRig rig(limits);
  PeerFlood silent;
  ASSERT_TRUE(silent.Open(rig.address, 3, false).ok());
  ASSERT_TRUE(rig.WaitFor([](const HandshakeAcceptorStats& s) { return s.timed_out == 3; }))
      << "timed_out=" << rig.acceptor->stats().timed_out;
  EXPECT_EQ(rig.acceptor->stats().pending, 0u);
  EXPECT_NE(rig.acceptor->stats().last_refusal.find("deadline of 200 ms"), std::string::npos);
}

TEST(HandshakeAcceptor, RefusalLines_RateLimitedWithSuppressedCount) {
  HandshakeLimits limits;
  limits.log_lines_per_second = 3;
  AcceptorRig rig(limits);
  auto start = Clock::now();
  PeerFlood garbage;
  ASSERT_TRUE(garbage.Open(rig.address, 60, true).ok());
  ASSERT_TRUE(rig.WaitFor([](const HandshakeAcceptorStats& s) { return s.refused == 60; }))
      << "refused=" << rig.acceptor->stats().refused;
  auto elapsed_s = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start).count();
  auto s = rig.acceptor->stats();
  EXPECT_EQ(s.log_lines + s.log_suppressed, 60u);
  // At most 3 per one-second window, and the windows fit in the elapsed time.
  EXPECT_LE(s.log_lines, 3u * static_cast<uint64_t>(elapsed_s + 2));
  EXPECT_GT(s.log_suppressed, 0u);
}

TEST(HandshakeAcceptor, WrongSecret_ClearErrorOnBothSides) {
  HandshakeLimits limits;
  AcceptorRig rig(limits, "server-secret");
  Status st = rig.Client("client-secret", limits.deadline);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << st.ToString();
  EXPECT_NE(st.message().find("cluster secret mismatch"), std::string::npos) << st.ToString();
  ASSERT_TRUE(rig.WaitFor([](const HandshakeAcceptorStats& s) { return s.secret_mismatch == 1; }));
  EXPECT_NE(rig.acceptor->stats().last_refusal.find("cluster secret mismatch"), std::string::npos)
      << rig.acceptor->stats().last_refusal;
  EXPECT_EQ(rig.acceptor->stats().accepted, 0u);
}

// ---------------------------------------------------------------------------------------------
// Through the soft provider's listener, with an accept loop of 100 ms calls.

struct SoftRig {
  std::unique_ptr<Fabric> fabric;
  std::unique_ptr<ProtectionDomain> pd;
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<Listener> listener;
  std::atomic<bool> stop{false};
  std::atomic<int> accepted{0};
  std::vector<std::unique_ptr<Connection>> conns;
  std::thread loop;
  explicit SoftRig(FabricOptions fo) {
    fabric = std::move(soft::OpenSoftFabric(fo)).value();
    pd = std::move(fabric->AllocPd()).value();
    cq = std::move(fabric->CreateCq({})).value();
    listener = std::move(fabric->Listen(pd.get(), "tcp://127.0.0.1:0")).value();
    loop = std::thread([this] {
      while (!stop.load()) {
        ConnectionOptions co;
        co.send_cq = cq.get();
        co.recv_cq = cq.get();
        co.timeout = milliseconds(100);
        auto c = listener->Accept(co);
        if (c.ok()) {
          conns.push_back(std::move(c).value());
          accepted++;
        }
      }
    });
  }
  ~SoftRig() {
    stop = true;
    loop.join();
    conns.clear();
    listener.reset();
  }
};

TEST(SoftListener, FloodAndSlowPeer_LegitimateConnectsSucceed) {
  FabricOptions fo;
  SoftRig server(fo);
  auto client = std::move(soft::OpenSoftFabric(fo)).value();
  auto pd = std::move(client->AllocPd()).value();
  auto cq = std::move(client->CreateCq({})).value();
  ConnectionOptions co;
  co.send_cq = cq.get();
  co.recv_cq = cq.get();
  co.timeout = fo.handshake_timeout;
  PeerFlood silent, garbage;
  ASSERT_TRUE(silent.Open(server.listener->address(), 500, false).ok());
  ASSERT_TRUE(garbage.Open(server.listener->address(), 500, true).ok());
  auto c = client->Connect(pd.get(), server.listener->address(), co);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  StallProxy proxy(server.listener->address(), 24, milliseconds(300));
  ASSERT_TRUE(proxy.Start().ok());
  auto slow = client->Connect(pd.get(), proxy.address(), co);
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  EXPECT_TRUE(proxy.stalled());
}

// ---------------------------------------------------------------------------------------------
// The cluster secret.

struct EnvGuard {
  ~EnvGuard() {
    ::unsetenv("ASYMNVM_SECRET");
    ::unsetenv("ASYMNVM_SECRET_FILE");
  }
};

std::string WriteFile(const std::string& tag, const std::string& content) {
  std::string path = "/tmp/asymnvm-secret-" + std::to_string(::getpid()) + "-" + tag;
  std::ofstream(path, std::ios::trunc) << content;
  ::chmod(path.c_str(), 0600);
  return path;
}

TEST(ClusterSecret, FileEnvironmentAndDefault_Precedence) {
  EnvGuard guard;
  ::unsetenv("ASYMNVM_SECRET");
  ::unsetenv("ASYMNVM_SECRET_FILE");
  FabricOptions o;
  EXPECT_EQ(ResolveClusterSecret(o).value(), kDefaultClusterSecret);
  ::setenv("ASYMNVM_SECRET", "from-env", 1);
  EXPECT_EQ(ResolveClusterSecret(o).value(), "from-env");
  std::string envfile = WriteFile("env", "from-env-file\n");
  ::setenv("ASYMNVM_SECRET_FILE", envfile.c_str(), 1);
  EXPECT_EQ(ResolveClusterSecret(o).value(), "from-env-file");
  o.cluster_secret = "explicit";
  EXPECT_EQ(ResolveClusterSecret(o).value(), "explicit");
  o.secret_file = WriteFile("opt", "from-option-file\n");
  EXPECT_EQ(ResolveClusterSecret(o).value(), "from-option-file");
  ::unlink(envfile.c_str());
  ::unlink(o.secret_file.c_str());
}

TEST(ClusterSecret, MissingOrEmptyFile_ClearError) {
  EnvGuard guard;
  FabricOptions o;
  o.secret_file = "/nonexistent/asymnvm-secret";
  auto r = ResolveClusterSecret(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/asymnvm-secret"), std::string::npos);
  o.secret_file = WriteFile("empty", "\n");
  r = ResolveClusterSecret(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("empty"), std::string::npos);
  EXPECT_FALSE(soft::OpenSoftFabric(o).ok());
  ::unlink(o.secret_file.c_str());
}

TEST(ClusterSecret, SecretFromFile_PeersWithTheSameFileConnect_OthersRefused) {
  EnvGuard guard;
  FabricOptions so;
  so.secret_file = WriteFile("shared", "shared-secret\n");
  SoftRig server(so);
  auto connect_with = [&](FabricOptions fo) {
    auto f = std::move(soft::OpenSoftFabric(fo)).value();
    auto pd = std::move(f->AllocPd()).value();
    auto cq = std::move(f->CreateCq({})).value();
    ConnectionOptions co;
    co.send_cq = cq.get();
    co.recv_cq = cq.get();
    co.timeout = milliseconds(5000);
    auto c = f->Connect(pd.get(), server.listener->address(), co);
    return c.ok() ? Status::Ok() : c.status();
  };
  EXPECT_TRUE(connect_with(so).ok());
  FabricOptions env_client;
  ::setenv("ASYMNVM_SECRET", "shared-secret", 1);
  EXPECT_TRUE(connect_with(env_client).ok());
  ::unsetenv("ASYMNVM_SECRET");
  Status wrong = connect_with(FabricOptions{});  // built-in default
  EXPECT_EQ(wrong.code(), StatusCode::kPermissionDenied) << wrong.ToString();
  EXPECT_NE(wrong.message().find("cluster secret mismatch"), std::string::npos);
  ::unlink(so.secret_file.c_str());
}

TEST(ClusterSecret, NonLoopbackListenWithDefaultSecret_Refused) {
  EnvGuard guard;
  EXPECT_TRUE(IsLoopbackAddress("tcp://127.0.0.1:0"));
  EXPECT_TRUE(IsLoopbackAddress("tcp://localhost:0"));
  EXPECT_TRUE(IsLoopbackAddress("tcp://[::1]:0"));
  EXPECT_TRUE(IsLoopbackAddress("unix:///tmp/x.sock"));
  EXPECT_FALSE(IsLoopbackAddress("tcp://0.0.0.0:0"));
  EXPECT_FALSE(IsLoopbackAddress("tcp://[::]:0"));
  EXPECT_FALSE(IsLoopbackAddress("tcp://10.1.2.3:7000"));

  auto f = std::move(soft::OpenSoftFabric(FabricOptions{})).value();
  auto pd = std::move(f->AllocPd()).value();
  auto l = f->Listen(pd.get(), "tcp://0.0.0.0:0");
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(l.status().message().find("--secret-file"), std::string::npos);
  EXPECT_TRUE(f->Listen(pd.get(), "tcp://127.0.0.1:0").ok());

  FabricOptions named;
  named.secret_file = WriteFile("nonloop", "a-real-secret");
  auto g = std::move(soft::OpenSoftFabric(named)).value();
  auto gpd = std::move(g->AllocPd()).value();
  auto ok = g->Listen(gpd.get(), "tcp://0.0.0.0:0");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  ::unlink(named.secret_file.c_str());
}

}  // namespace
}  // namespace asymnvm::fabric
