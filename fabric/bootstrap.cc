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

#include <cerrno>
#include <cstring>

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

Status WriteBlob(int fd, std::span<const uint8_t> blob, Clock::time_point deadline) {
  uint8_t len[4];
  PutLe32(len, static_cast<uint32_t>(blob.size()));
  ASYMNVM_RETURN_IF_ERROR(WriteFull(fd, len, 4, deadline));
  if (!blob.empty()) ASYMNVM_RETURN_IF_ERROR(WriteFull(fd, blob.data(), blob.size(), deadline));
  return Status::Ok();
}

Status ReadBlob(int fd, std::vector<uint8_t>* out, Clock::time_point deadline) {
  uint8_t len[4];
  ASYMNVM_RETURN_IF_ERROR(ReadFull(fd, len, 4, deadline));
  uint32_t n = GetLe32(len);
  if (n > kMaxBlob) return Status::ProtocolError("handshake: blob of " + std::to_string(n) +
                                                 " bytes exceeds the limit");
  std::vector<uint8_t> blob(n);
  if (n > 0) ASYMNVM_RETURN_IF_ERROR(ReadFull(fd, blob.data(), n, deadline));
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

}  // namespace

Result<Endpoint> ParseAddress(const std::string& address) {
  Endpoint ep;
  auto sep = address.find("://");
  if (sep == std::string::npos) {
    return Status::InvalidArgument("address '" + address + "': unknown scheme (want tcp://, "
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
    case Endpoint::Kind::kUnix: return "unix://" + ep.path;
    case Endpoint::Kind::kInproc: return "inproc://" + ep.path;
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
    if (::listen(fd, 128) != 0) {
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
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
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
Status HandshakeClient(int fd, const std::string& secret, std::span<const uint8_t> my_blob,
                       std::vector<uint8_t>* peer_blob, std::chrono::milliseconds timeout) {
  if (my_blob.size() > kMaxBlob) return Status::InvalidArgument("handshake: blob too large");
  auto deadline = Clock::now() + timeout;
  uint8_t nonce_c[kNonceLen];
  if (RAND_bytes(nonce_c, kNonceLen) != 1) return Status::Internal("handshake: RAND_bytes failed");
  uint8_t hello[kHelloLen];
  EncodeHello(hello, nonce_c);
  ASYMNVM_RETURN_IF_ERROR(WriteFull(fd, hello, sizeof hello, deadline));

  uint8_t reply[kHelloLen + kMacLen];
  ASYMNVM_RETURN_IF_ERROR(ReadFull(fd, reply, sizeof reply, deadline));
  ASYMNVM_RETURN_IF_ERROR(CheckHello(reply));
  const uint8_t* nonce_s = reply + 8;
  uint8_t expect[kMacLen];
  ComputeMac(secret, 'S', nonce_c, nonce_s, {}, expect);
  if (CRYPTO_memcmp(expect, reply + kHelloLen, kMacLen) != 0) {
    return Status::PermissionDenied("handshake: the server does not know the cluster secret");
  }
  uint8_t mac_c[kMacLen];
  ComputeMac(secret, 'C', nonce_c, nonce_s, my_blob, mac_c);
  ASYMNVM_RETURN_IF_ERROR(WriteFull(fd, mac_c, kMacLen, deadline));
  ASYMNVM_RETURN_IF_ERROR(WriteBlob(fd, my_blob, deadline));

  uint8_t verdict = kRefused;
  ASYMNVM_RETURN_IF_ERROR(ReadFull(fd, &verdict, 1, deadline));
  if (verdict != kAccepted) {
    return Status::PermissionDenied("handshake: the server refused our credentials");
  }
  return ReadBlob(fd, peer_blob, deadline);
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
  ASYMNVM_RETURN_IF_ERROR(ReadBlob(fd, &blob, deadline));
  uint8_t expect[kMacLen];
  ComputeMac(secret, 'C', nonce_c, nonce_s, blob, expect);
  if (CRYPTO_memcmp(expect, mac_c, kMacLen) != 0) {
    uint8_t v = kRefused;
    (void)WriteFull(fd, &v, 1, deadline);
    return Status::PermissionDenied("handshake: the client does not know the cluster secret");
  }
  uint8_t v = kAccepted;
  ASYMNVM_RETURN_IF_ERROR(WriteFull(fd, &v, 1, deadline));
  ASYMNVM_RETURN_IF_ERROR(WriteBlob(fd, my_blob, deadline));
  if (peer_blob) *peer_blob = std::move(blob);
  return Status::Ok();
}

}  // namespace asymnvm::fabric
