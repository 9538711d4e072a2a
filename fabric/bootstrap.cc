// Endpoint parsing, stream-socket helpers and the authenticated handshake (doc/fabric.md
// §Handshake).
#include "fabric/bootstrap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "asymnvm/fabric.h"
#include "common/logging.h"

namespace asymnvm::fabric {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x4D564E41;  // "ANVM" little-endian
constexpr uint16_t kHandshakeVersion = 1;
constexpr size_t kNonceLen = 16;
constexpr size_t kMacLen = 32;
constexpr uint8_t kAccepted = 0;
constexpr uint8_t kRefused = 1;

void PutLe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void PutLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t GetLe16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t GetLe32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

Status Errno(const std::string& what, int e) {
  return Status::IoError(what + ": " + std::strerror(e), e);
}

int RemainingMs(Clock::time_point deadline) {
  auto now = Clock::now();
  if (now >= deadline) return 0;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
  return static_cast<int>(ms < 1 ? 1 : (ms > 1 << 30 ? 1 << 30 : ms));
}

// Waits for `events` on fd until the deadline. kTimedOut / kConnectionError.
Status PollFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    int ms = RemainingMs(deadline);
    if (ms == 0) return Status::TimedOut("bootstrap: timed out");
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status(StatusCode::kConnectionError, "bootstrap: poll failed", errno);
    }
    if (r == 0) continue;  // loop re-checks the deadline
    if (p.revents & (events | POLLHUP | POLLERR)) return Status::Ok();
  }
}

// role: 'S' for the server's proof, 'C' for the client's.
void ComputeMac(const std::string& secret, uint8_t role, const uint8_t* nonce_c,
                const uint8_t* nonce_s, std::span<const uint8_t> blob, uint8_t* out) {
  std::vector<uint8_t> msg(1 + 2 * kNonceLen + blob.size());
  msg[0] = role;
  std::memcpy(msg.data() + 1, nonce_c, kNonceLen);
  std::memcpy(msg.data() + 1 + kNonceLen, nonce_s, kNonceLen);
  if (!blob.empty()) std::memcpy(msg.data() + 1 + 2 * kNonceLen, blob.data(), blob.size());
  unsigned int len = kMacLen;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(), msg.size(), out,
       &len);
}

// Under TLS the handshake proves the secret for this TLS session only: its MAC key is
// HMAC(secret, the session's exporter value), which a man in the middle holding two sessions
// cannot make agree on both sides (doc/fabric.md §TLS).
std::string BoundSecret(const std::string& secret, const std::vector<uint8_t>& binding) {
  static const char kLabel[] = "asymnvm fabric handshake over TLS";
  std::vector<uint8_t> msg(kLabel, kLabel + sizeof kLabel - 1);
  msg.insert(msg.end(), binding.begin(), binding.end());
  uint8_t out[kMacLen];
  unsigned int len = kMacLen;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), msg.data(), msg.size(), out,
       &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

Status TlsStatus(const TlsStream& tls, TlsStream::Io io) {
  if (io == TlsStream::Io::kEof) {
    return Status::ConnectionError(tls.error().empty() ? "bootstrap: peer closed the connection"
                                                       : tls.error());
  }
  return Status::ProtocolError(tls.error());
}

// Waits until `tls` can make progress (its queued output written, input readable).
Status TlsWait(TlsStream* tls, int fd, Clock::time_point deadline) {
  ASYMNVM_RETURN_IF_ERROR(
      PollFor(fd, static_cast<short>(POLLIN | (tls->wants_write() ? POLLOUT : 0)), deadline));
  TlsStream::Io f = tls->Flush();
  if (f == TlsStream::Io::kError) return TlsStatus(*tls, f);
  return Status::Ok();
}

Status TlsHandshake(TlsStream* tls, int fd, Clock::time_point deadline) {
  for (;;) {
    TlsStream::Io io = tls->Handshake();
    if (io == TlsStream::Io::kOk) break;
    if (io != TlsStream::Io::kAgain) return TlsStatus(*tls, io);
    ASYMNVM_RETURN_IF_ERROR(TlsWait(tls, fd, deadline).WithContext("TLS handshake"));
  }
  while (tls->wants_write()) ASYMNVM_RETURN_IF_ERROR(TlsWait(tls, fd, deadline));
  return Status::Ok();
}

// ReadFull / WriteFull through `tls` when it is set.
Status StreamRead(int fd, TlsStream* tls, void* buf, size_t len, Clock::time_point deadline) {
  if (tls == nullptr) return ReadFull(fd, buf, len, deadline);
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < len) {
    size_t n = 0;
    TlsStream::Io io = tls->Read(p + done, len - done, &n);
    if (io == TlsStream::Io::kOk) {
      done += n;
    } else if (io == TlsStream::Io::kAgain) {
      ASYMNVM_RETURN_IF_ERROR(TlsWait(tls, fd, deadline));
    } else {
      return TlsStatus(*tls, io);
    }
  }
  return Status::Ok();
}

Status StreamWrite(int fd, TlsStream* tls, const void* buf, size_t len,
                   Clock::time_point deadline) {
  if (tls == nullptr) return WriteFull(fd, buf, len, deadline);
  TlsStream::Io io = tls->Write(static_cast<const uint8_t*>(buf), len);
  if (io != TlsStream::Io::kOk) return TlsStatus(*tls, io);
  while (tls->wants_write()) {
    ASYMNVM_RETURN_IF_ERROR(PollFor(fd, POLLOUT, deadline));
    io = tls->Flush();
    if (io == TlsStream::Io::kError) return TlsStatus(*tls, io);
  }
  return Status::Ok();
}

