// Fabric TLS (doc/fabric.md §TLS): the soft NIC over tcp+TLS moves MiB in both directions at once,
// a TLS node and a plain one (either way round), a certificate from another CA, a wrong cluster
// secret and bad files all fail with an error saying so, within the handshake deadline; unix://
// ignores TLS. Certificates are made here (common/tls_files.h).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <future>
#include <thread>

#include "asymnvm/fabric.h"
#include "common/tls_files.h"
#include "fabric/soft/soft_fabric.h"

namespace asymnvm::fabric::soft {
namespace {

using std::chrono::milliseconds;

// How long a listener waits for a peer that is to be refused (Accept then times out).
constexpr milliseconds kRefused{1000};

class FabricTls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/asymnvm-fabric-tls.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::filesystem::create_directory(dir_ + "/other");
    ASSERT_TRUE(WriteThrowawayCertificates(dir_, {"a", "b"}).ok());
    ASSERT_TRUE(WriteThrowawayCertificates(dir_ + "/other", {"stranger"}).ok());
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static FabricOptions Tls(const std::string& node, const std::string& ca_dir = dir_) {
    FabricOptions o;
    o.cluster_secret = "tls-test-secret";
    o.tls_cert_file = ca_dir + "/" + node + ".crt";
    o.tls_key_file = ca_dir + "/" + node + ".key";
    o.tls_ca_cert_file = dir_ + "/ca.crt";  // what this node trusts
    o.handshake_timeout = milliseconds(5000);
    return o;
  }
  static FabricOptions Plain() {
    FabricOptions o;
    o.cluster_secret = "tls-test-secret";
    return o;
  }

  struct Node {
    std::unique_ptr<Fabric> fabric;
    std::unique_ptr<ProtectionDomain> pd;
    std::unique_ptr<CompletionQueue> cq;
  };
  static Node Open(const FabricOptions& o) {
    Node n;
    auto f = OpenSoftFabric(o);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok()) return n;
    n.fabric = std::move(f).value();
    n.pd = n.fabric->AllocPd().value();
    n.cq = n.fabric->CreateCq({}).value();
    return n;
  }
  static ConnectionOptions Opts(const Node& n) {
    ConnectionOptions o;
    o.send_cq = n.cq.get();
    o.recv_cq = n.cq.get();
    o.timeout = milliseconds(10000);
    return o;
  }

  // Connects `client` to a listener of `server` on `address`: (connect result, accept result).
  static std::pair<Result<std::unique_ptr<Connection>>, Result<std::unique_ptr<Connection>>> Pair(
      Node& client, Node& server, const std::string& address = "tcp://127.0.0.1:0",
      milliseconds accept_timeout = milliseconds(10000)) {
    auto l = server.fabric->Listen(server.pd.get(), address);
    EXPECT_TRUE(l.ok()) << l.status().ToString();
    auto accept_opts = Opts(server);
    accept_opts.timeout = accept_timeout;
    auto accepted = std::async(std::launch::async, [&] { return (*l)->Accept(accept_opts); });
    auto c = client.fabric->Connect(client.pd.get(), (*l)->address(), Opts(client));
    auto a = accepted.get();
    return {std::move(c), std::move(a)};
  }

  static std::string dir_;
};
std::string FabricTls::dir_;

// Posts `len` bytes of `op` (kWrite / kRead) in chunks and waits for every completion.
void Transfer(Connection* c, CompletionQueue* cq, MemoryRegion* local, const RegionDescriptor& rd,
              Opcode op, size_t len) {
  constexpr size_t kChunk = 256 * 1024;
  std::vector<WorkRequest> wrs;
  for (size_t off = 0; off < len; off += kChunk) {
    WorkRequest wr;
    wr.wr_id = off;
    wr.opcode = op;
    wr.local_addr = static_cast<uint8_t*>(local->addr()) + off;
    wr.length = static_cast<uint32_t>(std::min(kChunk, len - off));
    wr.local_mr = local;
    wr.remote_addr = rd.addr + off;
    wr.rkey = rd.rkey;
    wrs.push_back(wr);
  }
  ASSERT_TRUE(c->Post(wrs).ok());
  size_t got = 0;
  Completion buf[16];
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (got < wrs.size() && std::chrono::steady_clock::now() < deadline) {
    auto n = cq->Wait(buf, std::chrono::microseconds(200000));
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    for (size_t i = 0; i < *n; i++) {
      ASSERT_EQ(buf[i].status, CompletionStatus::kSuccess)
          << CompletionStatusName(buf[i].status) << ": " << c->error().ToString();
    }
    got += *n;
  }
  ASSERT_EQ(got, wrs.size()) << "timed out";
}

