// TLS for the fabric's stream connections (fabric/tls.h, doc/fabric.md §TLS).
#include "fabric/tls.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "asymnvm/fabric.h"
#include "common/tls_files.h"

namespace asymnvm::fabric {
namespace {

constexpr size_t kRecvChunk = 64 * 1024;
constexpr char kExporterLabel[] = "EXPORTER-asymnvm-fabric-handshake";
constexpr char kMismatchHint[] =
    "both sides of a fabric connection need the same --fabric-tls-* setting (TLS on both or on "
    "neither)";

Status Configure(SSL_CTX* c, const FabricOptions& o, bool server) {
  // TLS 1.3 only (both ends are ours), no compression, no session tickets (every connection is a
  // full handshake; a ticket would only be one more message after it).
  SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION);
  SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION | SSL_OP_NO_TICKET);
  if (server) SSL_CTX_set_num_tickets(c, 0);
  ASYMNVM_RETURN_IF_ERROR(LoadTlsFiles(c,
                                       TlsFileNames{.cert = "fabric-tls-cert-file",
                                                    .key = "fabric-tls-key-file",
                                                    .ca = "fabric-tls-ca-cert-file"},
                                       o.tls_cert_file, o.tls_key_file,
                                       o.tls_verify_peer ? o.tls_ca_cert_file : std::string()));
  if (o.tls_verify_peer) {
    // Both sides present a certificate and check the other's against the CA. Host names are not
    // checked: the CA says "a member of this cluster", the cluster secret says which cluster.
    SSL_CTX_set_verify(
        c, server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT : SSL_VERIFY_PEER, nullptr);
    if (server) {
      STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(o.tls_ca_cert_file.c_str());
      if (names != nullptr) SSL_CTX_set_client_CA_list(c, names);
    }
  } else {
    SSL_CTX_set_verify(c, SSL_VERIFY_NONE, nullptr);
  }
  return Status::Ok();
}

}  // namespace

Result<std::shared_ptr<const TlsConfig>> TlsConfig::FromOptions(const FabricOptions& options) {
  FabricOptions o = options;
  if (o.tls_cert_file.empty() && o.tls_key_file.empty() && o.tls_ca_cert_file.empty()) {
    // As the cluster secret: the environment when the options name nothing (tools and SDK
    // applications that have no flag for it; child processes of a test).
    auto env = [](const char* name) {
      const char* v = std::getenv(name);
      return std::string(v != nullptr ? v : "");
    };
    o.tls_cert_file = env("ASYMNVM_FABRIC_TLS_CERT_FILE");
    o.tls_key_file = env("ASYMNVM_FABRIC_TLS_KEY_FILE");
    o.tls_ca_cert_file = env("ASYMNVM_FABRIC_TLS_CA_CERT_FILE");
    if (o.tls_ca_cert_file.empty()) o.tls_verify_peer = false;
  }
  if (o.tls_cert_file.empty()) {
    if (!o.tls_key_file.empty() || (!o.tls_ca_cert_file.empty() && o.tls_verify_peer)) {
      return Status::InvalidArgument(
          "fabric TLS: fabric-tls-cert-file is not set (TLS needs this node's certificate and "
          "key)");
    }
    return std::shared_ptr<const TlsConfig>();
  }
  if (o.tls_verify_peer && o.tls_ca_cert_file.empty()) {
    return Status::InvalidArgument(
        "fabric TLS: fabric-tls-ca-cert-file is required to verify peers' certificates");
  }
  ERR_clear_error();
  std::shared_ptr<TlsConfig> cfg(new TlsConfig());
  cfg->verify_peer_ = o.tls_verify_peer;
  cfg->client_ = SSL_CTX_new(TLS_client_method());
  cfg->server_ = SSL_CTX_new(TLS_server_method());
  if (cfg->client_ == nullptr || cfg->server_ == nullptr) {
    return Status::Internal("SSL_CTX_new: " + OpenSslErrors());
  }
  ASYMNVM_RETURN_IF_ERROR(Configure(cfg->client_, o, false).WithContext("fabric TLS"));
  ASYMNVM_RETURN_IF_ERROR(Configure(cfg->server_, o, true).WithContext("fabric TLS"));
  return std::shared_ptr<const TlsConfig>(std::move(cfg));
}

TlsConfig::~TlsConfig() {
  SSL_CTX_free(client_);
  SSL_CTX_free(server_);
}