Status WriteBlob(int fd, TlsStream* tls, std::span<const uint8_t> blob,
                 Clock::time_point deadline) {
  uint8_t len[4];
  PutLe32(len, static_cast<uint32_t>(blob.size()));
  ASYMNVM_RETURN_IF_ERROR(StreamWrite(fd, tls, len, 4, deadline));
  if (!blob.empty()) {
    ASYMNVM_RETURN_IF_ERROR(StreamWrite(fd, tls, blob.data(), blob.size(), deadline));
  }
  return Status::Ok();
}

Status ReadBlob(int fd, TlsStream* tls, std::vector<uint8_t>* out, Clock::time_point deadline) {
  uint8_t len[4];
  ASYMNVM_RETURN_IF_ERROR(StreamRead(fd, tls, len, 4, deadline));
  uint32_t n = GetLe32(len);
  if (n > kMaxBlob)
    return Status::ProtocolError("handshake: blob of " + std::to_string(n) +
                                 " bytes exceeds the limit");
  std::vector<uint8_t> blob(n);
  if (n > 0) ASYMNVM_RETURN_IF_ERROR(StreamRead(fd, tls, blob.data(), n, deadline));
  if (out) *out = std::move(blob);
  return Status::Ok();
}

void EncodeHello(uint8_t* out, const uint8_t* nonce) {
  PutLe32(out, kHelloMagic);
  PutLe16(out + 4, kHandshakeVersion);
  PutLe16(out + 6, 0);
  std::memcpy(out + 8, nonce, kNonceLen);
}

Status CheckHello(const uint8_t* in) {
  if (GetLe32(in) != kHelloMagic) return Status::ProtocolError("handshake: bad magic");
  if (GetLe16(in + 4) != kHandshakeVersion) {
    return Status::ProtocolError("handshake: unsupported version " +
                                 std::to_string(GetLe16(in + 4)));
  }
  if (GetLe16(in + 6) != 0) return Status::ProtocolError("handshake: reserved bits set");
  return Status::Ok();
}

constexpr size_t kHelloLen = 8 + kNonceLen;

constexpr char kLog[] = "bootstrap";

std::string PeerName(int fd) {
  sockaddr_storage ss{};
  socklen_t sl = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &sl) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(s4->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(s6->sin6_port));
  }
  if (ss.ss_family == AF_UNIX) return "unix peer fd " + std::to_string(fd);
  return "?";
}

bool IsLoopbackSockaddr(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    uint32_t a = ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr);
    return (a >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) return s6->sin6_addr.s6_addr[12] == 127;
    return false;
  }
  return false;
}

}  // namespace

bool IsFixedAddress(const std::string& address) {
  auto ep = ParseAddress(address);
  return ep.ok() && (ep->kind != Endpoint::Kind::kTcp || ep->port != 0);
}

Result<Endpoint> ParseAddress(const std::string& address) {
  Endpoint ep;
  auto sep = address.find("://");
  if (sep == std::string::npos) {
    return Status::InvalidArgument("address '" + address +
                                   "': unknown scheme (want tcp://, "
                                   "unix:// or inproc://)");
  }
  std::string scheme = address.substr(0, sep);
  std::string rest = address.substr(sep + 3);
  if (scheme == "tcp") {
    ep.kind = Endpoint::Kind::kTcp;
    auto colon = rest.rfind(':');
    if (colon == std::string::npos) {
      return Status::InvalidArgument("address '" + address + "': missing port");
    }
    std::string host = rest.substr(0, colon);
    std::string port = rest.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    if (host.empty()) return Status::InvalidArgument("address '" + address + "': missing host");
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos) {
      return Status::InvalidArgument("address '" + address + "': bad port");
    }
    unsigned long p = std::stoul(port);
    if (p > 65535) return Status::InvalidArgument("address '" + address + "': port out of range");
    ep.host = host;
    ep.port = static_cast<uint16_t>(p);
  } else if (scheme == "unix") {
    ep.kind = Endpoint::Kind::kUnix;
    if (rest.empty()) return Status::InvalidArgument("address '" + address + "': missing path");
    if (rest.size() >= sizeof(sockaddr_un{}.sun_path)) {
      return Status::InvalidArgument("address '" + address + "': path too long");
    }
    ep.path = rest;
  } else if (scheme == "inproc") {
    ep.kind = Endpoint::Kind::kInproc;
    if (rest.empty()) return Status::InvalidArgument("address '" + address + "': missing name");
    ep.path = rest;
  } else {
    return Status::InvalidArgument("address '" + address + "': unknown scheme '" + scheme + "'");
  }
  return ep;
}

std::string FormatAddress(const Endpoint& ep) {
  switch (ep.kind) {
    case Endpoint::Kind::kTcp:
      if (ep.host.find(':') != std::string::npos) {
        return "tcp://[" + ep.host + "]:" + std::to_string(ep.port);
      }
      return "tcp://" + ep.host + ":" + std::to_string(ep.port);
    case Endpoint::Kind::kUnix:
      return "unix://" + ep.path;
    case Endpoint::Kind::kInproc:
      return "inproc://" + ep.path;
  }
  return "";
}

