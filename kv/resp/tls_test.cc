// The gateway's TLS port (tls.h, doc/resp.md §TLS) against an in-process OpenSSL client, with
// certificates made here (a CA, a server and a client certificate, and a CA the server does not
// trust). Runs under ASan/TSan with the unit label; the real redis-cli is
// tests/ops/resp_tls_test.sh.
#include "kv/resp/tls.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "kv/resp/server.h"
#include "kv/resp/test_client.h"
#include "kv/resp/test_fake_store.h"

namespace asymnvm::kv::resp {
namespace {

using testing::FakeStore;
using testing::FrameLength;
using testing::SharedStore;
using testing::TestClient;

// --- Certificates -------------------------------------------------------------------------------

struct KeyPair {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  ~KeyPair() {
    EVP_PKEY_free(key);
    X509_free(cert);
  }
};

// An EC P-256 key and a certificate named `cn`, signed by `issuer` (null: self-signed CA).
void MakeCert(const char* cn, const KeyPair* issuer, KeyPair* out) {
  out->key = EVP_EC_gen("P-256");
  ASSERT_NE(out->key, nullptr);
  X509* x = X509_new();
  out->cert = x;
  X509_set_version(x, 2);
  static long serial = 1;
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 2 * 86400);
  X509_set_pubkey(x, out->key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                             -1, -1, 0);
  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer->cert) : name);
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer ? issuer->cert : x, x, nullptr, nullptr, 0);
  auto ext = [&](int nid, const char* value) {
    X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, &v3, nid, value);
    ASSERT_NE(e, nullptr);
    X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
  };
  if (issuer == nullptr) {
    ext(NID_basic_constraints, "critical,CA:TRUE");
    ext(NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    ext(NID_basic_constraints, "CA:FALSE");
    ext(NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
  }
  ASSERT_GT(X509_sign(x, issuer ? issuer->key : out->key, EVP_sha256()), 0);
}

void WritePem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  if (cert != nullptr) PEM_write_X509(f, cert);
  if (key != nullptr) PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
}

class Certs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/asymnvm-tls-unit.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_NO_FATAL_FAILURE(MakeCert("test CA", nullptr, &ca_));
    ASSERT_NO_FATAL_FAILURE(MakeCert("server", &ca_, &server_));
    ASSERT_NO_FATAL_FAILURE(MakeCert("client", &ca_, &client_));
    ASSERT_NO_FATAL_FAILURE(MakeCert("other CA", nullptr, &other_ca_));
    ASSERT_NO_FATAL_FAILURE(MakeCert("stranger", &other_ca_, &stranger_));
    WritePem(P("ca.crt"), ca_.cert, nullptr);
    WritePem(P("server.crt"), server_.cert, nullptr);
    WritePem(P("server.key"), nullptr, server_.key);
    WritePem(P("client.key"), nullptr, client_.key);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string P(const char* name) const { return dir_ + "/" + name; }
  TlsOptions Options(TlsAuthClients auth = TlsAuthClients::kYes) const {
    TlsOptions o;
    o.cert_file = P("server.crt");
    o.key_file = P("server.key");
    o.ca_cert_file = P("ca.crt");
    o.auth_clients = auth;
    return o;
  }

  std::string dir_;
  KeyPair ca_, server_, client_, other_ca_, stranger_;
};

// --- A blocking TLS client (deadlines by SO_RCVTIMEO/SO_SNDTIMEO, never a sleep) --------------

class TlsClient {
 public:
  // `cert`: the client's certificate and key (null: none). `rcvbuf`: > 0 sets SO_RCVBUF.
  TlsClient(uint16_t port, const KeyPair& ca, const KeyPair* cert, int rcvbuf = 0) {
    ctx_ = SSL_CTX_new(TLS_client_method());
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx_), ca.cert);
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
    if (cert != nullptr) {
      SSL_CTX_use_certificate(ctx_, cert->cert);
      SSL_CTX_use_PrivateKey(ctx_, cert->key);
    }
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rcvbuf > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    timeval tv{60, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return;
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    handshake_ = SSL_connect(ssl_) == 1;
  }
  ~TlsClient() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    SSL_CTX_free(ctx_);
    if (fd_ >= 0) ::close(fd_);
  }
  bool handshake() const { return handshake_; }
  bool Send(std::string_view data) {
    while (!data.empty()) {
      int w = SSL_write(ssl_, data.data(), static_cast<int>(data.size()));
      if (w <= 0) return false;
      data.remove_prefix(static_cast<size_t>(w));
    }
    return true;
  }
  // `n` whole replies; fewer when the connection ends or fails first.
  std::vector<std::string> Read(size_t n) {
    std::vector<std::string> out;
    while (out.size() < n) {
      long len = FrameLength(buf_);
      if (len < 0) break;
      if (len > 0) {
        out.push_back(buf_.substr(0, static_cast<size_t>(len)));
        buf_.erase(0, static_cast<size_t>(len));
        continue;
      }
      char chunk[16384];
      int r = SSL_read(ssl_, chunk, sizeof chunk);
      if (r <= 0) break;
      buf_.append(chunk, static_cast<size_t>(r));
    }
    return out;
  }
  std::string Call(const std::vector<std::string>& argv) {
    if (!Send(Command(argv))) return "";
    auto r = Read(1);
    return r.empty() ? "" : r[0];
  }
  static std::string Command(const std::vector<std::string>& argv) {
    std::string s = "*" + std::to_string(argv.size()) + "\r\n";
    for (const auto& a : argv) s += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
    return s;
  }

 private:
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  bool handshake_ = false;
  std::string buf_;
};