namespace {
Result<SSL*> NewSsl(SSL_CTX* ctx, int fd) {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) return Status::ResourceExhausted("SSL_new: " + OpenSslErrors());
  BIO* rbio = BIO_new(BIO_s_mem());
  BIO* wbio = BIO_new(BIO_s_mem());
  if (rbio == nullptr || wbio == nullptr) {
    BIO_free(rbio);
    BIO_free(wbio);
    SSL_free(ssl);
    return Status::ResourceExhausted("BIO_new: " + OpenSslErrors());
  }
  BIO_set_mem_eof_return(rbio, -1);  // empty: "retry" (WANT_READ), not EOF
  SSL_set_bio(ssl, rbio, wbio);
  int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  return ssl;
}
}  // namespace

Result<std::unique_ptr<TlsStream>> TlsStream::Connect(const TlsConfig& config, int fd) {
  ASYMNVM_ASSIGN_OR_RETURN(SSL * ssl, NewSsl(config.client_, fd));
  SSL_set_connect_state(ssl);
  return std::unique_ptr<TlsStream>(new TlsStream(fd, ssl, false));
}

Result<std::unique_ptr<TlsStream>> TlsStream::Accept(const TlsConfig& config, int fd) {
  ASYMNVM_ASSIGN_OR_RETURN(SSL * ssl, NewSsl(config.server_, fd));
  SSL_set_accept_state(ssl);
  return std::unique_ptr<TlsStream>(new TlsStream(fd, ssl, true));
}

TlsStream::~TlsStream() { SSL_free(ssl_); }  // frees both BIOs; the fd is the owner's

void TlsStream::Collect() {
  BIO* w = SSL_get_wbio(ssl_);
  size_t pending = BIO_ctrl_pending(w);
  if (pending == 0) return;
  if (out_start_ == out_.size()) {
    out_.clear();
    out_start_ = 0;
  } else if (out_start_ > (1u << 20) && out_start_ > out_.size() / 2) {
    out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(out_start_));
    out_start_ = 0;
  }
  size_t old = out_.size();
  out_.resize(old + pending);
  int k = BIO_read(w, out_.data() + old, static_cast<int>(std::min<size_t>(pending, INT_MAX)));
  out_.resize(old + static_cast<size_t>(std::max(k, 0)));
}

TlsStream::Io TlsStream::Flush() {
  while (out_start_ < out_.size()) {
    ssize_t r = ::send(fd_, out_.data() + out_start_, out_.size() - out_start_,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      out_start_ += static_cast<size_t>(r);
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return Io::kAgain;
    } else {
      fatal_ = true;
      error_ = std::string("TLS: write: ") + std::strerror(r < 0 ? errno : EPIPE);
      return Io::kError;
    }
  }
  out_.clear();
  out_start_ = 0;
  return Io::kOk;
}