Result<int> ListenSocket(const Endpoint& ep, Endpoint* bound) {
  if (ep.kind == Endpoint::Kind::kInproc) {
    return Status::InvalidArgument("ListenSocket: inproc has no socket");
  }
  if (ep.kind == Endpoint::Kind::kUnix) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Errno("socket(AF_UNIX)", errno);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, ep.path.data(), ep.path.size());
    struct stat st {};
    if (::lstat(ep.path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(ep.path.c_str());
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      int e = errno;
      ::close(fd);
      return Errno("bind(" + ep.path + ")", e);
    }
    if (::listen(fd, SOMAXCONN) != 0) {
      int e = errno;
      ::close(fd);
      return Errno("listen(" + ep.path + ")", e);
    }
    if (bound) *bound = ep;
    return fd;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port = std::to_string(ep.port);
  int gr = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res);
  if (gr != 0) {
    return Status::InvalidArgument("resolve '" + ep.host + "': " + ::gai_strerror(gr));
  }
  Status last = Status::IoError("listen: no usable address for " + ep.host);
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = Errno("socket", errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      last = Errno("bind/listen " + FormatAddress(ep), errno);
      ::close(fd);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl);
    char host[INET6_ADDRSTRLEN] = {};
    uint16_t p = 0;
    if (ss.ss_family == AF_INET) {
      auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
      ::inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
      p = ntohs(s4->sin_port);
    } else {
      auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
      ::inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
      p = ntohs(s6->sin6_port);
    }
    ::freeaddrinfo(res);
    if (bound) {
      bound->kind = Endpoint::Kind::kTcp;
      bound->host = host;
      bound->port = p;
    }
    return fd;
  }
  ::freeaddrinfo(res);
  return last;
}

Result<int> ConnectSocket(const Endpoint& ep, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  if (ep.kind == Endpoint::Kind::kInproc) {
    return Status::InvalidArgument("ConnectSocket: inproc has no socket");
  }
  auto try_connect = [&](int family, const sockaddr* sa, socklen_t len) -> Result<int> {
    int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Errno("socket", errno);
    int r = ::connect(fd, sa, len);
    if (r != 0 && errno != EINPROGRESS) {
      int e = errno;
      ::close(fd);
      return Status(StatusCode::kConnectionError,
                    "connect " + FormatAddress(ep) + ": " + std::strerror(e), e);
    }
    if (r != 0) {
      Status st = PollFor(fd, POLLOUT, deadline);
      if (!st.ok()) {
        ::close(fd);
        return st.WithContext("connect " + FormatAddress(ep));
      }
      int err = 0;
      socklen_t el = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
      if (err != 0) {
        ::close(fd);
        return Status(StatusCode::kConnectionError,
                      "connect " + FormatAddress(ep) + ": " + std::strerror(err), err);
      }
    }
    int fl = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if (family != AF_UNIX) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
  };
  if (ep.kind == Endpoint::Kind::kUnix) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    if (ep.path.size() >= sizeof sa.sun_path) return Status::InvalidArgument("unix path too long");
    std::memcpy(sa.sun_path, ep.path.data(), ep.path.size());
    return try_connect(AF_UNIX, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port = std::to_string(ep.port);
  int gr = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res);
  if (gr != 0) {
    return Status::InvalidArgument("resolve '" + ep.host + "': " + ::gai_strerror(gr));
  }
  Status last = Status::ConnectionError("connect " + FormatAddress(ep) + ": no address");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    auto r = try_connect(ai->ai_family, ai->ai_addr, ai->ai_addrlen);
    if (r.ok()) {
      ::freeaddrinfo(res);
      return r;
    }
    last = r.status();
  }
  ::freeaddrinfo(res);
  return last;
}

Result<int> AcceptSocket(int listen_fd, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  for (;;) {
    ASYMNVM_RETURN_IF_ERROR(PollFor(listen_fd, POLLIN, deadline));
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      return Errno("accept", errno);
    }
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl) == 0 &&
        (ss.ss_family == AF_INET || ss.ss_family == AF_INET6)) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
  }
}

Status ReadFull(int fd, void* buf, size_t len, Clock::time_point deadline) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < len) {
    ASYMNVM_RETURN_IF_ERROR(PollFor(fd, POLLIN, deadline));
    ssize_t r = ::recv(fd, p + done, len - done, MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
    } else if (r == 0) {
      return Status::ConnectionError("bootstrap: peer closed the connection");
    } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status(StatusCode::kConnectionError,
                    std::string("bootstrap: read: ") + std::strerror(errno), errno);
    }
  }
  return Status::Ok();
}

Status WriteFull(int fd, const void* buf, size_t len, Clock::time_point deadline) {
  const auto* p = static_cast<const uint8_t*>(buf);
  size_t done = 0;
  while (done < len) {
    ASYMNVM_RETURN_IF_ERROR(PollFor(fd, POLLOUT, deadline));
    ssize_t r = ::send(fd, p + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) {
      done += static_cast<size_t>(r);
    } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status(StatusCode::kConnectionError,
                    std::string("bootstrap: write: ") + std::strerror(errno), errno);
    }
  }
  return Status::Ok();
}