TEST_F(FabricTls, MiBInBothDirectionsAtOnce) {
  constexpr size_t kLen = 8u << 20;  // per direction and operation
  Node a = Open(Tls("a")), b = Open(Tls("b"));
  ASSERT_TRUE(a.fabric && b.fabric);
  auto [c, s] = Pair(a, b);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // Each side: `src` (pattern it writes to the other), `dst` (receives the other's writes),
  // `exposed` (the other reads it), `back` (what it read).
  struct Side {
    std::vector<uint8_t> src, dst, exposed, back;
    std::unique_ptr<MemoryRegion> src_mr, dst_mr, exposed_mr, back_mr;
  } sa, sb;
  auto fill = [](Side& side, Node& n, uint8_t seed) {
    side.src.resize(kLen);
    side.exposed.resize(kLen);
    side.dst.assign(kLen, 0);
    side.back.assign(kLen, 0);
    for (size_t i = 0; i < kLen; i++) {
      side.src[i] = static_cast<uint8_t>(i * 131 + seed);
      side.exposed[i] = static_cast<uint8_t>(i * 7 + seed + 1);
    }
    MemoryRegionOptions mo;
    mo.access = kAllRemote;
    side.src_mr = n.pd->RegisterMemory(side.src.data(), kLen, mo).value();
    side.dst_mr = n.pd->RegisterMemory(side.dst.data(), kLen, mo).value();
    side.exposed_mr = n.pd->RegisterMemory(side.exposed.data(), kLen, mo).value();
    side.back_mr = n.pd->RegisterMemory(side.back.data(), kLen, mo).value();
  };
  fill(sa, a, 1);
  fill(sb, b, 2);
  // a's initiator and b's initiator (on the accepted connection) at the same time: writes and
  // reads cross in both directions over one TLS session.
  std::thread ta([&] {
    Transfer(c->get(), a.cq.get(), sa.src_mr.get(), sb.dst_mr->descriptor(), Opcode::kWrite, kLen);
    Transfer(c->get(), a.cq.get(), sa.back_mr.get(), sb.exposed_mr->descriptor(), Opcode::kRead,
             kLen);
  });
  std::thread tb([&] {
    Transfer(s->get(), b.cq.get(), sb.back_mr.get(), sa.exposed_mr->descriptor(), Opcode::kRead,
             kLen);
    Transfer(s->get(), b.cq.get(), sb.src_mr.get(), sa.dst_mr->descriptor(), Opcode::kWrite, kLen);
  });
  ta.join();
  tb.join();
  EXPECT_TRUE(sb.dst == sa.src) << "a's writes did not land intact at b";
  EXPECT_TRUE(sa.dst == sb.src) << "b's writes did not land intact at a";
  EXPECT_TRUE(sa.back == sb.exposed) << "a read wrong bytes";
  EXPECT_TRUE(sb.back == sa.exposed) << "b read wrong bytes";
  EXPECT_GE((*c)->counters().bytes_out, kLen);
}

TEST_F(FabricTls, TlsClientMeetsPlainListener_FailsSayingSo) {
  Node a = Open(Tls("a")), plain = Open(Plain());
  auto [c, s] = Pair(a, plain, "tcp://127.0.0.1:0", kRefused);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("fabric-tls"), std::string::npos) << c.status().ToString();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kTimedOut) << s.status().ToString();
}

