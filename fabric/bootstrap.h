// Endpoint addresses and the authenticated bootstrap channel shared by both providers.
//
// Address forms: "tcp://HOST:PORT" (HOST an IPv4/IPv6 literal or name; port 0 = any),
// "unix:///abs/path" (stream socket), "inproc://NAME" (same process; soft provider only).
//
// Handshake (doc/fabric.md §Handshake): over a connected stream socket, both sides prove knowledge
// of the cluster secret by mutual challenge–response (HMAC-SHA256 over both 16-byte nonces and the
// role), then each sends one length-prefixed blob (≤ kMaxBlob bytes; the provider's connection
// parameters: soft — private data; verbs — QP number, GID, PSN, private data). A wrong secret, bad
// magic/version, oversized or truncated message or timeout fails the handshake; the socket is then
// closed by the caller. Thread safety: functions are reentrant.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "asymnvm/status.h"
#include "common/thread_annotations.h"
#include "fabric/tls.h"

namespace asymnvm::fabric {

struct Endpoint {
  enum class Kind : uint8_t { kTcp, kUnix, kInproc };
  Kind kind = Kind::kTcp;
  std::string host;   // tcp
  uint16_t port = 0;  // tcp
  std::string path;   // unix: socket path; inproc: name
};

// Errors: kInvalidArgument with the reason ("unknown scheme", "missing port", ...).
Result<Endpoint> ParseAddress(const std::string& address);
std::string FormatAddress(const Endpoint& ep);
// Whether listening on `address` again listens at that same address: not for tcp port 0 (the OS
// picks a port each time); unix and inproc addresses are fixed. An unparsable address: false.
bool IsFixedAddress(const std::string& address);

inline constexpr size_t kMaxBlob = 64 * 1024;

// Socket helpers (tcp and unix). Returned fds are blocking, CLOEXEC, TCP_NODELAY for tcp.
// ListenSocket fills `bound` with the resolved address (port chosen by the OS). A unix path that
// exists as a stale socket is replaced.
Result<int> ListenSocket(const Endpoint& ep, Endpoint* bound);
Result<int> ConnectSocket(const Endpoint& ep, std::chrono::milliseconds timeout);
// kTimedOut when nobody connects within `timeout`.
Result<int> AcceptSocket(int listen_fd, std::chrono::milliseconds timeout);

// Errors: kPermissionDenied (secret mismatch), kProtocolError (bad magic/version/length),
// kTimedOut, kConnectionError (peer closed / I/O error).
// `tls` non-null (a fresh TlsStream::Connect on fd): the TLS handshake runs first, then this one
// inside it with the secret bound to the session (doc/fabric.md §TLS); TLS failures are
// kProtocolError / kConnectionError with TlsStream's words. The stream carries the connection on.
Status HandshakeClient(int fd, const std::string& secret, std::span<const uint8_t> my_blob,
                       std::vector<uint8_t>* peer_blob, std::chrono::milliseconds timeout,
                       TlsStream* tls = nullptr);
Status HandshakeServer(int fd, const std::string& secret, std::span<const uint8_t> my_blob,
                       std::vector<uint8_t>* peer_blob, std::chrono::milliseconds timeout);

// ---------------------------------------------------------------------------------------------
// Server side that no hostile or slow peer can stall (doc/fabric.md §Handshake: the acceptor).
//
// HandshakeAcceptor owns the pending handshakes of one listening socket. Accept() runs one poll()
// loop over the listening socket and every pending handshake: it accepts every connection the
// kernel has queued, advances each pending handshake's state machine (non-blocking reads and
// writes, nothing ever waits on one peer) and returns the first peer that completed. A pending
// handshake survives across Accept() calls; its deadline is its own (accepted at + deadline), not
// the caller's Accept timeout. Beyond `max_pending` the oldest pending handshake is closed.
// Refused, timed-out and evicted peers are logged at most `log_lines_per_second` times a second;
// the next logged line counts the ones suppressed in between.

struct HandshakeLimits {
  std::chrono::milliseconds deadline{5000};  // per peer, from accept to the last byte we send
  size_t max_pending = 256;                  // handshakes in progress at once
  uint32_t log_lines_per_second = 5;         // refusal lines (0: none)
};

struct HandshakeAcceptorStats {
  uint64_t accepted = 0;         // handshakes completed and returned by Accept
  uint64_t refused = 0;          // protocol errors, wrong secret, peer closed mid-handshake
  uint64_t secret_mismatch = 0;  // of those: the peer does not share our cluster secret
  uint64_t timed_out = 0;        // deadline passed
  uint64_t evicted = 0;          // closed because max_pending handshakes were in progress
  uint64_t log_lines = 0;        // refusal lines written
  uint64_t log_suppressed = 0;   // refusal lines not written (rate limit)
  size_t pending = 0;            // in progress now
  size_t max_pending_seen = 0;   // high-water mark of `pending`
  std::string last_refusal;      // why the last peer was refused / timed out / evicted
};

class HandshakeAcceptor {
 public:
  struct Peer {
    int fd = -1;                     // blocking, CLOEXEC, TCP_NODELAY for tcp; the caller owns it
    std::vector<uint8_t> blob;       // the peer's blob
    std::string address;             // the peer's address, for logs
    std::unique_ptr<TlsStream> tls;  // the session the connection goes on in (TLS listeners)
  };
  // `listen_fd` stays owned by the caller (it must outlive this object); it is made non-blocking.
  // `name` prefixes log lines (e.g. the listener's address). `tls` non-null: every peer runs
  // the TLS handshake first (within the same deadline), then the handshake inside it.
  HandshakeAcceptor(int listen_fd, std::string secret, std::string name, HandshakeLimits limits,
                    std::shared_ptr<const TlsConfig> tls = nullptr);
  ~HandshakeAcceptor();  // closes every pending handshake
  HandshakeAcceptor(const HandshakeAcceptor&) = delete;
  HandshakeAcceptor& operator=(const HandshakeAcceptor&) = delete;

