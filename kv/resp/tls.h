// The RESP gateway's connection transport (doc/resp.md §TLS): the one place where bytes come off
// and go onto a client connection, plain TCP or TLS (OpenSSL), so that the server's command
// handling, pipelining, blocking pops and output buffering do not know which one a connection
// uses.
//
// TLS is non-blocking and driven by the server's epoll loop: the handshake runs inside the first
// reads (a client that never finishes it is only a connection waiting for input), and a read or
// write that must wait for the socket reports kAgain together with which readiness it waits for
// (ReadWantsWrite / WriteWantsRead), so the loop re-arms epoll instead of blocking or spinning.
// Plaintext that OpenSSL already decrypted but the caller has not taken (HasBufferedInput) is not
// visible to epoll: the loop must come back for it.
//
// Thread safety: a TlsContext is immutable after Create and shared by every loop thread; a
// Transport belongs to its connection's loop thread.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "asymnvm/status.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace asymnvm::kv::resp {

// Redis's tls-auth-clients: yes = a client certificate signed by the CA is required; no = none is
// asked for; optional = verified if the client presents one.
enum class TlsAuthClients { kYes, kNo, kOptional };

// "yes" | "no" | "optional" (Redis's spelling).
Result<TlsAuthClients> ParseTlsAuthClients(std::string_view text);

struct TlsOptions {
  std::string cert_file;     // PEM certificate (chain) the server presents
  std::string key_file;      // PEM private key of that certificate
  std::string ca_cert_file;  // PEM CA bundle that client certificates must chain to
  TlsAuthClients auth_clients = TlsAuthClients::kYes;
};

class Transport;

class TlsContext {
 public:
  // Loads and checks the certificate, key (it must match the certificate) and CA file. Errors:
  // InvalidArgument naming the file and OpenSSL's reason; a CA file is required unless
  // auth_clients is kNo (as Redis).
  static Result<std::shared_ptr<TlsContext>> Create(const TlsOptions& options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // A server-side TLS transport on the accepted, non-blocking socket `fd` (not owned).
  Result<std::unique_ptr<Transport>> NewServerTransport(int fd) const;

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
};

class Transport {
 public:
  enum class Io { kOk, kAgain, kEof, kError };
  struct IoResult {
    Io io;
    size_t n = 0;  // bytes moved (kOk only)
  };

  // Plain TCP on `fd` (not owned: the server closes it).
  static std::unique_ptr<Transport> Plain(int fd);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Up to `len` bytes of the peer's data (kOk, n > 0); kAgain: nothing now (wait for the readiness
  // ReadWantsWrite says); kEof: the peer closed (TCP FIN or TLS close_notify); kError: the
  // connection is broken (error() says why: a failed handshake, a reset, a protocol error).
  IoResult Read(char* buf, size_t len);
  // Writes up to `len` bytes (len > 0); kOk with n <= len, kAgain (WriteWantsRead says which
  // readiness), kError. A TLS write that returned kAgain must be retried with the same bytes at
  // the front (the buffer may move and grow).
  IoResult Write(const char* buf, size_t len);

  bool tls() const { return ssl_ != nullptr; }
  bool ReadWantsWrite() const { return read_wants_write_; }
  bool WriteWantsRead() const { return write_wants_read_; }
  // Decrypted input held by OpenSSL that epoll cannot see.
  bool HasBufferedInput() const;
  // The last kError's cause (for the log line).
  const std::string& error() const { return error_; }
  // TLS: sends close_notify if it can without waiting (best effort; the socket closes next).
  void Shutdown();

 private:
  friend class TlsContext;
  Transport(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  // Maps an SSL_read/SSL_write/SSL_do_handshake failure onto Io; sets the want flags / error_.
  Io TlsFailure(int ret, const char* op, bool reading);

  int fd_;
  SSL* ssl_;  // null: plain TCP
  bool handshake_done_ = false;
  bool read_wants_write_ = false;
  bool write_wants_read_ = false;
  bool fatal_ = false;  // after SSL_ERROR_SSL / SSL_ERROR_SYSCALL no close_notify may be sent
  std::string error_;
};

}  // namespace asymnvm::kv::resp