TEST_F(FabricTls, PlainClientMeetsTlsListener_FailsSayingSo) {
  Node plain = Open(Plain()), b = Open(Tls("b"));
  auto [c, s] = Pair(plain, b, "tcp://127.0.0.1:0", kRefused);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("fabric-tls"), std::string::npos) << c.status().ToString();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kTimedOut) << s.status().ToString();
}

TEST_F(FabricTls, CertificateFromAnotherCa_Refused) {
  // The stranger trusts our CA but its own certificate is signed by another one: we refuse it.
  Node stranger = Open(Tls("stranger", dir_ + "/other")), b = Open(Tls("b"));
  auto [c, s] = Pair(stranger, b, "tcp://127.0.0.1:0", kRefused);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("certificate"), std::string::npos) << c.status().ToString();
  // The server's alert (unknown CA), recognised by OpenSSL's reason code, adds the hint.
  EXPECT_NE(c.status().message().find("the peer does not accept our certificate"),
            std::string::npos)
      << c.status().ToString();
  ASSERT_FALSE(s.ok());
  // And the other way round: a node that trusts only the other CA refuses our server.
  FabricOptions wary = Tls("a");
  wary.tls_ca_cert_file = dir_ + "/other/ca.crt";
  Node w = Open(wary), b2 = Open(Tls("b"));
  auto [c2, s2] = Pair(w, b2, "tcp://127.0.0.1:0", kRefused);
  ASSERT_FALSE(c2.ok());
  EXPECT_NE(c2.status().message().find("certificate verify failed"), std::string::npos)
      << c2.status().ToString();
}

TEST_F(FabricTls, WrongClusterSecretInsideTls_PermissionDenied) {
  FabricOptions other = Tls("a");
  other.cluster_secret = "another-secret";
  Node a = Open(other), b = Open(Tls("b"));
  auto [c, s] = Pair(a, b, "tcp://127.0.0.1:0", kRefused);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kPermissionDenied) << c.status().ToString();
}

TEST_F(FabricTls, UnverifiedTlsStillNeedsTheSecret) {
  FabricOptions a_opts = Tls("a"), b_opts = Tls("b");
  a_opts.tls_verify_peer = b_opts.tls_verify_peer = false;
  a_opts.tls_ca_cert_file.clear();
  Node a = Open(a_opts), b = Open(b_opts);
  auto [c, s] = Pair(a, b);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  b_opts.cluster_secret = "not-the-same";
  Node b2 = Open(b_opts);
  auto [c2, s2] = Pair(a, b2, "tcp://127.0.0.1:0", kRefused);
  ASSERT_FALSE(c2.ok());
  EXPECT_EQ(c2.status().code(), StatusCode::kPermissionDenied) << c2.status().ToString();
}

TEST_F(FabricTls, UnixTransportIgnoresTls) {
  Node a = Open(Tls("a")), plain = Open(Plain());
  std::string path = "unix://" + dir_ + "/l.sock";
  auto [c, s] = Pair(a, plain, path);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(s.ok()) << s.status().ToString();
}

TEST_F(FabricTls, BadFiles_ClearErrors) {
  auto expect_error = [](const FabricOptions& o, const std::string& want) {
    auto f = OpenSoftFabric(o);
    ASSERT_FALSE(f.ok()) << want;
    EXPECT_NE(f.status().message().find(want), std::string::npos) << f.status().ToString();
  };
  FabricOptions o = Tls("a");
  o.tls_key_file = dir_ + "/b.key";
  expect_error(o, "fabric-tls-key-file '" + dir_ + "/b.key': does not match");
  o = Tls("a");
  o.tls_cert_file = dir_ + "/missing.crt";
  expect_error(o, "fabric-tls-cert-file '" + dir_ + "/missing.crt'");
  o = Tls("a");
  o.tls_ca_cert_file.clear();
  expect_error(o, "fabric-tls-ca-cert-file is required");
  o = Plain();
  o.tls_key_file = dir_ + "/a.key";
  expect_error(o, "fabric-tls-cert-file is not set");
}

}  // namespace
}  // namespace asymnvm::fabric::soft