TlsStream::Io TlsStream::Fill() {
  if (eof_) return Io::kEof;
  if (in_.empty()) in_.resize(kRecvChunk);
  for (;;) {
    ssize_t k = ::recv(fd_, in_.data(), in_.size(), MSG_DONTWAIT);
    if (k > 0) {
      if (server_ && received_ == 0 && in_[0] != 0x16) {
        // Not a TLS handshake record: a plain fabric peer ("ANVM" hello) or something else.
        fatal_ = true;
        const bool plain_peer = k >= 4 && std::memcmp(in_.data(), "ANVM", 4) == 0;
        error_ = std::string("the peer does not speak TLS (") +
                 (plain_peer ? "a fabric peer with TLS off" : "its first bytes are no TLS hello") +
                 "); this listener requires fabric TLS: " + kMismatchHint;
        return Io::kError;
      }
      received_ += static_cast<size_t>(k);
      BIO_write(SSL_get_rbio(ssl_), in_.data(), static_cast<int>(k));
      return Io::kOk;
    }
    if (k == 0) {
      eof_ = true;
      return Io::kEof;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::kAgain;
    if (errno == ECONNRESET) {  // the peer closed with our bytes unread: as good as an EOF
      eof_ = true;
      return Io::kEof;
    }
    fatal_ = true;
    error_ = std::string("TLS: read: ") + std::strerror(errno);
    return Io::kError;
  }
}

TlsStream::Io TlsStream::Fail(int ssl_error, const char* op) {
  if (ssl_error == SSL_ERROR_ZERO_RETURN) return Io::kEof;  // close_notify
  fatal_ = true;
  std::vector<unsigned long> codes;
  std::string why = OpenSslErrors(&codes);
  if (!server_ || handshake_done_) {
    long v = SSL_get_verify_result(ssl_);
    if (v != X509_V_OK) {
      why += std::string(" (the peer's certificate: ") + X509_verify_cert_error_string(v) +
             "; it must chain to fabric-tls-ca-cert-file)";
    }
  }
  // The peer's alert, as OpenSSL's reason code for it: it refused the certificate we sent.
  const bool our_certificate_refused = std::any_of(codes.begin(), codes.end(), [](unsigned long e) {
    if (ERR_GET_LIB(e) != ERR_LIB_SSL) return false;
    const int reason = ERR_GET_REASON(e);
    return reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA || reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
           reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED;
  });
  if (our_certificate_refused) {
    why +=
        " (the peer does not accept our certificate: is it signed by the CA the peer's "
        "fabric-tls-ca-cert-file holds?)";
  }
  error_ = std::string(op) + " failed: " + why;
  Collect();  // the alert OpenSSL made for the peer: it says why better than a closed socket
  (void)Flush();
  return Io::kError;
}

TlsStream::Io TlsStream::Handshake() {
  if (handshake_done_) return Io::kOk;
  for (;;) {
    ERR_clear_error();
    int r = SSL_do_handshake(ssl_);
    Collect();
    if (r == 1) {
      handshake_done_ = true;
      return Flush() == Io::kError ? Io::kError : Io::kOk;
    }
    int e = SSL_get_error(ssl_, r);
    if (e != SSL_ERROR_WANT_READ) return Fail(e, "TLS handshake");
    if (Flush() == Io::kError) return Io::kError;
    Io f = Fill();
    if (f == Io::kOk) continue;
    if (f == Io::kEof) {
      error_ = std::string("TLS handshake failed: the peer closed the connection (") +
               (server_ ? "it may not accept our certificate; "
                        : "a listener with TLS off or "
                          "one refusing our certificate "
                          "closes; ") +
               kMismatchHint + ")";
    }
    return f;
  }
}

TlsStream::Io TlsStream::Read(uint8_t* out, size_t cap, size_t* n) {
  if (!handshake_done_) {
    Io h = Handshake();
    if (h != Io::kOk) return h;
  }
  for (;;) {
    ERR_clear_error();
    int r = SSL_read(ssl_, out, static_cast<int>(std::min<size_t>(cap, INT_MAX)));
    Collect();  // anything the read made OpenSSL send (a key update, an alert)
    if (r > 0) {
      if (wants_write()) (void)Flush();  // an error shows at the next write
      *n = static_cast<size_t>(r);
      return Io::kOk;
    }
    int e = SSL_get_error(ssl_, r);
    if (e != SSL_ERROR_WANT_READ) return Fail(e, "TLS read");
    Io f = Fill();
    if (f == Io::kOk) continue;
    if (f == Io::kAgain && wants_write() && Flush() == Io::kError) return Io::kError;
    return f;  // kAgain only after recv() said EAGAIN; kEof: FIN (with or without close_notify)
  }
}

TlsStream::Io TlsStream::Write(const uint8_t* data, size_t len) {
  if (fatal_) return Io::kError;
  size_t done = 0;
  while (done < len) {
    ERR_clear_error();
    int r = SSL_write(ssl_, data + done, static_cast<int>(std::min<size_t>(len - done, 1u << 30)));
    if (r <= 0) {
      Collect();
      return Fail(SSL_get_error(ssl_, r), "TLS write");
    }
    done += static_cast<size_t>(r);
  }
  Collect();
  return Flush() == Io::kError ? Io::kError : Io::kOk;
}

void TlsStream::CloseNotify() {
  if (!handshake_done_ || fatal_) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);
  ERR_clear_error();
  Collect();
}

std::vector<uint8_t> TlsStream::ChannelBinding() const {
  if (!handshake_done_) return {};
  std::vector<uint8_t> out(32);
  if (SSL_export_keying_material(ssl_, out.data(), out.size(), kExporterLabel,
                                 sizeof kExporterLabel - 1, nullptr, 0, 0) != 1) {
    return {};
  }
  return out;
}

}  // namespace asymnvm::fabric
