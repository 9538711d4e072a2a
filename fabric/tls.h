// TLS for the fabric's stream connections between hosts (doc/fabric.md §TLS).
//
// TlsConfig holds the two OpenSSL contexts (connecting and accepting side) built from
// FabricOptions' tls_* fields; TlsStream is one connection's TLS session over a non-blocking
// socket. The session talks to the socket through memory BIOs: OpenSSL never touches the fd, so an
// operation never waits for the socket in a direction the caller does not expect. Read pulls
// ciphertext with recv() only while OpenSSL needs more and returns kAgain only after recv() said
// EAGAIN (an edge-triggered epoll loop never loses an edge); everything OpenSSL produces (records,
// alerts, handshake messages) is queued here and written by Flush (kAgain: the socket is full,
// wait for it to become writable). Handshake, the HMAC handshake (fabric/bootstrap.h) and the
// soft NIC's channel (fabric/soft/tls_channel.h) all use the same session in turn.
//
// Thread safety: TlsConfig is immutable and shared; a TlsStream is used by one thread at a time
// (the channel serializes its callers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "asymnvm/status.h"

typedef struct ssl_st SSL;
typedef struct ssl_ctx_st SSL_CTX;

namespace asymnvm::fabric {

struct FabricOptions;

class TlsConfig {
 public:
  // null (and OK) when `o` turns TLS off (no tls_cert_file). When `o` names none of the three
  // files, ASYMNVM_FABRIC_TLS_CERT_FILE / _KEY_FILE / _CA_CERT_FILE in the environment do (peers
  // verified when the CA is set). Errors: InvalidArgument naming the option (fabric-tls-*), the
  // file and OpenSSL's reason.
  static Result<std::shared_ptr<const TlsConfig>> FromOptions(const FabricOptions& o);
  ~TlsConfig();
  TlsConfig(const TlsConfig&) = delete;
  TlsConfig& operator=(const TlsConfig&) = delete;
  bool verify_peer() const { return verify_peer_; }

 private:
  friend class TlsStream;
  TlsConfig() = default;
  SSL_CTX* client_ = nullptr;
  SSL_CTX* server_ = nullptr;
  bool verify_peer_ = false;
};

class TlsStream {
 public:
  enum class Io { kOk, kAgain, kEof, kError };
  // A session on the connected socket `fd` (not owned; non-blocking from now on).
  static Result<std::unique_ptr<TlsStream>> Connect(const TlsConfig& config, int fd);
  static Result<std::unique_ptr<TlsStream>> Accept(const TlsConfig& config, int fd);
  ~TlsStream();
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;

  // Advances the TLS handshake: kOk once done; kAgain: wait for readability (and writability
  // while wants_write()); kEof / kError: failed (error() says why, in words an operator can act
  // on: a plain peer, an unknown CA, a refused certificate).
  Io Handshake();
  bool handshake_done() const { return handshake_done_; }
  // Up to `cap` bytes of the peer's data into `out` (kOk, *n > 0). kAgain: none until the socket
  // is readable again; kEof: the peer closed (close_notify or FIN); kError.
  Io Read(uint8_t* out, size_t cap, size_t* n);
  // Encrypts all `len` bytes (after the handshake) and writes what the socket takes now; the rest
  // stays queued (wants_write). kOk or kError.
  Io Write(const uint8_t* data, size_t len);
  // Writes queued ciphertext: kOk when none is left, kAgain when the socket is full, kError.
  Io Flush();
  bool wants_write() const { return out_start_ < out_.size(); }
  // Queues close_notify (best effort; Flush writes it).
  void CloseNotify();
  // 32 bytes both ends of this session (and no other) derive (RFC 5705 exporter): binds the
  // cluster-secret handshake to the session. Empty before the handshake is done.
  std::vector<uint8_t> ChannelBinding() const;
  const std::string& error() const { return error_; }
  int fd() const { return fd_; }

 private:
  TlsStream(int fd, SSL* ssl, bool server) : fd_(fd), ssl_(ssl), server_(server) {}
  Io Fail(int ret, const char* op);  // maps an SSL_* failure; sets error_
  void Collect();                    // moves OpenSSL's output into out_
  Io Fill();                         // one recv() into OpenSSL's input

  int fd_;
  SSL* ssl_;
  bool server_;
  bool handshake_done_ = false;
  bool eof_ = false;            // the socket said EOF
  bool fatal_ = false;          // no close_notify after a failure
  size_t received_ = 0;         // ciphertext bytes received (0: the first byte is still to come)
  bool first_not_tls_ = false;  // the peer's first byte is not a TLS handshake record
  std::vector<uint8_t> out_;    // ciphertext to write
  size_t out_start_ = 0;
  std::vector<uint8_t> in_;  // recv() buffer
  std::string error_;
};

}  // namespace asymnvm::fabric
