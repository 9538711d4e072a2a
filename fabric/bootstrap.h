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
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "asymnvm/status.h"

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
Status HandshakeClient(int fd, const std::string& secret, std::span<const uint8_t> my_blob,
                       std::vector<uint8_t>* peer_blob, std::chrono::milliseconds timeout);
Status HandshakeServer(int fd, const std::string& secret, std::span<const uint8_t> my_blob,
                       std::vector<uint8_t>* peer_blob, std::chrono::milliseconds timeout);

// Reads/writes exactly len bytes before the deadline. kTimedOut / kConnectionError.
Status ReadFull(int fd, void* buf, size_t len, std::chrono::steady_clock::time_point deadline);
Status WriteFull(int fd, const void* buf, size_t len,
                 std::chrono::steady_clock::time_point deadline);

}  // namespace asymnvm::fabric
