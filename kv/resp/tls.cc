#include "kv/resp/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "common/tls_files.h"

namespace asymnvm::kv::resp {

Result<TlsAuthClients> ParseTlsAuthClients(std::string_view text) {
  if (text == "yes") return TlsAuthClients::kYes;
  if (text == "no") return TlsAuthClients::kNo;
  if (text == "optional") return TlsAuthClients::kOptional;
  return Status::InvalidArgument("tls-auth-clients must be yes, no or optional, not '" +
                                 std::string(text) + "'");
}

Result<std::shared_ptr<TlsContext>> TlsContext::Create(const TlsOptions& o) {
  ERR_clear_error();
  const bool verify = o.auth_clients != TlsAuthClients::kNo;
  if (verify && o.ca_cert_file.empty()) {
    return Status::InvalidArgument(
        "tls-ca-cert-file is required to verify client certificates (or tls-auth-clients no)");
  }

  SSL_CTX* raw = SSL_CTX_new(TLS_server_method());
  if (raw == nullptr) return Status::Internal("SSL_CTX_new: " + OpenSslErrors());
  std::shared_ptr<TlsContext> ctx(new TlsContext(raw));
  SSL_CTX* c = ctx->ctx_;
  // TLS 1.2 and 1.3 (Redis's default tls-protocols); no renegotiation (a write never waits for a
  // read), no compression.
  SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
  uint64_t opts = SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_CIPHER_SERVER_PREFERENCE;
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  // A client that closes the socket without close_notify (redis-cli, most clients) is an EOF,
  // as on a plain connection: what it sent is still answered.
  opts |= SSL_OP_IGNORE_UNEXPECTED_EOF;
#endif
  SSL_CTX_set_options(c, opts);
  // The output buffer grows (and moves) between retries of a write that had to wait; a write
  // returns after each record so that the loop interleaves connections.
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                          SSL_MODE_RELEASE_BUFFERS);
  static const unsigned char kSessionContext[] = "asymnvm-kv-resp";
  SSL_CTX_set_session_id_context(c, kSessionContext, sizeof kSessionContext - 1);

  ASYMNVM_RETURN_IF_ERROR(LoadTlsFiles(c, TlsFileNames{}, o.cert_file, o.key_file, o.ca_cert_file));
  if (!o.ca_cert_file.empty()) {
    // The CA names the server asks client certificates of (CertificateRequest).
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(o.ca_cert_file.c_str());
    if (names == nullptr) {
      return Status::InvalidArgument("tls-ca-cert-file '" + o.ca_cert_file +
                                     "': holds no CA certificate: " + OpenSslErrors());
    }
    SSL_CTX_set_client_CA_list(c, names);
  }
  switch (o.auth_clients) {
    case TlsAuthClients::kYes:
      SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
      break;
    case TlsAuthClients::kOptional:
      SSL_CTX_set_verify(c, SSL_VERIFY_PEER, nullptr);
      break;
    case TlsAuthClients::kNo:
      SSL_CTX_set_verify(c, SSL_VERIFY_NONE, nullptr);
      break;
  }
  return ctx;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

Result<std::unique_ptr<Transport>> TlsContext::NewServerTransport(int fd) const {
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr) return Status::ResourceExhausted("SSL_new: " + OpenSslErrors());
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return Status::Internal("SSL_set_fd: " + OpenSslErrors());
  }
  SSL_set_accept_state(ssl);
  return std::unique_ptr<Transport>(new Transport(fd, ssl));
}

std::unique_ptr<Transport> Transport::Plain(int fd) {
  return std::unique_ptr<Transport>(new Transport(fd, nullptr));
}

Transport::~Transport() {
  if (ssl_ != nullptr) SSL_free(ssl_);  // does not write: Shutdown is explicit
}

Transport::IoResult Transport::Read(char* buf, size_t len) {
  if (ssl_ == nullptr) {
    for (;;) {
      ssize_t r = ::recv(fd_, buf, len, 0);
      if (r > 0) return {Io::kOk, static_cast<size_t>(r)};
      if (r == 0) return {Io::kEof};
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {Io::kAgain};
      error_ = std::strerror(errno);
      return {Io::kError};
    }
  }
  ERR_clear_error();
  errno = 0;  // SSL_ERROR_SYSCALL with errno 0: the peer closed
  read_wants_write_ = false;
  if (!handshake_done_) {
    int r = SSL_do_handshake(ssl_);
    if (r != 1) return {TlsFailure(r, "TLS handshake", /*reading=*/true)};
    handshake_done_ = true;
  }
  int r = SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(len, INT_MAX)));
  if (r > 0) return {Io::kOk, static_cast<size_t>(r)};
  return {TlsFailure(r, "TLS read", /*reading=*/true)};
}

Transport::IoResult Transport::Write(const char* buf, size_t len) {
  if (ssl_ == nullptr) {
    for (;;) {
      ssize_t w = ::send(fd_, buf, len, MSG_NOSIGNAL);
      if (w >= 0) return {Io::kOk, static_cast<size_t>(w)};
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return {Io::kAgain};
      error_ = std::strerror(errno);
      return {Io::kError};
    }
  }
  ERR_clear_error();
  errno = 0;
  write_wants_read_ = false;
  int w = SSL_write(ssl_, buf, static_cast<int>(std::min<size_t>(len, INT_MAX)));
  if (w > 0) return {Io::kOk, static_cast<size_t>(w)};
  return {TlsFailure(w, "TLS write", /*reading=*/false)};
}

Transport::Io Transport::TlsFailure(int ret, const char* op, bool reading) {
  const int saved_errno = errno;
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
      if (!reading) write_wants_read_ = true;
      return Io::kAgain;
    case SSL_ERROR_WANT_WRITE:
      if (reading) read_wants_write_ = true;
      return Io::kAgain;
    case SSL_ERROR_ZERO_RETURN:
      return Io::kEof;  // close_notify (or, see SSL_OP_IGNORE_UNEXPECTED_EOF, a bare FIN)
    case SSL_ERROR_SYSCALL:
      fatal_ = true;
      if (ERR_peek_error() == 0 && saved_errno == 0) return Io::kEof;  // FIN (older OpenSSL)
      error_ = std::string(op) + " failed: " +
               (ERR_peek_error() != 0 ? OpenSslErrors() : std::string(std::strerror(saved_errno)));
      return Io::kError;
    default:  // SSL_ERROR_SSL: a protocol error, a refused certificate, not TLS at all
      fatal_ = true;
      error_ = std::string(op) + " failed: " + OpenSslErrors();
      return Io::kError;
  }
}

bool Transport::HasBufferedInput() const { return ssl_ != nullptr && SSL_pending(ssl_) > 0; }

void Transport::Shutdown() {
  if (ssl_ == nullptr || !handshake_done_ || fatal_) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);  // one non-blocking attempt; the socket closes next either way
  ERR_clear_error();
}

}  // namespace asymnvm::kv::resp