// Client: HELLO(nonce_c) → ; ← HELLO(nonce_s) + MAC_S ; verify ; MAC_C + blob → ;
// ← verdict byte + blob.
Status HandshakeClient(int fd, const std::string& plain_secret, std::span<const uint8_t> my_blob,
                       std::vector<uint8_t>* peer_blob, std::chrono::milliseconds timeout,
                       TlsStream* tls) {
  if (my_blob.size() > kMaxBlob) return Status::InvalidArgument("handshake: blob too large");
  auto deadline = Clock::now() + timeout;
  std::string secret = plain_secret;
  if (tls != nullptr) {
    ASYMNVM_RETURN_IF_ERROR(TlsHandshake(tls, fd, deadline));
    secret = BoundSecret(plain_secret, tls->ChannelBinding());
  }
  uint8_t nonce_c[kNonceLen];
  if (RAND_bytes(nonce_c, kNonceLen) != 1) return Status::Internal("handshake: RAND_bytes failed");
  uint8_t hello[kHelloLen];
  EncodeHello(hello, nonce_c);
  ASYMNVM_RETURN_IF_ERROR(StreamWrite(fd, tls, hello, sizeof hello, deadline));

  uint8_t reply[kHelloLen + kMacLen];
  Status got = StreamRead(fd, tls, reply, sizeof reply, deadline);
  if (!got.ok() && got.code() == StatusCode::kConnectionError) {
    return got.WithContext(
        tls == nullptr
            ? "handshake (a listener with fabric TLS on closes peers without it: both sides of a "
              "fabric connection need the same --fabric-tls-* setting)"
            : "handshake: the server closed the connection after the TLS handshake (it refuses "
              "our certificate when fabric-tls-cert-file is not signed by the CA its "
              "fabric-tls-ca-cert-file holds)");
  }
  ASYMNVM_RETURN_IF_ERROR(got);
  if (tls == nullptr && (reply[0] == 0x15 || reply[0] == 0x16) && reply[1] == 0x03) {
    return Status::ProtocolError(
        "handshake: the server speaks TLS and we do not: both sides of a fabric connection need "
        "the same --fabric-tls-* setting");
  }
  ASYMNVM_RETURN_IF_ERROR(CheckHello(reply));
  const uint8_t* nonce_s = reply + 8;
  uint8_t expect[kMacLen];
  ComputeMac(secret, 'S', nonce_c, nonce_s, {}, expect);
  if (CRYPTO_memcmp(expect, reply + kHelloLen, kMacLen) != 0) {
    return Status::PermissionDenied(
        "cluster secret mismatch: the server's proof does not verify with our cluster secret "
        "(check --secret-file / ASYMNVM_SECRET_FILE / ASYMNVM_SECRET on both sides)");
  }
  uint8_t mac_c[kMacLen];
  ComputeMac(secret, 'C', nonce_c, nonce_s, my_blob, mac_c);
  ASYMNVM_RETURN_IF_ERROR(StreamWrite(fd, tls, mac_c, kMacLen, deadline));
  ASYMNVM_RETURN_IF_ERROR(WriteBlob(fd, tls, my_blob, deadline));

  uint8_t verdict = kRefused;
  ASYMNVM_RETURN_IF_ERROR(StreamRead(fd, tls, &verdict, 1, deadline));
  if (verdict != kAccepted) {
    return Status::PermissionDenied(
        "cluster secret mismatch: the server refused our proof of the cluster secret");
  }
  return ReadBlob(fd, tls, peer_blob, deadline);
}