  // Serves handshakes until one completes (with `my_blob` as our blob) or `timeout` passes
  // (kTimedOut). Concurrent callers are serialized (each within its own timeout). Errors other
  // than kTimedOut: kIoError when the listening socket fails.
  Result<Peer> Accept(std::span<const uint8_t> my_blob, std::chrono::milliseconds timeout);
  HandshakeAcceptorStats stats() const;

 private:
  struct Pending;
  enum class Step : uint8_t { kWait, kDone, kFailed };
  void AcceptNew(std::chrono::steady_clock::time_point now);
  Step Advance(Pending& p, std::span<const uint8_t> my_blob);
  void Drop(std::unique_ptr<Pending> p, const std::string& why, bool count_refused);
  void Refusal(const std::string& line);

  int listen_fd_;
  std::string secret_;
  std::string name_;
  HandshakeLimits limits_;
  std::shared_ptr<const TlsConfig> tls_;
  // One Accept() at a time (a flag + condvar rather than std::timed_mutex, whose
  // pthread_mutex_clocklock ThreadSanitizer does not intercept).
  Mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool busy_ ASYMNVM_GUARDED_BY(gate_mu_) = false;
  mutable Mutex stats_mu_;
  HandshakeAcceptorStats stats_ ASYMNVM_GUARDED_BY(stats_mu_);
  // The rest is owned by the one Accept() running (busy_), not by a mutex.
  std::deque<std::unique_ptr<Pending>> pending_;  // oldest first
  std::deque<std::unique_ptr<Pending>> ready_;    // completed, not yet returned
  std::chrono::steady_clock::time_point listen_backoff_until_{};
  // Rate limiter for refusal lines.
  std::chrono::steady_clock::time_point log_window_{};
  uint32_t log_in_window_ = 0;
  uint64_t log_suppressed_since_ = 0;
};

// Reads/writes exactly len bytes before the deadline. kTimedOut / kConnectionError.
Status ReadFull(int fd, void* buf, size_t len, std::chrono::steady_clock::time_point deadline);
Status WriteFull(int fd, const void* buf, size_t len,
                 std::chrono::steady_clock::time_point deadline);

}  // namespace asymnvm::fabric