// --- TlsContext --------------------------------------------------------------------------------

TEST(TlsAuthClients, ParsesRedisSpelling) {
  EXPECT_EQ(ParseTlsAuthClients("yes").value(), TlsAuthClients::kYes);
  EXPECT_EQ(ParseTlsAuthClients("no").value(), TlsAuthClients::kNo);
  EXPECT_EQ(ParseTlsAuthClients("optional").value(), TlsAuthClients::kOptional);
  EXPECT_FALSE(ParseTlsAuthClients("maybe").ok());
}

using TlsContextTest = Certs;

TEST_F(TlsContextTest, BadFiles_ClearErrorsNamingTheFile) {
  ASSERT_TRUE(TlsContext::Create(Options()).ok());
  auto expect_error = [](const TlsOptions& o, const std::string& want) {
    auto c = TlsContext::Create(o);
    ASSERT_FALSE(c.ok()) << want;
    EXPECT_NE(c.status().message().find(want), std::string::npos) << c.status().message();
  };
  TlsOptions o = Options();
  o.key_file = P("client.key");
  expect_error(o, "tls-key-file '" + P("client.key") + "': does not match tls-cert-file");
  o = Options();
  o.key_file = P("missing.key");
  expect_error(o, "tls-key-file '" + P("missing.key") + "': No such file");
  o = Options();
  o.key_file = P("ca.crt");
  expect_error(o, "not an unencrypted PEM private key");
  o = Options();
  o.cert_file = P("server.key");
  expect_error(o, "tls-cert-file '" + P("server.key") + "': not a PEM certificate");
  o = Options();
  o.ca_cert_file.clear();
  expect_error(o, "tls-ca-cert-file is required");
  o.auth_clients = TlsAuthClients::kNo;  // as Redis: no CA needed when no client is verified
  EXPECT_TRUE(TlsContext::Create(o).ok());
  o = Options();
  o.cert_file.clear();
  expect_error(o, "tls-cert-file is not set");
}

// --- The server's TLS port ----------------------------------------------------------------------

class TlsServer : public Certs {
 protected:
  void Start(TlsAuthClients auth = TlsAuthClients::kYes, bool plain = true) {
    auto ctx = TlsContext::Create(Options(auth));
    ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
    ServerOptions o;
    o.port = 0;
    o.listen_plain = plain;
    o.tls = std::move(ctx).value();
    o.tls_port = 0;
    o.loop_threads = 1;  // one loop: a connection that held it would stall every other
    o.store_factory = [this]() -> Result<std::unique_ptr<Store>> {
      return std::unique_ptr<Store>(new SharedStore(&store_));
    };
    auto s = Server::Start(std::move(o));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    ASSERT_NE(server_->tls_port(), 0);
  }
  FakeStore store_;
  std::unique_ptr<Server> server_;
};