Status HandshakeServer(int fd, const std::string& secret, std::span<const uint8_t> my_blob,
                       std::vector<uint8_t>* peer_blob, std::chrono::milliseconds timeout) {
  if (my_blob.size() > kMaxBlob) return Status::InvalidArgument("handshake: blob too large");
  auto deadline = Clock::now() + timeout;
  uint8_t hello[kHelloLen];
  ASYMNVM_RETURN_IF_ERROR(ReadFull(fd, hello, sizeof hello, deadline));
  ASYMNVM_RETURN_IF_ERROR(CheckHello(hello));
  const uint8_t* nonce_c = hello + 8;
  uint8_t reply[kHelloLen + kMacLen];
  uint8_t nonce_s[kNonceLen];
  if (RAND_bytes(nonce_s, kNonceLen) != 1) return Status::Internal("handshake: RAND_bytes failed");
  EncodeHello(reply, nonce_s);
  ComputeMac(secret, 'S', nonce_c, nonce_s, {}, reply + kHelloLen);
  ASYMNVM_RETURN_IF_ERROR(WriteFull(fd, reply, sizeof reply, deadline));

  uint8_t mac_c[kMacLen];
  ASYMNVM_RETURN_IF_ERROR(ReadFull(fd, mac_c, kMacLen, deadline));
  std::vector<uint8_t> blob;
  ASYMNVM_RETURN_IF_ERROR(ReadBlob(fd, nullptr, &blob, deadline));
  uint8_t expect[kMacLen];
  ComputeMac(secret, 'C', nonce_c, nonce_s, blob, expect);
  if (CRYPTO_memcmp(expect, mac_c, kMacLen) != 0) {
    uint8_t v = kRefused;
    (void)WriteFull(fd, &v, 1, deadline);
    return Status::PermissionDenied(
        "cluster secret mismatch: the client's proof does not verify with our cluster secret");
  }
  uint8_t v = kAccepted;
  ASYMNVM_RETURN_IF_ERROR(WriteFull(fd, &v, 1, deadline));
  ASYMNVM_RETURN_IF_ERROR(WriteBlob(fd, nullptr, my_blob, deadline));
  if (peer_blob) *peer_blob = std::move(blob);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// HandshakeAcceptor

namespace {
enum class HsState : uint8_t {
  kTls,             // the TLS handshake (TLS listeners)
  kReadHello,       // ← HELLO(nonce_c)
  kWriteChallenge,  // → HELLO(nonce_s) + MAC_S
  kReadMac,         // ← MAC_C
  kReadLen,         // ← blob length
  kReadBlob,        // ← blob
  kWriteVerdict,    // → verdict + blob length + our blob
};
const char* HsStateName(HsState s) {
  switch (s) {
    case HsState::kTls:
      return "in the TLS handshake";
    case HsState::kReadHello:
      return "waiting for its hello";
    case HsState::kWriteChallenge:
      return "sending our challenge";
    case HsState::kReadMac:
      return "waiting for its proof";
    case HsState::kReadLen:
    case HsState::kReadBlob:
      return "reading its parameters";
    case HsState::kWriteVerdict:
      return "sending our verdict";
  }
  return "?";
}
}  // namespace

struct HandshakeAcceptor::Pending {
  int fd = -1;
  std::string address;
  Clock::time_point accepted_at, deadline;
  HsState state = HsState::kReadHello;
  std::vector<uint8_t> in;   // bytes of the message being read
  size_t have = 0;           // of in
  std::vector<uint8_t> out;  // bytes being written
  size_t sent = 0;           // of out
  uint8_t nonce_c[kNonceLen] = {};
  uint8_t nonce_s[kNonceLen] = {};
  uint8_t mac_c[kMacLen] = {};
  std::vector<uint8_t> peer_blob;
  std::vector<uint8_t> my_blob;  // what we sent (kWriteVerdict and later)
  Status error;                  // why it failed (Step::kFailed)
  bool secret_mismatch = false;
  std::unique_ptr<TlsStream> tls;  // TLS listeners
  std::string tls_secret;          // the secret bound to the TLS session (TLS listeners)

  ~Pending() {
    if (fd >= 0) ::close(fd);
  }
  void Expect(HsState s, size_t n) {
    state = s;
    in.assign(n, 0);
    have = 0;
  }
  void Send(HsState s, std::vector<uint8_t> bytes) {
    state = s;
    out = std::move(bytes);
    sent = 0;
  }
  bool reading() const {
    return state != HsState::kWriteChallenge && state != HsState::kWriteVerdict;
  }
  short events() const {
    if (tls != nullptr && tls->wants_write()) return POLLOUT;
    return reading() ? POLLIN : POLLOUT;
  }
};

HandshakeAcceptor::HandshakeAcceptor(int listen_fd, std::string secret, std::string name,
                                     HandshakeLimits limits, std::shared_ptr<const TlsConfig> tls)
    : listen_fd_(listen_fd),
      secret_(std::move(secret)),
      name_(std::move(name)),
      limits_(limits),
      tls_(std::move(tls)) {
  if (limits_.max_pending == 0) limits_.max_pending = 1;
  if (limits_.deadline.count() <= 0) limits_.deadline = std::chrono::milliseconds(1);
  int fl = ::fcntl(listen_fd_, F_GETFL);
  if (fl >= 0) ::fcntl(listen_fd_, F_SETFL, fl | O_NONBLOCK);
}

HandshakeAcceptor::~HandshakeAcceptor() = default;

HandshakeAcceptorStats HandshakeAcceptor::stats() const {
  MutexLock lock(stats_mu_);
  return stats_;
}

// Called by the Accept() that holds the gate (busy_). At most log_lines_per_second lines per
// one-second window; the first line of a later window says how many were suppressed.
void HandshakeAcceptor::Refusal(const std::string& line) {
  auto now = Clock::now();
  if (now - log_window_ >= std::chrono::seconds(1)) {
    log_window_ = now;
    log_in_window_ = 0;
  }
  MutexLock lock(stats_mu_);
  stats_.last_refusal = line;
  if (log_in_window_ >= limits_.log_lines_per_second) {
    stats_.log_suppressed++;
    log_suppressed_since_++;
    return;
  }
  log_in_window_++;
  stats_.log_lines++;
  if (log_suppressed_since_ > 0) {
    LOG_WARN(kLog, name_ << ": " << line << " (" << log_suppressed_since_
                         << " similar lines suppressed; at most " << limits_.log_lines_per_second
                         << " a second)");
    log_suppressed_since_ = 0;
  } else {
    LOG_WARN(kLog, name_ << ": " << line);
  }
}

void HandshakeAcceptor::Drop(std::unique_ptr<Pending> p, const std::string& why,
                             bool count_refused) {
  {
    MutexLock lock(stats_mu_);
    if (count_refused) stats_.refused++;
    if (p->secret_mismatch) stats_.secret_mismatch++;
  }
  Refusal("refused peer " + p->address + ": " + why);
  p.reset();  // closes
}

void HandshakeAcceptor::AcceptNew(Clock::time_point now) {
  // Bounded batch so one Accept() round also gets to the pending handshakes.
  for (int i = 0; i < 256; i++) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      int e = errno;
      if (e == EINTR || e == ECONNABORTED) continue;
      if (e == EAGAIN || e == EWOULDBLOCK) return;
      if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
        // Out of descriptors: make room by closing the oldest pending handshake, or, with none
        // pending, stop polling the listening socket for a moment (it would stay readable).
        if (!pending_.empty()) {
          auto p = std::move(pending_.front());
          pending_.pop_front();
          {
            MutexLock lock(stats_mu_);
            stats_.evicted++;
          }
          Refusal("accept: " + std::string(std::strerror(e)) + ": closed the oldest pending " +
                  "handshake (peer " + p->address + ")");
          continue;
        }
        Refusal("accept: " + std::string(std::strerror(e)) + ": pausing accepts for 100 ms");
        listen_backoff_until_ = now + std::chrono::milliseconds(100);
        return;
      }
      Refusal("accept: " + std::string(std::strerror(e)));
      listen_backoff_until_ = now + std::chrono::milliseconds(100);
      return;
    }
    auto p = std::make_unique<Pending>();
    p->fd = fd;
    p->address = PeerName(fd);
    p->accepted_at = now;
    p->deadline = now + limits_.deadline;
    p->Expect(HsState::kReadHello, kHelloLen);
    if (tls_ != nullptr) {
      auto t = TlsStream::Accept(*tls_, fd);
      if (!t.ok()) {
        Drop(std::move(p), t.status().ToString(), true);
        continue;
      }
      p->tls = std::move(t).value();
      p->state = HsState::kTls;
    }
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl) == 0 &&
        (ss.ss_family == AF_INET || ss.ss_family == AF_INET6)) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    if (pending_.size() >= limits_.max_pending) {
      auto old = std::move(pending_.front());
      pending_.pop_front();
      {
        MutexLock lock(stats_mu_);
        stats_.evicted++;
      }
      auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - old->accepted_at);
      Refusal("closed peer " + old->address + " (" + HsStateName(old->state) + " for " +
              std::to_string(age.count()) + " ms): " + std::to_string(limits_.max_pending) +
              " handshakes pending, the oldest makes room");
    }
    pending_.push_back(std::move(p));
    MutexLock lock(stats_mu_);
    stats_.pending = pending_.size();
    stats_.max_pending_seen = std::max(stats_.max_pending_seen, pending_.size());
  }
}

HandshakeAcceptor::Step HandshakeAcceptor::Advance(Pending& p, std::span<const uint8_t> my_blob) {
  const std::string& secret = p.tls != nullptr ? p.tls_secret : secret_;
  for (;;) {
    if (p.tls != nullptr) {
      // Queued TLS output first; then the TLS handshake; then the messages inside TLS.
      TlsStream::Io io = p.tls->Flush();
      if (io == TlsStream::Io::kError) {
        p.error = Status::ConnectionError(p.tls->error());
        return Step::kFailed;
      }
      if (p.tls->wants_write()) return Step::kWait;
      if (p.state == HsState::kTls) {
        io = p.tls->Handshake();
        if (io == TlsStream::Io::kAgain) {
          if (p.tls->wants_write()) continue;
          return Step::kWait;
        }
        if (io != TlsStream::Io::kOk) {
          p.error = io == TlsStream::Io::kEof ? Status::ConnectionError(p.tls->error())
                                              : Status::ProtocolError(p.tls->error());
          return Step::kFailed;
        }
        p.tls_secret = BoundSecret(secret_, p.tls->ChannelBinding());
        p.Expect(HsState::kReadHello, kHelloLen);
        continue;
      }
      if (!p.reading() && p.sent < p.out.size()) {
        io = p.tls->Write(p.out.data() + p.sent, p.out.size() - p.sent);
        if (io != TlsStream::Io::kOk) {
          p.error = Status::ConnectionError(std::string("write while ") + HsStateName(p.state) +
                                            ": " + p.tls->error());
          return Step::kFailed;
        }
        p.sent = p.out.size();
        continue;  // flush
      }
    }
    if (!p.reading()) {
      while (p.sent < p.out.size()) {
        ssize_t r =
            ::send(p.fd, p.out.data() + p.sent, p.out.size() - p.sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r > 0) {
          p.sent += static_cast<size_t>(r);
          continue;
        }
        if (r < 0 && (errno == EINTR)) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Step::kWait;
        p.error =
            Status(StatusCode::kConnectionError,
                   std::string("write while ") + HsStateName(p.state) + ": " + std::strerror(errno),
                   errno);
        return Step::kFailed;
      }
      if (p.state == HsState::kWriteVerdict) return Step::kDone;
      p.Expect(HsState::kReadMac, kMacLen);  // after the challenge
      continue;
    }
    while (p.have < p.in.size()) {
      ssize_t r;
      if (p.tls != nullptr) {
        size_t n = 0;
        TlsStream::Io io = p.tls->Read(p.in.data() + p.have, p.in.size() - p.have, &n);
        if (io == TlsStream::Io::kError) {
          p.error = Status::ProtocolError(std::string("while ") + HsStateName(p.state) + ": " +
                                          p.tls->error());
          return Step::kFailed;
        }
        if (io == TlsStream::Io::kAgain) return Step::kWait;  // events(): in, or out first
        r = io == TlsStream::Io::kOk ? static_cast<ssize_t>(n) : 0;
      } else {
        r = ::recv(p.fd, p.in.data() + p.have, p.in.size() - p.have, MSG_DONTWAIT);
      }
      if (r > 0) {
        p.have += static_cast<size_t>(r);
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Step::kWait;
      if (r == 0) {
        if (p.state == HsState::kReadMac && p.have == 0) {
          // A client closes right after our challenge when our proof does not verify with its
          // secret (HandshakeClient). The wire cannot say more than that.
          p.secret_mismatch = true;
          p.error = Status::PermissionDenied(
              "cluster secret mismatch: the peer closed the connection after our challenge, "
              "i.e. it rejected our proof of the cluster secret (check --secret-file / "
              "ASYMNVM_SECRET_FILE / ASYMNVM_SECRET on both sides)");
        } else {
          p.error = Status::ConnectionError(std::string("peer closed the connection while ") +
                                            HsStateName(p.state));
        }
        return Step::kFailed;
      }
      p.error = Status(
          StatusCode::kConnectionError,
          std::string("read while ") + HsStateName(p.state) + ": " + std::strerror(errno), errno);
      return Step::kFailed;
    }
    // A whole message is in.
    switch (p.state) {
      case HsState::kReadHello: {
        Status st = CheckHello(p.in.data());
        if (!st.ok() && p.tls == nullptr && p.in[0] == 0x16 && p.in[1] == 0x03) {
          st = Status::ProtocolError(
              "the peer speaks TLS and this listener does not: both sides of a fabric "
              "connection need the same --fabric-tls-* setting");
        }
        if (!st.ok()) {
          p.error = st;
          return Step::kFailed;
        }
        std::memcpy(p.nonce_c, p.in.data() + 8, kNonceLen);
        if (RAND_bytes(p.nonce_s, kNonceLen) != 1) {
          p.error = Status::Internal("handshake: RAND_bytes failed");
          return Step::kFailed;
        }
        std::vector<uint8_t> reply(kHelloLen + kMacLen);
        EncodeHello(reply.data(), p.nonce_s);
        ComputeMac(secret, 'S', p.nonce_c, p.nonce_s, {}, reply.data() + kHelloLen);
        p.Send(HsState::kWriteChallenge, std::move(reply));
        break;
      }
      case HsState::kReadMac:
        std::memcpy(p.mac_c, p.in.data(), kMacLen);
        p.Expect(HsState::kReadLen, 4);
        break;
      case HsState::kReadLen: {
        uint32_t n = GetLe32(p.in.data());
        if (n > kMaxBlob) {
          p.error = Status::ProtocolError("handshake: blob of " + std::to_string(n) +
                                          " bytes exceeds the limit");
          return Step::kFailed;
        }
        p.Expect(HsState::kReadBlob, n);
        break;
      }
      case HsState::kReadBlob: {
        p.peer_blob = std::move(p.in);
        p.in.clear();
        uint8_t expect[kMacLen];
        ComputeMac(secret, 'C', p.nonce_c, p.nonce_s, p.peer_blob, expect);
        if (CRYPTO_memcmp(expect, p.mac_c, kMacLen) != 0) {
          uint8_t v = kRefused;
          if (p.tls != nullptr) {
            (void)p.tls->Write(&v, 1);  // best effort
          } else {
            (void)::send(p.fd, &v, 1, MSG_NOSIGNAL | MSG_DONTWAIT);  // best effort
          }
          p.secret_mismatch = true;
          p.error = Status::PermissionDenied(
              "cluster secret mismatch: the client's proof does not verify with our cluster "
              "secret (check --secret-file / ASYMNVM_SECRET_FILE / ASYMNVM_SECRET on both sides)");
          return Step::kFailed;
        }
        // Appended piecewise: GCC 12 at -O3 took a memcpy into a vector sized 5 + n for one of
        // 2^64 - 4 bytes (-Wstringop-overflow, a Release build with -Werror failed).
        std::vector<uint8_t> v;
        v.reserve(5 + my_blob.size());
        v.push_back(kAccepted);
        uint8_t len[4];
        PutLe32(len, static_cast<uint32_t>(my_blob.size()));
        v.insert(v.end(), len, len + 4);
        v.insert(v.end(), my_blob.begin(), my_blob.end());
        p.my_blob.assign(my_blob.begin(), my_blob.end());
        p.Send(HsState::kWriteVerdict, std::move(v));
        break;
      }
      default:
        p.error = Status::Internal("handshake: bad state");
        return Step::kFailed;
    }
  }
}

Result<HandshakeAcceptor::Peer> HandshakeAcceptor::Accept(std::span<const uint8_t> my_blob,
                                                          std::chrono::milliseconds timeout) {
  if (my_blob.size() > kMaxBlob) return Status::InvalidArgument("handshake: blob too large");
  auto until = Clock::now() + timeout;
  {
    MutexLock gate(gate_mu_);
    if (!gate_cv_.wait_until(gate.native(), until,
                             [&]() ASYMNVM_REQUIRES(gate_mu_) { return !busy_; })) {
      return Status::TimedOut("accept " + name_ + ": no peer in time (another Accept is running)");
    }
    busy_ = true;
  }
  struct Release {
    HandshakeAcceptor* a;
    ~Release() {
      {
        MutexLock gate(a->gate_mu_);
        a->busy_ = false;
      }
      a->gate_cv_.notify_one();
    }
  } release{this};
  std::vector<pollfd> fds;
  std::vector<Pending*> order;
  for (;;) {
    // Completed handshakes first (from an earlier round or call).
    while (!ready_.empty()) {
      auto p = std::move(ready_.front());
      ready_.pop_front();
      if (!std::equal(p->my_blob.begin(), p->my_blob.end(), my_blob.begin(), my_blob.end())) {
        // Completed under another Accept()'s options: what it got from us is stale.
        Drop(std::move(p), "our connection parameters changed between Accept calls", true);
        continue;
      }
      int fl = ::fcntl(p->fd, F_GETFL);
      if (fl >= 0) ::fcntl(p->fd, F_SETFL, fl & ~O_NONBLOCK);
      Peer out;
      out.fd = p->fd;
      p->fd = -1;
      out.blob = std::move(p->peer_blob);
      out.address = p->address;
      out.tls = std::move(p->tls);
      MutexLock sl(stats_mu_);
      stats_.accepted++;
      return out;
    }
    auto now = Clock::now();
    if (log_suppressed_since_ > 0 && limits_.log_lines_per_second > 0 &&
        now - log_window_ >= std::chrono::seconds(1)) {
      LOG_WARN(kLog, name_ << ": " << log_suppressed_since_ << " more refusal lines suppressed "
                           << "(at most " << limits_.log_lines_per_second << " a second)");
      log_suppressed_since_ = 0;
    }
    // Expire.
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (now >= (*it)->deadline) {
        auto p = std::move(*it);
        it = pending_.erase(it);
        {
          MutexLock sl(stats_mu_);
          stats_.timed_out++;
        }
        std::string why = "handshake deadline of " + std::to_string(limits_.deadline.count()) +
                          " ms passed while " + HsStateName(p->state);
        Drop(std::move(p), why, false);
      } else {
        ++it;
      }
    }
    {
      MutexLock sl(stats_mu_);
      stats_.pending = pending_.size();
    }
    if (now >= until) return Status::TimedOut("accept " + name_ + ": no peer in time");
    // Poll the listening socket and every pending handshake.
    fds.clear();
    order.clear();
    bool poll_listen = now >= listen_backoff_until_;
    if (poll_listen) fds.push_back({listen_fd_, POLLIN, 0});
    auto wake = until;
    if (!poll_listen) wake = std::min(wake, listen_backoff_until_);
    for (auto& p : pending_) {
      fds.push_back({p->fd, p->events(), 0});
      order.push_back(p.get());
      wake = std::min(wake, p->deadline);
    }
    int ms = RemainingMs(wake);
    int r = ::poll(fds.data(), fds.size(), ms);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Errno("accept " + name_ + ": poll", errno);
    }
    now = Clock::now();
    size_t base = poll_listen ? 1 : 0;
    // Advance the handshakes that have something to do (before accepting new ones, so the
    // indices in `order` still match).
    std::vector<Pending*> finished, failed;
    for (size_t i = 0; i < order.size(); i++) {
      if (fds[base + i].revents == 0) continue;
      Step s = Advance(*order[i], my_blob);
      if (s == Step::kDone) finished.push_back(order[i]);
      if (s == Step::kFailed) failed.push_back(order[i]);
    }
    if (!finished.empty() || !failed.empty()) {
      for (auto it = pending_.begin(); it != pending_.end();) {
        Pending* raw = it->get();
        bool done = std::find(finished.begin(), finished.end(), raw) != finished.end();
        bool bad = std::find(failed.begin(), failed.end(), raw) != failed.end();
        if (!done && !bad) {
          ++it;
          continue;
        }
        auto p = std::move(*it);
        it = pending_.erase(it);
        if (done) {
          ready_.push_back(std::move(p));
        } else {
          std::string why = p->error.ToString();
          Drop(std::move(p), why, true);
        }
      }
    }
    if (poll_listen && (fds[0].revents & (POLLIN | POLLERR | POLLHUP))) AcceptNew(now);
  }
}