TEST_F(TlsServer, SetGetPipelineAndLargeValuesThroughASmallWindow) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NE(server_->port(), server_->tls_port());
  TlsClient c(server_->tls_port(), ca_, &client_);
  ASSERT_TRUE(c.handshake());
  EXPECT_EQ(c.Call({"SET", "k", "v"}), "+OK\r\n");
  EXPECT_EQ(c.Call({"GET", "k"}), "$1\r\nv\r\n");
  std::string batch;
  for (int i = 0; i < 300; ++i) batch += TlsClient::Command({"INCR", "n"});
  ASSERT_TRUE(c.Send(batch));
  auto r = c.Read(300);
  ASSERT_EQ(r.size(), 300u);
  for (int i = 0; i < 300; ++i) ASSERT_EQ(r[i], ":" + std::to_string(i + 1) + "\r\n");
  // The plain port serves the same data.
  TestClient plain(server_->port());
  ASSERT_TRUE(plain.connected());
  EXPECT_EQ(plain.Call("GET n"), "$3\r\n300\r\n");

  // 1 MiB in, then 6 MiB of replies to a client with a 4 KiB window that reads only after it sent
  // everything: the server's writes must wait for the socket many times.
  std::string big(1 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>('a' + i % 26);
  TlsClient slow(server_->tls_port(), ca_, &client_, /*rcvbuf=*/4096);
  ASSERT_TRUE(slow.handshake());
  EXPECT_EQ(slow.Call({"SET", "big", big}), "+OK\r\n");
  batch.clear();
  for (int i = 0; i < 6; ++i) batch += TlsClient::Command({"GET", "big"});
  ASSERT_TRUE(slow.Send(batch));
  r = slow.Read(6);
  ASSERT_EQ(r.size(), 6u);
  const std::string want = "$" + std::to_string(big.size()) + "\r\n" + big + "\r\n";
  for (const auto& reply : r) ASSERT_TRUE(reply == want);
}

TEST_F(TlsServer, ClientsWithoutOrWithAnUntrustedCertificate_RefusedServerServesOn) {
  ASSERT_NO_FATAL_FAILURE(Start(TlsAuthClients::kYes));
  {
    TlsClient none(server_->tls_port(), ca_, nullptr);
    // TLS 1.3: the client may finish its side first; the refusal arrives on its first read.
    if (none.handshake()) {
      EXPECT_EQ(none.Call({"SET", "nocert", "x"}), "");
    }
  }
  {
    TlsClient stranger(server_->tls_port(), ca_, &stranger_);
    if (stranger.handshake()) {
      EXPECT_EQ(stranger.Call({"SET", "stranger", "x"}), "");
    }
  }
  TlsClient good(server_->tls_port(), ca_, &client_);
  ASSERT_TRUE(good.handshake());
  EXPECT_EQ(good.Call({"EXISTS", "nocert", "stranger"}), ":0\r\n");
}

TEST_F(TlsServer, Optional_ServesClientsWithoutACertificate_RefusesUntrustedOnes) {
  ASSERT_NO_FATAL_FAILURE(Start(TlsAuthClients::kOptional, /*plain=*/false));
  EXPECT_EQ(server_->port(), 0);
  TlsClient none(server_->tls_port(), ca_, nullptr);
  ASSERT_TRUE(none.handshake());
  EXPECT_EQ(none.Call({"SET", "anon", "1"}), "+OK\r\n");
  TlsClient stranger(server_->tls_port(), ca_, &stranger_);
  if (stranger.handshake()) {
    EXPECT_EQ(stranger.Call({"GET", "anon"}), "");
  }
  TlsClient good(server_->tls_port(), ca_, &client_);
  ASSERT_TRUE(good.handshake());
  EXPECT_EQ(good.Call({"GET", "anon"}), "$1\r\n1\r\n");
}

TEST_F(TlsServer, PlaintextIsClosed_AStalledHandshakeHoldsNoLoop) {
  ASSERT_NO_FATAL_FAILURE(Start());
  TestClient plain_on_tls(server_->tls_port());
  ASSERT_TRUE(plain_on_tls.connected());
  ASSERT_TRUE(plain_on_tls.Send("PING\r\n"));
  EXPECT_TRUE(plain_on_tls.WaitClosed());
  // The first bytes of a record, then nothing: the one loop thread must still serve others.
  TestClient stalled(server_->tls_port());
  ASSERT_TRUE(stalled.connected());
  ASSERT_TRUE(stalled.Send(std::string("\x16\x03\x01", 3)));
  TlsClient good(server_->tls_port(), ca_, &client_);
  ASSERT_TRUE(good.handshake());
  EXPECT_EQ(good.Call({"PING"}), "+PONG\r\n");
  // And the stalled connection is still there, waiting (closed by no timer of ours).
  EXPECT_FALSE(stalled.WaitClosed(/*timeout_ms=*/1));
}

TEST(TlsServerOptions, NeitherPort_InvalidArgument) {
  ServerOptions o;
  o.listen_plain = false;
  o.store_factory = []() -> Result<std::unique_ptr<Store>> { return Status::Internal("unused"); };
  EXPECT_EQ(Server::Start(std::move(o)).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace asymnvm::kv::resp