// ---------------------------------------------------------------------------------------------
// The cluster secret

bool IsLoopbackAddress(const std::string& address) {
  auto ep = ParseAddress(address);
  if (!ep.ok()) return false;
  if (ep->kind != Endpoint::Kind::kTcp) return true;  // unix / inproc: this machine only
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port = std::to_string(ep->port);
  if (::getaddrinfo(ep->host.c_str(), port.c_str(), &hints, &res) != 0) return false;
  bool all = res != nullptr;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    if (!IsLoopbackSockaddr(ai->ai_addr)) all = false;
  }
  ::freeaddrinfo(res);
  return all;
}

namespace {
Result<std::string> ReadSecretFile(const std::string& path, const char* origin) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return Status::InvalidArgument(std::string("cluster secret: cannot read ") + origin + " '" +
                                   path + "': " + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  if (s.empty()) {
    return Status::InvalidArgument(std::string("cluster secret: ") + origin + " '" + path +
                                   "' is empty");
  }
  if (s.size() > 4096) {
    return Status::InvalidArgument(std::string("cluster secret: ") + origin + " '" + path +
                                   "' is longer than 4096 bytes");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    LOG_WARN(kLog, "cluster secret file '" << path << "' is readable by group/others (mode "
                                           << std::oct << (st.st_mode & 0777) << std::dec
                                           << "); chmod 600 it");
  }
  return s;
}
}  // namespace

Result<std::string> ResolveClusterSecret(const FabricOptions& o) {
  if (!o.secret_file.empty()) return ReadSecretFile(o.secret_file, "--secret-file");
  if (o.cluster_secret.empty()) return Status::InvalidArgument("cluster secret: empty");
  if (o.cluster_secret != kDefaultClusterSecret) return o.cluster_secret;
  if (const char* f = std::getenv("ASYMNVM_SECRET_FILE"); f != nullptr && *f != '\0') {
    return ReadSecretFile(f, "ASYMNVM_SECRET_FILE");
  }
  if (const char* s = std::getenv("ASYMNVM_SECRET"); s != nullptr && *s != '\0') {
    return std::string(s);
  }
  return std::string(kDefaultClusterSecret);
}

Status CheckListenSecret(const std::string& address, const std::string& secret) {
  if (secret != kDefaultClusterSecret || IsLoopbackAddress(address)) return Status::Ok();
  return Status::FailedPrecondition(
      "refusing to listen on " + address +
      ": it is not a loopback address and the cluster secret is the built-in default, which "
      "anybody can know; give this daemon and every peer a secret with --secret-file PATH (or "
      "ASYMNVM_SECRET_FILE=PATH / ASYMNVM_SECRET=... in the environment)");
}

}  // namespace asymnvm::fabric
